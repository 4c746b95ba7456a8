//! End-to-end enforcement: the real executor asking the real policy service (SQLite ledger)
//! before every call, over gRPC with bearer credentials.

use crate::support;

use std::time::Duration;

use support::{Credentials, Executor, GUARDED, Policy, Sandbox, ctx, ctx_waiting, sibling_binary};
use tonic::Code;
use tonic::Streaming;
use toolgate_contracts::common::v1::exit_status::Status as S;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;
use toolgate_contracts::policy::v1 as ppb;
use toolgate_ledger::testing::FreshPg;

/// Every call needs a human.
/// Asks about everything: the workspace profile is declared without its guarantees, so the
/// sandbox contains nothing and the default decides (these tests are about approvals).
const ASK_ALL: &str = "default = \"ask\"\n[profiles.workspace]\nconfined = false\n";

fn info(s: &tonic::Status) -> (String, std::collections::HashMap<String, String>) {
    toolgate_contracts::status::error_info(s)
        .unwrap_or_else(|| panic!("status without ErrorInfo: {s:?}"))
}

fn write(path: &str, content: &str) -> pb::WriteFileRequest {
    pb::WriteFileRequest {
        context: ctx(),
        path: path.into(),
        content: content.as_bytes().to_vec(),
        create_parents: true,
        ..Default::default()
    }
}

fn script(s: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

async fn start_run(
    exe: &Executor,
    req: pb::RunRequest,
) -> Result<Streaming<pb::RunResponse>, tonic::Status> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    Ok(client.run(req).await?.into_inner())
}

/// Reads a run to its end: the events' kinds, stdout and the final status.
async fn finish(
    stream: &mut Streaming<pb::RunResponse>,
) -> Result<(Vec<&'static str>, Vec<u8>, S), tonic::Status> {
    let (mut kinds, mut stdout, mut status) = (Vec::new(), Vec::new(), None);
    while let Some(m) = stream.message().await? {
        match m.event.expect("event") {
            Event::AwaitingApproval(_) => kinds.push("awaiting"),
            Event::Started(s) => {
                assert!(!s.decision_id.is_empty(), "started names its decision");
                kinds.push("started");
            }
            Event::Output(o) => {
                if o.stream == pb::Stream::Stdout as i32 {
                    stdout.extend_from_slice(&o.data);
                }
            }
            Event::Exited(x) => {
                kinds.push("exited");
                status = x.status.and_then(|s| s.status);
            }
        }
    }
    Ok((kinds, stdout, status.expect("an exited event")))
}

/// The first event of a run that waits for a human.
async fn awaiting(stream: &mut Streaming<pb::RunResponse>) -> pb::AwaitingApproval {
    let first = stream.message().await.unwrap().expect("a first event");
    match first.event {
        Some(Event::AwaitingApproval(a)) => a,
        other => panic!("expected AwaitingApproval first, got {other:?}"),
    }
}

async fn decide(policy: &Policy, approval_id: &str, verdict: ppb::Verdict, message: &str) {
    policy
        .approvals()
        .await
        .decide_approval(ppb::DecideApprovalRequest {
            approval_id: approval_id.into(),
            verdict: verdict as i32,
            reason: "reviewed".into(),
            message_to_model: message.into(),
            ..Default::default()
        })
        .await
        .expect("decide");
}

