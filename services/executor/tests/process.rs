//! End-to-end: `ProcessService.Run` and `ExecutorService.GetCapabilities` on the real binary.

mod support;

use std::time::{Duration, Instant};

use support::{Executor, Sandbox, ctx, reason};
use tonic::Code;
use toolgate_contracts::common::v1::exit_status::Status as S;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;

fn script(s: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

fn argv(a: &[&str]) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Argv(pb::Argv {
            args: a.iter().map(|s| (*s).to_owned()).collect(),
        })),
        ..Default::default()
    }
}

/// Everything a run streamed: stdout bytes, stderr bytes, the events in order, the final event.
struct Outcome {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    kinds: Vec<&'static str>,
    exited: pb::Exited,
}

async fn run(exe: &Executor, req: pb::RunRequest) -> Result<Outcome, tonic::Status> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await?.into_inner();
    let (mut stdout, mut stderr, mut kinds, mut exited) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    while let Some(msg) = stream.message().await? {
        match msg.event.expect("event set") {
            Event::Started(_) => kinds.push("started"),
            Event::AwaitingApproval(_) => kinds.push("awaiting"),
            Event::Output(o) => {
                kinds.push("output");
                let buf = if o.stream == pb::Stream::Stdout as i32 {
                    &mut stdout
                } else {
                    &mut stderr
                };
                assert_eq!(o.offset, buf.len() as u64, "offsets are contiguous");
                buf.extend_from_slice(&o.data);
            }
            Event::Exited(x) => {
                kinds.push("exited");
                exited = Some(x);
            }
        }
    }
    Ok(Outcome {
        stdout,
        stderr,
        kinds,
        exited: exited.expect("a final exited event"),
    })
}

fn status(o: &Outcome) -> S {
    o.exited.status.clone().unwrap().status.unwrap()
}

#[tokio::test]
async fn argv_and_script_stream_bytes_in_order() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let o = run(&exe, argv(&["printf", "a\\377b"])).await.unwrap();
    assert_eq!(o.stdout, b"a\xffb", "bytes pass through undecoded");
    assert_eq!(o.kinds.first(), Some(&"started"));
    assert_eq!(o.kinds.last(), Some(&"exited"));
    assert_eq!(o.kinds.iter().filter(|k| **k == "exited").count(), 1);
    assert!(matches!(status(&o), S::Exited(0)));

    let o = run(&exe, script("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(
        (o.stdout.as_slice(), o.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    assert!(matches!(status(&o), S::Exited(3)));
    let stats = o.exited.stdout.unwrap().stats.unwrap();
    assert_eq!((stats.total_bytes, stats.truncated), (4, false));
}

#[tokio::test]
async fn caps_keep_a_tail_and_exact_counts() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = script("head -c 3000000 /dev/zero | tr '\\0' a; printf END");
    req.limits = Some(pb::OutputLimits {
        stdout_cap_bytes: 1000,
        tail_bytes: 100,
        ..Default::default()
    });
    let o = run(&exe, req).await.unwrap();
    assert_eq!(o.stdout.len(), 1000);
    let s = o.exited.stdout.clone().unwrap();
    let stats = s.stats.unwrap();
    assert_eq!(stats.total_bytes, 3_000_003);
    assert!(stats.truncated);
    assert_eq!(stats.dropped_bytes, 3_000_003 - 1000 - 100);
    assert_eq!(s.tail.len(), 100);
    assert!(
        s.tail.ends_with(b"aaEND"),
        "the tail is the real end of the stream"
    );
    assert_eq!(s.tail_offset, 3_000_003 - 100);
    assert!(matches!(status(&o), S::Exited(0)), "a cap is not a timeout");
}

#[tokio::test]
async fn background_children_do_not_hold_the_call_and_die_with_it() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let t = Instant::now();
    let o = run(&exe, script("sleep 300 & echo started")).await.unwrap();
    assert_eq!(o.stdout, b"started\n");
    assert!(t.elapsed() < Duration::from_secs(10), "returned at once");

    // RES-BG-03: a nohup'd, detached grandchild never gets to write its file.
    let o = run(
        &exe,
        script("nohup sh -c 'sleep 2; touch late' >/dev/null 2>&1 &"),
    )
    .await
    .unwrap();
    assert!(matches!(status(&o), S::Exited(0)));
    // Proving an absence needs wall time: the grandchild would have written after 2 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !sb.ws.join("late").exists(),
        "a descendant outlived its run"
    );
}

