//! Every filesystem case of `attacks.yaml`, named after its id, plus more spellings of
//! each class. Each fixture checks on drop that `$OUT` is byte-identical.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use common::*;
use toolgate_core::Reason;
use toolgate_fs::*;

fn read(fx: &Fixture, p: &str) -> Result<ReadOutcome> {
    let r = fx.ws.read(&ReadRequest::whole(wp(p)));
    if let Ok(o) = &r {
        assert_no_leak_bytes(&o.content);
    }
    r
}

fn write(fx: &Fixture, p: &str, content: &str) -> Result<WriteOutcome> {
    fx.ws.write(&WriteRequest {
        path: wp(p),
        content: content.as_bytes().to_vec(),
        expected_sha256: None,
        create_new: false,
        create_parents: false,
    })
}

fn list(fx: &Fixture, p: &str, recursive: bool) -> Result<ListOutcome> {
    let r = fx.ws.list(&ListRequest {
        path: wp(p),
        recursive,
        max_depth: None,
        max_entries: None,
        include_hidden: true,
    });
    if let Ok(o) = &r {
        assert_no_leak(&format!("{o:?}"));
    }
    r
}

fn search(fx: &Fixture, pattern: &str) -> SearchOutcome {
    let mut req = SearchRequest::new(wp("."), pattern);
    req.include_hidden = true;
    let o = fx.ws.search(&req).unwrap();
    assert_no_leak(&format!("{o:?}"));
    o
}

