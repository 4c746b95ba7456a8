//! Outcomes: who ran an allowed call and how it ended.

use super::{ApprovalId, DecisionId, LeaseToken, Principal, Timestamp};
use crate::error::{Error, Result};

/// Who ran a call, as its outcome records it (the executor's reported identity is
/// `toolgate_core::ExecutorIdentity`; this is the part an outcome row keeps).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutorRecord {
    /// Pod name.
    pub pod: String,
    /// Node name.
    pub node: String,
    /// Namespace.
    pub namespace: String,
    /// Container image.
    pub image: String,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Exited with a code.
    Exited(i32),
    /// Killed by a signal.
    Signaled(i32),
    /// Killed on timeout.
    TimedOut,
    /// Cancelled by the client.
    Cancelled,
    /// Never started.
    FailedToStart,
    /// A filesystem operation: succeeded.
    Ok,
    /// A filesystem operation: failed.
    Failed,
}

impl ExitStatus {
    pub(crate) fn to_parts(self) -> (&'static str, i64) {
        match self {
            ExitStatus::Exited(c) => ("exited", i64::from(c)),
            ExitStatus::Signaled(s) => ("signaled", i64::from(s)),
            ExitStatus::TimedOut => ("timed_out", 0),
            ExitStatus::Cancelled => ("cancelled", 0),
            ExitStatus::FailedToStart => ("failed_to_start", 0),
            ExitStatus::Ok => ("ok", 0),
            ExitStatus::Failed => ("failed", 0),
        }
    }

    pub(crate) fn from_parts(kind: &str, v: i64) -> Result<Self> {
        let code = || i32::try_from(v).map_err(|_| Error::Corrupt(format!("exit value {v}")));
        Ok(match kind {
            "exited" => ExitStatus::Exited(code()?),
            "signaled" => ExitStatus::Signaled(code()?),
            "timed_out" => ExitStatus::TimedOut,
            "cancelled" => ExitStatus::Cancelled,
            "failed_to_start" => ExitStatus::FailedToStart,
            "ok" => ExitStatus::Ok,
            "failed" => ExitStatus::Failed,
            other => return Err(Error::Corrupt(format!("exit kind `{other}`"))),
        })
    }
}

/// An outcome to record.
#[derive(Debug, Clone)]
pub struct NewOutcome {
    /// The decision that allowed the run.
    pub decision_id: DecisionId,
    /// The lease token from a once-scope consumption.
    pub lease_token: Option<LeaseToken>,
    /// Fence with the lease the decision's own once-scope consumption holds, read under the
    /// report's lock, instead of `lease_token`: for the decision's authenticated reporter,
    /// whose wire carries no token. A lapsed lease is still refused.
    pub lease_held: bool,
    /// The executor that reports, by its authenticated credential.
    pub executor_principal: Option<Principal>,
    /// Who ran it, as the executor reported it.
    pub executor: ExecutorRecord,
    /// Start.
    pub started_at: Timestamp,
    /// End.
    pub finished_at: Timestamp,
    /// Exit.
    pub exit: ExitStatus,
    /// Bytes of stdout (or content) produced.
    pub stdout_bytes: u64,
    /// Bytes of stderr produced.
    pub stderr_bytes: u64,
    /// Whether stdout hit its cap.
    pub stdout_truncated: bool,
    /// Whether stderr hit its cap.
    pub stderr_truncated: bool,
    /// Error text, if any; redacted.
    pub error: Option<String>,
    /// For a run: the confinement that was applied (JSON as the executor reported it).
    pub isolation: Option<String>,
    /// For a run: what the after-run audit of the protected set found and undid (JSON as the
    /// executor reported it; schema 4).
    pub integrity: Option<String>,
}

/// A recorded outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRecord {
    /// The decision.
    pub decision_id: DecisionId,
    /// The consumed approval, if any.
    pub approval_id: Option<ApprovalId>,
    /// The executor that reported, by its authenticated credential (schema 3; `None` before).
    pub executor_principal: Option<Principal>,
    /// Who ran it, as the executor reported it.
    pub executor: ExecutorRecord,
    /// Start.
    pub started_at: Timestamp,
    /// End.
    pub finished_at: Timestamp,
    /// Exit.
    pub exit: ExitStatus,
    /// Bytes of stdout.
    pub stdout_bytes: u64,
    /// Bytes of stderr.
    pub stderr_bytes: u64,
    /// Stdout hit its cap.
    pub stdout_truncated: bool,
    /// Stderr hit its cap.
    pub stderr_truncated: bool,
    /// Redacted error text.
    pub error: Option<String>,
    /// When it was recorded.
    pub recorded_at: Timestamp,
    /// For a run: the confinement that was applied (JSON), when reported.
    pub isolation: Option<String>,
    /// For a run: what the after-run audit of the protected set found and undid (JSON), when
    /// reported (schema 4).
    pub integrity: Option<String>,
}
