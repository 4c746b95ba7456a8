//! Agent sessions as the ledger keeps them: which executor holds a session's sandbox (its
//! claim), the state its `persist_cwd` calls carry, and how its sandbox last ended.
//!
//! Sessions are not part of the audit chain: a session row is routing and convenience state,
//! and every call a session makes is still its own audited decision.

use std::time::Duration;

use super::{DecisionId, Principal, SessionId, Timestamp};

/// The executor acting on sessions: its reported id bound to its authenticated credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHolder {
    /// The stable id the executor reports (`ExecutorIdentity.executor_id`).
    pub executor_id: String,
    /// The credential it authenticated with; only the same credential may act for this id.
    pub executor_principal: Principal,
    /// What the executor reported about itself, as the JSON object decisions keep in
    /// `executor_reported`; redacted before storing.
    pub executor_reported: Option<String>,
}

pub use toolgate_core::SessionState;

/// One stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The session's id.
    pub session_id: SessionId,
    /// The principal whose calls made it; a session stays with it.
    pub principal: Principal,
    /// The executor of the last claim (lapsed or not).
    pub executor_id: String,
    /// What that executor reported about itself (JSON), if anything.
    pub executor_reported: Option<String>,
    /// The credential of the last claim.
    pub executor_principal: Principal,
    /// The state its `persist_cwd` calls start with.
    pub state: SessionState,
    /// When it was first claimed.
    pub created_at: Timestamp,
    /// When its claim was last taken, renewed or its state updated.
    pub updated_at: Timestamp,
    /// When the claim lapses unless renewed (set to the end time when it ended).
    pub claim_expires_at: Timestamp,
    /// When its sandbox last ended; `None` while claimed.
    pub ended_at: Option<Timestamp>,
    /// Why it ended: `idle`, `shutdown`, `abandoned`.
    pub end_reason: Option<String>,
}

impl Session {
    /// Whether a live claim holds it at `now`: not ended and not lapsed.
    pub fn claimed(&self, now: Timestamp) -> bool {
        self.ended_at.is_none() && self.claim_expires_at > now
    }

    /// Whether `holder` is the executor of the last claim (same id, same credential).
    pub fn held_by(&self, holder: &SessionHolder) -> bool {
        self.executor_id == holder.executor_id
            && self.executor_principal == holder.executor_principal
    }

    /// The pod the last claiming executor reported (`pod` of its identity JSON), else its id:
    /// where an orchestrator routes the session.
    pub fn executor_pod(&self) -> String {
        self.executor_reported
            .as_deref()
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .and_then(|v| v.get("pod").and_then(|p| p.as_str()).map(str::to_owned))
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| self.executor_id.clone())
    }
}

/// A claim of one session.
#[derive(Debug, Clone)]
pub struct ClaimSession {
    /// The session.
    pub session_id: SessionId,
    /// The principal whose call opens it.
    pub principal: Principal,
    /// The claiming executor.
    pub holder: SessionHolder,
    /// How long the claim lasts without renewal.
    pub ttl: Duration,
}

/// A granted claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The session with its stored state.
    pub session: Session,
    /// The session existed before: its earlier sandbox (ended, lapsed, or on this executor
    /// before it restarted) is gone.
    pub resumed: bool,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this principal's.
    pub principal: Option<Principal>,
    /// Only those held by a live claim.
    pub claimed_only: bool,
    /// At most this many (1..=1000).
    pub limit: u32,
}

/// What abandoning an executor's work marked lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Abandoned {
    /// Decisions whose lease was ended (their calls read as unknown).
    pub decision_ids: Vec<DecisionId>,
    /// Sessions whose claim was released.
    pub session_ids: Vec<SessionId>,
}
