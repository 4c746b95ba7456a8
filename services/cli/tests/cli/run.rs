//! `toolgate run` against `toolgate up`: output streamed live as bytes, the child's exit status
//! as ours, and distinct codes for a timeout, a refusal, a pending approval and a failed start.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use support::{Up, text};

#[test]
fn exit_codes_are_propagated() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));

    let o = up.run(
        "agent",
        &["run", "--script", "echo out; echo err >&2; exit 3"],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert_eq!(o.stdout, b"out\n");
    assert_eq!(o.stderr, b"err\n");

    let o = up.run("agent", &["run", "--", "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = up.run("agent", &["run", "--", "false"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));

    let o = up.run("agent", &["run", "--timeout", "300ms", "--", "sleep", "30"]);
    assert_eq!(o.status.code(), Some(124), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("timed out"));

    let o = up.run("agent", &["run", "--", "nosuchprogram-xyz"]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o));

    // A policy deny: 126, with the rule named.
    let o = up.run("agent", &["run", "--", "shutdown", "-h", "now"]);
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("POLICY_DENIED") && err.contains("rule_id: no-shutdown"),
        "{err}"
    );

    // An ask without --wait: 75 and the approval id.
    let o = up.run("agent", &["run", "--", "rm", "-rf", "build"]);
    assert_eq!(o.status.code(), Some(75), "{}", text(&o));
    assert!(!support::awaited_approval(&o).is_empty());

    // Unreachable executor: 125.
    let o = up
        .command(
            "agent",
            &["run", "--executor", "http://127.0.0.1:1", "--", "true"],
        )
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", text(&o));
}

#[test]
fn output_is_streamed_while_the_child_runs() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    // The child prints, then waits until the test creates `go`: the first line can only
    // reach us before the exit if it is streamed live.
    let mut child = up
        .command(
            "agent",
            &[
                "run",
                "--script",
                "echo first; while test ! -e go; do sleep 0.05; done; printf 'second\\377\\n'",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "first\n");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    std::fs::write(ws.path().join("go"), b"").unwrap();
    let mut rest = Vec::new();
    // The child's own short output, to its end: what the test asserts on.
    #[allow(clippy::disallowed_methods)]
    std::io::Read::read_to_end(&mut out, &mut rest).unwrap();
    // Bytes, not text: the invalid UTF-8 byte arrives as it was written.
    assert_eq!(rest, b"second\xff\n");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_waiting_run_prints_the_approval_and_exits_126_when_denied() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    std::fs::create_dir(ws.path().join("build")).unwrap();
    let mut child = up
        .command(
            "agent",
            &["run", "--wait", "60s", "--", "rm", "-rf", "build"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let id = loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr: {seen}");
        seen.push_str(&line);
        if let Some(id) = support::approval_in(&line) {
            break id;
        }
    };
    let d = up.run(
        "approver",
        &[
            "approvals",
            "deny",
            &id,
            "--message",
            "use cargo clean instead",
        ],
    );
    assert!(d.status.success(), "{}", text(&d));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(126), "{seen}{rest}");
    assert!(rest.contains("use cargo clean instead"), "{rest}");
    assert!(ws.path().join("build").exists());
}

/// `run --json`: every event a JSON line on stdout, the exit status unchanged.
#[test]
fn json_prints_one_line_per_event() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    let o = up.run(
        "agent",
        &[
            "run",
            "--json",
            "--script",
            "echo out; printf '\\377' >&2; exit 3",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let events: Vec<serde_json::Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"started"), "{events:?}");
    assert_eq!(kinds.last(), Some(&"exited"), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["stream"] == "stdout" && e["data"] == "out\n")
    );
    assert!(
        events
            .iter()
            .any(|e| e["stream"] == "stderr" && e["data_base64"] == "/w=="),
        "bytes that are not UTF-8 travel as base64: {events:?}"
    );
    assert_eq!(events.last().unwrap()["exit_code"], 3);
    assert!(
        events[0]["decision_id"]
            .as_str()
            .unwrap()
            .starts_with("dec_")
    );

    // A refusal is a JSON line too, with the usual status.
    let o = up.run("agent", &["run", "--json", "--", "shutdown", "-h", "now"]);
    assert_eq!(o.status.code(), Some(126), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["event"], "refused");
    assert_eq!(v["reason"], "POLICY_DENIED");
    assert_eq!(v["metadata"]["rule_id"], "no-shutdown");
}

/// Input the CLI sends in one request (`fs write` from standard input, `run --stdin-file`)
/// is read up to the executor's default request limit and refused beyond it, before anything
/// is sent: nothing is written, nothing runs.
#[test]
fn input_beyond_an_executors_request_limit_is_refused_before_sending() {
    use std::io::Write as _;
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    let too_big = (64 << 20) + 1;

    let mut child = up
        .command("agent", &["fs", "write", "big.bin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        // The CLI stops reading at the cap; a broken pipe after it is expected.
        let _ = stdin.write_all(&vec![b'x'; too_big]);
    });
    let o = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("standard input holds more than 64 MiB"),
        "{err}"
    );
    assert!(!ws.path().join("big.bin").exists());

    let file = state.path().join("stdin.bin");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(too_big as u64)
        .unwrap();
    let marker = ws.path().join("ran");
    let o = up.run(
        "agent",
        &[
            "run",
            "--stdin-file",
            file.to_str().unwrap(),
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("holds more than 64 MiB"),
        "{}",
        text(&o)
    );
    assert!(!marker.exists(), "nothing ran");
}