/// Waits, through `WatchApprovals`, until `approval_id` is `COMPLETED` (its outcome recorded).
async fn completed(policy: &Policy, approval_id: &str) -> ppb::Approval {
    let mut approvals = policy.approvals().await;
    let mut watch = approvals
        .watch_approvals(ppb::WatchApprovalsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let wait = async {
        loop {
            let current = approvals
                .get_approval(ppb::GetApprovalRequest {
                    approval_id: approval_id.into(),
                })
                .await
                .unwrap()
                .into_inner()
                .approval
                .unwrap();
            if current.state == ppb::ApprovalState::Completed as i32 {
                return current;
            }
            // Not yet: the next change to any approval is the moment to look again.
            watch.message().await.unwrap().expect("watch ended");
        }
    };
    tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .expect("the outcome was recorded")
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

#[tokio::test]
async fn fails_closed_when_the_policy_service_is_down() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    fs.write_file(write("before.txt", "ok")).await.unwrap();
    let endpoint = policy.endpoint();
    drop(policy);

    let err = fs.write_file(write("after.txt", "no")).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert_eq!(info(&err).0, "POLICY_UNAVAILABLE");
    assert!(err.message().contains(&endpoint), "{}", err.message());
    assert!(!sb.ws.join("after.txt").exists(), "nothing was written");

    let err = start_run(&exe, script("touch ran")).await.unwrap_err();
    assert_eq!(
        (err.code(), info(&err).0.as_str()),
        (Code::Unavailable, "POLICY_UNAVAILABLE")
    );
    assert!(!sb.ws.join("ran").exists(), "nothing ran");

    // Reads are decided too: nothing is served without a decision.
    let err = fs
        .read_file(pb::ReadFileRequest {
            context: ctx(),
            path: "before.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable);
}

#[tokio::test]
async fn an_executor_whose_credential_the_policy_refuses_fails_closed() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    // Its own agents, but an executor token the policy service never issued.
    let strangers = Credentials::new();
    let exe = Executor::start_at(&policy.endpoint(), &strangers, &sb.ws, &[], &[]);
    let err = exe
        .fs()
        .await
        .write_file(write("x.txt", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), info(&err).0.as_str()),
        (Code::Unavailable, "POLICY_UNAVAILABLE")
    );
    assert!(err.message().contains("credential"), "{}", err.message());
    assert!(!sb.ws.join("x.txt").exists());
}

#[tokio::test]
async fn policy_denials_name_the_rule() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let err = start_run(
        &exe,
        pb::RunRequest {
            context: ctx(),
            command: Some(pb::run_request::Command::Argv(pb::Argv {
                args: vec!["terraform".into(), "apply".into()],
            })),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let (reason, md) = info(&err);
    assert_eq!(reason, "POLICY_DENIED");
    assert_eq!(md["rule_id"], "no-terraform");
    assert!(md["decision_id"].starts_with("dec_"), "{md:?}");
    assert!(
        err.message().contains("platform team"),
        "the rule's reason reaches the model: {}",
        err.message()
    );
}

#[tokio::test]
async fn ask_without_a_wait_is_approval_required_and_resumes_by_repeating_the_call() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut fs = exe.fs().await;
    let req = write("deploy/app.yaml", "replicas: 3\n");

    let err = fs.write_file(req.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let (reason, md) = info(&err);
    assert_eq!(reason, "APPROVAL_REQUIRED");
    let approval_id = md["approval_id"].clone();
    assert!(approval_id.starts_with("apr_"), "{md:?}");
    assert!(
        err.message().contains("repeat the same call"),
        "{}",
        err.message()
    );
    assert!(!sb.ws.join("deploy/app.yaml").exists());

    // Repeating before anyone decided parks on the same approval and still writes nothing.
    let err = fs.write_file(req.clone()).await.unwrap_err();
    assert_eq!(info(&err).1["approval_id"], approval_id);

    decide(&policy, &approval_id, ppb::Verdict::Approve, "").await;
    let out = fs.write_file(req.clone()).await.unwrap().into_inner();
    assert_eq!(out.size, 12);
    assert_eq!(
        std::fs::read_to_string(sb.ws.join("deploy/app.yaml")).unwrap(),
        "replicas: 3\n"
    );
    let done = completed(&policy, &approval_id).await;
    assert!(!done.consumed_by.is_empty(), "the executor is recorded");

    let err = fs.write_file(req).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let (reason, md) = info(&err);
    assert_eq!(reason, "ALREADY_EXECUTED");
    assert_eq!(md.get("result_code").map(String::as_str), Some("OK"));
}

#[tokio::test]
async fn a_waiting_run_announces_the_approval_then_runs_once_approved() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut req = script("echo run >> log.txt; echo hello");
    req.context = ctx_waiting(60);
    let mut stream = start_run(&exe, req).await.unwrap();
    let a = awaiting(&mut stream).await;
    assert!(a.approval_id.starts_with("apr_"));
    assert!(a.wait_deadline.is_some());
    assert_eq!(
        lines(&sb.ws.join("log.txt")),
        0,
        "nothing runs before the decision"
    );

    decide(&policy, &a.approval_id, ppb::Verdict::Approve, "").await;
    let (kinds, stdout, status) = finish(&mut stream).await.unwrap();
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(stdout, b"hello\n");
    assert_eq!(status, S::Exited(0));
    assert_eq!(lines(&sb.ws.join("log.txt")), 1);

    let done = completed(&policy, &a.approval_id).await;
    assert_eq!(done.state, ppb::ApprovalState::Completed as i32);
}

#[tokio::test]
async fn a_denied_approval_reaches_the_client_with_the_approvers_message() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut req = script("echo run >> log.txt");
    req.context = ctx_waiting(60);
    let mut stream = start_run(&exe, req).await.unwrap();
    let a = awaiting(&mut stream).await;
    decide(
        &policy,
        &a.approval_id,
        ppb::Verdict::Deny,
        "use `make deploy` instead",
    )
    .await;
    let err = finish(&mut stream).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    let (reason, md) = info(&err);
    assert_eq!(reason, "APPROVAL_DENIED");
    assert_eq!(md["approval_id"], a.approval_id);
    assert!(
        err.message().contains("use `make deploy` instead"),
        "{}",
        err.message()
    );
    assert!(!sb.ws.join("log.txt").exists());
}

