//! The final-state channel (fd 3 of the run's first process, read into `Exited.state`) and
//! stopping a run by signal (`CancelHandle::stop`).

use std::time::{Duration, Instant};

use toolgate_process::{
    CancelCause, Config, KillMechanism, Run, RunRequest, Runner, SandboxConfig, Status, StopSignal,
};

use crate::common::{Outcome, Partial, collect, config, pid_exists, spec, workspace};

/// A run of `script` whose spec asks for its final state.
fn with_state(runner: &Runner, script: &str, cwd: std::os::fd::OwnedFd) -> Run {
    let mut s = spec(RunRequest::script(script, cwd));
    s.capture_state();
    runner.try_run(s).expect("run starts")
}

/// Runs without a PID namespace or cgroup: only the process group holds them together.
fn process_group_runner(kill_grace: Duration) -> Runner {
    let runner = Runner::new(Config {
        use_pid_namespace: false,
        use_cgroup: false,
        require_limits: false,
        sandbox: SandboxConfig::unconfined(),
        kill_grace,
        ..config()
    })
    .unwrap();
    assert_eq!(
        runner.capabilities().kill_mechanism,
        KillMechanism::ProcessGroup
    );
    runner
}

#[tokio::test]
async fn the_final_working_directory_arrives_in_the_state() {
    let runner = crate::common::runner();
    let (dir, cwd) = workspace();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let out = collect(with_state(
        &runner,
        r#"cd sub && echo hi; printf "%s" "$PWD" >&3"#,
        cwd,
    ))
    .await;
    assert_eq!(out.exited.status, Status::Exited(0));
    assert_eq!(out.stdout_str(), "hi\n");
    let want = dir.path().canonicalize().unwrap().join("sub");
    assert_eq!(
        out.exited.state.as_deref(),
        Some(want.as_os_str().as_encoded_bytes())
    );
    assert!(out.started.unwrap().isolation.sandboxed, "a confined run");
}

#[tokio::test]
async fn without_capture_state_there_is_no_fd_3_and_no_state() {
    let runner = crate::common::runner();
    let (_dir, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::script(
                "printf x >&3 2>/dev/null && echo open || echo closed",
                cwd,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(out.stdout_str(), "closed\n");
    assert_eq!(out.exited.state, None);
}

#[tokio::test]
async fn only_the_first_64_kib_of_the_state_are_kept() {
    let runner = crate::common::runner();
    let (_dir, cwd) = workspace();
    let out = collect(with_state(
        &runner,
        "head -c 200000 /dev/zero >&3; echo $?",
        cwd,
    ))
    .await;
    // The rest is read and discarded: the writer never blocks or gets EPIPE.
    assert_eq!(out.stdout_str(), "0\n");
    assert_eq!(out.exited.state.map(|s| s.len()), Some(64 << 10));
}

#[tokio::test]
async fn a_background_holder_of_fd_3_does_not_delay_the_end() {
    let runner = crate::common::runner();
    let (_dir, cwd) = workspace();
    let t = Instant::now();
    let out = collect(with_state(&runner, "sleep 100 & printf done >&3", cwd)).await;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(out.exited.state.as_deref(), Some(&b"done"[..]));
}

/// Without a PID namespace a holder that left the process group survives the run: the state
/// is what was written by the time the run was reaped (and its drain period passed).
#[tokio::test]
async fn a_holder_outliving_an_unconfined_run_does_not_delay_the_end() {
    let runner = process_group_runner(config().kill_grace);
    let (_dir, cwd) = workspace();
    let t = Instant::now();
    let out = collect(with_state(
        &runner,
        "setsid sleep 60 & echo $!; printf early >&3",
        cwd,
    ))
    .await;
    let elapsed = t.elapsed();
    let stray: i32 = out.stdout_str().trim().parse().unwrap();
    // The stray would otherwise live on for a minute.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(stray).unwrap(),
        rustix::process::Signal::KILL,
    );
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(out.exited.state.as_deref(), Some(&b"early"[..]));
}

/// Waits for the run's first stdout line, `ready`: the script has set up its traps.
async fn ready(run: &mut Run) -> Partial {
    let mut partial = Partial::default();
    assert_eq!(partial.line(run).await, "ready");
    partial
}

/// A runner with a grace period long enough to tell apart from an immediate end.
fn stop_runner(config: Config) -> Runner {
    Runner::new(Config {
        kill_grace: Duration::from_secs(2),
        ..config
    })
    .unwrap()
}

/// Starts `script` (which prints `ready` once set up), stops it by `signal` and reports the
/// outcome and how long the stop took.
async fn stopped(runner: &Runner, script: &str, signal: StopSignal) -> (Outcome, Duration) {
    let (_dir, cwd) = workspace();
    let mut run = runner
        .try_run(spec(RunRequest::script(script, cwd)))
        .unwrap();
    let partial = ready(&mut run).await;
    let t = Instant::now();
    run.cancel_handle().stop(signal);
    let out = partial.finish(run).await;
    (out, t.elapsed())
}

#[tokio::test]
async fn stop_term_ends_a_sleep_at_once_as_stopped() {
    let runner = stop_runner(config());
    let (out, took) = stopped(&runner, "echo ready; exec sleep 30", StopSignal::Term).await;
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Stopped));
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(CancelCause::Stopped.as_str(), "stopped");
}

