//! The gate's mapping of every answer, against an in-memory authorizer. (The gRPC
//! authorizer and a real policy service are exercised by `tests/enforcement.rs`.)

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::watch;
use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::ToolKind;
use toolgate_runtime::auth::Role;

use super::*;
use toolgate_contracts::policy_wire as contract;
use toolgate_policy_api::{ApprovalStatus, Error as PolicyFailure, OutcomeReport};

/// Answers Authorize from a script, WaitForApproval from a watched approval state. Scripts
/// and records are wire messages, mapped through [`contract`] as the real authorizers do.
struct Fake {
    answers: Mutex<VecDeque<pb::AuthorizeResponse>>,
    asked: Mutex<Vec<pb::AuthorizeRequest>>,
    approval: watch::Sender<pb::Approval>,
    outcome_failures: Mutex<u32>,
    outcomes: Mutex<Vec<pb::RecordOutcomeRequest>>,
}

impl Fake {
    fn new(answers: Vec<pb::authorize_response::Result>) -> Arc<Fake> {
        Arc::new(Fake {
            answers: Mutex::new(
                answers
                    .into_iter()
                    .map(|r| pb::AuthorizeResponse {
                        result: Some(r),
                        explanation: Some(pb::Explanation {
                            message: "writes to deploy/ need a human".into(),
                            ..Default::default()
                        }),
                        request_digest: "d".repeat(64),
                    })
                    .collect(),
            ),
            asked: Mutex::new(Vec::new()),
            approval: watch::Sender::new(approval(pb::ApprovalState::Pending)),
            outcome_failures: Mutex::new(0),
            outcomes: Mutex::new(Vec::new()),
        })
    }

    fn decide(&self, state: pb::ApprovalState, message: &str) {
        self.approval.send_modify(|a| {
            a.state = state as i32;
            a.message_to_model = message.to_owned();
        });
    }
}

fn approval(state: pb::ApprovalState) -> pb::Approval {
    pb::Approval {
        approval_id: "ap-1".into(),
        state: state as i32,
        ..Default::default()
    }
}

impl Authorizer for Fake {
    fn authorize(
        &self,
        request: AuthorizeRequest,
        _traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<AuthorizeAnswer, PolicyFailure>> {
        self.asked
            .lock()
            .unwrap()
            .push(contract::authorize_request_to_wire(request));
        let next = self.answers.lock().unwrap().pop_front();
        async move {
            let answer =
                next.ok_or_else(|| PolicyFailure::new(Reason::Internal, "script exhausted", []))?;
            contract::authorize_answer_from_wire(answer)
        }
        .boxed()
    }

    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), PolicyFailure>> {
        let fail = {
            let mut f = self.outcome_failures.lock().unwrap();
            let fail = *f > 0;
            *f = f.saturating_sub(1);
            fail
        };
        if !fail {
            self.outcomes
                .lock()
                .unwrap()
                .push(contract::outcome_report_to_wire(report));
        }
        async move {
            if fail {
                Err(PolicyFailure::new(Reason::PolicyUnavailable, "down", []))
            } else {
                Ok(())
            }
        }
        .boxed()
    }

