//! Ledger benchmarks against same-run Postgres baselines, in a fresh database.
//!
//! 1. Durable decision insert p99 vs a plain single-row INSERT commit p99 (goal ≤ 1.3×).
//! 2. Authorize-shaped decision throughput with 64 concurrent writers (goal ≥ 20 000/s), next
//!    to plain single-row INSERT commits and to the ledger committing one batch at a time
//!    (`commit_pipeline = 1`), all in the same run.
//! 3. Approval wake-up after a decision vs a bare NOTIFY ping-pong, with 1, 100 and
//!    1 000 concurrent waiters (goal ≤ 0.35× each, p50 and p99: the brief's, flat from 1 to 1 000).
//!
//! Postgres comes from `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`);
//! the benchmark creates its own database and drops it at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{Connection, PgPool};
use toolgate_bench::{Goal, Samples, heading, interleave, print_side, report_ratio, sample_count};
use toolgate_core::{Tier, ToolKind};
use toolgate_ledger::testing::FreshPg;
use toolgate_ledger::*;

fn digest(n: u64) -> RequestDigest {
    let mut b = [0u8; 32];
    b[..8].copy_from_slice(&n.to_be_bytes());
    b[8] = 0xab;
    RequestDigest::from_bytes(b)
}

/// A decision shaped like an Authorize of a short shell command.
fn decision(call: &str, n: u64, tier: Tier) -> NewDecision {
    NewDecision {
        call_id: CallId::try_from(call).unwrap(),
        session_id: SessionId::try_from("bench-session").unwrap(),
        principal: Principal::try_from("agent:bench").unwrap(),
        tool: ToolKind::ProcessRun,
        digest: digest(n),
        request_json: format!(
            r#"{{"argv":["cargo","test","-p","crate{n}"],"cwd":".","env":{{}},"limits":{{"timeout_ms":60000}},"sandbox":"workspace-write"}}"#
        ),
        tier,
        rule_ids: vec![RuleId::try_from("shell.cargo").unwrap()],
        policy_version: PolicyVersion::try_from("v1").unwrap(),
        trace_id: Some(TraceId::try_from("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()),
        executor: Some(Principal::try_from("executor-bench").unwrap()),
        executor_reported: Some(r#"{"pod":"executor-bench-pod"}"#.to_owned()),
        lease: None,
    }
}

fn ask_request(call: &str, n: u64) -> AskRequest {
    AskRequest {
        decision: decision(call, n, Tier::Ask),
        explanation_json: r#"{"commands":[{"argv":["rm","-rf","build"],"tier":"ask"}]}"#.to_owned(),
        pending_ttl: None,
    }
}

async fn plain_insert(pool: &PgPool, n: u64) {
    sqlx::query("INSERT INTO bench_plain (call_id, payload) VALUES ($1, $2)")
        .bind(format!("plain-{n}"))
        .bind("x".repeat(200))
        .execute(pool)
        .await
        .unwrap();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // sqlx's pooled connections and listeners must be dropped inside a runtime.
    let _enter = rt.enter();
    let db = FreshPg::create("tg_bench_ledger");
    let url = db.url().to_owned();
    let pool = rt
        .block_on(PgPoolOptions::new().max_connections(32).connect(&url))
        .unwrap();
    rt.block_on(
        sqlx::raw_sql(
            "CREATE TABLE bench_plain (id BIGSERIAL PRIMARY KEY, call_id TEXT NOT NULL UNIQUE, payload TEXT NOT NULL)",
        )
        .execute(&pool),
    )
    .unwrap();
    let mut config = LedgerConfig::new(url.clone());
    config.max_connections = 32;
    let ledger = Arc::new(rt.block_on(SqlLedger::connect(config.clone())).unwrap());
    let mut all_met = true;

    // ------------------------------------------------------------------ 1. latency
    heading("ledger: durable decision insert vs plain single-row INSERT commit (same server)");
    let n = sample_count(2000);
    let mut i = 0u64;
    let mut j = 0u64;
    let (base, scen) = interleave(
        n,
        200,
        || {
            i += 1;
            rt.block_on(plain_insert(&pool, i));
        },
        || {
            j += 1;
            let r = rt
                .block_on(ledger.record_decision(decision(&format!("lat-{j}"), j, Tier::Auto)))
                .unwrap();
            assert!(!r.replayed);
        },
    );
    print_side("plain INSERT commit", &base);
    print_side("ledger record_decision (chained, durable)", &scen);
    println!(
        "  (context) p50 ratio = {:.3}",
        scen.p50().as_secs_f64() / base.p50().as_secs_f64()
    );
    all_met &= report_ratio(
        "ledger_decision_p99_vs_insert_p99",
        scen.p99().as_secs_f64() / base.p99().as_secs_f64(),
        Goal::AtMost(1.3),
    );

    // ------------------------------------------------------------------ 2. throughput
    heading("ledger: Authorize-shaped decision throughput, 64 concurrent writers (group commit)");
    let total = sample_count(2000) * 10;
    let writers = 64;
    let rate = |f: &(
                     dyn Fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
                         + Sync
                 )| {
        let next = AtomicUsize::new(0);
        let start = Instant::now();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for _ in 0..writers {
                tasks.push(async {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= total {
                            break;
                        }
                        f(k as u64).await;
                    }
                });
            }
            futures_join_all(tasks).await;
        });
        total as f64 / start.elapsed().as_secs_f64()
    };
    let pool2 = pool.clone();
    let plain_rate = rate(&move |k| {
        let pool = pool2.clone();
        Box::pin(async move { plain_insert(&pool, 1_000_000 + k).await })
    });
    let serial = Arc::new(
        rt.block_on(SqlLedger::connect(LedgerConfig {
            commit_pipeline: 1,
            ..config.clone()
        }))
        .unwrap(),
    );
    let s2 = serial.clone();
    let serial_rate = rate(&move |k| {
        let l = s2.clone();
        Box::pin(async move {
            l.record_decision(decision(&format!("tp1-{k}"), k, Tier::Auto))
                .await
                .unwrap();
        })
    });
    rt.block_on(serial.close());
    drop(serial);
    let l2 = ledger.clone();
    let ledger_rate = rate(&move |k| {
        let l = l2.clone();
        Box::pin(async move {
            l.record_decision(decision(&format!("tp-{k}"), k, Tier::Auto))
                .await
                .unwrap();
        })
    });
    println!("  plain single-row INSERT commits, {writers} writers: {plain_rate:>10.0} /s");
    println!(
        "  ledger decisions, one commit in flight (commit_pipeline = 1), {writers} writers: {serial_rate:>10.0} /s"
    );
    println!("  ledger decisions (durable, chained), {writers} writers: {ledger_rate:>10.0} /s");
    println!(
        "  (context) ledger / plain INSERT commits = {:.2}, ledger / one commit in flight = {:.2}",
        ledger_rate / plain_rate,
        ledger_rate / serial_rate
    );
    all_met &= report_ratio(
        "ledger_decisions_per_s_vs_20000",
        ledger_rate / 20_000.0,
        Goal::AtLeast(1.0),
    );
    let v = rt.block_on(ledger.verify()).unwrap();
    assert!(v.broken.is_none(), "chain broken after the load: {v:?}");
    println!("  audit chain verified: {} events", v.events);

    // ------------------------------------------------------------------ 3. wake-ups
    // Replica A waits, replica B decides: the wake-up crosses processes' worth of
    // machinery (B's commit → NOTIFY → A's single listener → in-memory fan-out → waiter).
    let replica_b = rt.block_on(SqlLedger::connect(config)).unwrap();
    let (ping, responder) = rt.block_on(ping_pong_setup(&url));
    let mut made = 0u64;
    let mut background = Vec::new();
    for waiters in [1usize, 100, 1000] {
        heading(&format!(
            "ledger: approval wake-up after a decision, {waiters} concurrent waiters"
        ));
        // Keep waiters-1 others parked on their own approvals for the whole measurement.
        while background.len() + 1 < waiters {
            made += 1;
            let out = rt
                .block_on(ledger.ask(ask_request(&format!("bg-{made}"), 10_000_000 + made)))
                .unwrap();
            let l = ledger.clone();
            background.push(rt.spawn(async move {
                let _ = l
                    .wait_for_decision(out.approval.id, Duration::from_secs(3600))
                    .await;
            }));
        }
        let n = sample_count(2000).min(if waiters >= 1000 { 1000 } else { 2000 });
        let (mut base, mut scen) = (Samples::default(), Samples::default());
        let mut whole = Samples::default();
        for s in 0..n {
            made += 1;
            let out = rt
                .block_on(ledger.ask(ask_request(&format!("w-{made}"), 20_000_000 + made)))
                .unwrap();
            let sample = || {
                rt.block_on(async {
                    let l = ledger.clone();
                    let id = out.approval.id.clone();
                    let waiter = tokio::spawn(async move {
                        let a = l
                            .wait_for_decision(id, Duration::from_secs(30))
                            .await
                            .unwrap();
                        (Instant::now(), a.state)
                    });
                    // Decide only once the waiter has read `pending` and parked.
                    while ledger.waiting() < waiters {
                        tokio::task::yield_now().await;
                    }
                    let asked = Instant::now();
                    replica_b
                        .decide(
                            out.approval.id.clone(),
                            Decide {
                                approver: Principal::try_from("approver:bench").unwrap(),
                                verdict: Verdict::Approve {
                                    widen_to_session: false,
                                },
                                reason: None,
                                message: None,
                                ttl: None,
                            },
                        )
                        .await
                        .unwrap();
                    let decided = Instant::now();
                    let (woke, state) = waiter.await.unwrap();
                    assert_eq!(state, ApprovalState::Approved);
                    (
                        woke.saturating_duration_since(decided),
                        woke.saturating_duration_since(asked),
                    )
                })
            };
            let pp = || rt.block_on(ping(&pool));
            let mut record = |(wake, total): (Duration, Duration)| {
                scen.push(wake);
                whole.push(total);
            };
            if s % 2 == 0 {
                base.push(pp());
                record(sample());
            } else {
                record(sample());
                base.push(pp());
            }
        }
        print_side("NOTIFY ping-pong (round trip)", &base);
        print_side("decision commit -> waiter holds the approval", &scen);
        print_side("(context) decide() call start -> waiter woke", &whole);
        all_met &= report_ratio(
            &format!("ledger_wakeup_p50_vs_notify_pingpong_{waiters}_waiters"),
            scen.p50().as_secs_f64() / base.p50().as_secs_f64(),
            Goal::AtMost(0.35),
        );
        all_met &= report_ratio(
            &format!("ledger_wakeup_p99_vs_notify_pingpong_{waiters}_waiters"),
            scen.p99().as_secs_f64() / base.p99().as_secs_f64(),
            Goal::AtMost(0.35),
        );
    }
    for b in background {
        b.abort();
    }
    responder.abort();
    drop(replica_b);
    drop(ledger);
    rt.block_on(pool.close());
    drop(db);
    println!(
        "\nledger goals {}",
        if all_met { "all MET" } else { "not all met" }
    );
}

