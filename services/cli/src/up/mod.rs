//! `toolgate up`: the policy service and the executor in one process, with a SQLite ledger.
//!
//! The executor authorizes through the same [`PolicyCore`] the policy service's gRPC adapter
//! uses, called in process through `toolgate_policy::Local` (the policy protocol's traits, no
//! protobuf), so the embedded and the distributed forms run the same decision code. Tokens are generated on first start and kept in
//! `<data-dir>/tokens.toml` (mode 0600).
//!
//! The data directory must lie outside the workspace: it holds the approver's token, and a
//! child process may read anything under the workspace (`grep -r .`), so no glob or rule
//! could hide it reliably. The default is a per-workspace directory under
//! `$XDG_STATE_HOME/toolgate` (`~/.local/state/toolgate`).

pub(crate) mod file;
pub(crate) mod tokens;
pub(crate) mod toolchains;

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use toolgate_policy::PolicyCore;
use toolgate_runtime::auth::{Principal, Role};
use toolgate_runtime::{logging, shutdown};

use tokens::Tokens;

/// Arguments of `toolgate up`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The workspace the executor confines every call to.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// Where the ledger (`ledger.db`) and the tokens (`tokens.toml`) live; must be outside
    /// the workspace. Default: `$XDG_STATE_HOME/toolgate/<workspace name>-<hash>`
    /// (`~/.local/state/...` when XDG_STATE_HOME is unset).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The executor's gRPC listen address (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:7070")]
    executor_listen: String,
    /// The policy service's gRPC listen address (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:7071")]
    policy_listen: String,
    /// Allow a listen address other than loopback without TLS (a laptop's LAN, a container's
    /// 0.0.0.0 behind something that encrypts); `up` never serves TLS itself.
    #[arg(long)]
    insecure_plaintext: bool,
    /// Serve the MCP endpoint (streamable HTTP, `http://ADDR/mcp`) on this address; `off`
    /// turns it off. Tool calls carry the caller's bearer token to the executor.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7072")]
    mcp_listen: String,
    /// How long an MCP tool call the policy asks about waits for a human before returning
    /// the pending approval (`30s`, `5m`). Default: no wait.
    #[arg(long, value_parser = crate::duration::parse, default_value = "0s")]
    mcp_approval_wait: std::time::Duration,
    /// Serve both services' Prometheus metrics on this address (`/metrics`); off when unset.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// A TOML file configuring both services: its `[executor]` table as `toolgate-executor
    /// --config` reads one, its `[policy]` table as `toolgate-policy --config` does. The
    /// `TOOLGATE_` environment and these flags still win; settings `up` makes itself (listen
    /// addresses, the ledger, tokens, TLS) are refused there.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A policy document (reloaded on change); default: the shipped default policy.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Print one JSON line (`service`, `executor`, `policy`, `ledger`, `tokens`, ...) instead
    /// of the banner, for programs that start `up`.
    #[arg(long)]
    json: bool,
    /// Log filter for stderr (`RUST_LOG` syntax).
    #[arg(long, env = "TOOLGATE_LOG", default_value = "warn")]
    log: String,
    #[command(flatten)]
    sandbox: SandboxArgs,
}

/// How `up` and `doctor` set up the run sandbox.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SandboxArgs {
    /// Do not expose the toolchains of the user who starts toolgate (CARGO_HOME, RUSTUP_HOME,
    /// an active virtualenv, a node install) read-only inside runs. Without it, only their own
    /// directories are exposed (never the home directory or one holding dotfiles) and their
    /// credential files (cargo `credentials*`/`config*`, `npmrc`, `pip.conf`, ...) are hidden.
    #[arg(long)]
    no_toolchains: bool,
    /// Another directory runs may read (and execute from), at the same path; repeatable.
    #[arg(long = "read-only", value_name = "DIR")]
    read_only: Vec<PathBuf>,
    /// Run commands unconfined when this machine cannot enforce the sandbox, instead of
    /// refusing them. An explicit choice: every run's `Started.isolation` reports it.
    #[arg(long)]
    no_require_sandbox: bool,
}

