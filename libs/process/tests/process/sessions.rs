//! A session sandbox: the confined runs of one session share a network namespace (a server one
//! run starts answers the next run of the same session and no one else), an IPC namespace and
//! a capped `/tmp` that outlives each run. The same tests run again in a child process of this
//! binary as an unprivileged user (`setpriv`), as production executors run.

use std::os::fd::OwnedFd;
use std::time::Duration;

use toolgate_process::{Config, Run, RunRequest, Runner, SandboxConfig, SessionNamespaces, Status};

use crate::common::{Outcome, Partial, collect, config, cwd_of, spec, workspace};

/// A runner with the default (confined) profiles; an unprivileged one has no delegated
/// cgroup here, so it runs with the kernel's fallbacks, as its operator would choose.
fn runner_with(config: Config) -> Runner {
    let unprivileged = rustix::process::geteuid().as_raw() != 0;
    Runner::new(Config {
        require_limits: !unprivileged,
        ..config
    })
    .expect("runner starts")
}

fn session_runner() -> Runner {
    runner_with(config())
}

/// Starts `script` in `session` (or none).
fn start(runner: &Runner, script: &str, cwd: OwnedFd, session: Option<&SessionNamespaces>) -> Run {
    let mut s = spec(RunRequest::script(script, cwd));
    if let Some(session) = session {
        s.set_session(session.clone());
    }
    runner.try_run(s).expect("run starts")
}

async fn run_in(
    runner: &Runner,
    script: &str,
    cwd: OwnedFd,
    session: Option<&SessionNamespaces>,
) -> Outcome {
    collect(start(runner, script, cwd, session)).await
}

/// A server on the run's loopback that prints its port, answers one connection with `hello`
/// and exits.
const SERVER: &str = r#"exec python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.sendall(b"hello\n")
c.close()
'"#;

/// Connects to 127.0.0.1:`port` and prints the line it reads, or the connect error's name.
fn client(port: &str) -> String {
    format!(
        r#"exec python3 -c '
import errno, socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", {port}))
    print(s.makefile().readline().strip())
except OSError as e:
    print(errno.errorcode[e.errno])
'"#
    )
}

#[tokio::test]
async fn session_runs_reach_a_server_another_run_of_their_session_started() {
    println!("euid={}", rustix::process::geteuid().as_raw());
    let runner = session_runner();
    let (dir, cwd) = workspace();
    let a = runner.session_namespaces().expect("a session");
    let b = runner.session_namespaces().expect("another session");
    let mut server = start(&runner, SERVER, cwd, Some(&a));
    let mut served = Partial::default();
    let port = served.line(&mut server).await;
    assert!(port.parse::<u16>().is_ok(), "{port}");

    let other = run_in(&runner, &client(&port), cwd_of(&dir), Some(&b)).await;
    assert_eq!(
        other.stdout_str(),
        "ECONNREFUSED\n",
        "another session's run"
    );
    let none = run_in(&runner, &client(&port), cwd_of(&dir), None).await;
    assert_eq!(
        none.stdout_str(),
        "ECONNREFUSED\n",
        "a run without a session"
    );
    let same = run_in(&runner, &client(&port), cwd_of(&dir), Some(&a)).await;
    assert_eq!(
        same.stdout_str(),
        "hello\n",
        "{}",
        String::from_utf8_lossy(&same.stderr)
    );

    let served = served.finish(server).await;
    assert_eq!(served.exited.status, Status::Exited(0));
    let isolation = &served.started.unwrap().isolation;
    assert!(isolation.namespaces.contains(&"session"), "{isolation:?}");
    assert!(
        !none
            .started
            .unwrap()
            .isolation
            .namespaces
            .contains(&"session"),
        "a run without a session says so"
    );
}

