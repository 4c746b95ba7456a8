//! Classifying huge scripts costs bounded memory, and gives it back.

use crate::support;

use support::{AGENT, Backend, Db, Options, Server};
use toolgate_contracts::common::v1::ToolKind;
use toolgate_contracts::policy::v1 as pb;

const MIB: u64 = 1 << 20;

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A 500 KiB here-document, the way an agent writes a big file through a shell.
fn heredoc(n: usize) -> String {
    let mut s = format!("cat > out-{n}.txt <<EOF\n");
    // Every line has an expansion for the parser to analyse.
    let line = "echo a $b and ${c:-d}\n";
    while s.len() < 500 << 10 {
        s.push_str(line);
    }
    s.push_str("EOF\n");
    s
}

/// Eight parallel classifications of a 500 KiB here-document took the policy service from
/// 16 to 362 MiB and it kept it while the connections stayed open. Now the parse of a huge
/// script holds bounded memory and what it used is handed back once it is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_parallel_500_kib_heredocs_cost_bounded_memory_and_give_it_back() {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start_with_policy(&db.url, &Options::default(), "default = \"auto\"\n");
    let client = server.policy(AGENT).await;
    // Warm up: one small call, so the baseline includes the service's ordinary footprint.
    let classify = |script: String| {
        let mut c = client.clone();
        async move {
            c.classify(pb::ClassifyRequest {
                call: Some(pb::ToolCall {
                    tool: ToolKind::ProcessRun as i32,
                    script: Some(script),
                    ..Default::default()
                }),
                session_id: "s1".into(),
                principal: "agent".into(),
                ..Default::default()
            })
            .await
        }
    };
    classify("ls".into()).await.unwrap();
    let idle = rss(server.pid());
    let mut peak = idle;
    for round in 0..2 {
        let calls: Vec<_> = (0..8)
            .map(|i| tokio::spawn(classify(heredoc(round * 8 + i))))
            .collect();
        for c in calls {
            let r = c.await.unwrap().expect("classified");
            assert!(r.into_inner().explanation.is_some());
            peak = peak.max(rss(server.pid()));
        }
    }
    let after = rss(server.pid());
    println!(
        "8 × 500 KiB heredocs: idle {} MiB, peak seen {} MiB, after {} MiB",
        idle / MIB,
        peak / MIB,
        after / MIB
    );
    assert!(
        after < idle + 32 * MIB,
        "kept {} MiB after the classifications (idle {} MiB)",
        (after - idle) / MIB,
        idle / MIB
    );
    assert!(
        peak < idle + 128 * MIB,
        "peak {} MiB over idle",
        (peak - idle) / MIB
    );
}
