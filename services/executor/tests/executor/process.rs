//! End-to-end: `ProcessService.Run` and `ExecutorService.GetCapabilities` on the real binary.

use crate::support;

use std::time::{Duration, Instant};

use support::{Executor, Sandbox, ctx, reason};
use tonic::Code;
use toolgate_contracts::common::v1::exit_status::Status as S;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;
use toolgate_contracts::executor::v1::process_service_client::ProcessServiceClient;
use toolgate_contracts::executor::v1::run_response::Event;

pub(crate) fn script(s: &str) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Script(s.into())),
        ..Default::default()
    }
}

pub(crate) fn argv(a: &[&str]) -> pb::RunRequest {
    pb::RunRequest {
        context: ctx(),
        command: Some(pb::run_request::Command::Argv(pb::Argv {
            args: a.iter().map(|s| (*s).to_owned()).collect(),
        })),
        ..Default::default()
    }
}

/// Everything a run streamed: stdout bytes, stderr bytes, the events in order, the final event.
pub(crate) struct Outcome {
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    kinds: Vec<&'static str>,
    pub(crate) exited: pb::Exited,
}

pub(crate) async fn run(exe: &Executor, req: pb::RunRequest) -> Result<Outcome, tonic::Status> {
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await?.into_inner();
    let (mut stdout, mut stderr, mut kinds, mut exited) =
        (Vec::new(), Vec::new(), Vec::new(), None);
    while let Some(msg) = stream.message().await? {
        match msg.event.expect("event set") {
            Event::Started(_) => kinds.push("started"),
            Event::AwaitingApproval(_) => kinds.push("awaiting"),
            Event::Output(o) => {
                kinds.push("output");
                let buf = if o.stream == pb::Stream::Stdout as i32 {
                    &mut stdout
                } else {
                    &mut stderr
                };
                assert_eq!(o.offset, buf.len() as u64, "offsets are contiguous");
                buf.extend_from_slice(&o.data);
            }
            Event::Exited(x) => {
                kinds.push("exited");
                exited = Some(x);
            }
        }
    }
    Ok(Outcome {
        stdout,
        stderr,
        kinds,
        exited: exited.expect("a final exited event"),
    })
}

pub(crate) fn status(o: &Outcome) -> S {
    o.exited.status.clone().unwrap().status.unwrap()
}

#[tokio::test]
async fn argv_and_script_stream_bytes_in_order() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let o = run(&exe, argv(&["printf", "a\\377b"])).await.unwrap();
    assert_eq!(o.stdout, b"a\xffb", "bytes pass through undecoded");
    assert_eq!(o.kinds.first(), Some(&"started"));
    assert_eq!(o.kinds.last(), Some(&"exited"));
    assert_eq!(o.kinds.iter().filter(|k| **k == "exited").count(), 1);
    assert!(matches!(status(&o), S::Exited(0)));

    let o = run(&exe, script("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(
        (o.stdout.as_slice(), o.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..])
    );
    assert!(matches!(status(&o), S::Exited(3)));
    let stats = o.exited.stdout.unwrap().stats.unwrap();
    assert_eq!((stats.total_bytes, stats.truncated), (4, false));
}

#[tokio::test]
async fn caps_keep_a_tail_and_exact_counts() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = script("head -c 3000000 /dev/zero | tr '\\0' a; printf END");
    req.limits = Some(pb::OutputLimits {
        stdout_cap_bytes: 1000,
        tail_bytes: 100,
        ..Default::default()
    });
    let o = run(&exe, req).await.unwrap();
    assert_eq!(o.stdout.len(), 1000);
    let s = o.exited.stdout.clone().unwrap();
    let stats = s.stats.unwrap();
    assert_eq!(stats.total_bytes, 3_000_003);
    assert!(stats.truncated);
    assert_eq!(stats.dropped_bytes, 3_000_003 - 1000 - 100);
    assert_eq!(s.tail.len(), 100);
    assert!(
        s.tail.ends_with(b"aaEND"),
        "the tail is the real end of the stream"
    );
    assert_eq!(s.tail_offset, 3_000_003 - 100);
    assert!(matches!(status(&o), S::Exited(0)), "a cap is not a timeout");
}

