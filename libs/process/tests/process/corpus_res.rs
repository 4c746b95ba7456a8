//! Resource attacks from `attacks.yaml` (RES-*): floods, fork bombs, background children,
//! TERM-ignoring children, stdin and file-size limits. Every run must end, and nothing it
//! started may survive it.

use crate::common;

use std::time::Duration;

use common::*;
use toolgate_process::{CancelCause, Config, KillMechanism, Rlimits, RunRequest, Runner, Status};

#[tokio::test]
async fn res_out_01_yes_returns_at_timeout_truncated() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("yes", cwd);
    req.timeout = Some(Duration::from_millis(1500));
    req.stdout_cap = Some(64 * 1024);
    req.tail_bytes = Some(10);
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(
        matches!(out.exited.status, Status::TimedOut { .. }),
        "{:?}",
        out.exited.status
    );
    let s = &out.exited.stdout;
    assert!(s.truncated);
    assert_eq!(s.streamed_bytes, 64 * 1024);
    assert!(
        s.total_bytes > 1 << 20,
        "yes kept writing: {}",
        s.total_bytes
    );
    assert_eq!(&s.tail[..], b"y\ny\ny\ny\ny\n");
    assert!(out.stdout.chunks(2).all(|c| c == b"y\n"));
    assert!(out.elapsed < Duration::from_secs(5));
}

#[tokio::test]
async fn res_out_02_single_line_bomb_is_bounded_with_exact_totals() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    // The corpus uses 2e9 bytes; 3e8 exercises the same path (cap, drain, tail) in a fraction of
    // the time on two shared cores.
    let total: u64 = 300_000_000;
    let mut req = RunRequest::script(format!("head -c {total} /dev/zero | tr '\\0' a"), cwd);
    req.stdout_cap = Some(100_000);
    req.tail_bytes = Some(4096);
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.exited.status, Status::Exited(0));
    let s = &out.exited.stdout;
    assert_eq!(s.total_bytes, total);
    assert_eq!(s.streamed_bytes, 100_000);
    assert_eq!(s.tail.len(), 4096);
    assert_eq!(s.dropped_bytes, total - 100_000 - 4096);
    assert!(s.truncated);
    assert!(out.stdout.iter().all(|b| *b == b'a'));
    assert!(s.tail.iter().all(|b| *b == b'a'));
}

#[tokio::test]
async fn res_out_urandom_times_out_with_binary_head() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["cat", "/dev/urandom"], cwd);
    req.timeout = Some(Duration::from_millis(800));
    req.stdout_cap = Some(1 << 20);
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(matches!(out.exited.status, Status::TimedOut { .. }));
    assert_eq!(out.stdout.len(), 1 << 20);
    assert!(out.exited.stdout.total_bytes > 1 << 20);
    // Random bytes are almost surely not valid UTF-8: proof they were not decoded on the way.
    assert!(std::str::from_utf8(&out.stdout).is_err());
}

#[tokio::test]
async fn res_out_kill_on_cap_stops_the_flood() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["yes"], cwd);
    req.stdout_cap = Some(10_000);
    req.kill_on_cap = true;
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::OutputCap));
    assert_eq!(out.stdout.len(), 10_000);
    assert!(out.exited.stdout.truncated);
    assert!(out.elapsed < Duration::from_secs(3));
}

#[tokio::test]
async fn res_fork_01_fork_bomb_returns_and_leaves_nothing() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script(":(){ :|:& };:", cwd);
    req.timeout = Some(Duration::from_secs(3));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(
        out.elapsed < Duration::from_secs(6),
        "took {:?}",
        out.elapsed
    );
    let pid = out.started.unwrap().pid;
    assert!(!pid_exists(pid), "the bomb's init is reaped");
}

#[tokio::test]
async fn res_fork_02_background_loop_is_killed_at_timeout() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("while true; do sleep 1 & done", cwd);
    req.timeout = Some(Duration::from_millis(1500));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    // Either the timeout ends it, or bash gives up once the namespace's pid cap makes fork fail.
    assert!(
        matches!(
            out.exited.status,
            Status::TimedOut { .. } | Status::Exited(1..)
        ),
        "{:?}",
        out.exited.status
    );
    assert!(
        out.elapsed < Duration::from_secs(5),
        "took {:?}",
        out.elapsed
    );
    assert!(!pid_exists(out.started.unwrap().pid));
}

