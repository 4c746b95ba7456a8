//! FS-RACE-01/02: an attacker thread keeps swapping files and directories for symlinks
//! to the outside while thousands of operations run. The fixture asserts on drop that
//! `$OUT` is byte-identical; every response is checked for outside content.

use crate::common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use toolgate_fs::*;

const OPS: usize = 5_000;

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

/// Replaces `path` with a symlink to `target`, atomically via rename or by remove+create.
fn swap_to_symlink(path: &Path, target: &Path, atomic: bool) {
    if atomic {
        let tmp = path.with_extension("swap");
        let _ = std::fs::remove_file(&tmp);
        let _ = std::os::unix::fs::symlink(target, &tmp);
        let _ = std::fs::rename(&tmp, path);
    } else {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_dir_all(path);
        let _ = std::os::unix::fs::symlink(target, path);
    }
}

#[test]
fn fs_race_01_read_while_a_file_flips_to_an_outside_symlink() {
    let fx = Fixture::new();
    let file = fx.root.join("readable.txt");
    let secret = fx.out.join("secret");
    std::fs::write(&file, "PUBLIC\n").unwrap();
    let flip = AtomicUsize::new(0);
    let (mut ok, mut refused) = (0, 0);
    let rounds = under_attack(
        || {
            let n = flip.fetch_add(1, Ordering::Relaxed);
            swap_to_symlink(&file, &secret, n.is_multiple_of(2));
            let _ = std::fs::remove_file(&file);
            let _ = std::fs::write(&file, "PUBLIC\n");
        },
        || {
            for _ in 0..OPS {
                match fx.ws.read(&ReadRequest::whole(wp("readable.txt"))) {
                    Ok(o) => {
                        assert_no_leak_bytes(&o.content);
                        ok += 1;
                    }
                    Err(e) => {
                        assert_no_leak(&e.to_string());
                        refused += 1;
                    }
                }
            }
        },
    );
    assert_eq!(ok + refused, OPS);
    assert!(rounds > 0, "the attacker never ran");
}

#[test]
fn fs_race_01_list_search_read_while_a_directory_flips_to_an_outside_symlink() {
    let fx = Fixture::new();
    let dir = fx.root.join("dir");
    let real = fx.root.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("x"), "PUBLIC\n").unwrap();
    let outdir = fx.out.join("dir");
    let flip = AtomicUsize::new(0);
    under_attack(
        || {
            let n = flip.fetch_add(1, Ordering::Relaxed);
            // dir -> outside, then dir as a real directory again.
            swap_to_symlink(&dir, &outdir, n.is_multiple_of(2));
            let _ = std::fs::remove_file(&dir);
            let _ = std::fs::create_dir(&dir);
            let _ = std::fs::write(dir.join("x"), "PUBLIC\n");
            let _ = std::fs::remove_file(dir.join("x"));
            let _ = std::fs::remove_dir(&dir);
            let _ = std::os::unix::fs::symlink("real", &dir);
        },
        || {
            for i in 0..OPS / 5 {
                let out = match i % 3 {
                    0 => format!(
                        "{:?}",
                        fx.ws
                            .read(&ReadRequest::whole(wp("dir/x")))
                            .map(|o| o.content)
                    ),
                    1 => format!(
                        "{:?}",
                        fx.ws.list(&ListRequest {
                            path: wp("."),
                            recursive: true,
                            max_depth: None,
                            max_entries: None,
                            include_hidden: true,
                        })
                    ),
                    _ => format!(
                        "{:?}",
                        fx.ws
                            .search(&SearchRequest::new(wp("."), "SENTINEL|PUBLIC"))
                    ),
                };
                assert_no_leak(&out);
                // Read content is shown as bytes by Debug; check those too.
                if let Ok(o) = fx.ws.read(&ReadRequest::whole(wp("dir/x"))) {
                    assert_no_leak_bytes(&o.content);
                }
            }
        },
    );
}

#[test]
fn fs_race_02_write_while_the_target_flips_to_an_outside_symlink() {
    let fx = Fixture::new();
    let race = fx.root.join("race");
    let secret = fx.out.join("secret");
    let flip = AtomicUsize::new(0);
    let mut written = 0;
    under_attack(
        || {
            let n = flip.fetch_add(1, Ordering::Relaxed);
            swap_to_symlink(&race, &secret, n.is_multiple_of(2));
            let _ = std::fs::remove_file(&race);
        },
        || {
            for _ in 0..OPS {
                let r = fx.ws.write(&WriteRequest {
                    path: wp("race"),
                    content: b"x".to_vec(),
                    expected_sha256: None,
                    create_new: false,
                    create_parents: false,
                });
                if let Err(e) = r {
                    assert_no_leak(&e.to_string());
                } else {
                    written += 1;
                }
            }
        },
    );
    assert!(written > 0);
    assert_eq!(
        std::fs::read_to_string(fx.out.join("secret")).unwrap(),
        format!("{SENTINEL}\n")
    );
}

#[test]
fn fs_race_02_write_and_mkdir_while_a_parent_flips_to_an_outside_symlink() {
    let fx = Fixture::new();
    let d = fx.root.join("d");
    let flip = AtomicUsize::new(0);
    under_attack(
        || {
            let n = flip.fetch_add(1, Ordering::Relaxed);
            swap_to_symlink(&d, &fx.out, n.is_multiple_of(2));
            let _ = std::fs::remove_file(&d);
            let _ = std::fs::create_dir(&d);
        },
        || {
            for i in 0..OPS / 2 {
                let _ = fx.ws.write(&WriteRequest {
                    path: wp("d/f"),
                    content: b"x".to_vec(),
                    expected_sha256: None,
                    create_new: false,
                    create_parents: i.is_multiple_of(2),
                });
                let _ = fx.ws.mkdir(&MkdirRequest {
                    path: wp("d/sub/deeper"),
                    parents: true,
                });
                // Nothing may have landed outside; only then is cleaning up through a
                // possibly-swapped `d` harmless (and it never hides a leak).
                assert!(!fx.out.join("f").exists() && !fx.out.join("sub").exists());
                let _ = std::fs::remove_dir_all(d.join("sub"));
                let _ = std::fs::remove_file(d.join("f"));
            }
        },
    );
    // The drop check asserts `$OUT` gained no `f` and no `sub`.
}
