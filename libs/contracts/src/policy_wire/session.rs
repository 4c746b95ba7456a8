//! `SessionService` as an executor uses it: claim, renew, update, end, abandon.

use std::time::{Duration, SystemTime};

use toolgate_core::{ExecutorIdentity, Reason};
use toolgate_policy_api::{EndReason, Error, SessionRefusal, SessionState, StoredSession};

use super::{duration_to_wire, error_from_status, time_from_wire};
use crate::common::v1 as common;
use crate::convert::identity_to_wire;
use crate::policy::v1 as pb;

/// `ClaimSession`'s request, for the executor `executor`.
pub fn claim_session_request_to_wire(
    executor: &ExecutorIdentity,
    session_id: String,
    principal: String,
    ttl: Duration,
) -> pb::ClaimSessionRequest {
    pb::ClaimSessionRequest {
        session_id,
        principal,
        executor: Some(identity_to_wire(executor.clone())),
        ttl: duration_to_wire(ttl),
    }
}

/// `ClaimSession`'s answer; one without a session is an error (no sandbox may start on it).
pub fn claimed_session_from_wire(
    r: pb::ClaimSessionResponse,
) -> Result<StoredSession, SessionRefusal> {
    let s = r.session.ok_or_else(|| {
        SessionRefusal::Unavailable(Error::new(
            Reason::PolicyUnavailable,
            "the policy service answered ClaimSession without the session; no sandbox was started",
            [],
        ))
    })?;
    Ok(StoredSession {
        session_id: s.session_id,
        principal: s.principal,
        state: session_state_from_wire(s.state.unwrap_or_default()),
        claim_expires_at: time_from_wire(s.claim_expires_at).unwrap_or(SystemTime::UNIX_EPOCH),
        resumed: r.resumed,
    })
}

/// `RenewSessions`' request.
pub fn renew_sessions_request_to_wire(
    executor: &ExecutorIdentity,
    session_ids: Vec<String>,
    ttl: Duration,
) -> pb::RenewSessionsRequest {
    pb::RenewSessionsRequest {
        executor: Some(identity_to_wire(executor.clone())),
        session_ids,
        ttl: duration_to_wire(ttl),
    }
}

/// `UpdateSession`'s request.
pub fn update_session_request_to_wire(
    executor: &ExecutorIdentity,
    session_id: String,
    state: SessionState,
) -> pb::UpdateSessionRequest {
    pb::UpdateSessionRequest {
        session_id,
        executor: Some(identity_to_wire(executor.clone())),
        state: Some(session_state_to_wire(state)),
    }
}

/// `EndSession`'s request.
pub fn end_session_request_to_wire(
    executor: &ExecutorIdentity,
    session_id: String,
    reason: EndReason,
    runs_stopped: u32,
) -> pb::EndSessionRequest {
    pb::EndSessionRequest {
        session_id,
        executor: Some(identity_to_wire(executor.clone())),
        reason: reason.as_str().to_owned(),
        runs_stopped,
    }
}

/// `AbandonRuns`' request.
pub fn abandon_runs_request_to_wire(executor: &ExecutorIdentity) -> pb::AbandonRunsRequest {
    pb::AbandonRunsRequest {
        executor: Some(identity_to_wire(executor.clone())),
    }
}

/// A session's state on the wire.
pub fn session_state_to_wire(s: SessionState) -> common::SessionState {
    common::SessionState {
        cwd: s.cwd,
        env: s.env.into_iter().collect(),
    }
}

/// A wire session state in protocol terms.
pub fn session_state_from_wire(s: common::SessionState) -> SessionState {
    SessionState {
        cwd: s.cwd,
        env: s.env.into_iter().collect(),
    }
}

/// A refused claim or update: `SESSION_ELSEWHERE` names the holder, a `ROLE_NOT_PERMITTED`
/// about the session (its `ErrorInfo` names it) is another principal's session; anything
/// else is an error.
pub fn session_refusal(s: &tonic::Status) -> SessionRefusal {
    let e = error_from_status(s);
    match e.reason {
        Reason::SessionElsewhere => SessionRefusal::Elsewhere {
            executor_id: e.fact("executor_id").unwrap_or_default().to_owned(),
            pod: e.fact("pod").unwrap_or_default().to_owned(),
            claim_expires_at: e
                .fact("claim_expires_at")
                .and_then(|t| t.parse::<prost_types::Timestamp>().ok())
                .and_then(|t| SystemTime::try_from(t).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH),
        },
        Reason::RoleNotPermitted if e.fact("session_id").is_some() => {
            SessionRefusal::OtherPrincipal
        }
        _ => SessionRefusal::Unavailable(e),
    }
}
