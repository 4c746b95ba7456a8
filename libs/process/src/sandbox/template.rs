//! The runner's template: the fixed part of every run's view, built once into a mount
//! namespace that each run copies (`CLONE_NEWNS` after entering it) instead of building the
//! view from an empty root every time.
//!
//! A run of the template pays for what must be its own: a fresh `/tmp`, `/dev/shm` and `HOME`,
//! a `/proc` of its PID namespace, its workspace and the policy's masks in it. It no longer
//! mounts a staging root, binds the system directories, builds `/dev`, pivots, or detaches the
//! host (the detach alone waits for an RCU grace period).
//!
//! Two namespaces, both made by one helper child in the runner's user namespace:
//! - `host`: a private copy of the executor's mount namespace. A run's first child enters it to
//!   copy the workspace out (`open_tree`), which an unprivileged executor may not do in its own
//!   namespace; the copy must be the directory the executor resolved (same device and inode)
//!   or the run is refused.
//! - `view`: the fixed view, with its root, `/dev` and the mount points sealed read-only, so
//!   nothing one run does in it is seen by another. The host is detached from it; a `proc`
//!   stays mounted under an empty directory at `/.toolgate/proc`, unreachable by any path,
//!   because the kernel lets a user namespace mount `proc` only beside a fully visible one.
//!
//! The template depends on the host's mount table (what the binds copied, and what `host` can
//! reach): it is rebuilt before the next run whenever the executor's mount table changed since
//! it was made (`/proc/self/mountinfo` polls readable then). A run that needs what the
//! template cannot give (a session's namespaces, a workspace whose mount point the sealed root
//! lacks) gets today's whole per-run build, and so does every run when the template cannot be
//! made: the same view either way, never a weaker one.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::sys::sandbox::MountOp;

/// A built template: the descriptors of its two mount namespaces.
#[derive(Debug)]
pub(crate) struct Template {
    pub host: OwnedFd,
    pub view: OwnedFd,
}

/// What a template is built from, and the current one.
#[derive(Debug)]
pub(super) struct Templates {
    userns: Arc<OwnedFd>,
    stage: CString,
    ops: Vec<MountOp>,
    /// The workspace whose mount point the template's root has (the configured one).
    prepared: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Arc<Template>>,
    /// `/proc/self/mountinfo`, opened when `current` was built: it polls with `POLLPRI` once
    /// the executor's mount table changes.
    mountinfo: Option<std::fs::File>,
    /// Whether a build was tried (a failed one is retried only after the mount table changed).
    tried: bool,
}

impl Templates {
    pub(super) fn new(
        userns: Arc<OwnedFd>,
        stage: CString,
        ops: Vec<MountOp>,
        prepared: Option<PathBuf>,
    ) -> Templates {
        Templates {
            userns,
            stage,
            ops,
            prepared,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether a run in `workspace` can use the template: the workspace's mount point is in a
    /// run's own `/tmp` (made per run) or is the one the template prepared.
    pub(super) fn fits(&self, workspace: &Path) -> bool {
        let tmp = Path::new("/tmp");
        (workspace.starts_with(tmp) && workspace != tmp)
            || self.prepared.as_deref() == Some(workspace)
    }

    /// The current template, rebuilt first when the host's mount table changed since it was
    /// made; `None` when it cannot be made.
    pub(super) fn current(&self) -> Option<Arc<Template>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let changed = state
            .mountinfo
            .as_ref()
            .is_none_or(|f| crate::sys::mount_table_changed(f.as_fd()));
        if changed || !state.tried {
            state.tried = true;
            // Opened before the build: a change during it shows at the next run.
            state.mountinfo = std::fs::File::open("/proc/self/mountinfo").ok();
            state.current = self.build().ok().map(Arc::new);
        }
        state.current.clone()
    }

    fn build(&self) -> io::Result<Template> {
        let (host, view) =
            crate::sys::new_template_namespaces(self.userns.as_fd(), &self.stage, &self.ops)?;
        Ok(Template { host, view })
    }
}