#[test]
fn fs_pfx_01_sibling_with_root_as_string_prefix() {
    let fx = Fixture::new();
    let sibling = format!("{}_secrets", fx.ws_str());
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(format!("{sibling}/s"), SENTINEL).unwrap();
    assert_reason(
        read(&fx, &format!("{sibling}/s")),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(list(&fx, &sibling, false), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_pfx_03_relative_spelling_of_the_sibling() {
    let fx = Fixture::new();
    let sibling = format!("{}2", fx.ws_str());
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(format!("{sibling}/x"), SENTINEL).unwrap();
    let p = format!("{}/../ws2/x", fx.ws_str());
    assert_reason(read(&fx, &p), Reason::PathOutsideWorkspace);
    assert_reason(read(&fx, "../ws2/x"), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_trv_01_dotdot_chain() {
    let fx = Fixture::new();
    assert_reason(
        read(&fx, "../../../../etc/passwd"),
        Reason::PathOutsideWorkspace,
    );
}

#[test]
fn fs_trv_02_absolute_with_dotdot_through_a_subdirectory() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.root.join("src")).unwrap();
    let p = format!("{}/src/../../etc/passwd", fx.ws_str());
    assert_reason(read(&fx, &p), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_trv_03_list_parent_of_root() {
    let fx = Fixture::new();
    assert_reason(
        list(&fx, &format!("{}/..", fx.ws_str()), false),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(list(&fx, "..", true), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_trv_06_dotdot_that_stays_inside_is_allowed() {
    let fx = Fixture::new();
    fx.write("dir/inner/blue.txt", "ok\n");
    let o = read(&fx, "dir/inner/../inner/blue.txt").unwrap();
    assert_eq!(o.content, b"ok\n");
    assert_eq!(o.path, "dir/inner/blue.txt");
}

#[test]
fn traversal_spellings_all_stay_inside() {
    let fx = Fixture::new();
    fx.write("a/ok.txt", "ok");
    for p in [
        "..",
        "./../x",
        "a/../../x",
        "a/../../out/secret",
        "./a/./../../out/secret",
        "//etc/passwd",
        "/etc/passwd",
        "/",
        "/..",
        "a/../../../../../../../../../../etc/passwd",
    ] {
        assert_reason(read(&fx, p), Reason::PathOutsideWorkspace);
    }
    // `..` that climbs and comes back is still an escape attempt for the kernel.
    assert_reason(read(&fx, "../ws/a/ok.txt"), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_uni_01_unicode_and_combining_names_never_resolve_outside() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.root.join("café")).unwrap();
    assert_reason(read(&fx, "café/x"), Reason::NotFound);
    // The decomposed spelling is a different name on Linux: not found, not outside.
    assert_reason(read(&fx, "cafe\u{301}/x"), Reason::NotFound);
    fx.write("café/x", "ok");
    assert_eq!(read(&fx, "café/x").unwrap().content, b"ok");
    // Fullwidth and one-dot-leader lookalikes of `..` are ordinary names.
    assert_reason(read(&fx, "\u{ff0e}\u{ff0e}/out/secret"), Reason::NotFound);
    assert_reason(read(&fx, "\u{2024}\u{2024}/out/secret"), Reason::NotFound);
}

#[test]
fn fs_sym_01_read_through_symlink_to_outside() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("secret"), "link");
    assert_reason(read(&fx, "link"), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_sym_02_write_through_symlink_to_outside() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("secret"), "link");
    assert_reason(write(&fx, "link", "pwn"), Reason::PathOutsideWorkspace);
    assert!(fx.root.join("link").is_symlink());
}

#[test]
fn fs_sym_03_edit_through_symlink_to_outside() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("secret"), "link");
    let r = fx.ws.edit(&EditRequest {
        path: wp("link"),
        old: "OUTSIDE".into(),
        new: "X".into(),
        expected_occurrences: None,
        replace_all: false,
        expected_sha256: None,
    });
    assert_reason(r, Reason::PathOutsideWorkspace);
}

#[test]
fn fs_sym_05_create_under_a_directory_symlink_to_outside() {
    let fx = Fixture::new();
    fx.symlink(&fx.out, "d");
    assert_reason(write(&fx, "d/newfile", "x"), Reason::PathOutsideWorkspace);
    let mk = fx.ws.mkdir(&MkdirRequest {
        path: wp("d/newdir"),
        parents: true,
    });
    assert_reason(mk, Reason::PathOutsideWorkspace);
    let deep = fx.ws.write(&WriteRequest {
        path: wp("d/a/b/c"),
        content: b"x".to_vec(),
        expected_sha256: None,
        create_new: false,
        create_parents: true,
    });
    assert_reason(deep, Reason::PathOutsideWorkspace);
}

#[test]
fn fs_sym_07_symlink_chain_ending_outside() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("t"), "l1b");
    fx.symlink(fx.root.join("l1b"), "l2");
    fx.symlink(fx.root.join("l2"), "seemingly-safe");
    assert_reason(read(&fx, "seemingly-safe"), Reason::PathOutsideWorkspace);
    // The same chain with relative links.
    fx.symlink("l1b", "r2");
    fx.symlink("r2", "r3");
    assert_reason(read(&fx, "r3"), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_sym_08_relative_symlink_inside_is_allowed() {
    let fx = Fixture::new();
    fx.write("etc/passwd", "ok\n");
    fx.symlink("etc/passwd", "relsym");
    let o = read(&fx, "relsym").unwrap();
    assert_eq!(o.content, b"ok\n");
    // Results name what was read, canonically.
    assert_eq!(o.path, "etc/passwd");
}

/// The kernel's openat2 selftest tree, rebuilt under `$WS` (without the mount point).
fn openat2_fixture(fx: &Fixture) {
    fx.write("etc/passwd", "ok\n");
    std::fs::create_dir(fx.root.join("root")).unwrap();
    std::fs::create_dir(fx.root.join("cheeky")).unwrap();
    for (target, link) in [
        ("/proc/self/exe", "procexe"),
        ("/proc/self/root", "procroot"),
        ("/newfile3", "creatlink"),
        ("etc/", "reletc"),
        ("etc/passwd", "relsym"),
        ("/etc/", "absetc"),
        ("/etc/passwd", "abssym"),
        ("/cheeky", "abscheeky"),
        ("/", "cheeky/absself"),
        ("../../root/", "cheeky/self"),
        ("/../../root/", "cheeky/garbageself"),
        ("../cheeky/../cheeky/../etc/../etc/passwd", "cheeky/passwd"),
        (
            "/../cheeky/../cheeky/../etc/../etc/passwd",
            "cheeky/abspasswd",
        ),
        (
            "../../../../../../../../../../../../../../etc/passwd",
            "cheeky/dotdotlink",
        ),
        (
            "/../../../../../../../../../../../../../../etc/passwd",
            "cheeky/garbagelink",
        ),
    ] {
        fx.symlink(target, link);
    }
}

#[test]
fn fs_sym_10_openat2_fixture_tree() {
    let fx = Fixture::new();
    openat2_fixture(&fx);
    for p in [
        "cheeky/passwd",
        "relsym",
        "etc/passwd",
        "reletc/passwd",
        "root/../etc/passwd",
    ] {
        let o = read(&fx, p).unwrap();
        assert_eq!(
            (o.content.as_slice(), o.path.as_str()),
            (&b"ok\n"[..], "etc/passwd"),
            "{p}"
        );
    }
    for p in [
        "procexe",
        "procroot/etc/passwd",
        "absetc/passwd",
        "abssym",
        "abscheeky/passwd",
        "cheeky/absself/etc/passwd",
        "cheeky/self/etc/passwd",
        "cheeky/garbageself/etc/passwd",
        "cheeky/abspasswd",
        "cheeky/dotdotlink",
        "cheeky/garbagelink",
    ] {
        assert_reason(read(&fx, p), Reason::PathOutsideWorkspace);
    }
    // Creating through an absolute dangling link is an escape, not a new file.
    assert_reason(write(&fx, "creatlink", "x"), Reason::PathOutsideWorkspace);
    assert!(!std::path::Path::new("/newfile3").exists());
}

#[test]
fn fs_sym_13_intermediate_symlink_to_outside_directory() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("ssh"), "link");
    assert_reason(read(&fx, "./link/id_ed25519"), Reason::PathOutsideWorkspace);
    assert_reason(read(&fx, "link/id_ed25519"), Reason::PathOutsideWorkspace);
    assert_reason(list(&fx, "link", false), Reason::PathOutsideWorkspace);
    assert_reason(
        write(&fx, "link/id_ed25519", "pwn"),
        Reason::PathOutsideWorkspace,
    );
}

#[test]
fn fs_sym_12_recursive_list_does_not_follow_a_parent_symlink() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.root.join("a")).unwrap();
    fx.symlink("..", "a/up");
    fx.symlink(&fx.out, "outlink");
    let o = list(&fx, ".", true).unwrap();
    let up = o.entries.iter().find(|e| e.path == "a/up").unwrap();
    assert_eq!(up.kind, EntryKind::Symlink);
    assert_eq!(up.symlink_target.as_deref(), Some(".."));
    assert!(o.entries.iter().all(|e| !e.path.starts_with("a/up/")));
    assert!(o.entries.iter().all(|e| !e.path.starts_with("outlink/")));
    assert!(o.truncated.is_none());
    // Listing the link itself follows it only while it stays inside.
    assert_eq!(list(&fx, "a/up", false).unwrap().path, ".");
    assert_reason(list(&fx, "outlink", false), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_hl_01_write_to_hard_link_replaces_the_entry_not_the_outside_inode() {
    let fx = Fixture::setup(
        |root, out| std::fs::hard_link(out.join("secret"), root.join("hl")).unwrap(),
        |_| {},
    );
    let outside_ino = std::fs::metadata(fx.out.join("secret")).unwrap().ino();
    write(&fx, "hl", "pwn").unwrap();
    assert_eq!(std::fs::read_to_string(fx.root.join("hl")).unwrap(), "pwn");
    assert_ne!(
        std::fs::metadata(fx.root.join("hl")).unwrap().ino(),
        outside_ino
    );
    assert_eq!(
        std::fs::read_to_string(fx.out.join("secret")).unwrap(),
        format!("{SENTINEL}\n")
    );
    // Reading through the link would return the outside inode's content; a workspace
    // configured to refuse multiply-linked files refuses it, and edits with it.
    let fx2 = Fixture::setup(
        |root, out| std::fs::hard_link(out.join("secret"), root.join("hl")).unwrap(),
        |c| c.refuse_hard_links = true,
    );
    assert_reason(read(&fx2, "hl"), Reason::PathDenied);
    let edit = fx2.ws.edit(&EditRequest {
        path: wp("hl"),
        old: "OUTSIDE".into(),
        new: "X".into(),
        expected_occurrences: None,
        replace_all: false,
        expected_sha256: None,
    });
    assert_reason(edit, Reason::PathDenied);
    assert!(search(&fx2, "SENTINEL").files.is_empty());
    let st = fx2
        .ws
        .stat(&StatRequest {
            path: wp("hl"),
            sha256: true,
        })
        .unwrap();
    assert_eq!((st.nlink, st.sha256), (2, None));
    // Writing still works, and replaces only the workspace's name for the inode.
    write(&fx2, "hl", "pwn").unwrap();
}

#[test]
fn fs_deny_sym_01_symlink_to_a_denied_file() {
    let fx = Fixture::setup(
        |root, _| {
            std::fs::write(root.join(".env"), "K=1\n").unwrap();
            std::os::unix::fs::symlink(".env", root.join("notenv")).unwrap();
        },
        |c| c.deny = vec!["**/.env".into()],
    );
    assert_reason(read(&fx, "notenv"), Reason::PathDenied);
    assert_reason(read(&fx, ".env"), Reason::PathDenied);
    assert_reason(read(&fx, "./x/../.env"), Reason::PathDenied);
    assert_reason(write(&fx, "notenv", "K=2"), Reason::PathDenied);
    let names: Vec<_> = list(&fx, ".", false)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(names, vec!["notenv"], "the denied file is never listed");
}

#[test]
fn fs_deny_sym_02_hard_link_to_a_denied_file() {
    // Globs match names, and a hard link is a second name for the same inode: by default
    // reading `hardenv` is allowed (a documented residual). Writes never modify the
    // `.env` inode, because they replace the `hardenv` entry by rename.
    let fx = Fixture::setup(
        |root, _| {
            std::fs::write(root.join(".env"), "K=1\n").unwrap();
            std::fs::hard_link(root.join(".env"), root.join("hardenv")).unwrap();
        },
        |c| c.deny = vec!["**/.env".into()],
    );
    assert_eq!(read(&fx, "hardenv").unwrap().content, b"K=1\n");
    write(&fx, "hardenv", "K=2\n").unwrap();
    assert_eq!(std::fs::read(fx.root.join(".env")).unwrap(), b"K=1\n");
    // Matching by inode instead: refuse every multiply-linked file.
    let fx = Fixture::setup(
        |root, _| {
            std::fs::write(root.join(".env"), "K=1\n").unwrap();
            std::fs::hard_link(root.join(".env"), root.join("hardenv")).unwrap();
        },
        |c| {
            c.deny = vec!["**/.env".into()];
            c.refuse_hard_links = true;
        },
    );
    let e = assert_reason(read(&fx, "hardenv"), Reason::PathDenied);
    assert!(e.to_string().contains("2 hard links"), "{e}");
    assert!(search(&fx, "K=").files.is_empty());
}

#[test]
fn fs_special_01_fifo_read_fails_fast() {
    let fx = Fixture::new();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        fx.root.join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let t = Instant::now();
    let e = assert_reason(read(&fx, "pipe"), Reason::NotAFile);
    assert!(e.to_string().contains("fifo"), "{e}");
    assert_reason(write(&fx, "pipe", "x"), Reason::NotAFile);
    let mut req = SearchRequest::new(wp("pipe"), "x");
    req.timeout = Some(Duration::from_secs(5));
    assert_reason(fx.ws.search(&req), Reason::NotAFile);
    // A search of the directory skips the FIFO instead of blocking on it.
    fx.write("f.txt", "x\n");
    assert_eq!(search(&fx, "x").match_count, 1);
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t.elapsed()
    );
}

#[test]
fn fs_special_02_symlink_to_a_device() {
    let fx = Fixture::new();
    fx.symlink("/dev/zero", "z");
    assert_reason(read(&fx, "z"), Reason::PathOutsideWorkspace);
}

#[test]
fn fs_special_03_sparse_10_gib_file_reads_truncated_with_bounded_memory() {
    let fx = Fixture::new();
    let f = std::fs::File::create(fx.root.join("big")).unwrap();
    f.set_len(10 << 30).unwrap();
    let t = Instant::now();
    let o = fx
        .ws
        .read(&ReadRequest {
            path: wp("big"),
            range: ReadRange::Whole,
            max_bytes: Some(1 << 20),
        })
        .unwrap();
    assert!(o.truncated);
    assert_eq!(o.total_size, 10 << 30);
    assert_eq!(o.content.len(), 1 << 20);
    assert!(o.file_sha256.is_none(), "too large to hash");
    // A line range far into the file is also bounded by the cap, not the file size.
    let lines = fx
        .ws
        .read(&ReadRequest {
            path: wp("big"),
            range: ReadRange::Lines {
                start: 1,
                count: Some(1),
            },
            max_bytes: Some(4096),
        })
        .unwrap();
    assert!(lines.truncated && lines.content.len() == 4096);
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn fs_prot_02_git_config() {
    let fx = Fixture::new();
    fx.write(".git/config", "[core]\n");
    let e = write(&fx, ".git/config", "[core]\n\tfsmonitor = touch /tmp/pwn");
    assert_reason(e, Reason::PathProtected);
    assert_eq!(
        std::fs::read_to_string(fx.root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    // Readable, though.
    assert_eq!(read(&fx, ".git/config").unwrap().content, b"[core]\n");
    assert_reason(write(&fx, ".git", "x"), Reason::PathProtected);
}

#[test]
fn fs_prot_03_nested_repository_hook() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.root.join("vendor/sub/.git/hooks")).unwrap();
    assert_reason(
        write(&fx, "vendor/sub/.git/hooks/pre-commit", "x"),
        Reason::PathProtected,
    );
    // Through a symlinked spelling too.
    fx.symlink("vendor/sub/.git", "g");
    assert_reason(write(&fx, "g/hooks/pre-commit", "x"), Reason::PathProtected);
    assert!(!fx.root.join("vendor/sub/.git/hooks/pre-commit").exists());
}

#[test]
fn fs_prot_06_agent_settings_even_when_the_directory_is_missing() {
    let fx = Fixture::new();
    let r = fx.ws.write(&WriteRequest {
        path: wp(".claude/settings.json"),
        content: br#"{"hooks":{}}"#.to_vec(),
        expected_sha256: None,
        create_new: false,
        create_parents: true,
    });
    assert_reason(r, Reason::PathProtected);
    assert!(!fx.root.join(".claude").exists());
}

#[test]
fn fs_prot_07_editor_tasks() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.root.join(".vscode")).unwrap();
    assert_reason(
        write(&fx, ".vscode/tasks.json", "{}"),
        Reason::PathProtected,
    );
}

