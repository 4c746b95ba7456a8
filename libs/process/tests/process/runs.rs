//! General run behaviour: request errors, spawn failures, stdin, bytes, tails, admission,
//! cancellation, disconnect, shutdown and the capability report.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use toolgate_core::{Reason, ReasonedError};
use toolgate_process::{
    CancelCause, Config, Event, KillMechanism, RunRequest, RunSpec, Runner, Status,
};

#[tokio::test]
async fn nul_in_argv_is_invalid_argument() {
    let (_ws, cwd) = workspace();
    let err = RunSpec::try_from(RunRequest::argv(["echo", "a\0b"], cwd)).unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidRequest);
    assert_eq!(err.reason().code(), toolgate_core::Code::InvalidArgument);
}

#[tokio::test]
async fn missing_program_is_spawn_failed() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["no-such-program-xyz"], cwd)))
            .unwrap(),
    )
    .await;
    assert!(out.started.is_none());
    match out.exited.status {
        Status::SpawnFailed { reason, errno } => {
            assert_eq!(reason, "program not found: no-such-program-xyz");
            assert_eq!(errno, libc_enoent());
        }
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}

fn libc_enoent() -> i32 {
    std::io::Error::from(std::io::ErrorKind::NotFound)
        .raw_os_error()
        .unwrap_or(2)
}

#[tokio::test]
async fn argv_runs_without_a_shell() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["echo", "$HOME", "a;b", "*"], cwd)))
            .unwrap(),
    )
    .await;
    assert_eq!(out.stdout, b"$HOME a;b *\n");
    assert_eq!(out.exited.status, Status::Exited(0));
}

/// The spawn clones the executor's memory with every signal blocked; the child must undo that
/// before exec: an empty mask and every signal at its default, including SIGPIPE, which Rust
/// ignores, and whatever else this test process ignores.
#[tokio::test]
async fn child_starts_with_no_blocked_or_ignored_signals() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(
                ["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"],
                cwd,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(out.exited.status, Status::Exited(0), "{}", out.stdout_str());
    assert_eq!(
        out.stdout_str(),
        "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
}

/// The program lookup follows `execvp`: a name is searched on the run's PATH, a path is taken
/// as it is (relative to the run's cwd), and each way of failing names its cause.
#[tokio::test]
async fn program_lookup_and_exec_failures_are_reported() {
    use std::os::unix::fs::PermissionsExt;
    let runner = runner();
    let (ws, _) = workspace();
    let write = |name: &str, text: &str, mode: u32| {
        let path = ws.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write("tool.sh", "#!/bin/sh\necho from-tool \"$1\"\n", 0o755);
    write("data.txt", "not a program\n", 0o644);
    write("no-shebang", "echo hi\n", 0o755);
    std::fs::create_dir(ws.path().join("a-dir")).unwrap();

    let run = |argv: &[&str]| {
        let req = RunRequest::argv(argv.iter().copied(), cwd_of(&ws));
        collect(runner.try_run(spec(req)).unwrap())
    };
    let out = run(&["./tool.sh", "x y"]).await;
    assert_eq!(out.exited.status, Status::Exited(0));
    assert_eq!(out.stdout_str(), "from-tool x y\n");

    for (argv0, want_reason, want_errno) in [
        (
            "./data.txt",
            "permission denied executing ./data.txt",
            libc_errno(13),
        ),
        (
            "./a-dir",
            "permission denied executing ./a-dir",
            libc_errno(13),
        ),
        ("./missing", "program not found: ./missing", libc_errno(2)),
        (
            "no-such-program-xyz",
            "program not found: no-such-program-xyz",
            libc_errno(2),
        ),
    ] {
        match run(&[argv0]).await.exited.status {
            Status::SpawnFailed { reason, errno } => {
                assert_eq!(
                    (reason.as_str(), errno),
                    (want_reason, want_errno),
                    "{argv0}"
                );
            }
            other => panic!("{argv0}: expected SpawnFailed, got {other:?}"),
        }
    }
    // No `/bin/sh` fallback for a script without `#!` (as with posix_spawn): the model is told
    // the format is wrong and can add one or run it with `bash`.
    match run(&["./no-shebang"]).await.exited.status {
        Status::SpawnFailed { reason, errno } => {
            assert_eq!(errno, libc_errno(8));
            assert!(
                reason.starts_with("cannot start ./no-shebang: "),
                "{reason}"
            );
        }
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}

/// Linux errno values used above (ENOENT 2, ENOEXEC 8, EACCES 13), checked against std's mapping.
fn libc_errno(n: i32) -> i32 {
    let kind = std::io::Error::from_raw_os_error(n).kind();
    let expected = match n {
        2 => std::io::ErrorKind::NotFound,
        13 => std::io::ErrorKind::PermissionDenied,
        _ => kind,
    };
    assert_eq!(kind, expected);
    n
}

#[tokio::test]
async fn exit_codes_signals_and_cwd_are_reported() {
    let runner = runner();
    let (ws, cwd) = workspace();
    std::fs::write(ws.path().join("marker"), b"here").unwrap();
    let out = run_script(&runner, "cat marker; echo err >&2; exit 7", cwd).await;
    assert_eq!(out.exited.status, Status::Exited(7));
    assert_eq!(out.stdout, b"here");
    assert_eq!(out.stderr, b"err\n");
    // A real fault kills even a namespace init (kernel-forced signals bypass its protection);
    // RLIMIT_CORE=0 means no core dump.
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(
                ["python3", "-c", "import ctypes; ctypes.string_at(0)"],
                cwd,
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(
        out.exited.status,
        Status::Signaled {
            signal: 11,
            core_dumped: false
        }
    );
    assert!(out.exited.usage.wall_time > Duration::ZERO);
    assert!(out.exited.usage.peak_rss_bytes > 0);
}

#[tokio::test]
async fn stdin_larger_than_arg_max_is_piped() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let size = 8 << 20; // ARG_MAX is 2 MiB here
    let mut req = RunRequest::argv(["wc", "-c"], cwd);
    req.stdin = Some(Bytes::from(vec![b'x'; size]));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.stdout_str().trim(), size.to_string());
}

#[tokio::test]
async fn stdin_not_read_does_not_block_the_run() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.stdin = Some(Bytes::from(vec![0u8; 4 << 20]));
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.exited.status, Status::Exited(0));
}

