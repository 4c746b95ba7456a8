//! Crash safety on a private, throwaway Postgres cluster: stop it with `-m immediate`
//! in the middle of consumes, restart it, and check that every consume and its audit
//! record either both exist or both do not, and that nothing was consumed twice.
//!
//! The machine's shared Postgres is never touched.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{approve, ask};
use sqlx::{Connection, Row};
use toolgate_core::Tier;
use toolgate_ledger::testing::PrivatePg;
use toolgate_ledger::*;

fn config(url: &str) -> LedgerConfig {
    let mut c = LedgerConfig::new(url);
    // Fail fast while the server is down instead of retrying through the outage.
    c.retry_budget = Duration::from_millis(100);
    c.max_connections = 20;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_and_its_audit_record_survive_immediate_stop_together() {
    let pg = PrivatePg::start();
    let url = pg.url();
    const N: usize = 40;
    let l = Arc::new(SqlLedger::connect(config(&url)).await.unwrap());
    let mut approvals = Vec::new();
    for i in 0..N {
        let out = l
            .ask(ask(&format!("grant{i}"), "s", &format!("job {i}")))
            .await
            .unwrap();
        l.decide(out.approval.id.clone(), approve("bob"))
            .await
            .unwrap();
        approvals.push(out.approval.id);
    }

    // N consumers race the crash; the stop is issued once a quarter of them are acknowledged.
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    let first_tx = Arc::new(std::sync::Mutex::new(Some(first_tx)));
    let acked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..N {
        let l = l.clone();
        let first_tx = first_tx.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let r = l
                .ask(ask(&format!("run{i}"), "s", &format!("job {i}")))
                .await;
            if r.is_ok()
                && acked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= N / 4
                && let Some(tx) = first_tx.lock().unwrap().take()
            {
                let _ = tx.send(());
            }
            r
        }));
    }
    first_rx.await.unwrap();
    // Block only this worker: the consumers keep running on the other one while Postgres dies.
    tokio::task::block_in_place(|| pg.stop_immediate());
    let mut acknowledged = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        if let Ok(out) = t.await.unwrap() {
            assert!(
                matches!(out.verdict, AskVerdict::Allowed { lease: Some(_) }),
                "{:?}",
                out.verdict
            );
            acknowledged.push(i);
        }
    }
    assert!(!acknowledged.is_empty());
    drop(l);

    pg.start_server();
    let l = SqlLedger::connect(config(&url)).await.unwrap();
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut consumed = 0;
    for (i, id) in approvals.iter().enumerate() {
        let a = l.get(id.clone()).await.unwrap();
        let allowed: i64 = sqlx::query(
            "SELECT count(*) FROM tg_decisions WHERE approval_id = $1 AND allowed_at IS NOT NULL",
        )
        .bind(id.as_str())
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
        let events: i64 = sqlx::query(
            "SELECT count(*) FROM tg_audit WHERE subject = $1 AND kind = 'approval.consumed'",
        )
        .bind(id.as_str())
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
        match a.state {
            ApprovalState::Consumed => {
                consumed += 1;
                assert_eq!(
                    (allowed, events),
                    (1, 1),
                    "approval {i}: consume and its record exist once"
                );
                assert_eq!(a.consumed_by_call.unwrap().as_str(), format!("run{i}"));
            }
            ApprovalState::Approved => {
                assert_eq!(
                    (allowed, events),
                    (0, 0),
                    "approval {i}: neither consume nor record"
                );
                assert!(
                    !acknowledged.contains(&i),
                    "an acknowledged consume was lost"
                );
            }
            other => panic!("approval {i} in unexpected state {other}"),
        }
    }
    assert!(consumed >= acknowledged.len());
    eprintln!(
        "crash: {} consumes acknowledged before the stop, {consumed} durable after restart, of {N}",
        acknowledged.len()
    );
    let report = l.verify().await.unwrap();
    assert!(report.broken.is_none(), "{report:?}");

    // The orchestrator resumes every call: one that committed before the crash never runs again.
    let mut runs_after = 0;
    for (i, id) in approvals.iter().enumerate() {
        let out = l
            .ask(ask(&format!("run{i}"), "s", &format!("job {i}")))
            .await
            .unwrap();
        match out.verdict {
            AskVerdict::AlreadyRan => {
                assert!(l.get(id.clone()).await.unwrap().consumed_at.is_some());
            }
            AskVerdict::Allowed { .. } => runs_after += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        consumed + runs_after,
        N,
        "every approval consumed exactly once overall"
    );
    for id in &approvals {
        assert_eq!(
            l.get(id.clone()).await.unwrap().state,
            ApprovalState::Consumed
        );
    }
    assert!(l.verify().await.unwrap().broken.is_none());
}

