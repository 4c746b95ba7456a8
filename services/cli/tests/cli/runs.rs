//! Background runs and sessions from the command line, against `toolgate up`: `run
//! --background` returns with the run id while the run goes on, `runs list` shows it, `runs
//! logs` reads (or follows) its output with gaps named, `runs stop` ends it; `run
//! --persist-cwd` keeps a `cd` for the session's next run.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use support::{Up, text};

/// Whether an exit status in words says the run was ended from outside (a signal, or the
/// executor's cancellation), not that it exited by itself.
fn stopped(status: &str) -> bool {
    status.starts_with("killed by SIG") || status.starts_with("cancelled")
}

/// `run --background --json`: the object a script needs to come back to the run.
fn start(up: &Up, args: &[&str]) -> serde_json::Value {
    let mut argv = vec!["run", "--background", "--json"];
    argv.extend_from_slice(args);
    let o = up.run("agent", &argv);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)))
}

/// `runs list --json` (with `--all`: finished runs too), the run with `id` in it.
fn listed(up: &Up, all: bool, id: &str) -> Option<serde_json::Value> {
    let mut argv = vec!["runs", "list", "--json"];
    if all {
        argv.push("--all");
    }
    let o = up.run("agent", &argv);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == id)
        .cloned()
}

/// Follows `runs logs ID --follow` until a stdout line equals `line`; the follower is left
/// running (detaching never affects the run) and returned.
fn follow_until(up: &Up, id: &str, line: &str) -> std::process::Child {
    let mut child = up
        .command("agent", &["runs", "logs", id, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        if out.read_line(&mut l).unwrap_or(0) == 0 {
            break;
        }
        seen.push_str(&l);
        if l.trim_end() == line {
            return child;
        }
    }
    let status = child.wait();
    panic!("the follower ended ({status:?}) before `{line}`: {seen}");
}

#[test]
fn a_background_run_is_listed_read_and_stopped() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));

    let script = "echo ready; i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.05; done";
    let v = start(&up, &["--script", script]);
    let id = v["run_id"].as_str().expect("run_id").to_owned();
    assert!(!id.is_empty(), "{v}");
    assert_eq!(v["session_id"], "cli-test", "{v}");
    assert!(v["pid"].as_i64().unwrap() > 0, "{v}");
    assert!(
        v["decision_id"].as_str().unwrap().starts_with("dec_"),
        "{v}"
    );
    assert!(
        !v["executor"]["executor_id"].as_str().unwrap().is_empty(),
        "the executor that holds the run is named: {v}"
    );

    // The call returned; the run goes on and is listed as running.
    let r = listed(&up, false, &id).expect("the run is listed");
    assert_eq!(r["state"], "running", "{r}");
    assert_eq!(r["session_id"], "cli-test", "{r}");
    assert!(r["command"].as_str().unwrap().contains("echo ready"), "{r}");
    let o = up.run("agent", &["runs", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        row.contains("running") && row.contains("echo ready"),
        "{row}"
    );

    // Its output, live and then re-read from any offset.
    let mut follower = follow_until(&up, &id, "tick 3");
    let _ = follower.kill();
    let _ = follower.wait();
    let o = up.run("agent", &["runs", "logs", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        o.stdout.starts_with(b"ready\ntick 1\ntick 2\ntick 3\n"),
        "{}",
        text(&o)
    );
    let o = up.run("agent", &["runs", "logs", &id, "--offset", "6"]);
    assert!(o.stdout.starts_with(b"tick 1\ntick 2\n"), "{}", text(&o));
    // The follower went away; the run did not.
    assert_eq!(listed(&up, false, &id).unwrap()["state"], "running");

    // A run of another session is refused before anything is sent to it.
    let o = up.run("agent", &["runs", "stop", &id, "--session", "someone-else"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a run of session someone-else"),
        "{}",
        text(&o)
    );
    assert_eq!(listed(&up, false, &id).unwrap()["state"], "running");

    // Stop it; a follower sees its end.
    let o = up.run("agent", &["runs", "stop", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!("run {id}")),
        "{}",
        text(&o)
    );
    let o = up.run("agent", &["runs", "logs", &id, "--follow"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(o.stdout.starts_with(b"ready\ntick 1\n"), "{}", text(&o));
    let end = String::from_utf8_lossy(&o.stderr);
    let end = end
        .lines()
        .find_map(|l| l.strip_prefix(&format!("toolgate: run {id} ")))
        .unwrap_or_else(|| panic!("{}", text(&o)));
    assert!(stopped(end), "{}", text(&o));
    assert!(listed(&up, false, &id).is_none(), "no longer running");
    let r = listed(&up, true, &id).expect("a finished run stays listed with --all");
    assert_eq!(r["state"], "exited", "{r}");
    assert!(stopped(r["status"].as_str().unwrap()), "{r}");
    assert_eq!(r["pid"], 0, "{r}");
    // Stopping it again answers how it ended.
    let o = up.run("agent", &["runs", "stop", &id, "--kill"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.strip_prefix(&format!("run {id}: "))
            .is_some_and(|s| s.trim_end() == r["status"]),
        "{}",
        text(&o)
    );

    // Without --json: the run id alone on stdout (for `id=$(toolgate run --background ...)`),
    // how to come back to it on stderr.
    let o = up.run("agent", &["run", "--background", "--", "sleep", "60"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let plain = String::from_utf8(o.stdout.clone()).unwrap();
    let plain = plain.trim_end();
    assert!(!plain.is_empty() && !plain.contains('\n'), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("toolgate runs logs {plain}")),
        "{}",
        text(&o)
    );
    assert_eq!(listed(&up, false, plain).unwrap()["command"], "sleep 60");
    let o = up.run("agent", &["runs", "stop", plain, "--kill"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // An unknown run: the reason and the message, exit 1.
    let o = up.run("agent", &["runs", "logs", "run_nosuchrun", "--session", ""]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("NOT_FOUND RUN_NOT_FOUND"),
        "{}",
        text(&o)
    );
}

/// A background run's output past its cap: the head and the tail are kept, the bytes between
/// are named as not retained on stderr, and reading starts again at the tail.
#[test]
fn logs_name_the_bytes_the_executor_did_not_keep() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    // 3 MB past the default 1 MiB cap; the default tail keeps the last 16 KiB.
    let v = start(
        &up,
        &[
            "--script",
            "head -c 3000000 /dev/zero | tr '\\0' a; echo END",
        ],
    );
    let id = v["run_id"].as_str().unwrap().to_owned();
    let o = up.run("agent", &["runs", "logs", &id, "--follow"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("exited with 0"),
        "{}",
        text(&o)
    );
    let total: u64 = 3_000_004;
    let (head, tail) = (1u64 << 20, 16u64 << 10);
    let o = up.run("agent", &["runs", "logs", &id]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("bytes {head}..{} not retained", total - tail)),
        "{err}"
    );
    assert_eq!(o.stdout.len() as u64, head + tail, "{err}");
    assert!(o.stdout.ends_with(b"aaaaEND\n"));
    // An offset inside the gap goes on at the tail, naming what it skipped.
    let o = up.run("agent", &["runs", "logs", &id, "--offset", "2000000"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("bytes 2000000..{} not retained", total - tail)),
        "{err}"
    );
    assert_eq!(o.stdout.len() as u64, tail);
}

/// `run --persist-cwd`: a `cd` in one run is where the session's next `--persist-cwd` run
/// starts; a run without the flag, or another session, starts at the root.
#[test]
fn persist_cwd_keeps_a_cd_for_the_sessions_next_run() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    std::fs::create_dir(ws.path().join("sub")).unwrap();

    let o = up.run(
        "agent",
        &["run", "--persist-cwd", "--json", "--script", "cd sub"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["session"]["cwd"], "sub", "{last}");

    let pwd = |args: &[&str]| {
        let mut argv = vec!["run"];
        argv.extend_from_slice(args);
        argv.extend(["--", "pwd"]);
        let o = up.run("agent", &argv);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    assert!(pwd(&["--persist-cwd"]).trim_end().ends_with("/sub"));
    assert!(
        !pwd(&[]).trim_end().ends_with("/sub"),
        "not without the flag"
    );
    assert!(
        !pwd(&["--persist-cwd", "--session", "another"])
            .trim_end()
            .ends_with("/sub"),
        "not in another session"
    );
}
