//! The walk that prepares a run's view: what it hides, binds and pins, its cache of unchanged
//! directories, and the after-run audit of the protected set.

use std::path::{Path, PathBuf};

use toolgate_core::IntegrityChange;
use toolgate_fs::{HiddenPaths, Workspace, WorkspaceConfig};

fn workspace(root: &Path) -> Workspace {
    let mut config = WorkspaceConfig::new(root);
    config.deny = vec!["**/.env".to_owned()];
    Workspace::open(config).unwrap()
}

fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v
}

/// A directory the cache remembers (listed more than a second after it last changed) is
/// listed again as soon as an entry appears in it, is renamed away, or the directory is
/// swapped for another: its ctime or its inode moves.
#[test]
fn the_walk_cache_never_hides_a_change() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::create_dir_all(root.join("c")).unwrap();
    std::fs::write(root.join("a/b/f.txt"), "x").unwrap();
    // Old enough to be cached: the cache refuses directories changed in the last second.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let ws = workspace(root);
    let hidden = HiddenPaths::none();
    let first = ws.run_masks(&hidden).unwrap();
    assert!(first.hidden_files.is_empty());
    assert_eq!(
        ws.run_masks(&hidden).unwrap(),
        first,
        "a warm walk sees the same"
    );

    std::fs::write(root.join("a/b/.env"), "S=1").unwrap();
    let m = ws.run_masks(&hidden).unwrap();
    assert_eq!(m.hidden_files, vec![PathBuf::from("a/b/.env")]);
    assert_eq!(
        sorted(m.pinned),
        vec![PathBuf::from("a"), PathBuf::from("a/b")]
    );

    // The directory swapped for another holding a secret under the same name.
    std::fs::create_dir_all(root.join("x")).unwrap();
    std::fs::write(root.join("x/.env"), "S=2").unwrap();
    std::fs::rename(root.join("c"), root.join("c-old")).unwrap();
    std::fs::rename(root.join("x"), root.join("c")).unwrap();
    let m = ws.run_masks(&hidden).unwrap();
    assert_eq!(
        sorted(m.hidden_files),
        vec![PathBuf::from("a/b/.env"), PathBuf::from("c/.env")]
    );

    // A protected path created in a cached directory is found by the audit and removed.
    std::fs::create_dir_all(root.join("a/b/.vscode")).unwrap();
    std::fs::write(root.join("a/b/.vscode/tasks.json"), "{}").unwrap();
    let found = ws.audit_run(&m.snapshot, &hidden, true).unwrap().violations;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, "a/b/.vscode");
    assert_eq!(found[0].change, IntegrityChange::Created);
    assert!(found[0].reverted);
    assert!(!root.join("a/b/.vscode").exists());
}

/// `.git` is pinned, and what git obeys in it (present ones) is bound read-only and audited.
/// (Unreadable directories are covered end to end with an unprivileged executor.)
#[test]
fn git_is_pinned_with_what_it_obeys_bound() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".git/commondir"), "x\n").unwrap();
    let ws = workspace(root);
    let m = ws.run_masks(&HiddenPaths::none()).unwrap();
    assert_eq!(
        sorted(m.protected.clone()),
        vec![
            PathBuf::from(".git/commondir"),
            PathBuf::from(".git/config"),
            PathBuf::from(".git/hooks")
        ]
    );
    assert_eq!(m.pinned, vec![PathBuf::from(".git")]);
    assert!(m.snapshot.contains(Path::new(".git/config")));
}

/// A unix socket a host process listens on in the workspace is masked in a run's view like a
/// hidden file (it would reach past the run's network namespace); the cache sees one appear.
#[test]
fn a_host_unix_socket_in_the_workspace_is_masked() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    let ws = workspace(root);
    let hidden = HiddenPaths::none();
    assert!(ws.run_masks(&hidden).unwrap().hidden_files.is_empty());
    let _server = std::os::unix::net::UnixListener::bind(root.join("tmp/app.sock")).unwrap();
    let m = ws.run_masks(&hidden).unwrap();
    assert_eq!(m.hidden_files, vec![PathBuf::from("tmp/app.sock")]);
    assert_eq!(m.pinned, vec![PathBuf::from("tmp")]);
}
