//! The executor's session client against the real policy service over gRPC (issue 28):
//! claims route to their holder, state round-trips, a restart's abandon turns the executor's
//! unreported calls into OUTCOME_UNKNOWN, and the client fails over past a dead replica.

use crate::support::*;

use std::time::{Duration, SystemTime};

use toolgate_core::{ToolCall, ToolKind};
use toolgate_executor::authz::GrpcAuthorizer;
use toolgate_policy_api::{
    Authorization, AuthorizeRequest, Authorizer, EndReason, ExecutorIdentity, SessionLedger,
    SessionRefusal, SessionState,
};

fn identity(id: &str) -> ExecutorIdentity {
    ExecutorIdentity {
        executor_id: id.into(),
        pod: format!("{id}-pod"),
        ..Default::default()
    }
}

/// An address nothing listens on: a replica that died.
fn dead_replica() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

fn echo(call_id: &str, executor: &ExecutorIdentity) -> AuthorizeRequest {
    AuthorizeRequest {
        call_id: call_id.into(),
        session_id: "s1".into(),
        description: String::new(),
        principal: "agent-1".into(),
        call: ToolCall {
            argv: Some(vec!["echo".into(), "hi".into()]),
            ..ToolCall::new(ToolKind::ProcessRun)
        },
        labels: Default::default(),
        executor: executor.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_through_the_real_policy_service() {
    let policy = Policy::start(PERMISSIVE);
    let mut section = toolgate_executor::Config::default().policy;
    // A dead replica first: every call must fail over to the live one.
    section.endpoint = format!("{}, {}", dead_replica(), policy.endpoint());
    section.token = Some(policy.creds.executor.clone());
    let client = GrpcAuthorizer::new(&section).unwrap();
    let a = client.sessions(identity("ex-a"));
    let b = client.sessions(identity("ex-b"));
    let ttl = Duration::from_secs(60);

    let first = a
        .claim_session("s1".into(), "agent-1".into(), ttl)
        .await
        .unwrap();
    assert!(!first.resumed);
    assert_eq!(first.principal, "agent-1");
    assert_eq!(first.state, SessionState::default());
    let lasts = first
        .claim_expires_at
        .duration_since(SystemTime::now())
        .unwrap();
    assert!(lasts > Duration::from_secs(50), "{lasts:?}");

    // Another executor is told where the session lives and until when.
    match b.claim_session("s1".into(), "agent-1".into(), ttl).await {
        Err(SessionRefusal::Elsewhere {
            executor_id,
            pod,
            claim_expires_at,
        }) => {
            assert_eq!(executor_id, "ex-a");
            assert_eq!(pod, "ex-a-pod");
            let skew = claim_expires_at
                .duration_since(first.claim_expires_at)
                .unwrap_or_else(|e| e.duration());
            assert!(skew < Duration::from_millis(1), "{skew:?}");
        }
        other => panic!("expected Elsewhere, got {other:?}"),
    }
    assert!(matches!(
        a.claim_session("s1".into(), "agent-2".into(), ttl).await,
        Err(SessionRefusal::OtherPrincipal)
    ));
    assert!(matches!(
        b.update_session("s1".into(), SessionState::default()).await,
        Err(SessionRefusal::Elsewhere { .. })
    ));

    // State written by the holder comes back on its next claim (an executor restart).
    let state = SessionState {
        cwd: "sub".into(),
        env: [("NODE_ENV".to_owned(), "development".to_owned())].into(),
    };
    a.update_session("s1".into(), state.clone()).await.unwrap();
    let again = a
        .claim_session("s1".into(), "agent-1".into(), ttl)
        .await
        .unwrap();
    assert!(again.resumed);
    assert_eq!(again.state, state);
    assert_eq!(
        a.renew_sessions(vec!["s1".into(), "never".into()], ttl)
            .await
            .unwrap(),
        vec!["never".to_owned()]
    );

    // A restart: the unreported call is lost, its replay reads OUTCOME_UNKNOWN, the claim ends.
    let allowed = client
        .authorize(echo("c-1", &identity("ex-a")), None)
        .await
        .unwrap();
    let Authorization::Allowed { decision_id, .. } = allowed.authorization else {
        panic!("{allowed:?}")
    };
    // Another executor's call is not this one's to abandon.
    let foreign = client
        .authorize(echo("c-2", &identity("ex-b")), None)
        .await
        .unwrap();
    assert!(matches!(
        foreign.authorization,
        Authorization::Allowed { .. }
    ));
    assert_eq!(a.abandon_runs().await.unwrap(), 1);
    let replay = client
        .authorize(echo("c-1", &identity("ex-a")), None)
        .await
        .unwrap();
    match replay.authorization {
        Authorization::OutcomeUnknown {
            decision_id: lost, ..
        } => assert_eq!(lost, decision_id),
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
    let replay = client
        .authorize(echo("c-2", &identity("ex-b")), None)
        .await
        .unwrap();
    assert!(
        matches!(replay.authorization, Authorization::InFlight { .. }),
        "{replay:?}"
    );
    // The abandoned claim is free: the other executor takes the session over with its state.
    let moved = b
        .claim_session("s1".into(), "agent-1".into(), ttl)
        .await
        .unwrap();
    assert!(moved.resumed);
    assert_eq!(moved.state, state);
    b.end_session("s1".into(), EndReason::Idle, 0)
        .await
        .unwrap();
    assert!(matches!(
        b.update_session("s1".into(), state).await,
        Err(SessionRefusal::Elsewhere { .. })
    ));

    // The policy tier gone: fail closed, naming the endpoint.
    drop(policy);
    match a.claim_session("s2".into(), "agent-1".into(), ttl).await {
        Err(SessionRefusal::Unavailable(f)) => {
            assert_eq!(f.reason, toolgate_core::Reason::PolicyUnavailable, "{f:?}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let f = a.abandon_runs().await.unwrap_err();
    assert_eq!(f.reason, toolgate_core::Reason::PolicyUnavailable, "{f:?}");
}
