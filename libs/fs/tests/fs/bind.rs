//! The files a run names, bound by content into its approval.

use std::os::unix::fs::PermissionsExt;

use sha2::Digest as _;
use toolgate_fs::{BOUND_HASH_CAP, MAX_BOUND_FILES};

use crate::common::Fixture;

fn sha(content: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(content))
}

#[test]
fn a_rewritten_script_binds_a_different_digest() {
    let fx = Fixture::new();
    fx.write("build.sh", "cargo fmt --check\n");
    let before = fx.ws.bound_files(".", ["sh", "build.sh"]);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before["build.sh"], sha(b"cargo fmt --check\n"));
    fx.write("build.sh", "rm -rf src\n");
    let after = fx.ws.bound_files(".", ["sh", "build.sh"]);
    assert_eq!(after["build.sh"], sha(b"rm -rf src\n"));
}

#[test]
fn words_resolve_from_the_cwd_beneath_the_root_only() {
    let fx = Fixture::new();
    fx.write("sub/x.py", "print(1)\n");
    fx.write("top.mk", "all:\n");
    fx.write("sub/dir/keep", "");
    fx.symlink("../out/secret", "escape");
    fx.symlink("sub/x.py", "alias.py");
    let out = fx.out.join("secret");
    let abs = format!("{}/top.mk", fx.ws_str());
    let bound = fx.ws.bound_files(
        "sub",
        [
            "python3",
            "-u",
            "x.py",
            "../top.mk",
            "dir",
            "../escape",
            "../alias.py",
            "missing.sh",
            out.to_str().unwrap(),
            abs.as_str(),
            "--file=../top.mk",
        ],
    );
    // The symlink and the absolute spelling land on the canonical names, once each; the
    // escape, the directory, the missing file and the outside path bind nothing.
    let keys: Vec<_> = bound.keys().map(String::as_str).collect();
    assert_eq!(keys, ["sub/x.py", "top.mk"], "{bound:?}");
}

#[test]
fn denied_files_are_never_hashed() {
    let fx = Fixture::with(|c| c.deny = vec!["**/.env".into()]);
    fx.write(".env", "TOKEN=1\n");
    fx.write("run.sh", "echo\n");
    let bound = fx.ws.bound_files(".", ["sh", ".env", "run.sh"]);
    assert_eq!(bound.keys().collect::<Vec<_>>(), ["run.sh"]);
}

#[test]
fn large_unreadable_and_many_files_are_bound_within_bounds() {
    let fx = Fixture::new();
    let big = vec![b'a'; BOUND_HASH_CAP as usize + 10];
    std::fs::write(fx.root.join("big.sh"), &big).unwrap();
    fx.write("locked.sh", "echo\n");
    std::fs::set_permissions(
        fx.root.join("locked.sh"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    let bound = fx.ws.bound_files(".", ["big.sh", "locked.sh"]);
    let prefix = format!(
        "prefix:{BOUND_HASH_CAP}:{}:size:{}:ctime:",
        sha(&big[..BOUND_HASH_CAP as usize]),
        big.len()
    );
    assert!(bound["big.sh"].starts_with(&prefix), "{bound:?}");
    // Root reads a mode-000 file; anyone else binds its size and ctime.
    let locked = &bound["locked.sh"];
    assert!(
        *locked == sha(b"echo\n") || locked.starts_with("unreadable:size:5:ctime:"),
        "{locked}"
    );

    let names: Vec<String> = (0..MAX_BOUND_FILES + 5).map(|i| format!("f{i}")).collect();
    for n in &names {
        fx.write(n, n);
    }
    let bound = fx.ws.bound_files(".", names.iter().map(String::as_str));
    assert_eq!(bound.len(), MAX_BOUND_FILES);
}
