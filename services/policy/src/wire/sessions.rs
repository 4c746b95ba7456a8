//! `SessionService` messages ↔ the core's session requests and the ledger's sessions.

use std::time::Duration;

use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::{identity_from_wire, identity_to_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy_wire::{session_state_from_wire, session_state_to_wire};
use toolgate_core::ExecutorIdentity;
use toolgate_ledger::{self as ledger, Session, SessionId, SessionState};

use super::timestamp;
use crate::core::{
    ClaimRequest, EndRequest, ListSessionsRequest, PolicyError, RenewRequest, UpdateRequest,
    claim_ttl, parse_id, session_state,
};

fn executor(
    field: &'static str,
    e: Option<common::ExecutorIdentity>,
) -> Result<ExecutorIdentity, PolicyError> {
    let e = e.ok_or_else(|| {
        PolicyError::invalid(
            field,
            format!("{field} is required: the executor acting on the session"),
        )
    })?;
    Ok(identity_from_wire(e))
}

fn ttl(field: &'static str, d: Option<prost_types::Duration>) -> Result<Duration, PolicyError> {
    let d = match d {
        None => Duration::ZERO,
        Some(d) => Duration::try_from(d)
            .map_err(|_| PolicyError::invalid(field, format!("{field} must not be negative")))?,
    };
    claim_ttl(field, d)
}

fn state(s: Option<common::SessionState>) -> Result<SessionState, PolicyError> {
    session_state(session_state_from_wire(s.unwrap_or_default()))
}

/// `ClaimSession`'s request.
pub(crate) fn claim_request(r: pb::ClaimSessionRequest) -> Result<ClaimRequest, PolicyError> {
    Ok(ClaimRequest {
        session_id: parse_id("session_id", r.session_id)?,
        principal: parse_id("principal", r.principal)?,
        executor: executor("executor", r.executor)?,
        ttl: ttl("ttl", r.ttl)?,
    })
}

/// `RenewSessions`' request.
pub(crate) fn renew_request(r: pb::RenewSessionsRequest) -> Result<RenewRequest, PolicyError> {
    const MAX_RENEW: usize = 10_000;
    if r.session_ids.len() > MAX_RENEW {
        return Err(PolicyError::invalid(
            "session_ids",
            format!(
                "session_ids names {} sessions; renew at most {MAX_RENEW} per call",
                r.session_ids.len()
            ),
        ));
    }
    Ok(RenewRequest {
        executor: executor("executor", r.executor)?,
        session_ids: r
            .session_ids
            .into_iter()
            .map(|s| parse_id::<SessionId>("session_ids", s))
            .collect::<Result<_, _>>()?,
        ttl: ttl("ttl", r.ttl)?,
    })
}

/// `UpdateSession`'s request.
pub(crate) fn update_request(r: pb::UpdateSessionRequest) -> Result<UpdateRequest, PolicyError> {
    Ok(UpdateRequest {
        session_id: parse_id("session_id", r.session_id)?,
        executor: executor("executor", r.executor)?,
        state: state(r.state)?,
    })
}

/// `EndSession`'s request.
pub(crate) fn end_request(r: pb::EndSessionRequest) -> Result<EndRequest, PolicyError> {
    if !matches!(r.reason.as_str(), "idle" | "shutdown") {
        return Err(PolicyError::invalid(
            "reason",
            format!("reason `{}`: expected idle or shutdown", r.reason),
        ));
    }
    Ok(EndRequest {
        session_id: parse_id("session_id", r.session_id)?,
        executor: executor("executor", r.executor)?,
        reason: r.reason,
        runs_stopped: r.runs_stopped,
    })
}

/// `AbandonRuns`' request: the executor.
pub(crate) fn abandon_request(r: pb::AbandonRunsRequest) -> Result<ExecutorIdentity, PolicyError> {
    executor("executor", r.executor)
}

/// `ListSessions`' request.
pub(crate) fn list_sessions_request(
    r: pb::ListSessionsRequest,
) -> Result<ListSessionsRequest, PolicyError> {
    Ok(ListSessionsRequest {
        principal: if r.principal.is_empty() {
            None
        } else {
            Some(parse_id("principal", r.principal)?)
        },
        claimed_only: r.claimed_only,
        limit: r.limit,
    })
}

/// The identity a session's last claim reported, with its executor id.
fn session_executor(s: &Session) -> common::ExecutorIdentity {
    let reported: serde_json::Value = s
        .executor_reported
        .as_deref()
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_default();
    let field = |k: &str| {
        reported
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    identity_to_wire(ExecutorIdentity {
        executor_id: s.executor_id.clone(),
        pod: field("pod"),
        namespace: field("namespace"),
        node: field("node"),
        image: field("image"),
        version: field("version"),
    })
}

/// A stored session on the wire, as of `now`.
pub(crate) fn session(s: Session, now: ledger::Timestamp) -> pb::Session {
    pb::Session {
        executor: Some(session_executor(&s)),
        claimed: s.claimed(now),
        session_id: s.session_id.as_str().to_owned(),
        principal: s.principal.as_str().to_owned(),
        state: Some(session_state_to_wire(s.state)),
        created_at: Some(timestamp(s.created_at)),
        updated_at: Some(timestamp(s.updated_at)),
        claim_expires_at: Some(timestamp(s.claim_expires_at)),
        ended_at: s.ended_at.map(timestamp),
        end_reason: s.end_reason.unwrap_or_default(),
    }
}
