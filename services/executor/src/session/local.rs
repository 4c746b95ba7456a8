//! The session ledger of an executor that shares no ledger with another: sessions kept in
//! memory, for an embedding that passes no [`SessionLedger`] (a benchmark's in-process
//! executor). It holds every session itself (no other executor can), keeps each session's
//! principal and state for the life of the process, and has no earlier life to abandon.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;

use toolgate_policy_api::{
    EndReason, Error as PolicyError, SessionLedger, SessionRefusal, SessionState, StoredSession,
};

/// Sessions in this process's memory.
#[derive(Debug, Default)]
pub(crate) struct LocalLedger {
    sessions: Mutex<HashMap<String, (String, SessionState, bool)>>,
}

impl SessionLedger for LocalLedger {
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>> {
        let mut sessions = super::lock(&self.sessions);
        let (owner, state, ended) = sessions
            .entry(session_id.clone())
            .or_insert_with(|| (principal.clone(), SessionState::default(), false))
            .clone();
        let answer = if owner == principal {
            if let Some(s) = sessions.get_mut(&session_id) {
                s.2 = false;
            }
            Ok(StoredSession {
                session_id,
                principal,
                state,
                claim_expires_at: SystemTime::now() + ttl,
                resumed: ended,
            })
        } else {
            Err(SessionRefusal::OtherPrincipal)
        };
        Box::pin(std::future::ready(answer))
    }

    fn renew_sessions(
        &self,
        _session_ids: Vec<String>,
        _ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, PolicyError>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }

    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>> {
        if let Some(s) = super::lock(&self.sessions).get_mut(&session_id) {
            s.1 = state;
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn end_session(
        &self,
        session_id: String,
        _reason: EndReason,
        _runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), PolicyError>> {
        if let Some(s) = super::lock(&self.sessions).get_mut(&session_id) {
            s.2 = true;
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, PolicyError>> {
        Box::pin(std::future::ready(Ok(0)))
    }
}
