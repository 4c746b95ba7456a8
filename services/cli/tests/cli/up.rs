//! `toolgate up` as a person starts it: tokens printed and kept, both services serving, the
//! ledger verifiable after a restart.

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::{Up, raw, text, toolgate};

#[test]
fn tokens_are_generated_once_private_and_reused_on_restart() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("toolgate");
    let first = Up::start(ws.path(), &data);
    let tokens: Vec<String> = ["agent", "approver", "admin", "executor"]
        .iter()
        .map(|r| first.token(r))
        .collect();
    assert!(tokens.iter().all(|t| t.len() >= 32), "{:?}", first.info);
    let file = data.join("tokens.toml");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(&data).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    assert!(
        first.info["ledger"]
            .as_str()
            .unwrap()
            .ends_with("ledger.db")
    );
    let status = first.stop();
    assert!(status.success(), "SIGTERM is a graceful stop: {status:?}");

    let second = Up::start(ws.path(), &data);
    let again: Vec<String> = ["agent", "approver", "admin", "executor"]
        .iter()
        .map(|r| second.token(r))
        .collect();
    assert_eq!(tokens, again);
}

#[test]
fn the_banner_shows_endpoints_tokens_and_an_example() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args([
            "up",
            "--executor-listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "127.0.0.1:0",
        ])
        .args(["--policy-listen", "127.0.0.1:0", "--workspace"])
        .arg(ws.path())
        .arg("--data-dir")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut banner = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        banner.push_str(&line);
        banner.push('\n');
        if line.starts_with("Ctrl-C stops") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let tokens = std::fs::read_to_string(data.join("tokens.toml")).unwrap();
    let agent = tokens
        .split("[[tokens]]")
        .find(|t| t.contains("role = \"agent\""))
        .and_then(|t| t.split("token = \"").nth(1))
        .and_then(|t| t.split('"').next())
        .unwrap()
        .to_owned();
    for want in [
        "toolgate is up",
        "executor   http://127.0.0.1:",
        "policy     http://127.0.0.1:",
        "builtin default",
        "generated now",
        &format!("export TOOLGATE_TOKEN={agent}"),
        "toolgate run -- ls -la",
        "toolgate approvals approve <ID>",
    ] {
        assert!(banner.contains(want), "{want:?} missing from:\n{banner}");
    }
}

#[test]
fn fs_and_run_end_to_end() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));

    let mut w = up
        .command("agent", &["fs", "write", "notes/a.txt"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    w.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let w = w.wait_with_output().unwrap();
    assert!(w.status.success(), "{}", text(&w));
    assert_eq!(
        std::fs::read(ws.path().join("notes/a.txt")).unwrap(),
        b"hello\n"
    );

    let r = up.run("agent", &["fs", "read", "notes/a.txt"]);
    assert!(r.status.success(), "{}", text(&r));
    assert_eq!(r.stdout, b"hello\n");

    let run = up.run("agent", &["run", "--", "cat", "notes/a.txt"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(run.stdout, b"hello\n");

    // No credential: UNAUTHENTICATED, printed with its reason and a hint.
    let anon = toolgate(
        &["fs", "--executor", &up.executor(), "read", "notes/a.txt"],
        &[],
    );
    assert_eq!(anon.status.code(), Some(1), "{}", text(&anon));
    let err = String::from_utf8_lossy(&anon.stderr);
    assert!(
        err.contains("UNAUTHENTICATED UNAUTHENTICATED") && err.contains("hint"),
        "{err}"
    );
}

/// The Quickstart's promise: real development commands work inside the sandbox, offline, with
/// the starting user's toolchains visible read-only, and the data directory (the approver's
/// token) invisible.
#[test]
fn real_work_runs_inside_the_sandbox() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let w = ws.path();
    std::fs::create_dir(w.join("src")).unwrap();
    std::fs::write(
        w.join("Cargo.toml"),
        "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        w.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 { a + b }\n#[cfg(test)]\nmod t { #[test] fn adds() { assert_eq!(super::add(1, 2), 3); } }\n",
    )
    .unwrap();
    std::fs::write(
        w.join("test_demo.py"),
        "import unittest\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertEqual(1 + 1, 2)\n",
    )
    .unwrap();
    std::fs::write(
        w.join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"node -e \"console.log('node says ok')\""}}"#,
    )
    .unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(w)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "."]);
    git(&["config", "user.email", "t@example.com"]);
    git(&["config", "user.name", "t"]);
    let up = Up::start(w, &state.path().join("toolgate"));

    let cargo = up.run("agent", &["run", "--", "cargo", "test", "--offline"]);
    assert_eq!(cargo.status.code(), Some(0), "{}", text(&cargo));
    assert!(String::from_utf8_lossy(&cargo.stdout).contains("test t::adds ... ok"));

    let py = up.run("agent", &["run", "--", "python3", "-m", "unittest", "-v"]);
    assert_eq!(py.status.code(), Some(0), "{}", text(&py));
    assert!(
        String::from_utf8_lossy(&py.stderr).contains("test_ok"),
        "{}",
        text(&py)
    );

    let npm = up.run("agent", &["run", "--", "npm", "test"]);
    assert_eq!(npm.status.code(), Some(0), "{}", text(&npm));
    assert!(String::from_utf8_lossy(&npm.stdout).contains("node says ok"));

    for step in [
        &["run", "--", "git", "add", "src/lib.rs"][..],
        &["run", "--", "git", "commit", "-q", "-m", "first"],
        &["run", "--", "git", "status", "--short"],
    ] {
        let o = up.run("agent", step);
        assert_eq!(o.status.code(), Some(0), "{step:?}: {}", text(&o));
    }
    let log = up.run("agent", &["run", "--", "git", "log", "--oneline"]);
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("first"),
        "{}",
        text(&log)
    );

    // The data directory holds the approver's token; no run can see it.
    let tokens = up.data_dir.join("tokens.toml").display().to_string();
    let peek = up.run("agent", &["run", "--", "cat", &tokens]);
    assert_ne!(peek.status.code(), Some(0), "{}", text(&peek));
    assert!(!String::from_utf8_lossy(&peek.stdout).contains(&up.token("approver")));
}

