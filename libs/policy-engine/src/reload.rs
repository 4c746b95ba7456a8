//! Reloading a policy file on change or SIGHUP without ever leaving an invalid one in force.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, mpsc};
use std::time::{Duration, SystemTime};

use crate::document::Error;
use crate::engine::Policy;

/// A policy loaded from a file, replaceable at runtime.
///
/// Readers take an `Arc<Policy>` snapshot per classification; a reload swaps the pointer. A
/// reload that fails leaves the previous policy in force and returns the error for logging.
#[derive(Debug)]
pub struct PolicyFile {
    path: PathBuf,
    current: RwLock<Arc<Policy>>,
    stamp: Mutex<Option<(SystemTime, u64)>>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

impl PolicyFile {
    /// Loads `path`; fails if the first version is invalid.
    pub fn load(path: impl Into<PathBuf>) -> Result<PolicyFile, Error> {
        let path = path.into();
        let before = stamp(&path);
        let policy = Policy::load(&path)?;
        Ok(PolicyFile {
            path,
            current: RwLock::new(Arc::new(policy)),
            stamp: Mutex::new(before),
        })
    }

    /// The file this policy comes from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The policy in force.
    pub fn current(&self) -> Arc<Policy> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Re-reads the file (SIGHUP). On success returns whether the version changed; on error
    /// the old policy stays in force.
    pub fn reload(&self) -> Result<bool, Error> {
        let before = stamp(&self.path);
        *self.stamp.lock().unwrap_or_else(PoisonError::into_inner) = before;
        let policy = match Policy::load(&self.path) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(
                    path = %self.path.display(),
                    error = %e,
                    version = %self.current().version(),
                    "policy reload failed; the previous version stays in force"
                );
                return Err(e);
            }
        };
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let changed = current.version() != policy.version();
        if changed {
            tracing::info!(
                path = %self.path.display(),
                from = %current.version(),
                to = %policy.version(),
                rules = policy.rule_count(),
                "policy reloaded"
            );
            *current = Arc::new(policy);
        }
        Ok(changed)
    }

    /// Reloads only if the file's modification time or size changed since the last load.
    pub fn reload_if_changed(&self) -> Result<bool, Error> {
        let now = stamp(&self.path);
        if now == *self.stamp.lock().unwrap_or_else(PoisonError::into_inner) {
            return Ok(false);
        }
        self.reload()
    }

    /// Polls the file every `interval` on a background thread, reloading on change and
    /// passing every outcome to `on_result` (log errors there). Stops when the returned
    /// [`Watcher`] is dropped.
    pub fn watch(
        self: &Arc<Self>,
        interval: Duration,
        on_result: impl Fn(Result<bool, Error>) + Send + 'static,
    ) -> Watcher {
        let (stop, stopped) = mpsc::channel::<()>();
        let file = Arc::clone(self);
        let handle = std::thread::spawn(move || {
            // The channel doubles as the timer: a message or a disconnect ends the loop.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                match file.reload_if_changed() {
                    Ok(false) => {}
                    other => on_result(other),
                }
            }
        });
        Watcher {
            stop: Some(stop),
            handle: Some(handle),
        }
    }
}

/// Stops the polling thread of [`PolicyFile::watch`] when dropped.
#[derive(Debug)]
pub struct Watcher {
    stop: Option<mpsc::Sender<()>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
