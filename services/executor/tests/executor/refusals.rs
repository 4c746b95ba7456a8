//! A refusal is not an execution: a run refused before it started (BUSY at the run-slot
//! limit) may be retried under the same `call_id`, and a once-approval is spent only by a
//! call that starts. Real executor, real policy service, real children.

use crate::support;

use std::time::Duration;

use support::{Executor, Policy, Sandbox, ctx, ctx_waiting, reason};
use tonic::Code;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;
use toolgate_contracts::policy::v1 as ppb;

/// `touch` needs a human; everything else is allowed.
const ASK_TOUCH: &str = r#"
default = "auto"

[[rule]]
id = "touch-needs-human"
decision = "ask"
reason = "touch creates files"
commands = ["touch"]
"#;

fn script(s: &str, context: Option<toolgate_contracts::common::v1::CallContext>) -> pb::RunRequest {
    pb::RunRequest {
        context,
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

/// Starts a run that holds the executor's only slot until the file `release` exists; returns
/// its stream once the child is running.
async fn hold_the_slot(exe: &Executor) -> tonic::Streaming<pb::RunResponse> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut holder = client
        .run(script(
            "echo holding; until test -e release; do sleep 0.02; done",
            ctx(),
        ))
        .await
        .unwrap()
        .into_inner();
    while let Some(m) = holder.message().await.unwrap() {
        if matches!(m.event, Some(Event::Output(_))) {
            return holder;
        }
    }
    panic!("the holder ended before it held the slot");
}

/// Lets the holder finish and reads it to its end.
async fn release(sb: &Sandbox, mut holder: tonic::Streaming<pb::RunResponse>) {
    std::fs::write(sb.ws.join("release"), b"").unwrap();
    while holder.message().await.unwrap().is_some() {}
}

/// Runs `req` to its end; `Err` with the refusal when it did not start.
async fn run_to_end(
    exe: &Executor,
    req: pb::RunRequest,
) -> Result<Vec<&'static str>, tonic::Status> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await?.into_inner();
    let mut kinds = Vec::new();
    while let Some(m) = stream.message().await? {
        kinds.push(match m.event {
            Some(Event::AwaitingApproval(_)) => "awaiting",
            Some(Event::Started(_)) => "started",
            Some(Event::Output(_)) => "output",
            Some(Event::Exited(_)) => "exited",
            None => "none",
        });
    }
    Ok(kinds)
}

/// What a client does with `BUSY`: the same call again, a little later. Gives the answer
/// that is not `BUSY` (the holder's slot is given back as its stream ends, which the client
/// cannot observe). Before the fix the first retry already answered `ALREADY_EXECUTED` (or
/// `CALL_IN_FLIGHT` while the refusal's report was on its way), forever.
async fn retry_while_busy(
    exe: &Executor,
    req: impl Fn() -> pb::RunRequest,
) -> Result<Vec<&'static str>, tonic::Status> {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match run_to_end(exe, req()).await {
            Err(e) if reason(&e) == "BUSY" && tokio::time::Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

#[tokio::test]
async fn a_busy_refusal_is_not_an_execution_and_its_retry_runs() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1")],
    );
    let holder = hold_the_slot(&exe).await;
    let context = ctx();
    let req = || script("echo once", context.clone());
    let busy = run_to_end(&exe, req()).await.unwrap_err();
    assert_eq!(
        (busy.code(), reason(&busy).as_str()),
        (Code::ResourceExhausted, "BUSY")
    );
    release(&sb, holder).await;

    let kinds = retry_while_busy(&exe, req)
        .await
        .expect("the retry of a refused call runs");
    assert!(kinds.contains(&"started"), "{kinds:?}");
    // It ran once: the next repeat is the replay of a call that ran.
    let again = run_to_end(&exe, req()).await.unwrap_err();
    assert!(
        matches!(
            reason(&again).as_str(),
            "ALREADY_EXECUTED" | "CALL_IN_FLIGHT"
        ),
        "{again:?}"
    );
}

#[tokio::test]
async fn an_approval_is_not_spent_by_a_call_that_hit_busy() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_TOUCH);
    let exe = Executor::start_with(
        &policy,
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1")],
    );
    let context = ctx_waiting(30);
    let req = || script("touch approved-ran", context.clone());

    // Parked (waiting holds no slot); the only slot is taken; then the human approves.
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req()).await.unwrap().into_inner();
    let approval_id = match stream.message().await.unwrap().and_then(|m| m.event) {
        Some(Event::AwaitingApproval(a)) => a.approval_id,
        other => panic!("expected AwaitingApproval first, got {other:?}"),
    };
    let holder = hold_the_slot(&exe).await;
    let mut approvals = policy.approvals().await;
    support::approve(&mut approvals, approval_id.clone())
        .await
        .unwrap();
    let busy = stream.message().await.unwrap_err();
    assert_eq!(reason(&busy), "BUSY", "{busy:?}");

    // The approval is still there for this call: approved, not consumed.
    let approval = approvals
        .get_approval(ppb::GetApprovalRequest {
            approval_id: approval_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .approval
        .unwrap();
    assert_eq!(
        approval.state,
        ppb::ApprovalState::Approved as i32,
        "the approval was spent by a call that never started"
    );

    release(&sb, holder).await;
    let kinds = retry_while_busy(&exe, req)
        .await
        .expect("the retry consumes the approval and runs");
    assert!(kinds.contains(&"started"), "{kinds:?}");
    assert!(sb.ws.join("approved-ran").exists());
}