#[tokio::test]
async fn background_children_do_not_hold_the_call_and_die_with_it() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let t = Instant::now();
    let o = run(&exe, script("sleep 300 & echo started")).await.unwrap();
    assert_eq!(o.stdout, b"started\n");
    assert!(t.elapsed() < Duration::from_secs(10), "returned at once");

    // RES-BG-03: a nohup'd, detached grandchild never gets to write its file.
    let o = run(
        &exe,
        script("nohup sh -c 'sleep 2; touch late' >/dev/null 2>&1 &"),
    )
    .await
    .unwrap();
    assert!(matches!(status(&o), S::Exited(0)));
    // Proving an absence needs wall time: the grandchild would have written after 2 s.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !sb.ws.join("late").exists(),
        "a descendant outlived its run"
    );
}

#[tokio::test]
async fn timeout_escalates_to_kill_for_children_that_ignore_term() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[("TOOLGATE_PROCESS__KILL_GRACE_MS", "300")]);
    let mut req = script("trap '' TERM; sleep 300");
    req.timeout = Some(prost_types::Duration {
        seconds: 1,
        nanos: 0,
    });
    let t = Instant::now();
    let o = run(&exe, req).await.unwrap();
    match status(&o) {
        S::TimedOut(t) => assert!(t.killed, "TERM was ignored, so KILL was needed"),
        other => panic!("RES-BG-04: expected a timeout, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn bad_requests_fail_with_reasons() {
    let sb = Sandbox::new();
    std::fs::write(sb.ws.join("file"), "x").unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);

    let err = run(&exe, argv(&["echo", "a\0b"]))
        .await
        .err()
        .expect("NUL in argv refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let mut req = script("true");
    req.cwd = "--bind / /".into(); // ARG-05
    let err = run(&exe, req).await.err().expect("bogus cwd refused");
    assert_eq!(reason(&err), "NOT_FOUND");
    let mut req = script("true");
    req.cwd = "..".into();
    let err = run(&exe, req).await.err().expect("escaping cwd refused");
    assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE");

    let err = run(
        &exe,
        pb::RunRequest {
            context: ctx(),
            ..Default::default()
        },
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err.code(), Code::InvalidArgument);

    let o = run(&exe, argv(&["definitely-not-a-program"]))
        .await
        .unwrap();
    assert!(
        matches!(status(&o), S::SpawnFailed(_)),
        "missing program is a spawn failure"
    );
}

#[tokio::test]
async fn secrets_in_the_executor_environment_never_reach_a_child() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[("CANARY_SECRET", "canary-123")]);
    // ENV-01 and ENV-02. Globbing /proc needs no human under the workspace profile: the run's
    // /proc is its own, which is what this checks.
    let mut req =
        script("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c canary-123");
    req.context = support::ctx_waiting(60);
    let o = run(&exe, req).await.unwrap();
    assert_eq!(o.kinds.first(), Some(&"started"));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("canary-123"), "{out}");
    assert!(out.trim_end().ends_with('0'), "{out}");
    assert!(
        out.contains("PAGER=cat") && out.contains("TERM=dumb"),
        "{out}"
    );
}

#[tokio::test]
async fn stdin_larger_than_arg_max_is_streamed() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = argv(&["wc", "-c"]);
    req.stdin = Some(vec![b'x'; 3 << 20]);
    let o = run(&exe, req).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        (3 << 20).to_string()
    );
    // RES-TTY-02: without stdin the child reads /dev/null and returns at once.
    let o = run(&exe, script("read x; echo \"[$x]\"")).await.unwrap();
    assert_eq!(o.stdout, b"[]\n");
}