#[tokio::test]
async fn res_fork_pid_namespace_caps_process_count_even_for_root() {
    let runner = runner();
    if runner.capabilities().pid_limit.is_none() {
        // Kernels before 6.14 cannot cap a PID namespace; the capability report says so.
        return;
    }
    let limit = 301;
    let runner = Runner::new(Config {
        pid_limit: limit,
        ..config()
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let script = r#"
import os, time
n = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(n)
"#;
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["python3", "-c", script], cwd)))
            .unwrap(),
    )
    .await;
    assert_eq!(
        out.exited.status,
        Status::Exited(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forks: u32 = out.stdout_str().trim().parse().unwrap();
    assert!(forks > 100 && forks < limit, "forks = {forks}");
    assert!(out.elapsed < Duration::from_secs(10));
}

#[tokio::test]
async fn res_bg_background_sleep_does_not_hold_the_call() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "sleep 300 & echo started", cwd).await;
    assert_eq!(out.exited.status, Status::Exited(0));
    assert_eq!(out.stdout, b"started\n");
    assert!(
        out.elapsed < Duration::from_secs(2),
        "took {:?}",
        out.elapsed
    );
}

const LATE_SCRIPT: &str = "nohup sh -c 'sleep 2; touch late' >/dev/null 2>&1 &\n\
                           setsid sh -c 'sleep 2; touch late2' >/dev/null 2>&1 &\n\
                           (sh -c 'sleep 2; touch late3' &) ; echo spawned";

#[tokio::test]
async fn res_bg_03_nohup_child_never_touches_late() {
    // The same escapes under the PID namespace and, when the host allows, the cgroup fallback.
    let pidns = runner();
    let cgroup = Runner::new(Config {
        use_pid_namespace: false,
        // The fallbacks only matter without a sandbox: the operator's explicit choice.
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        ..config()
    })
    .unwrap();
    let mut dirs = Vec::new();
    for r in [&pidns, &cgroup] {
        let (ws, cwd) = workspace();
        let out = run_script(r, LATE_SCRIPT, cwd).await;
        assert_eq!(out.stdout, b"spawned\n");
        assert!(
            out.elapsed < Duration::from_secs(2),
            "took {:?}",
            out.elapsed
        );
        dirs.push(ws);
    }
    // The one wall-clock wait in the suite: it proves an absence.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for ws in &dirs {
        for f in ["late", "late2", "late3"] {
            assert!(
                !ws.path().join(f).exists(),
                "{f} appeared: a descendant outlived the run"
            );
        }
    }
}

#[tokio::test]
async fn cgroup_fallback_is_used_without_pid_namespaces() {
    let runner = Runner::new(Config {
        use_pid_namespace: false,
        // The fallbacks only matter without a sandbox: the operator's explicit choice.
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        ..config()
    })
    .unwrap();
    let caps = runner.capabilities().clone();
    if !caps.cgroup.writable {
        assert_eq!(caps.kill_mechanism, KillMechanism::ProcessGroup);
        return;
    }
    assert_eq!(caps.kill_mechanism, KillMechanism::Cgroup);
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "setsid sleep 300 & echo started", cwd).await;
    assert_eq!(out.stdout, b"started\n");
    assert_eq!(
        out.started.unwrap().isolation.kill_mechanism,
        KillMechanism::Cgroup
    );
    assert!(
        out.elapsed < Duration::from_secs(2),
        "took {:?}",
        out.elapsed
    );
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("trap '' TERM; setsid sleep 300 & sleep 300", cwd);
    req.timeout = Some(Duration::from_millis(300));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(matches!(out.exited.status, Status::TimedOut { .. }));
}

