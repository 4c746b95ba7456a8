//! The policy service as the executor's domain sees it: what it asks ([`AuthorizeRequest`],
//! [`OutcomeReport`]), what it is told ([`PolicyAnswer`], [`ApprovalStatus`]) and why it got
//! no usable answer ([`PolicyFailure`]). [`super::contract`] maps them to and from the v1
//! messages; nothing here knows prost or tonic.

use std::collections::HashMap;
use std::time::SystemTime;

pub use toolgate_core::ExecutorIdentity;
use toolgate_core::{Code, Reason, ReasonedError, ToolCall};
use toolgate_process::{Isolation, Status as RunStatus, StreamSummary, Usage};

/// One call the executor is about to run.
#[derive(Debug, Clone)]
pub struct AuthorizeRequest {
    /// The orchestrator's idempotency key.
    pub call_id: String,
    /// The agent session approvals bind to.
    pub session_id: String,
    /// Free text for the approver.
    pub description: String,
    /// The agent the call runs for.
    pub principal: String,
    /// The canonical call, as resolved in the workspace.
    pub call: ToolCall,
    /// The workspace's labels.
    pub labels: HashMap<String, String>,
    /// This executor.
    pub executor: ExecutorIdentity,
}

/// What the policy's rules hide from an allowed call, as it sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenGlobs {
    /// The policy version they come from.
    pub policy_version: String,
    /// Workspace-relative globs.
    pub globs: Vec<String>,
}

/// How the policy reached its answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    /// What the model is told.
    pub message: String,
    /// The deciding rule (`default` when none matched).
    pub rule_id: String,
    /// The policy version that decided.
    pub policy_version: String,
}

/// How a call the ledger says already ran ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedOutcome {
    /// How a run ended, or `completed` for a filesystem call that succeeded.
    pub ended: Option<Ended>,
    /// The sandbox profile a run ran under.
    pub sandbox_profile: Option<String>,
    /// Bytes a run wrote to stdout.
    pub stdout_bytes: Option<u64>,
    /// Bytes a run wrote to stderr.
    pub stderr_bytes: Option<u64>,
    /// A filesystem call's status code name (`OK`, `NOT_FOUND`).
    pub result_code: String,
    /// A filesystem call's error reason.
    pub result_reason: String,
}

/// How a recorded run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal (its name).
    Signaled(String),
    /// Ran out of time.
    TimedOut,
    /// Cancelled, with the cause.
    Cancelled(String),
    /// Never started, with the reason.
    SpawnFailed(String),
    /// A filesystem call that completed.
    Completed,
}

/// The policy's answer to one [`AuthorizeRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allowed {
        /// The recorded decision.
        decision_id: String,
        /// The approval consumed; empty for `auto`.
        approval_id: String,
        /// What the call must not reveal, when the policy sent it.
        hidden: Option<HiddenGlobs>,
        /// The profile to run under; empty: the request's.
        sandbox_profile: String,
        /// For a networked run: the host globs its egress gate's DNS answers as nonexistent.
        denied_hosts: Vec<String>,
    },
    /// A human must decide first.
    Pending {
        /// The recorded decision.
        decision_id: String,
        /// The approval to wait for.
        approval_id: String,
        /// When it lapses.
        expires_at: Option<SystemTime>,
    },
    /// Refused by a rule, or by a human (`approval_id` set).
    Denied {
        /// The recorded decision.
        decision_id: String,
        /// The deciding rule.
        rule_id: String,
        /// What the model is told.
        message: String,
        /// The approval a human denied; empty for a rule's denial.
        approval_id: String,
    },
    /// This `call_id` ran before.
    AlreadyExecuted {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// How it ended; `None` from an older policy service that did not say.
        outcome: Option<RecordedOutcome>,
    },
    /// This `call_id` was allowed and may still be running.
    InFlight {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// Until when its executor may report.
        lease_expires_at: Option<SystemTime>,
    },
    /// This `call_id` was allowed and its lease ran out without an outcome.
    OutcomeUnknown {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// When the lease ran out.
        lease_expired_at: Option<SystemTime>,
    },
}

/// A [`Verdict`] with its explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyAnswer {
    /// The answer.
    pub verdict: Verdict,
    /// Why; `None` from a policy service that sent none.
    pub explanation: Option<Explanation>,
}

