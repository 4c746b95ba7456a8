//! Starts the real `toolgate-executor` and `toolgate-policy` binaries on port 0 and talks
//! gRPC to them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolgate_contracts::common::v1::CallContext;
use toolgate_contracts::executor::v1::filesystem_service_client::FilesystemServiceClient;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
pub(crate) use toolgate_runtime::auth::Bearer;

/// A policy that allows everything the built-in baseline does not ask about or deny.
pub(crate) const PERMISSIVE: &str = "default = \"auto\"\nnetwork_default = \"auto\"\n";

/// Asks a human about everything under `deploy/`, denies `terraform`, allows the rest.
pub(crate) const GUARDED: &str = r#"
default = "auto"

[[rule]]
id = "deploy-needs-human"
decision = "ask"
reason = "deploy/ is what production runs"
paths = ["deploy/**"]

[[rule]]
id = "no-terraform"
decision = "deny"
reason = "infrastructure changes go through the platform team's pipeline"
commands = ["terraform"]
"#;

/// A channel carrying a credential.
pub(crate) type AuthChannel = InterceptedService<Channel, Bearer>;

/// The credentials of one test: one per role, in a tokens file both services read.
pub(crate) struct Credentials {
    dir: tempfile::TempDir,
    /// The agent `agent-1`.
    pub agent: String,
    /// The executor `exec-1`.
    pub executor: String,
    /// The approver `alice`.
    pub approver: String,
}

impl Credentials {
    /// Fresh random tokens, written to `tokens.toml` and `executor.token`.
    pub(crate) fn new() -> Credentials {
        let dir = tempfile::tempdir().unwrap();
        let c = Credentials {
            agent: toolgate_runtime::auth::generate_token(),
            executor: toolgate_runtime::auth::generate_token(),
            approver: toolgate_runtime::auth::generate_token(),
            dir,
        };
        let entry = |p: &str, r: &str, t: &str| {
            format!("[[tokens]]\nprincipal = \"{p}\"\nrole = \"{r}\"\ntoken = \"{t}\"\n")
        };
        let text = [
            entry("agent-1", "agent", &c.agent),
            entry("exec-1", "executor", &c.executor),
            entry("alice", "approver", &c.approver),
        ]
        .concat();
        std::fs::write(c.tokens_file(), text).unwrap();
        std::fs::write(c.executor_token_file(), &c.executor).unwrap();
        c
    }

    /// The TOML list of every credential.
    pub(crate) fn tokens_file(&self) -> PathBuf {
        self.dir.path().join("tokens.toml")
    }

    /// The executor's own token, as a file.
    pub(crate) fn executor_token_file(&self) -> PathBuf {
        self.dir.path().join("executor.token")
    }

    /// Lets any user read the credential files (for an executor started as another user).
    pub(crate) fn share(&self) {
        use std::os::unix::fs::PermissionsExt;
        let perm = |p: &Path, mode| std::fs::set_permissions(p, PermissionsExt::from_mode(mode));
        perm(self.dir.path(), 0o755).unwrap();
        perm(&self.tokens_file(), 0o644).unwrap();
        perm(&self.executor_token_file(), 0o644).unwrap();
    }
}