#[tokio::test]
async fn a_wait_that_ends_undecided_is_approval_required() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let exe = Executor::start_with(
        &policy,
        &sb.ws,
        &[],
        &[("TOOLGATE_MAX_APPROVAL_WAIT_MS", "300")],
    );
    // Asks for an hour; the executor's maximum (300 ms) applies.
    let mut req = script("echo run >> log.txt");
    req.context = ctx_waiting(3600);
    let mut stream = start_run(&exe, req).await.unwrap();
    let a = awaiting(&mut stream).await;
    let err = finish(&mut stream).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let (reason, md) = info(&err);
    assert_eq!(reason, "APPROVAL_REQUIRED");
    assert_eq!(md["approval_id"], a.approval_id);
    assert!(!sb.ws.join("log.txt").exists());
}

#[tokio::test]
async fn a_replayed_call_id_is_not_run_again_and_reports_the_outcome() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let _human = support::approve_everything(&policy).await;
    let mut req = script("echo run >> log.txt; echo twelve bytes");
    req.context = ctx_waiting(60);

    let mut stream = start_run(&exe, req.clone()).await.unwrap();
    let a = awaiting(&mut stream).await;
    let (_, _, status) = finish(&mut stream).await.unwrap();
    assert_eq!(status, S::Exited(0));
    completed(&policy, &a.approval_id).await;

    let err = start_run(&exe, req).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let (reason, md) = info(&err);
    assert_eq!(reason, "ALREADY_EXECUTED");
    assert_eq!(md["exit_code"], "0");
    assert_eq!(md["stdout_bytes"], "13");
    // The ledger recorded the confinement the run was given.
    assert_eq!(md["sandbox_profile"], "workspace");
    assert!(md.contains_key("decision_id"));
    assert_eq!(lines(&sb.ws.join("log.txt")), 1, "the command ran once");
}

#[tokio::test]
async fn a_call_resumes_on_a_new_executor_after_the_first_died_mid_wait() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let first = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut req = script("echo run >> log.txt");
    req.context = ctx_waiting(60);
    let mut stream = start_run(&first, req.clone()).await.unwrap();
    let a = awaiting(&mut stream).await;
    drop(first); // killed mid-wait

    // The dead executor's claim on the session has not lapsed yet (`sessions.claim_ttl_s`):
    // an executor that does not pin sessions serves the call with a sandbox of its own.
    let second = Executor::start_with(&policy, &sb.ws, &[], &[("TOOLGATE_SESSIONS__PIN", "false")]);
    decide(&policy, &a.approval_id, ppb::Verdict::Approve, "").await;
    // The orchestrator repeats the same call (same call_id) on whichever executor it reaches.
    let mut stream = start_run(&second, req.clone()).await.unwrap();
    let (kinds, _, status) = finish(&mut stream).await.unwrap();
    assert_eq!(kinds.first(), Some(&"started"), "approved: no new wait");
    assert_eq!(status, S::Exited(0));
    assert_eq!(lines(&sb.ws.join("log.txt")), 1);

    // The outcome is reported in the background: until it lands a replay is CALL_IN_FLIGHT,
    // after it ALREADY_EXECUTED; never a second run.
    completed(&policy, &a.approval_id).await;
    let err = start_run(&second, req).await.unwrap_err();
    assert_eq!(info(&err).0, "ALREADY_EXECUTED");
    assert_eq!(lines(&sb.ws.join("log.txt")), 1, "ran exactly once");
}

