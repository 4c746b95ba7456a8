//! Approvals: their life cycle, scope and consumption lease, and a human's verdict on one.

use std::time::Duration;

use toolgate_core::ToolKind;

use super::{
    ApprovalId, CallId, PolicyVersion, Principal, RequestDigest, SessionId, Timestamp, TraceId,
};
use crate::error::{Error, Result};

pub use toolgate_core::ApprovalState;

/// How far an approval reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// One execution, consumed atomically.
    Once,
    /// Any identical request in the same session until expiry.
    Session,
}

impl Scope {
    /// The stored lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "once" => Ok(Scope::Once),
            "session" => Ok(Scope::Session),
            _ => Err(Error::invalid(
                "scope",
                format!("unknown scope `{s}`; expected once or session"),
            )),
        }
    }
}

/// The token that fences one consumption: only its holder may report the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(pub(crate) i64);

impl LeaseToken {
    /// The token as an integer, to hand to the executor.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// Rebuilds a token the executor handed back.
    pub const fn from_raw(v: i64) -> Self {
        LeaseToken(v)
    }
}

/// A consumption lease: report the outcome with `token` before `expires_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token.
    pub token: LeaseToken,
    /// After this the execution becomes `unknown`.
    pub expires_at: Timestamp,
}

/// An approval and everything the approver and auditors need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// Ledger id.
    pub id: ApprovalId,
    /// The call that created it.
    pub call_id: CallId,
    /// Bound session.
    pub session_id: SessionId,
    /// Bound principal (the requester).
    pub principal: Principal,
    /// Tool of the request.
    pub tool: ToolKind,
    /// Bound request digest.
    pub digest: RequestDigest,
    /// Bound policy version.
    pub policy_version: PolicyVersion,
    /// Redacted canonical request JSON.
    pub request_json: String,
    /// Redacted explanation JSON for approvers.
    pub explanation_json: String,
    /// Current state.
    pub state: ApprovalState,
    /// Scope (once unless an approver widened it).
    pub scope: Scope,
    /// Creation time.
    pub created_at: Timestamp,
    /// When it stops being usable (pending: decide-by; approved: use-by).
    pub expires_at: Timestamp,
    /// Who decided or cancelled.
    pub decided_by: Option<Principal>,
    /// When.
    pub decided_at: Option<Timestamp>,
    /// Approver's reason (redacted).
    pub reason: Option<String>,
    /// Message for the model (redacted).
    pub message: Option<String>,
    /// The call that consumed it (once scope).
    pub consumed_by_call: Option<CallId>,
    /// The executor that consumed it.
    pub consumed_by_executor: Option<String>,
    /// When it was consumed.
    pub consumed_at: Option<Timestamp>,
    /// Fencing token of the consumption.
    pub lease_token: Option<LeaseToken>,
    /// Lease deadline of the consumption.
    pub lease_expires_at: Option<Timestamp>,
    /// When it reached completed or unknown.
    pub closed_at: Option<Timestamp>,
    /// Trace of the creating call.
    pub trace_id: Option<TraceId>,
}

/// A human's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Approve; `widen_to_session` must be asked for explicitly.
    Approve {
        /// Reuse within the session until expiry instead of once.
        widen_to_session: bool,
    },
    /// Deny.
    Deny,
}

/// A decide request.
#[derive(Debug, Clone)]
pub struct Decide {
    /// The approver (authorised by the service).
    pub approver: Principal,
    /// Approve or deny.
    pub verdict: Verdict,
    /// Why (for auditors); redacted.
    pub reason: Option<String>,
    /// What the model should be told; redacted.
    pub message: Option<String>,
    /// How long an approval stays usable; the ledger default when `None`.
    pub ttl: Option<Duration>,
}
