//! Behaviour of each operation inside the workspace: what a caller sees and what lands on disk.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::*;
use toolgate_core::{Reason, ReasonedError};
use toolgate_fs::*;

fn write_req(p: &str, content: &[u8]) -> WriteRequest {
    WriteRequest {
        path: wp(p),
        content: content.to_vec(),
        expected_sha256: None,
        create_new: false,
        create_parents: false,
    }
}

fn edit_req(p: &str, old: &str, new: &str) -> EditRequest {
    EditRequest {
        path: wp(p),
        old: old.into(),
        new: new.into(),
        expected_occurrences: None,
        replace_all: false,
        expected_sha256: None,
    }
}

fn list_req(p: &str) -> ListRequest {
    ListRequest {
        path: wp(p),
        recursive: false,
        max_depth: None,
        max_entries: None,
        include_hidden: false,
    }
}

fn find_req(p: &str, patterns: &[&str]) -> FindRequest {
    FindRequest {
        path: wp(p),
        patterns: patterns.iter().map(|s| (*s).to_owned()).collect(),
        exclude: vec![],
        respect_gitignore: false,
        include_hidden: false,
        max_results: None,
        timeout: None,
    }
}

#[test]
fn read_whole_byte_and_line_ranges_with_hashes() {
    let fx = Fixture::new();
    fx.write("f.txt", "one\ntwo\nthree\n");
    let whole = fx.ws.read(&ReadRequest::whole(wp("f.txt"))).unwrap();
    assert_eq!(whole.content, b"one\ntwo\nthree\n");
    assert_eq!(whole.sha256, Sha256::of(b"one\ntwo\nthree\n"));
    assert_eq!(whole.file_sha256, Some(whole.sha256));
    assert_eq!((whole.total_size, whole.truncated), (14, false));

    let bytes = fx
        .ws
        .read(&ReadRequest {
            path: wp("f.txt"),
            range: ReadRange::Bytes {
                offset: 4,
                len: Some(3),
            },
            max_bytes: None,
        })
        .unwrap();
    assert_eq!(bytes.content, b"two");
    assert_eq!(bytes.sha256, Sha256::of(b"two"));
    assert_eq!(bytes.file_sha256, whole.file_sha256);

    let lines = fx
        .ws
        .read(&ReadRequest {
            path: wp("f.txt"),
            range: ReadRange::Lines {
                start: 2,
                count: None,
            },
            max_bytes: Some(6),
        })
        .unwrap();
    assert_eq!(
        (lines.content.as_slice(), lines.truncated),
        (&b"two\nth"[..], true)
    );

    let past_end = fx
        .ws
        .read(&ReadRequest {
            path: wp("f.txt"),
            range: ReadRange::Bytes {
                offset: 100,
                len: None,
            },
            max_bytes: None,
        })
        .unwrap();
    assert!(past_end.content.is_empty() && !past_end.truncated);
}

#[test]
fn read_refuses_absurd_caps_and_directories() {
    let fx = Fixture::new();
    fx.write("f.txt", "x");
    for cap in [0, u64::MAX] {
        let r = fx.ws.read(&ReadRequest {
            path: wp("f.txt"),
            range: ReadRange::Whole,
            max_bytes: Some(cap),
        });
        let e = assert_reason(r, Reason::InvalidRequest);
        assert_eq!(e.metadata()[0], ("field", "max_bytes".to_owned()));
    }
    let r = fx.ws.read(&ReadRequest {
        path: wp("f.txt"),
        range: ReadRange::Lines {
            start: 0,
            count: None,
        },
        max_bytes: None,
    });
    assert_reason(r, Reason::InvalidRequest);
    assert_reason(fx.ws.read(&ReadRequest::whole(wp("."))), Reason::NotAFile);
    assert_reason(
        fx.ws.read(&ReadRequest::whole(wp("missing"))),
        Reason::NotFound,
    );
}

