//! Sessions: which executor holds a session's sandbox, the state the session carries, and how
//! it ended, kept in the ledger so a policy replica or a restarted executor reads them back.
//!
//! Claiming, renewing, updating, ending and abandoning need the `executor` role, and an
//! executor acts only as itself: a claim binds the executor id it reports to the credential
//! it authenticated with, and only that pair may renew, update or end it afterwards (the same
//! id under another credential is another executor). Abandon selects decisions by both too.
//! Reading needs `approver`, `admin` or `executor`.

use std::time::Duration;

use toolgate_core::ExecutorIdentity;
use toolgate_ledger::{
    self as ledger, Abandoned, ClaimSession, Claimed, Session, SessionFilter, SessionHolder,
    SessionId, SessionState,
};
use toolgate_runtime::auth::{Principal, Role};

use super::api::reported_json;
use super::{APPROVERS, PolicyCore, PolicyError, parse_id, require};

/// A claim lasts this long without renewal when the request names no ttl.
pub const DEFAULT_CLAIM_TTL: Duration = Duration::from_secs(30);
/// The longest claim one request may take: a dead executor holds a session at most this long.
pub const MAX_CLAIM_TTL: Duration = Duration::from_secs(3600);
/// Sessions listed when the request names no limit.
const DEFAULT_LIST_LIMIT: u32 = 100;
/// Sessions listed at most.
const MAX_LIST_LIMIT: u32 = 1000;
/// Variables a session keeps at most.
const MAX_ENV: usize = 256;
/// Bytes of a session's state (working directory, names and values) at most.
const MAX_STATE_BYTES: usize = 64 << 10;

/// A session's state as an executor sent it, checked: bounded in count and size, variable
/// names that can be exported, no NUL bytes.
pub(crate) fn session_state(
    s: toolgate_policy_api::SessionState,
) -> Result<SessionState, PolicyError> {
    if s.env.len() > MAX_ENV {
        return Err(PolicyError::invalid(
            "state.env",
            format!(
                "state.env has {} variables; at most {MAX_ENV} are kept",
                s.env.len()
            ),
        ));
    }
    let bytes = s.cwd.len() + s.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    if bytes > MAX_STATE_BYTES {
        return Err(PolicyError::invalid(
            "state",
            format!("the session state is {bytes} bytes; at most {MAX_STATE_BYTES} are kept"),
        ));
    }
    if let Some(k) = s
        .env
        .keys()
        .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
    {
        return Err(PolicyError::invalid(
            "state.env",
            format!("state.env has an invalid variable name {k:?}"),
        ));
    }
    if s.cwd.contains('\0') || s.env.values().any(|v| v.contains('\0')) {
        return Err(PolicyError::invalid(
            "state",
            "the session state contains a NUL byte",
        ));
    }
    Ok(s)
}

/// `ClaimSession`'s request.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The session.
    pub session_id: SessionId,
    /// The principal whose call opens it.
    pub principal: ledger::Principal,
    /// The claiming executor.
    pub executor: ExecutorIdentity,
    /// How long the claim lasts without renewal.
    pub ttl: Duration,
}

/// `RenewSessionsRequest` in domain terms.
#[derive(Debug, Clone)]
pub struct RenewRequest {
    /// The renewing executor.
    pub executor: ExecutorIdentity,
    /// The sessions it holds.
    pub session_ids: Vec<SessionId>,
    /// How long the claims last from now.
    pub ttl: Duration,
}

/// `UpdateSessionRequest` in domain terms.
#[derive(Debug, Clone)]
pub struct UpdateRequest {
    /// The session.
    pub session_id: SessionId,
    /// The executor holding it.
    pub executor: ExecutorIdentity,
    /// The new state.
    pub state: SessionState,
}

/// `EndSessionRequest` in domain terms.
#[derive(Debug, Clone)]
pub struct EndRequest {
    /// The session.
    pub session_id: SessionId,
    /// The executor that held it.
    pub executor: ExecutorIdentity,
    /// `idle` or `shutdown`.
    pub reason: String,
    /// Background runs the sandbox still held and stopped.
    pub runs_stopped: u32,
}

/// `ListSessionsRequest` in domain terms.
#[derive(Debug, Clone, Default)]
pub struct ListSessionsRequest {
    /// Only this principal's sessions.
    pub principal: Option<ledger::Principal>,
    /// Only sessions with a live claim.
    pub claimed_only: bool,
    /// Most sessions to return (1..=1000).
    pub limit: u32,
}

/// The caller as a session holder: the executor id it reports, bound to its credential.
fn holder(caller: &Principal, executor: &ExecutorIdentity) -> Result<SessionHolder, PolicyError> {
    if executor.executor_id.is_empty() {
        return Err(PolicyError::invalid(
            "executor.executor_id",
            "executor.executor_id is required: sessions are held by an executor's stable id",
        ));
    }
    if executor.executor_id.len() > 128 {
        return Err(PolicyError::invalid(
            "executor.executor_id",
            format!(
                "executor.executor_id is {} bytes; at most 128 allowed",
                executor.executor_id.len()
            ),
        ));
    }
    Ok(SessionHolder {
        executor_id: executor.executor_id.clone(),
        executor_principal: parse_id("executor", caller.name.clone())?,
        executor_reported: reported_json(executor),
    })
}

