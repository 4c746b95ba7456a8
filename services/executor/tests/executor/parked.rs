//! Calls parked on an approval do not take the executor's capacity to talk to the policy
//! service: hundreds of them wait while other calls go through, and each wakes promptly
//! once its human decides.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Executor, GUARDED, Policy, Sandbox, ctx, ctx_waiting};
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::policy::v1 as ppb;

/// More than the 128 streams a policy connection allows.
const PARKED: usize = 300;
/// Calls per client connection to the executor (its own stream limit is 128).
const PER_CHANNEL: usize = 100;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_do_not_exhaust_the_connection_to_the_policy() {
    let sb = Sandbox::new();
    let policy = Policy::start(GUARDED);
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);

    // Every approval that turns pending, as the approver's dashboard sees it.
    let (mut approvals, mut watch) = support::watch_pending(&policy).await;

    // Each parked call records when its answer arrived, by the approval it consumed.
    let woke: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut waiters = tokio::task::JoinSet::new();
    let mut channels = Vec::new();
    for i in 0..PARKED {
        if i % PER_CHANNEL == 0 {
            channels.push(FilesystemServiceClient::new(exe.channel().await));
        }
        let mut fs = channels.last().unwrap().clone();
        let woke = woke.clone();
        waiters.spawn(async move {
            let answer = fs
                .write_file(pb::WriteFileRequest {
                    context: ctx_waiting(120),
                    path: format!("deploy/parked-{i}.txt"),
                    content: b"approved\n".to_vec(),
                    create_parents: true,
                    ..Default::default()
                })
                .await;
            let at = Instant::now();
            let answer = answer.map_err(|s| format!("parked call {i}: {s:?}"))?;
            let approval = answer
                .metadata()
                .get("toolgate-approval-id")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| format!("parked call {i}: no approval id in the answer"))?
                .to_owned();
            woke.lock().unwrap().insert(approval, at);
            Ok::<(), String>(())
        });
    }

    // Every call parks: each Authorize got through and each wait holds.
    let mut pending = Vec::new();
    let parked = tokio::time::timeout(Duration::from_secs(60), async {
        while pending.len() < PARKED {
            let ev = watch.message().await.unwrap().expect("watch ended");
            if let Some(a) = ev.approval
                && a.state == ppb::ApprovalState::Pending as i32
                && !pending.contains(&a.approval_id)
            {
                pending.push(a.approval_id);
            }
        }
    })
    .await;
    if parked.is_err() {
        let failed: Vec<String> = std::iter::from_fn(|| waiters.try_join_next())
            .filter_map(|r| r.unwrap().err())
            .take(3)
            .collect();
        panic!(
            "only {} of {PARKED} calls parked within 60 s; failures: {failed:?}",
            pending.len()
        );
    }
    // Other calls go through while they wait. (Before the fix the calls past the 128th never
    // parked at all: their Authorize queued behind the held waits and failed after 10 s.)
    let mut probe = FilesystemServiceClient::new(exe.channel().await);
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(3),
            probe.stat_path(pb::StatPathRequest {
                context: ctx(),
                path: ".".into(),
                ..Default::default()
            }),
        )
        .await
        .expect("a probe call with the calls parked answers within 3 s");
        answer.expect("the probe succeeds while calls are parked");
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert!(
            took < Duration::from_secs(1),
            "the probe took {took:?} with {PARKED} calls parked"
        );
    }

    println!(
        "{PARKED} parked calls: slowest of 5 probe calls {:.2} ms",
        slowest.as_secs_f64() * 1e3
    );

    // Decide one at a time, as a human would, and time each call from its decision.
    let mut decided: HashMap<String, Instant> = HashMap::new();
    for id in &pending {
        let at = Instant::now();
        support::approve(&mut approvals, id.clone())
            .await
            .expect("decide");
        decided.insert(id.clone(), at);
    }
    while let Some(r) = waiters.join_next().await {
        r.unwrap().unwrap();
    }
    let woke = woke.lock().unwrap();
    let mut waits: Vec<Duration> = pending
        .iter()
        .map(|id| {
            let w = woke
                .get(id)
                .unwrap_or_else(|| panic!("{id} never answered"));
            w.saturating_duration_since(decided[id])
        })
        .collect();
    waits.sort();
    let (p50, p99) = (percentile(&waits, 0.5), percentile(&waits, 0.99));
    println!(
        "{PARKED} parked calls: decision to answered call p50 {:.2} ms, p99 {:.2} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    for i in 0..PARKED {
        assert_eq!(
            std::fs::read(sb.ws.join(format!("deploy/parked-{i}.txt"))).unwrap(),
            b"approved\n"
        );
    }
}
