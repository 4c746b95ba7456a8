//! Deletion: files, symlinks (never their targets), empty and non-empty directories, trees,
//! escapes, protected and hidden paths, races, and the disk usage the run budget measures.
//! The fixture asserts on drop that `$OUT` is byte-identical.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use toolgate_core::Reason;
use toolgate_fs::*;

fn del(path: &str) -> DeleteRequest {
    DeleteRequest {
        path: wp(path),
        recursive: false,
        missing_ok: false,
        expected_sha256: None,
    }
}

fn rec(path: &str) -> DeleteRequest {
    DeleteRequest {
        recursive: true,
        ..del(path)
    }
}

#[test]
fn deletes_a_file_and_reports_it() {
    let fx = Fixture::new();
    fx.write("src/old.rs", "fn old() {}\n");
    let out = fx.ws.delete(&del("src/old.rs")).unwrap();
    assert_eq!(
        out,
        DeleteOutcome {
            path: "src/old.rs".into(),
            deleted: true,
            kind: Some(EntryKind::File),
            files: 1,
            dirs: 0,
            bytes: 12,
        }
    );
    assert!(!fx.root.join("src/old.rs").exists());
    assert!(fx.root.join("src").is_dir(), "only the file goes");
    // Gone now: NOT_FOUND, or nothing with missing_ok.
    assert_reason(fx.ws.delete(&del("src/old.rs")), Reason::NotFound);
    let again = fx
        .ws
        .delete(&DeleteRequest {
            missing_ok: true,
            ..del("src/old.rs")
        })
        .unwrap();
    assert!(!again.deleted && again.kind.is_none());
    // A missing parent is fine with missing_ok too.
    let parent = fx
        .ws
        .delete(&DeleteRequest {
            missing_ok: true,
            ..del("nowhere/x")
        })
        .unwrap();
    assert!(!parent.deleted);
}

#[test]
fn deleting_a_symlink_removes_the_link_never_its_target() {
    let fx = Fixture::new();
    fx.write("real/keep.txt", "keep\n");
    fx.symlink("real/keep.txt", "inside-link");
    fx.symlink(fx.out.join("secret"), "outside-link");
    fx.symlink(fx.out.join("dir"), "outside-dir-link");
    fx.symlink("real", "dir-link");
    for (link, _) in [
        ("inside-link", ()),
        ("outside-link", ()),
        ("outside-dir-link", ()),
        ("dir-link", ()),
    ] {
        let out = fx.ws.delete(&del(link)).unwrap();
        assert_eq!(out.kind, Some(EntryKind::Symlink), "{link}");
        assert!(fx.root.join(link).symlink_metadata().is_err(), "{link}");
    }
    assert_eq!(
        std::fs::read_to_string(fx.root.join("real/keep.txt")).unwrap(),
        "keep\n"
    );
    // A recursive deletion of a link to a directory also takes only the link.
    fx.symlink(fx.out.join("dir"), "again");
    let out = fx.ws.delete(&rec("again")).unwrap();
    assert_eq!((out.kind, out.files), (Some(EntryKind::Symlink), 1));
    // `link/` names the directory behind it: a trailing slash asks for a directory, and a
    // symlink is not one.
    fx.symlink("real", "slash-link");
    assert_reason(fx.ws.delete(&del("slash-link/")), Reason::NotADirectory);
    assert!(fx.root.join("real/keep.txt").exists());
}

#[test]
fn a_non_empty_directory_needs_recursive() {
    let fx = Fixture::new();
    fx.write("build/a/b/c.o", "0123456789");
    fx.write("build/a/d.o", "01234");
    fx.write("build/top.log", "x");
    std::fs::create_dir(fx.root.join("empty")).unwrap();
    let e = assert_reason(fx.ws.delete(&del("build")), Reason::DirectoryNotEmpty);
    assert!(e.to_string().contains("recursive"), "{e}");
    assert!(
        fx.root.join("build/a/b/c.o").exists(),
        "nothing was removed"
    );
    let empty = fx.ws.delete(&del("empty/")).unwrap();
    assert_eq!((empty.kind, empty.dirs), (Some(EntryKind::Dir), 1));
    let tree = fx.ws.delete(&rec("build")).unwrap();
    assert_eq!(
        (tree.files, tree.dirs, tree.bytes, tree.deleted),
        (3, 3, 16, true)
    );
    assert!(!fx.root.join("build").exists());
    // A sha256 precondition applies to files only.
    std::fs::create_dir(fx.root.join("d")).unwrap();
    let req = DeleteRequest {
        expected_sha256: Some(Sha256::of(b"x")),
        ..del("d")
    };
    assert_reason(fx.ws.delete(&req), Reason::InvalidRequest);
}