#[tokio::test]
async fn admission_is_bounded_and_capabilities_are_reported() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__MAX_CONCURRENT_RUNS", "1")],
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut first = client
        .run(script("echo go; sleep 30"))
        .await
        .unwrap()
        .into_inner();
    // Wait until the first run really started before asking for a second slot.
    while let Some(m) = first.message().await.unwrap() {
        if matches!(m.event, Some(Event::Output(_))) {
            break;
        }
    }
    let err = run(&exe, script("true"))
        .await
        .err()
        .expect("second run refused");
    assert_eq!(
        (err.code(), reason(&err).as_str()),
        (Code::ResourceExhausted, "BUSY")
    );
    drop(first);

    let caps = ExecutorServiceClient::new(exe.channel().await)
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let limits = caps.limits.unwrap();
    assert_eq!(limits.max_concurrent_runs, 1);
    // The run budget: what every run together may reserve, what a default run takes of it,
    // how the queue shares it, and the per-run disk budget.
    assert!(limits.runs_memory_bytes > 0, "{limits:?}");
    assert!(
        limits.default_run_reservation_bytes > 0
            && limits.default_run_reservation_bytes <= limits.runs_memory_bytes,
        "{limits:?}"
    );
    assert_eq!(limits.queue_length, 64);
    assert_eq!(limits.queue_wait.unwrap().seconds, 2);
    assert!((limits.session_share - 0.5).abs() < 1e-9, "{limits:?}");
    assert!((limits.principal_share - 0.75).abs() < 1e-9, "{limits:?}");
    assert_eq!(limits.disk_max_written_bytes, 4 << 30);
    assert_eq!(limits.disk_max_created_files, 200_000);
    assert_ne!(caps.kill_mechanism, pb::KillMechanism::Unspecified as i32);
    assert!(!caps.workspace.unwrap().root.is_empty());
    // The ten calls plus net.connect, which the egress gate of networked runs enforces.
    assert_eq!(caps.tools.len(), 11);
    for kind in [
        toolgate_contracts::common::v1::ToolKind::FsDelete,
        toolgate_contracts::common::v1::ToolKind::NetConnect,
    ] {
        assert!(caps.tools.contains(&(kind as i32)), "{kind:?}");
    }
}

#[tokio::test]
async fn client_disconnect_kills_the_run() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client
        .run(script("echo ready; sleep 3; touch survived"))
        .await
        .unwrap()
        .into_inner();
    while let Some(m) = stream.message().await.unwrap() {
        if matches!(m.event, Some(Event::Output(_))) {
            break;
        }
    }
    drop(stream);
    drop(client);
    // The child would touch the file after 3 s if it were still alive.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !sb.ws.join("survived").exists(),
        "the run outlived its client"
    );
}

#[tokio::test]
async fn a_timed_out_script_never_runs_its_next_command() {
    // bash as PID 1 of its namespace ignores SIGTERM; before the fix it went on to `touch`
    // after its `sleep` was terminated.
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let mut req = script("sleep 30; touch next-command-ran");
    req.timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 300_000_000,
    });
    let t = Instant::now();
    let o = run(&exe, req).await.unwrap();
    assert!(matches!(status(&o), S::TimedOut(_)), "{:?}", status(&o));
    // The run is over and its namespace is gone, so nothing can create the file any more.
    assert!(!sb.ws.join("next-command-ran").exists());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "no grace period wasted: {:?}",
        t.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// The escape suite: whatever an allowed command turns out to do, the kernel confines it.
// Every run below is `auto` under a policy that allows everything but the secrets rule;
// each line must fail and leave no trace. Run as root and as an unprivileged user.
// ---------------------------------------------------------------------------------------

/// Allows everything except reading secrets, so only the sandbox stands in the way.
const ESCAPE_POLICY: &str = r#"
default = "auto"

# The suites run attacks as `sh FILE` approved by a human (the workspace sandbox would contain
# them without one): an approved run is confined exactly like an automatic one, and the audit
# reports rather than reverts what an approved run did to git.
[[rule]]
id = "scripts-need-a-human"
decision = "ask"
reason = "the suites' attacks run as approved script files"
commands = ["sh"]

[[rule]]
id = "secrets"
decision = "deny"
reason = "dotenv files and private keys hold secrets"
paths = ["**/.env", "**/*.pem"]
"#;

pub(crate) const SECRET: &str = "SECRET=matchme-4711";

/// What a script printed and how it ended. What the policy asks about is approved by a
/// human (the suite's approver) and then runs: an approved command is confined exactly like
/// an automatic one. A policy deny counts as blocked (nothing ran).
pub(crate) async fn sh(exe: &Executor, script_text: &str) -> (String, String, S) {
    let mut req = script(script_text);
    req.context = support::ctx_waiting(30);
    let o = match run(exe, req).await {
        Ok(o) => o,
        Err(e) if reason(&e) == "POLICY_DENIED" => {
            return (String::new(), e.message().to_owned(), S::Exited(126));
        }
        Err(e) => panic!("run refused: {e:?}\n{script_text}"),
    };
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        status(&o),
    )
}

