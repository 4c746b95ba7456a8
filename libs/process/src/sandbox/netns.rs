//! The pools of ready network namespaces that confined runs enter: plain ones (only their
//! loopback) for runs without network, gated ones (whose only way out is the executor's
//! egress gate) for networked runs.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::egress::GateSockets;
use crate::sandbox::netlink::GatedPlan;

/// Network namespaces kept ready for runs, per pool.
pub(super) const NET_POOL_TARGET: usize = 4;

/// A gated network namespace and the gate's sockets inside it.
#[derive(Debug)]
pub(crate) struct Gated {
    pub ns: OwnedFd,
    pub sockets: GateSockets,
}

/// Namespaces created ahead of the runs that take them by a thread of their own: creating a
/// plain one costs ~0.4 ms, a gated one more, which a run start then does not pay. Each is
/// used by exactly one run (a run's loopback is its own) and dies with it.
pub(crate) struct NetPool<T> {
    ready: Mutex<Vec<T>>,
    wake: Condvar,
}

impl<T> std::fmt::Debug for NetPool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetPool").finish_non_exhaustive()
    }
}

impl NetPool<OwnedFd> {
    /// Plain namespaces (only their loopback, up) owned by `userns`.
    pub(super) fn plain(userns: Arc<OwnedFd>, target: usize) -> Arc<Self> {
        Self::start("toolgate-netns", target, move || {
            crate::sys::new_netns(userns.as_fd())
        })
    }
}

impl NetPool<Gated> {
    /// Gated namespaces owned by `userns`, programmed by `plan`.
    pub(super) fn gated(userns: Arc<OwnedFd>, plan: GatedPlan, target: usize) -> Arc<Self> {
        Self::start("toolgate-gatedns", target, move || {
            make_gated(&userns, &plan)
        })
    }
}

/// One gated namespace, made now.
pub(super) fn make_gated(userns: &OwnedFd, plan: &GatedPlan) -> io::Result<Gated> {
    crate::sys::new_gated_netns(userns.as_fd(), plan).map(|(ns, sockets)| Gated { ns, sockets })
}

impl<T: Send + 'static> NetPool<T> {
    fn start(
        name: &str,
        target: usize,
        make: impl FnMut() -> io::Result<T> + Send + 'static,
    ) -> Arc<Self> {
        let pool = Arc::new(NetPool {
            ready: Mutex::new(Vec::with_capacity(target)),
            wake: Condvar::new(),
        });
        let weak: Weak<NetPool<T>> = Arc::downgrade(&pool);
        // The thread is detached and ends once the pool is dropped. If it cannot be spawned the
        // pool stays empty and every run creates its own namespace, as without a pool.
        let _ = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || refill(&weak, make, target));
        pool
    }

    /// A ready namespace, if any; wakes the refill thread.
    pub(super) fn take(&self) -> Option<T> {
        let item = self.ready.lock().ok()?.pop();
        self.wake.notify_one();
        item
    }
}

/// The nice value of the refill threads.
const REFILL_NICE: i32 = 19;

/// Keeps `target` namespaces ready until the pool is dropped.
fn refill<T>(pool: &Weak<NetPool<T>>, mut make: impl FnMut() -> io::Result<T>, target: usize) {
    // The lowest priority (per thread on Linux; the helper children it clones inherit it):
    // making namespaces ahead takes only CPU the runs leave. At the default priority the
    // refill that a run's take starts competed with that run for the cores, and a sandboxed
    // run's p50 was 0.1-0.3 ms longer on a 2-core machine. At nice 19 alone the refill still
    // preempted a starting run's children when it woke (one run in five, in a scheduler
    // trace): `SCHED_IDLE` never preempts a thread of any other policy. When the runs leave
    // no CPU the pool runs dry and each run makes its own namespace at its own priority, as
    // without a pool.
    let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), REFILL_NICE);
    let _ = crate::sys::schedule_idle();
    loop {
        let Some(p) = pool.upgrade() else { return };
        let short = p.ready.lock().map_or(0, |r| target.saturating_sub(r.len()));
        if short == 0 {
            if let Ok(guard) = p.ready.lock() {
                let _ = p.wake.wait_timeout(guard, Duration::from_millis(250));
            }
            continue;
        }
        match make() {
            Ok(item) => {
                if let Ok(mut r) = p.ready.lock() {
                    r.push(item);
                }
            }
            // The kernel refuses for now (a namespace limit): runs create their own, which
            // fails the same visible way; try again later.
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nice value and the scheduling policy of this process's thread named `name`, once
    /// it has one.
    fn priority_of(name: &str) -> Option<(i32, u32)> {
        for entry in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = entry.ok()?.path();
            if std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == name) {
                let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
                // Fields 19 and 41 of stat(5), the 17th and 39th after the command's closing
                // parenthesis.
                let (_, rest) = stat.rsplit_once(')')?;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                return Some((fields.get(16)?.parse().ok()?, fields.get(38)?.parse().ok()?));
            }
        }
        None
    }

    #[test]
    fn the_refill_thread_runs_at_the_lowest_priority() {
        let pool = NetPool::start("tg-nice-probe", 1, || Ok(()));
        let want = Some((REFILL_NICE, libc::SCHED_IDLE as u32));
        let mut seen = None;
        for _ in 0..400 {
            seen = priority_of("tg-nice-probe");
            if seen == want {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(pool);
        assert_eq!(seen, want, "the refill thread's nice value and policy");
    }
}
