//! gRPC-level benchmarks against the real services on loopback, each interleaved with a gRPC
//! echo (the health `Check` of the same server: a unary round trip that does no work).
//!
//! - `Classify` round trip vs echo: the policy must add at most 10 µs (issue 4).
//! - `Run(["/bin/true"])` through the executor vs a raw spawn+wait of `/bin/true` with the
//!   same isolation (issue 3, goal p50 ≤ 1.35×); printed with the echo for context.
//! - Streaming a child's stdout to a gRPC client vs a raw pipe read (goal ≥ 0.8×).
//!
//! `cargo run --release -p toolgate-bench --bin grpc`

use std::io::Read;
use std::time::Duration;

use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolgate_bench::{Goal, heading, interleave, print_side, report_ratio, sample_count};
use toolgate_contracts::common::v1::{CallContext, ToolKind};
use toolgate_contracts::executor::v1 as ex;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let n = sample_count(2_000);
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();

    // Policy service, in this process, over real loopback gRPC.
    let policy_addr = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let cfg = toolgate_policy::Config::default();
        tokio::spawn(toolgate_policy::serve(cfg, l, shutdown.clone()));
        addr
    });
    let policy_ch = rt.block_on(connect(policy_addr.to_string()));
    let mut health = HealthClient::new(policy_ch.clone());
    let mut policy = PolicyServiceClient::new(policy_ch);
    let req = pb::ClassifyRequest {
        call: Some(pb::ToolCall {
            tool: ToolKind::ProcessRun as i32,
            script: Some("git status && cargo test -p foo 2>&1 | tail -n 20".into()),
            ..Default::default()
        }),
        session_id: "bench".into(),
        principal: "agent".into(),
        ..Default::default()
    };
    heading("Classify round trip vs gRPC echo (policy service, loopback)");
    let (echo, classify) = interleave(
        n,
        200,
        || {
            rt.block_on(health.check(HealthCheckRequest {
                service: String::new(),
            }))
            .unwrap();
        },
        || {
            rt.block_on(policy.classify(req.clone())).unwrap();
        },
    );
    print_side("gRPC echo (health Check)", &echo);
    print_side("Classify", &classify);
    let added = classify.p50().saturating_sub(echo.p50());
    println!("  Classify adds {added:?} at p50 over the echo");
    report_ratio(
        "classify_added_us_p50",
        added.as_secs_f64() * 1e6,
        Goal::AtMost(10.0),
    );

    // Executor on a temp workspace.
    let ws = tempfile::tempdir().unwrap();
    let exec_addr = rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut cfg = toolgate_executor::Config::default();
        cfg.workspace.root = ws.path().to_path_buf();
        cfg.log.filter = "warn".into();
        tokio::spawn(toolgate_executor::serve(cfg, l, shutdown.clone()));
        addr
    });
    let exec_ch = rt.block_on(connect(exec_addr.to_string()));
    let mut process = ProcessServiceClient::new(exec_ch);
    let runner = toolgate_process::Runner::new(toolgate_process::Config::default()).unwrap();
    let cwd = || std::fs::File::open(ws.path()).unwrap().into();
    heading("Run([\"/bin/true\"]) round trip vs raw spawn+wait with the same isolation");
    let (raw, run) = interleave(
        n,
        100,
        || {
            let mut child = runner
                .spawn_baseline(&["/bin/true"], cwd(), std::process::Stdio::null())
                .unwrap();
            child.wait().unwrap();
        },
        || {
            rt.block_on(run_to_end(&mut process, argv(&["/bin/true"])));
        },
    );
    print_side("raw spawn+wait /bin/true (same isolation)", &raw);
    print_side("executor Run(/bin/true) over gRPC", &run);
    report_ratio(
        "run_true_p50",
        ratio(run.p50(), raw.p50()),
        Goal::AtMost(1.35),
    );

    heading("stream a child's stdout to a gRPC client vs a raw pipe read (64 MiB)");
    let bytes: u64 = 64 << 20;
    let cmd = format!("head -c {bytes} /dev/zero");
    let rounds = sample_count(2_000).clamp(5, 20);
    let (pipe, grpc) = interleave(
        rounds,
        1,
        || {
            let mut child = std::process::Command::new("sh")
                .args(["-c", &cmd])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = child.stdout.take().unwrap();
            let mut buf = vec![0u8; 64 << 10];
            let mut total = 0u64;
            loop {
                let k = out.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                total += k as u64;
            }
            child.wait().unwrap();
            assert_eq!(total, bytes);
        },
        || {
            let mut req = script(&cmd);
            req.limits = Some(ex::OutputLimits {
                stdout_cap_bytes: bytes,
                ..Default::default()
            });
            let got = rt.block_on(run_to_end(&mut process, req));
            assert_eq!(got, bytes);
        },
    );
    print_side("raw pipe read", &pipe);
    print_side("executor Run streamed over gRPC", &grpc);
    let mib = bytes as f64 / (1 << 20) as f64;
    println!(
        "  throughput p50: raw {:.0} MiB/s, gRPC {:.0} MiB/s",
        mib / pipe.p50().as_secs_f64(),
        mib / grpc.p50().as_secs_f64()
    );
    report_ratio(
        "stream_throughput_p50",
        ratio(pipe.p50(), grpc.p50()),
        Goal::AtLeast(0.8),
    );
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

async fn connect(addr: String) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
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

/// Runs to the final event and returns the stdout bytes received.
async fn run_to_end(client: &mut ProcessServiceClient<Channel>, req: ex::RunRequest) -> u64 {
    let mut stream = client.run(req).await.unwrap().into_inner();
    let mut got = 0u64;
    while let Some(m) = stream.message().await.unwrap() {
        match m.event {
            Some(ex::run_response::Event::Output(o)) => got += o.data.len() as u64,
            Some(ex::run_response::Event::Exited(_)) => break,
            _ => {}
        }
    }
    got
}