impl SandboxArgs {
    /// Applies these choices to an executor configuration.
    pub(crate) fn apply(&self, cfg: &mut toolgate_executor::Config) {
        if !self.no_toolchains {
            let t = toolchains::Toolchains::detect();
            for note in &t.notes {
                eprintln!("toolgate: {note}");
            }
            cfg.process.sandbox.read_only_paths.extend(t.read_only);
            // Registry and index tokens inside the exposed directories.
            cfg.process.sandbox.hidden_system_paths.extend(t.hidden);
            cfg.process.env.extend(t.env);
            cfg.process.path_prepend.extend(t.path_prepend);
        }
        cfg.process
            .sandbox
            .read_only_paths
            .extend(self.read_only.iter().cloned());
        if self.no_require_sandbox {
            cfg.process.require_sandbox = false;
        }
    }
}

/// The executor configuration `up` (and `doctor` without `--config`) starts from, before its
/// flags: the defaults, with `up`'s own where they differ, under the `TOOLGATE_` environment
/// (`__` for nesting), layered as `toolgate-executor` layers it.
///
/// `up`'s own default: a laptop rarely delegates a cgroup to its user, so there runs get the
/// kernel's fallbacks and a note says so, rather than every command being refused. The probe
/// tries the limits the environment asks for; `TOOLGATE_PROCESS__REQUIRE_LIMITS=true` still
/// refuses runs where it fails.
///
/// `file`: `up`'s `--config`, whose `[executor]` table is layered over the defaults.
pub(crate) fn executor_config(
    file: Option<&Path>,
    env: Vec<(String, String)>,
) -> anyhow::Result<toolgate_executor::Config> {
    use toolgate_runtime::config::{Sources, load, load_over};
    let sources = Sources {
        file,
        section: Some(file::EXECUTOR),
        env,
        overrides: Vec::new(),
    };
    let invalid = |e: &dyn std::fmt::Display| anyhow::anyhow!("executor configuration: {e}");
    let layered: toolgate_executor::Config = load(&sources).map_err(|e| invalid(&e))?;
    let process = layered.process_config().map_err(|e| invalid(&e))?;
    let Err(why) = toolgate_process::probe_limits(&process) else {
        return Ok(layered);
    };
    let mut defaults = toolgate_executor::Config::default();
    defaults.process.require_limits = false;
    let cfg: toolgate_executor::Config = load_over(&defaults, &sources).map_err(|e| invalid(&e))?;
    if cfg.process.require_limits {
        eprintln!(
            "toolgate: runs will be refused: process.require_limits is set and this machine cannot enforce the run limits ({why})"
        );
    } else {
        eprintln!(
            "toolgate: runs get no memory limit here ({why}); they are bounded by pid_max, RLIMIT_CPU and tmpfs sizes only"
        );
    }
    Ok(cfg)
}

/// Everything `up` tells the person who started it.
struct Started<'a> {
    workspace: &'a Path,
    data_dir: &'a Path,
    ledger: &'a str,
    policy: String,
    executor_addr: String,
    policy_addr: String,
    /// Where `/metrics` is served, when it is.
    metrics_addr: Option<String>,
    /// The MCP endpoint's URL, when it is served.
    mcp_url: Option<String>,
    tokens: &'a Tokens,
}

/// Runs both services until SIGINT/SIGTERM.
pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    // Logs, plus OTLP trace export when the standard OTEL_* variables ask for it, as the
    // production binaries do: both services' spans go out under the service name `toolgate`.
    let telemetry = toolgate_runtime::telemetry::init("toolgate", logging::Format::Text, &args.log)
        .context("cannot set up logging and tracing")?;
    // Before anything is printed: whoever reads the banner may signal us at once.
    let signals = shutdown::on_signals()?;
    let dirs = Dirs::prepare(&args)?;
    let listeners = Listeners::bind(&args).await?;
    let services = Services::configure(&args, &dirs, &listeners).await?;
    // The only executor of this workspace: every write temp file is a leftover of a kill,
    // removed before anyone is told the workspace is served.
    toolgate_executor::sweep_interrupted_writes(&dirs.workspace, std::time::Duration::ZERO);
    announce(&args, &dirs, &listeners)?;
    let (policy, executor) = serve(&args, &dirs, listeners, services, signals).await?;
    // Flush the spans of the last calls even when a service failed.
    if let Err(err) = telemetry.shutdown().await {
        tracing::warn!(error = %err, "spans lost at exit");
    }
    policy
        .context("policy service task")?
        .context("policy service")?;
    executor.context("executor task")?.context("executor")?;
    Ok(())
}

