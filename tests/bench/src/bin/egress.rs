//! The egress gate (issue 27): what a networked run pays for leaving only through the gate.
//!
//! Goals (brief): HTTPS throughput through the gate ≥ 0.8 × a direct connection, and
//! connection setup adding ≤ 1 ms at p50 for an allowed, already-decided name.
//!
//! The benchmark builds the CLI tests' fake internet (a network namespace with public-looking
//! addresses, a DNS server and an HTTPS server: `services/cli/tests/cli/support/internet.rs`),
//! re-executes itself inside it, and there runs a policy service and an executor in process.
//! Both sides use the same client, curl, against the same server, and take curl's own timings
//! (so the sandbox's start-up is not counted, only the connection):
//! - throughput: `curl https://allowed.test/bytes/<64 MiB>` inside a sandboxed `network` run
//!   (its bytes cross the gate) vs the same curl run directly in the namespace, interleaved;
//!   `speed_download` compared. Each download's CPU time is also printed per party: curl (its
//!   shell's `times`), the HTTPS server (the fake internet's Python process) and this process's
//!   `server` runtime, which runs the executor, and with it the gate's relay, and the policy
//!   service. On a 2-core machine that other work keeps busy, the throughput ratio follows the
//!   ratio of these totals, so they say where a gap comes from;
//! - setup: after one warm-up connection that decides the name, a batch of small GETs in one
//!   run vs the same batch directly; `time_starttransfer` (resolve + connect + TLS handshake +
//!   first byte) compared at p50.
//!
//! Needs root (network namespaces), curl and python3.
//! `cargo run --release -p toolgate-bench --bin egress`; `TOOLGATE_BENCH_SAMPLES` sets the
//! number of downloads (default 10) and of setup batches (20 connections each).

#[allow(dead_code)]
#[path = "../../../../services/cli/tests/cli/support/internet.rs"]
mod internet;

use std::path::Path;
use std::time::Duration;

use tonic::transport::Channel;
use toolgate_bench::{
    Goal, Samples, fmt_duration, heading, print_side, report_ratio, runtime, runtime_cpu,
    sample_count, stat_cpu, tokens,
};
use toolgate_contracts::common::v1::{CallContext, exit_status};
use toolgate_contracts::executor::v1 as ex;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::policy::v1 as pol;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
use toolgate_runtime::auth::{Bearer, Role};

/// Set (to the fake internet's directory) in the copy of this program that runs inside it.
const INSIDE: &str = "TOOLGATE_BENCH_EGRESS_DIR";
/// Set (to the fake internet's server process id) in the same copy.
const SERVERS_PID: &str = "TOOLGATE_BENCH_EGRESS_SERVERS_PID";
const AGENT_TOKEN: &str = "bench-agent-token-0123456789abcdef";
const EXECUTOR_TOKEN: &str = "bench-executor-token-0123456789abcdef";
const APPROVER_TOKEN: &str = "bench-approver-token-0123456789abcdef";
/// One download's size.
const DOWNLOAD_BYTES: u64 = 64 << 20;
/// Connections per setup batch (one run, or one direct shell).
const BATCH: usize = 20;

/// Every connection is allowed; the commands ask (a network client under the `network`
/// profile) and are approved once for the session by the benchmark itself.
const POLICY: &str = r#"
default = "auto"

[[rule]]
id = "connect-anywhere"
decision = "auto"
reason = "the benchmark measures the gate's data path, not its decisions"
tools = ["net.connect"]
"#;

fn main() {
    match std::env::var_os(INSIDE) {
        Some(dir) => inside(Path::new(&dir)),
        None => {
            let inet = internet::Internet::start();
            let exe = std::env::current_exe().expect("this program's path");
            let status = inet
                .command(exe)
                .args(std::env::args_os().skip(1))
                .env(INSIDE, inet.dir())
                .env(
                    SERVERS_PID,
                    inet.servers_pid()
                        .expect("the fake internet's servers")
                        .to_string(),
                )
                .status()
                .expect("run the benchmark inside the fake internet");
            drop(inet);
            std::process::exit(status.code().unwrap_or(1));
        }
    }
}