#[test]
fn fs_prot_08_envrc() {
    let fx = Fixture::new();
    assert_reason(write(&fx, ".envrc", "curl x|sh"), Reason::PathProtected);
    assert_reason(
        write(&fx, "sub/../.envrc", "curl x|sh"),
        Reason::PathProtected,
    );
}

#[test]
fn arg_01_option_like_file_name_is_just_a_file() {
    let fx = Fixture::new();
    fx.write("--pre=sh", "x\n");
    let o = search(&fx, "x");
    assert_eq!(o.files.len(), 1);
    assert_eq!(o.files[0].path, "--pre=sh");
}

#[test]
fn arg_03_shell_syntax_in_a_name_is_read_verbatim() {
    let fx = Fixture::new();
    fx.write("$(touch pwn).txt", "ok\n");
    assert_eq!(read(&fx, "$(touch pwn).txt").unwrap().content, b"ok\n");
    assert!(!fx.root.join("pwn").exists());
}

#[test]
fn arg_04_backticks_in_a_name_are_listed_verbatim() {
    let fx = Fixture::new();
    fx.write("`id`.md", "");
    let o = list(&fx, ".", false).unwrap();
    assert_eq!(o.entries[0].path, "`id`.md");
    assert_eq!(o.entries.len(), 1);
}