#[tokio::test]
async fn binary_and_invalid_utf8_pass_intact() {
    let runner = runner();
    let (ws, cwd) = workspace();
    let mut content: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    content.extend_from_slice(&[0xff, 0xfe, 0xc3, 0x28, 0x00, 0x80]);
    std::fs::write(ws.path().join("blob"), &content).unwrap();
    let mut req = RunRequest::argv(["cat", "blob"], cwd);
    req.stdout_cap = Some(1 << 20);
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    assert_eq!(out.stdout, content);
    assert_eq!(out.exited.stdout.total_bytes, content.len() as u64);
    assert!(!out.exited.stdout.truncated);
    assert!(out.exited.stdout.tail.is_empty());
}

#[tokio::test]
async fn tail_is_the_real_end_and_counts_are_exact() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let expected: Vec<u8> = (1..=100_000)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes();
    let mut req = RunRequest::argv(["seq", "1", "100000"], cwd);
    req.stdout_cap = Some(1000);
    req.tail_bytes = Some(100);
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    let s = &out.exited.stdout;
    assert_eq!(s.total_bytes, expected.len() as u64);
    assert_eq!(out.stdout, &expected[..1000]);
    assert_eq!(&s.tail[..], &expected[expected.len() - 100..]);
    assert_eq!(s.tail_offset, expected.len() as u64 - 100);
    assert_eq!(s.dropped_bytes, expected.len() as u64 - 1100);
    assert!(s.truncated);
    // The other stream is untouched.
    assert_eq!(out.exited.stderr.total_bytes, 0);
    assert!(!out.exited.stderr.truncated);
}

#[tokio::test]
async fn small_writes_are_streamed_without_waiting_for_exit() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut run = runner
        .try_run(spec(RunRequest::script("echo first; sleep 30", cwd)))
        .unwrap();
    let handle = run.cancel_handle();
    assert!(matches!(run.recv().await, Some(Event::Started(_))));
    match tokio::time::timeout(Duration::from_secs(5), run.recv()).await {
        Ok(Some(Event::Output(o))) => assert_eq!(&o.data[..], b"first\n"),
        other => panic!("expected live output, got {other:?}"),
    }
    handle.cancel();
    let mut last = None;
    while let Some(ev) = run.recv().await {
        last = Some(ev);
    }
    match last {
        Some(Event::Exited(e)) => {
            assert_eq!(e.status, Status::Cancelled(CancelCause::ClientCancelled));
        }
        other => panic!("expected Exited last, got {other:?}"),
    }
}