#[tokio::test]
async fn res_bg_04_term_ignoring_child_is_killed_with_one_result() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("bash -c 'trap \"\" TERM; sleep 300'", cwd);
    req.timeout = Some(Duration::from_millis(1000));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert!(matches!(
        out.exited.status,
        Status::TimedOut { timeout, .. } if timeout == Duration::from_millis(1000)
    ));
    assert!(
        out.elapsed < Duration::from_secs(4),
        "took {:?}",
        out.elapsed
    );
}

#[tokio::test]
async fn res_bg_04_escalates_to_kill_when_term_is_ignored() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::script("trap '' TERM; while true; do sleep 0.05; done", cwd);
    req.timeout = Some(Duration::from_millis(500));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(
        out.exited.status,
        Status::TimedOut {
            timeout: Duration::from_millis(500),
            killed: true
        }
    );
    assert!(!pid_exists(out.started.unwrap().pid));
}

#[tokio::test]
async fn res_tty_02_read_from_stdin_returns_immediately() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "read x; echo \"[$x]\"", cwd).await;
    assert_eq!(out.exited.status, Status::Exited(0));
    assert_eq!(out.stdout, b"[]\n");
    assert!(out.elapsed < Duration::from_secs(2));
}

#[tokio::test]
async fn res_disk_01_fsize_limit_stops_yes_into_a_file() {
    let limit = 1 << 20;
    let runner = Runner::new(Config {
        rlimits: Rlimits {
            fsize: Some(limit),
            ..Rlimits::default()
        },
        ..config()
    })
    .unwrap();
    let (ws, cwd) = workspace();
    let out = run_script(&runner, "yes > big", cwd).await;
    // bash either execs `yes` (killed by SIGXFSZ) or reports it as 128 + 25.
    assert!(
        matches!(
            out.exited.status,
            Status::Signaled { signal: 25, .. } | Status::Exited(153)
        ),
        "{:?}",
        out.exited.status
    );
    assert_eq!(
        std::fs::metadata(ws.path().join("big")).unwrap().len(),
        limit
    );
    assert!(out.elapsed < Duration::from_secs(5));
}

#[tokio::test]
async fn process_group_fallback_still_ends_the_call() {
    let runner = Runner::new(Config {
        use_pid_namespace: false,
        // The fallbacks only matter without a sandbox: the operator's explicit choice.
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        use_cgroup: false,
        // No cgroup at all, so no limits either: the operator's explicit choice too.
        require_limits: false,
        ..config()
    })
    .unwrap();
    assert_eq!(
        runner.capabilities().kill_mechanism,
        KillMechanism::ProcessGroup
    );
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "sleep 300 & echo started", cwd).await;
    assert_eq!(out.stdout, b"started\n");
    assert_eq!(
        out.started.unwrap().isolation.kill_mechanism,
        KillMechanism::ProcessGroup
    );
    assert!(out.elapsed < Duration::from_secs(2));
}

#[tokio::test]
async fn cpu_and_address_space_rlimits_apply() {
    let runner = Runner::new(Config {
        rlimits: Rlimits {
            cpu_seconds: Some(1),
            address_space: Some(512 << 20),
            ..Rlimits::default()
        },
        ..config()
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let out = run_script(&runner, "while :; do :; done", cwd).await;
    // The soft limit's SIGXCPU cannot stop a namespace init with default handling; soft = hard,
    // so the kernel's SIGKILL at the hard limit does.
    assert!(
        matches!(
            out.exited.status,
            Status::Signaled { signal: 9 | 24, .. } | Status::Exited(137 | 152)
        ),
        "{:?}",
        out.exited.status
    );
    // rusage is tick-sampled; the limit itself is what killed it, so only check it is in range.
    let cpu = out.exited.usage.user_cpu + out.exited.usage.system_cpu;
    assert!(cpu >= Duration::from_millis(500), "cpu {cpu:?}");
    let (_ws, cwd) = workspace();
    let out = run_script(
        &runner,
        "python3 -c 'b = bytearray(1 << 30)' 2>/dev/null || echo refused",
        cwd,
    )
    .await;
    assert_eq!(out.stdout, b"refused\n");
}