#[test]
fn env_05_search_never_reveals_a_denied_file() {
    let fx = Fixture::setup(
        |root, _| {
            std::fs::create_dir(root.join("sub")).unwrap();
            std::fs::write(root.join("sub/.env"), "CANARY=1\n").unwrap();
            std::fs::write(root.join("sub/ok.txt"), "no canary here\n").unwrap();
        },
        |c| c.deny = vec!["**/.env".into()],
    );
    let o = search(&fx, "CANARY");
    assert!(o.files.is_empty(), "{o:?}");
    let found = fx
        .ws
        .find(&FindRequest {
            path: wp("."),
            patterns: vec!["*env*".into()],
            exclude: vec![],
            respect_gitignore: false,
            include_hidden: true,
            max_results: None,
            timeout: None,
        })
        .unwrap();
    assert!(found.matches.is_empty(), "{found:?}");
    assert_reason(
        fx.ws.search(&SearchRequest::new(wp("sub/.env"), "C")),
        Reason::PathDenied,
    );
}

#[test]
fn res_fs_01_wide_directory_is_truncated_with_a_flag() {
    let fx = Fixture::with(|c| c.limits.max_search_files = 5_000);
    let wide = fx.root.join("wide");
    std::fs::create_dir(&wide).unwrap();
    for i in 0..20_000 {
        std::fs::write(wide.join(format!("f{i:05}")), "x\n").unwrap();
    }
    let mut req = SearchRequest::new(wp("."), "x");
    req.max_results = Some(10_000);
    req.max_bytes = Some(1 << 20);
    let o = fx.ws.search(&req).unwrap();
    assert_eq!(o.truncated, Some(Truncation::MaxFiles));
    assert!(o.files_searched <= 5_000);
    // With enough file budget, the result cap is what cuts it, and says so.
    let fx2 = Fixture::new();
    std::fs::create_dir(fx2.root.join("wide")).unwrap();
    for i in 0..2_000 {
        std::fs::write(fx2.root.join(format!("wide/f{i:04}")), "x\n").unwrap();
    }
    let o = fx2.ws.search(&SearchRequest::new(wp("."), "x")).unwrap();
    assert_eq!(o.truncated, Some(Truncation::MaxResults));
    assert_eq!(o.match_count, fx2.ws.limits().default_search_results);
}