/// The workspace, the data directory and what is kept in it.
struct Dirs {
    workspace: PathBuf,
    data_dir: PathBuf,
    tokens: Tokens,
    ledger_url: String,
    /// The user's policy file; `None`: the builtin default.
    policy_file: Option<PathBuf>,
}

impl Dirs {
    /// Checks the workspace and the data directory (outside the workspace, private) and
    /// loads or generates the credentials.
    fn prepare(args: &Args) -> anyhow::Result<Dirs> {
        let workspace = std::fs::canonicalize(&args.workspace)
            .with_context(|| format!("workspace {}", args.workspace.display()))?;
        anyhow::ensure!(
            workspace.is_dir(),
            "workspace {} is not a directory",
            workspace.display()
        );
        let data_dir = match &args.data_dir {
            Some(d) => d.clone(),
            None => default_data_dir(&workspace)?,
        };
        // Checked before anything is created, so a refused dir leaves no trace in the workspace.
        let data_dir = resolve(&data_dir)?;
        anyhow::ensure!(
            !data_dir.starts_with(&workspace),
            "the data directory {} is inside the workspace {}: it holds the approver's token and \
             any command in the workspace could read it; pass a --data-dir outside the workspace",
            data_dir.display(),
            workspace.display()
        );
        create_private_dir(&data_dir)?;
        let tokens = Tokens::load_or_generate(&data_dir)?;
        let ledger_url = format!("sqlite:{}", data_dir.join("ledger.db").display());
        let policy_file = match &args.policy {
            Some(p) => {
                Some(std::fs::canonicalize(p).with_context(|| format!("policy {}", p.display()))?)
            }
            None => None,
        };
        Ok(Dirs {
            workspace,
            data_dir,
            tokens,
            ledger_url,
            policy_file,
        })
    }
}

/// Every socket `up` serves, bound before anything starts so a taken port fails early.
struct Listeners {
    policy: TcpListener,
    policy_addr: String,
    executor: TcpListener,
    executor_addr: String,
    /// The MCP endpoint, unless `--mcp-listen off`.
    mcp: Option<(
        TcpListener,
        toolgate_runtime::transport::Transport,
        SocketAddr,
    )>,
    /// `/metrics`, when `--metrics-listen` is set.
    metrics: Option<TcpListener>,
    metrics_addr: Option<String>,
}

impl Listeners {
    async fn bind(args: &Args) -> anyhow::Result<Listeners> {
        let policy = TcpListener::bind(&args.policy_listen)
            .await
            .with_context(|| format!("--policy-listen: cannot listen on {}", args.policy_listen))?;
        let executor = TcpListener::bind(&args.executor_listen)
            .await
            .with_context(|| {
                format!(
                    "--executor-listen: cannot listen on {}",
                    args.executor_listen
                )
            })?;
        let policy_addr = policy.local_addr()?.to_string();
        let executor_addr = executor.local_addr()?.to_string();
        let mcp = if args.mcp_listen == "off" {
            None
        } else {
            let l = TcpListener::bind(&args.mcp_listen)
                .await
                .with_context(|| format!("--mcp-listen: cannot listen on {}", args.mcp_listen))?;
            let addr = l.local_addr()?;
            Some((
                l,
                crate::mcp::up_transport(addr, args.insecure_plaintext)?,
                addr,
            ))
        };
        let metrics = match &args.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("--metrics-listen: cannot listen on {addr}"))?,
            ),
            None => None,
        };
        let metrics_addr = metrics
            .as_ref()
            .map(|l| l.local_addr().map(|a| a.to_string()))
            .transpose()?;
        Ok(Listeners {
            policy,
            policy_addr,
            executor,
            executor_addr,
            mcp,
            metrics,
            metrics_addr,
        })
    }
}

/// Both services configured, the policy core open, and the in-process way between them.
struct Services {
    policy_cfg: toolgate_policy::Config,
    core: PolicyCore,
    exec_cfg: toolgate_executor::Config,
    executor_metrics: toolgate_runtime::metrics::ExecutorMetrics,
    registry: toolgate_runtime::metrics::Registry,
    /// The policy as the embedded executor reaches it: in process, as its own credential.
    local: Arc<toolgate_policy::Local>,
}

