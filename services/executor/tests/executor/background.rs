//! Background runs end to end: `Run` with `background`, then `ListRuns`, `ReadRunOutput`,
//! `AttachRun` and `SignalRun` on the real binary, with real children and a real policy.

use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::{Executor, Policy, Sandbox, reason};
use tonic::Code;
use toolgate_contracts::common::v1::exit_status::Status as S;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;

use crate::process::script;

type Client = ProcessServiceClient<support::AuthChannel>;

fn background(s: &str) -> pb::RunRequest {
    pb::RunRequest {
        background: true,
        ..script(s)
    }
}

fn info(s: &tonic::Status) -> (String, HashMap<String, String>) {
    toolgate_contracts::status::error_info(s)
        .unwrap_or_else(|| panic!("status without ErrorInfo: {s:?}"))
}

/// Starts `req` and returns the whole answer of the call: every event up to the stream's end.
async fn call(client: &mut Client, req: pb::RunRequest) -> Result<Vec<Event>, tonic::Status> {
    let mut stream = client.run(req).await?.into_inner();
    let mut events = Vec::new();
    while let Some(m) = stream.message().await? {
        events.push(m.event.expect("event set"));
    }
    Ok(events)
}

/// Starts a background run and returns its `Started` event (the call's only event).
async fn start(client: &mut Client, req: pb::RunRequest) -> pb::Started {
    let events = call(client, req).await.expect("background run starts");
    match events.as_slice() {
        [Event::Started(s)] => s.clone(),
        other => panic!("a background call answers `started` only: {other:?}"),
    }
}

/// Follows `run_id` from offset 0 to its end: (stdout, stderr, kinds of events, exited).
async fn follow(
    client: &mut Client,
    run_id: &str,
) -> (Vec<u8>, Vec<u8>, Vec<&'static str>, pb::Exited) {
    let mut stream = client
        .attach_run(pb::AttachRunRequest {
            run_id: run_id.into(),
            ..Default::default()
        })
        .await
        .expect("attach")
        .into_inner();
    let (mut out, mut err, mut kinds, mut exited) = (Vec::new(), Vec::new(), Vec::new(), None);
    while let Some(m) = stream.message().await.expect("attach stream") {
        assert!(exited.is_none(), "nothing follows `exited`");
        match m.event.and_then(|e| e.event).expect("event set") {
            Event::Started(_) => kinds.push("started"),
            Event::AwaitingApproval(_) => kinds.push("awaiting"),
            Event::Output(o) => {
                kinds.push("output");
                let buf = if o.stream == pb::Stream::Stdout as i32 {
                    &mut out
                } else {
                    &mut err
                };
                assert!(o.offset >= buf.len() as u64, "offsets never go back");
                buf.extend_from_slice(&o.data);
            }
            Event::Exited(x) => {
                kinds.push("exited");
                exited = Some(x);
            }
        }
    }
    (out, err, kinds, exited.expect("`exited` ends the stream"))
}

/// Reads `stream` of `run_id` from `offset` until `eof`, following `next_offset`.
async fn read_all(client: &mut Client, run_id: &str, stream: pb::Stream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let r = client
            .read_run_output(pb::ReadRunOutputRequest {
                run_id: run_id.into(),
                stream: stream as i32,
                offset,
                max_bytes: 1000,
            })
            .await
            .expect("read")
            .into_inner();
        assert_eq!(r.offset, offset);
        out.extend_from_slice(&r.data);
        if r.eof {
            return out;
        }
        assert!(r.next_offset > offset, "reading goes on: {r:?}");
        offset = r.next_offset;
    }
}

async fn list(client: &mut Client, include_finished: bool) -> Vec<pb::RunInfo> {
    client
        .list_runs(pb::ListRunsRequest {
            session_id: "session-test".into(),
            include_finished,
        })
        .await
        .expect("list")
        .into_inner()
        .runs
}

