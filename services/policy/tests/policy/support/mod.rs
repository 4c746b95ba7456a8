//! Test harness: the real `toolgate-policy` binary on port 0 over a fresh database
//! (a Postgres database created for the test, or a SQLite file), with a fixed set of
//! credentials, and gRPC clients that present them.

/// Runs each named `async fn(Backend)` of the calling module as two tests, one per ledger
/// backend (`postgres::NAME`, `sqlite::NAME`).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await;
                }
            )*
        }
    };
}

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::Connection;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolgate_contracts::common::v1::{CallContext, ToolKind};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;
use toolgate_contracts::policy::v1::session_service_client::SessionServiceClient;
use toolgate_ledger::testing::FreshPg;
use toolgate_runtime::auth::Bearer;

/// A credential of the test configuration: principal, role, token.
pub(crate) type Cred = (&'static str, &'static str, &'static str);

pub(crate) const AGENT: Cred = ("agent-1", "agent", "agent-1-token-0123456789");
pub(crate) const AGENT2: Cred = ("agent-2", "agent", "agent-2-token-0123456789");
pub(crate) const EXEC: Cred = ("exec-1", "executor", "exec-1-token-0123456789");
pub(crate) const ALICE: Cred = ("alice", "approver", "alice-token-0123456789");
pub(crate) const BOB: Cred = ("bob", "approver", "bob-token-0123456789");
pub(crate) const OPS: Cred = ("ops", "admin", "ops-token-0123456789");
/// A second executor credential (another executor deployment).
pub(crate) const EXEC2: Cred = ("exec-2", "executor", "exec-2-token-0123456789");
const ALL: [Cred; 7] = [AGENT, AGENT2, EXEC, ALICE, BOB, OPS, EXEC2];

/// A secret the ledger is configured to scrub; it must never be stored.
pub(crate) const CANARY: &str = "CANARY-4d1f8a2b-policy-secret";

/// The policy the tests run under.
pub(crate) const POLICY: &str = r#"
default = "ask"

[[rule]]
id = "echo"
decision = "auto"
reason = "printing is harmless"
commands = ["echo *"]

[[rule]]
id = "no-curl"
decision = "deny"
reason = "network downloads are not allowed; vendor the file instead"
commands = ["curl *"]

[[rule]]
id = "terraform"
decision = "ask"
reason = "terraform changes infrastructure"
commands = ["terraform *"]
"#;

/// Which ledger backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Postgres,
    Sqlite,
}

/// One test's database, dropped afterwards.
pub(crate) struct Db {
    pub url: String,
    pg: Option<FreshPg>,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    pub(crate) async fn new(backend: Backend) -> Db {
        match backend {
            Backend::Postgres => {
                let db = FreshPg::create("tg_policy_test");
                Db {
                    url: db.url().to_owned(),
                    pg: Some(db),
                    _dir: None,
                }
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                Db {
                    url: format!("sqlite:{}", dir.path().join("ledger.db").display()),
                    pg: None,
                    _dir: Some(dir),
                }
            }
        }
    }

    /// Every stored text of the ledger tables, for leak checks.
    pub(crate) async fn dump(&self) -> String {
        let queries = [
            "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_decisions t",
            "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_approvals t",
            "SELECT coalesce(string_agg(row_to_json(t)::text, ''), '') FROM tg_outcomes t",
            "SELECT coalesce(string_agg(kind || subject || encode(payload, 'escape'), ''), '') FROM tg_audit",
        ];
        if self.pg.is_some() {
            let mut c = sqlx::PgConnection::connect(&self.url).await.unwrap();
            let mut out = String::new();
            for q in queries {
                let s: String = sqlx::query_scalar(q).fetch_one(&mut c).await.unwrap();
                out.push_str(&s);
            }
            out
        } else {
            let path = self.url.trim_start_matches("sqlite:");
            let mut bytes = std::fs::read(path).unwrap();
            if let Ok(wal) = std::fs::read(format!("{path}-wal")) {
                bytes.extend(wal);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }
}

/// Knobs of one server's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub lease_ms: u64,
    pub pending_ttl_ms: u64,
    pub max_wait_ms: u64,
    pub retry_ms: u64,
    /// Serve `/metrics` on a port of its own.
    pub metrics: bool,
    /// A crash point (`TOOLGATE_CRASH_AT`) for the first start only; a restart is clean.
    pub crash_at: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease_ms: 60_000,
            pending_ttl_ms: 3_600_000,
            max_wait_ms: 60_000,
            retry_ms: 2_000,
            metrics: false,
            crash_at: None,
        }
    }
}

/// A running `toolgate-policy`, SIGKILLed on drop.
pub(crate) struct Server {
    child: Option<Child>,
    pub addr: String,
    /// `ip:port` of `/metrics`, when [`Options::metrics`] is set.
    pub metrics: Option<String>,
    dir: tempfile::TempDir,
    crash_at: Option<&'static str>,
}

pub(crate) fn config_text(url: &str, o: &Options) -> String {
    let mut s = format!(
        "listen = \"127.0.0.1:0\"\npolicy_file = \"policy.toml\"\nreload_interval_ms = 50\nmax_wait_ms = {}\n\n\
         [log]\nfilter = \"warn\"\n\n\
         [ledger]\nurl = \"{url}\"\nlease_ms = {}\npending_ttl_ms = {}\nretry_ms = {}\n\
         sweep_interval_ms = 100\nhealth_interval_ms = 100\nsecrets = [\"{CANARY}\"]\n",
        o.max_wait_ms, o.lease_ms, o.pending_ttl_ms, o.retry_ms
    );
    if o.metrics {
        s.insert_str(0, "metrics_listen = \"127.0.0.1:0\"\n");
    }
    for (principal, role, token) in ALL {
        s.push_str(&format!(
            "\n[[auth.tokens]]\nprincipal = \"{principal}\"\nrole = \"{role}\"\ntoken = \"{token}\"\n"
        ));
    }
    s
}

