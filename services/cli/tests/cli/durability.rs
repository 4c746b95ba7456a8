//! What a client saw succeed is in the ledger, whatever happens to `toolgate up` next.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::Connection;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_runtime::auth::Bearer;

use crate::support::Up;

/// Concurrent writers.
const WRITERS: usize = 8;
/// Calls answered before the kill.
const BEFORE_KILL: usize = 400;

/// `toolgate up` SIGKILLed under load left calls the client saw succeed without an outcome
/// row (outcomes were reported in the background after the answer), so the ledger would call
/// them `OUTCOME_UNKNOWN`. An answered call's outcome is recorded before the answer leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_call_has_its_outcome_after_up_is_sigkilled() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("d");
    let up = Up::start(ws.path(), &data);
    let channel = tonic::transport::Endpoint::from_shared(up.executor())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let bearer = Bearer::new(&up.token("agent")).unwrap();
    let acked: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let answered = Arc::new(AtomicUsize::new(0));
    let enough = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let mut fs = FilesystemServiceClient::with_interceptor(channel.clone(), bearer.clone());
        let (acked, answered, enough, stop) = (
            acked.clone(),
            answered.clone(),
            enough.clone(),
            stop.clone(),
        );
        writers.spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let answer = fs
                    .write_file(pb::WriteFileRequest {
                        context: Some(toolgate_contracts::common::v1::CallContext {
                            call_id: format!("durable-{w}-{i}"),
                            session_id: "durable".into(),
                            ..Default::default()
                        }),
                        path: format!("out/w{w}.txt"),
                        content: format!("{i}\n").into_bytes(),
                        create_parents: true,
                        ..Default::default()
                    })
                    .await;
                // The kill ends every call in flight; only answers count.
                let Ok(answer) = answer else { break };
                let header = |name: &str| {
                    answer
                        .metadata()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_else(|| panic!("no {name} header"))
                        .to_owned()
                };
                // `pending` says the outcome was not in the ledger when the answer left (the
                // policy could not take it within its wait); only `recorded` promises it is.
                let recorded = match header("toolgate-outcome").as_str() {
                    "recorded" => true,
                    "pending" => false,
                    other => panic!("toolgate-outcome: {other}"),
                };
                acked
                    .lock()
                    .unwrap()
                    .push((header("toolgate-decision-id"), recorded));
                if answered.fetch_add(1, Ordering::Relaxed) + 1 == BEFORE_KILL {
                    enough.notify_one();
                }
            }
        });
    }
    enough.notified().await;
    // The kill lands while the writers are still sending.
    up.kill();
    stop.store(true, Ordering::Relaxed);
    while writers.join_next().await.is_some() {}

    let acked = acked.lock().unwrap().clone();
    let url = format!("sqlite:{}", data.join("ledger.db").display());
    let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let mut missing = Vec::new();
    let pending = acked.iter().filter(|(_, recorded)| !recorded).count();
    for (id, _) in acked.iter().filter(|(_, recorded)| *recorded) {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tg_outcomes WHERE decision_id = ?")
            .bind(id)
            .fetch_one(&mut db)
            .await
            .unwrap();
        if n == 0 {
            missing.push(id.clone());
        }
    }
    println!(
        "{} calls answered before the SIGKILL ({pending} of them said `pending`), {} of those said `recorded` without an outcome row",
        acked.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "{} of {} answers that said `recorded` have no outcome: {:?}",
        missing.len(),
        acked.len() - pending,
        &missing[..missing.len().min(5)]
    );
    // A pending answer is the exception (a policy too slow for the record wait), not the rule.
    assert!(
        pending * 10 < acked.len(),
        "{pending} of {} answers were pending",
        acked.len()
    );
}

