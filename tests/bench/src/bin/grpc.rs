//! gRPC-level benchmarks against the real services on loopback, each interleaved with its
//! same-run baseline.
//!
//! - `Classify` round trip vs a gRPC echo (the health `Check` of the same server, a unary
//!   round trip that does no work): the policy must add at most 10 µs (issue 4). Measured
//!   twice: the same script on every call (its analysis comes from the policy's memo after
//!   the first), and a script the policy has never seen on every call (full bash parse).
//! - `Run(["/bin/true"])` through the executor vs a raw spawn+wait of `/bin/true` with the
//!   same isolation (issue 3, goal p50 ≤ 1.35×, "policy + ledger bypassed").
//! - Streaming a child's stdout to a gRPC client vs a raw read of the same child's pipe
//!   (issue 3, goal ≥ 0.8×), and the same pipe relayed over a plain loopback TCP connection
//!   (no gRPC): what no TCP transport can beat on this machine.
//!
//! After the run and stream comparisons, each side runs again in a row to measure the CPU it
//! spends per call (the child, the executor's threads, the reader), outside the timed samples:
//! on a machine with few cores the child, the executor and the client share them, and the CPU
//! alone can bound a ratio.
//!
//! Set-up, chosen so the numbers mean what a real client would see:
//! - The servers run on their own multi-thread runtime (their own worker threads), as they
//!   would in their own process; the clients run on a second multi-thread runtime.
//! - Every sampling loop is one task on the client runtime, using one reused channel built
//!   from `toolgate_runtime::grpc::endpoint`, the endpoint every toolgate client uses. The echo
//!   goes through exactly the same client set-up (same channel, same bearer header) as the
//!   call it is compared with.
//! - The executor is served in-process with `toolgate_executor::serve_with` and [`AllowAll`],
//!   an `Authorizer` that allows every call without asking anything. This is the "policy +
//!   ledger bypassed" of the goal, and it exists only in this benchmark: the executor binary
//!   always asks the real policy service (`--bin fullpath` measures that path).
//!
//! `cargo run --release -p toolgate-bench --bin grpc [classify] [run] [stream]` (no argument:
//! all three).

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolgate_bench::{
    Goal, TICK, heading, interleave_async, print_side, report_ratio, runtime, runtime_cpu,
    sample_count, stat_ticks, wanted,
};
use toolgate_contracts::common::v1::{CallContext, ToolKind};
use toolgate_contracts::executor::v1 as ex;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;
use toolgate_runtime::auth::{AuthConfig, Bearer, Role, TokenEntry};

const AGENT_TOKEN: &str = "bench-agent-token-0123456789abcdef";

fn main() {
    let n = sample_count(2_000);
    let server_rt = runtime("server");
    let client_rt = runtime("client");
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();
    let dir = tempfile::tempdir().expect("temp dir");

    // Policy service on the server runtime, over real loopback gRPC, with bearer auth and a
    // SQLite ledger (Classify is a dry run and never writes it).
    let policy_addr = server_rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut cfg = toolgate_policy::Config::default();
        cfg.log.filter = "warn".into();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("ledger.db").display()));
        cfg.auth = agent_auth();
        tokio::spawn(toolgate_policy::serve(cfg, l, shutdown.clone()));
        addr
    });

    // Executor on a temp workspace, on the server runtime too.
    let ws = tempfile::tempdir().expect("temp workspace");
    let exec_addr = server_rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut cfg = toolgate_executor::Config::default();
        cfg.workspace.root = ws.path().to_path_buf();
        cfg.log.filter = "warn".into();
        cfg.auth = agent_auth();
        // The goal compares with a raw spawn of the same isolation, which has no sandbox
        // profile; the sandbox's own cost is `process` scenario 1b.
        cfg.process.sandbox_profile = "none".into();
        cfg.process.sandbox.profiles.insert(
            "none".into(),
            toolgate_executor::config::ProfileSection {
                unconfined: true,
                ..Default::default()
            },
        );
        tokio::spawn(toolgate_executor::serve_with(
            cfg,
            l,
            shutdown.clone(),
            Arc::new(AllowAll),
            toolgate_executor::ServeOptions::default(),
        ));
        addr
    });

    let runner = toolgate_process::Runner::new(toolgate_process::Config::default()).unwrap();
    let ws_path = ws.path().to_path_buf();
    let bench = async move {
        let policy_ch = connect(policy_addr.to_string()).await;
        let exec_ch = connect(exec_addr.to_string()).await;
        if wanted("classify") {
            classify_vs_echo(n, policy_ch).await;
        }
        if wanted("run") {
            run_true_vs_spawn(n, exec_ch.clone(), &runner, &ws_path).await;
        }
        if wanted("stream") {
            stream_vs_pipe(exec_ch, &runner, &ws_path).await;
        }
    };
    client_rt
        .block_on(client_rt.spawn(bench))
        .expect("benchmark task");
}