/// The benchmark proper, inside the fake internet's namespace.
fn inside(dir: &Path) {
    let n = sample_count(10);
    let server_rt = runtime("server");
    let client_rt = runtime("client");
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();
    let state = tempfile::tempdir().expect("temp dir");
    let ws = tempfile::tempdir().expect("temp workspace");
    let ca = ws.path().join("ca.pem");
    std::fs::copy(dir.join("ca.pem"), &ca).expect("copy the CA into the workspace");
    let policy_file = state.path().join("policy.toml");
    std::fs::write(&policy_file, POLICY).expect("write the policy");

    let policy_addr = server_rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut cfg = toolgate_policy::Config::default();
        cfg.log.filter = "warn".into();
        cfg.policy_file = Some(policy_file);
        cfg.ledger.url = Some(format!(
            "sqlite:{}",
            state.path().join("ledger.db").display()
        ));
        cfg.auth = tokens(&[
            ("bench-agent", Role::Agent, AGENT_TOKEN),
            ("bench-executor", Role::Executor, EXECUTOR_TOKEN),
            ("bench-approver", Role::Approver, APPROVER_TOKEN),
        ]);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = toolgate_policy::serve(cfg, l, shutdown).await {
                panic!("policy service: {e}");
            }
        });
        addr
    });
    let exec_addr = server_rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut cfg = toolgate_executor::Config::default();
        cfg.workspace.root = ws.path().to_path_buf();
        cfg.log.filter = "warn".into();
        cfg.policy.endpoint = format!("http://{policy_addr}");
        cfg.policy.token = Some(EXECUTOR_TOKEN.into());
        cfg.auth = tokens(&[("bench-agent", Role::Agent, AGENT_TOKEN)]);
        // The fake internet's resolver (from the namespace's /etc/resolv.conf) is the gate's.
        // `ip netns exec` remounts /sys, so no cgroup may be delegated here; limits are not
        // what this measures (as `toolgate up` on such a machine).
        cfg.process.require_limits = false;
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            if let Err(e) = toolgate_executor::serve(cfg, l, shutdown).await {
                panic!("executor: {e}");
            }
        });
        addr
    });

    let ca = ca.display().to_string();
    client_rt.block_on(async {
        let mut gate = Gate::connect(exec_addr, policy_addr).await;
        throughput(&mut gate, &ca, n).await;
        setup(&mut gate, &ca, n).await;
    });
    drop(server_rt);
}

/// HTTPS download throughput, gate vs direct, and the CPU time each download cost.
async fn throughput(gate: &mut Gate, ca: &str, n: usize) {
    heading(&format!(
        "HTTPS download of {} MiB: through the gate vs direct",
        DOWNLOAD_BYTES >> 20
    ));
    // `times`' second line is the shell's children: curl's user and system time.
    let script = format!(
        "curl -sS -o /dev/null --cacert {ca} -w '%{{speed_download}}\\n' https://allowed.test/bytes/{DOWNLOAD_BYTES}; times"
    );
    let servers: u32 = std::env::var(SERVERS_PID)
        .ok()
        .and_then(|p| p.parse().ok())
        .expect("the servers' process id");
    let (mut direct, mut gated) = (Side::default(), Side::default());
    // One warm-up each: the gate decides the name, the server warms up.
    let _ = (sh(&script), gate.run(&script).await);
    for i in 0..n {
        if i % 2 == 0 {
            direct
                .download(servers, || std::future::ready(sh(&script)))
                .await;
            gated.download(servers, || gate.run(&script)).await;
        } else {
            gated.download(servers, || gate.run(&script)).await;
            direct
                .download(servers, || std::future::ready(sh(&script)))
                .await;
        }
    }
    let (d, g) = (median(direct.speeds), median(gated.speeds));
    println!(
        "  direct  n={n:<4} p50={:>8.1} MiB/s\n  gate    n={n:<4} p50={:>8.1} MiB/s",
        d / f64::from(1 << 20),
        g / f64::from(1 << 20)
    );
    println!("  CPU per download (mean):");
    for (name, cpu) in [("direct", &direct.cpu), ("gate", &gated.cpu)] {
        let ms = |s: f64| s * 1000.0 / n as f64;
        println!(
            "    {name:<7} curl {:>6.1} ms  HTTPS server {:>6.1} ms  executor and policy {:>6.1} ms  total {:>6.1} ms",
            ms(cpu.client),
            ms(cpu.server),
            ms(cpu.executor),
            ms(cpu.total())
        );
    }
    println!(
        "  CPU direct/gate = {:.3} (what the throughput ratio tends to when every core is busy)",
        direct.cpu.total() / gated.cpu.total()
    );
    report_ratio("gate/direct throughput", g / d, Goal::AtLeast(0.8));
}

