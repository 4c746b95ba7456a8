//! The executor's way to the policy when both run in one process: through the policy
//! service's own adapter ([`PolicyAdapter`]) and the executor's own contract mapping
//! ([`contract`]), without a network hop, so every request and answer is read exactly as
//! over gRPC.

use std::time::Duration;

use futures::future::BoxFuture;
use toolgate_executor::authz::Authorizer;
use toolgate_executor::authz::api::ExecutorIdentity;
use toolgate_executor::authz::api::{
    ApprovalStatus, AuthorizeRequest, OutcomeReport, PolicyAnswer, PolicyFailure,
};
use toolgate_executor::authz::contract;
use toolgate_executor::authz::sessions::{
    EndReason, SessionLedger, SessionRefusal, SessionState, StoredSession,
};
use toolgate_policy::{PolicyAdapter, PolicyCore, SessionAdapter};
use toolgate_runtime::auth::Principal;

/// Calls the policy core in process, as the embedded executor's principal.
pub(super) struct InProcess {
    policy: PolicyAdapter,
    executor: Principal,
}

impl InProcess {
    /// Authorizes as `executor` (role `executor`, so it may act for any agent principal).
    pub(super) fn new(core: PolicyCore, executor: Principal) -> Self {
        InProcess {
            policy: PolicyAdapter::new(core),
            executor,
        }
    }
}

impl Authorizer for InProcess {
    fn authorize(
        &self,
        request: AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<PolicyAnswer, PolicyFailure>> {
        Box::pin(async move {
            let answer = self
                .policy
                .authorize_as(
                    &self.executor,
                    contract::authorize_request(request),
                    traceparent.as_deref(),
                )
                .await
                .map_err(|s| contract::failure(&s))?;
            contract::policy_answer(answer)
        })
    }

    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), PolicyFailure>> {
        Box::pin(async move {
            self.policy
                .record_outcome_as(&self.executor, contract::outcome_request(report))
                .await
                .map(|_| ())
                .map_err(|s| contract::failure(&s))
        })
    }

    fn wait_for_approval(
        &self,
        approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, PolicyFailure>> {
        Box::pin(async move {
            let answer = self
                .policy
                .wait_for_approval_as(
                    &self.executor,
                    contract::wait_request(&approval_id, timeout),
                )
                .await
                .map_err(|s| contract::failure(&s))?;
            contract::approval_status(answer)
        })
    }
}

/// The ledger's side of sessions in process: the policy service's own `SessionService`
/// adapter, as the embedded executor's principal and identity, through the same contract
/// mapping as over gRPC.
pub(crate) struct InProcessSessions {
    sessions: SessionAdapter,
    executor: Principal,
    identity: ExecutorIdentity,
}

impl InProcessSessions {
    /// Acts as `executor` (role `executor`) reporting `identity`.
    pub(crate) fn new(core: PolicyCore, executor: Principal, identity: ExecutorIdentity) -> Self {
        InProcessSessions {
            sessions: SessionAdapter::new(core),
            executor,
            identity,
        }
    }
}

impl SessionLedger for InProcessSessions {
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>> {
        Box::pin(async move {
            let request =
                contract::claim_session_request(&self.identity, session_id, principal, ttl);
            let answer = self
                .sessions
                .claim_session_as(&self.executor, request)
                .await
                .map_err(|s| contract::session_refusal(&s))?;
            contract::claimed_session(answer)
        })
    }