/// A workspace with a secret, a repository, agent config, and an executor over it running
/// as `uid` (root when `None`). The policy service always runs as root.
pub(crate) struct Escape {
    pub(crate) sb: Sandbox,
    pub(crate) exe: Executor,
    _policy: support::Policy,
    _approver: support::AbortOnDrop,
    /// A listener on the host's loopback that no run may reach.
    listener: std::net::TcpListener,
    /// A file in the host's /tmp that no run may create.
    host_tmp: std::path::PathBuf,
}

impl Escape {
    pub(crate) async fn start(uid: Option<u32>) -> Escape {
        use std::os::unix::fs::PermissionsExt;
        let sb = Sandbox::new();
        let ws = &sb.ws;
        std::fs::write(ws.join(".env"), SECRET).unwrap();
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/key.pem"), SECRET).unwrap();
        std::fs::write(ws.join("f.txt"), "plain\n").unwrap();
        std::fs::create_dir_all(ws.join(".codex")).unwrap();
        std::fs::write(ws.join(".codex/config.toml"), "model = \"x\"\n").unwrap();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(ws)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q", "."]);
        git(&["config", "user.email", "t@example.com"]);
        git(&["config", "user.name", "t"]);
        if let Some(uid) = uid {
            // The workspace belongs to the executor's user; the rest of the sandbox dir is
            // only traversable.
            let parent = ws.parent().unwrap();
            std::fs::set_permissions(parent, PermissionsExt::from_mode(0o755)).unwrap();
            let status = std::process::Command::new("chown")
                .args(["-R", &format!("{uid}:{uid}")])
                .arg(ws)
                .status()
                .unwrap();
            assert!(status.success());
        }
        let policy = support::Policy::start(ESCAPE_POLICY);
        let exe = Executor::start_as(&policy.endpoint(), &policy.creds, ws, &[], &[], uid);
        let approver = support::approve_everything(&policy).await;
        let host_tmp = std::env::temp_dir().join(format!(
            "toolgate-escape-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        Escape {
            sb,
            exe,
            _policy: policy,
            _approver: approver,
            listener,
            host_tmp,
        }
    }

    /// Runs every escape and checks that none got anywhere.
    async fn suite(&self) {
        let exe = &self.exe;
        let before = self.sb.outside_snapshot();
        let out = self.sb.out.display().to_string();
        let port = self.listener.local_addr().unwrap().port();
        let host_tmp = self.host_tmp.display().to_string();
        let exe_pid = exe.pid();

        // Reads outside the workspace: the canary next to it, the host's secrets, the
        // executor's environment.
        for read in [
            format!("cat {out}/secret"),
            "cat ../out/secret".to_owned(),
            "cat /etc/shadow".to_owned(),
            "f=/etc/sha; cat ${f}dow".to_owned(),
            format!("cat /proc/{exe_pid}/environ"),
            "ls -a /root /home/* 2>/dev/null | grep -v '^\\.*$'; cat /root/.ssh/id_rsa".to_owned(),
        ] {
            let (stdout, _, _) = sh(exe, &read).await;
            assert!(!stdout.contains(support::SENTINEL), "{read}: {stdout}");
            assert!(
                !stdout.contains("root:"),
                "{read} read the shadow file: {stdout}"
            );
            assert!(!stdout.contains("TOOLGATE_"), "{read}: {stdout}");
            assert!(!stdout.contains("id_rsa"), "{read}: {stdout}");
        }

        // Writes outside: directly, through /tmp, symlinks, hard links and renames.
        for write in [
            format!("echo x > {out}/escape"),
            "echo x > ../out/escape".to_owned(),
            format!("echo x > {host_tmp}"),
            "ln -s ../out/secret link && echo x >> link".to_owned(),
            format!("ln -s {out} outdir && echo x > outdir/escape2"),
            format!("ln {out}/secret hard && echo x >> hard"),
            format!("cp f.txt moved.txt && mv moved.txt {out}/moved.txt"),
            "touch \"$PWD/../escape3\"".to_owned(),
        ] {
            sh(exe, &write).await;
        }
        assert_eq!(
            self.sb.outside_snapshot(),
            before,
            "a write escaped the workspace"
        );
        assert!(!self.host_tmp.exists(), "a run wrote the host's /tmp");
        assert!(!self.sb.ws.parent().unwrap().join("escape3").exists());

        // The network: the ledger database and a listener on the host's loopback.
        for connect in [
            "exec 3<>/dev/tcp/127.0.0.1/5432 && echo CONNECTED".to_owned(),
            format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"),
        ] {
            let (stdout, _, st) = sh(exe, &connect).await;
            assert!(!stdout.contains("CONNECTED"), "{connect}");
            assert!(!matches!(st, S::Exited(0)), "{connect}");
        }
        assert!(
            self.listener.accept().is_err(),
            "a run reached the host's loopback"
        );

        // The executor, the kernel, privileges.
        let py = |code: &str| format!("/usr/bin/python3 -c '{code}'");
        for (what, attempt) in [
            (
                "signal the executor",
                format!("kill -0 {exe_pid} && echo ESCAPED"),
            ),
            (
                "ptrace",
                py(
                    "import ctypes,os; r=ctypes.CDLL(None,use_errno=True).syscall(101,16,1,0,0); print(\"ESCAPED\" if r==0 else \"blocked\", ctypes.get_errno())",
                ),
            ),
            (
                "mount",
                "mkdir -p m && mount -t tmpfs none m && echo ESCAPED".to_owned(),
            ),
            (
                "user namespace",
                "unshare -U true && echo ESCAPED".to_owned(),
            ),
            (
                "user namespace via unshare -r",
                "unshare -r true && echo ESCAPED".to_owned(),
            ),
            (
                "io_uring",
                py(
                    "import ctypes; p=ctypes.create_string_buffer(120); r=ctypes.CDLL(None,use_errno=True).syscall(425,8,p); print(\"ESCAPED\" if r>=0 else \"blocked\")",
                ),
            ),
            (
                "setuid bit by chmod",
                "cp /bin/sh s && chmod u+s s && echo ESCAPED; chmod 4755 s && echo ESCAPED"
                    .to_owned(),
            ),
            (
                "setuid bit at creation",
                py(
                    "import os; fd=os.open(\"s2\", os.O_CREAT|os.O_WRONLY, 0o4755); os.close(fd); print(\"ESCAPED\" if os.stat(\"s2\").st_mode & 0o6000 else \"blocked\")",
                ),
            ),
            (
                "setgid bit",
                "touch g && chmod g+s g && echo ESCAPED".to_owned(),
            ),
        ] {
            let (stdout, stderr, _) = sh(exe, &attempt).await;
            assert!(!stdout.contains("ESCAPED"), "{what}: {stdout} {stderr}");
        }
        for name in ["s", "s2", "g"] {
            if let Ok(m) = std::fs::metadata(self.sb.ws.join(name)) {
                use std::os::unix::fs::PermissionsExt;
                assert_eq!(
                    m.permissions().mode() & 0o6000,
                    0,
                    "{name} kept a set-id bit"
                );
            }
        }

        // The policy's secrets are invisible inside runs, whatever reads them.
        std::fs::write(
            self.sb.ws.join("visible.txt"),
            "matchme-4711 is fine here\n",
        )
        .unwrap();
        for read in [
            "cat .env",
            "e=.e; cat ${e}nv",
            "grep -r matchme-4711 . ; grep -r SECRET= .",
            "git grep --no-index -h SECRET= -- . || true",
            "tar cf - . 2>/dev/null | grep -a SECRET=",
            "ln -sf .env envlink; cat envlink",
            "cat sub/key.pem",
            "cp .env copy && cat copy",
        ] {
            let (stdout, _, _) = sh(exe, read).await;
            assert!(!stdout.contains(SECRET), "{read}: {stdout}");
        }
        assert_eq!(
            std::fs::read_to_string(self.sb.ws.join(".env")).unwrap(),
            SECRET,
            "the secret itself is untouched"
        );

        // Protected paths stay read-only by any spelling.
        for write in [
            "echo x > .git/hooks/pre-commit",
            "mkdir -p .git/hooks && echo x > .git/hooks/post-checkout",
            "echo '[core] fsmonitor = touch PWNED' >> .git/config",
            "echo x > .codex/config.toml",
            "rm -rf .codex",
            "ln -s .git/hooks hk && echo x > hk/pre-push",
            "ln -s .codex cx && echo x > cx/config.toml",
            "mv .git/config .git/config.old",
            "cd .git && echo x > hooks/pre-commit",
        ] {
            sh(exe, write).await;
        }
        for hook in ["pre-commit", "post-checkout", "pre-push"] {
            assert!(!self.sb.ws.join(".git/hooks").join(hook).exists(), "{hook}");
        }
        assert_eq!(
            std::fs::read_to_string(self.sb.ws.join(".codex/config.toml")).unwrap(),
            "model = \"x\"\n"
        );
        let config = std::fs::read_to_string(self.sb.ws.join(".git/config")).unwrap();
        assert!(!config.contains("PWNED"), "{config}");

        // A foreign repository's fsmonitor runs, but only inside the view.
        std::fs::create_dir_all(self.sb.ws.join("evil/objects")).unwrap();
        std::fs::create_dir_all(self.sb.ws.join("evil/refs/heads")).unwrap();
        std::fs::write(self.sb.ws.join("evil/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            self.sb.ws.join("evil/config"),
            format!(
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = \"echo x > {out}/pwned; echo x > {host_tmp}; touch hook-ran\"\n"
            ),
        )
        .unwrap();
        sh(exe, "git -C evil status >/dev/null 2>&1; true").await;
        assert_eq!(self.sb.outside_snapshot(), before, "the hook escaped");
        assert!(!self.host_tmp.exists());
    }
}

#[tokio::test]
async fn escape_suite_as_root() {
    Escape::start(None).await.suite().await;
}

#[tokio::test]
async fn escape_suite_as_an_unprivileged_user() {
    Escape::start(Some(65534)).await.suite().await;
}

/// Real work still works inside the sandbox: git in the workspace's own repository.
#[tokio::test]
async fn git_status_and_commit_work_inside_the_sandbox() {
    let e = Escape::start(None).await;
    let (stdout, stderr, st) = sh(
        &e.exe,
        "git add f.txt && git commit -qm first && git log --oneline | wc -l && git status --short f.txt",
    )
    .await;
    assert!(matches!(st, S::Exited(0)), "{stdout} {stderr}");
    assert_eq!(stdout.trim(), "1", "{stderr}");
}

/// After a SIGKILL of the executor mid-run, nothing of the run survives or writes.
async fn no_run_outlives_its_executor(uid: Option<u32>) {
    let mut e = Escape::start(uid).await;
    // Distinct per test: the two variants run concurrently.
    let marker = if uid.is_some() {
        "7.654322"
    } else {
        "7.654321"
    };
    let mut client = ProcessServiceClient::new(e.exe.channel().await);
    let mut stream = client
        .run(script(&format!(
            "setsid sleep {marker} & sleep {marker} && echo late >> late.txt"
        )))
        .await
        .unwrap()
        .into_inner();
    // Wait until the run has started.
    loop {
        let msg = stream.message().await.unwrap().expect("a started event");
        if matches!(msg.event, Some(Event::Started(_))) {
            break;
        }
    }
    e.exe.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alive: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(marker))
        .collect();
    assert!(alive.is_empty(), "still running: {alive:?}");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !e.sb.ws.join("late.txt").exists(),
        "the run wrote after its executor died"
    );
}