async fn futures_join_all<F: std::future::Future<Output = ()>>(tasks: Vec<F>) {
    // Plain sequential awaiting would serialise the writers; poll them together.
    let mut set = Vec::new();
    for t in tasks {
        set.push(Box::pin(t));
    }
    let mut remaining: Vec<_> = set.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in remaining.iter_mut() {
            if let Some(f) = slot {
                if f.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    pending = true;
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
}

type Ping =
    Box<dyn Fn(&PgPool) -> std::pin::Pin<Box<dyn std::future::Future<Output = Duration> + '_>>>;

/// A bare NOTIFY ping-pong: NOTIFY ping from the pool, a responder on its own
/// connection answers NOTIFY pong, and a listener here receives it.
async fn ping_pong_setup(url: &str) -> (Ping, tokio::task::JoinHandle<()>) {
    let mut responder = PgListener::connect(url).await.unwrap();
    responder.listen("bench_ping").await.unwrap();
    let mut answer = sqlx::PgConnection::connect(url).await.unwrap();
    let task = tokio::spawn(async move {
        while let Ok(n) = responder.recv().await {
            sqlx::query("SELECT pg_notify('bench_pong', $1)")
                .bind(n.payload().to_owned())
                .execute(&mut answer)
                .await
                .unwrap();
        }
    });
    let listener = Arc::new(tokio::sync::Mutex::new({
        let mut l = PgListener::connect(url).await.unwrap();
        l.listen("bench_pong").await.unwrap();
        l
    }));
    let ping: Ping = Box::new(move |pool: &PgPool| {
        let listener = listener.clone();
        Box::pin(async move {
            let mut l = listener.lock().await;
            let t = Instant::now();
            sqlx::query("SELECT pg_notify('bench_ping', 'p')")
                .execute(pool)
                .await
                .unwrap();
            l.recv().await.unwrap();
            t.elapsed()
        })
    });
    (ping, task)
}