/// A write interrupted by a kill left its `.NAME.toolgate-PID-N.tmp` beside the target, where
/// the agent and the human see it. `up` removes exactly those at start, and nothing else.
#[test]
fn temp_files_of_interrupted_writes_are_removed_at_start() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("src/deep")).unwrap();
    let leftovers = [
        ".main.rs.toolgate-4242-0.tmp",
        "src/.lib.rs.toolgate-17-3.tmp",
        "src/deep/.x.toolgate-1-99.tmp",
    ];
    let kept = [
        "main.rs.toolgate-4242-0.tmp",
        "src/.lib.rs.toolgate-17.tmp",
        "src/deep/.x.toolgate-1-99.tmp.orig",
        "src/notes.tmp",
    ];
    for f in leftovers.iter().chain(&kept) {
        std::fs::write(ws.path().join(f), "partial").unwrap();
    }
    let up = Up::start(ws.path(), &state.path().join("d"));
    for f in leftovers {
        assert!(!ws.path().join(f).exists(), "{f} left in the workspace");
    }
    for f in kept {
        assert!(ws.path().join(f).exists(), "{f} removed");
    }
    assert!(up.stop().success());
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(ok.success(), "mounting a tmpfs needs root");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Waits, through the health service's `Watch`, until the policy service reports `want`.
async fn health_becomes(
    watch: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
    want: tonic_health::pb::health_check_response::ServingStatus,
) {
    let wait = async {
        loop {
            let r = watch.message().await.unwrap().expect("health watch ended");
            if r.status == want as i32 {
                return;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), wait)
        .await
        .unwrap_or_else(|_| panic!("health never became {want:?}"));
}

/// With its data directory full, `up` failed every call with a bare `INTERNAL` ("attempted to
/// call begin_with at non-zero transaction depth"), kept health `SERVING`, and did not recover
/// when space returned. Now: `LEDGER_UNAVAILABLE` naming the full disk, health
/// `NOT_SERVING`, and calls succeed again once space is freed, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_disk_is_ledger_unavailable_and_recovers_without_a_restart() {
    use std::io::Write;
    use tonic_health::pb::health_check_response::ServingStatus;
    let tmpfs = Tmpfs::mount("16m");
    let ws = tempfile::tempdir().unwrap();
    let data = tmpfs.0.path().join("d");
    let up = Up::start(ws.path(), &data);
    let channel = tonic::transport::Endpoint::from_shared(up.executor())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut fs = FilesystemServiceClient::with_interceptor(
        channel,
        Bearer::new(&up.token("agent")).unwrap(),
    );
    let policy = tonic::transport::Endpoint::from_shared(up.policy())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut watch = tonic_health::pb::health_client::HealthClient::new(policy)
        .watch(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    health_becomes(&mut watch, ServingStatus::Serving).await;
    let mut n = 0;
    let mut write = move || {
        n += 1;
        pb::WriteFileRequest {
            context: Some(toolgate_contracts::common::v1::CallContext {
                call_id: format!("full-{n}"),
                session_id: "full".into(),
                ..Default::default()
            }),
            path: format!("notes/{}.txt", n % 10),
            content: b"x\n".to_vec(),
            create_parents: true,
            ..Default::default()
        }
    };
    fs.write_file(write())
        .await
        .expect("a write before the disk fills");

    // Fill the data disk.
    let filler = tmpfs.0.path().join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 64 << 10];
        while f.write_all(&block).is_ok() {}
    }
    // The ledger's files had room left in their pages; calls fail once it needs more.
    let mut refused = None;
    for _ in 0..5_000 {
        if let Err(s) = fs.write_file(write()).await {
            refused = Some(s);
            break;
        }
    }
    let refused = refused.expect("a call fails once the data disk is full");
    let (reason, _) = toolgate_contracts::status::error_info(&refused)
        .unwrap_or_else(|| panic!("no ErrorInfo: {refused:?}"));
    assert_eq!(reason, "LEDGER_UNAVAILABLE", "{refused:?}");
    assert!(refused.message().contains("full"), "{}", refused.message());
    health_becomes(&mut watch, ServingStatus::NotServing).await;

    // Space comes back: health and calls recover, no restart.
    std::fs::remove_file(&filler).unwrap();
    health_becomes(&mut watch, ServingStatus::Serving).await;
    fs.write_file(write())
        .await
        .expect("a write after space came back");
    drop(watch);
    assert!(up.stop().success());
}