#[tokio::test]
async fn slow_consumer_backpressure_keeps_every_byte() {
    let runner = Runner::new(Config {
        event_buffer: 1,
        ..config()
    })
    .unwrap();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["head", "-c", "5000000", "/dev/zero"], cwd);
    req.stdout_cap = Some(10 << 20);
    let mut run = runner.try_run(spec(req)).unwrap();
    let mut got = 0u64;
    let mut exited = None;
    while let Some(ev) = run.recv().await {
        match ev {
            Event::Output(o) => {
                got += o.data.len() as u64;
                // A consumer slower than the child: the child must wait, nothing is lost.
                tokio::task::yield_now().await;
            }
            Event::Exited(e) => exited = Some(e),
            Event::Started(_) => {}
        }
    }
    let e = exited.unwrap();
    assert_eq!(got, 5_000_000);
    assert_eq!(e.stdout.total_bytes, 5_000_000);
    assert!(!e.stdout.truncated);
}

#[tokio::test]
async fn sixty_four_runs_at_once() {
    let runner = runner();
    assert_eq!(runner.config().max_concurrent_runs, 64);
    let mut set = tokio::task::JoinSet::new();
    let mut dirs = Vec::new();
    for i in 0..64 {
        let (ws, cwd) = workspace();
        dirs.push(ws);
        let run = runner
            .try_run(spec(RunRequest::script(format!("echo run-{i}"), cwd)))
            .unwrap();
        set.spawn(async move { (i, collect(run).await) });
    }
    let mut seen = 0;
    while let Some(res) = set.join_next().await {
        let (i, out) = res.unwrap();
        assert_eq!(out.exited.status, Status::Exited(0));
        assert_eq!(out.stdout_str(), format!("run-{i}\n"));
        seen += 1;
    }
    assert_eq!(seen, 64);
}

#[tokio::test]
async fn beyond_the_limit_is_busy_at_once() {
    let runner = Runner::new(Config {
        max_concurrent_runs: 2,
        ..config()
    })
    .unwrap();
    let mut runs = Vec::new();
    // Each workspace lives as long as its run: a sandboxed child is cloned on the runner's
    // spawner thread after `try_run` returns, from the workspace as it is then.
    let mut workspaces = Vec::new();
    for _ in 0..2 {
        let (ws, cwd) = workspace();
        workspaces.push(ws);
        runs.push(
            runner
                .try_run(spec(RunRequest::argv(["sleep", "30"], cwd)))
                .unwrap(),
        );
    }
    let (_ws, cwd) = workspace();
    let err = runner
        .try_run(spec(RunRequest::argv(["true"], cwd)))
        .unwrap_err();
    assert_eq!(err.reason(), Reason::Busy);
    assert_eq!(err.reason().code(), toolgate_core::Code::ResourceExhausted);
    for run in &runs {
        run.cancel_handle().cancel();
    }
    for run in runs {
        let out = collect(run).await;
        assert_eq!(
            out.exited.status,
            Status::Cancelled(CancelCause::ClientCancelled)
        );
        assert!(!pid_exists(out.started.unwrap().pid));
    }
    // Slots are free again.
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["true"], cwd)))
            .unwrap(),
    )
    .await;
    assert_eq!(out.exited.status, Status::Exited(0));
}

#[tokio::test]
async fn dropping_the_receiver_kills_the_run() {
    let runner = runner();
    let (ws, cwd) = workspace();
    let mut run = runner
        .try_run(spec(RunRequest::script(
            "sleep 1 && touch after-disconnect; sleep 30",
            cwd,
        )))
        .unwrap();
    let pid = match run.recv().await {
        Some(Event::Started(s)) => s.pid,
        other => panic!("{other:?}"),
    };
    drop(run);
    // shutdown() returns only once every supervisor has reaped its child.
    runner.shutdown().await;
    assert!(!pid_exists(pid));
    assert!(!ws.path().join("after-disconnect").exists());
}

