//! Test fixture: a workspace root `$WS` next to an outside sentinel tree `$OUT`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use toolgate_core::{Reason, ReasonedError};
use toolgate_fs::{Workspace, WorkspaceConfig, WorkspacePath};

/// The content every file outside the workspace holds.
pub(crate) const SENTINEL: &str = "OUTSIDE-SENTINEL";

/// Content, mode, mtime of every entry under `$OUT`.
type Snapshot = BTreeMap<PathBuf, (String, Vec<u8>, u32, i64, i64)>;

pub(crate) struct Fixture {
    /// Holds the trees until the fixture is gone.
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub out: PathBuf,
    pub ws: Workspace,
    snapshot: Snapshot,
}

impl Fixture {
    pub(crate) fn new() -> Fixture {
        Fixture::with(|_| {})
    }

    /// Builds the sentinel tree, runs `setup` on `$WS` (as a shell `setup:` would), then
    /// opens the workspace with `configure` applied.
    pub(crate) fn with(configure: impl FnOnce(&mut WorkspaceConfig)) -> Fixture {
        Fixture::setup(|_, _| {}, configure)
    }

    pub(crate) fn setup(
        setup: impl FnOnce(&Path, &Path),
        configure: impl FnOnce(&mut WorkspaceConfig),
    ) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let out = tmp.path().join("out");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir_all(out.join("ssh")).unwrap();
        std::fs::create_dir_all(out.join("dir")).unwrap();
        for f in ["secret", "t", "ssh/id_ed25519", "dir/x"] {
            std::fs::write(out.join(f), format!("{SENTINEL}\n")).unwrap();
        }
        std::fs::set_permissions(out.join("secret"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        setup(&root, &out);
        let mut config = WorkspaceConfig::new(&root);
        configure(&mut config);
        let ws = Workspace::open(config).unwrap();
        let snapshot = snapshot(&out);
        Fixture {
            _tmp: tmp,
            root,
            out,
            ws,
            snapshot,
        }
    }

    /// `$WS` as a string, as a caller would spell it in an absolute path.
    pub(crate) fn ws_str(&self) -> String {
        self.root.to_str().unwrap().to_owned()
    }

    pub(crate) fn write(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, content).unwrap();
    }

    pub(crate) fn symlink(&self, target: impl AsRef<Path>, rel: &str) {
        std::os::unix::fs::symlink(target, self.root.join(rel)).unwrap();
    }

    /// `$OUT` is byte-identical to how it was after setup.
    pub(crate) fn assert_out_intact(&self) {
        assert_eq!(
            snapshot(&self.out),
            self.snapshot,
            "the outside sentinel tree changed"
        );
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        // Every case ends with the invariant, whatever it asserted itself.
        if !std::thread::panicking() {
            self.assert_out_intact();
        }
    }
}

fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            let content = if md.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            if md.is_dir() {
                stack.push(e.path());
            }
            out.insert(
                e.path().strip_prefix(dir).unwrap().to_path_buf(),
                (
                    format!("{:?}", md.file_type()),
                    content,
                    md.mode(),
                    md.mtime(),
                    md.mtime_nsec(),
                ),
            );
        }
    }
    out
}

pub(crate) fn wp(s: &str) -> WorkspacePath {
    WorkspacePath::try_from(s).unwrap()
}

/// Asserts the error's reason, and that nothing outside leaked into it.
#[track_caller]
pub(crate) fn assert_reason<T: Debug>(
    r: Result<T, toolgate_fs::Error>,
    reason: Reason,
) -> toolgate_fs::Error {
    match r {
        Ok(v) => panic!("expected {reason}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.reason(), reason, "wrong reason for error: {e}");
            assert_no_leak(&format!("{e} {:?}", e.metadata()));
            e
        }
    }
}

#[track_caller]
pub(crate) fn assert_no_leak(s: &str) {
    assert!(!s.contains(SENTINEL), "outside content leaked: {s}");
}

#[track_caller]
pub(crate) fn assert_no_leak_bytes(b: &[u8]) {
    assert!(
        !b.windows(SENTINEL.len()).any(|w| w == SENTINEL.as_bytes()),
        "outside content leaked"
    );
}
