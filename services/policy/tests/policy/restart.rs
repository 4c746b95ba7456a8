//! SIGKILL the policy service with approvals pending and a consumed call unreported:
//! nothing is lost, pending approvals stay approvable, and the unreported call becomes
//! `unknown` after its lease and never runs again (AP-12, AP-14).

use crate::support;

use support::*;
use tokio_stream::StreamExt;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;

fn pending_id(r: &pb::AuthorizeResponse) -> String {
    match r.result.as_ref().unwrap() {
        R::Pending(p) => p.approval_id.clone(),
        other => panic!("expected pending, got {other:?}"),
    }
}

fn approve(id: &str) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        approval_id: id.into(),
        verdict: pb::Verdict::Approve as i32,
        ..Default::default()
    }
}

const PARKED: &[&str] = &["terraform", "apply", "-target=parked"];
const INFLIGHT: &[&str] = &["terraform", "apply", "-target=inflight"];

async fn survives_sigkill(backend: Backend) {
    let db = Db::new(backend).await;
    let mut server = Server::start(
        &db.url,
        &Options {
            lease_ms: 1_500,
            ..Options::default()
        },
    );
    let mut exec = server.policy(EXEC).await;
    let parked = pending_id(
        &exec
            .authorize(authorize("k-parked", "s", "agent-1", run(PARKED)))
            .await
            .unwrap()
            .into_inner(),
    );
    let inflight = pending_id(
        &exec
            .authorize(authorize("k-inflight", "s", "agent-1", run(INFLIGHT)))
            .await
            .unwrap()
            .into_inner(),
    );
    server
        .approvals(ALICE)
        .await
        .decide_approval(approve(&inflight))
        .await
        .unwrap();
    let r = exec
        .authorize(authorize("k-inflight", "s", "agent-1", run(INFLIGHT)))
        .await
        .unwrap()
        .into_inner();
    let Some(R::Allowed(consumed)) = r.result else {
        panic!("{r:?}")
    };
    assert!(consumed.lease_expires_at.is_some());

    // The executor "dies" without reporting, and the policy service is SIGKILLed.
    server.restart();
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;

    // The parked approval is still pending and approvable; the call then resumes.
    let a = alice
        .get_approval(pb::GetApprovalRequest {
            approval_id: parked.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(a.state, pb::ApprovalState::Pending as i32);
    alice.decide_approval(approve(&parked)).await.unwrap();
    let r = exec
        .authorize(authorize("k-parked", "s", "agent-1", run(PARKED)))
        .await
        .unwrap()
        .into_inner();
    let Some(R::Allowed(resumed)) = r.result else {
        panic!("{r:?}")
    };
    // This one reports in time, so only the unreported call may turn unknown.
    exec.record_outcome(pb::RecordOutcomeRequest {
        decision_id: resumed.decision_id,
        outcome: Some(exited(0)),
    })
    .await
    .unwrap();

    // The unreported consumption turns `unknown` once its lease lapses (the sweeper of the
    // restarted process does it; watch for it rather than polling).
    let mut unknown = alice
        .watch_approvals(pb::WatchApprovalsRequest {
            states: vec![pb::ApprovalState::Unknown as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let event = tokio::time::timeout(SOON, unknown.next())
        .await
        .expect("the lease lapses and the sweep reports it")
        .unwrap()
        .unwrap();
    assert_eq!(event.approval.unwrap().approval_id, inflight);

    // Never run again: not under its call id, and its approval covers no new call.
    let r = exec
        .authorize(authorize("k-inflight", "s", "agent-1", run(INFLIGHT)))
        .await
        .unwrap()
        .into_inner();
    // No outcome was ever reported: unknown, never "already executed".
    let Some(R::OutcomeUnknown(done)) = r.result else {
        panic!("{r:?}")
    };
    assert_eq!(done.decision_id, consumed.decision_id);
    let r = exec
        .authorize(authorize("k-inflight-again", "s", "agent-1", run(INFLIGHT)))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), inflight, "a human must approve it anew");
    // The stale executor's late report is fenced off.
    let e = exec
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: consumed.decision_id.clone(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&e), "APPROVAL_NOT_PENDING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pending_survives_sigkill_and_lapsed_leases_become_unknown() {
    survives_sigkill(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_pending_survives_sigkill_and_lapsed_leases_become_unknown() {
    survives_sigkill(Backend::Sqlite).await;
}

/// The policy process dies after the decision committed and before the executor heard of it
/// (the client saw POLICY_UNAVAILABLE; nothing ran). After a restart, the same `call_id` is
/// in flight while the lease runs, then unknown: never "already executed", never run.
async fn dies_between_commit_and_answer(backend: Backend) {
    let db = Db::new(backend).await;
    let lease = std::time::Duration::from_millis(1_500);
    let mut server = Server::start(
        &db.url,
        &Options {
            lease_ms: lease.as_millis() as u64,
            crash_at: Some("authorize.after_commit"),
            ..Options::default()
        },
    );
    let mut exec = server.policy(EXEC).await;
    let e = exec
        .authorize(authorize("x-1", "s", "agent-1", run(&["echo", "hi"])))
        .await
        .unwrap_err();
    // The connection died with the process: no answer (hyper reports the broken stream as
    // UNKNOWN or UNAVAILABLE; the executor turns both into POLICY_UNAVAILABLE), nothing allowed.
    assert!(
        matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Unknown),
        "{e:?}"
    );
    server.restart();
    let mut exec = server.policy(EXEC).await;
    let replay = || authorize("x-1", "s", "agent-1", run(&["echo", "hi"]));
    let r = exec.authorize(replay()).await.unwrap().into_inner();
    let Some(R::InFlight(f)) = r.result else {
        panic!("{r:?}")
    };
    let until = f.lease_expires_at.expect("the committed decision's lease");
    tokio::time::sleep(lease + std::time::Duration::from_millis(300)).await;
    for _ in 0..2 {
        let r = exec.authorize(replay()).await.unwrap().into_inner();
        let Some(R::OutcomeUnknown(u)) = r.result else {
            panic!("{r:?}")
        };
        assert_eq!(u.decision_id, f.decision_id);
        assert_eq!(u.lease_expired_at.as_ref(), Some(&until));
    }
    // A new call_id for the same call is allowed normally.
    let r = exec
        .authorize(authorize("x-2", "s", "agent-1", run(&["echo", "hi"])))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(r.result, Some(R::Allowed(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_decision_committed_but_never_answered_is_in_flight_then_unknown() {
    dies_between_commit_and_answer(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_decision_committed_but_never_answered_is_in_flight_then_unknown() {
    dies_between_commit_and_answer(Backend::Sqlite).await;
}
