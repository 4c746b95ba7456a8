//! Admission: run slots and the run memory budget are shared between sessions, a run that
//! does not fit waits briefly and then gets `BUSY` with a retry hint, never an overcommit.
//! Real executor, real policy service, real sandboxed children.

use crate::support;

use std::time::{Duration, Instant};

use support::{Executor, Sandbox, reason};
use tonic::Code;
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;
use toolgate_runtime::metrics::testing::http_get;

/// A fresh context in `session`.
fn in_session(session: &str) -> Option<CallContext> {
    let mut c = support::ctx();
    if let Some(c) = c.as_mut() {
        c.session_id = session.to_owned();
    }
    c
}

fn script(s: &str, session: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: in_session(session),
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

fn argv(a: &[&str], session: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: in_session(session),
        command: Some(pb::run_request::Command::Argv(pb::Argv {
            args: a.iter().map(|s| (*s).to_owned()).collect(),
        })),
        ..Default::default()
    }
}

/// Starts `req`; once it started, the open stream; else the refusal.
async fn start(
    client: &mut ProcessServiceClient<support::AuthChannel>,
    req: pb::RunRequest,
) -> Result<tonic::Streaming<pb::RunResponse>, tonic::Status> {
    let mut stream = client.run(req).await?.into_inner();
    while let Some(m) = stream.message().await? {
        if matches!(m.event, Some(Event::Started(_))) {
            return Ok(stream);
        }
    }
    panic!("the run ended before it started");
}

/// The `ErrorInfo` metadata value `key` of a status.
fn meta(s: &tonic::Status, key: &str) -> String {
    toolgate_contracts::status::error_info(s)
        .and_then(|(_, md)| md.get(key).cloned())
        .unwrap_or_default()
}

/// A `BUSY` refusal: code, reason and a retry hint.
fn assert_busy(s: &tonic::Status) {
    assert_eq!(
        (s.code(), reason(s).as_str()),
        (Code::ResourceExhausted, "BUSY"),
        "{s:?}"
    );
    let retry = toolgate_contracts::status::retry_after(s).expect("a RetryInfo");
    assert!(retry >= Duration::from_secs(1), "{retry:?}");
    assert!(s.message().contains("same call_id"), "{}", s.message());
}

/// Runs that fit 64 times in this host's memory: 16 MiB, 16 MiB of `/tmp`.
const SMALL_RUNS: [(&str, &str); 2] = [
    ("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "16777216"),
    ("TOOLGATE_PROCESS__SANDBOX__TMP_BYTES", "16777216"),
];

/// How a flood of long runs was answered.
#[derive(Debug, Default)]
struct Flooded {
    running: Vec<tonic::Streaming<pb::RunResponse>>,
    queue_full: usize,
    waited: usize,
    /// How long the probe took to start, asked while the flood held all it could.
    probe: Option<Duration>,
}

/// Sends `n` runs of `sleep 30` at once, the `i`th in session `session(i)`, and reads every
/// answer: each refusal must be `BUSY` held back by `limit`, a `queue_full` one at once, a
/// `wait_expired` one after the 2 s wait. Once `hold` runs are in progress (all the flood can
/// hold), `probe` starts an `echo` for someone else and its start time is kept.
async fn flood<P, F>(
    clients: &[ProcessServiceClient<support::AuthChannel>],
    n: usize,
    session: impl Fn(usize) -> String,
    limit: &str,
    hold: usize,
    probe: P,
) -> Flooded
where
    P: FnOnce() -> F,
    F: std::future::Future<Output = Result<tonic::Streaming<pb::RunResponse>, tonic::Status>>,
{
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let mut client = clients[i % clients.len()].clone();
        let req = script("sleep 30", &session(i));
        calls.spawn(async move {
            let asked = Instant::now();
            let r = start(&mut client, req).await;
            (r, asked.elapsed())
        });
    }
    let mut out = Flooded::default();
    let mut probe = Some(probe);
    while let Some(joined) = calls.join_next().await {
        let (r, took) = joined.unwrap();
        match r {
            Ok(stream) => out.running.push(stream),
            Err(s) => {
                assert_busy(&s);
                assert_eq!(meta(&s, "limit"), limit, "{s:?}");
                match meta(&s, "why").as_str() {
                    "queue_full" => {
                        out.queue_full += 1;
                        // Refused without waiting in the queue: well under the 2 s wait bound.
                        assert!(took < Duration::from_millis(1900), "{took:?}");
                    }
                    "wait_expired" => {
                        out.waited += 1;
                        assert!(took >= Duration::from_millis(1900), "{took:?}");
                    }
                    other => panic!("unexpected why {other}: {s:?}"),
                }
            }
        }
        if out.running.len() == hold
            && let Some(probe) = probe.take()
        {
            let asked = Instant::now();
            probe()
                .await
                .expect("someone else's run starts while the flood holds all it can");
            out.probe = Some(asked.elapsed());
        }
    }
    out
}