#[test]
fn res_fs_02_catastrophic_backtracking_pattern_is_linear() {
    let fx = Fixture::new();
    fx.write("aaa.txt", &format!("{}b\n", "a".repeat(100_000)));
    let t = Instant::now();
    let mut req = SearchRequest::new(wp("."), "(a+)+$");
    req.max_bytes = Some(1 << 20);
    let o = fx.ws.search(&req).unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert!(o.files.is_empty());
}

#[test]
fn symlink_loops_fail_without_hanging() {
    let fx = Fixture::new();
    fx.symlink("b", "a");
    fx.symlink("a", "b");
    fx.symlink("self", "self");
    fx.symlink("loopdir/x", "loopdir");
    for p in ["a", "b", "self", "self/x", "loopdir/x"] {
        assert_reason(read(&fx, p), Reason::SymlinkLoop);
    }
    assert_reason(write(&fx, "a", "x"), Reason::SymlinkLoop);
    assert_reason(write(&fx, "self/x", "x"), Reason::SymlinkLoop);
    // Stat describes the link itself; listing and search pass loops by.
    assert_eq!(
        fx.ws
            .stat(&StatRequest {
                path: wp("a"),
                sha256: true
            })
            .unwrap()
            .kind,
        EntryKind::Symlink
    );
    assert_eq!(list(&fx, ".", true).unwrap().entries.len(), 4);
    assert!(search(&fx, "x").files.is_empty());
}