    fn renew_sessions(
        &self,
        session_ids: Vec<String>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, PolicyFailure>> {
        Box::pin(async move {
            let request = contract::renew_sessions_request(&self.identity, session_ids, ttl);
            self.sessions
                .renew_sessions_as(&self.executor, request)
                .await
                .map(|r| r.lost)
                .map_err(|s| contract::failure(&s))
        })
    }

    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>> {
        Box::pin(async move {
            let request = contract::update_session_request(&self.identity, session_id, state);
            self.sessions
                .update_session_as(&self.executor, request)
                .await
                .map(|_| ())
                .map_err(|s| contract::session_refusal(&s))
        })
    }

    fn end_session(
        &self,
        session_id: String,
        reason: EndReason,
        runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), PolicyFailure>> {
        Box::pin(async move {
            let request =
                contract::end_session_request(&self.identity, session_id, reason, runs_stopped);
            self.sessions
                .end_session_as(&self.executor, request)
                .await
                .map(|_| ())
                .map_err(|s| contract::failure(&s))
        })
    }

    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, PolicyFailure>> {
        Box::pin(async move {
            self.sessions
                .abandon_runs_as(
                    &self.executor,
                    contract::abandon_runs_request(&self.identity),
                )
                .await
                .map(|r| r.decision_ids.len())
                .map_err(|s| contract::failure(&s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{ToolCall, ToolKind};
    use toolgate_executor::authz::api::Verdict;
    use toolgate_runtime::auth::Role;

    /// `toolgate up` runs the same `PolicyCore::authorize` as the policy service, so an
    /// allowed search carries the paths the shipped policy's `secrets` rule hides.
    #[tokio::test]
    async fn an_allowed_search_in_process_carries_the_hidden_paths_and_their_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = toolgate_policy::Config::default();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("l.db").display()));
        let core = PolicyCore::open(&cfg).await.unwrap();
        let version = core.policy().version().to_owned();
        let exec = Principal {
            name: "exec".into(),
            role: Role::Executor,
        };
        let r = InProcess::new(core, exec)
            .authorize(
                AuthorizeRequest {
                    call_id: "c1".into(),
                    session_id: "s1".into(),
                    description: String::new(),
                    principal: "agent".into(),
                    call: ToolCall {
                        pattern: Some("matchme".into()),
                        ..ToolCall::fs(ToolKind::FsSearch, ".")
                    },
                    labels: Default::default(),
                    executor: Default::default(),
                },
                None,
            )
            .await
            .unwrap();
        let Verdict::Allowed { hidden, .. } = r.verdict else {
            panic!("not allowed: {r:?}");
        };
        let hidden = hidden.expect("hidden paths");
        assert_eq!(hidden.policy_version, version);
        assert!(hidden.globs.iter().any(|g| g == "**/.env"), "{hidden:?}");
    }

    /// `toolgate up`'s sessions go through the same core and mapping as over gRPC: a claim
    /// is refused elsewhere, state round-trips, a restart's abandon ends the claim.
    #[tokio::test]
    async fn sessions_in_process_claim_update_and_abandon() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = toolgate_policy::Config::default();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("l.db").display()));
        let core = PolicyCore::open(&cfg).await.unwrap();
        let exec = Principal {
            name: "exec".into(),
            role: Role::Executor,
        };
        let id = |i: &str| ExecutorIdentity {
            executor_id: i.into(),
            pod: format!("{i}-pod"),
            ..Default::default()
        };
        let a = InProcessSessions::new(core.clone(), exec.clone(), id("up-a"));
        let b = InProcessSessions::new(core, exec, id("up-b"));
        let ttl = Duration::from_secs(30);
        let first = a
            .claim_session("s1".into(), "agent".into(), ttl)
            .await
            .unwrap();
        assert!(!first.resumed);
        match b.claim_session("s1".into(), "agent".into(), ttl).await {
            Err(SessionRefusal::Elsewhere {
                executor_id, pod, ..
            }) => assert_eq!((executor_id.as_str(), pod.as_str()), ("up-a", "up-a-pod")),
            other => panic!("expected Elsewhere, got {other:?}"),
        }
        assert!(matches!(
            a.claim_session("s1".into(), "someone-else".into(), ttl)
                .await,
            Err(SessionRefusal::OtherPrincipal)
        ));
        let state = SessionState {
            cwd: "sub".into(),
            env: [("A".to_owned(), "1".to_owned())].into(),
        };
        a.update_session("s1".into(), state.clone()).await.unwrap();
        assert_eq!(a.abandon_runs().await.unwrap(), 0);
        let moved = b
            .claim_session("s1".into(), "agent".into(), ttl)
            .await
            .unwrap();
        assert!(moved.resumed);
        assert_eq!(moved.state, state);
        assert!(
            b.renew_sessions(vec!["s1".into()], ttl)
                .await
                .unwrap()
                .is_empty()
        );
        b.end_session("s1".into(), EndReason::Shutdown, 2)
            .await
            .unwrap();
    }
}