impl Server {
    /// Starts the binary against `url` and waits for its listening line.
    pub(crate) fn start(url: &str, options: &Options) -> Server {
        Self::start_with_policy(url, options, POLICY)
    }

    /// Starts the binary under another policy document.
    pub(crate) fn start_with_policy(url: &str, options: &Options, policy: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
        std::fs::write(dir.path().join("config.toml"), config_text(url, options)).unwrap();
        let mut s = Server {
            child: None,
            addr: String::new(),
            metrics: None,
            dir,
            crash_at: options.crash_at,
        };
        s.spawn();
        s
    }

    /// The policy document the server watches.
    pub(crate) fn policy_path(&self) -> PathBuf {
        self.dir.path().join("policy.toml")
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn spawn(&mut self) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate-policy"));
        if let Some(point) = self.crash_at.take() {
            command.env("TOOLGATE_CRASH_AT", point);
        }
        let mut child = command
            .arg("--config")
            .arg(self.config_path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn toolgate-policy");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("no listening line ({e}): {line:?}"));
        self.addr = v["listening"].as_str().unwrap().to_owned();
        self.metrics = v["metrics"].as_str().map(str::to_owned);
        self.child = Some(child);
    }

    /// SIGKILL: no drain, no cleanup.
    /// The service's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the same configuration again (on a new port).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub(crate) async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connect to toolgate-policy")
    }

    pub(crate) async fn policy(
        &self,
        cred: Cred,
    ) -> PolicyServiceClient<InterceptedService<Channel, Bearer>> {
        PolicyServiceClient::with_interceptor(self.channel().await, Bearer::new(cred.2).unwrap())
    }

    pub(crate) async fn sessions(
        &self,
        cred: Cred,
    ) -> SessionServiceClient<InterceptedService<Channel, Bearer>> {
        SessionServiceClient::with_interceptor(self.channel().await, Bearer::new(cred.2).unwrap())
    }

    pub(crate) async fn approvals(
        &self,
        cred: Cred,
    ) -> ApprovalServiceClient<InterceptedService<Channel, Bearer>> {
        ApprovalServiceClient::with_interceptor(self.channel().await, Bearer::new(cred.2).unwrap())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An argv `process.run` call.
pub(crate) fn run(argv: &[&str]) -> pb::ToolCall {
    pb::ToolCall {
        tool: ToolKind::ProcessRun as i32,
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

/// An Authorize request for `principal` (empty: the caller's own).
pub(crate) fn authorize(
    call_id: &str,
    session: &str,
    principal: &str,
    call: pb::ToolCall,
) -> pb::AuthorizeRequest {
    pb::AuthorizeRequest {
        context: Some(CallContext {
            call_id: call_id.into(),
            session_id: session.into(),
            approval_wait: None,
            description: "the agent says: harmless".into(),
        }),
        call: Some(call),
        principal: principal.into(),
        labels: Default::default(),
        executor: Some(toolgate_contracts::common::v1::ExecutorIdentity {
            executor_id: "exec-pod-1".into(),
            pod: "exec-pod-1".into(),
            node: "node-a".into(),
            ..Default::default()
        }),
    }
}

/// The ErrorInfo reason of a status.
pub(crate) fn reason(s: &Status) -> String {
    toolgate_contracts::status::error_info(s)
        .map(|(r, _)| r)
        .unwrap_or_default()
}

/// A successful run outcome.
pub(crate) fn exited(code: i32) -> pb::Outcome {
    use toolgate_contracts::common::v1 as c;
    let t = |s| {
        Some(prost_types::Timestamp {
            seconds: s,
            nanos: 0,
        })
    };
    pb::Outcome {
        status: Some(c::ExitStatus {
            status: Some(c::exit_status::Status::Exited(code)),
        }),
        times: Some(c::Timestamps {
            started_at: t(1_700_000_000),
            finished_at: t(1_700_000_001),
        }),
        stdout: Some(c::OutputStats {
            total_bytes: 12,
            dropped_bytes: 0,
            truncated: false,
        }),
        executor: Some(c::ExecutorIdentity {
            executor_id: "exec-pod-1".into(),
            pod: "exec-pod-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A generous bound for things that happen "soon" (wake-ups, sweeps).
pub(crate) const SOON: Duration = Duration::from_secs(20);

/// The result of an Authorize answer.
pub(crate) fn result(
    r: &pb::AuthorizeResponse,
) -> &toolgate_contracts::policy::v1::authorize_response::Result {
    r.result.as_ref().expect("a result")
}

/// The approval a pending answer parks on.
pub(crate) fn pending_id(r: &pb::AuthorizeResponse) -> String {
    match result(r) {
        toolgate_contracts::policy::v1::authorize_response::Result::Pending(p) => {
            p.approval_id.clone()
        }
        other => panic!("expected pending, got {other:?}"),
    }
}

/// An approval of `id`, once.
pub(crate) fn approve(id: &str) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        approval_id: id.into(),
        verdict: pb::Verdict::Approve as i32,
        reason: "looks fine".into(),
        ..Default::default()
    }
}