#[tokio::test]
async fn a_sigkilled_executor_leaves_no_process_behind_as_root() {
    no_run_outlives_its_executor(None).await;
}

#[tokio::test]
async fn a_sigkilled_executor_leaves_no_process_behind_unprivileged() {
    no_run_outlives_its_executor(Some(65534)).await;
}

/// An unknown profile, or one this executor cannot enforce, refuses the run; nothing runs
/// under a weaker one.
#[tokio::test]
async fn unknown_sandbox_profiles_fail_closed() {
    let e = Escape::start(None).await;
    for profile in ["strict", "none", "default "] {
        let mut req = script("touch ran");
        req.sandbox_profile = profile.into();
        let err = run(&e.exe, req).await.err().expect("refused");
        assert_eq!(err.code(), Code::Unimplemented, "{profile}");
        assert_eq!(reason(&err), "SANDBOX_UNAVAILABLE");
        assert!(err.message().contains(profile.trim()), "{}", err.message());
    }
    assert!(!e.sb.ws.join("ran").exists());
    let mut req = script("touch ro && echo wrote");
    req.sandbox_profile = "readonly".into();
    let o = run(&e.exe, req).await.unwrap();
    assert!(!String::from_utf8_lossy(&o.stdout).contains("wrote"));
    assert!(!e.sb.ws.join("ro").exists());
}

