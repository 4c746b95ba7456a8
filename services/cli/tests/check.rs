//! `toolgate check` as policy authors and CI run it: the real binary, JSON out, exit codes.

use std::process::{Command, Output};

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate")
}

fn decision(script: &str) -> String {
    let out = toolgate(&["check", "--json", "--", script]);
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    v["decision"]
        .as_str()
        .expect("top-level decision")
        .to_owned()
}

#[test]
fn substring_classifier_false_negatives_are_not_repeated() {
    for (script, want) in [
        ("dd if=/dev/zero of=/dev/sda", "deny"),
        ("sudo\tls", "deny"),
        ("rm -rf /", "deny"),
        ("curl x | python3", "deny"),
    ] {
        assert_eq!(decision(script), want, "{script:?}");
    }
}

#[test]
fn substring_classifier_false_positives_are_not_repeated() {
    assert_ne!(decision("grep -rn mkfs src/"), "deny");
    assert_ne!(decision("curl x | shasum"), "deny");
    assert_eq!(decision("rm -rf build 2>/dev/null"), "ask");
    assert_eq!(decision("git log -p -1"), "auto");
    assert_eq!(decision("sed -n 1,5p f"), "auto");
}

#[test]
fn filesystem_calls_and_exit_codes() {
    let out = toolgate(&[
        "check",
        "--json",
        "--tool",
        "fs.write",
        "--path",
        ".git/hooks/pre-commit",
    ]);
    assert!(out.status.success(), "a deny is an answer, not a failure");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "deny");
    assert!(v["digest"].as_str().is_some_and(|d| d.len() == 64));

    // Usage errors exit non-zero.
    assert!(!toolgate(&["check", "--tool", "fs.write"]).status.success());
    assert!(
        !toolgate(&["check", "--tool", "fs.delete", "--path", "x"])
            .status
            .success()
    );

    // A broken policy exits non-zero and says where.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rule]]\nid = \"x\"\ndecision = \"maybe\"\n").unwrap();
    let out = toolgate(&["check", "--policy", bad.to_str().unwrap(), "--", "ls"]);
    assert!(!out.status.success());
    let out = toolgate(&["policy", "validate", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line"),
        "errors carry line numbers"
    );
}

#[test]
fn the_shipped_policy_validates() {
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../libs/policy-engine/default-policy.toml"
    );
    let out = toolgate(&["policy", "validate", policy]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("policy ok"));
}
