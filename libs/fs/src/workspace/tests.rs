//! Unit tests of spelling checks, the default protected globs and request caps.

use super::request::foreign_spelling;
use super::rules::{build_globs, spelled};
use super::*;

#[test]
fn spelled_visits_every_path_the_spelling_passes_through() {
    let visits = |p: &str| {
        let mut v = Vec::new();
        spelled(Path::new(p), |q| {
            v.push(q.to_string_lossy().into_owned());
            false
        });
        v
    };
    assert_eq!(visits("a/./b/../c"), ["a", "a/b", "a/c"]);
    assert_eq!(
        visits(".codex/../../.codex/x"),
        [".codex", ".codex", ".codex/x"]
    );
}

#[test]
fn foreign_spellings_are_recognised() {
    for p in [
        "C:\\Users\\me\\x.txt",
        "c:/x",
        "c:",
        "c:d",
        "Z:\\",
        "\\\\server\\share\\x",
        "\\\\?\\C:\\x",
        "\\\\.\\pipe\\x",
        "\\??\\C:\\x",
    ] {
        assert!(foreign_spelling(p, true).is_some(), "{p}");
        assert!(foreign_spelling(p, false).is_some(), "{p}");
    }
    for p in ["src\\main.rs", "a\\ b", "\\x"] {
        assert!(foreign_spelling(p, false).is_some(), "{p}");
        assert!(foreign_spelling(p, true).is_none(), "{p}");
    }
    for p in [
        "src/main.rs",
        "ab:/x",
        "./c:/x",
        "./c:d",
        "/abs/c:/x",
        ".",
        "1:x",
    ] {
        assert!(foreign_spelling(p, false).is_none(), "{p}");
    }
}

#[test]
fn default_protected_globs_match_at_the_root_and_below() {
    let set = build_globs(
        "protected",
        &DEFAULT_PROTECTED
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    for p in [
        ".git",
        ".git/config",
        "a/b/.git/hooks/x",
        ".env",
        "x/.env",
        "k.pem",
        "a/id.key",
        ".codex",
        ".codex/config.toml",
        "a/.cursor/rules",
        ".gitattributes",
        "vendor/x/.gitmodules",
        ".jj/repo",
    ] {
        assert!(set.is_match(p), "{p}");
    }
    for p in [
        "src/main.rs",
        ".github/x",
        "env",
        "a.pem.txt",
        ".gitignore",
        "codex/x",
    ] {
        assert!(!set.is_match(p), "{p}");
    }
}

#[test]
fn workspace_is_shareable_across_blocking_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Workspace>();
}

#[test]
fn caps_refuse_zero_and_above_max() {
    assert_eq!(cap("x", None, 5usize, 10).unwrap(), 5);
    assert_eq!(cap("x", Some(7usize), 5, 10).unwrap(), 7);
    assert!(cap("x", Some(0usize), 5, 10).is_err());
    assert!(cap("x", Some(11usize), 5, 10).is_err());
}
