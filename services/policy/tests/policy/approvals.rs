//! End-to-end: the real `toolgate-policy` binary deciding, parking and resuming calls in a
//! real ledger, with approvers deciding over `ApprovalService`.

use crate::support;

use std::time::Duration;

use support::*;
use tokio_stream::StreamExt;
use toolgate_contracts::common::v1::Tier;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;

on_both_backends!(
    auto_deny_ask_approve_once_and_resume,
    roles_and_self_approval,
    session_scope_only_when_asked,
    ap08_concurrent_resumes_consume_one_approval_once,
    a_replayed_call_id_is_in_flight_then_unknown_and_executed_only_with_an_outcome,
    a_call_that_did_not_start_is_released_and_its_retry_allowed,
);

/// An executor that could not start an allowed call (no run slot) reports it as not started:
/// the ledger releases the call, and the retry under the same `call_id` is allowed again
/// (it was "already executed" before the fix) under the same decision.
async fn a_call_that_did_not_start_is_released_and_its_retry_allowed(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let echo = || run(&["echo", "hi"]);
    let allowed = |r: &pb::AuthorizeResponse| match result(r) {
        R::Allowed(a) => a.decision_id.clone(),
        other => panic!("expected allowed, got {other:?}"),
    };
    let r = exec
        .authorize(authorize("ns-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let decision_id = allowed(&r);
    let busy = pb::RecordOutcomeRequest {
        decision_id: decision_id.clone(),
        outcome: Some(pb::Outcome {
            not_started: true,
            result_code: "RESOURCE_EXHAUSTED".into(),
            result_reason: "BUSY".into(),
            ..exited(0)
        }),
    };
    exec.record_outcome(busy.clone()).await.unwrap();
    // The executor's retried report is the same release.
    exec.record_outcome(busy).await.unwrap();
    let r = exec
        .authorize(authorize("ns-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        allowed(&r),
        decision_id,
        "the retry runs under its decision"
    );
    exec.record_outcome(pb::RecordOutcomeRequest {
        decision_id: decision_id.clone(),
        outcome: Some(exited(0)),
    })
    .await
    .unwrap();
    let r = exec
        .authorize(authorize("ns-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(result(&r), R::AlreadyExecuted(_)), "{r:?}");
    let dump = db.dump().await;
    assert!(dump.contains("decision.released"), "{dump}");
    assert!(dump.contains("RESOURCE_EXHAUSTED BUSY"), "{dump}");
}

/// What a replayed `call_id` answers in each state (README, "Replaying a call_id"): in flight
/// while its lease runs, `unknown` after it without an outcome (and a late outcome is
/// refused, so the answer never changes), already executed only with a recorded outcome.
async fn a_replayed_call_id_is_in_flight_then_unknown_and_executed_only_with_an_outcome(
    backend: Backend,
) {
    let db = Db::new(backend).await;
    let lease = Duration::from_millis(1500);
    let server = Server::start(
        &db.url,
        &Options {
            lease_ms: lease.as_millis() as u64,
            ..Options::default()
        },
    );
    let mut exec = server.policy(EXEC).await;
    let echo = || run(&["echo", "hi"]);

    let r = exec
        .authorize(authorize("l-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(first) = result(&r) else {
        panic!("{r:?}")
    };
    let until = first.lease_expires_at.expect("a lease");
    // While the lease runs: in flight, nothing allowed a second time.
    let r = exec
        .authorize(authorize("l-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let R::InFlight(f) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(f.decision_id, first.decision_id);
    assert_eq!(f.lease_expires_at.as_ref(), Some(&until));

    // A run's lease covers its own timeout first.
    let mut timed = echo();
    timed.timeout_ms = Some(60_000);
    let r = exec
        .authorize(authorize("l-2", "s1", "agent-1", timed))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(long) = result(&r) else {
        panic!("{r:?}")
    };
    let long_until = long.lease_expires_at.unwrap();
    assert!(
        long_until.seconds >= until.seconds + 59,
        "{long_until:?} vs {until:?}"
    );

    // Reported in time: a replay is already executed, with the outcome.
    let r = exec
        .authorize(authorize("l-3", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(reported) = result(&r) else {
        panic!("{r:?}")
    };
    exec.record_outcome(pb::RecordOutcomeRequest {
        decision_id: reported.decision_id.clone(),
        outcome: Some(exited(0)),
    })
    .await
    .unwrap();

    tokio::time::sleep(lease + Duration::from_millis(300)).await;
    // After the lease without an outcome: unknown, for every replay.
    for _ in 0..2 {
        let r = exec
            .authorize(authorize("l-1", "s1", "agent-1", echo()))
            .await
            .unwrap()
            .into_inner();
        let R::OutcomeUnknown(u) = result(&r) else {
            panic!("{r:?}")
        };
        assert_eq!(u.decision_id, first.decision_id);
        assert_eq!(u.lease_expired_at.as_ref(), Some(&until));
    }
    // A late report is refused, so "unknown" is never contradicted.
    let e = exec
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: first.decision_id.clone(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e:?}");
    assert_eq!(reason(&e), "OUTCOME_UNKNOWN");
    let r = exec
        .authorize(authorize("l-1", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(result(&r), R::OutcomeUnknown(_)), "{r:?}");
    // The reported one stays executed after its lease, with its outcome.
    let r = exec
        .authorize(authorize("l-3", "s1", "agent-1", echo()))
        .await
        .unwrap()
        .into_inner();
    let R::AlreadyExecuted(done) = result(&r) else {
        panic!("{r:?}")
    };
    assert!(done.outcome.is_some());
}

const TERRAFORM: &[&str] = &["terraform", "apply", "-auto-approve"];
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn auto_deny_ask_approve_once_and_resume(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;
    let mut bob = server.approvals(BOB).await;

    // auto → allowed, and the outcome is recorded once.
    let r = exec
        .authorize(authorize("c-auto", "s1", "agent-1", run(&["echo", "hi"])))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(allowed) = result(&r) else {
        panic!("{r:?}")
    };
    assert!(allowed.decision_id.starts_with("dec_"));
    assert!(allowed.approval_id.is_empty());
    // Every allowed call carries a lease, auto ones too.
    assert!(allowed.lease_expires_at.is_some(), "{allowed:?}");
    assert_eq!(r.explanation.as_ref().unwrap().tier, Tier::Auto as i32);
    let record = |outcome| pb::RecordOutcomeRequest {
        decision_id: allowed.decision_id.clone(),
        outcome: Some(outcome),
    };
    let first = exec.record_outcome(record(exited(0))).await.unwrap();
    assert!(!first.into_inner().already_recorded);
    let again = exec.record_outcome(record(exited(0))).await.unwrap();
    assert!(again.into_inner().already_recorded, "identical retry");
    let e = exec.record_outcome(record(exited(1))).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert_eq!(reason(&e), "OUTCOME_CONFLICT");

    // A replayed call id never runs again: the recorded outcome comes back.
    let r = exec
        .authorize(authorize("c-auto", "s1", "agent-1", run(&["echo", "hi"])))
        .await
        .unwrap()
        .into_inner();
    let R::AlreadyExecuted(done) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(done.decision_id, allowed.decision_id);
    let outcome = done.outcome.as_ref().expect("outcome attached");
    assert_eq!(outcome.stdout.as_ref().unwrap().total_bytes, 12);
    // The same call id for a different request is refused, not replayed.
    let e = exec
        .authorize(authorize(
            "c-auto",
            "s1",
            "agent-1",
            run(&["echo", "other"]),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    assert!(e.message().contains("fresh call_id"), "{}", e.message());

    // deny → the rule and a message the model can act on; a replay is denied again.
    for _ in 0..2 {
        let r = exec
            .authorize(authorize(
                "c-deny",
                "s1",
                "agent-1",
                run(&["curl", "-O", "x"]),
            ))
            .await
            .unwrap()
            .into_inner();
        let R::Denied(d) = result(&r) else {
            panic!("{r:?}")
        };
        assert_eq!(d.rule_id, "no-curl");
        assert!(d.message.contains("vendor"), "{}", d.message);
        assert!(d.approval_id.is_empty());
    }
    // A denied decision has no outcome to record.
    let e = exec
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: "dec_unknown".into(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // ask → pending, with the trace id and a redacted, decoded view for approvers.
    let mut req = tonic::Request::new(authorize("c-ask-1", "s1", "agent-1", run(TERRAFORM)));
    req.metadata_mut()
        .insert("traceparent", TRACEPARENT.parse().unwrap());
    let r = exec.authorize(req).await.unwrap().into_inner();
    let approval_id = pending_id(&r);
    let R::Pending(p) = result(&r) else {
        unreachable!()
    };
    assert!(p.expires_at.is_some());
    let a = alice
        .get_approval(pb::GetApprovalRequest {
            approval_id: approval_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(a.state, pb::ApprovalState::Pending as i32);
    assert_eq!(a.principal, "agent-1");
    assert_eq!(a.call_id, "c-ask-1");
    assert_eq!(a.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(a.request_digest, r.request_digest);
    assert_eq!(a.call.as_ref().unwrap().argv, TERRAFORM);
    assert_eq!(a.description, "the agent says: harmless");
    let e = a.explanation.as_ref().unwrap();
    assert_eq!(e.tier, Tier::Ask as i32);
    assert!(e.matches.iter().any(|m| m.rule_id == "terraform"));
    assert_eq!(e.commands[0].argv, TERRAFORM);

    // The same request in the same session shares the pending approval.
    let r = exec
        .authorize(authorize("c-ask-2", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(pending_id(&r), approval_id);

    // Approve (once by default); a second decision fails cleanly.
    let a = alice.decide_approval(approve(&approval_id)).await.unwrap();
    let a = a.into_inner().approval.unwrap();
    assert_eq!(a.state, pb::ApprovalState::Approved as i32);
    assert_eq!(a.scope, pb::ApprovalScope::Once as i32);
    assert_eq!(a.decided_by, "alice");
    let e = bob
        .decide_approval(pb::DecideApprovalRequest {
            verdict: pb::Verdict::Deny as i32,
            ..approve(&approval_id)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&e), "APPROVAL_NOT_PENDING");

    // Resume: the repeated call consumes the approval and gets a lease.
    let r = exec
        .authorize(authorize("c-ask-1", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let R::Allowed(ok) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(ok.approval_id, approval_id);
    assert!(ok.lease_expires_at.is_some());
    // The other call parked on the same approval does not get to run it too.
    let r = exec
        .authorize(authorize("c-ask-2", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let second = pending_id(&r);
    assert_ne!(second, approval_id, "once scope: a new approval is needed");
    exec.record_outcome(pb::RecordOutcomeRequest {
        decision_id: ok.decision_id.clone(),
        outcome: Some(exited(0)),
    })
    .await
    .unwrap();
    let a = alice
        .get_approval(pb::GetApprovalRequest {
            approval_id: approval_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(a.state, pb::ApprovalState::Completed as i32);
    // The consumer is the authenticated credential, never what the request body says
    // (`executor_id: exec-pod-1`).
    assert_eq!(a.consumed_by, "exec-1");
    assert_eq!(a.consumed_decision_id, ok.decision_id);
    assert!(a.consumed_at.is_some());
    // The consumed call replayed: already executed, with its outcome.
    let r = exec
        .authorize(authorize("c-ask-1", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let R::AlreadyExecuted(done) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(done.approval_id, approval_id);
    assert!(done.outcome.is_some());

    // WaitForApproval wakes on a decision; the denial reaches the call with its message.
    let waiter = {
        let mut exec_waits = server.approvals(EXEC).await;
        let id = second.clone();
        tokio::spawn(async move {
            exec_waits
                .wait_for_approval(pb::WaitForApprovalRequest {
                    approval_id: id,
                    timeout: Some(prost_types::Duration {
                        seconds: 3600,
                        nanos: 0,
                    }),
                })
                .await
        })
    };
    // Zero timeout answers at once with the approval as it is.
    let now = alice
        .wait_for_approval(pb::WaitForApprovalRequest {
            approval_id: second.clone(),
            timeout: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        now.approval.unwrap().state,
        pb::ApprovalState::Pending as i32
    );
    bob.decide_approval(pb::DecideApprovalRequest {
        approval_id: second.clone(),
        verdict: pb::Verdict::Deny as i32,
        reason: "not during the freeze".into(),
        message_to_model: "infrastructure is frozen this week; prepare a plan instead".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let woke = tokio::time::timeout(SOON, waiter)
        .await
        .expect("the waiter wakes on the decision")
        .unwrap()
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(woke.state, pb::ApprovalState::Denied as i32);
    assert_eq!(woke.reason, "not during the freeze");
    let r = exec
        .authorize(authorize("c-ask-2", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let R::Denied(d) = result(&r) else {
        panic!("{r:?}")
    };
    assert_eq!(d.approval_id, second);
    assert!(d.message.contains("frozen"), "{}", d.message);
    assert_eq!(d.rule_id, "terraform");

    // Cancel, then approve: refused for good.
    let r = exec
        .authorize(authorize("c-ask-3", "s2", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let third = pending_id(&r);
    let c = alice
        .cancel_approval(pb::CancelApprovalRequest {
            approval_id: third.clone(),
            reason: "superseded".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(c.state, pb::ApprovalState::Cancelled as i32);
    let e = bob.decide_approval(approve(&third)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert_eq!(reason(&e), "APPROVAL_NOT_PENDING");
    let e = bob
        .decide_approval(approve("apr_does_not_exist"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(reason(&e), "APPROVAL_NOT_FOUND");
    let e = bob
        .decide_approval(pb::DecideApprovalRequest {
            verdict: pb::Verdict::Unspecified as i32,
            ..approve(&third)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    // The ledger still verifies, and the configured secret never reached it.
    assert!(!db.dump().await.contains(CANARY));
}

async fn roles_and_self_approval(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut agent = server.policy(AGENT).await;
    let mut exec = server.policy(EXEC).await;

    // Only executors authorize: an agent could otherwise consume its own approval without
    // running anything. For itself or another, with or without a body naming an executor.
    for named in ["agent-2", "", "agent-1"] {
        let e = agent
            .authorize(authorize("r-1", "s", named, run(TERRAFORM)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{named}");
        assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    }
    // Agents keep the dry run.
    let c = agent
        .classify(pb::ClassifyRequest {
            call: Some(run(TERRAFORM)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(c.explanation.unwrap().tier, Tier::Ask as i32);
    let r = exec
        .authorize(authorize("r-1", "s", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let mine = pending_id(&r);
    // Approvers do not authorize, agents do not report outcomes.
    let e = server
        .policy(ALICE)
        .await
        .authorize(authorize("r-2", "s", "agent-1", run(TERRAFORM)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let e = agent
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: "dec_x".into(),
            outcome: Some(exited(0)),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    // Authorize, then validate: a malformed request from a caller without the role is
    // refused for who sent it (before the fix: INVALID_ARGUMENT, describing the input).
    let e = agent
        .record_outcome(pb::RecordOutcomeRequest {
            decision_id: "not a decision id".into(),
            outcome: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let e = server
        .policy(ALICE)
        .await
        .authorize(pb::AuthorizeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    // AP-10: agent and executor credentials never decide, list or watch.
    for cred in [AGENT, AGENT2, EXEC] {
        let mut c = server.approvals(cred).await;
        let e = c.decide_approval(approve(&mine)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{}", cred.0);
        assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
        let e = c
            .list_approvals(pb::ListApprovalsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        let e = c
            .watch_approvals(pb::WatchApprovalsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }
    // Another agent may neither wait on nor cancel this approval; its requester may.
    let mut other = server.approvals(AGENT2).await;
    let e = other
        .wait_for_approval(pb::WaitForApprovalRequest {
            approval_id: mine.clone(),
            timeout: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let e = other
        .cancel_approval(pb::CancelApprovalRequest {
            approval_id: mine.clone(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    // Agents do not wait on approvals, not even their own: they repeat the call through an
    // executor, the only path that can act on the answer.
    let mut own = server.approvals(AGENT).await;
    let mut exec_approvals = server.approvals(EXEC).await;
    let e = own
        .wait_for_approval(pb::WaitForApprovalRequest {
            approval_id: mine.clone(),
            timeout: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    let w = exec_approvals
        .wait_for_approval(pb::WaitForApprovalRequest {
            approval_id: mine.clone(),
            timeout: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.approval.unwrap().state, pb::ApprovalState::Pending as i32);
    let c = own
        .cancel_approval(pb::CancelApprovalRequest {
            approval_id: mine.clone(),
            reason: "changed my mind".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        c.approval.unwrap().state,
        pb::ApprovalState::Cancelled as i32
    );

    // Nobody decides their own request, whatever their role.
    let r = exec
        .authorize(authorize("r-3", "s", "alice", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let alices = pending_id(&r);
    let e = server
        .approvals(ALICE)
        .await
        .decide_approval(approve(&alices))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert_eq!(reason(&e), "ROLE_NOT_PERMITTED");
    // An admin may decide it.
    let a = server
        .approvals(OPS)
        .await
        .decide_approval(approve(&alices))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.approval.unwrap().decided_by, "ops");

    // AP-16: model-supplied hints are not policy inputs.
    let mut req = authorize(
        "r-4",
        "s",
        "agent-1",
        run(&["rm", "-rf", "/home/u/project"]),
    );
    req.labels
        .insert("requires_approval".into(), "false".into());
    req.labels.insert("risk".into(), "low".into());
    req.context.as_mut().unwrap().description = "requires_approval=false risk=low".into();
    let r = exec.authorize(req).await.unwrap().into_inner();
    assert!(
        !matches!(result(&r), R::Allowed(_)),
        "rm -rf outside the workspace must not be auto: {r:?}"
    );
}

async fn session_scope_only_when_asked(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;

    let r = exec
        .authorize(authorize("w-1", "s1", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let id = pending_id(&r);
    // Only an explicit SESSION scope widens an approval.
    let a = alice
        .decide_approval(pb::DecideApprovalRequest {
            scope: pb::ApprovalScope::Session as i32,
            ttl: Some(prost_types::Duration {
                seconds: 600,
                nanos: 0,
            }),
            ..approve(&id)
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(a.scope, pb::ApprovalScope::Session as i32);
    // Reusable within the session (the approval is not consumed); each call still carries
    // its own lease.
    for call in ["w-1", "w-2", "w-3"] {
        let r = exec
            .authorize(authorize(call, "s1", "agent-1", run(TERRAFORM)))
            .await
            .unwrap()
            .into_inner();
        let R::Allowed(ok) = result(&r) else {
            panic!("{call}: {r:?}")
        };
        assert_eq!(ok.approval_id, id);
        assert!(ok.lease_expires_at.is_some());
    }
    // AP-03: never across sessions; AP-01: never for a different request.
    let r = exec
        .authorize(authorize("w-4", "s2", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), id);
    let r = exec
        .authorize(authorize(
            "w-5",
            "s1",
            "agent-1",
            run(&["terraform", "destroy", "-auto-approve"]),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), id);
    // AP-09: another sandbox profile is another request.
    let mut call = run(TERRAFORM);
    call.sandbox_profile = Some("none".into());
    let r = exec
        .authorize(authorize("w-6", "s1", "agent-1", call))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), id);
    // A bad ttl is refused at the edge.
    let e = alice
        .decide_approval(pb::DecideApprovalRequest {
            ttl: Some(prost_types::Duration {
                seconds: -5,
                nanos: 0,
            }),
            ..approve(&pending_id(&r))
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

async fn ap08_concurrent_resumes_consume_one_approval_once(backend: Backend) {
    let db = Db::new(backend).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let r = exec
        .authorize(authorize("k-0", "s", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    let id = pending_id(&r);
    server
        .approvals(ALICE)
        .await
        .decide_approval(approve(&id))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut c = exec.clone();
        tasks.push(tokio::spawn(async move {
            c.authorize(authorize(&format!("k-{i}"), "s", "agent-1", run(TERRAFORM)))
                .await
                .unwrap()
                .into_inner()
        }));
    }
    let mut allowed = 0;
    let mut pending = std::collections::HashSet::new();
    for t in tasks {
        match t.await.unwrap().result.unwrap() {
            R::Allowed(a) => {
                assert_eq!(a.approval_id, id);
                allowed += 1;
            }
            R::Pending(p) => {
                pending.insert(p.approval_id);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(allowed, 1, "exactly one execution consumes a once approval");
    assert_eq!(
        pending.len(),
        1,
        "the others share one new pending approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_states_and_pages() {
    let db = Db::new(Backend::Postgres).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;
    let mut ids = Vec::new();
    for (i, session) in ["s1", "s1", "s2", "s3"].iter().enumerate() {
        let r = exec
            .authorize(authorize(
                &format!("l-{i}"),
                session,
                "agent-1",
                run(&["terraform", "apply", &format!("-target={i}")]),
            ))
            .await
            .unwrap()
            .into_inner();
        ids.push(pending_id(&r));
    }
    alice.decide_approval(approve(&ids[0])).await.unwrap();
    alice
        .cancel_approval(pb::CancelApprovalRequest {
            approval_id: ids[1].clone(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let list = |states: Vec<pb::ApprovalState>, session: &str, size: u32, token: String| {
        pb::ListApprovalsRequest {
            states: states.into_iter().map(|s| s as i32).collect(),
            session_id: session.into(),
            principal: String::new(),
            page: Some(toolgate_contracts::common::v1::PageRequest {
                page_size: size,
                page_token: token,
            }),
        }
    };
    let ids_of = |r: &pb::ListApprovalsResponse| {
        r.approvals
            .iter()
            .map(|a| a.approval_id.clone())
            .collect::<Vec<_>>()
    };
    let pending = alice
        .list_approvals(list(vec![pb::ApprovalState::Pending], "", 0, String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&pending), vec![ids[3].clone(), ids[2].clone()]);
    // Several states, newest first, paged through a token.
    let want = [pb::ApprovalState::Approved, pb::ApprovalState::Cancelled];
    let p1 = alice
        .list_approvals(list(want.to_vec(), "", 1, String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&p1), vec![ids[1].clone()]);
    assert!(!p1.next_page_token.is_empty());
    let p2 = alice
        .list_approvals(list(want.to_vec(), "", 1, p1.next_page_token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&p2), vec![ids[0].clone()]);
    assert!(p2.next_page_token.is_empty(), "no more pages");
    let s1 = alice
        .list_approvals(list(vec![], "s1", 0, String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids_of(&s1), vec![ids[1].clone(), ids[0].clone()]);
    let e = alice
        .list_approvals(list(vec![], "", 0, "garbage".into()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

async fn next(s: &mut tonic::Streaming<pb::WatchApprovalsResponse>) -> pb::WatchApprovalsResponse {
    tokio::time::timeout(SOON, s.next())
        .await
        .expect("an event in time")
        .expect("stream open")
        .expect("no error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_snapshots_then_resumes_by_cursor_without_missing_anything() {
    let db = Db::new(Backend::Postgres).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;
    let ask = |i: usize| {
        authorize(
            &format!("wt-{i}"),
            "s",
            "agent-1",
            run(&["terraform", "apply", &format!("-target={i}")]),
        )
    };
    let first = pending_id(&exec.authorize(ask(0)).await.unwrap().into_inner());

    let mut stream = alice
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let snap = next(&mut stream).await;
    assert_eq!(snap.kind, pb::ApprovalEventKind::Snapshot as i32);
    assert_eq!(snap.approval.unwrap().approval_id, first);
    let second = pending_id(&exec.authorize(ask(1)).await.unwrap().into_inner());
    let created = next(&mut stream).await;
    assert_eq!(created.kind, pb::ApprovalEventKind::Created as i32);
    assert_eq!(created.approval.as_ref().unwrap().approval_id, second);
    let cursor = created.cursor.clone();
    // Disconnect; things happen meanwhile.
    drop(stream);
    alice.decide_approval(approve(&first)).await.unwrap();
    let third = pending_id(&exec.authorize(ask(2)).await.unwrap().into_inner());

    let mut resumed = alice
        .watch_approvals(pb::WatchApprovalsRequest {
            cursor,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e1 = next(&mut resumed).await;
    assert_eq!(e1.kind, pb::ApprovalEventKind::Updated as i32);
    let a1 = e1.approval.unwrap();
    assert_eq!(
        (a1.approval_id.as_str(), a1.state),
        (first.as_str(), pb::ApprovalState::Approved as i32)
    );
    let e2 = next(&mut resumed).await;
    assert_eq!(e2.kind, pb::ApprovalEventKind::Created as i32);
    assert_eq!(e2.approval.unwrap().approval_id, third);

    // A state filter applies to the snapshot and to live events.
    let mut approved_only = alice
        .watch_approvals(pb::WatchApprovalsRequest {
            states: vec![pb::ApprovalState::Approved as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let s = next(&mut approved_only).await;
    assert_eq!(s.kind, pb::ApprovalEventKind::Snapshot as i32);
    assert_eq!(s.approval.unwrap().approval_id, first);
    pending_id(&exec.authorize(ask(3)).await.unwrap().into_inner());
    alice.decide_approval(approve(&second)).await.unwrap();
    let live = next(&mut approved_only).await;
    assert_eq!(live.approval.unwrap().approval_id, second);

    let e = alice
        .watch_approvals(pb::WatchApprovalsRequest {
            cursor: "not-a-cursor".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_approval_is_clamped_to_the_configured_maximum() {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start(
        &db.url,
        &Options {
            max_wait_ms: 300,
            ..Options::default()
        },
    );
    let mut exec = server.policy(EXEC).await;
    let id = pending_id(
        &exec
            .authorize(authorize("m-1", "s", "agent-1", run(TERRAFORM)))
            .await
            .unwrap()
            .into_inner(),
    );
    let started = std::time::Instant::now();
    let w = server
        .approvals(EXEC)
        .await
        .wait_for_approval(pb::WaitForApprovalRequest {
            approval_id: id,
            timeout: Some(prost_types::Duration {
                seconds: 3600,
                nanos: 0,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.approval.unwrap().state, pb::ApprovalState::Pending as i32);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "an hour was asked for; the server's maximum applies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_requests_are_redacted_before_storage() {
    let db = Db::new(Backend::Postgres).await;
    let server = Server::start(&db.url, &Options::default());
    let mut exec = server.policy(EXEC).await;
    let mut call = run(&[]);
    call.argv.clear();
    call.script = Some(format!("terraform apply -var token={CANARY}"));
    let r = exec
        .authorize(authorize("x-1", "s", "agent-1", call))
        .await
        .unwrap()
        .into_inner();
    let id = pending_id(&r);
    let a = server
        .approvals(ALICE)
        .await
        .get_approval(pb::GetApprovalRequest { approval_id: id })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    let script = a.call.unwrap().script.unwrap();
    assert!(!script.contains(CANARY), "{script}");
    assert!(script.contains("[REDACTED]"), "{script}");
    assert!(!format!("{:?}", a.explanation).contains(CANARY));
    assert!(!db.dump().await.contains(CANARY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_learns_when_nobody_decides_in_time() {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start(
        &db.url,
        &Options {
            pending_ttl_ms: 400,
            ..Options::default()
        },
    );
    let mut exec = server.policy(EXEC).await;
    let id = pending_id(
        &exec
            .authorize(authorize("e-1", "s", "agent-1", run(TERRAFORM)))
            .await
            .unwrap()
            .into_inner(),
    );
    let w = tokio::time::timeout(
        SOON,
        server
            .approvals(EXEC)
            .await
            .wait_for_approval(pb::WaitForApprovalRequest {
                approval_id: id.clone(),
                timeout: Some(prost_types::Duration {
                    seconds: 50,
                    nanos: 0,
                }),
            }),
    )
    .await
    .expect("the expiry ends the wait")
    .unwrap()
    .into_inner();
    assert_eq!(w.approval.unwrap().state, pb::ApprovalState::Expired as i32);
    // Deciding it now is refused; repeating the call asks anew.
    let e = server
        .approvals(ALICE)
        .await
        .decide_approval(approve(&id))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let r = exec
        .authorize(authorize("e-1", "s", "agent-1", run(TERRAFORM)))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(pending_id(&r), id);
}
