//! The pool of ready network namespaces that confined runs without network enter.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// Network namespaces kept ready for runs.
pub(super) const NET_POOL_TARGET: usize = 4;

/// Network namespaces with only their loopback (up), created ahead of the runs that take them
/// by a thread of their own: creating one costs ~0.4 ms, which a run start then does not pay.
/// Each is used by exactly one run (a run's loopback is its own) and dies with it.
#[derive(Debug)]
pub(crate) struct NetPool {
    ready: Mutex<Vec<OwnedFd>>,
    wake: Condvar,
}

impl NetPool {
    pub(super) fn start(userns: Arc<OwnedFd>, target: usize) -> Arc<NetPool> {
        let pool = Arc::new(NetPool {
            ready: Mutex::new(Vec::with_capacity(target)),
            wake: Condvar::new(),
        });
        let weak: Weak<NetPool> = Arc::downgrade(&pool);
        // The thread is detached and ends once the pool is dropped. If it cannot be spawned the
        // pool stays empty and every run creates its own namespace, as without a pool.
        let _ = std::thread::Builder::new()
            .name("toolgate-netns".into())
            .spawn(move || refill(&weak, &userns, target));
        pool
    }

    /// A ready namespace, if any; wakes the refill thread.
    pub(super) fn take(&self) -> Option<OwnedFd> {
        let fd = self.ready.lock().ok()?.pop();
        self.wake.notify_one();
        fd
    }
}

/// Keeps `target` namespaces ready until the pool is dropped.
fn refill(pool: &Weak<NetPool>, userns: &OwnedFd, target: usize) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        let short = p.ready.lock().map_or(0, |r| target.saturating_sub(r.len()));
        if short == 0 {
            if let Ok(guard) = p.ready.lock() {
                let _ = p.wake.wait_timeout(guard, Duration::from_millis(250));
            }
            continue;
        }
        match crate::sys::new_netns(std::os::fd::AsFd::as_fd(userns)) {
            Ok(fd) => {
                if let Ok(mut r) = p.ready.lock() {
                    r.push(fd);
                }
            }
            // The kernel refuses for now (a namespace limit): runs create their own, which
            // fails the same visible way; try again later.
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}
