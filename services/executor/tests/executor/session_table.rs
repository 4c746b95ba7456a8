//! The session table end to end on the real binaries: `persist_cwd` (working directory and variables
//! kept between calls), the session sandbox (a session's runs share loopback, another
//! session's do not), pinning a session to the executor holding it, idle reaping and what the
//! ledger records of it.

use crate::process::{Outcome, run, script};
use crate::support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::{Executor, Policy, Sandbox, reason};
use tonic::Code;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;

/// A script call of `session` with `persist_cwd`.
fn persisted(session: &str, s: &str) -> pb::RunRequest {
    in_session(session, s, true)
}

/// A script call of `session`.
fn in_session(session: &str, s: &str, persist: bool) -> pb::RunRequest {
    let mut r = script(s);
    if let Some(c) = r.context.as_mut() {
        c.session_id = session.to_owned();
    }
    r.persist_cwd = persist;
    r
}

fn stdout(o: &Outcome) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The session state `Exited` carried.
fn session_of(o: &Outcome) -> (String, HashMap<String, String>) {
    let s = o
        .exited
        .session
        .clone()
        .expect("a persist_cwd run's Exited carries the session's state");
    (s.cwd, s.env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persist_cwd_moves_the_working_directory_and_only_inside_the_workspace() {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws.join("sub/deeper")).unwrap();
    std::os::unix::fs::symlink(&sb.out, sb.ws.join("out-link")).unwrap();
    let root = std::fs::canonicalize(&sb.ws).unwrap();
    let exe = Executor::start(&sb.ws, &[], &[]);
    let s = "cwd-session";

    let o = run(&exe, persisted(s, "cd sub")).await.unwrap();
    assert_eq!(session_of(&o).0, "sub");
    let o = run(&exe, persisted(s, "pwd")).await.unwrap();
    assert_eq!(stdout(&o), format!("{}/sub\n", root.display()));
    // Without the flag the call neither reads nor changes the session's directory.
    let o = run(&exe, in_session(s, "pwd; cd deeper", false))
        .await
        .unwrap();
    assert_eq!(stdout(&o), format!("{}\n", root.display()));
    assert!(o.exited.session.is_none());
    // A relative `cwd` resolves from the session's directory.
    let mut r = persisted(s, "pwd");
    r.cwd = "deeper".into();
    let o = run(&exe, r).await.unwrap();
    assert_eq!(stdout(&o), format!("{}/sub/deeper\n", root.display()));
    assert_eq!(session_of(&o).0, "sub/deeper");
    // Out of the workspace: the directory stays where it was.
    for escape in [
        "cd /etc",
        "cd ../../..",
        "cd /; cd \"$OLDPWD\"/../../..",
        "cd ../../out-link",
    ] {
        let o = run(&exe, persisted(s, escape)).await.unwrap();
        assert_eq!(session_of(&o).0, "sub/deeper", "{escape}");
    }
    // A relative `cwd` that escapes from there is refused as any request path.
    let mut r = persisted(s, "pwd");
    r.cwd = "../../..".into();
    let err = run(&exe, r)
        .await
        .err()
        .expect("an escaping cwd is refused");
    assert_eq!(reason(&err), "PATH_OUTSIDE_WORKSPACE", "{err:?}");
    // `exit` and `set -e` still report where the shell was.
    let o = run(&exe, persisted(s, "cd ..; exit 3")).await.unwrap();
    assert_eq!(session_of(&o).0, "sub");
    let o = run(&exe, persisted(s, "set -e; cd ..; false; cd sub"))
        .await
        .unwrap();
    assert_eq!(session_of(&o).0, ".");
    // A script that takes the EXIT trap, or writes junk where the state goes, changes nothing.
    let o = run(&exe, persisted(s, "trap 'echo bye' EXIT; cd sub"))
        .await
        .unwrap();
    assert_eq!(session_of(&o).0, ".");
    let o = run(
        &exe,
        persisted(s, "cd sub; printf junk >&\"$__toolgate_fd\""),
    )
    .await
    .unwrap();
    assert_eq!(session_of(&o).0, ".");
    // fd 3 is not open in the script, as in a plain run; the state still arrives.
    let o = run(&exe, persisted(s, "cd sub; echo junk >&3"))
        .await
        .unwrap();
    assert_eq!(session_of(&o).0, "sub");
    // Another session starts at the root.
    let o = run(&exe, persisted("cwd-other", "pwd")).await.unwrap();
    assert_eq!(stdout(&o), format!("{}\n", root.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlisted_exports_persist_and_others_never() {
    let sb = Sandbox::new();
    let exe = Executor::start(
        &sb.ws,
        &[],
        &[(
            "TOOLGATE_PROCESS__ALLOWED_ENV",
            "[\"APP_*\", \"NODE_ENV\", \"GITHUB_TOKEN\"]",
        )],
    );
    let s = "env-session";
    let o = run(
        &exe,
        persisted(
            s,
            "export APP_MODE=dev NODE_ENV=test OTHER=x GITHUB_TOKEN=ghp_x APP_URL=https://u:pw@host/ APP_LINES=$'a\\nb'",
        ),
    )
    .await
    .unwrap();
    let env = session_of(&o).1;
    assert_eq!(
        env,
        HashMap::from([
            ("APP_MODE".to_owned(), "dev".to_owned()),
            ("NODE_ENV".to_owned(), "test".to_owned()),
            ("APP_LINES".to_owned(), "a\nb".to_owned()),
        ]),
        "not allowlisted (OTHER), credential-like (GITHUB_TOKEN, a URL with a password) are never kept"
    );
    let show = "echo \"$APP_MODE|$NODE_ENV|$OTHER|$GITHUB_TOKEN|$APP_URL\"";
    let o = run(&exe, persisted(s, show)).await.unwrap();
    assert_eq!(stdout(&o), "dev|test|||\n");
    let o = run(&exe, in_session(s, show, false)).await.unwrap();
    assert_eq!(
        stdout(&o),
        "||||\n",
        "without persist_cwd the session's variables are not given"
    );
    // The call's own `env` wins for that call and is not kept.
    let mut r = persisted(s, "echo $NODE_ENV");
    r.env.insert("NODE_ENV".into(), "prod".into());
    let o = run(&exe, r).await.unwrap();
    assert_eq!(stdout(&o), "prod\n");
    assert_eq!(session_of(&o).1["NODE_ENV"], "test");
    // `unset` removes a kept variable.
    let o = run(&exe, persisted(s, "unset APP_MODE")).await.unwrap();
    assert!(!session_of(&o).1.contains_key("APP_MODE"));
    let o = run(&exe, persisted(s, show)).await.unwrap();
    assert_eq!(stdout(&o), "|test|||\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_report_the_idle_timeout() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[("TOOLGATE_SESSIONS__IDLE_TIMEOUT_S", "77")]);
    let caps = ExecutorServiceClient::new(exe.channel().await)
        .get_capabilities(pb::GetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    let idle = caps.limits.unwrap().session_idle_timeout.unwrap();
    assert_eq!(idle.seconds, 77);
}

/// Waits until `f` holds, for at most `limit`.
pub(crate) async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_pinned_to_the_executor_holding_it() {
    let sb = Sandbox::new();
    let policy = Policy::start(support::PERMISSIVE);
    let a = Executor::start_with(&policy, &sb.ws, &[], &[("TOOLGATE_EXECUTOR_ID", "exec-a")]);
    let b = Executor::start_with(&policy, &sb.ws, &[], &[("TOOLGATE_EXECUTOR_ID", "exec-b")]);
    let o = run(&a, persisted("pinned", "cd .")).await.unwrap();
    assert_eq!(session_of(&o).0, ".");
    let err = run(&b, persisted("pinned", "echo here"))
        .await
        .err()
        .expect("B must not serve a session A holds");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "SESSION_ELSEWHERE");
    let (_, md) = toolgate_contracts::status::error_info(&err).unwrap();
    assert_eq!(
        md.get("executor_id").map(String::as_str),
        Some("exec-a"),
        "{md:?}"
    );
    assert!(err.message().contains("exec-a"), "{}", err.message());
    // A keeps serving it, without another claim.
    run(&a, persisted("pinned", "true")).await.unwrap();
    // With `pin` off, B serves it with a sandbox of its own.
    let c = Executor::start_with(
        &policy,
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_EXECUTOR_ID", "exec-c"),
            ("TOOLGATE_SESSIONS__PIN", "false"),
        ],
    );
    let o = run(&c, persisted("pinned", "echo here")).await.unwrap();
    assert_eq!(stdout(&o), "here\n");
}

/// Starts `s` in the background in `session`; answers its `Started` event.
async fn background(exe: &Executor, session: &str, s: &str) -> pb::Started {
    background_request(exe, in_session(session, s, false)).await
}

async fn background_request(exe: &Executor, mut r: pb::RunRequest) -> pb::Started {
    use pb::run_response::Event;
    r.background = true;
    let mut client = pb::process_service_client::ProcessServiceClient::new(exe.channel().await);
    let mut stream = client.run(r).await.expect("background run").into_inner();
    let mut started = None;
    while let Some(msg) = stream.message().await.expect("background stream") {
        if let Some(Event::Started(s)) = msg.event {
            started = Some(s);
        }
    }
    started.expect("a background run answers its Started event")
}

/// A script that connects to 127.0.0.1:`port` (retrying for a while) and prints what the
/// server says; exits 1 when nothing ever answers.
fn client_script(port: u16) -> String {
    format!(
        "python3 -c 'import socket,sys,time\nfor i in range(60):\n try:\n  c=socket.create_connection((\"127.0.0.1\",{port}))\n  sys.stdout.write(c.recv(100).decode())\n  sys.exit(0)\n except OSError:\n  time.sleep(0.1)\nsys.exit(1)'"
    )
}

/// A TCP server on 127.0.0.1:`port` that answers `greeting` to every connection.
fn server_script(port: u16, greeting: &str) -> String {
    format!(
        "exec python3 -c 'import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind((\"127.0.0.1\",{port}))\ns.listen()\nwhile True:\n c,_=s.accept()\n c.sendall(b\"{greeting}\")\n c.close()'"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_runs_share_loopback_and_another_sessions_do_not() {
    let sb = Sandbox::new();
    let exe = Executor::start(&sb.ws, &[], &[]);
    background(&exe, "net-a", &server_script(8765, "hello-from-a")).await;
    let o = run(&exe, in_session("net-a", &client_script(8765), false))
        .await
        .unwrap();
    assert_eq!(
        stdout(&o),
        "hello-from-a",
        "{:?}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Another session has a loopback of its own: nothing listens there.
    let o = run(&exe, in_session("net-b", &client_script(8765), false))
        .await
        .unwrap();
    assert_eq!(stdout(&o), "");
    assert!(matches!(
        o.exited.status.and_then(|s| s.status),
        Some(toolgate_contracts::common::v1::exit_status::Status::Exited(
            1
        ))
    ));
    // A `&`-detached server of a foreground run answers the session's next call while it
    // lives too.
    let serve = tokio::spawn({
        let r = in_session(
            "net-c",
            &format!(
                "{} & sleep 4",
                server_script(8766, "hello-from-c").replacen("exec ", "", 1)
            ),
            false,
        );
        let exe_addr = exe.channel().await;
        async move {
            let mut c = pb::process_service_client::ProcessServiceClient::new(exe_addr);
            let mut s = c.run(r).await.unwrap().into_inner();
            while s.message().await.unwrap().is_some() {}
        }
    });
    let o = run(&exe, in_session("net-c", &client_script(8766), false))
        .await
        .unwrap();
    assert_eq!(stdout(&o), "hello-from-c");
    serve.await.unwrap();
}

/// Whether process `pid` (host pid namespace) exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z"),
        Err(_) => false,
    }
}

/// `GetSession` through the policy service, with the approver's credential.
async fn get_session(policy: &Policy, session_id: &str) -> toolgate_contracts::policy::v1::Session {
    use toolgate_contracts::policy::v1 as ppb;
    let ch = tonic::transport::Channel::from_shared(policy.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let ch = tonic::service::interceptor::InterceptedService::new(
        ch,
        support::Bearer::new(&policy.creds.approver).unwrap(),
    );
    ppb::session_service_client::SessionServiceClient::new(ch)
        .get_session(ppb::GetSessionRequest {
            session_id: session_id.to_owned(),
        })
        .await
        .expect("GetSession")
        .into_inner()
        .session
        .expect("a session")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_is_reaped_with_its_background_runs_and_the_ledger_records_it() {
    let sb = Sandbox::new();
    let policy = Policy::start(support::PERMISSIVE);
    let exe = Executor::start_with(
        &policy,
        &sb.ws,
        &[],
        &[
            ("TOOLGATE_EXECUTOR_ID", "exec-idle"),
            ("TOOLGATE_SESSIONS__IDLE_TIMEOUT_S", "2"),
        ],
    );
    let started = background(&exe, "idle-s", "sleep 300").await;
    assert!(alive(started.pid), "the background run runs");
    // A session in use is not reaped: calls keep it alive.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        run(&exe, in_session("idle-busy", "true", false))
            .await
            .unwrap();
    }
    assert!(
        eventually(Duration::from_secs(10), || !alive(started.pid)).await,
        "the idle session's background run is stopped with it"
    );
    let s = get_session(&policy, "idle-s").await;
    assert!(s.ended_at.is_some(), "{s:?}");
    assert_eq!(s.end_reason, "idle");
    assert!(!s.claimed);
    let busy = get_session(&policy, "idle-busy").await;
    assert!(busy.ended_at.is_none() && busy.claimed, "{busy:?}");
    // The next call of the reaped session starts it again (a new sandbox, its state kept).
    run(&exe, in_session("idle-s", "true", false))
        .await
        .unwrap();
    assert!(get_session(&policy, "idle-s").await.claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_killed_and_restarted_leaves_no_process_and_its_runs_read_lost() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.ws.join("sub")).unwrap();
    let root = std::fs::canonicalize(&sb.ws).unwrap();
    let policy = Policy::start(support::PERMISSIVE);
    let env = [("TOOLGATE_EXECUTOR_ID", "exec-k")];
    let mut a = Executor::start_with(&policy, &sb.ws, &[], &env);
    let o = run(&a, persisted("k", "cd sub")).await.unwrap();
    assert_eq!(session_of(&o).0, "sub");
    let request = in_session("k", "sleep 600 & sleep 600", false);
    let started = background_request(&a, request.clone()).await;
    assert!(alive(started.pid));
    a.kill();
    assert!(
        eventually(Duration::from_secs(10), || !alive(started.pid)).await,
        "no process of the session outlives its executor"
    );
    let b = Executor::start_with(&policy, &sb.ws, &[], &env);
    // The run's decision has no outcome and never will: its replay reads OUTCOME_UNKNOWN.
    let mut replay = request.clone();
    replay.background = true;
    let err = run(&b, replay)
        .await
        .err()
        .expect("a replay of a lost run is refused");
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert_eq!(reason(&err), "OUTCOME_UNKNOWN", "{err:?}");
    // The session's working directory comes back from the ledger.
    let o = run(&b, persisted("k", "pwd")).await.unwrap();
    assert_eq!(stdout(&o), format!("{}/sub\n", root.display()));
    // Nothing of A's session survives anywhere: no `sleep 600` of this workspace runs.
    let leftovers: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &i32| {
            std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c.starts_with(&root))
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"sleep\x00600"))
                && alive(*pid)
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_its_first_principal() {
    let sb = Sandbox::new();
    let policy = Policy::start(support::PERMISSIVE);
    // A second agent, `agent-2`, beside the usual credentials.
    let dir = tempfile::tempdir().unwrap();
    let other = toolgate_runtime::auth::generate_token();
    let mut tokens = std::fs::read_to_string(policy.creds.tokens_file()).unwrap();
    tokens.push_str(&format!(
        "[[tokens]]\nprincipal = \"agent-2\"\nrole = \"agent\"\ntoken = \"{other}\"\n"
    ));
    let tokens_file = dir.path().join("tokens.toml");
    std::fs::write(&tokens_file, tokens).unwrap();
    let tokens_file = tokens_file.display().to_string();
    let env = |id: &'static str| {
        [
            ("TOOLGATE_AUTH__TOKENS_FILE", tokens_file.clone()),
            ("TOOLGATE_EXECUTOR_ID", id.to_owned()),
            ("TOOLGATE_SESSIONS__PIN", "false".to_owned()),
        ]
    };
    let env_a = env("exec-a");
    let env_a: Vec<(&str, &str)> = env_a.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = Executor::start_with(&policy, &sb.ws, &[], &env_a);
    run(&a, persisted("mine", "cd .")).await.unwrap();
    let as_other = |exe: &Executor| {
        let exe_addr = exe.addr.clone();
        let other = other.clone();
        async move {
            let ch = tonic::transport::Channel::from_shared(format!("http://{exe_addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            let ch = tonic::service::interceptor::InterceptedService::new(
                ch,
                support::Bearer::new(&other).unwrap(),
            );
            let mut c = pb::process_service_client::ProcessServiceClient::new(ch);
            c.run(persisted("mine", "echo joined")).await.map(|_| ())
        }
    };
    // On the executor holding it, and on another (which asks the ledger).
    let err = as_other(&a)
        .await
        .expect_err("another principal is refused");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let env_b = env("exec-b");
    let env_b: Vec<(&str, &str)> = env_b.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let b = Executor::start_with(&policy, &sb.ws, &[], &env_b);
    let err = as_other(&b)
        .await
        .expect_err("the ledger refuses another principal");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // Its own session is its own.
    let mut r = persisted("theirs", "echo ok");
    r.context.as_mut().unwrap().session_id = "theirs".into();
    let ch = b.channel_as(&other).await;
    let mut c = pb::process_service_client::ProcessServiceClient::new(ch);
    let mut s = c.run(r).await.unwrap().into_inner();
    while s.message().await.unwrap().is_some() {}
}