#[tokio::test]
async fn shutdown_cancels_runs_in_flight_and_refuses_new_ones() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let run = runner
        .try_run(spec(RunRequest::argv(["sleep", "30"], cwd)))
        .unwrap();
    let collector = tokio::spawn(collect(run));
    let r2 = runner.clone();
    let shut = tokio::spawn(async move { r2.shutdown().await });
    let out = collector.await.unwrap();
    shut.await.unwrap();
    assert_eq!(out.exited.status, Status::Cancelled(CancelCause::Shutdown));
    assert!(!pid_exists(out.started.unwrap().pid));
    let (_ws, cwd) = workspace();
    let err = runner
        .try_run(spec(RunRequest::argv(["true"], cwd)))
        .unwrap_err();
    assert_eq!(err.reason(), Reason::Busy);
}

#[tokio::test]
async fn request_limits_above_config_are_rejected() {
    let runner = runner();
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.timeout = Some(Duration::from_secs(100_000));
    let err = runner.try_run(spec(req)).unwrap_err();
    assert_eq!(err.reason(), Reason::InvalidRequest);
    assert!(err.to_string().contains("timeout"));
    let (_ws, cwd) = workspace();
    let mut req = RunRequest::argv(["true"], cwd);
    req.stdout_cap = Some(u64::MAX);
    assert!(
        runner
            .try_run(spec(req))
            .unwrap_err()
            .to_string()
            .contains("stdout_cap")
    );
}

#[tokio::test]
async fn capabilities_report_the_mechanism_in_force() {
    let runner = runner();
    let caps = runner.capabilities();
    assert!(!caps.version.is_empty());
    assert!(caps.landlock_abi >= 0);
    assert_eq!(caps.limits.max_concurrent_runs, 64);
    assert!(caps.limits.rlimits.contains(&("core", 0)));
    if caps.namespaces.pid && caps.namespaces.mount {
        assert_eq!(caps.kill_mechanism, KillMechanism::PidNamespace);
    }
    let (_ws, cwd) = workspace();
    let out = collect(
        runner
            .try_run(spec(RunRequest::argv(["true"], cwd)))
            .unwrap(),
    )
    .await;
    let iso = out.started.unwrap().isolation;
    assert_eq!(iso.kill_mechanism, caps.kill_mechanism);
    assert!(iso.own_process_group && iso.no_new_privs);
    // The pid the child sees for itself is 1 when it is a namespace init.
    if caps.kill_mechanism == KillMechanism::PidNamespace {
        let (_ws, cwd) = workspace();
        let out = run_script(&runner, "echo $$", cwd).await;
        assert_eq!(out.stdout, b"1\n");
    }
}

/// Every run has a network namespace of its own, whether it came ready from the pool or was
/// created on the spot (a burst larger than the pool): only its loopback, up, and no other
/// run's listener reachable on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_has_a_loopback_of_its_own() {
    let runner = runner();
    let (ws, _) = workspace();
    // One run listens on 127.0.0.1:7171 inside its own namespace for a while.
    let mut listener = runner
        .try_run(spec(RunRequest::script(
            "python3 -u -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\",7171)); s.listen(); print(\"LISTENING\"); time.sleep(3)'",
            cwd_of(&ws),
        )))
        .unwrap();
    // The others start once it listens.
    loop {
        match listener.recv().await.expect("the listener runs") {
            Event::Output(o) if o.data.starts_with(b"LISTENING") => break,
            Event::Exited(x) => panic!("the listener ended: {x:?}"),
            _ => {}
        }
    }
    // Each run stays alive for a second after printing, so all ten namespaces exist at
    // once: the kernel reuses a freed namespace's inode number, so two runs that did not
    // overlap may print the same id without sharing anything.
    let runs: Vec<_> = (0..10)
        .map(|_| {
            runner
                .try_run(spec(RunRequest::script(
                    "readlink /proc/self/ns/net; ip -o link | cut -d: -f2 | tr -d ' '; (exec 3<>/dev/tcp/127.0.0.1/7171) 2>/dev/null && echo REACHED; python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",7171)); print(\"BOUND\")'; sleep 1",
                    cwd_of(&ws),
                )))
                .unwrap()
        })
        .collect();
    let mut namespaces = std::collections::HashSet::new();
    for run in runs {
        let out = collect(run).await;
        let text = out.stdout_str();
        let mut lines = text.lines();
        let ns = lines.next().expect("the namespace id").to_owned();
        assert!(ns.starts_with("net:["), "{text}");
        assert!(
            namespaces.insert(ns),
            "two runs shared a network namespace: {text}"
        );
        let links: Vec<&str> = lines.clone().take_while(|l| *l != "BOUND").collect();
        assert_eq!(links, ["lo"], "only the loopback: {text}");
        assert!(
            !text.contains("REACHED"),
            "another run's listener was reachable: {text}"
        );
        assert!(text.contains("BOUND"), "its own loopback works: {text}");
    }
    drop(listener);
}

