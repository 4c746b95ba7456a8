//! [`Local`]: the policy protocol answered in process, for an executor in the same process
//! (`toolgate up`). It is what the gRPC adapters do without the wire: the caller's role is
//! checked first, then the request is validated, then the core answers; errors become the
//! protocol's [`Error`] with the reason, message and metadata a gRPC client would read.

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use toolgate_core::{ExecutorIdentity, ReasonedError};
use toolgate_ledger as ledger;
use toolgate_policy_api::{
    ApprovalStatus, AuthorizeAnswer, AuthorizeRequest, Authorizer, EndReason, Error, Explanation,
    OutcomeReport, SessionLedger, SessionRefusal, SessionState, StoredSession,
};
use toolgate_runtime::auth::{Principal, Role};

use crate::core::{
    ClaimRequest, EndRequest, PolicyCore, PolicyError, RenewRequest, UpdateRequest, WaitRequest,
    claim_ttl, parse_id, require, session_state,
};
use crate::outcome::system_time;

const EXECUTORS: &[Role] = &[Role::Executor];

/// The policy core as one authenticated executor sees it: [`Authorizer`] and
/// [`SessionLedger`] without a network hop or a protobuf message. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Local {
    core: PolicyCore,
    caller: Principal,
    identity: ExecutorIdentity,
}

impl Local {
    /// Acts as `caller` (an `executor` credential) reporting itself as `identity`.
    pub fn new(core: PolicyCore, caller: Principal, identity: ExecutorIdentity) -> Self {
        Local {
            core,
            caller,
            identity,
        }
    }
}

/// The protocol error for a core error; database failures and bugs are logged here, once,
/// as the gRPC adapters log them.
fn error(e: &PolicyError) -> Error {
    if e.is_failure() {
        tracing::error!(error = %e, reason = %e.reason(), "policy request failed");
    }
    Error::from_reasoned(e)
}

/// A refused claim or update, told apart as a gRPC client tells them apart.
fn refusal(e: &PolicyError) -> SessionRefusal {
    match e {
        PolicyError::Ledger(ledger::Error::SessionElsewhere {
            executor_id,
            pod,
            claim_expires_at_micros,
            ..
        }) => SessionRefusal::Elsewhere {
            executor_id: executor_id.clone(),
            pod: pod.clone(),
            claim_expires_at: system_time(ledger::Timestamp::from_micros(*claim_expires_at_micros)),
        },
        PolicyError::Ledger(ledger::Error::SessionOtherPrincipal { .. }) => {
            SessionRefusal::OtherPrincipal
        }
        other => SessionRefusal::Unavailable(error(other)),
    }
}

impl Authorizer for Local {
    fn authorize(
        &self,
        request: AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<AuthorizeAnswer, Error>> {
        async move {
            let decided = self
                .core
                .authorize(&self.caller, request, traceparent.as_deref())
                .await
                .map_err(|e| error(&e))?;
            let d = &decided.decision;
            Ok(AuthorizeAnswer {
                authorization: decided.authorization,
                explanation: Some(Explanation {
                    message: d.message.clone(),
                    rule_id: d
                        .deciding_rule()
                        .map_or_else(|| "default".to_owned(), |m| m.rule_id.clone()),
                    policy_version: d.policy_version.clone(),
                }),
            })
        }
        .boxed()
    }

    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), Error>> {
        async move {
            self.core
                .record_outcome(&self.caller, report)
                .await
                .map(|_| ())
                .map_err(|e| error(&e))
        }
        .boxed()
    }

    fn wait_for_approval(
        &self,
        approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, Error>> {
        async move {
            let wait = async {
                require(&self.caller, "WaitForApproval", EXECUTORS)?;
                let request = WaitRequest {
                    approval_id: parse_id("approval_id", approval_id)?,
                    timeout,
                };
                self.core.wait_for_approval(&self.caller, request).await
            };
            let view = wait.await.map_err(|e| error(&e))?;
            let a = view.approval;
            Ok(ApprovalStatus {
                approval_id: a.id.as_str().to_owned(),
                state: view.state,
                decided_by: a.decided_by.map(|p| p.to_string()).unwrap_or_default(),
                message_to_model: a.message.unwrap_or_default(),
                reason: a.reason.unwrap_or_default(),
            })
        }
        .boxed()
    }
}

fn stored_session(claimed: ledger::Claimed) -> StoredSession {
    let s = claimed.session;
    StoredSession {
        session_id: s.session_id.as_str().to_owned(),
        principal: s.principal.as_str().to_owned(),
        state: s.state,
        claim_expires_at: system_time(s.claim_expires_at),
        resumed: claimed.resumed,
    }
}

impl SessionLedger for Local {
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>> {
        async move {
            let claim = async {
                require(&self.caller, "ClaimSession", EXECUTORS)?;
                let request = ClaimRequest {
                    session_id: parse_id("session_id", session_id)?,
                    principal: parse_id("principal", principal)?,
                    executor: self.identity.clone(),
                    ttl: claim_ttl("ttl", ttl)?,
                };
                self.core.claim_session(&self.caller, request).await
            };
            claim.await.map(stored_session).map_err(|e| refusal(&e))
        }
        .boxed()
    }