fn exit(x: &pb::Exited) -> S {
    x.status.clone().unwrap().status.unwrap()
}

fn expected_lines(n: usize) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("line {i}\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn a_background_run_outlives_its_call_and_is_read_again_from_offset_0() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let req = background("for i in $(seq 1 200); do echo line $i; sleep 0.01; done");
    let started = {
        let mut client = ProcessServiceClient::new(exe.channel().await);
        let s = start(&mut client, req.clone()).await;
        // The starting client goes away at once: the run goes on.
        drop(client);
        s
    };
    assert!(started.background);
    assert!(started.run_id.starts_with("run_"), "{}", started.run_id);
    assert_eq!(started.cwd, ".");
    let caps = ExecutorServiceClient::new(exe.channel().await)
        .get_capabilities(pb::GetCapabilitiesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        started.executor, caps.identity,
        "Started names the executor that holds the run"
    );
    let limits = caps.limits.unwrap();
    assert_eq!(limits.max_background_per_session, 8);
    assert_eq!(limits.max_background_per_principal, 32);
    assert_eq!(limits.finished_retention.unwrap().seconds, 3600);

    let mut client = ProcessServiceClient::new(exe.channel().await);
    let running = list(&mut client, false).await;
    let run = running
        .iter()
        .find(|r| r.run_id == started.run_id)
        .expect("listed while it runs");
    assert_eq!(run.state, pb::RunState::Running as i32);
    assert!(run.background && run.pid > 0);
    assert_eq!(
        run.command,
        "for i in $(seq 1 200); do echo line $i; sleep 0.01; done"
    );

    let (out, _, kinds, exited) = follow(&mut client, &started.run_id).await;
    assert_eq!(kinds.first(), Some(&"started"));
    assert_eq!(exit(&exited), S::Exited(0));
    assert_eq!(out, expected_lines(200));
    assert_eq!(
        read_all(&mut client, &started.run_id, pb::Stream::Stdout).await,
        expected_lines(200),
        "re-read from offset 0 after the starting client left"
    );

    assert!(
        list(&mut client, false)
            .await
            .iter()
            .all(|r| r.run_id != started.run_id),
        "a finished run is listed only with include_finished"
    );
    let finished = list(&mut client, true).await;
    let run = finished
        .iter()
        .find(|r| r.run_id == started.run_id)
        .expect("retained");
    assert_eq!(run.state, pb::RunState::Exited as i32);
    assert_eq!(run.pid, 0);
    assert_eq!(run.status.clone().unwrap().status.unwrap(), S::Exited(0));
    assert_eq!(run.stdout_bytes, expected_lines(200).len() as u64);

    // The outcome is in the ledger: the same call again is ALREADY_EXECUTED with it.
    let err = call(&mut client, req).await.unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    let (r, md) = info(&err);
    assert_eq!(r, "ALREADY_EXECUTED");
    assert_eq!(md["exit_code"], "0");
    assert_eq!(md["stdout_bytes"], expected_lines(200).len().to_string());

    // A foreground run's `Started` names it too.
    let mut fg = script("pwd");
    fg.cwd = String::new();
    let events = call(&mut client, fg).await.unwrap();
    let Some(Event::Started(s)) = events.first() else {
        panic!("{events:?}")
    };
    assert!(!s.background);
    assert!(s.run_id.starts_with("run_") && s.run_id != started.run_id);
    assert_eq!(s.executor, started.executor);
    assert!(matches!(events.last(), Some(Event::Exited(_))));
}