#[test]
fn a_tree_with_symlinks_inside_loses_the_links_not_their_targets() {
    let fx = Fixture::new();
    fx.write("tree/sub/file", "abc");
    fx.write("kept/file", "kept");
    symlink(fx.out.join("dir"), fx.root.join("tree/out-dir")).unwrap();
    symlink(fx.out.join("secret"), fx.root.join("tree/sub/out-file")).unwrap();
    symlink("../../kept", fx.root.join("tree/sub/kept-link")).unwrap();
    let out = fx.ws.delete(&rec("tree")).unwrap();
    assert_eq!((out.files, out.dirs), (4, 2));
    assert!(!fx.root.join("tree").exists());
    assert_eq!(
        std::fs::read_to_string(fx.root.join("kept/file")).unwrap(),
        "kept"
    );
}

#[test]
fn sha256_precondition_guards_a_file_deletion() {
    let fx = Fixture::new();
    fx.write("notes.txt", "v1\n");
    let stale = DeleteRequest {
        expected_sha256: Some(Sha256::of(b"v0\n")),
        ..del("notes.txt")
    };
    assert_reason(fx.ws.delete(&stale), Reason::Conflict);
    assert!(fx.root.join("notes.txt").exists());
    let fresh = DeleteRequest {
        expected_sha256: Some(Sha256::of(b"v1\n")),
        ..del("notes.txt")
    };
    fx.ws.delete(&fresh).unwrap();
    assert!(!fx.root.join("notes.txt").exists());
}

#[test]
fn escapes_and_the_root_are_refused() {
    let fx = Fixture::new();
    fx.write("a/file", "x");
    fx.symlink(&fx.out, "out-link");
    let ws = fx.ws_str();
    for (path, reason) in [
        ("../out/secret", Reason::PathOutsideWorkspace),
        ("a/../../out/secret", Reason::PathOutsideWorkspace),
        ("/etc/hostname", Reason::PathOutsideWorkspace),
        ("out-link/secret", Reason::PathOutsideWorkspace),
        ("out-link/dir/x", Reason::PathOutsideWorkspace),
        (".", Reason::InvalidPath),
        ("./", Reason::InvalidPath),
        ("a/..", Reason::InvalidPath),
        ("", Reason::InvalidPath),
        (&ws, Reason::InvalidPath),
        (&format!("{ws}/"), Reason::InvalidPath),
        (&format!("{ws}/../out/t"), Reason::PathOutsideWorkspace),
        ("C:\\a\\file", Reason::InvalidPath),
        ("a\\file", Reason::InvalidPath),
    ] {
        for recursive in [false, true] {
            let r = WorkspacePath::try_from(path).and_then(|p| {
                fx.ws.delete(&DeleteRequest {
                    path: p,
                    recursive,
                    missing_ok: true,
                    expected_sha256: None,
                })
            });
            assert_reason(r, reason);
        }
    }
    assert!(fx.root.join("a/file").exists());
}