/// While the database is down the ledger reports unhealthy; it recovers by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_database() {
    let pg = PrivatePg::start();
    let l = SqlLedger::connect(config(&pg.url())).await.unwrap();
    l.health().await.unwrap();
    pg.stop_immediate();
    let err = l.health().await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(matches!(
        l.get(ApprovalId::try_from("apr_x").unwrap())
            .await
            .unwrap_err(),
        Error::Unavailable(_)
    ));
    pg.start_server();
    l.health().await.unwrap();
    assert!(matches!(
        l.get(ApprovalId::try_from("apr_x").unwrap())
            .await
            .unwrap_err(),
        Error::ApprovalNotFound { .. }
    ));

    // With a retry budget, an operation started during an outage completes once the
    // server is back: the lost connections are replaced with backoff.
    let mut patient = config(&pg.url());
    patient.retry_budget = Duration::from_secs(60);
    let l = Arc::new(SqlLedger::connect(patient).await.unwrap());
    let out = l.ask(ask("c1", "s", "outage")).await.unwrap();
    pg.stop_immediate();
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let op = {
        let l = l.clone();
        let id = out.approval.id.clone();
        tokio::spawn(async move {
            let _ = started_tx.send(());
            l.decide(id, approve("bob")).await
        })
    };
    started_rx.await.unwrap();
    tokio::task::block_in_place(|| pg.start_server());
    let decided = op
        .await
        .unwrap()
        .expect("decide retried through the outage");
    assert_eq!(decided.state, ApprovalState::Approved);
}

/// Connections idle in the pool when the server restarts are dead. A connection is pinged
/// before its use only once it has been idle for a while (each one is pinged as it goes back
/// to the pool anyway), so after a restart the pool's dead connections are found by that
/// ping and replaced: reads succeed at their first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_after_a_restart_do_not_meet_the_dead_connections() {
    let pg = PrivatePg::start();
    // No retry: the first attempt of each read must find a live connection.
    let mut c = config(&pg.url());
    c.retry_budget = Duration::ZERO;
    let l = Arc::new(SqlLedger::connect(c).await.unwrap());
    let out = l.ask(ask("c1", "s", "restart")).await.unwrap();
    let id = out.approval.id.clone();
    // Several connections in the pool: concurrent reads each take one.
    let read_all = async |l: &Arc<SqlLedger>| {
        let reads: Vec<_> = (0..8)
            .map(|_| {
                let (l, id) = (l.clone(), id.clone());
                tokio::spawn(async move { l.get(id).await })
            })
            .collect();
        for r in reads {
            r.await.unwrap().expect("a read after the restart");
        }
    };
    read_all(&l).await;
    tokio::task::block_in_place(|| {
        pg.stop_immediate();
        pg.start_server();
    });
    // Every pooled connection has now been idle for longer than the ping threshold (the
    // restart alone usually takes that long).
    tokio::time::sleep(Duration::from_millis(600)).await;
    read_all(&l).await;
    read_all(&l).await;
}

/// Group commit under a crash: 64 writers record decisions while Postgres is stopped with
/// `-m immediate`. Every decision a caller was answered for is there after the restart, with
/// its audit event; no decision row is there without its event, and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_decisions_survive_immediate_stop() {
    let pg = PrivatePg::start();
    let url = pg.url();
    let l = Arc::new(SqlLedger::connect(config(&url)).await.unwrap());
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(String, DecisionId)>::new()));
    let (enough_tx, enough_rx) = tokio::sync::oneshot::channel::<()>();
    let enough_tx = Arc::new(std::sync::Mutex::new(Some(enough_tx)));
    let mut writers = Vec::new();
    for w in 0..64 {
        let (l, acked, enough_tx) = (l.clone(), acked.clone(), enough_tx.clone());
        writers.push(tokio::spawn(async move {
            for k in 0.. {
                let call = format!("w{w}-{k}");
                let d = common::new_decision(&call, "s", &format!("job {w} {k}"), Tier::Auto);
                let Ok(r) = l.record_decision(d).await else {
                    return;
                };
                let mut acked = acked.lock().unwrap();
                acked.push((call, r.decision.id));
                if acked.len() >= 300
                    && let Some(tx) = enough_tx.lock().unwrap().take()
                {
                    let _ = tx.send(());
                }
            }
        }));
    }
    enough_rx.await.unwrap();
    tokio::task::block_in_place(|| pg.stop_immediate());
    for w in writers {
        w.await.unwrap();
    }
    drop(l);
    let acked = std::mem::take(&mut *acked.lock().unwrap());

    pg.start_server();
    let l = SqlLedger::connect(config(&url)).await.unwrap();
    for (call, id) in &acked {
        let found = l
            .lookup_call(CallId::try_from(call.as_str()).unwrap())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged decision {call} was lost"));
        assert_eq!(&found.decision.id, id);
    }
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    let (rows, unaudited): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM tg_audit a \
         WHERE a.subject = d.id AND a.kind = 'decision.recorded')) FROM tg_decisions d",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(unaudited, 0, "a decision row without its audit event");
    assert!(rows as usize >= acked.len());
    eprintln!(
        "crash: {} decisions acknowledged before the stop, {rows} durable after restart",
        acked.len()
    );
    let report = l.verify().await.unwrap();
    assert!(report.broken.is_none(), "{report:?}");
}
