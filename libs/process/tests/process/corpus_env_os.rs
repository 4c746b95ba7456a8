//! Environment and OS-surface attacks from `attacks.yaml` (ENV-01/02/03, OS-02, OS-03) plus the
//! non-interactive settings that keep pagers and prompts from hanging a run.
//!
//! The canary tests re-run this test binary as a child with `CANARY_SECRET` in *its* environment
//! (the suite never mutates its own), and the inner test does the actual checking.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use toolgate_process::{RunRequest, Status};

const CANARY: &str = "canary-123";
const INNER_FLAG: &str = "TOOLGATE_PROCESS_CANARY_CHILD";

/// Runs `test_name` of this binary in a child whose environment holds the canary.
fn rerun_with_canary(test_name: &str) {
    let exe = std::env::current_exe().unwrap();
    // libtest names a test by its module path below the crate.
    let test_name = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test_name}"),
        None => test_name.to_owned(),
    };
    let out = std::process::Command::new(exe)
        .args(["--exact", &test_name, "--nocapture", "--test-threads=1"])
        .env("CANARY_SECRET", CANARY)
        .env(INNER_FLAG, "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "inner test failed:\n{text}");
    assert!(text.contains("1 passed"), "inner test did not run:\n{text}");
}

fn inner() -> bool {
    std::env::var_os(INNER_FLAG).is_some()
}

#[test]
fn env_01_02_03_canary_never_reaches_a_child() {
    if inner() {
        return;
    }
    rerun_with_canary("env_canary_inner");
}

#[tokio::test]
async fn env_canary_inner() {
    if !inner() {
        return;
    }
    assert_eq!(
        std::env::var("CANARY_SECRET").unwrap(),
        CANARY,
        "precondition: canary is set"
    );
    let runner = runner();
    let allowed: BTreeSet<&str> = [
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "PAGER",
        "GIT_PAGER",
        "GIT_TERMINAL_PROMPT",
        "EDITOR",
        "CI",
        // git's discovery and configuration are pinned for every run.
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CONFIG_GLOBAL",
        // Set by bash itself / by `env` being exec'd from bash.
        "PWD",
        "SHLVL",
        "_",
    ]
    .into_iter()
    .collect();

    // ENV-01
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["env"], cwd)))
            .unwrap(),
    )
    .await;
    let text = out.stdout_str();
    assert!(!text.contains(CANARY), "{text}");
    for line in text.lines() {
        let name = line.split('=').next().unwrap();
        assert!(
            allowed.contains(name),
            "unexpected variable {name} in child env"
        );
    }
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "env", cwd).await;
    assert!(!out.stdout_str().contains(CANARY));

    // ENV-02
    let (_ws, cwd) = workspace();
    let out = run_script(
        &runner,
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c canary-123",
        cwd,
    )
    .await;
    assert_eq!(out.stdout_str().trim(), "0");

    // ENV-03. The corpus greps for the literal, which also matches grep's (and bash's) own command
    // line in `ps` output; the bracket keeps the pattern from matching itself, so only a real
    // leak of the environment would count.
    let (_ws, cwd) = workspace();
    let out = run_script(
        &runner,
        "ps eww -A 2>/dev/null | grep -c 'canary-12[3]'",
        cwd,
    )
    .await;
    assert_eq!(out.stdout_str().trim(), "0");
}

#[tokio::test]
async fn env_fixed_allowlist_values_and_private_home() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = run_script(
        &runner,
        "echo \"$PATH|$LANG|$TERM|$PAGER|$GIT_PAGER|$GIT_TERMINAL_PROMPT|$EDITOR|$CI\"; \
         test -d \"$HOME\" && test -w \"$HOME\" && echo home-ok; stat -c %a \"$HOME\"",
        cwd,
    )
    .await;
    assert_eq!(
        out.stdout_str(),
        format!(
            "{}|C.UTF-8|dumb|cat|cat|0|true|1\nhome-ok\n700\n",
            toolgate_process::config::DEFAULT_PATH
        )
    );
}