#[tokio::test]
async fn the_trace_context_reaches_the_child_and_the_ledger() {
    let sb = Sandbox::new();
    let policy = Policy::start(ASK_ALL);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let _human = support::approve_everything(&policy).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let tp = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let mut req = tonic::Request::new({
        // Appending to a file makes the policy ask, so the trace id lands on an approval.
        let mut r = script("echo \"$TRACEPARENT\"; echo x >> log.txt");
        r.context = ctx_waiting(60);
        r
    });
    req.metadata_mut()
        .insert("traceparent", tp.parse().unwrap());
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await.unwrap().into_inner();
    let a = awaiting(&mut stream).await;
    let (_, stdout, _) = finish(&mut stream).await.unwrap();
    assert_eq!(String::from_utf8_lossy(&stdout), format!("{tp}\n"));
    let approval = completed(&policy, &a.approval_id).await;
    assert_eq!(approval.trace_id, trace_id);
}

#[tokio::test]
async fn callers_without_an_agent_credential_are_refused() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let anon = exe.anonymous_channel().await;
    let err = FilesystemServiceClient::new(anon.clone())
        .write_file(write("x.txt", "x"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), info(&err).0.as_str()),
        (Code::Unauthenticated, "UNAUTHENTICATED")
    );
    let err = ProcessServiceClient::new(anon)
        .run(script("touch ran"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    // An approver's credential is valid, but not for running tools.
    let mut fs = FilesystemServiceClient::new(exe.channel_as(&policy.creds.approver).await);
    let err = fs.write_file(write("x.txt", "x")).await.unwrap_err();
    assert_eq!(
        (err.code(), info(&err).0.as_str()),
        (Code::PermissionDenied, "ROLE_NOT_PERMITTED")
    );
    assert!(!sb.ws.join("x.txt").exists());
    assert!(!sb.ws.join("ran").exists());
}

#[test]
fn startup_without_a_policy_service_or_credentials_fails_naming_the_field() {
    let sb = Sandbox::new();
    let creds = Credentials::new();
    let start = |env: &[(&str, &std::ffi::OsStr)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-executor"));
        cmd.arg("--workspace").arg(&sb.ws);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let tokens = creds.tokens_file();
    let token = creds.executor_token_file();
    let err = start(&[("TOOLGATE_AUTH__TOKENS_FILE", tokens.as_os_str())]);
    assert!(err.contains("policy.endpoint"), "{err}");
    let err = start(&[
        ("TOOLGATE_AUTH__TOKENS_FILE", tokens.as_os_str()),
        ("TOOLGATE_POLICY__ENDPOINT", "http://127.0.0.1:1".as_ref()),
    ]);
    assert!(err.contains("policy.token"), "{err}");
    let err = start(&[
        ("TOOLGATE_POLICY__ENDPOINT", "http://127.0.0.1:1".as_ref()),
        ("TOOLGATE_POLICY__TOKEN_FILE", token.as_os_str()),
    ]);
    assert!(err.contains("auth"), "{err}");
}

// Issue 13 §3: what the policy denies never appears in a result.

/// The policy toolgate ships (its `secrets` rule denies `**/.env`, `**/*.pem`, ...).
const DEFAULT_POLICY: &str = include_str!("../../../../libs/policy-engine/default-policy.toml");

/// A workspace with secrets the default policy denies, next to an ordinary file.
fn secrets_workspace(sb: &Sandbox) {
    let files = [
        (".env", "SECRET=matchme\n"),
        ("config/.env.production", "SECRET=matchme\n"),
        ("certs/server.pem", "matchme\n"),
        ("deep/a/id_rsa", "matchme\n"),
        ("keys.pem/inner.txt", "matchme\n"),
        ("src/app.rs", "// matchme in the open\n"),
    ];
    for (p, content) in files {
        let p = sb.ws.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    std::os::unix::fs::symlink("keys.pem", sb.ws.join("keys")).unwrap();
}

fn is_secret(p: &str) -> bool {
    p.contains(".env") || p.contains(".pem") || p.ends_with("id_rsa")
}

#[tokio::test]
async fn search_include_hidden_never_returns_a_policy_denied_env() {
    let sb = Sandbox::new();
    secrets_workspace(&sb);
    let policy = Policy::start(DEFAULT_POLICY);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut fs = FilesystemServiceClient::new(exe.channel().await);

    // The reported case: `.env: SECRET=matchme` came back.
    let s = fs
        .search_files(pb::SearchFilesRequest {
            context: ctx(),
            pattern: "matchme".into(),
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let hits: Vec<_> = s.matches.iter().map(|m| m.path.as_str()).collect();
    assert_eq!(hits, ["src/app.rs"], "{s:?}");
    assert_eq!(s.files_searched, 1, "denied files are never even searched");

    // Read it directly and the policy refuses, as before.
    let err = fs
        .read_file(pb::ReadFileRequest {
            context: ctx(),
            path: ".env".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(info(&err).0, "POLICY_DENIED");

    // Searching inside a denied directory, by its name or through a symlink, is refused.
    for p in ["keys.pem/inner.txt", "keys/inner.txt", "keys", "keys.pem"] {
        let err = fs
            .search_files(pb::SearchFilesRequest {
                context: ctx(),
                path: p.into(),
                pattern: "matchme".into(),
                include_hidden: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{p}: {err:?}");
        assert!(
            ["PATH_DENIED", "POLICY_DENIED"].contains(&info(&err).0.as_str()),
            "{p}: {err:?}"
        );
        assert!(!err.message().contains("SECRET"), "{p}");
    }
}

#[tokio::test]
async fn listings_and_finds_never_show_policy_denied_paths() {
    let sb = Sandbox::new();
    secrets_workspace(&sb);
    let policy = Policy::start(DEFAULT_POLICY);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut fs = FilesystemServiceClient::new(exe.channel().await);

    let l = fs
        .list_directory(pb::ListDirectoryRequest {
            context: ctx(),
            path: ".".into(),
            recursive: true,
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let paths: Vec<_> = l.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(
        paths.contains(&"src/app.rs") && paths.contains(&"deep/a"),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| is_secret(p)), "{paths:?}");

    for t in [
        pb::EntryType::File,
        pb::EntryType::Directory,
        pb::EntryType::Symlink,
    ] {
        let f = fs
            .find_files(pb::FindFilesRequest {
                context: ctx(),
                patterns: vec!["**".into()],
                include_hidden: true,
                r#type: t as i32,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !f.paths.iter().any(|p| is_secret(p)),
            "{t:?}: {:?}",
            f.paths
        );
        assert!(!f.paths.is_empty(), "{t:?}");
    }

    // Listing a denied directory through an innocent symlink name is refused.
    let err = fs
        .list_directory(pb::ListDirectoryRequest {
            context: ctx(),
            path: "keys".into(),
            include_hidden: true,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
}

/// A deadline that passes while the call waits for a human comes back as DEADLINE_EXCEEDED /
/// TIMEOUT with an ErrorInfo (tonic's own deadline answer is CANCELLED without one), and
/// nothing is written. Sent with a raw HTTP/2 client, which (unlike tonic's or grpcio's) does
/// not give up at the deadline itself, so what is checked is the server's answer.
#[tokio::test]
async fn an_expired_deadline_is_deadline_exceeded_with_a_reason() {
    use prost::Message as _;
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut req = write("deploy/app.yaml", "replicas: 3\n");
    req.context = ctx_waiting(30);
    let body = req.encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);

    let tcp = tokio::net::TcpStream::connect(&exe.addr).await.unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let request = http::Request::post(format!(
        "http://{}/toolgate.executor.v1.FilesystemService/WriteFile",
        exe.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", "400m")
    .header("authorization", format!("Bearer {}", exe.agent_token))
    .body(())
    .unwrap();
    let started = std::time::Instant::now();
    let (response, mut send) = client.send_request(request, false).unwrap();
    send.send_data(frame.into(), true).unwrap();
    let response = response.await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= std::time::Duration::from_millis(350)
            && elapsed < std::time::Duration::from_secs(5),
        "{elapsed:?}"
    );
    // An error answered at once: the status is in the headers (trailers-only).
    let err = tonic::Status::from_header_map(response.headers()).expect("a grpc status");
    assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
    let (reason, md) = info(&err);
    assert_eq!(reason, "TIMEOUT");
    assert_eq!(
        md["method"],
        "toolgate.executor.v1.FilesystemService/WriteFile"
    );
    assert!(!sb.ws.join("deploy/app.yaml").exists());
}

/// Two policy replicas on one Postgres, one executor configured with both. One replica is
/// SIGKILLed under load: each client sees at most one failed call (one in flight on the
/// dead replica), every call after that succeeds on the other, and the ledger verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_replica_dies_under_load_and_the_executor_fails_over() {
    const CLIENTS: usize = 4;
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("notes.txt"), "hello\n").unwrap();
    let db = FreshPg::create("tg_exec_ha");
    let creds = std::sync::Arc::new(Credentials::new());
    let env = [("TOOLGATE_LEDGER__URL", db.url())];
    let a = Policy::start_env(DEFAULT_POLICY, creds.clone(), &env);
    let b = Policy::start_env(DEFAULT_POLICY, creds.clone(), &env);
    let both = format!("{},{}", a.endpoint(), b.endpoint());
    let exe = Executor::start_at(&both, &creds, &sb.ws, &[], &[]);

    let killed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Calls each client completed before the kill: the kill waits for five each, however
    // slow a loaded machine makes them.
    let progress: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>> = std::sync::Arc::new(
        (0..CLIENTS)
            .map(|_| std::sync::atomic::AtomicUsize::new(0))
            .collect(),
    );
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let mut fs = exe.fs().await;
        let killed = killed.clone();
        let progress = progress.clone();
        clients.push(tokio::spawn(async move {
            let (mut before, mut after) = (0usize, 0usize);
            let mut failures = Vec::new();
            // Call without pause across the kill, then 30 more calls.
            while after < 30 {
                let was_killed = killed.load(std::sync::atomic::Ordering::SeqCst);
                let r = fs
                    .read_file(pb::ReadFileRequest {
                        context: ctx(),
                        path: "notes.txt".into(),
                        ..Default::default()
                    })
                    .await;
                if was_killed {
                    after += 1;
                } else {
                    before += 1;
                    progress[client].store(before, std::sync::atomic::Ordering::SeqCst);
                }
                if let Err(e) = r {
                    failures.push((e.code(), info(&e).0, was_killed, after));
                }
            }
            (before, failures)
        }));
    }
    tokio::time::timeout(Duration::from_secs(120), async {
        while progress
            .iter()
            .any(|p| p.load(std::sync::atomic::Ordering::SeqCst) < 5)
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every client made five calls before the kill");
    drop(a); // SIGKILL
    killed.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in clients {
        let (before, failures) = c.await.unwrap();
        assert!(before >= 5, "calls ran before the kill: {before}");
        assert!(
            failures.len() <= 1,
            "at most one failed call per client: {failures:?}"
        );
        for (code, reason, was_killed, after) in &failures {
            assert_eq!(*code, Code::Unavailable, "{failures:?}");
            assert_eq!(reason, "POLICY_UNAVAILABLE");
            // The call in flight at the kill, or the first one after it.
            assert!(!*was_killed || *after <= 1, "{failures:?}");
        }
    }
    drop(exe);
    drop(b);
    let verify = std::process::Command::new(sibling_binary("toolgate"))
        .args(["ledger", "verify", "--database-url", db.url()])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
