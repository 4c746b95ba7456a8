//! `SessionService` end to end (issue 28): the real binary over a real ledger, its roles, the
//! binding of a claim to the executor's credential, and the abandon that turns an executor's
//! unreported calls into OUTCOME_UNKNOWN.

use crate::support;

use std::time::Duration;

use support::*;
use tonic::Code;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;

on_both_backends!(
    sessions_round_trip_and_route_to_their_holder,
    abandon_turns_an_executors_unreported_calls_unknown,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_roles_follow_the_service_comment() {
    session_roles(Backend::Sqlite).await;
}

fn identity(id: &str) -> common::ExecutorIdentity {
    common::ExecutorIdentity {
        executor_id: id.into(),
        pod: format!("{id}-pod"),
        node: "node-a".into(),
        ..Default::default()
    }
}

fn claim(session: &str, principal: &str, executor: &str) -> pb::ClaimSessionRequest {
    pb::ClaimSessionRequest {
        session_id: session.into(),
        principal: principal.into(),
        executor: Some(identity(executor)),
        ttl: Some(prost_types::Duration {
            seconds: 60,
            nanos: 0,
        }),
    }
}

fn get(session: &str) -> pb::GetSessionRequest {
    pb::GetSessionRequest {
        session_id: session.into(),
    }
}

async fn session_roles(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    // Agents neither claim nor read sessions; approvers read but never claim.
    for cred in [AGENT, ALICE, OPS] {
        let e = server
            .sessions(cred)
            .await
            .claim_session(claim("s1", "agent-1", "ex-a"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{cred:?}: {e:?}");
        assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
        let e = server
            .sessions(cred)
            .await
            .abandon_runs(pb::AbandonRunsRequest {
                executor: Some(identity("ex-a")),
            })
            .await
            .unwrap_err();
        assert_eq!(reason(&e), "ROLE_NOT_PERMITTED", "{cred:?}");
    }
    let e = server
        .sessions(AGENT)
        .await
        .list_sessions(pb::ListSessionsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    let e = server
        .sessions(AGENT)
        .await
        .get_session(get("s1"))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    // Without a credential: unauthenticated.
    let e = toolgate_contracts::policy::v1::session_service_client::SessionServiceClient::new(
        server.channel().await,
    )
    .list_sessions(pb::ListSessionsRequest::default())
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    server
        .sessions(EXEC)
        .await
        .claim_session(claim("s1", "agent-1", "ex-a"))
        .await
        .unwrap();
    for cred in [ALICE, OPS, EXEC] {
        let s = server
            .sessions(cred)
            .await
            .get_session(get("s1"))
            .await
            .unwrap()
            .into_inner()
            .session
            .unwrap();
        assert_eq!(s.principal, "agent-1", "{cred:?}");
        let listed = server
            .sessions(cred)
            .await
            .list_sessions(pb::ListSessionsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .sessions;
        assert_eq!(listed.len(), 1, "{cred:?}");
    }
}

async fn sessions_round_trip_and_route_to_their_holder(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.sessions(EXEC).await;
    let mut other = server.sessions(EXEC2).await;

    let first = exec
        .claim_session(claim("s1", "agent-1", "ex-a"))
        .await
        .unwrap()
        .into_inner();
    assert!(!first.resumed);
    let s = first.session.unwrap();
    assert!(s.claimed);
    assert_eq!(s.executor.as_ref().unwrap().executor_id, "ex-a");
    assert_eq!(s.executor.as_ref().unwrap().pod, "ex-a-pod");
    assert_eq!(s.ended_at, None);

    // Another executor is sent to the holder.
    let e = other
        .claim_session(claim("s1", "agent-1", "ex-b"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let (r, md) = toolgate_contracts::status::error_info(&e).unwrap();
    assert_eq!(r, "SESSION_ELSEWHERE");
    assert_eq!(md["executor_id"], "ex-a");
    assert_eq!(md["pod"], "ex-a-pod");
    let until = s.claim_expires_at.unwrap();
    let until: std::time::SystemTime = until.try_into().unwrap();
    assert!(
        md["claim_expires_at"].starts_with(&prost_types::Timestamp::from(until).to_string()[..19]),
        "{md:?}"
    );
    assert!(e.message().contains("ex-a-pod"), "{}", e.message());
    // Claiming the holder's executor id under another credential is no way in: an executor
    // acts only as itself.
    let e = other
        .claim_session(claim("s1", "agent-1", "ex-a"))
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "SESSION_ELSEWHERE");
    let e = other
        .update_session(pb::UpdateSessionRequest {
            session_id: "s1".into(),
            executor: Some(identity("ex-a")),
            state: Some(common::SessionState {
                cwd: "evil".into(),
                env: Default::default(),
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "SESSION_ELSEWHERE");
    // Another principal's session is refused.
    let e = exec
        .claim_session(claim("s1", "agent-2", "ex-a"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");

    // The holder stores its state; a reader sees it.
    let updated = exec
        .update_session(pb::UpdateSessionRequest {
            session_id: "s1".into(),
            executor: Some(identity("ex-a")),
            state: Some(common::SessionState {
                cwd: "sub".into(),
                env: [("NODE_ENV".to_owned(), "development".to_owned())].into(),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(updated.state.as_ref().unwrap().cwd, "sub");
    let read = server
        .sessions(ALICE)
        .await
        .get_session(get("s1"))
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(read.state.as_ref().unwrap().cwd, "sub");
    assert_eq!(read.state.as_ref().unwrap().env["NODE_ENV"], "development");

    // Renew: held ones are extended, the others named.
    let lost = exec
        .renew_sessions(pb::RenewSessionsRequest {
            executor: Some(identity("ex-a")),
            session_ids: vec!["s1".into(), "never".into()],
            ttl: None,
        })
        .await
        .unwrap()
        .into_inner()
        .lost;
    assert_eq!(lost, vec!["never".to_owned()]);

    // End: recorded and released; the state stays for the next claim, anywhere.
    let ended = exec
        .end_session(pb::EndSessionRequest {
            session_id: "s1".into(),
            executor: Some(identity("ex-a")),
            reason: "idle".into(),
            runs_stopped: 1,
        })
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert!(!ended.claimed);
    assert_eq!(ended.end_reason, "idle");
    assert!(ended.ended_at.is_some());
    let moved = other
        .claim_session(claim("s1", "agent-1", "ex-b"))
        .await
        .unwrap()
        .into_inner();
    assert!(moved.resumed);
    assert_eq!(moved.session.unwrap().state.unwrap().cwd, "sub");
    let claimed = server
        .sessions(OPS)
        .await
        .list_sessions(pb::ListSessionsRequest {
            principal: "agent-1".into(),
            claimed_only: true,
            limit: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].executor.as_ref().unwrap().executor_id, "ex-b");

    // Bad input: unknown, empty and oversized ids, a missing executor, a bad reason.
    let e = exec.get_session(get("nope")).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert_eq!(reason(&e), "NOT_FOUND");
    for bad in [String::new(), "x".repeat(129)] {
        let e = exec.get_session(get(&bad)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert_eq!(reason(&e), "INVALID_REQUEST");
        let e = exec
            .claim_session(claim(&bad, "agent-1", "ex-a"))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    }
    let mut no_executor = claim("s2", "agent-1", "ex-a");
    no_executor.executor = None;
    let e = exec.claim_session(no_executor).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("executor"), "{}", e.message());
    let e = exec
        .claim_session(claim("s2", "agent-1", ""))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let e = exec
        .end_session(pb::EndSessionRequest {
            session_id: "s1".into(),
            executor: Some(identity("ex-a")),
            reason: "bored".into(),
            runs_stopped: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let mut forever = claim("s2", "agent-1", "ex-a");
    forever.ttl = Some(prost_types::Duration {
        seconds: 86_400,
        nanos: 0,
    });
    let e = exec.claim_session(forever).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
}

async fn abandon_turns_an_executors_unreported_calls_unknown(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut policy = server.policy(EXEC).await;
    let echo = || run(&["echo", "hi"]);
    // `authorize` reports executor id `exec-pod-1`.
    let allowed = |r: &pb::AuthorizeResponse| match result(r) {
        R::Allowed(a) => a.decision_id.clone(),
        other => panic!("expected allowed, got {other:?}"),
    };
    let running = allowed(
        &policy
            .authorize(authorize("ab-1", "s1", "agent-1", echo()))
            .await
            .unwrap()
            .into_inner(),
    );
    let reported = allowed(
        &policy
            .authorize(authorize("ab-2", "s1", "agent-1", echo()))
            .await
            .unwrap()
            .into_inner(),
    );
    policy
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: reported.clone(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap();
    // The same executor id under another credential is another executor's call.
    let foreign = allowed(
        &server
            .policy(EXEC2)
            .await
            .authorize(authorize("ab-3", "s1", "agent-1", echo()))
            .await
            .unwrap()
            .into_inner(),
    );
    let mut sessions = server.sessions(EXEC).await;
    sessions
        .claim_session(claim("s1", "agent-1", "exec-pod-1"))
        .await
        .unwrap();

    // The executor restarts.
    let gone = sessions
        .abandon_runs(pb::AbandonRunsRequest {
            executor: Some(identity("exec-pod-1")),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(gone.decision_ids, vec![running.clone()]);
    assert_eq!(gone.session_ids, vec!["s1".to_owned()]);

    // Its replay reads unknown, and a late report is refused.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r = policy
        .authorize(authorize("ab-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let R::OutcomeUnknown(u) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(u.decision_id, running);
    let e = policy
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: running.clone(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&e), "OUTCOME_UNKNOWN");
    // The other credential's call still runs and reports.
    server
        .policy(EXEC2)
        .await
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: foreign,
            outcome: Some(exited(0)),
        })
        .await
        .unwrap();
    let s = sessions
        .get_session(get("s1"))
        .await
        .unwrap()
        .into_inner()
        .session
        .unwrap();
    assert_eq!(s.end_reason, "abandoned");
    assert!(!s.claimed);
}
