//! The metrics endpoint over real HTTP: names, labels, types, content type, 404s and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use toolgate_runtime::metrics::testing::http_get_with_headers;
use toolgate_runtime::metrics::{self, ExecutorMetrics, PolicyMetrics, Stream};
use toolgate_runtime::shutdown;

/// One HTTP/1.1 GET; returns the status code, the headers (lowercase names) and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, Vec<(String, String)>, String) {
    http_get_with_headers(&addr.to_string(), path).await
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn scrape_shows_every_metric_with_its_type_and_labels() {
    let mut registry = metrics::registry();
    let policy = PolicyMetrics::register(&mut registry);
    let executor = ExecutorMetrics::register(&mut registry);

    policy.decision("fs.write", "ask", Some("protect-git"));
    policy.decision("fs.write", "ask", Some("protect-git"));
    policy.decision("process.run", "deny", Some("no-rm-rf"));
    policy.set_approvals_pending(3);
    policy.approval_decided("approved", Some(Duration::from_secs(42)));
    policy.approval_decided("expired", None);
    policy.authorize_duration(Duration::from_micros(300));
    policy.ledger_write(Duration::from_micros(80));

    let in_flight = executor.run_started();
    executor.run_finished("exited", Duration::from_millis(12));
    executor.output(Stream::Stdout, 1000, false);
    executor.output(Stream::Stdout, 24, true);
    executor.output(Stream::Stderr, 7, false);
    executor.rejection("POLICY_DENIED");
    executor.fs_op("write", tonic::Code::Ok);
    executor.fs_op("read", tonic::Code::NotFound);
    executor.authorize(Duration::from_micros(900));
    executor.approval_wait(Duration::from_secs(3));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (trigger, stop) = shutdown::channel();
    let server = tokio::spawn(metrics::serve(listener, Arc::new(registry), stop));

    let (status, headers, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        header(&headers, "content-type"),
        Some(metrics::CONTENT_TYPE)
    );

    let types = [
        ("toolgate_policy_decisions", "counter"),
        ("toolgate_policy_approvals_pending", "gauge"),
        ("toolgate_policy_approvals_decided", "counter"),
        (
            "toolgate_policy_approval_decision_duration_seconds",
            "histogram",
        ),
        ("toolgate_policy_authorize_duration_seconds", "histogram"),
        ("toolgate_policy_ledger_write_duration_seconds", "histogram"),
        ("toolgate_executor_runs", "counter"),
        ("toolgate_executor_run_duration_seconds", "histogram"),
        ("toolgate_executor_runs_in_flight", "gauge"),
        ("toolgate_executor_output_bytes", "counter"),
        ("toolgate_executor_output_truncations", "counter"),
        ("toolgate_executor_rejections", "counter"),
        ("toolgate_executor_fs_ops", "counter"),
        ("toolgate_executor_authorize_duration_seconds", "histogram"),
        (
            "toolgate_executor_approval_wait_duration_seconds",
            "histogram",
        ),
    ];
    for (name, kind) in types {
        assert!(
            body.contains(&format!("# TYPE {name} {kind}\n")),
            "missing `# TYPE {name} {kind}` in\n{body}"
        );
    }
    let samples = [
        "toolgate_policy_decisions_total{tool=\"fs.write\",tier=\"ask\",rule=\"protect-git\"} 2",
        "toolgate_policy_decisions_total{tool=\"process.run\",tier=\"deny\",rule=\"no-rm-rf\"} 1",
        "toolgate_policy_approvals_pending 3",
        "toolgate_policy_approvals_decided_total{verdict=\"approved\"} 1",
        "toolgate_policy_approvals_decided_total{verdict=\"expired\"} 1",
        "toolgate_policy_approval_decision_duration_seconds_count 1",
        "toolgate_policy_approval_decision_duration_seconds_sum 42.0",
        "toolgate_policy_authorize_duration_seconds_count 1",
        "toolgate_policy_ledger_write_duration_seconds_count 1",
        "toolgate_executor_runs_total{status=\"exited\"} 1",
        "toolgate_executor_run_duration_seconds_count 1",
        "toolgate_executor_runs_in_flight 1",
        "toolgate_executor_output_bytes_total{stream=\"stdout\"} 1024",
        "toolgate_executor_output_bytes_total{stream=\"stderr\"} 7",
        "toolgate_executor_output_truncations_total{stream=\"stdout\"} 1",
        "toolgate_executor_rejections_total{reason=\"POLICY_DENIED\"} 1",
        "toolgate_executor_fs_ops_total{op=\"write\",code=\"OK\"} 1",
        "toolgate_executor_fs_ops_total{op=\"read\",code=\"NOT_FOUND\"} 1",
        "toolgate_executor_authorize_duration_seconds_count 1",
        "toolgate_executor_approval_wait_duration_seconds_count 1",
    ];
    for sample in samples {
        assert!(
            body.lines().any(|l| l == sample),
            "missing `{sample}` in\n{body}"
        );
    }
    // Histogram buckets are cumulative and end at +Inf.
    assert!(body.contains("toolgate_executor_authorize_duration_seconds_bucket{le=\"+Inf\"} 1\n"));
    assert!(body.ends_with("# EOF\n"), "{body}");

    // Without an Accept that names OpenMetrics (curl, `promtool check metrics`), the
    // Prometheus text format: counters' HELP and TYPE name their `_total` samples.
    let (status, headers, text) =
        toolgate_runtime::metrics::testing::http_get_accepting(&addr.to_string(), "/metrics", None)
            .await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        Some(metrics::TEXT_CONTENT_TYPE)
    );
    assert!(!text.contains("# EOF"), "{text}");
    assert!(
        text.contains("# HELP toolgate_executor_runs_total "),
        "{text}"
    );
    assert!(
        text.contains("# TYPE toolgate_executor_runs_total counter\n"),
        "{text}"
    );

    // A finished run leaves the in-flight gauge.
    drop(in_flight);
    let (_, _, body) = get(addr, "/metrics").await;
    assert!(
        body.lines()
            .any(|l| l == "toolgate_executor_runs_in_flight 0")
    );

    let (status, _, _) = get(addr, "/").await;
    assert_eq!(status, 404);
    let (status, _, _) = get(addr, "/metrics/extra").await;
    assert_eq!(status, 404);

    trigger.trigger();
    server
        .await
        .expect("task")
        .expect("serve returns after shutdown");
}