#[test]
fn protected_paths_and_trees_holding_them_are_refused_whole() {
    let fx = Fixture::new();
    fx.write(".git/config", "[core]\n");
    fx.write(".git/HEAD", "ref: refs/heads/main\n");
    fx.write("vendor/lib/.git", "gitdir: ../../.git/modules/lib\n");
    fx.write("vendor/lib/src.rs", "x");
    fx.write("pkg/.vscode/settings.json", "{}");
    fx.write("pkg/a.rs", "x");
    fx.write("venv/lib/site.pth", "import os");
    for (path, recursive) in [
        (".git", true),
        (".git/config", false),
        (".git/HEAD", false),
        ("./.git/../.git/HEAD", false),
        ("vendor/lib/.git", false),
        ("vendor", true),
        ("vendor/lib", true),
        ("pkg", true),
        ("pkg/.vscode/settings.json", false),
        ("venv", true),
    ] {
        let req = DeleteRequest {
            recursive,
            ..del(path)
        };
        assert_reason(fx.ws.delete(&req), Reason::PathProtected);
    }
    // Nothing of a refused tree went, not even what came before the protected entry.
    for kept in [
        ".git/config",
        "vendor/lib/src.rs",
        "pkg/a.rs",
        "pkg/.vscode/settings.json",
        "venv/lib/site.pth",
    ] {
        assert!(fx.root.join(kept).exists(), "{kept}");
    }
    // A symlink cannot launder a protected name: the link itself goes, `.git` stays.
    fx.symlink(".git", "g");
    assert_reason(fx.ws.delete(&del("g/config")), Reason::PathProtected);
    fx.ws.delete(&del("g")).unwrap();
    assert!(fx.root.join(".git/config").exists());
}

#[test]
fn a_tree_holding_a_hidden_path_is_refused_without_naming_it() {
    let fx = Fixture::with(|c| c.deny = vec!["**/*.secret".into()]);
    fx.write("conf/app.toml", "x");
    fx.write("conf/deep/db.secret", "pw");
    let hidden = HiddenPaths::new("v1", vec!["**/private-notes".into()]).unwrap();
    fx.write("notes/private-notes", "x");
    let e = assert_reason(fx.ws.delete(&rec("conf")), Reason::PathDenied);
    assert!(!e.to_string().contains("db.secret"), "{e}");
    let e = assert_reason(
        fx.ws.delete_hiding(&rec("notes"), &hidden),
        Reason::PathDenied,
    );
    assert!(!e.to_string().contains("private-notes"), "{e}");
    assert_reason(
        fx.ws.delete(&del("conf/deep/db.secret")),
        Reason::PathDenied,
    );
    assert!(fx.root.join("conf/deep/db.secret").exists());
    assert!(fx.root.join("notes/private-notes").exists());
    // Without the policy's hidden globs the notes are an ordinary tree.
    fx.ws.delete(&rec("notes")).unwrap();
}

#[test]
fn a_tree_over_the_entry_bound_is_left_whole() {
    let fx = Fixture::with(|c| c.limits.max_delete_entries = 10);
    for i in 0..11 {
        fx.write(&format!("many/f{i}"), "x");
    }
    let e = assert_reason(fx.ws.delete(&rec("many")), Reason::TooLarge);
    assert!(e.to_string().contains("one at a time"), "{e}");
    assert_eq!(std::fs::read_dir(fx.root.join("many")).unwrap().count(), 11);
    fx.ws.delete(&del("many/f0")).unwrap();
    assert_eq!(fx.ws.delete(&rec("many")).unwrap().files, 10);
}

#[test]
fn a_deep_tree_is_removed_without_recursion_limits() {
    let fx = Fixture::new();
    let mut p = fx.root.join("deep");
    for _ in 0..200 {
        p = p.join("d");
    }
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("leaf"), "x").unwrap();
    let out = fx.ws.delete(&rec("deep")).unwrap();
    assert_eq!((out.dirs, out.files), (201, 1));
    assert!(!fx.root.join("deep").exists());
}

/// Runs `attack` in a loop on another thread while `ops` runs, then stops it.
fn under_attack(attack: impl Fn() + Send + Sync, ops: impl FnOnce()) -> usize {
    let stop = AtomicBool::new(false);
    let rounds = AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                attack();
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        });
        ops();
        stop.store(true, Ordering::Relaxed);
    });
    rounds.into_inner()
}

/// Replaces the directory `path` with a symlink to `target` by rename, or puts a directory
/// holding `victim`-named files back.
fn flip(path: &Path, target: &Path, n: usize) {
    if n.is_multiple_of(2) {
        let tmp = path.with_extension("swap");
        let _ = std::fs::remove_file(&tmp);
        let _ = symlink(target, &tmp);
        // The real directory moves aside and the link takes its name, in one rename each.
        let _ = std::fs::rename(path, path.with_extension("aside"));
        let _ = std::fs::rename(&tmp, path);
    } else {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::create_dir_all(path.join("sub"));
        let _ = std::fs::write(path.join("x"), "inside");
        let _ = std::fs::write(path.join("sub/x"), "inside");
        let _ = std::fs::remove_dir_all(path.with_extension("aside"));
    }
}