#[tokio::test]
async fn the_ledger_of_up_verifies_and_detects_a_hand_edited_approval() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("toolgate");
    let up = Up::start(ws.path(), &data);
    std::fs::create_dir(ws.path().join("build")).unwrap();
    let ask = up.run("agent", &["run", "--", "rm", "-rf", "build"]);
    assert_eq!(ask.status.code(), Some(75), "{}", text(&ask));
    let id = support::awaited_approval(&ask);
    let ok = up.run(
        "approver",
        &["approvals", "approve", &id, "--reason", "fine"],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let run = up.run("agent", &["run", "--", "rm", "-rf", "build"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(up.stop().success());

    let url = format!("sqlite:{}", data.join("ledger.db").display());
    let clean = toolgate(&["ledger", "verify", "--database-url", &url], &[]);
    assert!(clean.status.success(), "{}", text(&clean));

    raw(
        &url,
        &format!("UPDATE tg_approvals SET reason = 'rubber stamp' WHERE id = '{id}'"),
    )
    .await;
    let broken = toolgate(&["ledger", "verify", "--database-url", &url], &[]);
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(
        String::from_utf8_lossy(&broken.stdout).contains("BROKEN"),
        "{}",
        text(&broken)
    );
}

#[test]
fn a_data_dir_inside_the_workspace_is_refused_before_any_token_is_written() {
    // Any command in the workspace could read the approver's token there (`grep -r .`).
    let ws = tempfile::tempdir().unwrap();
    for inside in [ws.path().join(".toolgate"), ws.path().join("a/b/state")] {
        let o = toolgate(
            &[
                "up",
                "--executor-listen",
                "127.0.0.1:0",
                "--mcp-listen",
                "127.0.0.1:0",
                "--policy-listen",
                "127.0.0.1:0",
                "--workspace",
                ws.path().to_str().unwrap(),
                "--data-dir",
                inside.to_str().unwrap(),
            ],
            &[],
        );
        assert!(!o.status.success(), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("outside the workspace"),
            "{}",
            text(&o)
        );
        assert!(!inside.join("tokens.toml").exists());
    }
}

#[test]
fn the_default_data_dir_is_per_workspace_under_xdg_state_home() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["up", "--json", "--executor-listen", "127.0.0.1:0"])
        .args(["--mcp-listen", "127.0.0.1:0"])
        .args(["--policy-listen", "127.0.0.1:0", "--workspace"])
        .arg(ws.path())
        .env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let info: serde_json::Value = serde_json::from_str(&line).unwrap();
    let data = std::path::PathBuf::from(info["data_dir"].as_str().unwrap());
    let root = std::fs::canonicalize(state.path())
        .unwrap()
        .join("toolgate");
    assert_eq!(data.parent(), Some(root.as_path()), "{info}");
    assert!(data.join("tokens.toml").is_file());
    assert!(!data.starts_with(std::fs::canonicalize(ws.path()).unwrap()));
}