#[test]
fn write_creates_overwrites_and_preserves_mode() {
    let fx = Fixture::new();
    let o = fx.ws.write(&write_req("new.txt", b"hello")).unwrap();
    assert!(o.created);
    assert_eq!(
        (o.sha256, o.size, o.path.as_str()),
        (Sha256::of(b"hello"), 5, "new.txt")
    );
    std::fs::set_permissions(
        fx.root.join("new.txt"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    let o = fx.ws.write(&write_req("new.txt", b"again")).unwrap();
    assert!(!o.created);
    assert_eq!(std::fs::read(fx.root.join("new.txt")).unwrap(), b"again");
    let mode = std::fs::metadata(fx.root.join("new.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o751);
    // No temp files are left behind.
    let names: Vec<_> = std::fs::read_dir(&fx.root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["new.txt"]);
}

#[test]
fn write_with_expected_sha256_and_create_new() {
    let fx = Fixture::new();
    fx.write("f.txt", "v1");
    let mut req = write_req("f.txt", b"v2");
    req.expected_sha256 = Some(Sha256::of(b"other"));
    let e = assert_reason(fx.ws.write(&req), Reason::Conflict);
    assert!(
        e.metadata()
            .contains(&("actual_sha256", Sha256::of(b"v1").to_hex()))
    );
    assert_eq!(std::fs::read(fx.root.join("f.txt")).unwrap(), b"v1");
    req.expected_sha256 = Some(Sha256::of(b"v1"));
    fx.ws.write(&req).unwrap();
    assert_eq!(std::fs::read(fx.root.join("f.txt")).unwrap(), b"v2");

    let mut absent = write_req("absent.txt", b"x");
    absent.expected_sha256 = Some(Sha256::of(b"x"));
    assert_reason(fx.ws.write(&absent), Reason::Conflict);

    let mut new = write_req("f.txt", b"v3");
    new.create_new = true;
    assert_reason(fx.ws.write(&new), Reason::AlreadyExists);
    new.path = wp("g.txt");
    assert!(fx.ws.write(&new).unwrap().created);
}

#[test]
fn write_missing_parent_needs_create_parents() {
    let fx = Fixture::new();
    assert_reason(fx.ws.write(&write_req("a/b/c.txt", b"x")), Reason::NotFound);
    let mut req = write_req("a/b/c.txt", b"x");
    req.create_parents = true;
    fx.ws.write(&req).unwrap();
    assert_eq!(std::fs::read(fx.root.join("a/b/c.txt")).unwrap(), b"x");
    fx.write("file", "x");
    let mut under_file = write_req("file/c.txt", b"x");
    under_file.create_parents = true;
    assert_reason(fx.ws.write(&under_file), Reason::NotADirectory);
}

#[test]
fn write_through_an_inside_symlink_writes_its_target() {
    let fx = Fixture::new();
    fx.write("real.txt", "old");
    fx.symlink("real.txt", "link");
    let o = fx.ws.write(&write_req("link", b"new")).unwrap();
    assert_eq!(o.path, "real.txt");
    assert!(fx.root.join("link").is_symlink());
    assert_eq!(std::fs::read(fx.root.join("real.txt")).unwrap(), b"new");
}

#[test]
fn write_over_the_size_limit_is_refused() {
    let fx = Fixture::with(|c| c.limits.max_write_bytes = 4);
    assert_reason(fx.ws.write(&write_req("f", b"12345")), Reason::TooLarge);
    assert!(!fx.root.join("f").exists());
}

#[test]
fn edit_replaces_exact_text_and_returns_a_diff() {
    let fx = Fixture::new();
    fx.write("f.rs", "fn a() {}\nfn b() {}\n");
    let o = fx.ws.edit(&edit_req("f.rs", "fn b", "fn c")).unwrap();
    assert_eq!(
        std::fs::read_to_string(fx.root.join("f.rs")).unwrap(),
        "fn a() {}\nfn c() {}\n"
    );
    assert_eq!(o.sha256, Sha256::of(b"fn a() {}\nfn c() {}\n"));
    assert_eq!(o.replacements, 1);
    assert!(o.diff.contains("-fn b() {}\n+fn c() {}"), "{}", o.diff);
    assert!(o.diff.starts_with("--- f.rs\n+++ f.rs\n"), "{}", o.diff);
}

#[test]
fn edit_counts_must_match() {
    let fx = Fixture::new();
    fx.write("f.txt", "x x x");
    let e = assert_reason(
        fx.ws.edit(&edit_req("f.txt", "x", "y")),
        Reason::EditMismatch,
    );
    assert!(e.metadata().contains(&("found", "3".to_owned())));
    assert_reason(
        fx.ws.edit(&edit_req("f.txt", "zzz", "y")),
        Reason::EditMismatch,
    );
    let mut two = edit_req("f.txt", "x", "y");
    two.expected_occurrences = Some(2);
    assert_reason(fx.ws.edit(&two), Reason::EditMismatch);
    assert_eq!(std::fs::read(fx.root.join("f.txt")).unwrap(), b"x x x");
    let mut all = edit_req("f.txt", "x", "y");
    all.replace_all = true;
    assert_eq!(fx.ws.edit(&all).unwrap().replacements, 3);
    assert_eq!(std::fs::read(fx.root.join("f.txt")).unwrap(), b"y y y");
    let mut three = edit_req("f.txt", "y", "z");
    three.expected_occurrences = Some(3);
    fx.ws.edit(&three).unwrap();
    assert_reason(
        fx.ws.edit(&edit_req("f.txt", "", "z")),
        Reason::InvalidRequest,
    );
}

#[test]
fn edit_checks_expected_sha256_and_utf8() {
    let fx = Fixture::new();
    fx.write("f.txt", "abc");
    let mut req = edit_req("f.txt", "b", "B");
    req.expected_sha256 = Some(Sha256::of(b"nope"));
    assert_reason(fx.ws.edit(&req), Reason::Conflict);
    req.expected_sha256 = Some(Sha256::of(b"abc"));
    fx.ws.edit(&req).unwrap();
    std::fs::write(fx.root.join("bin"), [0xff, 0xfe, b'a']).unwrap();
    assert_reason(
        fx.ws.edit(&edit_req("bin", "a", "b")),
        Reason::InvalidRequest,
    );
    assert_reason(fx.ws.edit(&edit_req("missing", "a", "b")), Reason::NotFound);
}

#[test]
fn list_hides_dotfiles_caps_entries_and_reports_symlinks() {
    let fx = Fixture::new();
    fx.write("a/b/c/d.txt", "1234");
    fx.write(".hidden", "");
    fx.write("z.txt", "");
    fx.symlink("z.txt", "ln");
    let o = fx.ws.list(&list_req(".")).unwrap();
    let names: Vec<_> = o.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["a", "ln", "z.txt"]);
    let ln = &o.entries[1];
    assert_eq!(
        (ln.kind, ln.symlink_target.as_deref()),
        (EntryKind::Symlink, Some("z.txt"))
    );

    let mut req = list_req(".");
    req.include_hidden = true;
    req.recursive = true;
    req.max_depth = Some(2);
    let o = fx.ws.list(&req).unwrap();
    let names: Vec<_> = o
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.depth))
        .collect();
    assert_eq!(
        names,
        [
            (".hidden", 1),
            ("a", 1),
            ("a/b", 2),
            ("ln", 1),
            ("z.txt", 1)
        ]
    );

    req.max_depth = None;
    req.max_entries = Some(3);
    let o = fx.ws.list(&req).unwrap();
    assert_eq!(
        (o.entries.len(), o.truncated),
        (3, Some(Truncation::MaxEntries))
    );
    let d = fx
        .ws
        .list(&ListRequest {
            max_entries: None,
            max_depth: Some(10),
            ..req.clone()
        })
        .unwrap();
    let file = d.entries.iter().find(|e| e.path == "a/b/c/d.txt").unwrap();
    assert_eq!((file.kind, file.size, file.depth), (EntryKind::File, 4, 4));

    req.max_entries = Some(0);
    assert_reason(fx.ws.list(&req), Reason::InvalidRequest);
    assert_reason(fx.ws.list(&list_req("z.txt")), Reason::NotADirectory);
}

#[test]
fn list_hides_entries_under_a_denied_directory() {
    let fx = Fixture::with(|c| c.deny = vec!["secrets".into(), "**/*.pem".into()]);
    fx.write("secrets/a", "");
    fx.write("x/k.pem", "");
    fx.write("x/ok", "");
    let mut req = list_req(".");
    req.recursive = true;
    let names: Vec<_> = fx
        .ws
        .list(&req)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(names, ["x", "x/ok"]);
    assert_reason(fx.ws.list(&list_req("secrets")), Reason::PathDenied);
    assert_reason(
        fx.ws.read(&ReadRequest::whole(wp("secrets/a"))),
        Reason::PathDenied,
    );
    assert_reason(
        fx.ws.write(&write_req("secrets/new", b"x")),
        Reason::PathDenied,
    );
}

#[test]
fn search_literal_regex_case_and_context() {
    let fx = Fixture::new();
    fx.write(
        "src/a.rs",
        "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n",
    );
    fx.write("src/b.txt", "Hello.World\nhelloxworld\n");
    let mut req = SearchRequest::new(wp("src"), "hello.world");
    let o = fx.ws.search(&req).unwrap();
    assert_eq!(o.files.len(), 1);
    assert_eq!(o.files[0].path, "src/b.txt");
    assert_eq!(o.files[0].lines[0].text, "helloxworld");
    assert_eq!(o.files[0].lines[0].line_number, 2);
    req.case_insensitive = true;
    assert_eq!(fx.ws.search(&req).unwrap().match_count, 2);
    req.literal = true;
    let o = fx.ws.search(&req).unwrap();
    assert_eq!(
        (o.match_count, o.files[0].lines[0].text.as_str()),
        (1, "Hello.World")
    );

    let mut ctx = SearchRequest::new(wp("."), "let x");
    ctx.context_lines = 1;
    let o = fx.ws.search(&ctx).unwrap();
    let lines: Vec<_> = o.files[0]
        .lines
        .iter()
        .map(|l| (l.line_number, l.is_match))
        .collect();
    assert_eq!(lines, [(1, false), (2, true), (3, false)]);
    assert_eq!(o.files_searched, 2);
}

#[test]
fn search_globs_gitignore_hidden_and_binary() {
    let fx = Fixture::new();
    fx.write("keep.rs", "needle\n");
    fx.write("skip.txt", "needle\n");
    fx.write("target/out.rs", "needle\n");
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("debug.log", "needle\n");
    fx.write(".hidden/h.rs", "needle\n");
    fx.write("sub/.gitignore", "!*.log\nlocal.rs\n");
    fx.write("sub/local.rs", "needle\n");
    fx.write("sub/keep.log", "needle\n");
    std::fs::write(fx.root.join("bin.dat"), b"needle\0\x01\x02").unwrap();
    let paths = |req: &SearchRequest| -> Vec<String> {
        fx.ws
            .search(req)
            .unwrap()
            .files
            .into_iter()
            .map(|f| f.path)
            .collect()
    };
    let mut req = SearchRequest::new(wp("."), "needle");
    assert_eq!(
        paths(&req),
        [
            "debug.log",
            "keep.rs",
            "skip.txt",
            "sub/keep.log",
            "sub/local.rs",
            "target/out.rs"
        ]
    );
    req.respect_gitignore = true;
    assert_eq!(paths(&req), ["keep.rs", "skip.txt", "sub/keep.log"]);
    req.include = vec!["*.rs".into()];
    assert_eq!(paths(&req), ["keep.rs"]);
    req.include_hidden = true;
    assert_eq!(paths(&req), [".hidden/h.rs", "keep.rs"]);
    req.include = vec![];
    req.exclude = vec![".hidden".into(), "sub/*.log".into()];
    assert_eq!(paths(&req), ["keep.rs", "skip.txt"]);
}

#[test]
fn search_caps_and_invalid_input() {
    let fx = Fixture::new();
    for i in 0..20 {
        fx.write(&format!("f{i:02}.txt"), "match me\nmatch me too\n");
    }
    let mut req = SearchRequest::new(wp("."), "match");
    req.max_results = Some(5);
    let o = fx.ws.search(&req).unwrap();
    assert_eq!(
        (o.match_count, o.truncated),
        (5, Some(Truncation::MaxResults))
    );
    req.max_results = None;
    req.max_bytes = Some(30);
    let o = fx.ws.search(&req).unwrap();
    assert_eq!(o.truncated, Some(Truncation::MaxBytes));
    let bytes: usize = o
        .files
        .iter()
        .flat_map(|f| &f.lines)
        .map(|l| l.text.len())
        .sum();
    assert!(bytes <= 30);
    req.max_bytes = None;
    req.timeout = Some(Duration::ZERO);
    assert_reason(fx.ws.search(&req), Reason::InvalidRequest);
    req.timeout = Some(Duration::from_nanos(1));
    assert_eq!(
        fx.ws.search(&req).unwrap().truncated,
        Some(Truncation::Timeout)
    );
    req.timeout = None;
    req.context_lines = 10_000;
    assert_reason(fx.ws.search(&req), Reason::InvalidRequest);
    for bad in ["(", "[a-", ""] {
        assert_reason(
            fx.ws.search(&SearchRequest::new(wp("."), bad)),
            Reason::InvalidPattern,
        );
    }
    let mut glob = SearchRequest::new(wp("."), "x");
    glob.include = vec!["[".into()];
    assert_reason(fx.ws.search(&glob), Reason::InvalidPattern);
    let o = fx
        .ws
        .search(&SearchRequest::new(wp("f01.txt"), "too"))
        .unwrap();
    assert_eq!((o.files[0].path.as_str(), o.match_count), ("f01.txt", 1));
}

#[test]
fn search_cuts_very_long_lines() {
    let fx = Fixture::with(|c| c.limits.max_line_bytes = 10);
    fx.write("long.txt", &format!("needle{}\n", "é".repeat(50)));
    let o = fx
        .ws
        .search(&SearchRequest::new(wp("."), "needle"))
        .unwrap();
    let line = &o.files[0].lines[0];
    assert!(line.cut && line.text.len() <= 10 && line.text.starts_with("needle"));
}

#[test]
fn find_matches_names_and_paths() {
    let fx = Fixture::new();
    fx.write("src/a.rs", "");
    fx.write("src/deep/b.rs", "");
    fx.write("docs/c.md", "");
    fx.write(".git/x.rs", "");
    let paths = |req: &FindRequest| -> Vec<(String, EntryKind)> {
        fx.ws
            .find(req)
            .unwrap()
            .matches
            .into_iter()
            .map(|m| (m.path, m.kind))
            .collect()
    };
    let f = |p: &str| (p.to_owned(), EntryKind::File);
    assert_eq!(
        paths(&find_req(".", &["*.rs"])),
        [f("src/a.rs"), f("src/deep/b.rs")]
    );
    assert_eq!(paths(&find_req(".", &["src/*.rs"])), [f("src/a.rs")]);
    assert_eq!(
        paths(&find_req("src", &["**/*.rs"])),
        [f("src/a.rs"), f("src/deep/b.rs")]
    );
    assert_eq!(
        paths(&find_req(".", &["deep"])),
        [("src/deep".to_owned(), EntryKind::Dir)]
    );
    let mut hidden = find_req(".", &["*.rs"]);
    hidden.include_hidden = true;
    hidden.exclude = vec!["deep".into()];
    assert_eq!(paths(&hidden), [f(".git/x.rs"), f("src/a.rs")]);
    let mut capped = find_req(".", &["*"]);
    capped.max_results = Some(2);
    let o = fx.ws.find(&capped).unwrap();
    assert_eq!(
        (o.matches.len(), o.truncated),
        (2, Some(Truncation::MaxResults))
    );
    assert_reason(fx.ws.find(&find_req(".", &[])), Reason::InvalidRequest);
    assert_reason(fx.ws.find(&find_req(".", &["a{"])), Reason::InvalidPattern);
    assert_reason(
        fx.ws.find(&find_req("docs/c.md", &["*"])),
        Reason::NotADirectory,
    );
}

#[test]
fn mkdir_with_and_without_parents() {
    let fx = Fixture::new();
    let o = fx
        .ws
        .mkdir(&MkdirRequest {
            path: wp("a"),
            parents: false,
        })
        .unwrap();
    assert_eq!((o.path.as_str(), o.created), ("a", true));
    assert_reason(
        fx.ws.mkdir(&MkdirRequest {
            path: wp("a"),
            parents: false,
        }),
        Reason::AlreadyExists,
    );
    let o = fx
        .ws
        .mkdir(&MkdirRequest {
            path: wp("a/"),
            parents: true,
        })
        .unwrap();
    assert!(!o.created);
    assert_reason(
        fx.ws.mkdir(&MkdirRequest {
            path: wp("x/y"),
            parents: false,
        }),
        Reason::NotFound,
    );
    let o = fx
        .ws
        .mkdir(&MkdirRequest {
            path: wp("x/y/z"),
            parents: true,
        })
        .unwrap();
    assert_eq!((o.path.as_str(), o.created), ("x/y/z", true));
    assert!(fx.root.join("x/y/z").is_dir());
    fx.write("file", "");
    assert_reason(
        fx.ws.mkdir(&MkdirRequest {
            path: wp("file"),
            parents: true,
        }),
        Reason::AlreadyExists,
    );
    assert_reason(
        fx.ws.mkdir(&MkdirRequest {
            path: wp(".git"),
            parents: true,
        }),
        Reason::PathProtected,
    );
    assert_reason(
        fx.ws.mkdir(&MkdirRequest {
            path: wp("."),
            parents: true,
        }),
        Reason::InvalidPath,
    );
}

#[test]
fn stat_reports_files_dirs_and_links() {
    let fx = Fixture::new();
    fx.write("f.txt", "abc");
    std::fs::set_permissions(
        fx.root.join("f.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    fx.symlink("f.txt", "ln");
    let s = fx
        .ws
        .stat(&StatRequest {
            path: wp("f.txt"),
            sha256: true,
        })
        .unwrap();
    assert_eq!(
        (s.kind, s.size, s.mode, s.nlink),
        (EntryKind::File, 3, 0o640, 1)
    );
    assert_eq!(s.sha256, Some(Sha256::of(b"abc")));
    assert!(s.mtime > std::time::UNIX_EPOCH);
    let l = fx
        .ws
        .stat(&StatRequest {
            path: wp("ln"),
            sha256: true,
        })
        .unwrap();
    assert_eq!(
        (l.kind, l.symlink_target.as_deref(), l.sha256),
        (EntryKind::Symlink, Some("f.txt"), None)
    );
    assert_eq!(l.path, "ln");
    let d = fx
        .ws
        .stat(&StatRequest {
            path: wp("."),
            sha256: false,
        })
        .unwrap();
    assert_eq!((d.kind, d.path.as_str()), (EntryKind::Dir, "."));
    assert_reason(
        fx.ws.stat(&StatRequest {
            path: wp("nope"),
            sha256: false,
        }),
        Reason::NotFound,
    );
}

#[test]
fn workspace_config_is_validated() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = WorkspaceConfig::new(tmp.path());
    c.deny = vec!["[".into()];
    assert_eq!(
        Workspace::open(c).unwrap_err().reason(),
        Reason::InvalidPattern
    );
    let mut c = WorkspaceConfig::new(tmp.path());
    c.aliases = vec!["relative/alias".into()];
    assert_eq!(
        Workspace::open(c).unwrap_err().reason(),
        Reason::InvalidPath
    );
    let c = WorkspaceConfig::new(tmp.path().join("missing"));
    assert_eq!(Workspace::open(c).unwrap_err().reason(), Reason::NotFound);
    let mut c = WorkspaceConfig::new(tmp.path());
    c.limits.default_list_entries = 0;
    assert_eq!(
        Workspace::open(c).unwrap_err().reason(),
        Reason::InvalidRequest
    );
}

#[test]
fn write_accepts_names_up_to_name_max() {
    let fx = Fixture::new();
    let name = "n".repeat(255);
    fx.ws.write(&write_req(&name, b"x")).unwrap();
    fx.ws.write(&write_req(&name, b"y")).unwrap();
    assert_eq!(std::fs::read(fx.root.join(&name)).unwrap(), b"y");
    assert_reason(
        fx.ws.write(&write_req(&"n".repeat(256), b"x")),
        Reason::InvalidPath,
    );
}

#[test]
fn canonicalize_resolves_symlinks_and_missing_tails() {
    let fx = Fixture::with(|c| {
        c.aliases = vec!["/home/me/proj".into()];
        c.deny = vec!["**/.env".into()];
    });
    fx.write("real/f.txt", "");
    fx.symlink("real", "ln");
    fx.symlink(&fx.out, "out");
    fx.symlink(".env", "notenv");
    let c = fx.ws.canonicalize(&wp("ln/f.txt")).unwrap();
    assert_eq!((c.relative.as_str(), c.exists), ("real/f.txt", true));
    let c = fx
        .ws
        .canonicalize(&wp("/home/me/proj/ln/new/deeper.txt"))
        .unwrap();
    assert_eq!(c.relative, "real/new/deeper.txt");
    assert_eq!(c.display, "/home/me/proj/real/new/deeper.txt");
    assert!(!c.exists);
    assert_eq!(fx.ws.canonicalize(&wp(".")).unwrap().relative, ".");
    assert_reason(
        fx.ws.canonicalize(&wp("out/x")),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(
        fx.ws.canonicalize(&wp("../x")),
        Reason::PathOutsideWorkspace,
    );
    assert_reason(fx.ws.canonicalize(&wp("missing/../../x")), Reason::NotFound);
    // A link to a denied file is denied like the file, existing or not.
    fx.write(".env", "K=1");
    assert_reason(fx.ws.canonicalize(&wp("notenv")), Reason::PathDenied);
    assert_reason(fx.ws.canonicalize(&wp("sub/.env")), Reason::PathDenied);
}

#[test]
fn canonicalize_for_write_refuses_protected_paths_through_links() {
    let fx = Fixture::with(|_| {});
    fx.write(".git/config", "[core]\n");
    fx.symlink(".git", "g");
    assert_eq!(
        fx.ws.canonicalize(&wp("g/config")).unwrap().relative,
        ".git/config"
    );
    assert_reason(
        fx.ws.canonicalize_for_write(&wp("g/config")),
        Reason::PathProtected,
    );
    assert_reason(
        fx.ws.canonicalize_for_write(&wp(".git/hooks/new")),
        Reason::PathProtected,
    );
    let c = fx.ws.canonicalize_for_write(&wp("src/new.rs")).unwrap();
    assert_eq!((c.relative.as_str(), c.exists), ("src/new.rs", false));
}

/// Read-modify-write with `expected_sha256` from many threads (two workspaces over one
/// directory, as two executors over one volume): every write that reported success is in the
/// final count, every other one failed with `Conflict`, and no read ever fails because a
/// write renamed the file while it was being opened.
#[test]
fn conditional_writes_never_lose_an_update() {
    let f = Fixture::new();
    std::fs::write(f.root.join("counter"), b"0").unwrap();
    let second = Workspace::open(WorkspaceConfig::new(&f.root)).unwrap();
    let workspaces = [&f.ws, &second];
    let succeeded = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..6 {
            let ws = workspaces[t % 2];
            let succeeded = &succeeded;
            s.spawn(move || {
                let mut mine = 0;
                while mine < 25 {
                    let read = ws
                        .read(&ReadRequest::whole(
                            WorkspacePath::try_from("counter").unwrap(),
                        ))
                        .unwrap_or_else(|e| panic!("a read failed during writes: {e}"));
                    let n: u64 = String::from_utf8(read.content).unwrap().parse().unwrap();
                    let mut req = write_req("counter", (n + 1).to_string().as_bytes());
                    req.expected_sha256 = read.file_sha256;
                    match ws.write(&req) {
                        Ok(_) => {
                            mine += 1;
                            succeeded.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Err(e) => assert_eq!(e.reason(), Reason::Conflict, "{e}"),
                    }
                }
            });
        }
    });
    let total: u64 = std::fs::read_to_string(f.root.join("counter"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        total,
        succeeded.into_inner(),
        "an update that succeeded was lost"
    );
    assert_eq!(total, 150);
}