#[test]
fn symlinks_to_root_proc_and_magic_links_are_outside() {
    let fx = Fixture::new();
    fx.symlink("/", "rootlink");
    fx.symlink("/proc/self/root", "procroot");
    fx.symlink("/proc/self/cwd", "proccwd");
    fx.symlink(
        format!("/proc/self/root{}", fx.out.join("secret").display()),
        "magic",
    );
    for p in [
        "rootlink/etc/passwd",
        "rootlink",
        "procroot/etc/passwd",
        "proccwd",
        "magic",
    ] {
        assert_reason(read(&fx, p), Reason::PathOutsideWorkspace);
    }
    assert_reason(list(&fx, "rootlink", false), Reason::PathOutsideWorkspace);
    assert_reason(
        read(&fx, "/proc/self/root/etc/passwd"),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(read(&fx, "/proc/self/fd/0"), Reason::PathOutsideWorkspace);
}

#[test]
fn dangling_symlinks_on_create() {
    let fx = Fixture::new();
    fx.symlink(fx.out.join("nonexistent"), "dangling-out");
    fx.symlink("../out/new", "dangling-rel");
    fx.symlink("missing-inside", "dangling-in");
    assert_reason(
        write(&fx, "dangling-out", "x"),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(
        write(&fx, "dangling-rel", "x"),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(write(&fx, "dangling-in", "x"), Reason::NotFound);
    assert!(!fx.out.join("nonexistent").exists() && !fx.out.join("new").exists());
}

#[test]
fn search_and_find_never_follow_symlinks_out() {
    let fx = Fixture::new();
    fx.symlink(&fx.out, "outdir");
    fx.symlink(fx.out.join("secret"), "outfile");
    fx.write("in.txt", "inside\n");
    let o = search(&fx, "OUTSIDE|inside");
    assert_eq!(o.files.len(), 1);
    let f = fx
        .ws
        .find(&FindRequest {
            path: wp("."),
            patterns: vec!["**".into()],
            exclude: vec![],
            respect_gitignore: false,
            include_hidden: true,
            max_results: None,
            timeout: None,
        })
        .unwrap();
    let paths: Vec<_> = f.matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(paths, ["in.txt", "outdir", "outfile"]);
}

#[test]
fn aliases_and_absolute_spellings_map_back() {
    let fx = Fixture::with(|c| c.aliases = vec!["/home/me/proj".into()]);
    fx.write("src/lib.rs", "fn main() {}\n");
    let o = read(&fx, "/home/me/proj/src/lib.rs").unwrap();
    assert_eq!(o.path, "/home/me/proj/src/lib.rs");
    let o = read(&fx, "/home/me/proj//src/./lib.rs").unwrap();
    assert_eq!(o.path, "/home/me/proj/src/lib.rs");
    let abs = format!("{}/src/lib.rs", fx.ws_str());
    assert_eq!(read(&fx, &abs).unwrap().path, abs);
    assert_eq!(read(&fx, "src/lib.rs").unwrap().path, "src/lib.rs");
    for p in [
        "/home/me/proj/../x",
        "/home/me/projx/src/lib.rs",
        "/home/me/proj/../../etc/passwd",
        "/home/me",
    ] {
        assert_reason(read(&fx, p), Reason::PathOutsideWorkspace);
    }
    let l = list(&fx, "/home/me/proj", true).unwrap();
    assert_eq!(l.path, "/home/me/proj");
    assert!(
        l.entries
            .iter()
            .any(|e| e.path == "/home/me/proj/src/lib.rs")
    );
    let s = fx
        .ws
        .search(&SearchRequest::new(wp("/home/me/proj/"), "main"))
        .unwrap();
    assert_eq!(s.files[0].path, "/home/me/proj/src/lib.rs");
}

#[test]
fn trailing_slashes_and_bad_paths() {
    let fx = Fixture::new();
    fx.write("f.txt", "x");
    std::fs::create_dir(fx.root.join("d")).unwrap();
    assert_reason(read(&fx, "f.txt/"), Reason::NotADirectory);
    assert_reason(read(&fx, "d/"), Reason::NotAFile);
    assert_reason(write(&fx, "f.txt/", "x"), Reason::InvalidPath);
    assert_reason(write(&fx, ".", "x"), Reason::InvalidPath);
    assert_reason(write(&fx, "d/..", "x"), Reason::InvalidPath);
    assert_eq!(list(&fx, "d/", false).unwrap().path, "d");
    assert_eq!(
        WorkspacePath::try_from("")
            .map(|_| ())
            .map_err(|e| toolgate_core::ReasonedError::reason(&e)),
        Err(Reason::InvalidPath)
    );
    assert!(WorkspacePath::try_from("a\0/../../etc").is_err());
}

// Issue 13 §4: paths that mean something else elsewhere.

fn mkdir(fx: &Fixture, p: &str) -> Result<MkdirOutcome> {
    fx.ws.mkdir(&MkdirRequest {
        path: wp(p),
        parents: true,
    })
}

fn edit(fx: &Fixture, p: &str) -> Result<EditOutcome> {
    fx.ws.edit(&EditRequest {
        path: wp(p),
        old: "a".into(),
        new: "b".into(),
        expected_occurrences: None,
        replace_all: false,
        expected_sha256: None,
    })
}

/// Every name directly under the workspace root.
fn root_names(fx: &Fixture) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(&fx.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn windows_drive_letter_path_creates_no_literal_name() {
    let fx = Fixture::new();
    for p in [
        r"C:\Users\me\x.txt",
        r"c:\x",
        "c:/x",
        "C:/Users/me/x.txt",
        "C:",
        r"z:\",
        "C:x.txt",
        r"C:..\..\x",
    ] {
        let e = assert_reason(write(&fx, p, "x"), Reason::InvalidPath);
        assert!(e.to_string().contains("POSIX tree"), "{e}");
        assert_reason(mkdir(&fx, p), Reason::InvalidPath);
        assert_reason(read(&fx, p), Reason::InvalidPath);
        assert_reason(list(&fx, p, false), Reason::InvalidPath);
        assert_reason(fx.ws.canonicalize(&wp(p)), Reason::InvalidPath);
        assert_reason(fx.ws.canonicalize_for_write(&wp(p)), Reason::InvalidPath);
        assert_reason(fx.ws.open_directory(&wp(p)), Reason::InvalidPath);
    }
    assert!(root_names(&fx).is_empty(), "{:?}", root_names(&fx));
    // A name that really starts with a letter and a colon is spelled as a POSIX path.
    write(&fx, "./c:notes.txt", "x").unwrap();
    assert_eq!(root_names(&fx), ["c:notes.txt"]);
}

#[test]
fn windows_unc_and_device_paths_are_invalid() {
    let fx = Fixture::with(|c| c.allow_backslash_names = true);
    for p in [
        r"\\server\share\x.txt",
        r"\\server\share",
        r"\\?\C:\x.txt",
        r"\\?\UNC\server\share\x",
        r"\\.\pipe\x",
        r"\??\C:\x",
        r"C:\x.txt",
        "c:/x",
    ] {
        let e = assert_reason(write(&fx, p, "x"), Reason::InvalidPath);
        assert!(e.to_string().contains("POSIX tree"), "{e}");
        assert_reason(mkdir(&fx, p), Reason::InvalidPath);
        assert_reason(fx.ws.canonicalize_for_write(&wp(p)), Reason::InvalidPath);
    }
    assert!(root_names(&fx).is_empty(), "{:?}", root_names(&fx));
}

#[test]
fn backslash_separated_path_is_invalid_unless_configured() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.root.join("src")).unwrap();
    for p in [
        r"src\main.rs",
        r"src\sub\x.txt",
        r"\x",
        r"a\ b.txt",
        r"src/a\b",
    ] {
        let e = assert_reason(write(&fx, p, "x"), Reason::InvalidPath);
        assert!(e.to_string().contains("POSIX tree"), "{e}");
        assert_reason(mkdir(&fx, p), Reason::InvalidPath);
        assert_reason(read(&fx, p), Reason::InvalidPath);
        assert_reason(fx.ws.canonicalize(&wp(p)), Reason::InvalidPath);
    }
    assert_eq!(root_names(&fx), ["src"]);
    assert!(
        std::fs::read_dir(fx.root.join("src"))
            .unwrap()
            .next()
            .is_none()
    );

    // An operator who wants such names gets them, literally.
    let fx = Fixture::with(|c| c.allow_backslash_names = true);
    write(&fx, r"src\main.rs", "fn main() {}\n").unwrap();
    assert_eq!(root_names(&fx), [r"src\main.rs"]);
    assert_eq!(
        read(&fx, r"src\main.rs").unwrap().content,
        b"fn main() {}\n"
    );
}

/// The protected agent and VCS directories of the default set.
const PROTECTED_DIRS: &[&str] = &[
    ".git", ".claude", ".codex", ".cursor", ".gemini", ".vscode", ".ssh", ".hg", ".svn", ".jj",
];

#[test]
fn codex_symlink_to_decoy_does_not_make_codex_config_writable() {
    for dir in PROTECTED_DIRS {
        let fx = Fixture::new();
        std::fs::create_dir_all(fx.root.join("decoy/deep")).unwrap();
        fx.write("decoy/config.toml", "a\n");
        fx.symlink("decoy", dir);
        let cfg = format!("{dir}/config.toml");
        assert_reason(write(&fx, &cfg, "x"), Reason::PathProtected);
        assert_reason(edit(&fx, &cfg), Reason::PathProtected);
        assert_reason(mkdir(&fx, &format!("{dir}/hooks")), Reason::PathProtected);
        assert_reason(
            fx.ws.canonicalize_for_write(&wp(&cfg)),
            Reason::PathProtected,
        );
        // Every path the spelling passes through, not only where it ends.
        for p in [
            format!("./{dir}/config.toml"),
            format!("{dir}/./config.toml"),
            format!("{dir}/deep/../config.toml"),
            format!("decoy/../{dir}/config.toml"),
            format!("{}/{dir}/config.toml", fx.ws_str()),
        ] {
            assert_reason(write(&fx, &p, "x"), Reason::PathProtected);
        }
        assert_eq!(
            std::fs::read_to_string(fx.root.join("decoy/config.toml")).unwrap(),
            "a\n",
            "{dir}"
        );
        assert!(!fx.root.join("decoy/hooks").exists());
        // Reading stays allowed, and the decoy is writable under its own name.
        assert_eq!(read(&fx, &cfg).unwrap().content, b"a\n");
        write(&fx, "decoy/config.toml", "b\n").unwrap();
    }
}

#[test]
fn protected_dir_symlink_climbing_back_above_itself_is_still_protected() {
    // `.codex` -> `decoy/deep`: `.codex/../../.codex/config.toml` climbs to the root through
    // the link and lands in the decoy again; lexical folding would lose the `.codex`.
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.root.join("decoy/deep")).unwrap();
    fx.symlink("decoy/deep", ".codex");
    for p in [
        ".codex/../../.codex/config.toml",
        ".codex/../../x/../.codex/config.toml",
    ] {
        assert_reason(write(&fx, p, "x"), Reason::PathProtected);
        assert_reason(fx.ws.canonicalize_for_write(&wp(p)), Reason::PathProtected);
    }
    assert!(!fx.root.join("decoy/deep/config.toml").exists());
}

#[test]
fn gitattributes_and_gitmodules_are_protected() {
    let fx = Fixture::new();
    fx.write(".gitattributes", "*.txt text\n");
    fx.write("sub/.gitmodules", "[submodule]\n");
    for p in [
        ".gitattributes",
        "sub/.gitmodules",
        ".gitmodules",
        "x/.gitattributes",
    ] {
        assert_reason(write(&fx, p, "* filter=evil\n"), Reason::PathProtected);
    }
    // Through a symlink whose own name is innocent, the canonical path still matches.
    fx.symlink(".gitattributes", "attrs");
    assert_reason(
        write(&fx, "attrs", "* filter=evil\n"),
        Reason::PathProtected,
    );
    assert_eq!(
        read(&fx, ".gitattributes").unwrap().content,
        b"*.txt text\n"
    );
}

// Issue 13 §3: what the policy denies never appears in a result.

/// The shipped default policy's `secrets` globs, as the policy sends them.
fn secrets() -> HiddenPaths {
    HiddenPaths::new(
        "v-test",
        [
            "**/.env",
            "**/.env.*",
            "**/*.pem",
            "**/*.key",
            "**/id_rsa",
            "**/id_ed25519",
        ]
        .map(String::from)
        .to_vec(),
    )
    .unwrap()
}

fn policy_fixture() -> Fixture {
    let fx = Fixture::new();
    fx.write(".env", "SECRET=matchme\n");
    fx.write("config/.env.local", "SECRET=matchme\n");
    fx.write("certs/server.pem", "matchme\n");
    fx.write("deep/a/id_rsa", "matchme\n");
    fx.write("src/app.rs", "// matchme in the open\n");
    // A directory the policy denies as a whole, and a symlink to it under another name.
    fx.write("keys.pem/inner.txt", "matchme\n");
    fx.symlink("keys.pem", "keys");
    fx.symlink(".env", "dotenv-link");
    fx
}

#[test]
fn policy_denied_env_never_appears_in_search() {
    let fx = policy_fixture();
    let hidden = secrets();
    let mut req = SearchRequest::new(wp("."), "matchme");
    req.include_hidden = true;
    let o = fx.ws.search_hiding(&req, &hidden).unwrap();
    let paths: Vec<_> = o.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["src/app.rs"], "{o:?}");
    assert_eq!(o.files_searched, 1, "hidden files are never even opened");
    // Without the policy's globs the same search shows them: the globs are what hides.
    let all = fx.ws.search(&req).unwrap();
    assert!(all.files.len() > 1, "{all:?}");
    // Searching a hidden path directly, by any spelling, is refused.
    for p in [
        ".env",
        "config/.env.local",
        "keys.pem",
        "keys",
        "./keys/",
        "src/../.env",
    ] {
        let mut r = SearchRequest::new(wp(p), "matchme");
        r.include_hidden = true;
        assert_reason(fx.ws.search_hiding(&r, &hidden), Reason::PathDenied);
    }
    // A symlink to a hidden file is never followed by a search, so it reveals nothing.
    assert!(o.files.iter().all(|f| f.path != "dotenv-link"));
    // Rooted below the root, through a symlinked directory, or by an absolute spelling:
    // entries are matched on their canonical paths all the same.
    fx.symlink("config", "cfg");
    let abs = format!("{}/config", fx.ws_str());
    for p in ["config", "cfg", "./cfg/", abs.as_str(), "certs", "deep"] {
        let mut r = SearchRequest::new(wp(p), "matchme");
        r.include_hidden = true;
        let o = fx.ws.search_hiding(&r, &hidden).unwrap();
        assert!(o.files.is_empty(), "{p}: {o:?}");
    }
    // Include globs and gitignore negations cannot bring a hidden file back.
    fx.write(".gitignore", "!.env\n");
    let mut r = SearchRequest::new(wp("."), "matchme");
    r.include_hidden = true;
    r.respect_gitignore = true;
    r.include = vec!["**/.env".into(), ".env".into(), "*.pem".into()];
    let o = fx.ws.search_hiding(&r, &hidden).unwrap();
    assert!(o.files.is_empty(), "{o:?}");
}