/// `toolgate doctor` on this machine: every profile enforced, every escape blocked, exit 0.
#[test]
fn doctor_reports_the_sandbox_and_its_escape_self_test() {
    let ws = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["doctor", "--json", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["default_profile"], "workspace");
    let profiles = report["profiles"].as_array().unwrap();
    assert!(
        profiles
            .iter()
            .any(|p| p["name"] == "workspace" && p["available"] == true),
        "{report}"
    );
    let checks = report["escape_checks"].as_array().unwrap();
    assert!(checks.len() >= 30, "{report}");
    assert!(checks.iter().all(|c| c["escaped"].is_null()), "{report}");
    // How runs share the executor, and what one run may add to the workspace.
    let budget = &report["admission"];
    assert!(budget["runs_memory_bytes"].as_u64() > Some(0), "{report}");
    assert!(
        budget["default_run_reservation_bytes"].as_u64() <= budget["runs_memory_bytes"].as_u64(),
        "{report}"
    );
    assert_eq!(budget["queue_length"], 64, "{report}");
    assert_eq!(report["disk"]["max_created_files"], 200_000, "{report}");
    // The human form says the same.
    let human = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["doctor", "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let text_out = String::from_utf8_lossy(&human.stdout);
    assert!(
        text_out.contains("ok: every run is confined by the kernel"),
        "{text_out}"
    );
    assert!(
        text_out.contains("read outside the workspace"),
        "{text_out}"
    );
    assert!(text_out.contains("run budget"), "{text_out}");
    assert!(text_out.contains("added per run"), "{text_out}");
}

/// `up --metrics-listen` serves both services' metrics, the per-RPC gRPC ones included.
#[test]
fn up_serves_both_services_metrics() {
    use std::io::{Read, Write};
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = support::Up::start_with(
        ws.path(),
        &state.path().join("toolgate"),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let ls = up.run("agent", &["fs", "ls"]);
    assert!(ls.status.success(), "{}", text(&ls));
    let addr = up.info["metrics"]
        .as_str()
        .expect("metrics address in --json");
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    for name in [
        "toolgate_build_info",
        "toolgate_executor_",
        "toolgate_policy_",
        "grpc_server_handled_total",
    ] {
        assert!(body.contains(name), "{name} missing from:\n{body}");
    }
}

/// `toolgate up` honours the standard OTEL_* variables like the production binaries: a call's
/// server span, its filesystem work and its ledger writes arrive at the collector, in one trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_exports_spans_when_otel_asks() {
    use toolgate_runtime::telemetry::testing::OtlpReceiver;
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let endpoint = receiver.endpoint();
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = support::Up::start_env(
        ws.path(),
        &state.path().join("toolgate"),
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let ls = tokio::task::block_in_place(|| up.run("agent", &["fs", "ls"]));
    assert!(ls.status.success(), "{}", text(&ls));
    let spans = receiver
        .wait_for(
            |s| {
                s.iter()
                    .any(|sp| sp.service_name == "toolgate" && sp.kind == 2)
                    && s.iter().any(|sp| sp.name == "fs.list")
                    && s.iter().any(|sp| sp.name == "ledger.write")
            },
            Duration::from_secs(15),
        )
        .await
        .unwrap_or_else(|got| panic!("spans that arrived: {got:?}"));
    let server = spans
        .iter()
        .find(|sp| sp.kind == 2 && sp.service_name == "toolgate")
        .unwrap();
    let op = spans.iter().find(|sp| sp.name == "fs.list").unwrap();
    assert_eq!(op.trace_id, server.trace_id, "one trace per call");
}

/// The caller's trace and span, as the MCP client and the gRPC client send them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";
const INTERNAL: i32 = 1;
const SERVER: i32 = 2;

/// MCP calls over one stdio session and gRPC calls, all exported to a real OTLP receiver:
/// the MCP server's `tools/call {tool}` SERVER span continues the client's
/// `_meta.traceparent`, and a call without one is a trace of its own (not a child of the
/// session); the executor's `execute_tool {tool}` INTERNAL span (GenAI conventions, the same
/// tool name as the MCP side) sits under it for as long as the call runs, with the run's
/// `process.run` below; a gRPC call gets the same `execute_tool` span, and a refusal names
/// its `error.type`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_call_and_a_grpc_call_trace_in_the_genai_conventions() {
    use toolgate_contracts::executor::v1 as pb;
    use toolgate_runtime::telemetry::testing::{OtlpReceiver, ReceivedSpan};

    let receiver = OtlpReceiver::start().await.expect("receiver");
    let endpoint = receiver.endpoint();
    let otel = |service: &'static str| {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    };
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up_env = otel("toolgate-up-under-test");
    let up_env: Vec<(&str, &str)> = up_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let up = Up::start_env(ws.path(), &state.path().join("d"), &[], &up_env);

    // The MCP call, over stdio, JSON-RPC by hand.
    let (mut mcp, init) = McpStdio::spawn(
        &up,
        &up.token("agent"),
        &["--task-dir", "off"],
        &otel("toolgate-mcp-under-test"),
        &serde_json::json!({}),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "toolgate", "{init}");
    let ran = mcp.request_id(
        7,
        "tools/call",
        &serde_json::json!({"name": "run_command", "arguments": {"script": "echo traced"},
            "_meta": {"traceparent": format!("00-{TRACE}-{CALLER}-01")}}),
    );
    assert_eq!(ran["result"]["isError"], false, "{ran}");
    assert_eq!(
        ran["result"]["structuredContent"]["stdout"]["text"],
        "traced\n"
    );
    // Two more calls in the same session, without a client trace: a 2 s run and a stat.
    let slow = mcp.request_id(
        8,
        "tools/call",
        &serde_json::json!({"name": "run_command", "arguments": {"script": "sleep 2"}}),
    );
    assert_eq!(slow["result"]["isError"], false, "{slow}");
    let stat = mcp.request_id(
        9,
        "tools/call",
        &serde_json::json!({"name": "stat_path", "arguments": {"path": "."}}),
    );
    assert_eq!(stat["result"]["isError"], false, "{stat}");
    // Closing stdin ends the stdio session; the server exits (successfully, `stop` asserts)
    // and flushes its spans.
    mcp.stop();

    // The gRPC calls: one that runs, one the policy denies.
    let channel = tonic::transport::Endpoint::from_shared(up.executor())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client =
        toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient::new(
            channel,
        );
    for (call_id, script) in [("grpc-ok", "echo ok"), ("grpc-denied", "shutdown -h now")] {
        let mut request = tonic::Request::new(pb::RunRequest {
            context: Some(toolgate_contracts::common::v1::CallContext {
                call_id: call_id.into(),
                session_id: "trace-session".into(),
                ..Default::default()
            }),
            command: Some(pb::run_request::Command::Script(script.into())),
            ..Default::default()
        });
        let md = request.metadata_mut();
        md.insert(
            "authorization",
            format!("Bearer {}", up.token("agent")).parse().unwrap(),
        );
        md.insert(
            "traceparent",
            format!("00-{TRACE}-{CALLER}-01").parse().unwrap(),
        );
        match client.run(request).await {
            Ok(r) => {
                let mut s = r.into_inner();
                while let Ok(Some(_)) = s.message().await {}
            }
            Err(e) => assert_eq!(call_id, "grpc-denied", "{e:?}"),
        }
    }
    drop(client);
    assert!(up.stop().success());

    let spans = receiver
        .wait_for(
            |spans| {
                spans.iter().any(|s| s.name == "tools/call stat_path")
                    && spans.iter().any(|s| s.name == "execute_tool stat_path")
                    && spans
                        .iter()
                        .filter(|s| s.name == "execute_tool run_command")
                        .count()
                        >= 4
            },
            Duration::from_secs(30),
        )
        .await
        .unwrap_or_else(|spans| panic!("the spans never arrived: {spans:#?}"));
    let by_id: std::collections::HashMap<&str, &ReceivedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let descends = |span: &ReceivedSpan, ancestor: &ReceivedSpan| {
        let mut at = Some(span);
        while let Some(s) = at {
            if s.span_id == ancestor.span_id {
                return true;
            }
            at = s
                .parent_span_id
                .as_deref()
                .and_then(|p| by_id.get(p).copied());
        }
        false
    };

    // The MCP server's span, a child of the client's.
    let tool_call = spans
        .iter()
        .find(|s| {
            s.name == "tools/call run_command" && s.attribute("jsonrpc.request.id") == Some("7")
        })
        .unwrap();
    assert_eq!(tool_call.service_name, "toolgate-mcp-under-test");
    assert_eq!(tool_call.kind, SERVER);
    assert_eq!(tool_call.trace_id, TRACE);
    assert_eq!(tool_call.parent_span_id.as_deref(), Some(CALLER));
    for (k, v) in [
        ("mcp.method.name", "tools/call"),
        ("mcp.protocol.version", "2025-11-25"),
        ("jsonrpc.request.id", "7"),
        ("gen_ai.tool.name", "run_command"),
        ("gen_ai.operation.name", "execute_tool"),
        ("toolgate.decision", "auto"),
    ] {
        assert_eq!(tool_call.attribute(k), Some(v), "{k}: {tool_call:#?}");
    }
    let session = tool_call.attribute("mcp.session.id").unwrap();
    assert!(session.starts_with("mcp-"), "{tool_call:#?}");

    // The executor's span for it, below the MCP span (through the gRPC client and server
    // spans), with the run below it.
    let executed: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.name == "execute_tool run_command")
        .collect();
    let mcp_exec = executed
        .iter()
        .find(|s| {
            s.attribute("gen_ai.conversation.id") == Some(session)
                && s.attribute("gen_ai.tool.call.id") == tool_call.attribute("gen_ai.tool.call.id")
        })
        .expect("the MCP call's execute_tool span");
    assert_eq!(mcp_exec.kind, INTERNAL);
    assert_eq!(mcp_exec.service_name, "toolgate-up-under-test");
    assert!(descends(mcp_exec, tool_call), "{spans:#?}");
    assert_eq!(
        mcp_exec.attribute("gen_ai.tool.call.id"),
        tool_call.attribute("gen_ai.tool.call.id")
    );
    for (k, v) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "run_command"),
        ("toolgate.operation", "process.run"),
        ("toolgate.decision", "auto"),
        ("toolgate.sandbox.profile", "workspace"),
        ("toolgate.output.truncated", "false"),
    ] {
        assert_eq!(mcp_exec.attribute(k), Some(v), "{k}: {mcp_exec:#?}");
    }
    assert!(
        mcp_exec
            .attribute("toolgate.decision.id")
            .is_some_and(|d| d.starts_with("dec_"))
    );
    assert!(mcp_exec.attribute("toolgate.rule.id").is_some());
    assert!(mcp_exec.attribute("error.type").is_none(), "{mcp_exec:#?}");
    let run = spans
        .iter()
        .find(|s| s.name == "process.run" && descends(s, mcp_exec))
        .expect("process.run under execute_tool");
    assert_eq!(run.trace_id, TRACE);

    // The calls the client sent no trace for: each the root of a trace of its own.
    let root = |id: &str, tool: &str| {
        let s = spans
            .iter()
            .find(|s| {
                s.name == format!("tools/call {tool}")
                    && s.attribute("jsonrpc.request.id") == Some(id)
            })
            .unwrap_or_else(|| panic!("tools/call {tool} #{id}: {spans:#?}"));
        assert_eq!(s.parent_span_id, None, "{s:#?}");
        assert_ne!(s.trace_id, TRACE);
        s
    };
    let (slow_call, stat_call) = (root("8", "run_command"), root("9", "stat_path"));
    assert_ne!(slow_call.trace_id, stat_call.trace_id);
    assert_eq!(slow_call.attribute("mcp.session.id"), Some(session));
    // The 2 s run's execute_tool span lasts as long as the run.
    let slow_exec = executed
        .iter()
        .find(|s| s.trace_id == slow_call.trace_id)
        .expect("the slow run's execute_tool span");
    assert!(descends(slow_exec, slow_call));
    assert!(
        slow_exec.duration >= Duration::from_secs(2),
        "{:?}: {slow_exec:#?}",
        slow_exec.duration
    );
    let stat_exec = spans
        .iter()
        .find(|s| s.name == "execute_tool stat_path")
        .unwrap();
    assert_eq!(stat_exec.trace_id, stat_call.trace_id);
    assert_eq!(stat_exec.attribute("toolgate.operation"), Some("fs.stat"));

    // The gRPC calls: the same span, named by their call ids; the refusal says why.
    let ok = executed
        .iter()
        .find(|s| s.attribute("gen_ai.tool.call.id") == Some("grpc-ok"))
        .expect("the gRPC call's execute_tool span");
    assert_eq!(
        ok.attribute("gen_ai.conversation.id"),
        Some("trace-session")
    );
    let rpc = by_id[ok.parent_span_id.as_deref().unwrap()];
    assert_eq!(rpc.kind, SERVER);
    assert_eq!(rpc.name, "toolgate.executor.v1.ProcessService/Run");
    assert_eq!(rpc.parent_span_id.as_deref(), Some(CALLER));
    let denied = executed
        .iter()
        .find(|s| s.attribute("gen_ai.tool.call.id") == Some("grpc-denied"))
        .expect("the denied call's execute_tool span");
    assert_eq!(denied.attribute("error.type"), Some("policy_denied"));
    assert_eq!(denied.attribute("toolgate.decision"), Some("deny"));
    assert_eq!(denied.attribute("toolgate.rule.id"), Some("no-shutdown"));
}

