//! The durable side of sessions, kept by the policy service in the ledger.
//!
//! A session's sandbox lives on one executor at a time: the executor *claims* the session in
//! the ledger before it builds the sandbox, renews the claim while the sandbox lives, stores the
//! session's working directory and variables after a `persist_cwd` run, and *ends* the session
//! when it reaps the sandbox. [`SessionLedger`] is that conversation; the gRPC policy client
//! and, in `toolgate up`, the in-process policy core implement it. The executor's own identity
//! is implied: the implementation carries it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use crate::authz::api::PolicyFailure;

/// What a session carries between `persist_cwd` calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionState {
    /// The working directory, workspace-relative (`.` for the root).
    pub cwd: String,
    /// The allowlisted variables the session's runs exported.
    pub env: BTreeMap<String, String>,
}

/// A session as the ledger keeps it.
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
    /// The policy service could not answer.
    Unavailable(PolicyFailure),
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
}

/// The ledger's side of sessions; implemented by the gRPC policy client and, in `toolgate up`,
/// by the in-process policy core. The executor's own identity is implied (the implementation
/// carries it).
pub trait SessionLedger: Send + Sync + 'static {
    /// Claims `session_id` for this executor for `ttl`, creating it for `principal` on first use.
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>>;

    /// Extends this executor's claims; answers the sessions it no longer holds.
    fn renew_sessions(
        &self,
        session_ids: Vec<String>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, PolicyFailure>>;

    /// Stores the session's state after a `persist_cwd` run changed it.
    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>>;

    /// Records that the session's sandbox ended and releases the claim.
    fn end_session(
        &self,
        session_id: String,
        reason: EndReason,
        runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), PolicyFailure>>;

    /// Marks every allowed decision of this executor without an outcome as lost (its lease ends
    /// now: replays read OUTCOME_UNKNOWN) and releases its claims; answers how many decisions.
    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, PolicyFailure>>;
}