/// A run's PID 1 dies with the executor (parent-death signal), and the kernel sends that signal
/// when the *thread* that cloned it exits. The thread that calls `try_run` may be gone long
/// before the run ends (a retired runtime worker); the run must live on.
#[test]
fn a_run_outlives_the_thread_that_started_it() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let runner = runner();
    let (_ws, cwd) = workspace();
    let handle = rt.handle().clone();
    let r = runner.clone();
    let run = std::thread::spawn(move || {
        let _entered = handle.enter();
        r.try_run(spec(RunRequest::script("sleep 0.5; echo alive", cwd)))
            .unwrap()
    })
    .join()
    .unwrap();
    let out = rt.block_on(collect(run));
    assert_eq!(out.exited.status, Status::Exited(0), "{out:?}");
    assert_eq!(out.stdout_str(), "alive\n");
    // The runner outlived the run; only the calling thread was gone.
    drop(runner);
}

/// What the executor tells the policy a run is decided under depends on whether its profile
/// really confines runs here: an unconfined profile never does (the policy then decides with
/// no sandbox guarantee), the shipped ones do where the sandbox works, an unknown name does not.
#[tokio::test]
async fn a_runner_says_which_profiles_really_confine_its_runs() {
    let unconfined = Runner::new(Config {
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        ..config()
    })
    .unwrap();
    assert!(!unconfined.confines("none"));
    assert!(!unconfined.confines(""), "the default profile is `none`");
    assert!(!unconfined.confines("workspace"), "not configured here");
    let confined = runner();
    for name in ["workspace", "readonly", "network", ""] {
        assert!(confined.confines(name), "{name:?}");
    }
    assert!(!confined.confines("nosuch"));
}

/// A working directory removed after the caller opened it: no run starts there, confined or
/// not, and the refusal names the directory (not a missing program, not an internal error).
#[tokio::test]
async fn a_removed_working_directory_is_refused_as_not_found() {
    let unconfined = Runner::new(Config {
        sandbox: toolgate_process::SandboxConfig::unconfined(),
        ..config()
    })
    .unwrap();
    for (name, runner) in [("sandboxed", runner()), ("unconfined", unconfined)] {
        let (ws, _) = workspace();
        let gone = ws.path().join("gone");
        std::fs::create_dir(&gone).unwrap();
        let cwd: std::os::fd::OwnedFd = std::fs::File::open(&gone).unwrap().into();
        std::fs::remove_dir(&gone).unwrap();
        let err = runner
            .try_run(spec(RunRequest::argv(["/bin/true"], cwd)))
            .expect_err(name);
        assert_eq!(err.reason(), Reason::NotFound, "{name}: {err}");
        let text = err.to_string();
        assert!(
            text.contains("working directory") && text.contains(&*gone.to_string_lossy()),
            "{name}: {text}"
        );
        assert!(!text.contains("(deleted)"), "{name}: {text}");
        assert!(
            err.metadata().contains(&("field", "cwd".to_owned())),
            "{name}: {:?}",
            err.metadata()
        );
    }
}

/// A child that cannot enter its working directory (here: inside a directory the view hides)
/// reports that step, with its errno; it is not a missing program.
#[tokio::test]
async fn a_working_directory_the_child_cannot_enter_is_not_a_missing_program() {
    let (ws, _) = workspace();
    let mut cfg = config();
    cfg.sandbox.workspace = Some(ws.path().canonicalize().unwrap());
    let runner = Runner::new(cfg).unwrap();
    std::fs::create_dir_all(ws.path().join("secret/sub")).unwrap();
    let cwd: std::os::fd::OwnedFd = std::fs::File::open(ws.path().join("secret/sub"))
        .unwrap()
        .into();
    let mut req = RunRequest::argv(["/bin/true"], cwd);
    req.masks = toolgate_process::Masks {
        hidden_dirs: vec!["secret".into()],
        ..toolgate_process::Masks::default()
    };
    let out = collect(runner.try_run(spec(req)).unwrap()).await;
    match out.exited.status {
        Status::SpawnFailed { reason, errno } => {
            assert_eq!(errno, libc_enoent(), "{reason}");
            assert!(
                reason.starts_with("cannot start /bin/true: its working directory"),
                "{reason}"
            );
        }
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
}