/// One side's downloads: curl's speeds and the CPU time they cost.
#[derive(Default)]
struct Side {
    speeds: Vec<f64>,
    cpu: Cpu,
}

/// CPU seconds, per party.
#[derive(Default)]
struct Cpu {
    /// curl.
    client: f64,
    /// The HTTPS server.
    server: f64,
    /// This process's `server` runtime: the executor (the gate's relay) and the policy service.
    executor: f64,
}

impl Cpu {
    fn total(&self) -> f64 {
        self.client + self.server + self.executor
    }
}

impl Side {
    /// Runs one download (`run` returns the script's stdout) and records its speed and CPU.
    async fn download<F: std::future::Future<Output = String>>(
        &mut self,
        servers: u32,
        run: impl FnOnce() -> F,
    ) {
        let (server0, executor0) = (process_cpu(servers), runtime_cpu("server"));
        let out = run().await;
        let (server1, executor1) = (process_cpu(servers), runtime_cpu("server"));
        let mut lines = out.lines();
        let speed = lines.next().expect("curl's speed");
        self.speeds.extend(numbers(speed));
        self.cpu.client += children_cpu(lines.last().expect("the output of `times`"));
        self.cpu.server += server1 - server0;
        self.cpu.executor += executor1 - executor0;
    }
}

/// User and system seconds of process `pid`, its ended threads included.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat: {e}"));
    stat_cpu(&stat)
}

/// The seconds in the second line of bash's `times` (`0m0.061s 0m0.020s`: children's user
/// and system time).
fn children_cpu(line: &str) -> f64 {
    line.split_whitespace()
        .map(|t| {
            let (m, s) = t
                .strip_suffix('s')
                .and_then(|t| t.split_once('m'))
                .unwrap_or_else(|| panic!("not a `times` line: {line:?}"));
            m.parse::<f64>().expect("minutes") * 60.0 + s.parse::<f64>().expect("seconds")
        })
        .sum()
}

/// Connection setup to an already-decided name, gate vs direct.
async fn setup(gate: &mut Gate, ca: &str, batches: usize) {
    heading(&format!(
        "connection setup (resolve + connect + TLS + first byte), {batches} batches of {BATCH}"
    ));
    let one = format!(
        "curl -sS -o /dev/null --cacert {ca} -w '%{{time_starttransfer}}\\n' https://allowed.test/"
    );
    // The first connection of each side is the warm-up (the gate's decision); not counted.
    let script = format!("{one} >/dev/null; for i in $(seq {BATCH}); do {one}; done");
    let (mut direct, mut gated) = (Samples::default(), Samples::default());
    for i in 0..batches {
        let (d, g) = if i % 2 == 0 {
            let d = sh(&script);
            (d, gate.run(&script).await)
        } else {
            let g = gate.run(&script).await;
            (sh(&script), g)
        };
        for (side, out) in [(&mut direct, d), (&mut gated, g)] {
            for s in numbers(&out) {
                side.push(Duration::from_secs_f64(s));
            }
        }
    }
    print_side("direct", &direct);
    print_side("through the gate", &gated);
    let added = gated.p50().saturating_sub(direct.p50());
    let met = added <= Duration::from_millis(1);
    println!(
        "  added p50 = {} (goal ≤ 1 ms) {}",
        fmt_duration(added),
        if met { "MET" } else { "MISSED" }
    );
}