/// A policy rule decides the profile in force: the run gets it whatever the request asked for,
/// and a profile this executor does not have refuses the run instead of weakening it.
#[tokio::test]
async fn a_rule_decides_the_sandbox_profile_a_run_gets() {
    let sb = Sandbox::new();
    let policy = support::Policy::start(
        r#"
default = "auto"

[[rule]]
id = "touch-readonly"
decision = "auto"
reason = "touch only ever needs to read here"
commands = ["touch"]
sandbox = "readonly"

[[rule]]
id = "gpu-tools"
decision = "auto"
reason = "needs the gpu profile"
commands = ["nvidia-smi"]
sandbox = "gpu"
"#,
    );
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client
        .run(script("touch made-here; echo done"))
        .await
        .unwrap()
        .into_inner();
    let mut isolation = None;
    while let Some(msg) = stream.message().await.unwrap() {
        if let Some(Event::Started(s)) = msg.event {
            isolation = s.isolation;
        }
    }
    let isolation = isolation.expect("a started event");
    assert_eq!(isolation.sandbox_profile, "readonly");
    assert!(isolation.sandboxed);
    assert!(
        !sb.ws.join("made-here").exists(),
        "the readonly profile held"
    );

    let err = run(&exe, argv(&["nvidia-smi"]))
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), Code::Unimplemented, "{err:?}");
    assert_eq!(reason(&err), "SANDBOX_UNAVAILABLE");
    assert!(err.message().contains("gpu"), "{}", err.message());
}

