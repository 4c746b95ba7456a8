//! `toolgate approvals` against `toolgate up`: list, show, approve, deny, cancel and a
//! resumable watch, with the roles enforced.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::Value;
use support::{Up, text};

fn json(o: &std::process::Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

#[test]
fn ask_show_approve_repeat_and_complete() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    std::fs::create_dir(ws.path().join("build")).unwrap();

    let ask = up.run("agent", &["run", "--", "rm", "-rf", "build"]);
    assert_eq!(ask.status.code(), Some(75), "{}", text(&ask));
    let id = support::awaited_approval(&ask);

    let list = json(&up.run(
        "approver",
        &["approvals", "list", "--state", "pending", "--json"],
    ));
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["approval_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()]);
    let table = up.run("approver", &["approvals", "list"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains(&id) && table.contains("pending") && table.contains("rm -rf build"),
        "{table}"
    );
    let none = up.run("approver", &["approvals", "list", "--state", "denied"]);
    assert!(String::from_utf8_lossy(&none.stdout).contains("no approvals match"));

    let show = up.run("approver", &["approvals", "show", &id]);
    assert!(show.status.success(), "{}", text(&show));
    let show = String::from_utf8_lossy(&show.stdout);
    for want in [
        "state       pending",
        "argv        rm -rf build",
        "commands:",
        "[ask] rm -rf build",
        "session     cli-test",
    ] {
        assert!(show.contains(want), "{want:?} missing from:\n{show}");
    }

    // The agent may not approve, not even with the right id.
    let selfie = up.run("agent", &["approvals", "approve", &id]);
    assert_eq!(selfie.status.code(), Some(1), "{}", text(&selfie));
    assert!(
        String::from_utf8_lossy(&selfie.stderr).contains("PERMISSION_DENIED"),
        "{}",
        text(&selfie)
    );

    let ok = json(&up.run(
        "approver",
        &[
            "approvals",
            "approve",
            &id,
            "--reason",
            "generated files",
            "--ttl",
            "10m",
            "--json",
        ],
    ));
    assert_eq!(ok["state"], "approved");
    assert_eq!(ok["decided_by"], "approver");
    assert_eq!(ok["reason"], "generated files");
    assert_eq!(ok["scope"], "once");

    // A second decision fails cleanly.
    let twice = up.run("approver", &["approvals", "deny", &id]);
    assert_eq!(twice.status.code(), Some(1), "{}", text(&twice));
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains("APPROVAL_NOT_PENDING"),
        "{}",
        text(&twice)
    );

    let run = up.run("agent", &["run", "--", "rm", "-rf", "build"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(!ws.path().join("build").exists());

    // The outcome is linked in the ledger; a watch from the start of the ledger shows it.
    let mut watch = up
        .command(
            "approver",
            &["approvals", "watch", "--json", "--cursor", "0"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    // Each event carries the approval as it is now; the first one is its creation.
    let mut kinds = Vec::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        assert_eq!(v["approval"]["approval_id"], id.as_str());
        assert!(!v["cursor"].as_str().unwrap().is_empty());
        kinds.push(v["kind"].as_str().unwrap().to_owned());
        if v["approval"]["state"] == "completed" {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("created"),
        "{kinds:?}"
    );
    let done = json(&up.run("approver", &["approvals", "show", &id, "--json"]));
    assert_eq!(done["state"], "completed");
    assert!(!done["consumed_decision_id"].as_str().unwrap().is_empty());
}

#[test]
fn cancel_is_final_and_watch_resumes_from_a_cursor() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));

    let mut watch = up
        .command("approver", &["approvals", "watch", "--session", "cli-test"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();

    let first = up.run("agent", &["run", "--", "rm", "-rf", "a"]);
    let a = support::awaited_approval(&first);
    // Lines are `CURSOR KIND ID STATE session=.. principal=.. CALL`.
    let line = lines.next().unwrap().unwrap();
    let fields: Vec<&str> = line.split(' ').collect();
    // `snapshot` when the watch started after the approval was created, else `created`.
    assert!(matches!(fields[1], "created" | "snapshot"), "{line}");
    assert_eq!(fields[2..4], [a.as_str(), "pending"], "{line}");
    assert!(
        line.contains("session=cli-test principal=agent process.run rm -rf a"),
        "{line}"
    );
    let cursor = fields[0].to_owned();
    let _ = watch.kill();
    let _ = watch.wait();

    // Things happen while nobody watches.
    let second = up.run("agent", &["run", "--", "rm", "-rf", "b"]);
    let b = support::awaited_approval(&second);
    // The asking agent may cancel its own request.
    let c = up.run(
        "agent",
        &["approvals", "cancel", &a, "--reason", "not needed"],
    );
    assert!(c.status.success(), "{}", text(&c));
    assert!(
        String::from_utf8_lossy(&c.stdout).contains("cancelled"),
        "{}",
        text(&c)
    );
    let late = up.run("approver", &["approvals", "approve", &a]);
    assert_eq!(late.status.code(), Some(1), "{}", text(&late));

    // Resuming from the cursor shows exactly what was missed, in order.
    let mut resumed = up
        .command(
            "approver",
            &[
                "approvals",
                "watch",
                "--session",
                "cli-test",
                "--cursor",
                &cursor,
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(resumed.stdout.take().unwrap()).lines();
    let next: Vec<String> = (0..2).map(|_| lines.next().unwrap().unwrap()).collect();
    let _ = resumed.kill();
    let _ = resumed.wait();
    let seen: Vec<(&str, &str, &str)> = next
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[1], f[2], f[3])
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("created", b.as_str(), "pending"),
            ("updated", a.as_str(), "cancelled")
        ],
        "{next:?}"
    );
}

fn sha256_hex(content: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(content))
}

/// Approves `id` once as the approver.
fn approve(up: &Up, id: &str) {
    let ok = up.run("approver", &["approvals", "approve", id]);
    assert!(ok.status.success(), "{}", text(&ok));
}

/// After `sh build.sh` was approved, the agent rewrote build.sh: the approval must not cover
/// the new content, whether the call is an argv or a script and whether the file is rewritten
/// on disk or through the fs API. The unchanged file stays covered.
#[test]
fn a_script_rewritten_after_its_approval_needs_a_new_approval() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    let approved = b"echo approved > out.txt\n";
    std::fs::write(ws.path().join("build.sh"), approved).unwrap();

    let ask = up.run("agent", &["run", "--", "sh", "build.sh"]);
    assert_eq!(ask.status.code(), Some(75), "{}", text(&ask));
    let first = support::awaited_approval(&ask);
    // The approver sees which content the approval binds.
    let show = up.run("approver", &["approvals", "show", &first]);
    let show = String::from_utf8_lossy(&show.stdout);
    let binds = format!(
        "binds       build.sh sha256:{}…",
        &sha256_hex(approved)[..16]
    );
    assert!(show.contains(&binds), "{binds:?} missing from:\n{show}");
    approve(&up, &first);

    // The agent rewrites the script on disk after the approval.
    std::fs::write(ws.path().join("build.sh"), b"echo rewritten > out.txt\n").unwrap();
    let again = up.run("agent", &["run", "--", "sh", "build.sh"]);
    assert_eq!(again.status.code(), Some(75), "{}", text(&again));
    let second = support::awaited_approval(&again);
    assert_ne!(second, first, "the old approval was reused for new content");
    assert!(
        !ws.path().join("out.txt").exists(),
        "the rewritten script ran"
    );

    // Approved as it is now, the unchanged file is covered and runs.
    approve(&up, &second);
    let run = up.run("agent", &["run", "--", "sh", "build.sh"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "rewritten\n"
    );

    // The same through a script, rewritten through the fs API.
    let script = ["run", "--script", "cd . && bash ./build.sh"];
    let ask = up.run("agent", &script);
    assert_eq!(ask.status.code(), Some(75), "{}", text(&ask));
    let third = support::awaited_approval(&ask);
    approve(&up, &third);
    let mut write = up
        .command("agent", &["fs", "write", "build.sh"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut write.stdin.take().unwrap(), b"echo api > out.txt\n").unwrap();
    let written = write.wait_with_output().unwrap();
    assert!(written.status.success(), "{}", text(&written));
    let again = up.run("agent", &script);
    assert_eq!(again.status.code(), Some(75), "{}", text(&again));
    assert_ne!(support::awaited_approval(&again), third);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "rewritten\n"
    );
}

/// Whether a terminal shows `s` as it is: no control character but the newlines that end
/// lines, nothing that reorders or hides text.
fn inert(s: &str) -> bool {
    !s.chars()
        .any(|c| c != '\n' && toolgate_core::display::needs_escape(c))
}

/// In tmux an approver saw `cargo fmt --check` and approved `rm -rf src`: the request's
/// escape sequences erased the line. Nothing in `approvals list`/`show`/`watch`, text or
/// JSON, may carry a raw control byte or a bidi override.
#[test]
fn escape_sequences_in_a_request_never_reach_the_approvers_terminal() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    let hostile = "rm -rf src\x1b[2K\r\x1b[1Acargo fmt --check \u{202e}\u{9b}2J\u{200b}";
    let ask = up.run(
        "agent",
        &[
            "run",
            "--description",
            "format\x1b]8;;http://x\x07check\x1b]8;;\x07\x08\x08",
            "--script",
            hostile,
        ],
    );
    assert_eq!(ask.status.code(), Some(75), "{}", text(&ask));
    let id = support::awaited_approval(&ask);

    for args in [
        vec!["approvals", "list"],
        vec!["approvals", "show", &id],
        vec!["approvals", "list", "--json"],
        vec!["approvals", "show", &id, "--json"],
        vec!["approvals", "approve", &id],
    ] {
        let o = up.run("approver", &args);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(inert(&out), "{args:?} printed raw controls:\n{out:?}");
        if args.contains(&"--json") {
            // Still real JSON, decoding to exactly what the agent sent.
            let v: Value = serde_json::from_str(&out).unwrap();
            let a = if v.is_array() { &v[0] } else { &v };
            assert_eq!(a["call"]["script"], hostile);
        } else if args[1] == "show" {
            assert!(
                out.contains(r"rm -rf src\x1b[2K\r\x1b[1Acargo fmt --check \u{202e}\u{9b}2J"),
                "{out}"
            );
        }
    }
    // The server's own display-safe rendering is inert too.
    let v = json(&up.run("approver", &["approvals", "show", &id, "--json"]));
    let display = v["display"].as_str().unwrap();
    assert!(
        inert(display) && display.contains("rm -rf src\\x1b[2K"),
        "{display}"
    );
}

/// `approvals show` proposes the rule, `approvals approve --remember` learns it and prints it
/// verbatim, the same shape then runs without asking (its rule `learned.*`), another shape or
/// session still asks, `rules list` shows it and `rules revoke` ends it. A rule that may not
/// be learned is refused with its reason, and nothing is approved.
#[test]
fn remember_turns_an_approval_into_a_rule_until_revoked() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let up = Up::start(ws.path(), &state.path().join("toolgate"));
    let push = ["run", "--json", "--", "git", "push", "origin", "main"];

    let ask = up.run("agent", &["run", "--", "git", "push", "origin", "main"]);
    assert_eq!(
        ask.status.code(),
        Some(75),
        "git push must ask: {}",
        text(&ask)
    );
    let id = support::awaited_approval(&ask);

    let show = up.run("approver", &["approvals", "show", &id]);
    let show_text = String::from_utf8_lossy(&show.stdout).into_owned();
    assert!(
        show_text.contains("this rule would be learned:\n    git push origin main\n"),
        "{show_text}"
    );
    let show = json(&up.run("approver", &["approvals", "show", &id, "--json"]));
    assert!(
        show["proposed_rule"]["pattern"]
            .as_str()
            .unwrap()
            .starts_with("git push origin main\n"),
        "{show}"
    );

    // --scope once makes no rule; workspace and all are rule scopes only.
    let bad = up.run(
        "approver",
        &["approvals", "approve", &id, "--remember", "--scope", "once"],
    );
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    let bad = up.run("approver", &["approvals", "approve", &id, "--scope", "all"]);
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(text(&bad).contains("--remember"), "{}", text(&bad));

    let ok = up.run(
        "approver",
        &[
            "approvals",
            "approve",
            &id,
            "--remember",
            "--scope",
            "session",
            "--for",
            "7d",
        ],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let ok = String::from_utf8_lossy(&ok.stdout).into_owned();
    assert!(ok.contains("approved by approver"), "{ok}");
    assert!(ok.contains("learned rule learned.rul_"), "{ok}");
    assert!(ok.contains("scope session cli-test"), "{ok}");
    assert!(ok.contains("\n    git push origin main\n"), "{ok}");

    // The same shape runs without asking, decided by the learned rule (git itself fails:
    // the workspace is no repository; what matters is that nobody was asked).
    for _ in 0..2 {
        let again = up.run("agent", &push);
        assert_ne!(again.status.code(), Some(75), "{}", text(&again));
        let started = String::from_utf8_lossy(&again.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["event"] == "started")
            .unwrap_or_else(|| panic!("no started event: {}", text(&again)));
        assert!(
            started["rule_id"]
                .as_str()
                .unwrap()
                .starts_with("learned.rul_"),
            "{started}"
        );
    }
    // Another shape, or another session, still asks.
    let other = up.run("agent", &["run", "--", "git", "push", "origin", "dev"]);
    assert_eq!(other.status.code(), Some(75), "{}", text(&other));
    let elsewhere = up.run(
        "agent",
        &[
            "run",
            "--session",
            "other",
            "--",
            "git",
            "push",
            "origin",
            "main",
        ],
    );
    assert_eq!(elsewhere.status.code(), Some(75), "{}", text(&elsewhere));

    let rules = json(&up.run("approver", &["rules", "list", "--json"]));
    let listed = rules["rules"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{rules}");
    let rule_id = listed[0]["rule_id"].as_str().unwrap().to_owned();
    assert_eq!(listed[0]["scope"], "session");
    assert_eq!(listed[0]["source_approval_id"], id.as_str());
    let table = up.run("approver", &["rules", "list"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("git push origin main"),
        "{}",
        text(&table)
    );
    // Agents can neither list nor revoke.
    let agent = up.run("agent", &["rules", "revoke", &rule_id]);
    assert_eq!(agent.status.code(), Some(1), "{}", text(&agent));

    let revoked = up.run(
        "approver",
        &["rules", "revoke", &format!("learned.{rule_id}")],
    );
    assert!(revoked.status.success(), "{}", text(&revoked));
    assert!(String::from_utf8_lossy(&revoked.stdout).contains("revoked"));
    // The approval itself was never needed while the rule stood; it still covers its exact
    // call once. After that the shape asks again.
    let once = up.run("agent", &["run", "--", "git", "push", "origin", "main"]);
    assert_ne!(once.status.code(), Some(75), "{}", text(&once));
    let asks = up.run("agent", &["run", "--", "git", "push", "origin", "main"]);
    assert_eq!(asks.status.code(), Some(75), "{}", text(&asks));
    let again = up.run("approver", &["rules", "revoke", &rule_id]);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("RULE_NOT_FOUND"), "{}", text(&again));

    // A banned prefix: refused with its reason, and the approval still waits.
    let shell = up.run(
        "agent",
        &["run", "--", "bash", "-c", "git push origin main"],
    );
    assert_eq!(shell.status.code(), Some(75), "{}", text(&shell));
    let sid = support::awaited_approval(&shell);
    let show = up.run("approver", &["approvals", "show", &sid]);
    assert!(
        String::from_utf8_lossy(&show.stdout)
            .contains("no rule can be learned from this call (RULE_BANNED_PREFIX)"),
        "{}",
        text(&show)
    );
    let refused = up.run("approver", &["approvals", "approve", &sid, "--remember"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("RULE_BANNED_PREFIX"),
        "{}",
        text(&refused)
    );
    let still = json(&up.run("approver", &["approvals", "show", &sid, "--json"]));
    assert_eq!(still["state"], "pending");
}
