//! Per-run cgroup v2 directories: the kill mechanism when PID namespaces are unavailable.
//!
//! The child moves itself into the run's cgroup before exec, so every descendant (including ones
//! that call `setsid` or double-fork) stays in it; `cgroup.kill` then kills them all at once.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// Distinguishes the cgroups of one executor process.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How long removal waits for killed processes to leave the cgroup.
const REMOVE_ATTEMPTS: u32 = 200;
const REMOVE_BACKOFF: Duration = Duration::from_millis(5);

/// One run's cgroup; killed and removed when dropped, if not removed before.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    dir: PathBuf,
    removed: bool,
}

impl RunCgroup {
    /// Creates a fresh cgroup under `parent` (the executor's own cgroup directory).
    pub(crate) fn create(parent: &Path) -> io::Result<Self> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("toolgate-run-{}-{id}", std::process::id()));
        std::fs::create_dir(&dir)?;
        Ok(RunCgroup {
            dir,
            removed: false,
        })
    }

    /// The `cgroup.procs` file the child writes `0` to in order to join.
    pub(crate) fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Sends `signal` to every process currently in the cgroup.
    pub(crate) fn signal_all(&self, signal: Signal) {
        let Ok(procs) = std::fs::read_to_string(self.procs_file()) else {
            return;
        };
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    /// SIGKILLs every process in the cgroup (and every one that would be forked meanwhile).
    pub(crate) fn kill(&self) {
        if std::fs::write(self.dir.join("cgroup.kill"), b"1").is_err() {
            // Kernels before 5.14 have no cgroup.kill: signal the members one by one.
            self.signal_all(Signal::KILL);
        }
    }

    /// Kills what is left and removes the directory once the kernel has emptied it.
    pub(crate) async fn remove(mut self) {
        self.kill();
        for _ in 0..REMOVE_ATTEMPTS {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => {
                    self.removed = true;
                    return;
                }
                // EBUSY while killed processes are still exiting.
                Err(_) => tokio::time::sleep(REMOVE_BACKOFF).await,
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed {
            self.kill();
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// The executor's own cgroup directory under the cgroup2 mount, from `/proc/self/cgroup`.
pub(crate) fn own_cgroup_dir(mount_point: &Path) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_owned()))?;
    Some(mount_point.join(path.trim_start_matches('/')))
}
