//! Parked calls end to end (issue 31): 1 000 `WriteFile` calls parked on approvals in a real
//! executor, which waits on a real policy service over gRPC, whose ledger is Postgres (waiters
//! wake through its one LISTEN connection). While they wait, one probe caller keeps calling
//! `StatPath`; then an approver decides the approvals one at a time and each parked call is
//! timed from its decision to its answer.
//!
//! Printed, interleaved in the same run: a bare NOTIFY ping-pong (the brief's wake-up
//! baseline) before each decision, and the probe with nothing parked before the calls park.
//! A parked call's answer is more than a wake-up (after the decision the executor authorizes
//! the call again, which consumes the approval in the ledger, then writes the file), so its
//! ratios are context, not the brief's goal: the ledger's own wake-up is `--bin ledger`.
//!
//! `TOOLGATE_BENCH_PARKED` sets how many calls park (default 1 000).
//! `cargo run --release -p toolgate-bench --bin parked`

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::postgres::PgListener;
use tonic::transport::Channel;
use toolgate_bench::{
    Samples, heading, print_side, runtime, sample_count, serve_executor, serve_policy, tokens,
};
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1 as ex;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::policy::v1 as pp;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
use toolgate_ledger::testing::FreshPg;
use toolgate_runtime::auth::{Bearer, Role};

const AGENT_TOKEN: &str = "bench-agent-token-0123456789abcdef";
const EXECUTOR_TOKEN: &str = "bench-executor-token-0123456789abcdef";
const APPROVER_TOKEN: &str = "bench-approver-token-0123456789abcdef";

/// Writes under `deploy/` ask a human; everything else is auto.
const POLICY: &str = r#"
default = "auto"

[[rule]]
id = "deploy-needs-human"
decision = "ask"
reason = "deploy/ is what production runs"
paths = ["deploy/**"]
"#;

/// Calls per client connection to the executor (its stream limit is 128).
const PER_CHANNEL: usize = 100;

fn main() {
    let parked: usize = std::env::var("TOOLGATE_BENCH_PARKED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let probes = sample_count(2_000);
    let server_rt = runtime("server");
    let client_rt = runtime("client");
    let (_trigger, shutdown) = toolgate_runtime::shutdown::channel();
    let dir = tempfile::tempdir().expect("temp dir");
    let ws = tempfile::tempdir().expect("temp workspace");
    let db = FreshPg::create("tg_bench_parked");
    let policy_file = dir.path().join("policy.toml");
    std::fs::write(&policy_file, POLICY).expect("write the policy");

    let policy_addr = server_rt.block_on({
        let mut cfg = toolgate_policy::Config::default();
        cfg.log.filter = "warn".into();
        cfg.policy_file = Some(policy_file);
        cfg.ledger.url = Some(db.url().to_owned());
        cfg.auth = tokens(&[
            ("bench-agent", Role::Agent, AGENT_TOKEN),
            ("bench-executor", Role::Executor, EXECUTOR_TOKEN),
            ("bench-approver", Role::Approver, APPROVER_TOKEN),
        ]);
        serve_policy(cfg, shutdown.clone())
    });
    let exec_addr = server_rt.block_on({
        let mut cfg = toolgate_executor::Config::default();
        cfg.workspace.root = ws.path().to_path_buf();
        cfg.log.filter = "warn".into();
        cfg.policy.endpoint = format!("http://{policy_addr}");
        cfg.policy.token = Some(EXECUTOR_TOKEN.into());
        cfg.auth = tokens(&[("bench-agent", Role::Agent, AGENT_TOKEN)]);
        serve_executor(cfg, shutdown)
    });

    let url = db.url().to_owned();
    let ws_path = ws.path().to_path_buf();
    let bench = async move {
        let probe_ch = connect(exec_addr).await;
        let mut probe = FilesystemServiceClient::with_interceptor(probe_ch, bearer(AGENT_TOKEN));
        let mut approvals = ApprovalServiceClient::with_interceptor(
            connect(policy_addr).await,
            bearer(APPROVER_TOKEN),
        );
        let mut ping = PingPong::start(&url).await;

        heading(&format!(
            "parked calls: {parked} WriteFile calls waiting on approvals, one probe caller"
        ));
        // The probe with nothing parked, and the ping-pong, before anything parks.
        let mut idle = Samples::default();
        for i in 0..probes + 100 {
            let t = Instant::now();
            stat(&mut probe).await;
            if i >= 100 {
                idle.push(t.elapsed());
            }
        }

        let mut watch = approvals
            .watch_approvals(pp::WatchApprovalsRequest {
                states: vec![pp::ApprovalState::Pending as i32],
                ..Default::default()
            })
            .await
            .expect("watch approvals")
            .into_inner();
        let answered: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let mut waiters = tokio::task::JoinSet::new();
        let mut fs = None;
        for i in 0..parked {
            if i % PER_CHANNEL == 0 {
                fs = Some(FilesystemServiceClient::with_interceptor(
                    connect(exec_addr).await,
                    bearer(AGENT_TOKEN),
                ));
            }
            let mut fs = fs.clone().expect("a channel");
            let answered = answered.clone();
            waiters.spawn(async move {
                let answer = fs
                    .write_file(ex::WriteFileRequest {
                        context: Some(CallContext {
                            call_id: format!("parked-{i}"),
                            session_id: "bench".into(),
                            approval_wait: Some(prost_types::Duration {
                                seconds: 600,
                                nanos: 0,
                            }),
                            ..Default::default()
                        }),
                        path: format!("deploy/parked-{i}.txt"),
                        content: b"approved\n".to_vec(),
                        create_parents: true,
                        ..Default::default()
                    })
                    .await;
                let at = Instant::now();
                let answer = answer.unwrap_or_else(|s| panic!("parked call {i}: {s:?}"));
                let id = answer
                    .metadata()
                    .get("toolgate-approval-id")
                    .and_then(|v| v.to_str().ok())
                    .expect("the approval id in the answer")
                    .to_owned();
                answered.lock().unwrap().insert(id, at);
            });
        }
        let mut pending = Vec::new();
        while pending.len() < parked {
            let ev = watch.message().await.unwrap().expect("watch ended");
            if let Some(a) = ev.approval
                && a.state == pp::ApprovalState::Pending as i32
                && !pending.contains(&a.approval_id)
            {
                pending.push(a.approval_id);
            }
        }
        println!("  {parked} calls parked");

        // The probe keeps calling while the calls are parked and while they are decided.
        let stop = Arc::new(AtomicBool::new(false));
        let prober = {
            let stop = stop.clone();
            let mut probe = probe.clone();
            tokio::spawn(async move {
                let mut busy = Samples::default();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    stat(&mut probe).await;
                    busy.push(t.elapsed());
                }
                busy
            })
        };

        let mut base = Samples::default();
        let mut decided = HashMap::new();
        for id in &pending {
            base.push(ping.round_trip().await);
            approvals
                .decide_approval(pp::DecideApprovalRequest {
                    approval_id: id.clone(),
                    verdict: pp::Verdict::Approve as i32,
                    reason: "reviewed".into(),
                    ..Default::default()
                })
                .await
                .expect("decide");
            decided.insert(id.clone(), Instant::now());
        }
        while let Some(r) = waiters.join_next().await {
            r.expect("parked call");
        }
        stop.store(true, Ordering::Relaxed);
        let busy = prober.await.expect("probe");
        let answered = answered.lock().unwrap();
        let mut wake = Samples::default();
        for id in &pending {
            let at = answered
                .get(id)
                .unwrap_or_else(|| panic!("{id} never answered"));
            wake.push(at.saturating_duration_since(decided[id]));
        }
        for i in 0..parked {
            assert_eq!(
                std::fs::read(ws_path.join(format!("deploy/parked-{i}.txt"))).unwrap(),
                b"approved\n"
            );
        }

        print_side("NOTIFY ping-pong (round trip)", &base);
        print_side("decision answered -> parked call answered", &wake);
        print_side("probe StatPath, nothing parked", &idle);
        print_side(&format!("probe StatPath, {parked} parked/deciding"), &busy);
        let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
        println!(
            "  parked call answered / NOTIFY ping-pong: p50 {:.2}x, p99 {:.2}x (context: includes the consuming Authorize and the write)",
            r(wake.p50(), base.p50()),
            r(wake.p99(), base.p99())
        );
        println!(
            "  probe with {parked} parked / nothing parked: p50 {:.2}x, p99 {:.2}x",
            r(busy.p50(), idle.p50()),
            r(busy.p99(), idle.p99())
        );
    };
    client_rt
        .block_on(client_rt.spawn(bench))
        .expect("benchmark task");
    drop(server_rt);
    drop(db);
}