/// A binary next to the executor binary cargo built for these tests.
pub(crate) fn sibling_binary(name: &str) -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_toolgate-executor"));
    let path = exe.with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build --workspace --bins` (tests/run.sh does)",
        path.display()
    );
    path
}

fn read_listening(child: &mut Child, what: &str) -> String {
    read_listening_line(child, what)["listening"]
        .as_str()
        .expect("listening field")
        .to_owned()
}

/// The JSON line a service prints once it listens.
fn read_listening_line(child: &mut Child, what: &str) -> serde_json::Value {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read listening line");
    serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("{what} did not print its address ({e}): {line:?}"))
}

async fn connect(addr: &str, token: Option<&str>) -> AuthChannel {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let bearer = token.map_or_else(Bearer::none, |t| Bearer::new(t).unwrap());
    InterceptedService::new(ch, bearer)
}

/// A running `toolgate-policy` with a SQLite ledger in a temp directory, killed on drop.
pub(crate) struct Policy {
    child: Child,
    /// Holds the ledger and configuration until the service is gone.
    _dir: tempfile::TempDir,
    /// `ip:port` it listens on.
    pub addr: String,
    /// The credentials it accepts.
    pub creds: std::sync::Arc<Credentials>,
}

impl Policy {
    /// Starts the policy service with `policy` as its policy document.
    pub(crate) fn start(policy: &str) -> Policy {
        Self::start_with(policy, std::sync::Arc::new(Credentials::new()))
    }

    /// Starts the policy service with `policy` and the given credentials.
    pub(crate) fn start_with(policy: &str, creds: std::sync::Arc<Credentials>) -> Policy {
        Self::start_env(policy, creds, &[])
    }

    /// Starts the policy service with `policy`, the given credentials and extra environment.
    pub(crate) fn start_env(
        policy: &str,
        creds: std::sync::Arc<Credentials>,
        env: &[(&str, &str)],
    ) -> Policy {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
        let config = format!(
            "listen = \"127.0.0.1:0\"\npolicy_file = {:?}\n\n[ledger]\nurl = {:?}\n\n[auth]\ntokens_file = {:?}\n",
            dir.path().join("policy.toml").display().to_string(),
            format!("sqlite:{}", dir.path().join("ledger.db").display()),
            creds.tokens_file().display().to_string(),
        );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        let bin = sibling_binary("toolgate-policy");
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(dir.path().join("config.toml"))
            .env("TOOLGATE_LOG__FILTER", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolgate-policy");
        let addr = read_listening(&mut child, "toolgate-policy");
        Policy {
            child,
            _dir: dir,
            addr,
            creds,
        }
    }

    /// The policy service's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The URL executors use.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        sigterm(&mut self.child)
    }

    /// An `ApprovalService` client with the approver's credential.
    pub(crate) async fn approvals(&self) -> ApprovalServiceClient<AuthChannel> {
        ApprovalServiceClient::new(connect(&self.addr, Some(&self.creds.approver)).await)
    }
}

impl Drop for Policy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running executor process, killed on drop.
pub(crate) struct Executor {
    child: Child,
    /// `ip:port` it listens on.
    pub addr: String,
    /// `ip:port` of its `/metrics` endpoint, when `metrics_listen` is set.
    pub metrics: Option<String>,
    /// The agent token it accepts.
    pub agent_token: String,
    /// The policy service it started for itself, if any.
    own_policy: Option<Policy>,
}

impl Executor {
    /// Starts the executor on `root` with extra arguments and environment, behind a
    /// permissive policy service of its own.
    pub(crate) fn start(root: &Path, args: &[&str], env: &[(&str, &str)]) -> Executor {
        let policy = Policy::start(PERMISSIVE);
        let mut exe = Self::start_with(&policy, root, args, env);
        exe.own_policy = Some(policy);
        exe
    }

    /// Starts the executor on `root`, authorizing with `policy`.
    pub(crate) fn start_with(
        policy: &Policy,
        root: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Executor {
        Self::start_at(&policy.endpoint(), &policy.creds, root, args, env)
    }

    /// Starts the executor on `root`, authorizing with the policy service at `endpoint`.
    pub(crate) fn start_at(
        endpoint: &str,
        creds: &Credentials,
        root: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Executor {
        Self::start_as(endpoint, creds, root, args, env, None)
    }

    /// [`Executor::start_at`] as the user and group `uid` (with no supplementary groups),
    /// through `setpriv`, as production executors run: not as root.
    pub(crate) fn start_as(
        endpoint: &str,
        creds: &Credentials,
        root: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        uid: Option<u32>,
    ) -> Executor {
        let exe = env!("CARGO_BIN_EXE_toolgate-executor");
        let mut cmd = match uid {
            None => Command::new(exe),
            Some(uid) => {
                creds.share();
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={uid}"))
                    .arg("--clear-groups")
                    .arg(exe);
                c
            }
        };
        cmd.arg("--workspace")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("TOOLGATE_LOG__FILTER", "warn")
            .env("TOOLGATE_POLICY__ENDPOINT", endpoint)
            .env("TOOLGATE_POLICY__TOKEN_FILE", creds.executor_token_file())
            .env("TOOLGATE_AUTH__TOKENS_FILE", creds.tokens_file())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if uid.is_some() {
            // An unprivileged executor gets no delegated cgroup here: it runs with the kernel's
            // fallbacks, as an operator who sets this on such a host chooses to.
            cmd.env("TOOLGATE_PROCESS__REQUIRE_LIMITS", "false");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn toolgate-executor");
        let line = read_listening_line(&mut child, "toolgate-executor");
        Executor {
            child,
            addr: line["listening"]
                .as_str()
                .expect("listening field")
                .to_owned(),
            metrics: line["metrics"].as_str().map(str::to_owned),
            agent_token: creds.agent.clone(),
            own_policy: None,
        }
    }

    /// The executor's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the executor with SIGKILL (no shutdown of any kind) and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The policy service [`Executor::start`] started for this executor.
    pub(crate) fn policy(&self) -> &Policy {
        self.own_policy
            .as_ref()
            .expect("started with Executor::start")
    }

    /// A channel to the executor with the agent's credential.
    pub(crate) async fn channel(&self) -> AuthChannel {
        connect(&self.addr, Some(&self.agent_token)).await
    }

    /// A channel to the executor with someone else's credential.
    pub(crate) async fn channel_as(&self, token: &str) -> AuthChannel {
        connect(&self.addr, Some(token)).await
    }

    /// A channel to the executor without any credential.
    pub(crate) async fn anonymous_channel(&self) -> AuthChannel {
        connect(&self.addr, None).await
    }

    /// A filesystem client.
    pub(crate) async fn fs(&self) -> FilesystemServiceClient<AuthChannel> {
        FilesystemServiceClient::new(self.channel().await)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        sigterm(&mut self.child)
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGTERM to `child` and waits for its exit status.
fn sigterm(child: &mut Child) -> std::process::ExitStatus {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    child.wait().expect("wait")
}

/// A human who approves every pending approval of `policy` until the handle is aborted,
/// through the real `ApprovalService` (watch, then decide) with the approver's credential.
pub(crate) async fn approve_everything(policy: &Policy) -> AbortOnDrop {
    use toolgate_contracts::policy::v1 as ppb;
    let (mut approvals, mut watch) = watch_pending(policy).await;
    AbortOnDrop(tokio::spawn(async move {
        while let Ok(Some(ev)) = watch.message().await {
            let Some(a) = ev.approval else { continue };
            if a.state != ppb::ApprovalState::Pending as i32 {
                continue;
            }
            let _ = approve(&mut approvals, a.approval_id).await;
        }
    }))
}

/// The approver's client, and every approval of `policy` that turns pending from now on, as
/// the approver's dashboard sees them.
pub(crate) async fn watch_pending(
    policy: &Policy,
) -> (
    ApprovalServiceClient<AuthChannel>,
    tonic::Streaming<toolgate_contracts::policy::v1::WatchApprovalsResponse>,
) {
    use toolgate_contracts::policy::v1 as ppb;
    let mut approvals = policy.approvals().await;
    let watch = approvals
        .watch_approvals(ppb::WatchApprovalsRequest {
            states: vec![ppb::ApprovalState::Pending as i32],
            ..Default::default()
        })
        .await
        .expect("watch approvals")
        .into_inner();
    (approvals, watch)
}

/// Approves `approval_id` as the test's human.
pub(crate) async fn approve(
    approvals: &mut ApprovalServiceClient<AuthChannel>,
    approval_id: String,
) -> Result<(), tonic::Status> {
    use toolgate_contracts::policy::v1 as ppb;
    approvals
        .decide_approval(ppb::DecideApprovalRequest {
            approval_id,
            verdict: ppb::Verdict::Approve as i32,
            reason: "test approver".into(),
            ..Default::default()
        })
        .await
        .map(drop)
}

/// Aborts a background task when dropped.
pub(crate) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A call context that waits up to `secs` seconds for a human.
pub(crate) fn ctx_waiting(secs: i64) -> Option<CallContext> {
    let mut c = ctx();
    if let Some(c) = c.as_mut() {
        c.approval_wait = Some(prost_types::Duration {
            seconds: secs,
            nanos: 0,
        });
    }
    c
}

/// A fresh call context with a unique call id.
pub(crate) fn ctx() -> Option<CallContext> {
    static N: AtomicU64 = AtomicU64::new(0);
    Some(CallContext {
        call_id: format!(
            "call-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ),
        session_id: "session-test".into(),
        approval_wait: None,
        description: String::new(),
    })
}

/// The `ErrorInfo.reason` of a status.
pub(crate) fn reason(s: &tonic::Status) -> String {
    match toolgate_contracts::status::error_info(s) {
        Some((r, _)) => r,
        None => panic!("status without ErrorInfo: {s:?}"),
    }
}

/// A workspace directory plus a sibling `OUTSIDE` directory holding sentinels.
pub(crate) struct Sandbox {
    _dir: tempfile::TempDir,
    /// The workspace root.
    pub ws: PathBuf,
    /// A sibling directory outside the root.
    pub out: PathBuf,
}

/// The sentinel text that must never reach a client.
pub(crate) const SENTINEL: &str = "OUTSIDE-SENTINEL";

impl Sandbox {
    /// Creates `ws/` and `out/secret` (content: the sentinel).
    pub(crate) fn new() -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let out = dir.path().join("out");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("secret"), SENTINEL).unwrap();
        Sandbox { _dir: dir, ws, out }
    }

    /// The outside tree's contents, for before/after comparison.
    pub(crate) fn outside_snapshot(&self) -> Vec<(String, Vec<u8>, u32)> {
        use std::os::unix::fs::PermissionsExt;
        let mut v: Vec<_> = std::fs::read_dir(&self.out)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                let content = if m.is_file() {
                    std::fs::read(e.path()).unwrap()
                } else {
                    Vec::new()
                };
                (
                    e.file_name().to_string_lossy().into_owned(),
                    content,
                    m.permissions().mode(),
                )
            })
            .collect();
        v.sort();
        v
    }
}