#[test]
fn fs_race_delete_while_a_parent_flips_to_an_outside_symlink() {
    // `$OUT/dir/x` and `$OUT/dir` are what a followed parent would delete; the drop check
    // asserts `$OUT` is untouched after thousands of single and recursive deletions.
    let fx = Fixture::new();
    let d = fx.root.join("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    let n = AtomicUsize::new(0);
    let (mut deleted, mut refused) = (0, 0);
    let rounds = under_attack(
        || flip(&d, &fx.out.join("dir"), n.fetch_add(1, Ordering::Relaxed)),
        || {
            for i in 0..2_000 {
                let req = match i % 3 {
                    0 => del("d/x"),
                    1 => rec("d/sub"),
                    _ => del("d/sub/x"),
                };
                match fx.ws.delete(&DeleteRequest {
                    missing_ok: true,
                    ..req
                }) {
                    Ok(o) if o.deleted => deleted += 1,
                    Ok(_) => refused += 1,
                    Err(e) => {
                        assert_no_leak(&e.to_string());
                        refused += 1;
                    }
                }
                assert!(fx.out.join("dir/x").exists(), "an outside file was deleted");
            }
        },
    );
    assert!(
        rounds > 0 && deleted > 0,
        "rounds {rounds}, deleted {deleted}, refused {refused}"
    );
}

#[test]
fn fs_race_recursive_delete_while_a_subdirectory_flips_to_an_outside_symlink() {
    let fx = Fixture::new();
    let n = AtomicUsize::new(0);
    let mut removed = 0;
    for _ in 0..300 {
        let t = fx.root.join("t");
        std::fs::create_dir_all(t.join("inner/sub")).unwrap();
        for i in 0..20 {
            std::fs::write(t.join(format!("inner/f{i}")), "x").unwrap();
        }
        under_attack(
            || {
                flip(
                    &t.join("inner"),
                    &fx.out.join("dir"),
                    n.fetch_add(1, Ordering::Relaxed),
                );
            },
            || {
                if let Ok(o) = fx.ws.delete(&DeleteRequest {
                    missing_ok: true,
                    ..rec("t")
                }) {
                    removed += u64::from(o.deleted);
                }
            },
        );
        assert!(fx.out.join("dir/x").exists(), "an outside file was deleted");
        let _ = std::fs::remove_file(t.join("inner"));
        let _ = std::fs::remove_dir_all(&t);
    }
    // Under a busy machine the attacker may win every round (each delete refused or racing
    // an empty tree); that is safe, so the liveness check is a quiet delete afterwards.
    eprintln!("removed {removed} entries under attack");
    let t = fx.root.join("t");
    std::fs::create_dir_all(t.join("inner/sub")).unwrap();
    std::fs::write(t.join("inner/f"), "x").unwrap();
    let quiet = fx.ws.delete(&rec("t")).unwrap();
    assert!(
        quiet.deleted && quiet.files == 1 && quiet.dirs == 3,
        "{quiet:?}"
    );
    assert!(!t.exists());
}

#[test]
fn disk_usage_counts_entries_and_allocated_bytes() {
    let fx = Fixture::new();
    let before = fx.ws.disk_usage(None).unwrap();
    assert_eq!(before.files, 0);
    fx.write("a/b/one.bin", &"x".repeat(1 << 20));
    for i in 0..50 {
        fx.write(&format!("many/{i}"), "");
    }
    // A hard link is the same bytes: counted once; a symlink's target is not walked into.
    std::fs::hard_link(fx.root.join("a/b/one.bin"), fx.root.join("a/link.bin")).unwrap();
    fx.symlink(&fx.out, "out-link");
    let after = fx.ws.disk_usage(None).unwrap();
    // a, a/b, a/b/one.bin, a/link.bin, many, 50 files, out-link
    assert_eq!(after.files, 56);
    assert!(
        after.bytes >= 1 << 20 && after.bytes < (2 << 20),
        "{after:?}"
    );
    // A bounded sample stops as soon as it is over and says so.
    let stop = DiskUsage {
        bytes: u64::MAX,
        files: 10,
    };
    let sample = fx.ws.disk_usage(Some(stop)).unwrap();
    assert!(sample.files == 11, "{sample:?}");
}

/// A kept measurement never outlives a change of what it measured: an entry created, removed
/// or moved out at any depth, a file truncated in place (no directory shows that), a directory
/// swapped for a symlink.
#[test]
fn a_disk_snapshot_no_longer_holds_once_the_workspace_changed() {
    let fx = Fixture::new();
    fx.write("a/b/c/deep.txt", "deep");
    fx.write("big.bin", &"x".repeat(1 << 20));
    let snap = fx.ws.disk_snapshot().unwrap();
    assert_eq!(snap.usage, fx.ws.disk_usage(None).unwrap());
    type Change<'a> = Box<dyn Fn(&Fixture) + 'a>;
    let changes: Vec<(&str, Change<'_>)> = vec![
        (
            "created deep",
            Box::new(|fx| fx.write("a/b/c/new.txt", "n")),
        ),
        (
            "removed deep",
            Box::new(|fx| std::fs::remove_file(fx.root.join("a/b/c/deep.txt")).unwrap()),
        ),
        (
            "moved out",
            Box::new(|fx| {
                std::fs::rename(fx.root.join("a/b/c/deep.txt"), fx.out.join("moved")).unwrap();
            }),
        ),
        (
            "truncated in place",
            Box::new(|fx| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(fx.root.join("big.bin"))
                    .unwrap()
                    .set_len(0)
                    .unwrap();
            }),
        ),
        (
            "swapped for a symlink",
            Box::new(|fx| {
                std::fs::rename(fx.root.join("a/b"), fx.out.join("b")).unwrap();
                fx.symlink(fx.out.join("b"), "a/b");
            }),
        ),
    ];
    for (what, change) in changes {
        let fx = Fixture::new();
        fx.write("a/b/c/deep.txt", "deep");
        fx.write("big.bin", &"x".repeat(1 << 20));
        let snap = fx.ws.disk_snapshot().unwrap();
        change(&fx);
        assert!(!fx.ws.still_holds(&snap), "{what}");
        // Cleanup for the fixture's check of `$OUT`.
        let _ = std::fs::remove_file(fx.out.join("moved"));
        let _ = std::fs::remove_dir_all(fx.out.join("b"));
    }
}

