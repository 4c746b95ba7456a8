//! What a run changed in the workspace's protected set, and what the executor did about it.
//!
//! The protected set is what the human's own tools read as configuration or execute
//! implicitly (git metadata that configures or runs code, editor and agent configs,
//! interpreter startup files, toolchain pins). A run cannot write the protected paths that
//! exist when it starts (the kernel binds them read-only); what it creates where none existed
//! is found by the after-run audit and undone before the run's outcome is reported.

use std::fmt;

/// How one protected path changed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IntegrityChange {
    /// It did not exist when the run started and did when it ended.
    Created,
    /// Its content or kind differs from what it was when the run started.
    Modified,
    /// It existed when the run started and no longer did when it ended.
    Removed,
}

impl IntegrityChange {
    /// The lowercase name used on the wire, in the ledger and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            IntegrityChange::Created => "created",
            IntegrityChange::Modified => "modified",
            IntegrityChange::Removed => "removed",
        }
    }

    /// The change named by [`Self::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "created" => Some(IntegrityChange::Created),
            "modified" => Some(IntegrityChange::Modified),
            "removed" => Some(IntegrityChange::Removed),
            _ => None,
        }
    }
}

impl fmt::Display for IntegrityChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change to the protected set that no decision allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IntegrityViolation {
    /// The workspace-relative path (POSIX, lossy UTF-8).
    pub path: String,
    /// What the run did to it.
    pub change: IntegrityChange,
    /// Whether the executor put it back as it was before the run (a created path removed, a
    /// modified file restored from the executor's copy).
    pub reverted: bool,
}

impl fmt::Display for IntegrityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}`{}",
            self.change,
            self.path,
            if self.reverted {
                " (reverted)"
            } else {
                " (not reverted)"
            }
        )
    }
}
