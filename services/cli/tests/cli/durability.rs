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
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
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
                let id = answer
                    .metadata()
                    .get("toolgate-decision-id")
                    .and_then(|v| v.to_str().ok())
                    .expect("decision id header")
                    .to_owned();
                acked.lock().unwrap().push(id);
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
    for id in &acked {
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
        "{} calls answered before the SIGKILL, {} of them without an outcome row",
        acked.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "{} of {} answered calls have no outcome: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
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