#[test]
fn the_policy_sees_the_entry_itself_never_what_a_final_link_points_to() {
    let fx = Fixture::new();
    fx.write("real/.git/config", "[core]\n");
    fx.symlink(fx.out.join("secret"), "out-link");
    fx.symlink("real/.git/config", "git-config-link");
    fx.symlink("real/.git", "g");
    // Following the link would leave the workspace: a write there is refused, a deletion is
    // of the link, which is inside.
    assert_reason(
        fx.ws.canonicalize_for_write(&wp("out-link")),
        Reason::PathOutsideWorkspace,
    );
    let c = fx.ws.canonicalize_entry(&wp("out-link")).unwrap();
    assert_eq!((c.relative.as_str(), c.exists), ("out-link", true));
    let c = fx.ws.canonicalize_entry(&wp("git-config-link")).unwrap();
    assert_eq!(c.relative, "git-config-link");
    // A link in the parent is followed: what the name lands on is checked.
    assert_reason(
        fx.ws.canonicalize_entry(&wp("g/config")),
        Reason::PathProtected,
    );
    let c = fx.ws.canonicalize_entry(&wp("real/../gone")).unwrap();
    assert_eq!((c.relative.as_str(), c.exists), ("gone", false));
    for root in [".", "./", "real/..", ""] {
        let r = WorkspacePath::try_from(root).and_then(|p| fx.ws.canonicalize_entry(&p));
        assert_reason(r, Reason::InvalidPath);
    }
    assert_reason(
        fx.ws.canonicalize_entry(&wp("../out/secret")),
        Reason::PathOutsideWorkspace,
    );
}