/// Runs `script` with bash directly in the namespace; its stdout.
fn sh(script: &str) -> String {
    let o = std::process::Command::new("bash")
        .args(["-c", script])
        .output()
        .expect("run bash");
    assert!(
        o.status.success(),
        "direct `{script}` failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every line of `out` as a number.
fn numbers(out: &str) -> Vec<f64> {
    out.lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {l:?}"))
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty(), "no samples");
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The executor (as the agent) and the approval service (as the approver).
struct Gate {
    process: ProcessServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>,
    approvals:
        ApprovalServiceClient<tonic::service::interceptor::InterceptedService<Channel, Bearer>>,
    calls: u64,
}

impl Gate {
    async fn connect(exec: std::net::SocketAddr, policy: std::net::SocketAddr) -> Gate {
        let channel = |addr: std::net::SocketAddr| async move {
            Channel::from_shared(format!("http://{addr}"))
                .expect("uri")
                .connect()
                .await
                .expect("connect")
        };
        Gate {
            process: ProcessServiceClient::with_interceptor(
                channel(exec).await,
                Bearer::new(AGENT_TOKEN).expect("token"),
            ),
            approvals: ApprovalServiceClient::with_interceptor(
                channel(policy).await,
                Bearer::new(APPROVER_TOKEN).expect("token"),
            ),
            calls: 0,
        }
    }

    /// Runs `script` in a sandboxed `network` run; its stdout. An approval the command needs
    /// is granted for the session, so the next identical run is auto.
    async fn run(&mut self, script: &str) -> String {
        self.calls += 1;
        let req = ex::RunRequest {
            context: Some(CallContext {
                call_id: format!("egress-{}-{}", std::process::id(), self.calls),
                session_id: "bench".into(),
                approval_wait: Some(prost_types::Duration {
                    seconds: 60,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            command: Some(ex::run_request::Command::Script(script.into())),
            sandbox_profile: "network".into(),
            ..Default::default()
        };
        let mut stream = self.process.run(req).await.expect("Run").into_inner();
        let mut stdout = Vec::new();
        while let Some(m) = stream.message().await.expect("Run stream") {
            match m.event {
                Some(ex::run_response::Event::AwaitingApproval(a)) => {
                    self.approvals
                        .decide_approval(pol::DecideApprovalRequest {
                            approval_id: a.approval_id,
                            verdict: pol::Verdict::Approve as i32,
                            scope: pol::ApprovalScope::Session as i32,
                            ..Default::default()
                        })
                        .await
                        .expect("approve");
                }
                Some(ex::run_response::Event::Output(c))
                    if c.stream == ex::Stream::Stdout as i32 =>
                {
                    stdout.extend_from_slice(&c.data);
                }
                Some(ex::run_response::Event::Exited(x)) => {
                    let status = x.status.and_then(|s| s.status);
                    assert!(
                        matches!(status, Some(exit_status::Status::Exited(0))),
                        "`{script}` in a network run: {status:?}, stderr tail {:?}",
                        x.stderr
                            .map(|s| String::from_utf8_lossy(&s.tail).into_owned())
                    );
                    return String::from_utf8_lossy(&stdout).into_owned();
                }
                _ => {}
            }
        }
        panic!("the Run stream ended without an Exited event")
    }
}