#[tokio::test]
async fn two_followers_get_identical_bytes_and_exited_last() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let started = start(
        &mut client,
        background("for i in $(seq 1 100); do echo line $i; echo err $i >&2; sleep 0.01; done"),
    )
    .await;
    let mut a = ProcessServiceClient::new(exe.channel().await);
    let mut b = ProcessServiceClient::new(exe.channel().await);
    let (one, two) = tokio::join!(
        follow(&mut a, &started.run_id),
        follow(&mut b, &started.run_id)
    );
    assert_eq!(one.0, expected_lines(100));
    assert_eq!(one.0, two.0, "identical stdout");
    assert_eq!(one.1, two.1, "identical stderr");
    assert_eq!(one.1.iter().filter(|b| **b == b'\n').count(), 100);
    for kinds in [&one.2, &two.2] {
        assert_eq!(kinds.first(), Some(&"started"));
        assert_eq!(kinds.last(), Some(&"exited"));
    }
    assert_eq!(one.3, two.3, "the same `exited`");
    assert_eq!(exit(&one.3), S::Exited(0));
    // A follower arriving after the end replays everything the same way.
    let late = follow(&mut client, &started.run_id).await;
    assert_eq!(late.0, one.0);
    assert_eq!(late.3, one.3);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn output_past_the_cap_keeps_its_head_and_tail_on_disk_not_in_memory() {
    const TOTAL: u64 = 200 << 20;
    const CAP: u64 = 64 << 10;
    const TAIL: u64 = 4 << 10;
    let sb = Sandbox::new();
    let spool = tempfile::tempdir().unwrap();
    let spool_dir = spool.path().join("spool");
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_SESSIONS__SPOOL_DIR", spool_dir.to_str().unwrap())],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    // Warm up the executor's allocations (a first run, a first spool) before measuring.
    let warm = start(&mut client, background("echo warm")).await;
    follow(&mut client, &warm.run_id).await;
    let before = rss_kib(exe.pid());

    let mut req = background(&format!(
        "head -c {TOTAL} /dev/zero | tr '\\0' x; echo -n END"
    ));
    req.limits = Some(pb::OutputLimits {
        stdout_cap_bytes: CAP,
        tail_bytes: TAIL,
        ..Default::default()
    });
    let started = start(&mut client, req).await;
    let (out, _, _, exited) = follow(&mut client, &started.run_id).await;
    let after = rss_kib(exe.pid());
    assert!(
        after.saturating_sub(before) < 32 << 10,
        "executor RSS grew from {before} KiB to {after} KiB for a {TOTAL}-byte output"
    );
    assert_eq!(exit(&exited), S::Exited(0));
    let stats = exited.stdout.as_ref().unwrap().stats.unwrap();
    let total = TOTAL + 3;
    assert_eq!(stats.total_bytes, total);
    assert!(stats.truncated);
    // The follower got the head and the tail window, nothing of the middle.
    assert_eq!(out.len() as u64, CAP + TAIL);
    assert!(out.ends_with(b"xEND"));

    // The spool holds no more than cap + tail per stream.
    let file = spool_dir.join(&started.run_id).join("stdout");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), CAP + TAIL);

    let read = |offset: u64, max_bytes: u64| pb::ReadRunOutputRequest {
        run_id: started.run_id.clone(),
        stream: pb::Stream::Stdout as i32,
        offset,
        max_bytes,
    };
    let head = client
        .read_run_output(read(0, 1 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(head.data.len() as u64, CAP);
    assert_eq!(
        head.next_offset,
        total - TAIL,
        "the head ends where the tail begins"
    );
    assert_eq!(head.total_bytes, total);
    let ranges: Vec<(u64, u64)> = head.retained.iter().map(|r| (r.start, r.end)).collect();
    assert_eq!(ranges, vec![(0, CAP), (total - TAIL, total)]);
    assert!(!head.eof);
    let tail = client
        .read_run_output(read(total - 10, 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&tail.data[..], b"xxxxxxxEND");
    assert!(tail.eof);
    // The gap is not retained: OUT_OF_RANGE, and the ranges say where to read instead.
    let err = client
        .read_run_output(read(CAP + 1000, 0))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange);
    let (r, md) = info(&err);
    assert_eq!(r, "OUTPUT_NOT_RETAINED");
    let expected = format!("0-{CAP},{}-{total}", total - TAIL);
    assert_eq!(md["retained"], expected);
    assert!(err.message().contains(&expected), "{}", err.message());
    let err = client.read_run_output(read(0, 2 << 20)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    // At the end: nothing, and nothing more will come.
    let end = client
        .read_run_output(read(total, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(end.data.is_empty() && end.eof);
}

/// Adds an agent `agent-2` to `policy`'s tokens file and returns its token.
fn second_agent(policy: &Policy) -> String {
    use std::io::Write;
    let token = toolgate_runtime::auth::generate_token();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(policy.creds.tokens_file())
        .unwrap();
    writeln!(
        f,
        "[[tokens]]\nprincipal = \"agent-2\"\nrole = \"agent\"\ntoken = \"{token}\""
    )
    .unwrap();
    token
}

#[tokio::test]
async fn signal_run_stops_a_run_and_another_principal_never_sees_it() {
    let sb = Sandbox::new();
    let policy = Policy::start(support::PERMISSIVE);
    let other_token = second_agent(&policy);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut other = ProcessServiceClient::new(exe.channel_as(&other_token).await);

    let term = start(&mut client, background("sleep 60")).await;
    // Another principal: the run does not exist for it.
    assert!(
        other
            .list_runs(pb::ListRunsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .runs
            .is_empty()
    );
    let not_found = |s: tonic::Status| {
        assert_eq!(s.code(), Code::NotFound, "{s:?}");
        assert_eq!(reason(&s), "RUN_NOT_FOUND");
    };
    not_found(
        other
            .signal_run(pb::SignalRunRequest {
                run_id: term.run_id.clone(),
                signal: pb::RunSignal::Kill as i32,
            })
            .await
            .unwrap_err(),
    );
    not_found(
        other
            .read_run_output(pb::ReadRunOutputRequest {
                run_id: term.run_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );
    not_found(
        other
            .attach_run(pb::AttachRunRequest {
                run_id: term.run_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
    );

    let t0 = Instant::now();
    let answer = client
        .signal_run(pb::SignalRunRequest {
            run_id: term.run_id.clone(),
            signal: pb::RunSignal::Term as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.run.unwrap().run_id, term.run_id);
    let (_, _, _, exited) = follow(&mut client, &term.run_id).await;
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "TERM ended `sleep 60`"
    );
    match exit(&exited) {
        S::Signaled(s) => assert_eq!(s.name, "SIGTERM"),
        S::Cancelled(c) => assert_eq!(c.cause, "stopped"),
        other => panic!("TERM: {other:?}"),
    }

    let kill = start(&mut client, background("trap '' TERM; sleep 60")).await;
    client
        .signal_run(pb::SignalRunRequest {
            run_id: kill.run_id.clone(),
            signal: pb::RunSignal::Kill as i32,
        })
        .await
        .unwrap();
    let (_, _, _, exited) = follow(&mut client, &kill.run_id).await;
    match exit(&exited) {
        S::Signaled(s) => assert_eq!(s.name, "SIGKILL"),
        S::Cancelled(c) => assert_eq!(c.cause, "stopped"),
        other => panic!("KILL: {other:?}"),
    }
    // Stopping a run that ended answers its final state.
    let again = client
        .signal_run(pb::SignalRunRequest {
            run_id: kill.run_id.clone(),
            signal: pb::RunSignal::Term as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(again.state, pb::RunState::Exited as i32);
}

#[tokio::test]
async fn the_ninth_background_run_of_a_session_is_refused_before_the_policy() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "67108864")],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut runs = Vec::new();
    for _ in 0..8 {
        runs.push(start(&mut client, background("sleep 60")).await);
    }
    let ninth = background("sleep 60");
    let err = call(&mut client, ninth.clone()).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    let (r, md) = info(&err);
    assert_eq!(r, "TOO_MANY_RUNS");
    assert_eq!(md["limit"], "8");
    assert_eq!(md["scope"], "session");
    // Another session of the same principal still has room.
    let mut elsewhere = background("true");
    elsewhere.context.as_mut().unwrap().session_id = "session-other".into();
    let s = start(&mut client, elsewhere).await;
    follow(&mut client, &s.run_id).await;

    // One ends: the very same call now runs, so the refusal recorded no decision for it
    // (a recorded one would make it CALL_IN_FLIGHT).
    client
        .signal_run(pb::SignalRunRequest {
            run_id: runs[0].run_id.clone(),
            signal: pb::RunSignal::Kill as i32,
        })
        .await
        .unwrap();
    follow(&mut client, &runs[0].run_id).await;
    let ninth_started = start(&mut client, ninth).await;
    assert!(ninth_started.background);
    for r in runs.iter().skip(1).chain([&ninth_started]) {
        client
            .signal_run(pb::SignalRunRequest {
                run_id: r.run_id.clone(),
                signal: pb::RunSignal::Kill as i32,
            })
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_finished_run_is_forgotten_with_its_spool_after_the_retention() {
    let sb = Sandbox::new();
    let spool = tempfile::tempdir().unwrap();
    let spool_dir = spool.path().join("spool");
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_SESSIONS__FINISHED_RETENTION_S", "1"),
            ("TOOLGATE_SESSIONS__SPOOL_DIR", spool_dir.to_str().unwrap()),
        ],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let started = start(&mut client, background("echo kept for a second")).await;
    let ended_at = {
        let (out, _, _, _) = follow(&mut client, &started.run_id).await;
        assert_eq!(out, b"kept for a second\n");
        Instant::now()
    };
    let dir = spool_dir.join(&started.run_id);
    // The retention is time itself: look until it passed (with a generous bound).
    let deadline = ended_at + Duration::from_secs(15);
    loop {
        // The entry goes first, then the spool: a run listed after the look at its spool
        // still had it.
        let spooled = dir.is_dir();
        let listed = list(&mut client, true)
            .await
            .iter()
            .any(|r| r.run_id == started.run_id);
        if !listed {
            break;
        }
        assert!(spooled, "the spool stays while the run is listed");
        assert!(
            Instant::now() < deadline,
            "still listed 15 s after a 1 s retention"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ended_at.elapsed() >= Duration::from_millis(900));
    assert!(!dir.exists(), "its spool went with it");
    let err = client
        .read_run_output(pb::ReadRunOutputRequest {
            run_id: started.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "RUN_NOT_FOUND");
}

#[tokio::test]
async fn a_background_run_ended_by_the_executor_stopping_is_never_recorded_as_finished() {
    let sb = Sandbox::new();
    let policy = Policy::start(support::PERMISSIVE);
    let spool = tempfile::tempdir().unwrap();
    let spool_dir = spool.path().join("spool");
    let exe = Executor::start_with(
        &policy,
        &sb.ws,
        &[],
        &[("TOOLGATE_SESSIONS__SPOOL_DIR", spool_dir.to_str().unwrap())],
    );
    let req = background("echo before; sleep 60");
    let started = {
        let mut client = ProcessServiceClient::new(exe.channel().await);
        start(&mut client, req.clone()).await
    };
    assert!(spool_dir.join(&started.run_id).is_dir());
    let status = exe.terminate();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        std::fs::read_dir(&spool_dir).unwrap().count(),
        0,
        "the spool goes with the executor"
    );
    // The same call on the next executor: whatever the ledger says, never a finished run.
    let next = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(next.channel().await);
    let err = call(&mut client, req).await.unwrap_err();
    let (r, md) = info(&err);
    for finished in ["exit_code", "signal", "ended"] {
        assert!(
            !md.contains_key(finished),
            "recorded as finished ({r}): {md:?}"
        );
    }
}