/// A requested ttl: zero is the default, longer than [`MAX_CLAIM_TTL`] is refused.
pub(crate) fn claim_ttl(field: &'static str, ttl: Duration) -> Result<Duration, PolicyError> {
    if ttl.is_zero() {
        return Ok(DEFAULT_CLAIM_TTL);
    }
    if ttl > MAX_CLAIM_TTL {
        return Err(PolicyError::invalid(
            field,
            format!(
                "{field} is {} s; a claim lasts at most {} s between renewals",
                ttl.as_secs(),
                MAX_CLAIM_TTL.as_secs()
            ),
        ));
    }
    Ok(ttl)
}

impl PolicyCore {
    /// Claims a session for the calling executor (see [`ledger::Ledger::claim_session`]).
    pub async fn claim_session(
        &self,
        caller: &Principal,
        req: ClaimRequest,
    ) -> Result<Claimed, PolicyError> {
        require(caller, "ClaimSession", &[Role::Executor])?;
        let claim = ClaimSession {
            session_id: req.session_id,
            principal: req.principal,
            holder: holder(caller, &req.executor)?,
            ttl: req.ttl,
        };
        let l = &self.inner.ledger;
        let claimed = self
            .write("ledger.write", "claim_session", l.claim_session(claim))
            .await?;
        tracing::info!(
            session_id = %claimed.session.session_id,
            executor_id = %claimed.session.executor_id,
            resumed = claimed.resumed,
            "session claimed"
        );
        Ok(claimed)
    }

    /// Extends the calling executor's claims; answers the sessions it no longer holds.
    pub async fn renew_sessions(
        &self,
        caller: &Principal,
        req: RenewRequest,
    ) -> Result<Vec<SessionId>, PolicyError> {
        require(caller, "RenewSessions", &[Role::Executor])?;
        let h = holder(caller, &req.executor)?;
        let l = &self.inner.ledger;
        self.write(
            "ledger.write",
            "renew_sessions",
            l.renew_sessions(h, req.session_ids, req.ttl),
        )
        .await
    }

    /// Stores a session's state; only its holder may.
    pub async fn update_session(
        &self,
        caller: &Principal,
        req: UpdateRequest,
    ) -> Result<Session, PolicyError> {
        require(caller, "UpdateSession", &[Role::Executor])?;
        let h = holder(caller, &req.executor)?;
        let l = &self.inner.ledger;
        self.write(
            "ledger.write",
            "update_session",
            l.update_session(h, req.session_id, req.state),
        )
        .await
    }

    /// Records that the holder's sandbox of a session ended and releases the claim.
    pub async fn end_session(
        &self,
        caller: &Principal,
        req: EndRequest,
    ) -> Result<Session, PolicyError> {
        require(caller, "EndSession", &[Role::Executor])?;
        let h = holder(caller, &req.executor)?;
        let l = &self.inner.ledger;
        let ended = self
            .write(
                "ledger.write",
                "end_session",
                l.end_session(h, req.session_id, req.reason),
            )
            .await?;
        tracing::info!(
            session_id = %ended.session_id,
            executor_id = %ended.executor_id,
            reason = ended.end_reason.as_deref().unwrap_or_default(),
            runs_stopped = req.runs_stopped,
            "session ended"
        );
        Ok(ended)
    }

    /// Marks everything the calling executor had running as lost and releases its claims.
    pub async fn abandon_runs(
        &self,
        caller: &Principal,
        executor: ExecutorIdentity,
    ) -> Result<Abandoned, PolicyError> {
        require(caller, "AbandonRuns", &[Role::Executor])?;
        let h = holder(caller, &executor)?;
        let l = &self.inner.ledger;
        let gone = self
            .write("ledger.write", "abandon_executor", l.abandon_executor(h))
            .await?;
        if !gone.decision_ids.is_empty() || !gone.session_ids.is_empty() {
            tracing::warn!(
                executor_id = %executor.executor_id,
                decisions = gone.decision_ids.len(),
                sessions = gone.session_ids.len(),
                "an executor restarted: its unreported calls are recorded as unknown, its sessions ended"
            );
        }
        Ok(gone)
    }

    /// One session.
    pub async fn get_session(
        &self,
        caller: &Principal,
        id: SessionId,
    ) -> Result<Session, PolicyError> {
        require(caller, "GetSession", &readers())?;
        self.read("session", self.inner.ledger.session(id)).await
    }

    /// Sessions, most recently active first.
    pub async fn list_sessions(
        &self,
        caller: &Principal,
        req: ListSessionsRequest,
    ) -> Result<Vec<Session>, PolicyError> {
        require(caller, "ListSessions", &readers())?;
        let filter = SessionFilter {
            principal: req.principal,
            claimed_only: req.claimed_only,
            limit: match req.limit {
                0 => DEFAULT_LIST_LIMIT,
                n => n.min(MAX_LIST_LIMIT),
            },
        };
        self.read("list_sessions", self.inner.ledger.list_sessions(filter))
            .await
    }
}

/// Who may read sessions: approvers, admins and executors.
pub(crate) fn readers() -> Vec<Role> {
    let mut r = APPROVERS.to_vec();
    r.push(Role::Executor);
    r
}