    fn renew_sessions(
        &self,
        session_ids: Vec<String>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, Error>> {
        async move {
            let renew = async {
                require(&self.caller, "RenewSessions", EXECUTORS)?;
                let request = RenewRequest {
                    executor: self.identity.clone(),
                    session_ids: session_ids
                        .into_iter()
                        .map(|s| parse_id("session_ids", s))
                        .collect::<Result<_, _>>()?,
                    ttl: claim_ttl("ttl", ttl)?,
                };
                self.core.renew_sessions(&self.caller, request).await
            };
            let lost = renew.await.map_err(|e| error(&e))?;
            Ok(lost.into_iter().map(|s| s.as_str().to_owned()).collect())
        }
        .boxed()
    }

    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>> {
        async move {
            let update = async {
                require(&self.caller, "UpdateSession", EXECUTORS)?;
                let request = UpdateRequest {
                    session_id: parse_id("session_id", session_id)?,
                    executor: self.identity.clone(),
                    state: session_state(state)?,
                };
                self.core.update_session(&self.caller, request).await
            };
            update.await.map(|_| ()).map_err(|e| refusal(&e))
        }
        .boxed()
    }

    fn end_session(
        &self,
        session_id: String,
        reason: EndReason,
        runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), Error>> {
        async move {
            let end = async {
                require(&self.caller, "EndSession", EXECUTORS)?;
                let request = EndRequest {
                    session_id: parse_id("session_id", session_id)?,
                    executor: self.identity.clone(),
                    reason: reason.as_str().to_owned(),
                    runs_stopped,
                };
                self.core.end_session(&self.caller, request).await
            };
            end.await.map(|_| ()).map_err(|e| error(&e))
        }
        .boxed()
    }

    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, Error>> {
        async move {
            let abandon = async {
                require(&self.caller, "AbandonRuns", EXECUTORS)?;
                self.core
                    .abandon_runs(&self.caller, self.identity.clone())
                    .await
            };
            abandon
                .await
                .map(|gone| gone.decision_ids.len())
                .map_err(|e| error(&e))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{ToolCall, ToolKind};
    use toolgate_policy_api::Authorization;

    async fn core(dir: &tempfile::TempDir) -> PolicyCore {
        let mut cfg = crate::Config::default();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("l.db").display()));
        PolicyCore::open(&cfg).await.unwrap()
    }

    fn exec() -> Principal {
        Principal {
            name: "exec".into(),
            role: Role::Executor,
        }
    }

    fn search(call_id: &str) -> AuthorizeRequest {
        AuthorizeRequest {
            call_id: call_id.into(),
            session_id: "s1".into(),
            description: String::new(),
            principal: "agent".into(),
            call: ToolCall {
                pattern: Some("matchme".into()),
                ..ToolCall::fs(ToolKind::FsSearch, ".")
            },
            labels: Default::default(),
            executor: ExecutorIdentity::default(),
        }
    }

    /// In process the caller's role is checked before anything in the request: an agent
    /// credential learns nothing about its input, as over gRPC.
    #[tokio::test]
    async fn the_role_is_checked_before_the_request() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Principal {
            name: "agent".into(),
            role: Role::Agent,
        };
        let local = Local::new(core(&dir).await, agent, ExecutorIdentity::default());
        let e = local
            .authorize(search("not a valid call id"), None)
            .await
            .unwrap_err();
        assert_eq!(e.reason, toolgate_core::Reason::RoleNotPermitted);
        let e = local
            .wait_for_approval("bad id".into(), Duration::ZERO)
            .await
            .unwrap_err();
        assert_eq!(e.reason, toolgate_core::Reason::RoleNotPermitted);
        // An executor's invalid id is named by its wire field.
        let local = Local::new(core(&dir).await, exec(), ExecutorIdentity::default());
        let e = local
            .authorize(search("not a valid call id"), None)
            .await
            .unwrap_err();
        assert_eq!(e.reason, toolgate_core::Reason::InvalidRequest);
        assert_eq!(e.fact("field"), Some("context.call_id"));
    }

    /// A replayed `call_id` answers in process what it answers over gRPC: in flight while its
    /// lease runs, with the decision it was allowed under.
    #[tokio::test]
    async fn a_replayed_call_is_in_flight_until_its_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let local = Local::new(core(&dir).await, exec(), ExecutorIdentity::default());
        let first = local.authorize(search("c1"), None).await.unwrap();
        let Authorization::Allowed { decision_id, .. } = first.authorization else {
            panic!("not allowed: {first:?}");
        };
        let again = local.authorize(search("c1"), None).await.unwrap();
        assert!(
            matches!(&again.authorization, Authorization::InFlight { decision_id: d, lease_expires_at: Some(_), .. } if *d == decision_id),
            "{again:?}"
        );
    }

    /// `toolgate up` runs the same `PolicyCore::authorize` as the policy service, so an
    /// allowed search carries the paths the shipped policy's `secrets` rule hides.
    #[tokio::test]
    async fn an_allowed_search_in_process_carries_the_hidden_paths_and_their_version() {
        let dir = tempfile::tempdir().unwrap();
        let core = core(&dir).await;
        let version = core.policy().version().to_owned();
        let r = Local::new(core, exec(), ExecutorIdentity::default())
            .authorize(search("c1"), None)
            .await
            .unwrap();
        let Authorization::Allowed { hidden, .. } = r.authorization else {
            panic!("not allowed: {r:?}");
        };
        let hidden = hidden.expect("hidden paths");
        assert_eq!(hidden.policy_version, version);
        assert!(hidden.globs.iter().any(|g| g == "**/.env"), "{hidden:?}");
    }

    /// `toolgate up`'s sessions go through the same core as over gRPC: a claim is refused
    /// elsewhere, state round-trips, a restart's abandon ends the claim.
    #[tokio::test]
    async fn sessions_in_process_claim_update_and_abandon() {
        let dir = tempfile::tempdir().unwrap();
        let core = core(&dir).await;
        let id = |i: &str| ExecutorIdentity {
            executor_id: i.into(),
            pod: format!("{i}-pod"),
            ..Default::default()
        };
        let a = Local::new(core.clone(), exec(), id("up-a"));
        let b = Local::new(core, exec(), id("up-b"));
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
