//! The executor's Prometheus endpoint, scraped over real HTTP after real calls through the
//! real policy service: counters carry the labels dashboards group by.

use crate::support;

use std::sync::Arc;

use support::{Credentials, Executor, GUARDED, Policy, Sandbox, ctx, ctx_waiting};
use tonic::Code;
use toolgate_contracts::common::v1::OutputStats;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;
use toolgate_runtime::metrics::testing::http_get;

fn script(s: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

fn write(path: &str, wait: bool) -> pb::WriteFileRequest {
    pb::WriteFileRequest {
        context: if wait { ctx_waiting(30) } else { ctx() },
        path: path.into(),
        content: b"x".to_vec(),
        create_parents: true,
        ..Default::default()
    }
}

/// Runs `req` to its end; returns the stdout statistics of its `Exited` event.
async fn run(exe: &Executor, req: pb::RunRequest) -> Result<OutputStats, tonic::Status> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await?.into_inner();
    while let Some(m) = stream.message().await? {
        if let Some(Event::Exited(x)) = m.event {
            return Ok(x.stdout.and_then(|s| s.stats).expect("stdout stats"));
        }
    }
    panic!("run ended without an Exited event");
}

/// The sample lines of one scrape.
async fn scrape(exe: &Executor) -> Vec<String> {
    let addr = exe.metrics.as_deref().expect("metrics address printed");
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    body.lines().map(str::to_owned).collect()
}

