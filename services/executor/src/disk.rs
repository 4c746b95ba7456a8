//! The workspace disk budget of runs: what one run may add (allocated bytes, entries), measured
//! by walking the workspace when the run starts, while it runs and after it
//! (`toolgate_fs::Workspace::disk_usage`). Project quotas would let the kernel refuse the
//! write instead, but they need a filesystem mounted with them and a privileged executor; the
//! walk works on any filesystem and costs one `stat` per entry per sample.

use std::sync::Arc;
use std::time::Duration;

use toolgate_fs::{DiskUsage, Workspace};
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

    /// The watch of a run that starts now: `baseline` is the workspace when it started.
    pub(crate) fn watch(self, workspace: Arc<Workspace>, baseline: DiskUsage) -> DiskWatch {
        let ceiling = DiskUsage {
            bytes: ceiling(baseline.bytes, self.max_bytes),
            files: ceiling(baseline.files, self.max_files),
        };
        DiskWatch::new(self.interval, move || {
            let now = match workspace.disk_usage(Some(ceiling)) {
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
