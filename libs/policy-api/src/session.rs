//! The session calls: claim, renew, update, end, abandon.

use std::time::SystemTime;

use crate::error::Error;

pub use toolgate_core::SessionState;

/// A session as the ledger keeps it, as its claimer learns it.
#[derive(Debug, Clone)]
pub struct StoredSession {
    /// The session's id (the `session_id` of its calls).
    pub session_id: String,
    /// The principal the session belongs to.
    pub principal: String,
    /// The state its `persist_cwd` calls start with.
    pub state: SessionState,
    /// When this executor's claim lapses unless renewed.
    pub claim_expires_at: SystemTime,
    /// The claim took over an earlier sandbox (ended, lapsed, or this executor restarted).
    pub resumed: bool,
}

/// Why a claim or an update was refused.
#[derive(Debug, Clone)]
pub enum SessionRefusal {
    /// Another executor holds a live claim.
    Elsewhere {
        /// The holder's stable id.
        executor_id: String,
        /// The holder's pod (or host) name, where an orchestrator routes the session.
        pod: String,
        /// When the holder's claim lapses unless renewed.
        claim_expires_at: SystemTime,
    },
    /// The session belongs to another principal.
    OtherPrincipal,
    /// The policy service could not answer, or refused for another reason.
    Unavailable(Error),
}

/// How a session's sandbox ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// Reaped after its idle time.
    Idle,
    /// The executor stopped.
    Shutdown,
}

impl EndReason {
    /// The word the ledger records (`idle`, `shutdown`).
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Idle => "idle",
            EndReason::Shutdown => "shutdown",
        }
    }

    /// The reason a recorded word names.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "idle" => Some(EndReason::Idle),
            "shutdown" => Some(EndReason::Shutdown),
            _ => None,
        }
    }
}