    fn wait_for_approval(
        &self,
        _approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, PolicyFailure>> {
        let mut rx = self.approval.subscribe();
        async move {
            let _ = tokio::time::timeout(
                timeout,
                rx.wait_for(|a| a.state != pb::ApprovalState::Pending as i32),
            )
            .await;
            let approval = rx.borrow().clone();
            contract::approval_status_from_wire(pb::WaitForApprovalResponse {
                approval: Some(approval),
            })
        }
        .boxed()
    }
}

use pb::authorize_response::Result as R;

fn allowed(id: &str) -> R {
    R::Allowed(pb::Allowed {
        decision_id: id.into(),
        approval_id: "ap-1".into(),
        lease_expires_at: None,
        hidden: None,
        sandbox_profile: String::new(),
        denied_hosts: Vec::new(),
    })
}

fn pending() -> R {
    R::Pending(pb::Pending {
        decision_id: "d-1".into(),
        approval_id: "ap-1".into(),
        expires_at: None,
    })
}

fn gate(fake: &Arc<Fake>, max_wait: Duration) -> Gate {
    Gate::new(
        fake.clone(),
        ExecutorIdentity {
            executor_id: "exec-test".into(),
            ..Default::default()
        },
        HashMap::from([("team".to_owned(), "infra".to_owned())]),
        max_wait,
        toolgate_runtime::metrics::ExecutorMetrics::register(
            &mut toolgate_runtime::metrics::registry(),
        ),
    )
}

fn call(wait: Duration) -> Call {
    Call {
        principal: Principal {
            name: "agent-1".into(),
            role: Role::Agent,
        },
        ctx: CallContext {
            call_id: "c-1".into(),
            session_id: "s-1".into(),
            approval_wait: wait,
            description: "deploy the fix".into(),
        },
        call: ToolCall::fs(ToolKind::FsWrite, "deploy/app.yaml"),
        trace_parent: None,
        span: tracing::Span::none(),
    }
}

fn reason(s: &Status) -> (String, HashMap<String, String>) {
    status::error_info(s).expect("ErrorInfo")
}

#[tokio::test]
async fn allowed_yields_a_proof_and_forwards_principal_context_labels_and_identity() {
    let fake = Fake::new(vec![allowed("d-9")]);
    let proof = gate(&fake, Duration::ZERO)
        .authorize(&call(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(proof.decision_id(), "d-9");
    let asked = fake.asked.lock().unwrap();
    let a = &asked[0];
    assert_eq!(a.principal, "agent-1");
    assert_eq!(a.labels.get("team").map(String::as_str), Some("infra"));
    assert_eq!(a.executor.as_ref().unwrap().executor_id, "exec-test");
    let ctx = a.context.as_ref().unwrap();
    assert_eq!(
        (ctx.call_id.as_str(), ctx.description.as_str()),
        ("c-1", "deploy the fix")
    );
    assert_eq!(
        a.call.as_ref().unwrap().path.as_deref(),
        Some("deploy/app.yaml")
    );
}

#[tokio::test]
async fn policy_deny_is_permission_denied_with_rule_and_decision() {
    let fake = Fake::new(vec![R::Denied(pb::Denied {
        decision_id: "d-2".into(),
        rule_id: "secrets".into(),
        message: "dotenv files hold secrets".into(),
        approval_id: String::new(),
    })]);
    let e = gate(&fake, Duration::ZERO)
        .authorize(&call(Duration::ZERO))
        .await
        .map_err(Status::from)
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert_eq!(e.message(), "dotenv files hold secrets");
    let (r, md) = reason(&e);
    assert_eq!(r, "POLICY_DENIED");
    assert_eq!(md["rule_id"], "secrets");
    assert_eq!(md["decision_id"], "d-2");
}

#[tokio::test]
async fn a_human_denial_from_authorize_is_approval_denied() {
    let fake = Fake::new(vec![R::Denied(pb::Denied {
        decision_id: "d-3".into(),
        rule_id: "deploy".into(),
        message: "not on a Friday".into(),
        approval_id: "ap-7".into(),
    })]);
    let e = gate(&fake, Duration::ZERO)
        .authorize(&call(Duration::ZERO))
        .await
        .map_err(Status::from)
        .unwrap_err();
    let (r, md) = reason(&e);
    assert_eq!(
        (e.code(), r.as_str()),
        (tonic::Code::PermissionDenied, "APPROVAL_DENIED")
    );
    assert_eq!(md["approval_id"], "ap-7");
    assert!(e.message().contains("not on a Friday"), "{}", e.message());
}

#[tokio::test]
async fn pending_without_a_wait_is_approval_required_with_the_approval_id() {
    let fake = Fake::new(vec![pending()]);
    let e = gate(&fake, Duration::from_secs(60))
        .authorize(&call(Duration::ZERO))
        .await
        .map_err(Status::from)
        .unwrap_err();
    let (r, md) = reason(&e);
    assert_eq!(
        (e.code(), r.as_str()),
        (tonic::Code::FailedPrecondition, "APPROVAL_REQUIRED")
    );
    assert_eq!(md["approval_id"], "ap-1");
    assert_eq!(md["decision_id"], "d-1");
    assert!(
        e.message().contains("repeat the same call"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("writes to deploy/ need a human"),
        "{}",
        e.message()
    );
}

#[tokio::test]
async fn an_approval_during_the_wait_authorizes_the_same_call_again() {
    let fake = Fake::new(vec![pending(), allowed("d-5")]);
    let g = gate(&fake, Duration::from_secs(60));
    let c = call(Duration::from_secs(30));
    let Checked::Parked(parked) = g.check(&c).await.unwrap() else {
        panic!("expected a parked call");
    };
    let event = parked.event();
    assert_eq!(event.approval_id, "ap-1");
    assert!(event.wait_deadline.is_some());
    let decider = {
        let fake = fake.clone();
        tokio::spawn(async move { fake.decide(pb::ApprovalState::Approved, "") })
    };
    let proof = g.wait(&c, parked).await.unwrap();
    decider.await.unwrap();
    assert_eq!(proof.decision_id(), "d-5");
    let asked = fake.asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0].call, asked[1].call, "the same call is asked again");
}

#[tokio::test]
async fn a_denial_during_the_wait_carries_the_approvers_message() {
    let fake = Fake::new(vec![pending()]);
    fake.decide(pb::ApprovalState::Denied, "use the staging cluster instead");
    let e = gate(&fake, Duration::from_secs(60))
        .authorize(&call(Duration::from_secs(30)))
        .await
        .map_err(Status::from)
        .unwrap_err();
    let (r, md) = reason(&e);
    assert_eq!(r, "APPROVAL_DENIED");
    assert_eq!(md["approval_id"], "ap-1");
    assert!(e.message().contains("use the staging cluster instead"));
}

#[tokio::test]
async fn expired_and_cancelled_approvals_end_the_wait() {
    for (state, want) in [
        (pb::ApprovalState::Expired, "APPROVAL_EXPIRED"),
        (pb::ApprovalState::Cancelled, "APPROVAL_NOT_PENDING"),
    ] {
        let fake = Fake::new(vec![pending()]);
        fake.decide(state, "");
        let e = gate(&fake, Duration::from_secs(60))
            .authorize(&call(Duration::from_secs(30)))
            .await
            .map_err(Status::from)
            .unwrap_err();
        assert_eq!(reason(&e).0, want);
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    }
}

#[tokio::test]
async fn a_wait_is_clamped_and_ends_as_approval_required() {
    let fake = Fake::new(vec![pending()]);
    let started = std::time::Instant::now();
    let e = gate(&fake, Duration::from_millis(50))
        .authorize(&call(Duration::from_secs(3600)))
        .await
        .map_err(Status::from)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    let (r, md) = reason(&e);
    assert_eq!(r, "APPROVAL_REQUIRED");
    assert_eq!(md["approval_id"], "ap-1");
}

#[tokio::test]
async fn already_executed_is_already_exists_with_the_recorded_outcome() {
    let fake = Fake::new(vec![R::AlreadyExecuted(pb::AlreadyExecuted {
        decision_id: "d-1".into(),
        approval_id: String::new(),
        outcome: Some(pb::Outcome {
            status: Some(common::ExitStatus {
                status: Some(common::exit_status::Status::Exited(3)),
            }),
            stdout: Some(common::OutputStats {
                total_bytes: 12,
                ..Default::default()
            }),
            ..Default::default()
        }),
    })]);
    let e = gate(&fake, Duration::ZERO)
        .authorize(&call(Duration::ZERO))
        .await
        .map_err(Status::from)
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    let (r, md) = reason(&e);
    assert_eq!(r, "ALREADY_EXECUTED");
    assert_eq!(md["decision_id"], "d-1");
    assert_eq!(md["exit_code"], "3");
    assert_eq!(md["stdout_bytes"], "12");
    assert!(e.message().contains("not run again"), "{}", e.message());
}

/// A replayed call_id whose outcome nobody recorded is never "already executed": in flight
/// (ABORTED, retry later) while its lease runs, OUTCOME_UNKNOWN (a new call_id is needed)
/// after it, and an older policy's AlreadyExecuted without an outcome reads as unknown.
#[tokio::test]
async fn replays_without_an_outcome_are_in_flight_or_unknown() {
    let until = prost_types::Timestamp {
        seconds: 1_900_000_000,
        nanos: 0,
    };
    let cases = [
        (
            R::InFlight(pb::InFlight {
                decision_id: "d-1".into(),
                approval_id: String::new(),
                lease_expires_at: Some(until),
            }),
            tonic::Code::Aborted,
            "CALL_IN_FLIGHT",
        ),
        (
            R::OutcomeUnknown(pb::OutcomeUnknown {
                decision_id: "d-1".into(),
                approval_id: "ap-1".into(),
                lease_expired_at: Some(until),
            }),
            tonic::Code::AlreadyExists,
            "OUTCOME_UNKNOWN",
        ),
        (
            R::AlreadyExecuted(pb::AlreadyExecuted {
                decision_id: "d-1".into(),
                approval_id: String::new(),
                outcome: None,
            }),
            tonic::Code::AlreadyExists,
            "OUTCOME_UNKNOWN",
        ),
    ];
    for (answer, code, want) in cases {
        let fake = Fake::new(vec![answer]);
        let e = gate(&fake, Duration::ZERO)
            .authorize(&call(Duration::ZERO))
            .await
            .map_err(Status::from)
            .unwrap_err();
        assert_eq!(e.code(), code, "{want}: {e:?}");
        let (r, md) = reason(&e);
        assert_eq!(r, want);
        assert_eq!(md["decision_id"], "d-1");
        if want == "CALL_IN_FLIGHT" {
            assert_eq!(md["lease_expires_at"], "2030-03-17T17:46:40Z");
            assert!(
                e.message().contains("may still be running"),
                "{}",
                e.message()
            );
        } else {
            assert!(e.message().contains("new call_id"), "{}", e.message());
        }
    }
}

#[tokio::test]
async fn outcomes_are_retried_until_recorded_and_carry_the_executor() {
    let fake = Fake::new(vec![allowed("d-8")]);
    *fake.outcome_failures.lock().unwrap() = 2;
    let g = gate(&fake, Duration::ZERO);
    let proof = g.authorize(&call(Duration::ZERO)).await.unwrap();
    g.reporter().report(
        &proof,
        crate::authz::fs_outcome(std::time::SystemTime::now(), Ok(())),
    );
    g.reporter().flush(Duration::from_secs(10)).await;
    let outcomes = fake.outcomes.lock().unwrap();
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].decision_id, "d-8");
    let o = outcomes[0].outcome.as_ref().unwrap();
    assert_eq!(o.result_code, "OK");
    assert_eq!(o.executor.as_ref().unwrap().executor_id, "exec-test");
}