/// Real work as an unprivileged executor: git, Python's unittest and npm, with the system's
/// toolchains (a user's own toolchains under another user's home are not readable to it).
#[tokio::test]
async fn real_work_runs_sandboxed_as_an_unprivileged_user() {
    let e = Escape::start(Some(65534)).await;
    let ws = &e.sb.ws;
    std::fs::write(
        ws.join("test_demo.py"),
        "import unittest\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertEqual(1 + 1, 2)\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("package.json"),
        r#"{"name":"demo","version":"1.0.0","scripts":{"test":"node -e \"console.log('node says ok')\""}}"#,
    )
    .unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(ws)
        .status()
        .unwrap();
    assert!(chown.success());
    for (script, expect) in [
        ("python3 -m unittest -v 2>&1", "test_ok"),
        ("npm test 2>&1", "node says ok"),
        (
            "git add f.txt && git commit -qm first && git log --oneline",
            "first",
        ),
        ("id -u", "65534"),
    ] {
        let (stdout, stderr, st) = sh(&e.exe, script).await;
        assert!(matches!(st, S::Exited(0)), "{script}: {stdout} {stderr}");
        assert!(stdout.contains(expect), "{script}: {stdout} {stderr}");
    }
}

/// A run past its memory limit over gRPC: `Started` says what bounds it, `Exited` says the
/// kernel killed it at that limit, in words a model can act on.
#[tokio::test]
async fn a_run_past_its_memory_limit_says_so() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[("TOOLGATE_PROCESS__LIMITS__MEMORY_BYTES", "268435456")],
    );
    // Inline interpreter code asks; a human approves it here.
    let _approver = support::approve_everything(exe.policy()).await;
    let mut req = argv(&["/usr/bin/python3", "-c", "s = b'x' * (2 << 30)"]);
    req.context = support::ctx_waiting(30);
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(req).await.unwrap().into_inner();
    let (mut limits, mut exited) = (None, None);
    while let Some(msg) = stream.message().await.unwrap() {
        match msg.event {
            Some(Event::Started(s)) => limits = s.isolation.and_then(|i| i.limits),
            Some(Event::Exited(x)) => exited = Some(x),
            _ => {}
        }
    }
    let limits = limits.expect("limits in Started.isolation");
    assert!(limits.enforced.starts_with("cgroup-v"), "{limits:?}");
    assert_eq!(limits.memory_bytes, 256 << 20);
    let exited = exited.expect("an exited event");
    assert!(exited.usage.unwrap().oom_killed);
    let hit = exited.limit_exceeded.expect("the limit it hit");
    assert_eq!(hit.resource, "memory");
    assert_eq!(
        hit.message,
        "the run exceeded its 256 MiB memory limit and was killed by the kernel"
    );
}

