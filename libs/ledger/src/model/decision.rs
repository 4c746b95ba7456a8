//! Decisions: a policy classification to record, as recorded, and what an `ask` resolves to.

use std::time::Duration;

use toolgate_core::{Tier, ToolKind};

use super::{
    Approval, ApprovalId, CallId, DecisionId, Lease, LeaseToken, OutcomeRecord, PolicyVersion,
    Principal, RequestDigest, RuleId, SessionId, Timestamp, TraceId,
};

/// One policy classification to record.
#[derive(Debug, Clone)]
pub struct NewDecision {
    /// Idempotency key of the call.
    pub call_id: CallId,
    /// The agent session.
    pub session_id: SessionId,
    /// Who made the call.
    pub principal: Principal,
    /// Which tool.
    pub tool: ToolKind,
    /// Digest of the canonical request.
    pub digest: RequestDigest,
    /// The canonical request as JSON; redacted before it is stored.
    pub request_json: String,
    /// The classification.
    pub tier: Tier,
    /// Rules that produced the tier.
    pub rule_ids: Vec<RuleId>,
    /// Policy version that classified it.
    pub policy_version: PolicyVersion,
    /// Trace to link.
    pub trace_id: Option<TraceId>,
    /// The executor that asked, by its authenticated credential (never by what it says).
    pub executor: Option<Principal>,
    /// What that executor reported about itself (pod, node, image...), as JSON, stored as
    /// reported beside the credential; redacted before it is stored.
    pub executor_reported: Option<String>,
    /// How long the executor has, once the call is allowed, to report its outcome; the ledger
    /// default when `None`. After it the call is `unknown` and a late outcome is refused.
    pub lease: Option<Duration>,
}

/// A recorded decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// Ledger id.
    pub id: DecisionId,
    /// Idempotency key of the call (unique).
    pub call_id: CallId,
    /// The agent session.
    pub session_id: SessionId,
    /// Who made the call.
    pub principal: Principal,
    /// Which tool.
    pub tool: ToolKind,
    /// Digest of the canonical request.
    pub digest: RequestDigest,
    /// The redacted canonical request JSON.
    pub request_json: String,
    /// The classification.
    pub tier: Tier,
    /// Rules that produced the tier.
    pub rule_ids: Vec<RuleId>,
    /// Policy version.
    pub policy_version: PolicyVersion,
    /// Linked trace.
    pub trace_id: Option<TraceId>,
    /// For `ask`: the approval this call is bound to.
    pub approval_id: Option<ApprovalId>,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// When the call was allowed to run (auto at once; ask when an approval covered it).
    pub allowed_at: Option<Timestamp>,
    /// The executor that asked, by its authenticated credential (schema 3; `None` before).
    pub executor: Option<Principal>,
    /// What the executor reported about itself, as JSON (schema 3; `None` before or when it
    /// reported nothing).
    pub executor_reported: Option<String>,
    /// For an allowed call: the outcome must be recorded before this time, or the call is
    /// `unknown` (schema 3; `None` for older rows and for calls not allowed).
    pub lease_expires_at: Option<Timestamp>,
    /// When an allowed attempt of this call was last refused before it started (schema 5):
    /// the call was released, not executed, and may be allowed again under its `call_id`.
    pub released_at: Option<Timestamp>,
    /// Why that attempt did not start (`BUSY ...`, `SANDBOX_UNAVAILABLE ...`); redacted.
    pub release_reason: Option<String>,
}

/// A report that an allowed call was refused before it started (no run slot, sandbox
/// unavailable, a limit): nothing ran, so the call is released instead of executed.
#[derive(Debug, Clone)]
pub struct NotStarted {
    /// The decision that allowed the call.
    pub decision_id: DecisionId,
    /// The lease token from a once-scope consumption, which is given back.
    pub lease_token: Option<LeaseToken>,
    /// Fence with the lease the decision's own once-scope consumption holds, read under the
    /// report's lock, instead of `lease_token`: for the decision's authenticated reporter,
    /// whose wire carries no token. A lapsed lease is still refused.
    pub lease_held: bool,
    /// The executor that reports, by its authenticated credential.
    pub executor_principal: Option<Principal>,
    /// Why it did not start; redacted before it is stored.
    pub reason: String,
}

/// What a replayed `call_id` finds: the state of an allowed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedState {
    /// Its outcome is recorded: it ran.
    Ran,
    /// No outcome yet and the lease runs until the given time: it may still be running.
    InFlight(Timestamp),
    /// No outcome and the lease ran out (or the row predates leases): nobody knows whether it
    /// ran, and it never runs under this `call_id`.
    Unknown(Option<Timestamp>),
}

impl DecisionRecord {
    /// The state of this allowed call at `now`, given whether an outcome is recorded.
    /// `None` when the call was never allowed (denied, or waiting for an approval).
    pub fn allowed_state(&self, has_outcome: bool, now: Timestamp) -> Option<AllowedState> {
        self.allowed_at?;
        Some(if has_outcome {
            AllowedState::Ran
        } else {
            match self.lease_expires_at {
                Some(t) if t > now => AllowedState::InFlight(t),
                lapsed => AllowedState::Unknown(lapsed),
            }
        })
    }
}

/// The result of recording an auto/deny decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The stored decision (the earlier one on replay).
    pub decision: DecisionRecord,
    /// True when `call_id` was already recorded: the call must not run again.
    pub replayed: bool,
    /// The outcome already recorded for a replayed call.
    pub outcome: Option<OutcomeRecord>,
}

/// An `ask` classification: consume a matching approval or park the call.
#[derive(Debug, Clone)]
pub struct AskRequest {
    /// The decision to record; its tier must be `ask`.
    pub decision: NewDecision,
    /// What the approver sees (commands, paths, sizes) as JSON; redacted before storing.
    pub explanation_json: String,
    /// How long a new pending approval waits for a human; the ledger default when `None`.
    pub pending_ttl: Option<Duration>,
}

/// What an `ask` resolved to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskVerdict {
    /// An approval covers the call: run it (once-scope consumptions carry a lease).
    Allowed {
        /// Present for once-scope consumption; the outcome must present its token.
        lease: Option<Lease>,
    },
    /// Parked: the approval awaits a human.
    Pending,
    /// A human denied this call's approval: the message is on the approval.
    Denied,
    /// This `call_id` already consumed its approval: never run it again.
    AlreadyRan,
}

/// The result of [`crate::Ledger::ask`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskOutcome {
    /// The decision row of this call.
    pub decision: DecisionRecord,
    /// The approval the call is bound to.
    pub approval: Approval,
    /// What to do.
    pub verdict: AskVerdict,
}