/// 100 long runs of one session against 64 slots: its share (32) starts, 32 wait and are
/// refused when their wait is up, the rest find the queue full at once; all the while,
/// another session's `echo` starts within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_session_leaves_another_sessions_run_starting_within_a_second() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &SMALL_RUNS);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(ProcessServiceClient::new(exe.channel().await));
    }
    let mut other = clients[0].clone();
    let out = flood(
        &clients,
        100,
        |_| "flood".to_owned(),
        "session_share",
        32,
        || async move { start(&mut other, argv(&["echo", "hi"], "other")).await },
    )
    .await;
    let took = out.probe.expect("the flood reached its share");
    eprintln!("another session's echo started in {took:?} with 32 runs of the flood in progress");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(
        out.running.len(),
        32,
        "one session holds half of the 64 slots"
    );
    assert_eq!(out.waited, 32, "half of the queue is one session's");
    assert_eq!(out.queue_full, 100 - 64);
    // And while the flood still runs, yet another session starts at once.
    let asked = Instant::now();
    let echo = start(&mut clients[1], argv(&["echo", "hi"], "third")).await;
    assert!(echo.is_ok() && asked.elapsed() < Duration::from_secs(1));
}

/// The same flood with a fresh session id on every call (ids are the client's to choose):
/// the principal is held to its share (48 of 64), and another principal's run starts at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_made_up_per_call_do_not_take_another_principals_slots() {
    let sb = Sandbox::new();
    let creds = std::sync::Arc::new(support::Credentials::new());
    let other_token = toolgate_runtime::auth::generate_token();
    let mut tokens = std::fs::read_to_string(creds.tokens_file()).unwrap();
    tokens.push_str(&format!(
        "[[tokens]]\nprincipal = \"agent-2\"\nrole = \"agent\"\ntoken = \"{other_token}\"\n"
    ));
    std::fs::write(creds.tokens_file(), tokens).unwrap();
    let policy = support::Policy::start_with(support::PERMISSIVE, creds);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &SMALL_RUNS);
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(ProcessServiceClient::new(exe.channel().await));
    }
    let mut other = ProcessServiceClient::new(exe.channel_as(&other_token).await);
    let out = flood(
        &clients,
        100,
        |i| format!("sprayed-{i}"),
        "principal_share",
        48,
        || async move { start(&mut other, argv(&["echo", "hi"], "agent-2-session")).await },
    )
    .await;
    let took = out.probe.expect("the flood reached its share");
    eprintln!("another principal's echo started in {took:?} with 48 runs of the flood in progress");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert_eq!(out.running.len(), 48, "one principal holds three quarters");
    assert_eq!(
        out.waited, 48,
        "three quarters of the queue are one principal's"
    );
    assert_eq!(out.queue_full, 100 - 48 - 48);
}