/// A pending approval's state as the policy reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalState {
    /// Nobody decided yet.
    Pending,
    /// Approved and unused.
    Approved,
    /// Denied by a human.
    Denied,
    /// Lapsed before anyone decided.
    Expired,
    /// Withdrawn.
    Cancelled,
    /// Used by a call.
    Consumed,
    /// Used, and the call reported its outcome.
    Completed,
    /// Used, and the call's outcome is unknown.
    Unknown,
}

/// An approval as `wait_for_approval` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalStatus {
    /// The approval.
    pub approval_id: String,
    /// Its state now.
    pub state: ApprovalState,
    /// Who decided.
    pub decided_by: String,
    /// What the approver told the model.
    pub message_to_model: String,
    /// The approver's reason.
    pub reason: String,
}

/// How an allowed call ended, as the executor reports it.
#[derive(Debug, Clone)]
pub struct OutcomeReport {
    /// The decision that allowed it.
    pub decision_id: String,
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended.
    pub finished_at: SystemTime,
    /// What happened.
    pub finished: Finished,
    /// This executor.
    pub executor: ExecutorIdentity,
}

/// What an allowed call did.
#[derive(Debug, Clone)]
pub enum Finished {
    /// A filesystem call: the status code it ended with (`OK`, `NOT_FOUND`) and, for an
    /// error, its reason.
    Fs {
        /// The gRPC code name.
        code: &'static str,
        /// The `ErrorInfo` reason; empty for `OK`.
        reason: String,
    },
    /// A run that ended.
    Run {
        /// How.
        status: RunStatus,
        /// What it used.
        usage: Usage,
        /// Its stdout.
        stdout: OutputStats,
        /// Its stderr.
        stderr: OutputStats,
        /// What it was given, from its `Started` event.
        isolation: Option<Box<Isolation>>,
        /// What the after-run audit of the protected set found and undid.
        audit: Option<Box<Result<toolgate_core::AuditReport, String>>>,
        /// The resource limit the run ran into, if any.
        limit: Option<toolgate_process::LimitExceeded>,
        /// The destinations its egress gate saw.
        network: Vec<crate::egress::Destination>,
    },
    /// A `net.connect` decision at the end of its run: the one destination it let through.
    Connection(Box<crate::egress::Destination>),
    /// A run whose client went away before it ended.
    Disconnected,
    /// A call refused after its decision but before it started (no run slot, sandbox
    /// unavailable, a limit): nothing ran, so the policy releases it for a retry.
    NotStarted {
        /// The gRPC code name of the refusal.
        code: &'static str,
        /// Its `ErrorInfo` reason.
        reason: String,
    },
}

/// How much of a stream a run wrote and delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputStats {
    /// Bytes written.
    pub total_bytes: u64,
    /// Bytes neither streamed nor kept.
    pub dropped_bytes: u64,
    /// Whether part of it was not delivered live.
    pub truncated: bool,
}

impl From<&StreamSummary> for OutputStats {
    fn from(s: &StreamSummary) -> Self {
        OutputStats {
            total_bytes: s.total_bytes,
            dropped_bytes: s.dropped_bytes,
            truncated: s.truncated,
        }
    }
}

/// Why the policy service gave no answer the executor can act on: unreachable (fail
/// closed), or it refused the request. Carries the reason, message and `ErrorInfo` metadata
/// the client gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyFailure {
    /// From the closed list.
    pub reason: Reason,
    /// For the model.
    pub message: String,
    /// Machine-readable facts.
    pub metadata: Vec<(String, String)>,
}

impl PolicyFailure {
    /// A failure with `reason` and `message`, and `metadata`.
    pub fn new(
        reason: Reason,
        message: impl Into<String>,
        metadata: impl IntoIterator<Item = (&'static str, String)>,
    ) -> Self {
        PolicyFailure {
            reason,
            message: message.into(),
            metadata: metadata
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }

    /// Whether asking again later may succeed (an outcome report is retried then).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self.reason.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Internal
                | Code::ResourceExhausted
                | Code::Aborted
        )
    }
}

impl ReasonedError for PolicyFailure {
    fn reason(&self) -> Reason {
        self.reason
    }
}