#[tokio::test]
async fn session_tmp_persists_across_its_runs_only_and_is_capped() {
    println!("euid={}", rustix::process::geteuid().as_raw());
    let mut config = config();
    config.sandbox.tmp_bytes = 1 << 20;
    let runner = runner_with(config);
    let (dir, cwd) = workspace();
    let a = runner.session_namespaces().unwrap();
    let b = runner.session_namespaces().unwrap();
    let marker = format!("toolgate-session-test-{}", std::process::id());

    let wrote = run_in(
        &runner,
        &format!("echo kept > /tmp/{marker} && echo ok"),
        cwd,
        Some(&a),
    )
    .await;
    assert_eq!(
        wrote.stdout_str(),
        "ok\n",
        "{}",
        String::from_utf8_lossy(&wrote.stderr)
    );
    assert!(
        !std::path::Path::new("/tmp").join(&marker).exists(),
        "the session's /tmp is not the host's"
    );
    // Nor does the host see it where the sessions' /tmp are mounted (each only in its own
    // mount namespace).
    let prefix = format!("toolgate-sessions-{}-", std::process::id());
    let mount_points: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .collect();
    assert!(!mount_points.is_empty());
    for dir in mount_points {
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{dir:?}");
    }
    let host = tempfile::Builder::new()
        .prefix("toolgate-host-file-")
        .tempfile_in("/tmp")
        .unwrap();
    let hidden = run_in(
        &runner,
        &format!(
            "test -e {} && echo visible || echo absent",
            host.path().display()
        ),
        cwd_of(&dir),
        Some(&a),
    )
    .await;
    assert_eq!(
        hidden.stdout_str(),
        "absent\n",
        "the host's /tmp is not the session's"
    );
    let read = run_in(
        &runner,
        &format!("cat /tmp/{marker}"),
        cwd_of(&dir),
        Some(&a),
    )
    .await;
    assert_eq!(
        read.stdout_str(),
        "kept\n",
        "the next run of the session finds it"
    );
    for (who, session) in [("another session", Some(&b)), ("no session", None)] {
        let out = run_in(
            &runner,
            &format!("test -e /tmp/{marker} && echo visible || echo absent"),
            cwd_of(&dir),
            session,
        )
        .await;
        assert_eq!(out.stdout_str(), "absent\n", "{who}");
    }

    // 2 MiB into a 1 MiB /tmp: the tmpfs refuses, and keeps refusing in the next run.
    let full = run_in(
        &runner,
        "head -c 2097152 /dev/zero > /tmp/big; echo $?",
        cwd_of(&dir),
        Some(&a),
    )
    .await;
    assert_eq!(full.stdout_str(), "1\n");
    assert!(
        String::from_utf8_lossy(&full.stderr).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    let size = run_in(
        &runner,
        "stat -c %s /tmp/big; head -c 1048576 /dev/zero > /tmp/more; echo $?",
        cwd_of(&dir),
        Some(&a),
    )
    .await;
    let lines: Vec<&str> = size
        .stdout
        .split(|b| *b == b'\n')
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert!(lines[0].parse::<u64>().unwrap() <= 1 << 20, "{lines:?}");
    assert_eq!(lines[1], "1", "still full: {lines:?}");
}

#[tokio::test]
async fn session_ipc_objects_are_shared_by_its_runs_only() {
    println!("euid={}", rustix::process::geteuid().as_raw());
    let runner = session_runner();
    let (dir, cwd) = workspace();
    let a = runner.session_namespaces().unwrap();
    let b = runner.session_namespaces().unwrap();
    let made = run_in(&runner, "ipcmk -Q", cwd, Some(&a)).await;
    let id = made
        .stdout_str()
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_owned();
    assert!(
        id.parse::<u32>().is_ok(),
        "{}{}",
        made.stdout_str(),
        String::from_utf8_lossy(&made.stderr)
    );
    let queues = "ipcs -q | awk '$2 ~ /^[0-9]+$/ { print $2 }'";
    let same = run_in(&runner, queues, cwd_of(&dir), Some(&a)).await;
    assert_eq!(
        same.stdout_str(),
        format!("{id}\n"),
        "the session's next run sees the queue"
    );
    for (who, session) in [("another session", Some(&b)), ("no session", None)] {
        let out = run_in(&runner, queues, cwd_of(&dir), session).await;
        assert_eq!(out.stdout_str(), "", "{who}");
    }
}

/// Outside a session every run has an IPC namespace of its own, which its clone makes: never
/// the executor's, never another run's. Each
/// run leaves a message queue behind, so a run in a namespace some run had before would see
/// two. (Namespace inode numbers are reused once a namespace is gone, so they cannot tell.)
#[tokio::test]
async fn runs_outside_a_session_each_get_an_ipc_namespace_of_their_own() {
    let runner = session_runner();
    let (dir, cwd) = workspace();
    let own = std::fs::read_link("/proc/self/ns/ipc").unwrap();
    let script =
        "readlink /proc/self/ns/ipc; ipcmk -Q >/dev/null; ipcs -q | awk '$2 ~ /^[0-9]+$/' | wc -l";
    let mut cwd = Some(cwd);
    for i in 0..12 {
        let fd = cwd.take().unwrap_or_else(|| cwd_of(&dir));
        let out = run_in(&runner, script, fd, None).await;
        let text = out.stdout_str();
        let mut lines = text.lines();
        let ns = lines.next().unwrap_or_default();
        assert!(
            ns.starts_with("ipc:["),
            "run {i}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_ne!(
            std::path::Path::new(ns),
            own,
            "run {i} is in the executor's"
        );
        assert_eq!(
            lines.next(),
            Some("1"),
            "run {i} sees only its own queue: {text}"
        );
    }
}

#[tokio::test]
async fn session_networked_run_keeps_its_gated_namespace_but_shares_tmp() {
    println!("euid={}", rustix::process::geteuid().as_raw());
    let runner = session_runner();
    let (dir, cwd) = workspace();
    let a = runner.session_namespaces().unwrap();
    let mut server = start(&runner, SERVER, cwd, Some(&a));
    let mut served = Partial::default();
    let port = served.line(&mut server).await;
    let wrote = run_in(&runner, "echo from-a > /tmp/shared", cwd_of(&dir), Some(&a)).await;
    assert_eq!(wrote.exited.status, Status::Exited(0));

    let mut req = RunRequest::script(
        format!("cat /tmp/shared; exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
        cwd_of(&dir),
    );
    req.profile = "network".into();
    // The gate's sockets are dropped: whatever the run connects to is refused, never the
    // session's loopback.
    let mut networked = spec(req).with_egress(Box::new(|_| {}));
    networked.set_session(a.clone());
    let out = collect(runner.try_run(networked).unwrap()).await;
    let text = out.stdout_str();
    assert!(text.starts_with("from-a\n"), "{text}");
    assert!(!text.contains("connected"), "{text}");
    let isolation = out.started.unwrap().isolation;
    assert!(isolation.network && isolation.namespaces.contains(&"session"));

    // The server is still waiting for its one connection: a run of the session ends it.
    let same = run_in(&runner, &client(&port), cwd_of(&dir), Some(&a)).await;
    assert_eq!(same.stdout_str(), "hello\n");
    assert_eq!(served.finish(server).await.exited.status, Status::Exited(0));
}

#[tokio::test]
async fn unconfined_runs_ignore_the_session() {
    let runner = Runner::new(Config {
        sandbox: SandboxConfig::unconfined(),
        require_limits: false,
        ..config()
    })
    .unwrap();
    let session = runner
        .session_namespaces()
        .expect("a session, which holds nothing");
    let (_dir, cwd) = workspace();
    let out = run_in(&runner, "echo ran", cwd, Some(&session)).await;
    assert_eq!(out.stdout_str(), "ran\n");
    let isolation = out.started.unwrap().isolation;
    assert!(!isolation.sandboxed && !isolation.namespaces.contains(&"session"));
}

#[tokio::test]
async fn a_session_of_another_runner_is_refused() {
    let one = session_runner();
    let two = session_runner();
    let theirs = two.session_namespaces().unwrap();
    let (_dir, cwd) = workspace();
    let mut s = spec(RunRequest::script("true", cwd));
    s.set_session(theirs);
    let err = one.try_run(s).expect_err("refused");
    assert!(err.to_string().contains("another runner"), "{err}");
}

/// The session tests above, in a child process of this test binary running as `nobody`
/// through `setpriv`: the session sandbox needs no privilege but user namespaces.
#[tokio::test]
async fn an_unprivileged_runner_gets_the_same_sessions() {
    let exe = std::env::current_exe().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(["sessions::session_", "--nocapture", "--test-threads=2"])
            .current_dir("/")
            .env("TMPDIR", "/tmp")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the unprivileged tests end")
    .expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 4 passed"), "{stdout}");
    assert_eq!(stdout.matches("euid=65534").count(), 4, "{stdout}");
}