#[tokio::test]
async fn timeout_escalates_to_kill_for_children_that_ignore_term() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[("TOOLGATE_PROCESS__KILL_GRACE_MS", "300")]);
    let mut req = script("trap '' TERM; sleep 300");
    req.timeout = Some(prost_types::Duration {
        seconds: 1,
        nanos: 0,
    });
    let t = Instant::now();
    let o = run(&exe, req).await.unwrap();
    match status(&o) {
        S::TimedOut(t) => assert!(t.killed, "TERM was ignored, so KILL was needed"),
        other => panic!("RES-BG-04: expected a timeout, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn bad_requests_fail_with_reasons() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("file"), "x").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);

    let err = run(&exe, argv(&["echo", "a\0b"]))
        .await
        .err()
        .expect("NUL in argv refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let mut req = script("true");
    req.cwd = "--bind / /".into(); // ARG-05
    let err = run(&exe, req).await.err().expect("bogus cwd refused");
    assert_eq!(reason(&err), "NOT_FOUND");
    let mut req = script("true");
    req.cwd = "..".into();
    let err = run(&exe, req).await.err().expect("escaping cwd refused");
    assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE");

    let err = run(
        &exe,
        pb::RunRequest {
            context: ctx(),
            ..Default::default()
        },
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);

    let o = run(&exe, argv(&["definitely-not-a-program"]))
        .await
        .unwrap();
    assert!(
        matches!(status(&o), S::SpawnFailed(_)),
        "missing program is a spawn failure"
    );
}

#[tokio::test]
async fn secrets_in_the_executor_environment_never_reach_a_child() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[("CANARY_SECRET", "canary-123")]);
    // Globbing /proc is something the baseline asks a human about.
    let _human = support::approve_everything(exe.policy()).await;
    // ENV-01 and ENV-02.
    let mut req =
        script("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c canary-123");
    req.context = support::ctx_waiting(60);
    let o = run(&exe, req).await.unwrap();
    assert_eq!(o.kinds.first(), Some(&"awaiting"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("canary-123"), "{out}");
    assert!(out.trim_end().ends_with('0'), "{out}");
    assert!(
        out.contains("PAGER=cat") && out.contains("TERM=dumb"),
        "{out}"
    );
}

#[tokio::test]
async fn stdin_larger_than_arg_max_is_streamed() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = argv(&["wc", "-c"]);
    req.stdin = Some(vec![b'x'; 3 << 20]);
    let o = run(&exe, req).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        (3 << 20).to_string()
    );
    // RES-TTY-02: without stdin the child reads /dev/null and returns at once.
    let o = run(&exe, script("read x; echo \"[$x]\"")).await.unwrap();
    assert_eq!(o.stdout, b"[]\n");
}

#[tokio::test]
async fn admission_is_bounded_and_capabilities_are_reported() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1")],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut first = client
        .run(script("echo go; sleep 30"))
        .await
        .unwrap()
        .into_inner();
    // Wait until the first run really started before asking for a second slot.
    while let Some(m) = first.message().await.unwrap() {
        if matches!(m.event, Some(Event::Output(_))) {
            break;
        }
    }
    let err = run(&exe, script("true"))
        .await
        .err()
        .expect("second run refused");
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::ResourceExhausted, "BUSY")
    );
    drop(first);

    let caps = ExecutorServiceClient::new(exe.channel().await)
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(caps.limits.unwrap().max_concurrent_runs, 1);
    assert_ne!(caps.kill_mechanism, pb::KillMechanism::Unspecified as i32);
    assert!(!caps.workspace.unwrap().root.is_empty());
    assert_eq!(caps.tools.len(), 9);
}

#[tokio::test]
async fn client_disconnect_kills_the_run() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client
        .run(script("echo ready; sleep 3; touch survived"))
        .await
        .unwrap()
        .into_inner();
    while let Some(m) = stream.message().await.unwrap() {
        if matches!(m.event, Some(Event::Output(_))) {
            break;
        }
    }
    drop(stream);
    drop(client);
    // The child would touch the file after 3 s if it were still alive.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !sb.ws.join("survived").exists(),
        "the run outlived its client"
    );
}

#[tokio::test]
async fn a_timed_out_script_never_runs_its_next_command() {
    // bash as PID 1 of its namespace ignores SIGTERM; before the fix it went on to `touch`
    // after its `sleep` was terminated.
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = script("sleep 30; touch next-command-ran");
    req.timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 300_000_000,
    });
    let t = Instant::now();
    let o = run(&exe, req).await.unwrap();
    assert!(matches!(status(&o), S::TimedOut(_)), "{:?}", status(&o));
    // The run is over and its namespace is gone, so nothing can create the file any more.
    assert!(!sb.ws.join("next-command-ran").exists());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "no grace period wasted: {:?}",
        t.elapsed()
    );
}