#[tokio::test]
async fn env_additions_are_allowlisted() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("echo $RUST_LOG", cwd);
    req.env = vec![("RUST_LOG".into(), "debug".into())];
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.stdout, b"debug\n");

    for name in ["LD_PRELOAD", "PATH", "SECRET_TOKEN", "BASH_ENV"] {
        let (_ws, cwd) = workspace();
        let mut req = RunRequest::argv(["true"], cwd);
        req.env = vec![(name.into(), "x".into())];
        let err = runner.try_run(spec(req)).unwrap_err();
        assert_eq!(
            toolgate_core::ReasonedError::reason(&err),
            toolgate_core::Reason::InvalidRequest
        );
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[tokio::test]
async fn os_02_only_fds_0_1_2_are_open() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["ls", "/proc/self/fd"], cwd)))
            .unwrap(),
    )
    .await;
    let fds: BTreeSet<String> = out.stdout_str().lines().map(str::to_owned).collect();
    // `ls` opens the directory it lists as fd 3.
    let allowed: BTreeSet<String> = ["0", "1", "2", "3"].iter().map(|s| s.to_string()).collect();
    assert!(fds.is_subset(&allowed), "open fds: {fds:?}");
    assert!(fds.contains("0") && fds.contains("2"));
}

#[tokio::test]
async fn os_03_tiocsti_fails_without_a_terminal() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = run_script(
        &runner,
        "python3 -c 'import fcntl,termios; fcntl.ioctl(0, termios.TIOCSTI, b\"x\")'",
        cwd,
    )
    .await;
    assert!(
        matches!(out.exited.status, Status::Exited(code) if code != 0),
        "{:?}",
        out.exited.status
    );
    // Also with a stdin pipe instead of /dev/null.
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(
        [
            "python3",
            "-c",
            "import fcntl,termios; fcntl.ioctl(0, termios.TIOCSTI, b'x')",
        ],
        cwd,
    );
    req.stdin = Some(bytes::Bytes::from_static(b"data"));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(matches!(out.exited.status, Status::Exited(code) if code != 0));
}

#[tokio::test]
async fn os_no_new_privs_and_session_leader() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    // Field 6 of /proc/self/stat is the session id; a session leader has sid == pid.
    let out = run_script(
        &runner,
        "grep NoNewPrivs /proc/self/status; ulimit -c; \
         read -r pid _ _ _ _ sid _ < /proc/self/stat; [ \"$pid\" = \"$sid\" ] && echo leader",
        cwd,
    )
    .await;
    let text = out.stdout_str();
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("\n0\n"), "core limit is 0: {text}");
    assert!(text.contains("leader"), "{text}");
}

#[tokio::test]
async fn pager_programs_do_not_wait_for_a_terminal() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script(
        "git init -q . && git -c user.email=t@example.com -c user.name=t commit -q --allow-empty -m first \
         && git log --format=%s && git help -a >/dev/null 2>&1; echo done",
        cwd,
    );
    req.timeout = Some(Duration::from_secs(10));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(
        out.exited.status,
        Status::Exited(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout_str(), "first\ndone\n");
}

#[tokio::test]
async fn home_is_private_to_each_run() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let first = run_script(
        &runner,
        "echo secret > \"$HOME/note\"; ls \"$HOME\"; echo $HOME",
        cwd,
    )
    .await;
    let text = first.stdout_str();
    assert!(text.starts_with("note\n"), "{text}");
    let home = text.lines().nth(1).unwrap().to_owned();
    let (_ws, cwd) = workspace();
    let second = run_script(&runner, "ls -A \"$HOME\" | wc -l", cwd).await;
    assert_eq!(
        second.stdout_str().trim(),
        "0",
        "a later run sees an empty HOME"
    );
    // Nothing of the run is left on the executor's disk.
    let left = std::fs::read_dir(&home).map_or(0, |d| d.count());
    assert_eq!(left, 0, "{home} is not empty on the host");
}

#[tokio::test]
async fn trace_parent_reaches_the_child_and_limits_are_reported_before_the_run() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let req = RunRequest::script("echo \"$TRACEPARENT\"", cwd);
    let traced = spec(req).with_trace_parent(tp);
    let limits = runner.effective(&traced).unwrap();
    assert_eq!(limits.timeout, config().default_timeout);
    let out = collect(runner.try_run(traced).unwrap()).await;
    assert_eq!(out.stdout_str(), format!("{tp}\n"));

    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.env = vec![("SECRET_TOKEN".into(), "x".into())];
    let err = runner.effective(&spec(req)).unwrap_err();
    assert!(err.to_string().contains("SECRET_TOKEN"), "{err}");
}