#[test]
fn policy_denied_paths_never_appear_in_listings() {
    let fx = policy_fixture();
    let hidden = secrets();
    let l = fx
        .ws
        .list_hiding(
            &ListRequest {
                path: wp("."),
                recursive: true,
                max_depth: Some(10),
                max_entries: None,
                include_hidden: true,
            },
            &hidden,
        )
        .unwrap();
    let paths: Vec<_> = l.entries.iter().map(|e| e.path.as_str()).collect();
    for p in &paths {
        assert!(
            !hidden.hides(std::path::Path::new(p)),
            "{p} listed: {paths:?}"
        );
    }
    assert!(
        paths.contains(&"src/app.rs") && paths.contains(&"keys"),
        "{paths:?}"
    );
    for p in ["keys", "keys.pem", "./keys.pem/", "certs/server.pem"] {
        assert_reason(
            fx.ws.list_hiding(
                &ListRequest {
                    path: wp(p),
                    recursive: false,
                    max_depth: None,
                    max_entries: None,
                    include_hidden: true,
                },
                &hidden,
            ),
            Reason::PathDenied,
        );
    }
}

#[test]
fn policy_denied_paths_never_appear_in_find() {
    let fx = policy_fixture();
    let hidden = secrets();
    let req = |p: &str| FindRequest {
        path: wp(p),
        patterns: vec!["**".into()],
        exclude: vec![],
        respect_gitignore: false,
        include_hidden: true,
        max_results: None,
        timeout: None,
    };
    let f = fx.ws.find_hiding(&req("."), &hidden).unwrap();
    let paths: Vec<_> = f.matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "certs",
            "config",
            "deep",
            "deep/a",
            "dotenv-link",
            "keys",
            "src",
            "src/app.rs"
        ]
    );
    assert_reason(fx.ws.find_hiding(&req("keys"), &hidden), Reason::PathDenied);
    assert_reason(
        fx.ws.find_hiding(&req("keys.pem"), &hidden),
        Reason::PathDenied,
    );
}

#[test]
fn hidden_paths_compile_like_deny_globs() {
    let h = secrets();
    assert_eq!(h.version(), "v-test");
    assert_eq!(h.patterns().len(), 6);
    for p in [".env", "a/b/.env", "x.pem", "x.pem/inside", "a/.env.prod"] {
        assert!(h.hides(std::path::Path::new(p)), "{p}");
    }
    for p in ["env", "a.pem.txt", ".envrc", "src"] {
        assert!(!h.hides(std::path::Path::new(p)), "{p}");
    }
    assert!(HiddenPaths::none().is_empty());
    assert!(!HiddenPaths::none().hides(std::path::Path::new(".env")));
    assert_reason(
        HiddenPaths::new("v", vec!["a/[".into()]),
        Reason::InvalidPattern,
    );
}