impl Services {
    async fn configure(
        args: &Args,
        dirs: &Dirs,
        listeners: &Listeners,
    ) -> anyhow::Result<Services> {
        // Both services' configurations are layered as their own binaries layer them:
        // defaults, the `--config` file's table, the `TOOLGATE_` environment, then `up`'s
        // flags.
        let env: Vec<(String, String)> = std::env::vars().collect();
        let file = args.config.as_deref();
        if let Some(path) = file {
            file::check(path)?;
        }
        let mut policy_cfg: toolgate_policy::Config =
            toolgate_runtime::config::load(&toolgate_runtime::config::Sources {
                file,
                section: Some(file::POLICY),
                env: env.clone(),
                overrides: Vec::new(),
            })
            .map_err(|e| anyhow::anyhow!("policy service configuration: {e}"))?;
        policy_cfg.listen.clone_from(&listeners.policy_addr);
        policy_cfg.policy_file.clone_from(&dirs.policy_file);
        policy_cfg.ledger.url = Some(dirs.ledger_url.clone());
        policy_cfg.auth = dirs.tokens.auth_config();
        policy_cfg.transport.insecure_plaintext = args.insecure_plaintext;
        policy_cfg
            .validate()
            .map_err(|e| anyhow::anyhow!("policy service configuration: {e}"))?;
        // One registry for both services, served on --metrics-listen when it is set.
        let mut registry = toolgate_runtime::metrics::registry();
        let policy_metrics = toolgate_runtime::metrics::PolicyMetrics::register(&mut registry);
        let executor_metrics = toolgate_runtime::metrics::ExecutorMetrics::register(&mut registry);
        let core = PolicyCore::open_with(&policy_cfg, policy_metrics)
            .await
            .context("cannot start the policy service")?;

        let (executor_name, executor_token) = dirs
            .tokens
            .get(Role::Executor)
            .context("tokens.toml has no executor credential")?;
        let mut exec_cfg = executor_config(file, env)?;
        exec_cfg.listen.clone_from(&listeners.executor_addr);
        exec_cfg.workspace.root.clone_from(&dirs.workspace);
        exec_cfg.policy.endpoint = format!("http://{}", listeners.policy_addr);
        exec_cfg.policy.token = Some(executor_token.to_owned());
        exec_cfg.policy.token_file = None;
        exec_cfg.auth = dirs.tokens.auth_config();
        exec_cfg.transport.insecure_plaintext = args.insecure_plaintext;
        args.sandbox.apply(&mut exec_cfg);
        exec_cfg
            .validate()
            .map_err(|e| anyhow::anyhow!("executor configuration: {e}"))?;
        // The embedded executor asks the policy core in process, as its own executor
        // credential: the role checks and answers of the gRPC path, without a protobuf
        // message. Its sessions are claimed and their state kept in the same ledger, through
        // the same core.
        let local = Arc::new(toolgate_policy::Local::new(
            core.clone(),
            Principal {
                name: executor_name.to_owned(),
                role: Role::Executor,
            },
            toolgate_executor::identity(&exec_cfg),
        ));
        Ok(Services {
            policy_cfg,
            core,
            exec_cfg,
            executor_metrics,
            registry,
            local,
        })
    }
}

