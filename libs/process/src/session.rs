//! A session sandbox: the namespaces the confined runs of one agent session share, so that a
//! server one run starts answers the next run of the same session, and files left in `/tmp`
//! are there for it, while every run keeps the isolation that is not about sharing.
//!
//! [`Runner::session_namespaces`](crate::Runner::session_namespaces) makes a session's set;
//! [`RunSpec::set_session`](crate::RunSpec::set_session) puts a run in it. What a confined run
//! of a session shares and what stays its own:
//!
//! | | shared with the session | the run's own |
//! |---|---|---|
//! | network | non-networked profiles: the session's namespace (only its loopback, up) | networked profiles: the run's gated namespace |
//! | IPC | the session's namespace (System V objects, POSIX message queues) | |
//! | `/tmp` | the session's tmpfs, capped at `sandbox.tmp_bytes` and `sandbox.tmpfs_inodes` | |
//! | PID | | its own namespace: it ends, and is killed, alone |
//! | mounts | | its own namespace and view; its `HOME`, `/dev/shm`, `/proc` |
//! | limits | | its own cgroup, rlimits and timeout |
//!
//! A networked profile's run keeps its own gated network namespace even in a session: the
//! egress gate attributes every connection to the run whose namespace it came from (the gate's
//! sockets live in that namespace and the run's decision governs them), which a namespace
//! shared by several runs could not do. Such a run therefore cannot reach a server a
//! non-networked run of its session started, nor the other way round.
//!
//! Unconfined runs (an unconfined profile, or the default profile's unconfined fallback) have
//! no namespaces to share and ignore the session: they run exactly as without one. A run
//! without a session is unchanged and pays nothing for this module.
//!
//! # How it is built
//!
//! Everything is made by short-lived helper children in the runner's user namespace (the one
//! every confined run enters), so the executor itself never moves into a namespace and it all
//! works for an unprivileged executor (uid ≠ 0, with user namespaces):
//! - the network namespace is a plain one from the runner's pool (or made on the spot);
//! - one helper `unshare`s a mount and an IPC namespace together, makes every mount private,
//!   mounts the capped tmpfs on a directory the runner created empty at startup
//!   (`toolgate-sessions-<pid>-*` beside the runs' homes; each session mounts on the same
//!   directory, each in its own mount namespace, so the host never sees any of them) and
//!   hands back both namespaces;
//! - a run's first child enters the session's mount and IPC namespaces (after the runner's
//!   user namespace and the network namespace) and clones the run with `CLONE_NEWNS` but not
//!   `CLONE_NEWIPC`: the run's mount namespace is a private copy of the session's, where the
//!   session's tmpfs is mounted, and its view binds that tmpfs at `/tmp` where a run without
//!   a session gets a fresh tmpfs.
//!
//! The tmpfs lives as long as a mount namespace holds it: the session's (whose descriptor
//! this value keeps) and the views of its runs still in flight. Dropping the last clone of
//! [`SessionNamespaces`] once its runs have ended releases the namespaces, the loopback with
//! whatever still listened on it, and the `/tmp` contents. Its pages are charged to the memory
//! cgroup of the run that wrote them and then to the runs' parent cgroup, so they count against
//! the runs' memory budget; bounding the number of sessions is the session layer's business.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A session's shared namespaces; cheap to clone (an `Arc` inside). Dropping the last clone
/// releases them, and the session's `/tmp` contents go with them. Made by
/// [`Runner::session_namespaces`](crate::Runner::session_namespaces); only runs of that runner
/// can use it.
#[derive(Clone)]
pub struct SessionNamespaces(pub(crate) Arc<Shared>);

impl fmt::Debug for SessionNamespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionNamespaces")
            .field("confined", &self.0.confined.is_some())
            .finish_non_exhaustive()
    }
}

/// What a session holds.
#[derive(Debug)]
pub(crate) struct Shared {
    /// `None` when the runner has no user namespace (no confined run can start there, and an
    /// unconfined one ignores the session).
    pub(crate) confined: Option<Confined>,
}

/// The namespaces of a session on a runner that confines runs.
#[derive(Debug)]
pub(crate) struct Confined {
    /// The user namespace of the runner that made them: a run of another runner is refused.
    pub(crate) userns: Arc<OwnedFd>,
    /// A plain network namespace (only its loopback, up), for non-networked profiles; `None`
    /// when this runner has no non-networked confined profile.
    pub(crate) netns: Option<OwnedFd>,
    /// The mount namespace with the session's `/tmp` mounted on `dir`.
    pub(crate) mnt: OwnedFd,
    /// The IPC namespace.
    pub(crate) ipc: OwnedFd,
    /// Where the `/tmp` is mounted in `mnt`; kept on the host as long as the session lives.
    pub(crate) dir: Arc<SessionDir>,
}

/// The empty host directory every session of a runner mounts its `/tmp` on (each in its own
/// mount namespace). Removed once the runner and every session of it are gone: removing a
/// mount point detaches the mounts on it in every other namespace, so it must outlive them.
#[derive(Debug)]
pub(crate) struct SessionDir(PathBuf);

/// The name prefix of session mount points; the owner's pid follows it.
pub(crate) const SESSION_DIR_PREFIX: &str = "toolgate-sessions-";

impl SessionDir {
    /// A new empty directory (mode 0700) in `parent` (else the system temporary directory).
    pub(crate) fn create(parent: Option<&Path>) -> std::io::Result<SessionDir> {
        let mut builder = tempfile::Builder::new();
        // The owner's pid is in the name, so a later runner can tell a dead one's leftover.
        let prefix = format!("{SESSION_DIR_PREFIX}{}-", std::process::id());
        builder
            .prefix(&prefix)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
        match parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map(|d| SessionDir(d.keep()))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        // Only ever mounted on inside sessions' own mount namespaces, so it is empty.
        let _ = std::fs::remove_dir(&self.0);
    }
}