/// Whether the command line selects `section` (no arguments: every section).
fn agent_auth() -> AuthConfig {
    AuthConfig {
        tokens: vec![TokenEntry {
            principal: "bench-agent".into(),
            role: Role::Agent,
            token: Some(AGENT_TOKEN.into()),
            token_file: None,
        }],
        tokens_file: None,
    }
}

/// What an [`toolgate_executor::Authorizer`] returns (the same type as `futures::future::BoxFuture`).
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

use toolgate_policy_api::{
    ApprovalStatus, Authorization, AuthorizeAnswer, AuthorizeRequest, Error as PolicyFailure,
    HiddenGlobs, OutcomeReport,
};

/// The benchmark's policy bypass: allows every call at once and records nothing, so the
/// `Run` round trip measures the executor alone. Never used outside this benchmark.
struct AllowAll;

impl toolgate_executor::Authorizer for AllowAll {
    fn authorize(
        &self,
        _request: AuthorizeRequest,
        _traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<AuthorizeAnswer, PolicyFailure>> {
        Box::pin(async {
            Ok(AuthorizeAnswer {
                authorization: Authorization::Allowed {
                    decision_id: "bench-bypass".into(),
                    approval_id: String::new(),
                    lease_expires_at: None,
                    // Nothing hidden, said explicitly: an executor refuses to act without
                    // knowing which paths the policy hides.
                    hidden: Some(HiddenGlobs {
                        policy_version: String::new(),
                        globs: Vec::new(),
                    }),
                    sandbox_profile: String::new(),
                    denied_hosts: Vec::new(),
                },
                explanation: None,
            })
        })
    }

    fn record_outcome(&self, _report: OutcomeReport) -> BoxFuture<'_, Result<(), PolicyFailure>> {
        Box::pin(async { Ok(()) })
    }

    fn wait_for_approval(
        &self,
        _approval_id: String,
        _timeout: std::time::Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, PolicyFailure>> {
        Box::pin(async {
            Err(PolicyFailure::new(
                toolgate_core::Reason::Internal,
                "the bypass never asks",
                [],
            ))
        })
    }
}

fn bearer() -> Bearer {
    Bearer::new(AGENT_TOKEN).expect("ascii token")
}

async fn classify_vs_echo(n: usize, ch: Channel) {
    let health = HealthClient::with_interceptor(ch.clone(), bearer());
    let policy = PolicyServiceClient::with_interceptor(ch, bearer());
    let req = pb::ClassifyRequest {
        call: Some(pb::ToolCall {
            tool: ToolKind::ProcessRun as i32,
            script: Some("git status && cargo test -p foo 2>&1 | tail -n 20".into()),
            ..Default::default()
        }),
        session_id: "bench".into(),
        ..Default::default()
    };
    heading("Classify round trip vs gRPC echo (policy service, loopback)");
    let (echo, classify) = interleave_async(
        n,
        200,
        || {
            let mut c = health.clone();
            async move {
                c.check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap();
            }
        },
        || {
            let (mut c, r) = (policy.clone(), req.clone());
            async move {
                c.classify(r).await.unwrap();
            }
        },
    )
    .await;
    print_side("gRPC echo (health Check)", &echo);
    print_side("Classify", &classify);
    let added = classify.p50().saturating_sub(echo.p50());
    println!("  Classify adds {added:?} at p50 over the echo");
    report_ratio(
        "classify_added_us_p50",
        added.as_secs_f64() * 1e6,
        Goal::AtMost(10.0),
    );

    // The same call with a script the policy has never seen (a different package each time),
    // so the bash parse and analysis run on every call instead of coming from the memo.
    heading("Classify of a first-seen script vs gRPC echo");
    let seq = std::sync::atomic::AtomicUsize::new(0);
    let (echo, fresh) = interleave_async(
        n,
        200,
        || {
            let mut c = health.clone();
            async move {
                c.check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .unwrap();
            }
        },
        || {
            let i = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut r = req.clone();
            if let Some(call) = r.call.as_mut() {
                call.script = Some(format!(
                    "git status && cargo test -p foo{i} 2>&1 | tail -n 20"
                ));
            }
            let mut c = policy.clone();
            async move {
                c.classify(r).await.unwrap();
            }
        },
    )
    .await;
    print_side("gRPC echo (health Check)", &echo);
    print_side("Classify, first-seen script", &fresh);
    let added = fresh.p50().saturating_sub(echo.p50());
    println!("  Classify of a first-seen script adds {added:?} at p50 over the echo");
    report_ratio(
        "classify_first_seen_added_us_p50",
        added.as_secs_f64() * 1e6,
        Goal::AtMost(10.0),
    );
}

async fn run_true_vs_spawn(
    n: usize,
    ch: Channel,
    runner: &toolgate_process::Runner,
    ws: &std::path::Path,
) {
    let process = ProcessServiceClient::with_interceptor(ch, bearer());
    heading("Run([\"/bin/true\"]) round trip vs raw spawn+wait with the same isolation");
    let raw_side = || async {
        let cwd = std::fs::File::open(ws).unwrap().into();
        let mut child = runner.spawn_baseline(&["/bin/true"], cwd, false).unwrap();
        child.wait().unwrap();
    };
    let grpc_side = || {
        let mut c = process.clone();
        async move {
            run_to_end(&mut c, argv(&["/bin/true"])).await;
        }
    };
    let (raw, run) = interleave_async(n, 100, raw_side, grpc_side).await;
    print_side("raw spawn+wait /bin/true (same isolation)", &raw);
    print_side("executor Run(/bin/true) over gRPC", &run);
    print_cpu(
        "run",
        "`/bin/true`",
        "the raw spawn's caller or the gRPC client",
        &[
            ("raw", cpu_of(n / 4, raw_side).await),
            ("gRPC", cpu_of(n / 4, grpc_side).await),
        ],
        raw.p50(),
    );
    report_ratio(
        "run_true_p50",
        ratio(run.p50(), raw.p50()),
        Goal::AtMost(1.35),
    );
}

/// The CPU `side` spends per call, by who spends it, over `n` calls in a row (after the
/// timed comparison: reading the counters costs more than a short call, so it is never inside
/// a timed sample).
async fn cpu_of<F, Fut>(n: usize, mut side: F) -> Cpu
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let n = n.max(1);
    let at = Cpu::now();
    for _ in 0..n {
        side().await;
    }
    let now = Cpu::now();
    let server = now.server - at.server;
    let per = |s: f64| s / n as f64;
    Cpu {
        command: per(now.command - at.command),
        server: per(server),
        client: per(now.client - at.client - server),
    }
}

