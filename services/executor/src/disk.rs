//! The workspace disk budget of runs: what one run may add (allocated bytes, entries), measured
//! by walking the workspace when the run starts, while it runs and after it
//! (`toolgate_fs::Workspace::disk_usage`). Project quotas would let the kernel refuse the
//! write instead, but they need a filesystem mounted with them and a privileged executor; the
//! walk works on any filesystem and costs one `stat` per entry per sample.
//!
//! The walk after a run is also the next run's baseline ([`Baselines`]): kept while nothing
//! can have changed the workspace since (no run started, no filesystem call wrote, and
//! [`Workspace::still_holds`] finds every directory and the file system's free counts as they
//! were), so back-to-back runs walk once each instead of twice.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use toolgate_fs::{DiskUsage, UsageSnapshot, Workspace};
use toolgate_process::{DiskWatch, LimitExceeded};

use crate::config::DiskSection;

/// One run's budget over the workspace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DiskBudget {
    /// Bytes one run may add; 0: no byte budget.
    max_bytes: u64,
    /// Entries one run may add; 0: no entry budget.
    max_files: u64,
    interval: Duration,
}

impl DiskBudget {
    /// The budget `[process.disk]` configures; `None` when both budgets are off.
    pub(crate) fn from_config(c: &DiskSection) -> Option<DiskBudget> {
        c.enabled().then(|| DiskBudget {
            max_bytes: c.max_written_bytes,
            max_files: c.max_created_files,
            interval: Duration::from_millis(c.sample_interval_ms),
        })
    }

    /// The budgets: bytes and entries one run may add (0: none).
    pub(crate) fn limits(self) -> (u64, u64) {
        (self.max_bytes, self.max_files)
    }

    /// The watch of a run that starts now: `baseline` is the workspace when it started. The
    /// walk after the run measures everything and offers itself to `ticket`'s cache as the
    /// next baseline.
    pub(crate) fn watch(
        self,
        workspace: Arc<Workspace>,
        baseline: DiskUsage,
        ticket: Ticket,
    ) -> DiskWatch {
        let ceiling = DiskUsage {
            bytes: ceiling(baseline.bytes, self.max_bytes),
            files: ceiling(baseline.files, self.max_files),
        };
        DiskWatch::new(self.interval, move |ended| {
            let measured = if ended {
                workspace.disk_snapshot().map(|snapshot| {
                    let usage = snapshot.usage;
                    ticket.offer(snapshot);
                    usage
                })
            } else {
                workspace.disk_usage(Some(ceiling))
            };
            let now = match measured {
                Ok(now) => now,
                // Past the walk's own bounds the run has created far too much.
                Err(e)
                    if toolgate_core::ReasonedError::reason(&e)
                        == toolgate_core::Reason::TooLarge =>
                {
                    return Some(LimitExceeded::DiskFiles {
                        limit: self.max_files.max(1),
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the disk budget sample failed");
                    return None;
                }
            };
            if self.max_files > 0 && now.files > ceiling.files {
                Some(LimitExceeded::DiskFiles {
                    limit: self.max_files,
                })
            } else if self.max_bytes > 0 && now.bytes > ceiling.bytes {
                Some(LimitExceeded::DiskBytes {
                    limit_bytes: self.max_bytes,
                })
            } else {
                None
            }
        })
    }
}

/// The usage a run may reach: `base + budget`, unbounded without a budget.
fn ceiling(base: u64, budget: u64) -> u64 {
    if budget == 0 {
        u64::MAX
    } else {
        base.saturating_add(budget)
    }
}

/// The cached baseline of one workspace's runs.
#[derive(Debug, Default)]
pub(crate) struct Baselines {
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    /// The workspace after the last run that ran alone, while nothing changed it since.
    kept: Option<Arc<UsageSnapshot>>,
    /// Bumped by every run start and every filesystem call that writes: a measurement offered
    /// under an older generation is stale.
    generation: u64,
    /// Runs started and not yet ended.
    live: u32,
}

/// A run's hold on the cache, from its baseline until its watch is dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    cache: Arc<Baselines>,
    generation: u64,
}

impl Baselines {
    /// The baseline of a run starting now, and its ticket: the kept snapshot when no other run
    /// is live and the workspace still matches it, else a fresh walk.
    pub(crate) fn begin(
        self: &Arc<Self>,
        workspace: &Workspace,
    ) -> toolgate_fs::Result<(DiskUsage, Ticket)> {
        let (kept, generation) = {
            let mut s = self.lock();
            let kept = if s.live == 0 { s.kept.take() } else { None };
            s.kept = None;
            s.generation += 1;
            s.live += 1;
            (kept, s.generation)
        };
        let ticket = Ticket {
            cache: self.clone(),
            generation,
        };
        let usage = match kept {
            Some(k) if workspace.still_holds(&k) => k.usage,
            _ => workspace.disk_usage(None)?,
        };
        Ok((usage, ticket))
    }

    /// A filesystem call is about to change the workspace: the kept baseline goes.
    pub(crate) fn invalidate(&self) {
        let mut s = self.lock();
        s.kept = None;
        s.generation += 1;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Ticket {
    /// The walk after this run, kept as the next baseline if the run was alone from its
    /// start to here and no filesystem call wrote meanwhile.
    fn offer(&self, snapshot: UsageSnapshot) {
        let mut s = self.cache.lock();
        if s.generation == self.generation && s.live == 1 {
            s.kept = Some(Arc::new(snapshot));
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.cache.lock();
        s.live = s.live.saturating_sub(1);
    }
}