/// Tells whoever started `up` where everything is (a banner, or one JSON line).
fn announce(args: &Args, dirs: &Dirs, listeners: &Listeners) -> anyhow::Result<()> {
    let started = Started {
        workspace: &dirs.workspace,
        data_dir: &dirs.data_dir,
        ledger: &dirs.ledger_url,
        policy: dirs
            .policy_file
            .as_ref()
            .map_or_else(|| "builtin default".to_owned(), |p| p.display().to_string()),
        executor_addr: listeners.executor_addr.clone(),
        policy_addr: listeners.policy_addr.clone(),
        metrics_addr: listeners.metrics_addr.clone(),
        mcp_url: listeners
            .mcp
            .as_ref()
            .map(|(_, _, a)| format!("http://{a}{}", toolgate_mcp::http::PATH)),
        tokens: &dirs.tokens,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", json_line(&started))?;
    } else {
        out.write_all(banner(&started).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

type ServiceResult<E> = Result<Result<(), E>, tokio::task::JoinError>;

/// Serves both services (and MCP and metrics when asked) until a signal or either service
/// stops; answers how each service ended.
async fn serve(
    args: &Args,
    dirs: &Dirs,
    listeners: Listeners,
    services: Services,
    signals: shutdown::Shutdown,
) -> anyhow::Result<(
    ServiceResult<toolgate_policy::Error>,
    ServiceResult<toolgate_executor::Error>,
)> {
    let Services {
        policy_cfg,
        core,
        exec_cfg,
        executor_metrics,
        registry,
        local,
    } = services;
    // Runs reach the network when the default sandbox profile allows it: then `run_command`
    // is an open-world tool.
    let mcp_network = exec_cfg.process_config().map_or(true, |c| {
        c.sandbox
            .profiles
            .get(&c.sandbox.default_profile)
            .is_none_or(|p| p.network)
    });
    // One shutdown for both: a signal, or either service stopping on its own.
    let (trigger, stop) = shutdown::channel();
    let trigger = Arc::new(trigger);
    let policy_task = {
        let (stop, trigger) = (stop.clone(), trigger.clone());
        let listener = listeners.policy;
        tokio::spawn(async move {
            let r = toolgate_policy::serve_with(
                policy_cfg,
                core,
                listener,
                stop,
                toolgate_policy::ServeOptions {
                    quiet: true,
                    ..Default::default()
                },
            )
            .await;
            trigger.trigger();
            r
        })
    };
    let executor_task = {
        let (stop, trigger) = (stop.clone(), trigger.clone());
        let listener = listeners.executor;
        let authorizer: Arc<dyn toolgate_policy_api::Authorizer> = local.clone();
        let sessions: Arc<dyn toolgate_policy_api::SessionLedger> = local;
        tokio::spawn(async move {
            let r = toolgate_executor::serve_with(
                exec_cfg,
                listener,
                stop,
                authorizer,
                toolgate_executor::ServeOptions {
                    metrics: Some(executor_metrics),
                    quiet: true,
                    temp_files_swept: true,
                    sessions: Some(sessions),
                },
            )
            .await;
            trigger.trigger();
            r
        })
    };
    if let Some((listener, transport, addr)) = listeners.mcp {
        let executor = format!("http://{}", listeners.executor_addr);
        let channel = crate::mcp::channel(&executor, &no_tls())?;
        let config = toolgate_mcp::McpConfig {
            approval_wait: args.mcp_approval_wait,
            network: mcp_network,
            tasks: crate::mcp::task_store(Some(dirs.data_dir.join("mcp-tasks")))?,
            executor,
        };
        let router = toolgate_mcp::http::router(
            toolgate_mcp::McpServer::http(channel, config),
            !addr.ip().is_loopback(),
        );
        let stop = stop.clone();
        tokio::spawn(toolgate_mcp::http::serve(
            listener,
            transport,
            router,
            async move {
                stop.wait().await;
            },
        ));
    }
    if let Some(listener) = listeners.metrics {
        tokio::spawn(toolgate_runtime::metrics::serve(
            listener,
            Arc::new(registry),
            stop.clone(),
        ));
    }
    tokio::spawn(async move {
        signals.wait().await;
        trigger.trigger();
    });
    Ok(tokio::join!(policy_task, executor_task))
}

/// Client flags with no TLS material: `up` serves plaintext on loopback.
fn no_tls() -> crate::client::TokenArgs {
    crate::client::TokenArgs {
        token_file: None,
        ca_file: None,
        client_cert: None,
        client_key: None,
    }
}

/// `$XDG_STATE_HOME/toolgate/<name>-<8 hex of sha256(path)>` for a canonical workspace path, so
/// each workspace keeps its own ledger and tokens.
fn default_data_dir(workspace: &Path) -> anyhow::Result<PathBuf> {
    use sha2::Digest;
    let state = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_STATE_HOME nor HOME is set; pass --data-dir")?;
            PathBuf::from(home).join(".local/state")
        }
    };
    let name = workspace
        .file_name()
        .map_or_else(|| "root".into(), |n| n.to_string_lossy().into_owned());
    let hash = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    Ok(state
        .join("toolgate")
        .join(format!("{name}-{}", hex::encode(&hash[..4]))))
}

/// `path` made absolute with every existing ancestor canonicalized (symlinks resolved), so it
/// can be compared with the canonical workspace before it exists.
fn resolve(path: &Path) -> anyhow::Result<PathBuf> {
    let absolute = std::path::absolute(path)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let name = existing
            .file_name()
            .with_context(|| format!("{} has no existing ancestor", path.display()))?;
        anyhow::ensure!(
            name != "..",
            "{}: `..` after a missing directory",
            path.display()
        );
        rest.push(name.to_owned());
        existing = existing.parent().unwrap_or(Path::new("/"));
    }
    let mut out = std::fs::canonicalize(existing)?;
    out.extend(rest.iter().rev());
    Ok(out)
}