/// An unprivileged executor has no delegated cgroup here: its runs get the kernel's fallbacks
/// and `Started` says so (the test executor opts out of `require_limits`, as an operator would).
#[tokio::test]
async fn an_unprivileged_executor_reports_its_fallback_limits() {
    let sb = Sandbox::new();
    // The workspace belongs to the executor's user; the rest of the sandbox dir is only
    // traversable.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(sb.ws.parent().unwrap(), PermissionsExt::from_mode(0o755)).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&sb.ws)
        .status()
        .unwrap();
    assert!(chown.success());
    let policy = support::Policy::start(support::PERMISSIVE);
    let exe = Executor::start_as(
        &policy.endpoint(),
        &policy.creds,
        &sb.ws,
        &[],
        &[],
        Some(65534),
    );
    let mut client = ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(argv(&["true"])).await.unwrap().into_inner();
    let mut limits = None;
    while let Some(msg) = stream.message().await.unwrap() {
        if let Some(Event::Started(s)) = msg.event {
            limits = s.isolation.and_then(|i| i.limits);
        }
    }
    let limits = limits.expect("limits in Started.isolation");
    assert_eq!(limits.enforced, "rlimit");
    assert_eq!(limits.memory_bytes, 0, "nothing bounds memory: {limits:?}");
    assert!(
        limits.cpu_seconds > 0 && limits.tmpfs_inodes > 0,
        "{limits:?}"
    );
}

/// The run's working directory is removed while the call waits for its human: once approved,
/// the run is refused as `NOT_FOUND` naming the directory (not reported as a missing program,
/// not an internal error), and nothing ran.
#[tokio::test]
async fn a_cwd_removed_while_the_call_waits_is_not_found() {
    use toolgate_contracts::policy::v1 as ppb;
    let sb = Sandbox::new();
    std::fs::create_dir(sb.ws.join("sub")).unwrap();
    let policy = support::Policy::start(
        r#"
default = "auto"

[[rule]]
id = "touch-needs-human"
decision = "ask"
reason = "a test asks"
commands = ["touch"]
"#,
    );
    let exe = Executor::start_with(&policy, &sb.ws, &[], &[]);
    let (mut approvals, mut watch) = support::watch_pending(&policy).await;
    let mut req = argv(&["touch", "made-here"]);
    req.cwd = "sub".into();
    req.context = support::ctx_waiting(30);
    let call = tokio::spawn({
        let channel = exe.channel().await;
        async move {
            let mut client = ProcessServiceClient::new(channel);
            let mut stream = client.run(req).await?.into_inner();
            let mut kinds = Vec::new();
            while let Some(msg) = stream.message().await? {
                kinds.push(match msg.event.expect("event set") {
                    Event::AwaitingApproval(_) => "awaiting",
                    Event::Started(_) => "started",
                    Event::Output(_) => "output",
                    Event::Exited(_) => "exited",
                });
            }
            Ok::<_, tonic::Status>(kinds)
        }
    });
    let pending = loop {
        let ev = watch.message().await.unwrap().expect("an approval event");
        match ev.approval {
            Some(a) if a.state == ppb::ApprovalState::Pending as i32 => break a,
            _ => continue,
        }
    };
    std::fs::remove_dir(sb.ws.join("sub")).unwrap();
    support::approve(&mut approvals, pending.approval_id)
        .await
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call ends")
        .unwrap()
        .expect_err("a run in a removed directory is refused");
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(reason(&err), "NOT_FOUND", "{err:?}");
    assert!(
        err.message().contains("working directory") && err.message().contains("/sub"),
        "{}",
        err.message()
    );
    assert!(!sb.ws.join("made-here").exists() && !sb.ws.join("sub").exists());
}