/// Prints the CPU each side of a comparison spends per call, by who spends it, and the least
/// time the scenario side's CPU needs on this machine's cores: when the child, the executor
/// and the client share few cores, a ratio can be bound by CPU rather than by anything the
/// executor waits for.
fn print_cpu(unit: &str, command: &str, reader: &str, sides: &[(&str, Cpu)], base_p50: Duration) {
    let [(base_name, _), .., (name, scenario)] = sides else {
        return;
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let us = |s: f64| s * 1e6;
    println!("  CPU per {unit} (mean, µs; the command is {command}, the reader {reader}):");
    for (side, cpu) in sides {
        println!(
            "    {side:<5} command {:>9.1}  executor {:>9.1}  reader {:>9.1}  total {:>9.1}",
            us(cpu.command),
            us(cpu.server),
            us(cpu.client),
            us(cpu.total())
        );
    }
    let least = Duration::from_secs_f64(scenario.total() / cores as f64);
    println!(
        "  on {cores} cores the {name} side's CPU alone takes at least {least:.1?} per {unit}: {:.3} × the {base_name} p50",
        ratio(least, base_p50)
    );
}

async fn stream_vs_pipe(ch: Channel, runner: &toolgate_process::Runner, ws: &std::path::Path) {
    let process = ProcessServiceClient::with_interceptor(ch, bearer());
    let bytes: u64 = 64 << 20;
    let cmd = format!("head -c {bytes} /dev/zero");
    heading("stream a child's stdout to a gRPC client vs a raw pipe read (64 MiB)");
    let rounds = sample_count(2_000).clamp(5, 20);
    // The child both baselines read: bash running head, with stdout on a pipe.
    let head = || {
        let cwd = std::fs::File::open(ws).unwrap().into();
        let mut child = runner
            .spawn_baseline(&["bash", "--noprofile", "--norc", "-c", &cmd], cwd, true)
            .unwrap();
        let out = child.stdout.take().unwrap();
        (child, out)
    };
    let pipe_side = || async {
        // The same child (bash running head), the same isolation and pipe size as a run,
        // read by a plain loop with the executor's chunk size.
        let (mut child, mut out) = head();
        let total = drain(&mut out, |_| {});
        child.wait().unwrap();
        assert_eq!(total, bytes);
    };
    let grpc_side = || {
        let mut c = process.clone();
        let mut req = script(&cmd);
        req.limits = Some(ex::OutputLimits {
            stdout_cap_bytes: bytes,
            ..Default::default()
        });
        async move {
            let got = run_to_end(&mut c, req).await;
            assert_eq!(got, bytes);
        }
    };
    // What any transport over loopback TCP costs before gRPC does anything: the same child's
    // pipe copied by a plain thread into a TCP connection, which a plain loop reads.
    let tcp_side = || async {
        let (mut child, mut out) = head();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut reader = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut writer, _) = listener.accept().unwrap();
        let relay = std::thread::spawn(move || {
            drain(&mut out, |chunk| {
                std::io::Write::write_all(&mut writer, chunk).unwrap();
            })
        });
        let total = drain(&mut reader, |_| {});
        assert_eq!(relay.join().unwrap(), bytes);
        child.wait().unwrap();
        assert_eq!(total, bytes);
    };
    let (pipe, grpc) = interleave_async(rounds, 1, pipe_side, grpc_side).await;
    let (pipe_again, tcp) = interleave_async(rounds, 1, pipe_side, tcp_side).await;
    print_side("raw pipe read", &pipe);
    print_side("executor Run streamed over gRPC", &grpc);
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "  throughput p50: raw {:.0} MiB/s, gRPC {:.0} MiB/s",
        mib / pipe.p50().as_secs_f64(),
        mib / grpc.p50().as_secs_f64()
    );
    print_side("raw pipe read, again", &pipe_again);
    print_side("the pipe relayed over loopback TCP", &tcp);
    println!(
        "  loopback TCP alone, without gRPC: {:.3} × the raw pipe's throughput (no transport over TCP does better here)",
        ratio(pipe_again.p50(), tcp.p50())
    );
    print_cpu(
        "64 MiB",
        "`head`",
        "the read loop (for TCP with its relay thread) or the gRPC client",
        &[
            ("raw", cpu_of(rounds, pipe_side).await),
            ("TCP", cpu_of(rounds, tcp_side).await),
            ("gRPC", cpu_of(rounds, grpc_side).await),
        ],
        pipe.p50(),
    );
    report_ratio(
        "stream_throughput_p50",
        ratio(pipe.p50(), grpc.p50()),
        Goal::AtLeast(0.8),
    );
}