/// The sum of reservations never passes the budget: with room for two runs, a third waits
/// and is refused `BUSY` naming the memory budget; a run larger than the whole budget is
/// refused at once, `TOO_LARGE`, with nothing to wait for.
#[tokio::test]
async fn the_run_memory_budget_is_never_overcommitted() {
    let sb = Sandbox::new();
    // Each run reserves 64 MiB of memory plus 64 + 64 + 128 MiB of tmpfs: 320 MiB.
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "67108864"),
            ("TOOLGATE_PROCESS__SANDBOX__TMP_BYTES", "67108864"),
            ("TOOLGATE_PROCESS__RUNS_MEMORY_BYTES", "734003200"),
            ("TOOLGATE_PROCESS__ADMISSION__QUEUE_WAIT_MS", "300"),
            // One principal may use the whole budget here: only the budget holds runs back.
            ("TOOLGATE_PROCESS__ADMISSION__PRINCIPAL_SHARE", "1"),
            (
                "TOOLGATE_PROCESS__SANDBOX__PROFILES__BIG__MEMORY_BYTES",
                "1073741824",
            ),
        ],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let _one = start(&mut client, script("sleep 30", "s1")).await.unwrap();
    let _two = start(&mut client, script("sleep 30", "s2")).await.unwrap();
    let asked = Instant::now();
    let third = start(&mut client, script("echo never", "s3"))
        .await
        .unwrap_err();
    assert!(asked.elapsed() >= Duration::from_millis(290));
    assert_busy(&third);
    assert_eq!(meta(&third, "limit"), "memory", "{third:?}");
    assert_eq!(meta(&third, "why"), "wait_expired");
    assert_eq!(meta(&third, "reserved_bytes"), (640u64 << 20).to_string());
    assert!(third.message().contains("run memory budget"), "{third:?}");

    let mut big = script("echo big", "s4");
    big.sandbox_profile = "big".into();
    let asked = Instant::now();
    let refused = start(&mut client, big).await.unwrap_err();
    assert!(asked.elapsed() < Duration::from_millis(290), "no wait");
    assert_eq!(
        (refused.code(), reason(&refused).as_str()),
        (Code::FailedPrecondition, "TOO_LARGE"),
        "{refused:?}"
    );
    assert!(
        toolgate_contracts::status::retry_after(&refused).is_none(),
        "retrying cannot help"
    );
    assert!(
        refused.message().contains("can never start here"),
        "{}",
        refused.message()
    );
}

