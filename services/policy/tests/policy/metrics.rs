//! The policy service's Prometheus endpoint, scraped over real HTTP after real
//! Authorize and approval calls: decisions by tool, tier and rule; approvals pending and
//! decided; latencies as histograms.

use crate::support;

use std::time::Duration;

use support::{ALICE, Backend, Db, EXEC, Options, Server, authorize, run};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::authorize_response::Result as R;
use toolgate_runtime::metrics::testing::http_get;

/// The sample lines of one scrape.
pub(crate) async fn scrape(server: &Server) -> Vec<String> {
    let addr = server.metrics.as_deref().expect("metrics address printed");
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    body.lines().map(str::to_owned).collect()
}

/// The value of the sample `name` (with its labels), if present.
pub(crate) fn sample(lines: &[String], name: &str) -> Option<f64> {
    lines.iter().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

/// Scrapes until the pending gauge (set from the ledger by the sweeper) reads `n`.
async fn pending_reaches(server: &Server, n: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let lines = scrape(server).await;
        if sample(&lines, "toolgate_policy_approvals_pending") == Some(n) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "approvals_pending never reached {n}: {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn pending_id(r: pb::AuthorizeResponse) -> String {
    match r.result {
        Some(R::Pending(p)) => p.approval_id,
        other => panic!("expected pending, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scrape_counts_decisions_by_rule_and_approvals_by_verdict() {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start(
        &db.url,
        &Options {
            metrics: true,
            ..Options::default()
        },
    );
    assert_ne!(server.metrics.as_deref(), Some(server.addr.as_str()));
    pending_reaches(&server, 0.0).await;

    let mut exec = server.policy(EXEC).await;
    let mut alice = server.approvals(ALICE).await;
    let ok = exec
        .authorize(authorize("m-1", "s", "agent-1", run(&["echo", "hi"])))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(ok.result, Some(R::Allowed(_))));
    let denied = exec
        .authorize(authorize("m-2", "s", "agent-1", run(&["curl", "x"])))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(denied.result, Some(R::Denied(_))));
    let terraform = pending_id(
        exec.authorize(authorize(
            "m-3",
            "s",
            "agent-1",
            run(&["terraform", "plan"]),
        ))
        .await
        .unwrap()
        .into_inner(),
    );
    let ls = pending_id(
        exec.authorize(authorize("m-4", "s", "agent-1", run(&["make", "release"])))
            .await
            .unwrap()
            .into_inner(),
    );
    pending_reaches(&server, 2.0).await;

    alice
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: terraform,
            verdict: pb::Verdict::Approve as i32,
            reason: "planned change".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    alice
        .cancel_approval(pb::CancelApprovalRequest {
            approval_id: ls,
            reason: "not needed".into(),
        })
        .await
        .unwrap();
    pending_reaches(&server, 0.0).await;

    // The deciding rule labels each decision: the shipped baseline's own rules too.
    let lines = scrape(&server).await;
    for (name, value) in [
        (
            "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"auto\",rule=\"baseline.read-only\"}",
            1.0,
        ),
        (
            "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"deny\",rule=\"no-curl\"}",
            1.0,
        ),
        (
            "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"ask\",rule=\"terraform\"}",
            1.0,
        ),
        (
            "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"ask\",rule=\"baseline.make\"}",
            1.0,
        ),
        (
            "toolgate_policy_approvals_decided_total{verdict=\"approved\"}",
            1.0,
        ),
        (
            "toolgate_policy_approvals_decided_total{verdict=\"cancelled\"}",
            1.0,
        ),
        // Only a human verdict has a decision latency.
        (
            "toolgate_policy_approval_decision_duration_seconds_count",
            1.0,
        ),
        ("toolgate_policy_authorize_duration_seconds_count", 4.0),
        // Two decisions recorded, two asks, one decide, one cancel.
        ("toolgate_policy_ledger_write_duration_seconds_count", 6.0),
    ] {
        assert_eq!(sample(&lines, name), Some(value), "{name} in\n{lines:#?}");
    }
    let (status, _) = http_get(server.metrics.as_deref().unwrap(), "/").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn without_metrics_listen_there_is_no_endpoint() {
    let db = Db::new(Backend::Sqlite).await;
    let server = Server::start(&db.url, &Options::default());
    assert_eq!(server.metrics, None);
}
