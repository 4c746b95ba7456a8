//! Run cgroups made before they are needed.
//!
//! Making a cgroup is the expensive part of a run's limits: the kernel allocates and
//! initialises each controller's state at `mkdir` (on v1 once per hierarchy), several hundred
//! microseconds on the path from request to `Started`. So a run takes a cgroup made in the
//! background, and taking one schedules the next. A spare is never reused: every run gets a
//! cgroup no process has been in, so its peak memory, OOM kills and throttling are its own.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Hierarchy, RunCgroup};
use crate::limits::ResourceLimits;

/// Spares kept, made or being made, across all limits; beyond it the oldest go (a profile
/// no longer asked for).
const CAPACITY: usize = 4;

/// The runs' hierarchy and the cgroups made ahead in it; cheap to share.
#[derive(Debug)]
pub(crate) struct Spares {
    /// Declared before `hierarchy`: the spares are removed before their parent.
    ready: Mutex<Ready>,
    hierarchy: Hierarchy,
}

#[derive(Debug, Default)]
struct Ready {
    cgroups: VecDeque<(ResourceLimits, RunCgroup)>,
    /// Being made on a blocking thread.
    making: usize,
}

impl Spares {
    pub(crate) fn new(hierarchy: Hierarchy) -> Arc<Self> {
        Arc::new(Spares {
            ready: Mutex::default(),
            hierarchy,
        })
    }

    pub(crate) fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// A fresh cgroup with `limits`: a spare when one is ready, else made now. Either way
    /// one more is made in the background (on the current runtime's blocking threads) for
    /// the next run when the taker calls [`RunCgroup::replenish`], once its child is cloned.
    pub(crate) fn take(self: &Arc<Self>, limits: &ResourceLimits) -> io::Result<RunCgroup> {
        let spare = {
            let mut ready = self.lock();
            let at = ready.cgroups.iter().position(|(l, _)| l == limits);
            at.and_then(|i| ready.cgroups.remove(i)).map(|(_, cg)| cg)
        };
        let mut cgroup = match spare {
            Some(cg) => cg,
            None => RunCgroup::limited(&self.hierarchy, limits)?,
        };
        cgroup.parent = Some(Arc::clone(self));
        cgroup.taken_with = Some(*limits);
        Ok(cgroup)
    }

    /// Spares ready now with `limits` (for tests and the bench).
    #[cfg(test)]
    fn ready_for(&self, limits: &ResourceLimits) -> usize {
        self.lock()
            .cgroups
            .iter()
            .filter(|(l, _)| l == limits)
            .count()
    }

    pub(super) fn make_one(self: &Arc<Self>, limits: ResourceLimits) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut ready = self.lock();
            if ready.making >= CAPACITY {
                return;
            }
            ready.making += 1;
        }
        let spares = Arc::clone(self);
        runtime.spawn_blocking(move || {
            // A failure here (the hierarchy removed under us, a full pids budget) is seen
            // again, and reported, by the next run that makes its own.
            let made = RunCgroup::limited(&spares.hierarchy, &limits).ok();
            let evicted = {
                let mut ready = spares.lock();
                ready.making -= 1;
                if let Some(cg) = made {
                    ready.cgroups.push_back((limits, cg));
                }
                let excess = ready.cgroups.len().saturating_sub(CAPACITY);
                ready.cgroups.drain(..excess).collect::<Vec<_>>()
            };
            // Removed outside the lock.
            drop(evicted);
        });
    }

    fn lock(&self) -> MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Budget;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_taken_spare_is_replaced_and_never_reused() {
        let limits = ResourceLimits {
            memory_bytes: 64 << 20,
            pids: 64,
            cpu_millicores: 500,
        };
        let budget = Budget {
            memory_bytes: Some(1 << 30),
            reserve_bytes: 0,
            pids: 4096,
        };
        let Ok(hierarchy) = Hierarchy::delegate(&budget, &limits) else {
            eprintln!("no delegated cgroup on this host; nothing to test");
            return;
        };
        let spares = Spares::new(hierarchy);
        let first = spares.take(&limits).expect("made on demand");
        first.replenish();
        let wait_for_spare = || async {
            for _ in 0..400 {
                if spares.ready_for(&limits) == 1 {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            panic!("no spare was made");
        };
        wait_for_spare().await;
        let second = spares.take(&limits).expect("a spare");
        second.replenish();
        assert_ne!(
            first.dirs, second.dirs,
            "a cgroup is never handed out twice"
        );
        wait_for_spare().await;
        // Other limits are not served from these spares.
        let other = ResourceLimits { pids: 65, ..limits };
        assert_eq!(spares.ready_for(&other), 0);
        let third = spares.take(&other).expect("made on demand");
        third.replenish();
        let pids_max = std::fs::read_to_string(third.pids.as_ref().expect("pids").join("pids.max"))
            .expect("pids.max");
        assert_eq!(pids_max.trim(), "65", "made with the limits asked for");
        first.remove().await;
        second.remove().await;
        third.remove().await;
        // Dropping the last handle removes the spares, then their parent.
        let parent = match spares.hierarchy() {
            Hierarchy::V2 { runs, .. } => runs.clone(),
            Hierarchy::V1 { pids, .. } => pids.clone(),
        };
        for _ in 0..400 {
            if spares.lock().making == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        drop(spares);
        assert!(!parent.exists(), "{} left behind", parent.display());
    }
}