/// The sample `name` of one scrape.
async fn gauge(exe: &Executor, name: &str) -> f64 {
    let (status, body) = http_get(exe.metrics.as_deref().unwrap(), "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// Polls the gauge `name` until it reads `want` (the queue is the executor's state; the
/// endpoint is how an operator sees it).
async fn until_gauge(exe: &Executor, name: &str, want: f64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while gauge(exe, name).await != want {
        assert!(Instant::now() < deadline, "{name} never reached {want}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A waiter whose client goes away leaves the queue: its place is free for the next run,
/// and nothing of the slot or the budget is left held.
#[tokio::test]
async fn a_cancelled_waiter_frees_its_place_in_the_queue() {
    const DEPTH: &str = "toolgate_executor_admission_queue_depth";
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &["--metrics-listen", "127.0.0.1:0"],
        &[
            ("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1"),
            ("TOOLGATE_PROCESS__ADMISSION__QUEUE_LENGTH", "1"),
            ("TOOLGATE_PROCESS__ADMISSION__QUEUE_WAIT_MS", "30000"),
        ],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let holder = start(
        &mut client,
        script("until test -e release; do sleep 0.02; done", "holder"),
    )
    .await
    .unwrap();
    // The first waiter takes the only place; its client then goes away.
    let gone = {
        let mut client = client.clone();
        tokio::spawn(async move { start(&mut client, script("touch gone-ran", "w1")).await })
    };
    until_gauge(&exe, DEPTH, 1.0).await;
    // The queue is full meanwhile: another run is refused at once.
    let full = start(&mut client, script("true", "w2")).await.unwrap_err();
    assert_busy(&full);
    assert_eq!(meta(&full, "why"), "queue_full");
    gone.abort();
    let _ = gone.await;
    until_gauge(&exe, DEPTH, 0.0).await;

    // Its place is free: the next run waits there and starts when the holder ends.
    let next = {
        let mut client = client.clone();
        tokio::spawn(async move {
            let mut s = start(&mut client, script("echo next", "w3")).await?;
            while s.message().await?.is_some() {}
            Ok::<_, tonic::Status>(())
        })
    };
    until_gauge(&exe, DEPTH, 1.0).await;
    std::fs::write(sb.ws.join("release"), b"").unwrap();
    drop(holder);
    next.await
        .unwrap()
        .expect("the waiter behind the cancelled one runs");
    assert!(
        !sb.ws.join("gone-ran").exists(),
        "the cancelled waiter never ran"
    );
    // Nothing stays reserved once every run ended.
    until_gauge(&exe, "toolgate_executor_admission_reserved_bytes", 0.0).await;
}

/// The `p`th percentile of `samples` (sorted in place).
fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

/// The executor's resident set, from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// One short run to its end; how long from the call to the exit.
async fn short_run(client: &mut ProcessServiceClient<support::AuthChannel>) -> Duration {
    let asked = Instant::now();
    let mut s = client
        .run(argv(&["/bin/true"], "latency"))
        .await
        .unwrap()
        .into_inner();
    while s.message().await.unwrap().is_some() {}
    asked.elapsed()
}

/// A run allocating 2 GiB under a 256 MiB limit is OOM-killed inside its own cgroup while a
/// concurrent session's short runs keep completing and the executor's RSS does not move.
/// The latency of those neighbours is printed (idle and loaded rounds interleaved) but not
/// asserted: a timed assertion on a shared 2-core machine fails on noise, not on regressions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_run_leaves_other_runs_and_the_executor_alone() {
    const ROUNDS: usize = 6;
    const PER_ROUND: usize = 20;
    let sb = Sandbox::new();
    // 2 GiB in 16 MiB pieces, a little at a time: the run lives at its limit for a while
    // before the kernel kills it there.
    std::fs::write(
        sb.ws.join("hog.py"),
        "import time\nheld = []\nfor _ in range(128):\n    held.append(bytearray(16 << 20))\n    time.sleep(0.03)\nprint('survived')\n",
    )
    .unwrap();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "268435456")],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    // Warm up: connections, policy, allocator.
    for _ in 0..PER_ROUND {
        short_run(&mut client).await;
    }
    let rss_before = rss_kib(exe.pid());
    let (mut idle, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            idle.push(short_run(&mut client).await);
        }
        let mut hog_client = ProcessServiceClient::new(exe.channel().await);
        let hog = tokio::spawn(async move {
            let mut s = hog_client
                .run(argv(&["python3", "hog.py"], "hog"))
                .await
                .unwrap()
                .into_inner();
            let mut exited = None;
            while let Some(m) = s.message().await.unwrap() {
                if let Some(Event::Exited(x)) = m.event {
                    exited = Some(x);
                }
            }
            exited.expect("the hog's exit")
        });
        while !hog.is_finished() {
            loaded.push(short_run(&mut client).await);
        }
        let x = hog.await.unwrap();
        let usage = x.usage.unwrap();
        assert!(usage.oom_killed, "the hog was OOM-killed: {x:?}");
        assert!(usage.peak_memory_bytes <= 256 << 20, "{usage:?}");
        assert_eq!(
            x.limit_exceeded.map(|l| l.resource).as_deref(),
            Some("memory")
        );
    }
    let rss_after = rss_kib(exe.pid());
    let (idle_p50, loaded_p50) = (percentile(&mut idle, 0.5), percentile(&mut loaded, 0.5));
    let (idle_p99, loaded_p99) = (percentile(&mut idle, 0.99), percentile(&mut loaded, 0.99));
    eprintln!(
        "short runs: idle p50 {idle_p50:?} p99 {idle_p99:?} ({} samples); beside a 2 GiB hog OOM-killed at 256 MiB p50 {loaded_p50:?} p99 {loaded_p99:?} ({} samples, {ROUNDS} kills); p99 ratio {:.2}; executor RSS {rss_before} KiB before, {rss_after} KiB after",
        idle.len(),
        loaded.len(),
        loaded_p99.as_secs_f64() / idle_p99.as_secs_f64()
    );
    assert!(
        loaded.len() >= 2 * ROUNDS,
        "the neighbours' runs stalled beside the hog: {} completed",
        loaded.len()
    );
    assert!(
        rss_after <= rss_before + 8 * 1024,
        "the executor's RSS moved: {rss_before} KiB -> {rss_after} KiB"
    );
}