/// The value of the sample `name` (with its labels), if present.
fn sample(lines: &[String], name: &str) -> Option<f64> {
    lines.iter().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

#[tokio::test]
async fn scrape_counts_runs_output_fs_ops_refusals_and_waits_by_label() {
    let sb = Sandbox::new();
    let policy = Policy::start_with(GUARDED, Arc::new(Credentials::new()));
    let exe = Executor::start_with(
        &policy,
        &sb.ws,
        &["--metrics-listen", "127.0.0.1:0"],
        &[
            ("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1"),
            // A run that finds no slot is refused at once, not queued behind the `sleep 1`.
            ("TOOLGATE_PROCESS__ADMISSION__QUEUE_WAIT_MS", "0"),
        ],
    );
    assert_ne!(exe.metrics.as_deref(), Some(exe.addr.as_str()));

    // Before any call: the unlabelled metrics exist, nothing counted.
    let lines = scrape(&exe).await;
    for family in [
        "# TYPE toolgate_executor_run_duration_seconds histogram",
        "# TYPE toolgate_executor_runs_in_flight gauge",
        "# TYPE toolgate_executor_authorize_duration_seconds histogram",
        "# TYPE toolgate_executor_approval_wait_duration_seconds histogram",
    ] {
        assert!(lines.iter().any(|l| l == family), "missing {family}");
    }
    assert_eq!(
        sample(&lines, "toolgate_executor_authorize_duration_seconds_count"),
        Some(0.0)
    );

    // Filesystem calls: one written, one missing, one parked without a wait, one approved.
    let mut fs = exe.fs().await;
    fs.write_file(write("a.txt", false)).await.expect("write");
    let err = fs
        .read_file(pb::ReadFileRequest {
            context: ctx(),
            path: "missing.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = fs
        .write_file(write("deploy/app.yaml", false))
        .await
        .unwrap_err();
    assert_eq!(support::reason(&err), "APPROVAL_REQUIRED");
    {
        let _human = support::approve_everything(&policy).await;
        fs.write_file(write("deploy/b.yaml", true))
            .await
            .expect("approved write");
    }

    // Runs: one denied, one exited with output, one cut at its cap.
    let err = run(&exe, script("terraform apply")).await.unwrap_err();
    assert_eq!(support::reason(&err), "POLICY_DENIED");
    let hello = run(&exe, script("echo hello")).await.expect("run");
    assert_eq!(hello.total_bytes, 6);
    let mut capped = script("printf 0123456789abcdef");
    capped.limits = Some(pb::OutputLimits {
        stdout_cap_bytes: 4,
        ..Default::default()
    });
    let capped = run(&exe, capped).await.expect("capped run");
    assert!(capped.truncated);

    // A run holding the only slot: in flight, and the next one is refused as busy.
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut slow = client
        .run(script("sleep 1"))
        .await
        .expect("slow run")
        .into_inner();
    let first = slow.message().await.expect("event").expect("started");
    assert!(matches!(first.event, Some(Event::Started(_))));
    let lines = scrape(&exe).await;
    assert_eq!(
        sample(&lines, "toolgate_executor_runs_in_flight"),
        Some(1.0)
    );
    let err = run(&exe, script("true")).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert_eq!(support::reason(&err), "BUSY");
    while slow.message().await.expect("slow run stream").is_some() {}

    let lines = scrape(&exe).await;
    for family in [
        "# TYPE toolgate_executor_runs counter",
        "# TYPE toolgate_executor_rejections counter",
        "# TYPE toolgate_executor_fs_ops counter",
        "# TYPE toolgate_executor_output_bytes counter",
    ] {
        assert!(lines.iter().any(|l| l == family), "missing {family}");
    }
    let expect = [
        (
            "toolgate_executor_fs_ops_total{op=\"write\",code=\"OK\"}",
            2.0,
        ),
        (
            "toolgate_executor_fs_ops_total{op=\"read\",code=\"NOT_FOUND\"}",
            1.0,
        ),
        (
            "toolgate_executor_fs_ops_total{op=\"write\",code=\"FAILED_PRECONDITION\"}",
            1.0,
        ),
        (
            "toolgate_executor_rejections_total{reason=\"APPROVAL_REQUIRED\"}",
            1.0,
        ),
        (
            "toolgate_executor_rejections_total{reason=\"POLICY_DENIED\"}",
            1.0,
        ),
        ("toolgate_executor_rejections_total{reason=\"BUSY\"}", 1.0),
        (
            "toolgate_executor_admission_refusals_total{reason=\"queue_full\",limit=\"slots\"}",
            1.0,
        ),
        ("toolgate_executor_admission_queue_depth", 0.0),
        ("toolgate_executor_runs_total{status=\"exited\"}", 3.0),
        ("toolgate_executor_run_duration_seconds_count", 3.0),
        ("toolgate_executor_runs_in_flight", 0.0),
        (
            "toolgate_executor_output_bytes_total{stream=\"stdout\"}",
            (hello.total_bytes + capped.total_bytes) as f64,
        ),
        (
            "toolgate_executor_output_truncations_total{stream=\"stdout\"}",
            1.0,
        ),
        (
            "toolgate_executor_approval_wait_duration_seconds_count",
            1.0,
        ),
    ];
    for (name, value) in expect {
        assert_eq!(sample(&lines, name), Some(value), "{name} in\n{lines:#?}");
    }
    // A missing file is the operation's answer, not a refusal.
    assert_eq!(
        sample(
            &lines,
            "toolgate_executor_rejections_total{reason=\"NOT_FOUND\"}"
        ),
        None
    );
    // Every call asked the policy once (the read too: the file's absence is found by the
    // operation), the approved write twice, the run refused BUSY never (its slot is taken
    // before the policy is asked).
    assert_eq!(
        sample(&lines, "toolgate_executor_authorize_duration_seconds_count"),
        Some(9.0)
    );

    let (status, _) = http_get(exe.metrics.as_deref().unwrap(), "/").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn no_metrics_listen_means_no_endpoint_and_a_bad_one_is_named() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    assert_eq!(exe.metrics, None);

    let creds = Credentials::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate-executor"))
        .arg("--workspace")
        .arg(&sb.ws)
        .args(["--metrics-listen", "localhost"])
        .env("TOOLGATE_POLICY__ENDPOINT", "http://127.0.0.1:1")
        .env("TOOLGATE_POLICY__TOKEN_FILE", creds.executor_token_file())
        .env("TOOLGATE_AUTH__TOKENS_FILE", creds.tokens_file())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("metrics_listen"), "{err}");
}
