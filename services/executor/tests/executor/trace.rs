//! One trace across processes: a real OTLP/gRPC receiver in the test, the real
//! `toolgate-policy` and `toolgate-executor` binaries exporting to it, one call carrying a
//! known `traceparent`, and the child process printing the `TRACEPARENT` it got.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use support::{Credentials, Executor, PERMISSIVE, Policy, Sandbox, ctx};
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;
use toolgate_runtime::telemetry::testing::{OtlpReceiver, ReceivedSpan};

/// The caller's trace and span, as the test sends them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

const EXECUTOR: &str = "toolgate-executor-under-test";
const POLICY: &str = "toolgate-policy-under-test";

/// The standard variables that turn export on, with a short batch delay.
fn otel<'a>(endpoint: &'a str, service: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_SERVICE_NAME", service),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]
}

/// The single span matching `pred`.
fn one<'a>(
    spans: &'a [ReceivedSpan],
    what: &str,
    pred: impl Fn(&ReceivedSpan) -> bool,
) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "expected one {what} span in {spans:#?}");
    found[0]
}

/// Whether `ancestor` is `span` or one of its ancestors among `spans`.
fn descends_from(spans: &[ReceivedSpan], span: &ReceivedSpan, ancestor: &ReceivedSpan) -> bool {
    let by_id: HashMap<&str, &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let mut at = Some(span);
    while let Some(s) = at {
        if s.span_id == ancestor.span_id {
            return true;
        }
        at = s
            .parent_span_id
            .as_deref()
            .and_then(|p| by_id.get(p).copied());
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_follows_a_run_from_the_caller_through_the_executor_to_the_child() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let endpoint = receiver.endpoint();
    let sb = Sandbox::new();
    let policy = Policy::start_env(
        PERMISSIVE,
        Arc::new(Credentials::new()),
        &otel(&endpoint, POLICY),
    );
    let exe = Executor::start_with(&policy, &sb.ws, &[], &otel(&endpoint, EXECUTOR));

    let incoming = format!("00-{TRACE}-{CALLER}-01");
    let mut request = tonic::Request::new(pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Script(
            "echo \"$TRACEPARENT\"".into(),
        )),
        ..Default::default()
    });
    request
        .metadata_mut()
        .insert("traceparent", incoming.parse().unwrap());
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(request).await.expect("run").into_inner();
    let mut stdout = Vec::new();
    while let Some(m) = stream.message().await.expect("run stream") {
        if let Some(Event::Output(o)) = m.event {
            stdout.extend(o.data);
        }
    }
    drop(client);
    let child_saw = String::from_utf8(stdout).expect("utf-8");
    let child_saw = child_saw.trim();

    // A graceful stop flushes whatever the batch exporters still hold.
    assert!(exe.terminate().success());
    let spans = receiver
        .wait_for(
            |spans| {
                spans.iter().any(|s| {
                    s.service_name == EXECUTOR
                        && s.name == "toolgate.policy.v1.PolicyService/RecordOutcome"
                })
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|spans| panic!("the executor's spans never arrived: {spans:#?}"));
    // The executor's own session bookkeeping (abandoning its previous life's runs at start,
    // renewing claims, ending sessions at shutdown) belongs to no call: its own traces.
    let own = [
        "toolgate.policy.v1.SessionService/AbandonRuns",
        "toolgate.policy.v1.SessionService/RenewSessions",
        "toolgate.policy.v1.SessionService/EndSession",
    ];
    let executor: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service_name == EXECUTOR && !own.contains(&s.name.as_str()))
        .cloned()
        .collect();
    for s in &executor {
        assert_eq!(
            s.trace_id, TRACE,
            "every executor span is in the caller's trace: {s:#?}"
        );
    }

    // The executor's RPC span is the child of the caller's span.
    let run = one(&executor, "executor Run", |s| {
        s.kind == SERVER && s.name == "toolgate.executor.v1.ProcessService/Run"
    });
    assert_eq!(run.parent_span_id.as_deref(), Some(CALLER));
    assert_eq!(run.attribute("rpc.grpc.status_code"), Some("0"));

    // Authorize and RecordOutcome are client spans inside that RPC.
    let authorize = one(&executor, "executor Authorize", |s| {
        s.kind == CLIENT && s.name == "toolgate.policy.v1.PolicyService/Authorize"
    });
    assert!(descends_from(&executor, authorize, run), "{executor:#?}");
    // Client spans carry the call's code, as server spans do; the resource says which build
    // and which instance sent them.
    assert_eq!(authorize.attribute("rpc.grpc.status_code"), Some("0"));
    assert_eq!(
        authorize
            .resource
            .get("service.version")
            .map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert!(
        authorize
            .resource
            .get("service.instance.id")
            .is_some_and(|id| !id.is_empty()),
        "{:?}",
        authorize.resource
    );
    let outcome = one(&executor, "executor RecordOutcome", |s| {
        s.kind == CLIENT && s.name == "toolgate.policy.v1.PolicyService/RecordOutcome"
    });
    assert!(descends_from(&executor, outcome, run), "{executor:#?}");

    // The process run is a span of its own, and it is what the child got as TRACEPARENT.
    let process = one(&executor, "process.run", |s| s.name == "process.run");
    assert!(descends_from(&executor, process, run), "{executor:#?}");
    assert_eq!(process.attribute("status"), Some("exited"));
    assert_eq!(child_saw, format!("00-{TRACE}-{}-01", process.span_id));
    assert!(!descends_from(&executor, authorize, process));

    // The policy service's spans continue the same trace: its Authorize span is the child
    // of the executor's client span, and the ledger write inside it names its database.
    assert!(policy.terminate().success());
    let spans = receiver
        .wait_for(
            |spans| {
                spans.iter().any(|s| {
                    s.service_name == POLICY
                        && s.name == "toolgate.policy.v1.PolicyService/RecordOutcome"
                })
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|spans| panic!("the policy service's spans never arrived: {spans:#?}"));
    let policy: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service_name == POLICY && s.trace_id == TRACE)
        .cloned()
        .collect();
    let decided = one(&policy, "policy Authorize", |s| {
        s.kind == SERVER && s.name == "toolgate.policy.v1.PolicyService/Authorize"
    });
    assert_eq!(
        decided.parent_span_id.as_deref(),
        Some(authorize.span_id.as_str())
    );
    let recorded = one(&policy, "policy RecordOutcome", |s| {
        s.kind == SERVER && s.name == "toolgate.policy.v1.PolicyService/RecordOutcome"
    });
    assert_eq!(
        recorded.parent_span_id.as_deref(),
        Some(outcome.span_id.as_str())
    );
    let write = one(&policy, "ledger write of the decision", |s| {
        s.name == "ledger.write" && s.attribute("db.operation") == Some("record_decision")
    });
    assert_eq!(write.kind, CLIENT);
    assert_eq!(write.attribute("db.system"), Some("sqlite"));
    assert!(descends_from(&policy, write, decided), "{policy:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_a_human_is_a_span_in_the_callers_trace() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let endpoint = receiver.endpoint();
    let sb = Sandbox::new();
    let policy = Policy::start_env(
        // Nothing is contained (the workspace profile is declared without its guarantees),
        // so the default asks.
        "default = \"ask\"\n[profiles.workspace]\nconfined = false\n",
        Arc::new(Credentials::new()),
        &otel(&endpoint, POLICY),
    );
    let exe = Executor::start_with(&policy, &sb.ws, &[], &otel(&endpoint, EXECUTOR));
    let _human = support::approve_everything(&policy).await;

    let mut request = tonic::Request::new(pb::RunRequest {
        context: support::ctx_waiting(30),
        // Appending to a file makes the policy ask.
        command: Some(pb::run_request::Command::Script("echo x >> log.txt".into())),
        ..Default::default()
    });
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{TRACE}-{CALLER}-01").parse().unwrap(),
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(request).await.expect("run").into_inner();
    let mut kinds = Vec::new();
    while let Some(m) = stream.message().await.expect("run stream") {
        match m.event {
            Some(Event::AwaitingApproval(_)) => kinds.push("awaiting"),
            Some(Event::Exited(_)) => kinds.push("exited"),
            _ => {}
        }
    }
    assert_eq!(kinds, ["awaiting", "exited"]);
    drop(client);
    assert!(exe.terminate().success());

    let spans = receiver
        .wait_for(
            |spans| {
                spans
                    .iter()
                    .any(|s| s.service_name == EXECUTOR && s.name == "process.run")
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|spans| panic!("the executor's spans never arrived: {spans:#?}"));
    let executor: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service_name == EXECUTOR)
        .cloned()
        .collect();
    let run = one(&executor, "executor Run", |s| {
        s.kind == SERVER && s.name == "toolgate.executor.v1.ProcessService/Run"
    });
    assert_eq!(run.trace_id, TRACE);
    assert_eq!(run.parent_span_id.as_deref(), Some(CALLER));
    let wait = one(&executor, "approval_wait", |s| s.name == "approval_wait");
    assert_eq!(wait.trace_id, TRACE);
    assert!(descends_from(&executor, wait, run), "{executor:#?}");
    assert!(wait.attribute("approval_id").is_some_and(|a| !a.is_empty()));
    // The wait itself asked the policy service, and the second Authorize (which consumed the
    // approval) happened inside it.
    let waits = executor
        .iter()
        .filter(|s| s.kind == CLIENT && s.name.ends_with("/WaitForApproval"))
        .collect::<Vec<_>>();
    assert!(!waits.is_empty(), "{executor:#?}");
    for w in &waits {
        assert_eq!(w.parent_span_id.as_deref(), Some(wait.span_id.as_str()));
    }
    let authorizes: Vec<_> = executor
        .iter()
        .filter(|s| s.kind == CLIENT && s.name.ends_with("/Authorize"))
        .collect();
    assert_eq!(authorizes.len(), 2, "{executor:#?}");
    assert_eq!(
        authorizes
            .iter()
            .filter(|a| descends_from(&executor, a, wait))
            .count(),
        1
    );
    let process = one(&executor, "process.run", |s| s.name == "process.run");
    assert!(descends_from(&executor, process, run));
    assert!(!descends_from(&executor, process, wait));

    // On the policy side the wait is an `approval.wait` span inside the WaitForApproval
    // RPC the executor's wait made, and the parked decision went through `ledger.ask`.
    drop(_human);
    assert!(policy.terminate().success());
    let spans = receiver
        .wait_for(
            |spans| {
                spans
                    .iter()
                    .any(|s| s.service_name == POLICY && s.name == "approval.wait")
            },
            Duration::from_secs(20),
        )
        .await
        .unwrap_or_else(|spans| panic!("the policy service's spans never arrived: {spans:#?}"));
    let policy: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service_name == POLICY && s.trace_id == TRACE)
        .cloned()
        .collect();
    let human = policy
        .iter()
        .filter(|s| s.name == "approval.wait")
        .collect::<Vec<_>>();
    assert!(!human.is_empty(), "{policy:#?}");
    for h in human {
        let rpc = policy
            .iter()
            .find(|s| Some(s.span_id.as_str()) == h.parent_span_id.as_deref())
            .expect("approval.wait has its RPC span as parent");
        assert_eq!(
            rpc.name,
            "toolgate.policy.v1.ApprovalService/WaitForApproval"
        );
        assert!(
            waits
                .iter()
                .any(|w| Some(w.span_id.as_str()) == rpc.parent_span_id.as_deref())
        );
    }
    let asks: Vec<_> = policy.iter().filter(|s| s.name == "ledger.ask").collect();
    assert_eq!(asks.len(), 2, "{policy:#?}");
}