async fn stat(probe: &mut FilesystemServiceClient<AuthChannel>) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    probe
        .stat_path(ex::StatPathRequest {
            context: Some(CallContext {
                call_id: format!("probe-{}", N.fetch_add(1, Ordering::Relaxed)),
                session_id: "bench".into(),
                ..Default::default()
            }),
            path: ".".into(),
            ..Default::default()
        })
        .await
        .expect("the probe succeeds");
}

type AuthChannel = tonic::codegen::InterceptedService<Channel, Bearer>;

fn bearer(token: &str) -> Bearer {
    Bearer::new(token).expect("ascii token")
}

async fn connect(addr: std::net::SocketAddr) -> Channel {
    toolgate_runtime::transport::Dial::new(&format!("http://{addr}"), Some(addr), None)
        .expect("valid uri")
        .connect()
        .await
        .expect("connect")
}

/// A bare NOTIFY ping-pong: NOTIFY ping, a responder on its own connection answers NOTIFY
/// pong, and a listener here receives it.
struct PingPong {
    send: sqlx::PgConnection,
    listener: PgListener,
}

impl PingPong {
    async fn start(url: &str) -> PingPong {
        use sqlx::Connection;
        let mut responder = PgListener::connect(url).await.unwrap();
        responder.listen("bench_ping").await.unwrap();
        let mut answer = sqlx::PgConnection::connect(url).await.unwrap();
        tokio::spawn(async move {
            while let Ok(n) = responder.recv().await {
                sqlx::query("SELECT pg_notify('bench_pong', $1)")
                    .bind(n.payload().to_owned())
                    .execute(&mut answer)
                    .await
                    .unwrap();
            }
        });
        let mut listener = PgListener::connect(url).await.unwrap();
        listener.listen("bench_pong").await.unwrap();
        PingPong {
            send: sqlx::PgConnection::connect(url).await.unwrap(),
            listener,
        }
    }

    async fn round_trip(&mut self) -> Duration {
        let t = Instant::now();
        sqlx::query("SELECT pg_notify('bench_ping', 'p')")
            .execute(&mut self.send)
            .await
            .unwrap();
        self.listener.recv().await.unwrap();
        t.elapsed()
    }
}