/// An MCP `run_command` carries the run's limits and usage in `structuredContent`, and a run
/// the kernel killed at its memory limit says so, in words and in fields.
#[test]
fn an_mcp_run_says_which_limit_ended_it() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // `python3 -m` is what the test policy allows; the module touches 3 GiB.
    std::fs::write(
        ws.path().join("hog.py"),
        "s = b'x' * (3 << 30)\nprint('survived', len(s))\n",
    )
    .unwrap();
    let up = Up::start(ws.path(), &state.path().join("d"));
    let mut mcp = McpStdio::agent(&up);
    let ok = mcp.run_script("true");
    let sc = &ok["result"]["structuredContent"];
    assert_eq!(sc["status"], "exited", "{ok}");
    assert!(
        sc["limits"]["enforced"]
            .as_str()
            .is_some_and(|e| e.starts_with("cgroup-v")),
        "{sc}"
    );
    assert_eq!(sc["limits"]["memory_bytes"], 2u64 << 30, "{sc}");
    assert_eq!(sc["oom_killed"], false);
    assert!(sc.get("limit_exceeded").is_none(), "{sc}");

    let hog = mcp.run_script("python3 -m hog");
    let sc = &hog["result"]["structuredContent"];
    assert_eq!(sc["oom_killed"], true, "{hog}");
    assert_eq!(sc["limit_exceeded"]["resource"], "memory", "{sc}");
    assert_eq!(sc["limit_exceeded"]["limit"], 2u64 << 30);
    let said = "the run exceeded its 2 GiB memory limit";
    assert!(
        sc["limit_exceeded"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with(said)),
        "{sc}"
    );
    assert!(sc["peak_memory_bytes"].as_u64().unwrap() <= 2 << 30, "{sc}");
    let text = hog["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(said), "{text}");
    assert!(!text.contains("survived"), "{text}");
    mcp.stop();
}

/// `up` layers its executor's configuration as `toolgate-executor` does: a `TOOLGATE_PROCESS__*`
/// variable changes the limit runs are held to (the kernel kills at it), and a bad
/// `TOOLGATE_EGRESS__*` value stops `up` with the field named.
#[test]
fn up_takes_executor_settings_from_the_environment() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // 512 MiB: far below the default 2 GiB limit, far above the 256 MiB one set below.
    std::fs::write(
        ws.path().join("hog.py"),
        "s = b'x' * (512 << 20)\nprint('survived', len(s))\n",
    )
    .unwrap();
    // Python ignores SIGXFSZ (its writes fail with EFBIG instead); this one takes the default.
    // It runs as a command of the run's shell: the shell itself, its PID namespace's init, is
    // spared the signal by the kernel.
    std::fs::write(
        ws.path().join("writer.py"),
        "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n\
         with open('big', 'wb') as f:\n    for _ in range(3):\n        f.write(b'x' * (600 << 10))\n        f.flush()\n\
         print('wrote it all')\n",
    )
    .unwrap();
    let up = Up::start_env(
        ws.path(),
        &state.path().join("d"),
        &[],
        &[
            ("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "268435456"),
            // A 1 MiB disk budget: every run's RLIMIT_FSIZE too.
            ("TOOLGATE_PROCESS__DISK__MAX_WRITTEN_BYTES", "1048576"),
        ],
    );
    let mut mcp = McpStdio::agent(&up);
    let hog = mcp.run_script("python3 -m hog");
    let sc = &hog["result"]["structuredContent"];
    assert_eq!(sc["limits"]["memory_bytes"], 256u64 << 20, "{sc}");
    assert_eq!(sc["oom_killed"], true, "{hog}");
    assert_eq!(sc["limit_exceeded"]["limit"], 256u64 << 20, "{sc}");
    let text = hog["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("the run exceeded its 256 MiB memory limit"),
        "{text}"
    );
    assert!(!text.contains("survived"), "{text}");

    // A file grown past the file-size limit: said in words and fields, and kept in the ledger.
    let writer = mcp.run_script("python3 -m writer && echo never");
    let sc = &writer["result"]["structuredContent"];
    assert_eq!(sc["limit_exceeded"]["resource"], "file_size", "{writer}");
    assert_eq!(sc["limit_exceeded"]["limit"], 1u64 << 20, "{sc}");
    let said = "the run exceeded its 1 MiB file-size limit";
    let text = writer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(said), "{text}");
    assert!(!text.contains("wrote it all"), "{text}");
    assert_eq!(
        std::fs::metadata(ws.path().join("big")).unwrap().len(),
        1 << 20
    );
    mcp.stop();
    assert!(up.stop().success());
    let url = format!("sqlite:{}", state.path().join("d/ledger.db").display());
    let stored: Vec<String> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use sqlx::Connection;
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT isolation FROM tg_outcomes WHERE isolation IS NOT NULL")
            .fetch_all(&mut db)
            .await
            .unwrap()
    });
    assert!(
        stored
            .iter()
            .any(|i| i.contains("\"resource\":\"file_size\"") && i.contains(said)),
        "{stored:?}"
    );

    let out = support::toolgate(
        &[
            "up",
            "--json",
            "--executor-listen",
            "127.0.0.1:0",
            "--policy-listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "off",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--data-dir",
            state.path().join("d").to_str().unwrap(),
        ],
        &[("TOOLGATE_EGRESS__RESOLVERS", "[\"resolver.example\"]")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", support::text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("egress.resolvers: `resolver.example` is not an ip:port address"),
        "{err}"
    );
}