/// CPU seconds by who spent them: the command (the children this process waited for), the
/// executor (the server runtime's threads) and the reader (the rest of this process: the
/// client runtime, where both sides' reading loops run).
#[derive(Default)]
struct Cpu {
    command: f64,
    server: f64,
    client: f64,
}

impl Cpu {
    /// The counters now; `client` holds the whole process's own time.
    fn now() -> Cpu {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
        let [user, system, child_user, child_system] = stat_ticks(&stat);
        let secs = |ticks: u64| ticks as f64 * TICK.as_secs_f64();
        Cpu {
            command: secs(child_user + child_system),
            server: runtime_cpu("server"),
            client: secs(user + system),
        }
    }

    fn total(&self) -> f64 {
        self.command + self.server + self.client
    }
}

/// Reads `from` to its end in chunks of the executor's size, handing each to `chunk`, and
/// returns the bytes read.
fn drain(from: &mut impl Read, mut chunk: impl FnMut(&[u8])) -> u64 {
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0u64;
    loop {
        let k = from.read(&mut buf).unwrap();
        if k == 0 {
            return total;
        }
        chunk(&buf[..k]);
        total += k as u64;
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

async fn connect(addr: String) -> Channel {
    toolgate_runtime::grpc::endpoint(format!("http://{addr}"))
        .expect("valid uri")
        .connect()
        .await
        .expect("connect")
}

fn ctx() -> Option<CallContext> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    Some(CallContext {
        call_id: format!(
            "bench-{}",
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ),
        session_id: "bench".into(),
        ..Default::default()
    })
}

fn argv(a: &[&str]) -> ex::RunRequest {
    ex::RunRequest {
        context: ctx(),
        command: Some(ex::run_request::Command::Argv(ex::Argv {
            args: a.iter().map(|s| (*s).to_owned()).collect(),
        })),
        ..Default::default()
    }
}

fn script(s: &str) -> ex::RunRequest {
    ex::RunRequest {
        context: ctx(),
        command: Some(ex::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

/// Runs the call to its end (the trailers after the final event, where a client's call
/// completes) and returns the stdout bytes received.
async fn run_to_end<T>(client: &mut ProcessServiceClient<T>, req: ex::RunRequest) -> u64
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut stream = client.run(req).await.unwrap().into_inner();
    let mut got = 0u64;
    while let Some(m) = stream.message().await.unwrap() {
        if let Some(ex::run_response::Event::Output(o)) = m.event {
            got += o.data.len() as u64;
        }
    }
    got
}