/// Creates `dir` (and parents) with mode 0700 when missing.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))
}

fn json_line(s: &Started<'_>) -> serde_json::Value {
    let tokens: serde_json::Map<String, serde_json::Value> = tokens::ROLES
        .iter()
        .filter_map(|r| {
            s.tokens
                .get(*r)
                .map(|(_, t)| (r.as_str().to_owned(), t.into()))
        })
        .collect();
    serde_json::json!({
        "service": "toolgate",
        "executor": s.executor_addr,
        "policy": s.policy_addr,
        "workspace": s.workspace.display().to_string(),
        "data_dir": s.data_dir.display().to_string(),
        "ledger": s.ledger,
        "policy_document": s.policy,
        "tokens_file": s.tokens.path.display().to_string(),
        "metrics": s.metrics_addr,
        "mcp": s.mcp_url,
        "tokens": tokens,
    })
}

fn banner(s: &Started<'_>) -> String {
    let token = |r: Role| s.tokens.get(r).map(|(_, t)| t).unwrap_or_default();
    let mut out = format!(
        "toolgate is up\n\n\
         \x20 executor   http://{exec}\n\
         \x20 policy     http://{pol}\n\
         \x20 workspace  {ws}\n\
         \x20 policy doc {doc}\n\
         \x20 ledger     {ledger}\n\
         \x20 tokens     {file} ({state}, mode 0600)\n",
        exec = s.executor_addr,
        pol = s.policy_addr,
        ws = s.workspace.display(),
        doc = s.policy,
        ledger = s.ledger,
        file = s.tokens.path.display(),
        state = if s.tokens.generated {
            "generated now"
        } else {
            "reused"
        },
    );
    if let Some(m) = &s.metrics_addr {
        out.push_str(&format!("  metrics    http://{m}/metrics\n"));
    }
    if let Some(m) = &s.mcp_url {
        out.push_str(&format!(
            "  mcp        {m}   (streamable HTTP; bearer: the agent token)\n"
        ));
    }
    out.push('\n');
    for r in tokens::ROLES {
        if let Some((principal, t)) = s.tokens.get(r) {
            out.push_str(&format!(
                "  {:<9}  {t}   (principal {principal})\n",
                r.as_str()
            ));
        }
    }
    out.push_str(&format!(
        "\nTry it from another shell:\n\n\
         \x20 export TOOLGATE_EXECUTOR=http://{exec} TOOLGATE_POLICY=http://{pol}\n\
         \x20 export TOOLGATE_TOKEN={agent}   # agent\n\
         \x20 toolgate fs ls\n\
         \x20 toolgate run -- ls -la\n\
         \x20 toolgate run --wait 10m -- rm -rf build   # asks: prints the approval id and waits\n\n\
         \x20 # as the approver, in a third shell:\n\
         \x20 export TOOLGATE_POLICY=http://{pol} TOOLGATE_TOKEN={approver}\n\
         \x20 toolgate approvals list --state pending\n\
         \x20 toolgate approvals show <ID>\n\
         \x20 toolgate approvals approve <ID> --reason \"looked at it\"\n\n\
         Ctrl-C stops both services.\n",
        exec = s.executor_addr,
        pol = s.policy_addr,
        agent = token(Role::Agent),
        approver = token(Role::Approver),
    ));
    out
}