/// `up --config FILE` configures both services from one file: its `[executor]` table holds a
/// run to a memory limit the kernel enforces, its `[policy]` table adds a redaction pattern the
/// ledger applies. The environment still wins over the file. Settings `up` makes itself, keys
/// outside the two tables and unknown fields stop `up` with the key named.
#[test]
fn up_takes_both_services_settings_from_one_config_file() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("d");
    std::fs::write(
        ws.path().join("hog.py"),
        "s = b'x' * (400 << 20)\nprint('survived', len(s))\n",
    )
    .unwrap();
    let file = state.path().join("up.toml");
    // The file's 128 MiB is overridden by the environment's 256 MiB; the pids limit has no
    // variable, so the file's stands.
    std::fs::write(
        &file,
        "[executor.process.limits]\nmemory_bytes = 134217728\npids = 300\n\n\
         [policy.ledger]\nredact_patterns = [\"zebra-[0-9]+\"]\n",
    )
    .unwrap();
    let up = Up::start_env(
        ws.path(),
        &data,
        &["--config", file.to_str().unwrap()],
        &[("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "268435456")],
    );
    let mut mcp = McpStdio::agent(&up);
    let hog = mcp.run_script("python3 -m hog # zebra-4711");
    let sc = &hog["result"]["structuredContent"];
    assert_eq!(sc["limits"]["memory_bytes"], 256u64 << 20, "{sc}");
    assert_eq!(sc["limits"]["pids"], 300, "{sc}");
    assert_eq!(sc["oom_killed"], true, "{hog}");
    mcp.stop();
    assert!(up.stop().success());
    let url = format!("sqlite:{}", data.join("ledger.db").display());
    let stored: Vec<String> = tokio::runtime::Runtime::new().unwrap().block_on(async {
        use sqlx::Connection;
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT request_json FROM tg_decisions")
            .fetch_all(&mut db)
            .await
            .unwrap()
    });
    let hog_row = stored
        .iter()
        .find(|r| r.contains("python3 -m hog"))
        .unwrap_or_else(|| panic!("no decision for the run in {stored:?}"));
    assert!(!hog_row.contains("zebra-4711"), "{hog_row}");

    let refused = |text: &str| {
        std::fs::write(&file, text).unwrap();
        let out = support::toolgate(
            &[
                "up",
                "--json",
                "--executor-listen",
                "127.0.0.1:0",
                "--policy-listen",
                "127.0.0.1:0",
                "--mcp-listen",
                "off",
                "--workspace",
                ws.path().to_str().unwrap(),
                "--data-dir",
                data.to_str().unwrap(),
                "--config",
                file.to_str().unwrap(),
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{}", support::text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused("[policy.ledger]\nurl = \"postgres://elsewhere/db\"\n");
    assert!(
        err.contains("`policy.ledger.url` is set by toolgate up itself")
            && err.contains("--data-dir"),
        "{err}"
    );
    let err = refused("[process.limits]\npids = 10\n");
    assert!(err.contains("unknown top-level key `process`"), "{err}");
    let err = refused("[executor.process.limits]\nmemory_bites = 1\n");
    assert!(
        err.contains("executor configuration") && err.contains("memory_bites"),
        "{err}"
    );
}

/// `toolgate mcp` over stdio, spoken to as JSON-RPC lines.
struct McpStdio {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    next_id: i64,
}

impl McpStdio {
    /// Starts it for `up` with `token`, tasks in `task_dir`, and initializes a session that
    /// declares the tasks extension.
    fn start(up: &Up, token: &str, task_dir: &std::path::Path) -> McpStdio {
        let dir = task_dir.to_str().unwrap();
        let (s, init) = McpStdio::spawn(
            up,
            token,
            &["--task-dir", dir],
            &[("TOOLGATE_LOG", "warn".to_owned())],
            &serde_json::json!({"extensions": {"io.modelcontextprotocol/tasks": {}}}),
        );
        assert!(
            init["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"]
                .is_object(),
            "the server offers tasks: {init}"
        );
        s
    }

    /// Starts it for `up` as its agent, without task records, and initializes a plain session.
    fn agent(up: &Up) -> McpStdio {
        McpStdio::spawn(
            up,
            &up.token("agent"),
            &["--task-dir", "off"],
            &[],
            &serde_json::json!({}),
        )
        .0
    }

    /// `run_command` of `script`; the whole JSON-RPC answer.
    fn run_script(&mut self, script: &str) -> serde_json::Value {
        self.request(
            "tools/call",
            &serde_json::json!({"name": "run_command", "arguments": {"script": script}}),
        )
    }

    /// Starts `toolgate mcp` for `up` with `token`, more `args` and `env`, and initializes a
    /// session declaring `capabilities`; returns it and the `initialize` answer.
    fn spawn(
        up: &Up,
        token: &str,
        args: &[&str],
        env: &[(&str, String)],
        capabilities: &serde_json::Value,
    ) -> (McpStdio, serde_json::Value) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["mcp", "--executor", &up.executor()])
            .args(args)
            .env("TOOLGATE_TOKEN", token)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut s = McpStdio {
            stdin: child.stdin.take(),
            lines: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
            next_id: 0,
        };
        let init = s.request(
            "initialize",
            &serde_json::json!({"protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "toolgate-test", "version": "1"}}),
        );
        s.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (s, init)
    }

    fn send(&mut self, v: &serde_json::Value) {
        writeln!(self.stdin.as_mut().unwrap(), "{v}").unwrap();
    }

    fn request(&mut self, method: &str, params: &serde_json::Value) -> serde_json::Value {
        self.next_id += 1;
        self.request_id(self.next_id, method, params)
    }

    /// A request with the JSON-RPC id given.
    fn request_id(
        &mut self,
        id: i64,
        method: &str,
        params: &serde_json::Value,
    ) -> serde_json::Value {
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let line = self.lines.next().expect("an answer").unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn task(&mut self, id: &str) -> serde_json::Value {
        self.request("tasks/get", &serde_json::json!({"taskId": id}))
    }

    fn stop(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// A client that declares the tasks extension gets an `ask` as a task whose id is the
/// approval id. The task outlives the MCP process that created it: a new process answers
/// `tasks/get`, runs the call once the approval is granted (once: later polls return the
/// kept result), reports a human's denial as a completed error result and a cancel as
/// cancelled; another credential cannot see it.
#[test]
fn an_ask_is_a_task_that_survives_a_restart_and_runs_once_approved() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let tasks = state.path().join("tasks");
    let up = Up::start(ws.path(), &state.path().join("d"));
    let agent = up.token("agent");
    // Under the test policy `dd` matches no rule, so the default asks a human.
    let write = |path: &str| {
        serde_json::json!({"name": "run_command",
            "arguments": {"script": format!("dd of={path} status=none"), "stdin": "replicas: 3\n"}})
    };
    let decide = |id: &str, verdict: &str| {
        let mut args = vec!["approvals", verdict, id];
        if verdict == "deny" {
            args.extend(["--message", "not today"]);
        }
        let o = up.run("approver", &args);
        assert!(o.status.success(), "{}", text(&o));
    };

    // An `ask` returns a task; the first process then goes away.
    let mut first = McpStdio::start(&up, &agent, &tasks);
    let created = first.request("tools/call", &write("a.yaml"));
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working");
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert!(
        id.starts_with("apr_"),
        "the task id is the approval id: {id}"
    );
    assert_eq!(first.task(&id)["result"]["status"], "working");
    let denied_call = first.request("tools/call", &write("b.yaml"));
    let denied_id = denied_call["result"]["taskId"].as_str().unwrap().to_owned();
    let cancelled_call = first.request("tools/call", &write("c.yaml"));
    let cancelled_id = cancelled_call["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    first.stop();
    assert!(!ws.path().join("a.yaml").exists());

    decide(&id, "approve");
    decide(&denied_id, "deny");

    // A new process resumes them from their records.
    let mut second = McpStdio::start(&up, &agent, &tasks);
    let done = second.task(&id);
    let r = &done["result"];
    assert_eq!(r["status"], "completed", "{done}");
    assert_eq!(r["result"]["isError"], false, "{done}");
    assert_eq!(r["result"]["structuredContent"]["exit_code"], 0);
    assert_eq!(
        r["result"]["_meta"]["dev.toolgate/approval_id"],
        id.as_str()
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.yaml")).unwrap(),
        "replicas: 3\n"
    );
    // Polling again returns the kept result; the call does not run a second time.
    std::fs::remove_file(ws.path().join("a.yaml")).unwrap();
    let again = second.task(&id);
    assert_eq!(again["result"]["status"], "completed");
    assert_eq!(again["result"]["result"], done["result"]["result"]);
    assert!(!ws.path().join("a.yaml").exists());

    let denied = second.task(&denied_id);
    let r = &denied["result"];
    assert_eq!(r["status"], "completed", "{denied}");
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(r["result"]["structuredContent"]["decision"], "deny");
    assert_eq!(r["result"]["structuredContent"]["reason"], "not today");
    assert!(!ws.path().join("b.yaml").exists());

    let cancel = second.request("tasks/cancel", &serde_json::json!({"taskId": cancelled_id}));
    assert!(cancel.get("error").is_none(), "{cancel}");
    assert_eq!(second.task(&cancelled_id)["result"]["status"], "cancelled");
    decide(&cancelled_id, "approve");
    assert_eq!(second.task(&cancelled_id)["result"]["status"], "cancelled");
    assert!(!ws.path().join("c.yaml").exists());
    second.stop();

    // Another credential sees no such task.
    let mut other = McpStdio::start(&up, &up.token("admin"), &tasks);
    let hidden = other.task(&id);
    assert!(
        hidden["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no task"),
        "{hidden}"
    );
    other.stop();
}

/// `up --json` prints exactly one line, whatever the embedded services would announce.
#[test]
fn up_json_prints_exactly_one_line() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["up", "--json", "--executor-listen", "127.0.0.1:0"])
        .args([
            "--policy-listen",
            "127.0.0.1:0",
            "--mcp-listen",
            "127.0.0.1:0",
        ])
        .arg("--workspace")
        .arg(ws.path())
        .arg("--data-dir")
        .arg(state.path().join("d"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["service"], "toolgate");
    assert!(v["mcp"].as_str().unwrap().ends_with("/mcp"), "{v}");
    // Serving: a call answers. Then stop it and read stdout to its end.
    let o = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["fs", "ls", "--executor", v["executor"].as_str().unwrap()])
        .env("TOOLGATE_TOKEN", v["tokens"]["agent"].as_str().unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(rest, Vec::<String>::new(), "nothing after the one line");
}

/// `fs edit`, `fs mkdir`, read ranges, search options and `--json`, as a person types them;
/// an address without a scheme works, and an unreachable one is said once.
#[test]
fn fs_edit_mkdir_ranges_and_json() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("d"));
    std::fs::write(ws.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();

    let o = up.run("agent", &["fs", "mkdir", "-p", "x/y"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(ws.path().join("x/y").is_dir());
    let o = up.run("agent", &["fs", "--json", "mkdir", "-p", "x/y"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["created"], false);

    let o = up.run("agent", &["fs", "edit", "a.txt", "two", "deux"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("+deux"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "one\ndeux\nthree\n"
    );
    let o = up.run("agent", &["fs", "edit", "a.txt", "nowhere", "x"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("EDIT_MISMATCH"),
        "{}",
        text(&o)
    );

    let o = up.run("agent", &["fs", "read", "a.txt", "--lines", "2:1"]);
    assert_eq!(o.stdout, b"deux\n", "{}", text(&o));
    let o = up.run(
        "agent",
        &["fs", "--json", "read", "a.txt", "--bytes", "4:4"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["content"], "deux");
    assert_eq!(v["total_size"], 15);

    let o = up.run("agent", &["fs", "search", "-i", "-C", "1", "DEUX"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("a.txt:2:deux") && out.contains("a.txt-1-one"),
        "{out}"
    );
    let o = up.run("agent", &["fs", "--json", "search", "-F", "e."]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["matches"].as_array().unwrap().len(),
        0,
        "literal: no regex dot"
    );
    let o = up.run("agent", &["fs", "--json", "ls"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"] == "a.txt")
    );

    // `up` prints addresses without a scheme; they work as given.
    let bare = up.info["executor"].as_str().unwrap();
    let o = up.run("agent", &["fs", "--executor", bare, "stat", "a.txt"]);
    assert!(o.status.success(), "{}", text(&o));
    // An error is said once.
    let o = up.run("agent", &["fs", "--executor", "127.0.0.1:1", "ls"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.matches("tcp connect error").count(), 1, "{err}");
}

/// `fs rm` under the shipped policy: a file goes at once, a tree waits for a human (the same
/// command again once approved), a non-empty directory without `-r` and a protected path are
/// refused with their reasons, `-f` accepts a missing path.
#[test]
fn fs_rm_files_trees_and_refusals() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../libs/policy-engine/default-policy.toml");
    let up = Up::start_policy(ws.path(), &state.path().join("d"), &[], &[], &shipped);
    for f in ["a.txt", "build/x/1.o", "build/2.o", ".git/config"] {
        let p = ws.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "0123").unwrap();
    }

    let o = up.run("agent", &["fs", "rm", "a.txt"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "deleted file a.txt (1 files, 0 directories, 4 bytes)\n"
    );
    assert!(!ws.path().join("a.txt").exists());

    let o = up.run("agent", &["fs", "rm", "build"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("DIRECTORY_NOT_EMPTY"),
        "{}",
        text(&o)
    );
    let o = up.run("agent", &["fs", "rm", "-r", ".git"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("PATH_PROTECTED"),
        "{}",
        text(&o)
    );

    let o = up.run("agent", &["fs", "rm", "-r", "build"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("APPROVAL_REQUIRED"),
        "{}",
        text(&o)
    );
    assert!(
        ws.path().join("build/x/1.o").exists(),
        "nothing before a human decides"
    );
    let list = up.run(
        "approver",
        &["approvals", "list", "--state", "pending", "--json"],
    );
    let list: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = list[0]["approval_id"].as_str().unwrap().to_owned();
    let o = up.run("approver", &["approvals", "approve", &id]);
    assert!(o.status.success(), "{}", text(&o));
    let o = up.run("agent", &["fs", "--json", "rm", "-R", "build"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["type"], &v["files_removed"], &v["directories_removed"]),
        (&"directory".into(), &2.into(), &2.into())
    );
    assert!(!ws.path().join("build").exists());

    let o = up.run("agent", &["fs", "--json", "rm", "-f", "build"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["deleted"], false);
    assert!(ws.path().join(".git/config").exists());
}

/// The MCP `delete_path` tool: listed as destructive and idempotent, a file goes and the
/// structured result says what went, a protected path and a tree are refusals the model
/// reads (a tree waits for a human: not an error).
#[test]
fn mcp_delete_path_tool() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let tasks = tempfile::tempdir().unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../libs/policy-engine/default-policy.toml");
    let up = Up::start_policy(ws.path(), &state.path().join("d"), &[], &[], &shipped);
    for f in ["old.log", "tree/a", ".git/config"] {
        let p = ws.path().join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "abc").unwrap();
    }
    let mut mcp = McpStdio::start(&up, &up.token("agent"), tasks.path());
    let list = mcp.request("tools/list", &serde_json::json!({}));
    let tool = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "delete_path")
        .cloned()
        .expect("delete_path is listed");
    assert_eq!(tool["annotations"]["destructiveHint"], true, "{tool}");
    assert_eq!(tool["annotations"]["readOnlyHint"], false, "{tool}");
    assert!(tool["inputSchema"]["properties"]["recursive"].is_object());

    let call = |mcp: &mut McpStdio, args: serde_json::Value| {
        mcp.request(
            "tools/call",
            &serde_json::json!({"name": "delete_path", "arguments": args}),
        )
    };
    let r = call(&mut mcp, serde_json::json!({"path": "old.log"}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    let out = &r["result"]["structuredContent"];
    assert_eq!(
        (&out["deleted"], &out["type"]),
        (&true.into(), &"file".into()),
        "{r}"
    );
    assert_eq!(out["bytes_removed"], 3);
    assert!(!ws.path().join("old.log").exists());

    let r = call(&mut mcp, serde_json::json!({"path": ".git/config"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r.to_string().contains("PATH_PROTECTED"), "{r}");
    let r = call(
        &mut mcp,
        serde_json::json!({"path": "tree", "recursive": true}),
    );
    assert!(r.to_string().contains("approval"), "{r}");
    assert!(ws.path().join("tree/a").exists() && ws.path().join(".git/config").exists());
    let r = call(
        &mut mcp,
        serde_json::json!({"path": "gone", "missing_ok": true}),
    );
    assert_eq!(r["result"]["structuredContent"]["deleted"], false, "{r}");
    mcp.stop();
}

/// `toolgate mcp --listen` off loopback refuses plaintext unless told otherwise, naming the
/// flags that fix it.
#[test]
fn mcp_listen_off_loopback_needs_tls_or_an_explicit_choice() {
    let o = toolgate(
        &[
            "mcp",
            "--listen",
            "0.0.0.0:0",
            "--executor",
            "127.0.0.1:1",
            "--task-dir",
            "off",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--tls-cert") && err.contains("--insecure-plaintext"),
        "{err}"
    );
}

/// Issue 23: with `node` in `~/bin` the node prefix was the home directory, and `up` exposed it
/// whole to every run (`~/.ssh/id_rsa`, `.git-credentials`); registry tokens in `CARGO_HOME` were
/// readable too. Runs must see neither, while `node` and `cargo` still work.
#[test]
fn node_in_home_bin_does_not_expose_home_credentials_to_runs() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // Not under /tmp (where a clean clone may put CARGO_TARGET_TMPDIR): runs get a private
    // /tmp, so a home there would be out of view anyway.
    let fake = tempfile::tempdir_in("/var/tmp").unwrap();
    let home = std::fs::canonicalize(fake.path()).unwrap().join("u");
    for d in [".ssh", "bin", ".cargo/bin"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), "SSH-PRIVATE-KEY-4711\n").unwrap();
    std::fs::write(
        home.join(".git-credentials"),
        "https://u:ghp_4711@github.com\n",
    )
    .unwrap();
    std::fs::write(home.join(".bashrc"), "\n").unwrap();
    // node found in ~/bin: a real file there makes the node prefix the home directory.
    let system_node = ["/usr/bin/node", "/usr/local/bin/node"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file());
    if let Some(node) = system_node {
        std::fs::write(
            home.join("bin/node"),
            format!("#!/bin/sh\nexec {node} \"$@\"\n"),
        )
        .unwrap();
    } else {
        std::fs::write(home.join("bin/node"), "#!/bin/sh\necho v0-fake-node\n").unwrap();
    }
    std::fs::set_permissions(
        home.join("bin/node"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    // A CARGO_HOME with registry tokens, and the machine's cargo in its bin.
    let cargo_home = home.join(".cargo");
    std::fs::write(
        cargo_home.join("credentials.toml"),
        "[registry]\ntoken = \"cargo-token-4711\"\n",
    )
    .unwrap();
    std::fs::write(
        cargo_home.join("config.toml"),
        "[registries.x]\ntoken = \"cfg-token-4711\"\n",
    )
    .unwrap();
    let real_cargo = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("cargo"))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok());
    if let Some(real) = &real_cargo {
        let name = real.file_name().unwrap();
        let copy = cargo_home.join("bin").join(name);
        if std::fs::hard_link(real, &copy).is_err() {
            std::fs::copy(real, &copy).unwrap();
        }
        if name != "cargo" {
            std::os::unix::fs::symlink(name, cargo_home.join("bin/cargo")).unwrap();
        }
    }
    let real_home = std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .unwrap();
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map_or_else(|| real_home.join(".rustup"), std::path::PathBuf::from);
    let path = std::env::join_paths(
        [home.join("bin"), cargo_home.join("bin")]
            .into_iter()
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    std::fs::write(
        ws.path().join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"node --version"}}"#,
    )
    .unwrap();
    let up = Up::start_env(
        ws.path(),
        &state.path().join("toolgate"),
        &[],
        &[
            ("HOME", home.to_str().unwrap()),
            ("CARGO_HOME", cargo_home.to_str().unwrap()),
            ("RUSTUP_HOME", rustup_home.to_str().unwrap()),
            ("PATH", path.to_str().unwrap()),
        ],
    );
    // `python3 -m base64 FILE` is auto under the test policy: a plain read of any file.
    let read = |file: &std::path::Path| {
        up.run(
            "agent",
            &[
                "run",
                "--",
                "python3",
                "-m",
                "base64",
                file.to_str().unwrap(),
            ],
        )
    };
    for secret in [home.join(".ssh/id_rsa"), home.join(".git-credentials")] {
        let o = read(&secret);
        assert_ne!(
            o.status.code(),
            Some(0),
            "{}: {}",
            secret.display(),
            text(&o)
        );
        assert!(o.stdout.is_empty(), "{}: {}", secret.display(), text(&o));
    }
    for tokens in ["credentials.toml", "config.toml"] {
        let o = read(&cargo_home.join(tokens));
        assert!(
            String::from_utf8_lossy(&o.stdout).trim().is_empty(),
            "{tokens} is readable in runs: {}",
            text(&o)
        );
    }

    let npm_present = std::env::split_paths(&path).any(|d| d.join("npm").is_file());
    if npm_present && system_node.is_some() {
        let o = up.run("agent", &["run", "--", "npm", "test"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("\nv"),
            "{}",
            text(&o)
        );
    } else {
        eprintln!("npm or node is not installed here: the node half is skipped");
    }
    if real_cargo.is_some() {
        // `cargo test` is what the test policy lets run; `--help` needs no crate.
        let o = up.run("agent", &["run", "--", "cargo", "test", "--help"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("cargo test"),
            "{}",
            text(&o)
        );
    } else {
        eprintln!("cargo is not installed here: the cargo half is skipped");
    }
}

/// `toolgate mcp` over stdio checks its token and its executor before it serves: an agent's
/// MCP host then shows the server as failed, with a line saying what to set, instead of a
/// healthy server whose every call fails.
#[test]
fn mcp_over_stdio_checks_its_token_and_executor_at_start() {
    let args = ["mcp", "--executor", "127.0.0.1:1", "--task-dir", "off"];
    let o = toolgate(&args, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for said in ["no agent token", "TOOLGATE_TOKEN", "--token-file"] {
        assert!(err.contains(said), "{said}: {err}");
    }
    let o = toolgate(&args, &[("TOOLGATE_TOKEN", "some-token")]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("cannot reach the executor at http://127.0.0.1:1"),
        "{err}"
    );

    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("d"));
    let o = toolgate(
        &["mcp", "--executor", &up.executor(), "--task-dir", "off"],
        &[("TOOLGATE_TOKEN", "not-the-agent-token")],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        err.contains("refused the agent token") && err.contains("--token-file"),
        "{err}"
    );
}

/// Issue 23, as it was reported: under the shipped default policy, with only the agent's token
/// and no human decision, `fs write` of a script and `npm test` planted a `.git/commondir`
/// whose config ran the agent's command at the human's next `git status`. The run is told
/// what was undone, and the human's git runs nothing.
#[test]
fn an_auto_npm_test_cannot_plant_what_the_humans_git_runs() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let w = ws.path();
    let mark = out.path().join("pwned");
    let git = |dir: &std::path::Path, args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
    };
    assert!(git(w, &["init", "-q", "."]).status.success());
    std::fs::remove_dir_all(w.join(".git/hooks")).unwrap();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../libs/policy-engine/default-policy.toml");
    let up = Up::start_policy(w, &state.path().join("d"), &[], &[], &shipped);

    let write = |path: &str, content: &str| {
        let mut cmd = up.command("agent", &["fs", "write", path]);
        cmd.stdin(std::process::Stdio::piped());
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), content.as_bytes()).unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "fs write {path}: {}", text(&o));
    };
    write(
        "package.json",
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"sh tools/ci.sh"}}"#,
    );
    let fsmonitor = format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}\"\\n'",
        mark.display()
    );
    write(
        "tools/ci.sh",
        &format!(
            "mkdir -p .git/x && cp .git/config .git/x/config && {fsmonitor} >> .git/x/config && echo x > .git/commondir\n\
             mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit\n\
             mv .git .git-old 2>/dev/null && echo RENAMED\n\
             echo 'import os; os.system(\"touch {m}\")' > evil.pth\n",
            m = mark.display()
        ),
    );
    let o = up.run("agent", &["run", "--", "npm", "test"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("RENAMED"),
        "{}",
        text(&o)
    );
    for path in [".git/commondir", ".git/hooks", "evil.pth"] {
        assert!(
            stderr.contains(&format!(
                "created protected path `{path}`; the executor reverted it"
            )),
            "{path}: {stderr}"
        );
    }
    let json = up.run("agent", &["run", "--json", "--", "npm", "test"]);
    let exited = String::from_utf8_lossy(&json.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "exited")
        .expect("an exited line");
    assert_eq!(exited["audit"]["completed"], true, "{exited}");
    assert!(
        exited["audit"]["violations"].as_array().is_some_and(|v| v
            .iter()
            .any(|v| v["path"] == ".git/commondir" && v["reverted"] == true)),
        "{exited}"
    );

    // The human's next commands.
    std::fs::write(w.join("notes.txt"), "n\n").unwrap();
    git(w, &["status"]);
    git(w, &["add", "notes.txt"]);
    git(
        w,
        &[
            "-c",
            "user.name=h",
            "-c",
            "user.email=h@example.com",
            "commit",
            "-qm",
            "h",
        ],
    );
    assert!(!mark.exists(), "the agent's command ran on the host");
    assert!(!w.join(".git/commondir").exists());
    assert!(!w.join(".git/hooks").exists());
}