#[tokio::test]
async fn stop_term_on_a_run_ignoring_it_kills_after_the_grace_period() {
    let runner = stop_runner(config());
    let (out, took) = stopped(
        &runner,
        // `; true`: bash would otherwise exec `sleep` as the first process, which no TERM
        // reaches anyway, so the run would be killed at once.
        r#"trap "" TERM; echo ready; sleep 30; true"#,
        StopSignal::Term,
    )
    .await;
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Stopped));
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[tokio::test]
async fn stop_term_on_a_run_handling_it_reports_its_own_exit() {
    let runner = stop_runner(config());
    let (out, took) = stopped(
        &runner,
        r#"trap "exit 0" TERM; echo ready; while :; do sleep 0.1; done"#,
        StopSignal::Term,
    )
    .await;
    assert_eq!(out.exited.status, Status::Exited(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn stop_kill_ends_a_run_ignoring_term_at_once() {
    let runner = stop_runner(config());
    let (out, took) = stopped(
        &runner,
        r#"trap "" TERM; echo ready; sleep 30"#,
        StopSignal::Kill,
    )
    .await;
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Stopped));
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn stop_kill_during_the_grace_period_of_a_term_ends_it_at_once() {
    let runner = stop_runner(config());
    let (_dir, cwd) = workspace();
    let mut run = runner
        .try_run(spec(RunRequest::script(
            r#"trap "" TERM; echo ready; sleep 30"#,
            cwd,
        )))
        .unwrap();
    let partial = ready(&mut run).await;
    let handle = run.cancel_handle();
    let t = Instant::now();
    handle.stop(StopSignal::Term);
    handle.stop(StopSignal::Kill);
    let out = partial.finish(run).await;
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Stopped));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
}

/// Without a PID namespace the run's first process is an ordinary one: TERM kills it, and the
/// run reports exactly that.
#[tokio::test]
async fn stop_term_killing_an_unconfined_run_reports_the_signal() {
    let runner = process_group_runner(Duration::from_secs(2));
    let (out, took) = stopped(&runner, "echo ready; exec sleep 30", StopSignal::Term).await;
    assert_eq!(
        out.exited.status,
        Status::Signaled {
            signal: libc::SIGTERM,
            core_dumped: false
        }
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}

/// TERM reaches every process of the run's PID namespace, also one that left the run's
/// process group (`setsid`), when no cgroup lists them: here it catches TERM and says so.
/// (TERM must not be ignored by the first shell: a shell cannot trap what it inherited as
/// ignored.)
#[tokio::test]
async fn stop_term_reaches_processes_that_left_the_process_group() {
    let runner = stop_runner(Config {
        use_cgroup: false,
        require_limits: false,
        ..config()
    });
    let (_dir, cwd) = workspace();
    let mut run = runner
        .try_run(spec(RunRequest::script(
            r#"setsid bash -c 'trap "echo caught; exit 0" TERM; echo ready; while :; do sleep 0.1; done' &
wait"#,
            cwd,
        )))
        .unwrap();
    let partial = ready(&mut run).await;
    let pid = partial.started.as_ref().unwrap().pid;
    let t = Instant::now();
    run.cancel_handle().stop(StopSignal::Term);
    let out = partial.finish(run).await;
    assert_eq!(out.stdout_str(), "ready\ncaught\n");
    // The first process has no handler for TERM (a namespace init does not get it), so it
    // is killed once the rest are gone, not after the grace period.
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Stopped));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(!pid_exists(pid));
}

#[tokio::test]
async fn a_state_and_a_stop_together() {
    let runner = stop_runner(config());
    let (dir, cwd) = workspace();
    let mut run = with_state(
        &runner,
        r#"trap 'printf "%s" "$PWD" >&3; exit 0' TERM; echo ready; while :; do sleep 0.1; done"#,
        cwd,
    );
    let partial = ready(&mut run).await;
    run.cancel_handle().stop(StopSignal::Term);
    let out = partial.finish(run).await;
    assert_eq!(out.exited.status, Status::Exited(0));
    let want = dir.path().canonicalize().unwrap();
    assert_eq!(
        out.exited.state.as_deref(),
        Some(want.as_os_str().as_encoded_bytes())
    );
}
