//! The toolgate executor: the enforcement point.
//!
//! `serve` wires the domain crates (`toolgate-fs`, `toolgate-process`) behind their tonic
//! adapters. Adapters authenticate the caller, parse wire messages into validated domain
//! requests at the edge (`INVALID_ARGUMENT` dies there), ask the policy service through an
//! [`Authorizer`] and only then perform the call with the proof it yields (see `authz`), and
//! map domain errors to statuses through `toolgate_contracts::status`, the one place that
//! knows the `ErrorInfo` shape.

mod admission;
pub mod authz;
mod bound;
pub mod config;
mod confined;
mod disk;
mod egress;
mod fs_service;
mod process_service;
mod runs;
mod session;
mod sweep;
mod tool_span;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use toolgate_runtime::auth::{AuthInterceptor, Authenticator};

use tokio::net::TcpListener;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_server::ExecutorServiceServer;
use toolgate_contracts::executor::v1::filesystem_service_server::FilesystemServiceServer;
use toolgate_contracts::executor::v1::process_service_server::ProcessServiceServer;
use toolgate_runtime::metrics::{self, ExecutorMetrics};
use toolgate_runtime::transport::Transport;
use toolgate_runtime::{grpc, shutdown, telemetry};

pub use admission::Settings as AdmissionSettings;
pub use authz::{Authorized, GrpcAuthorizer};
pub use config::Config;
pub use egress::Destination;
pub use fs_service::FsService;
pub use process_service::ProcessAdapter;
pub use toolgate_policy_api::Authorizer;

type Fs = InterceptedService<FilesystemServiceServer<FsService>, AuthInterceptor>;
type Process = InterceptedService<ProcessServiceServer<ProcessAdapter>, AuthInterceptor>;
type Exec = InterceptedService<ExecutorServiceServer<ProcessAdapter>, AuthInterceptor>;

/// How long outcome reports still in flight may delay the exit after a shutdown.
const REPORT_FLUSH: Duration = Duration::from_secs(5);

/// Why the executor could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The workspace could not be opened.
    #[error("cannot open workspace: {0}")]
    Workspace(#[from] toolgate_fs::Error),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The process runner could not start.
    #[error("cannot start the process runner: {0}")]
    Runner(#[from] toolgate_process::runner::Error),
    /// The metrics endpoint could not listen on `metrics_listen`.
    #[error("metrics_listen: cannot listen on {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
}

/// What [`serve_with`] takes beyond the configuration and the authorizer.
#[derive(Clone, Default)]
pub struct ServeOptions {
    /// Record into these metrics, registered in a registry the caller serves (`toolgate up`
    /// shares one between both services). `None`: the executor registers its own set and
    /// serves it on `metrics_listen` when that is set.
    pub metrics: Option<ExecutorMetrics>,
    /// Do not print the listening line: the embedding process (`toolgate up`) prints its own,
    /// and promises exactly one.
    pub quiet: bool,
    /// The embedding process already removed the temp files of interrupted writes with
    /// [`sweep_interrupted_writes`] (`toolgate up` does, as the only executor of its
    /// workspace, before it announces itself): skip the start-up sweep.
    pub temp_files_swept: bool,
    /// Where sessions are claimed and their state kept: the policy service's ledger (what
    /// [`serve`] passes, and `toolgate up` its in-process core). `None`: in this process's
    /// memory only, for an embedding with no ledger to share (a benchmark): every session is
    /// this executor's, and its state ends with the process.
    pub sessions: Option<Arc<dyn toolgate_policy_api::SessionLedger>>,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("metrics", &self.metrics)
            .field("quiet", &self.quiet)
            .field("temp_files_swept", &self.temp_files_swept)
            .field("sessions", &self.sessions.as_ref().map(|_| "SessionLedger"))
            .finish()
    }
}

/// How long a write temp file must have been untouched before the start-up sweep of an
/// executor that may share its workspace removes it (another executor's write in progress
/// is never that old).
pub const SHARED_TEMP_GRACE: Duration = Duration::from_secs(60);

/// Removes the temp files (`.NAME.toolgate-PID-N.tmp`) that writes interrupted by a kill
/// left under `root`, those untouched for `older_than` only; returns how many. Walks by
/// directory handle and never leaves `root`.
pub fn sweep_interrupted_writes(root: &std::path::Path, older_than: Duration) -> usize {
    let removed = sweep::sweep(root, older_than);
    if removed > 0 {
        tracing::info!(removed, "removed temp files of interrupted writes");
    }
    removed
}

/// Who this executor is: configured id, else host name and pid, plus the Kubernetes
/// downward-API variables when the pod sets them.
pub fn identity(config: &Config) -> toolgate_core::ExecutorIdentity {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    toolgate_core::ExecutorIdentity {
        executor_id: if config.executor_id.is_empty() {
            format!("{host}:{}", std::process::id())
        } else {
            config.executor_id.clone()
        },
        pod: var("POD_NAME"),
        namespace: var("POD_NAMESPACE"),
        node: var("NODE_NAME"),
        image: {
            let i = var("POD_IMAGE");
            if i.is_empty() {
                var("CONTAINER_IMAGE")
            } else {
                i
            }
        },
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

/// How admission shares this executor: the configured shares and queue, the runner's slots
/// and run memory budget.
/// How admission shares this executor's runs, from `[process]` and what `runner` reserves per
/// run (also what `toolgate doctor` prints).
pub fn admission_settings(
    config: &Config,
    runner: &toolgate_process::Runner,
) -> admission::Settings {
    let a = &config.process.admission;
    let default_reservation = runner
        .reservation("")
        .map_or(0, toolgate_process::Reservation::total);
    let settings = admission::Settings {
        slots: runner.config().max_concurrent_runs,
        budget_bytes: runner.memory_budget(),
        default_reservation,
        queue_length: a.queue_length,
        queue_wait: Duration::from_millis(a.queue_wait_ms),
        session_share: a.session_share,
        principal_share: a.principal_share,
        reserve_share: a.reserve_share,
    };
    if default_reservation > settings.budget_bytes {
        tracing::warn!(
            budget_bytes = settings.budget_bytes,
            default_reservation,
            "the run memory budget is smaller than one default-profile run: such runs are refused TOO_LARGE"
        );
    }
    tracing::info!(
        slots = settings.slots,
        budget_bytes = settings.budget_bytes,
        default_reservation,
        "run admission ready"
    );
    settings
}

/// Serves every executor gRPC service on `listener` until `shutdown` fires, authorizing every
/// call with the policy service named by `config.policy` (required).
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
) -> Result<(), Error> {
    config.validate_policy().map_err(Error::Config)?;
    let authorizer = GrpcAuthorizer::new(&config.policy).map_err(Error::Config)?;
    // Sessions are claimed and kept through the same replicas and credential.
    let sessions = authorizer.sessions(identity(&config));
    serve_with(
        config,
        listener,
        shutdown,
        Arc::new(authorizer),
        ServeOptions {
            sessions: Some(Arc::new(sessions)),
            ..ServeOptions::default()
        },
    )
    .await
}

/// Serves every executor gRPC service on `listener` until `shutdown` fires, authorizing every
/// call with `authorizer`, then drains in-flight calls for at most the configured grace
/// period and flushes outcome reports; what [`serve`] does with a `GrpcAuthorizer`, and what
/// `toolgate up` calls with its in-process one.
pub async fn serve_with(
    config: Config,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
    authorizer: Arc<dyn Authorizer>,
    options: ServeOptions,
) -> Result<(), Error> {
    let options_quiet = options.quiet;
    let ledger = options
        .sessions
        .clone()
        .unwrap_or_else(|| Arc::new(session::LocalLedger::default()));
    let (metrics, metrics_endpoint) = match options.metrics {
        Some(metrics) => {
            if let Some(addr) = &config.metrics_listen {
                tracing::warn!(%addr, "metrics_listen ignored: the embedding process serves the metrics");
            }
            (metrics, None)
        }
        None => {
            let mut registry = metrics::registry();
            let metrics = ExecutorMetrics::register(&mut registry);
            let endpoint = match &config.metrics_listen {
                Some(addr) => {
                    let listener =
                        TcpListener::bind(addr)
                            .await
                            .map_err(|source| Error::Metrics {
                                addr: addr.clone(),
                                source,
                            })?;
                    Some((listener, Arc::new(registry)))
                }
                None => None,
            };
            (metrics, endpoint)
        }
    };
    let addr = listener.local_addr()?;
    let transport =
        Transport::new(&config.transport, addr).map_err(|e| Error::Config(e.to_string()))?;
    let auth = Authenticator::from_config(&config.auth)
        .map_err(|e| Error::Config(e.to_string()))?
        .with_client_cert_roles(&config.transport.tls.client_cert_roles);
    let workspace = Arc::new(toolgate_fs::Workspace::open(config.workspace_config())?);
    // Before any call is served: the temp files of writes a previous run was killed in.
    if !options.temp_files_swept {
        let root = workspace.real_root().to_owned();
        let _ =
            tokio::task::spawn_blocking(move || sweep_interrupted_writes(&root, SHARED_TEMP_GRACE))
                .await;
    }

    let (health, health_service) = grpc::health();
    let (reflection_v1, reflection_v1alpha) = grpc::reflection(&[
        pb::filesystem_service_server::SERVICE_NAME,
        pb::process_service_server::SERVICE_NAME,
        pb::executor_service_server::SERVICE_NAME,
    ]);
    let runner = toolgate_process::Runner::new(config.process_config().map_err(Error::Config)?)?;
    match &runner.capabilities().limits_enforced {
        Ok(l) => tracing::info!(enforced = l.as_str(), "per-run resource limits ready"),
        Err(why) if runner.config().require_limits => {
            tracing::warn!(%why, "no cgroup for per-run resource limits: runs are refused (process.require_limits)");
        }
        Err(why) => {
            tracing::warn!(%why, "no cgroup for per-run resource limits: runs get the kernel's fallbacks only");
        }
    }
    for p in &runner.capabilities().profiles {
        metrics.sandbox_profile(&p.name, p.available.is_ok());
        match &p.available {
            Ok(abi) => {
                tracing::info!(profile = %p.name, landlock_abi = abi, network = p.network, unconfined = p.unconfined, "sandbox profile ready");
            }
            Err(missing) => {
                tracing::warn!(profile = %p.name, %missing, "sandbox profile unavailable: runs asking for it are refused");
            }
        }
    }
    let disk = disk::DiskBudget::from_config(&config.process.disk);
    let confined = confined::Confined::new(workspace.clone(), runner.clone(), disk);
    let identity = identity(&config);
    let gate = authz::Gate::new(
        authorizer,
        identity.clone(),
        config.labels.clone().into_iter().collect(),
        Duration::from_millis(config.max_approval_wait_ms),
        metrics,
    );
    let fs = FsService::new(confined.clone(), gate.clone());
    let view = pb::WorkspaceView {
        root: workspace.real_root().display().to_string(),
        aliases: config
            .workspace
            .aliases
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        deny: config.workspace.deny.clone(),
        protected: config.workspace.protected.clone(),
    };
    let admission = admission::Admission::new(
        &admission_settings(&config, &runner),
        gate.metrics().clone(),
    );
    let egress = Arc::new(egress::Settings::from_config(&config.egress).map_err(Error::Config)?);
    if egress.resolvers.is_empty() {
        tracing::warn!(
            "egress.resolvers: none configured and none in /etc/resolv.conf: networked runs' connections are refused (resolve_failed)"
        );
    }
    let spool =
        runs::spool::SpoolRoot::open(config.sessions.spool_dir.as_deref()).map_err(|e| {
            Error::Config(format!(
                "sessions.spool_dir: cannot prepare the background run output spool: {e}"
            ))
        })?;
    let runs = runs::Runs::new(runs::Settings::from_config(&config.sessions), spool);
    let sessions = session::Sessions::new(
        session::Settings::from_config(&config.sessions),
        ledger,
        confined.clone(),
        runner.config().allowed_env.clone(),
        runner.config().env.clone(),
    );
    // Background work that ends with the server: abandon the previous life's runs (before
    // any claim), renew claims, reap idle sessions.
    let mut session_tasks = tokio::task::JoinSet::new();
    sessions.spawn_tasks(&mut session_tasks);
    sessions.set_runs(Arc::new(runs.clone()));
    let process = ProcessAdapter::new(
        confined,
        admission,
        gate.clone(),
        identity,
        view,
        egress,
        runs.clone(),
        sessions.clone(),
    );
    health.set_serving::<Fs>().await;
    health.set_serving::<Process>().await;
    health.set_serving::<Exec>().await;

    // One machine-readable line on stdout so scripts and tests learn the bound ports.
    let mut line = serde_json::json!({
        "service": "toolgate-executor",
        "listening": addr.to_string(),
        "scheme": transport.scheme(),
    });
    let metrics_task = match metrics_endpoint {
        Some((listener, registry)) => {
            let metrics_addr = listener.local_addr()?;
            line["metrics"] = metrics_addr.to_string().into();
            Some(tokio::spawn(metrics::serve(
                listener,
                registry,
                shutdown.clone(),
            )))
        }
        None => None,
    };
    if !options_quiet {
        println!("{line}");
    }
    tracing::info!(%addr, root = %workspace.real_root().display(), "executor listening");

    let max_request = config.max_request_bytes;
    let server = transport
        .server()
        .layer(transport.layer())
        .layer(telemetry::server_layer())
        .layer(metrics::server_layer())
        // Innermost, so traces and metrics record the status the client gets.
        .layer(toolgate_runtime::edge::layer())
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(InterceptedService::new(
            FilesystemServiceServer::new(fs).max_decoding_message_size(max_request),
            auth.interceptor(),
        ))
        .add_service(InterceptedService::new(
            ProcessServiceServer::new(process.clone()).max_decoding_message_size(max_request),
            auth.interceptor(),
        ))
        .add_service(InterceptedService::new(
            ExecutorServiceServer::new(process),
            auth.interceptor(),
        ))
        .serve_with_incoming_shutdown(transport.incoming(listener), shutdown.clone().wait());
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    shutdown::serve_until(server, shutdown, grace, async {
        health.set_not_serving::<Fs>().await;
        health.set_not_serving::<Process>().await;
    })
    .await?;
    // Every live session ends: taken out of the table with the runs it still holds, which
    // the runner's shutdown stops; then its end is recorded (bounded).
    session_tasks.abort_all();
    let ending = sessions.close();
    // Whatever still runs is terminated (TERM, grace, KILL) and reaped before we exit.
    runner.shutdown().await;
    sessions.record_ends(ending, session::SHUTDOWN_BOUND).await;
    gate.reporter().flush(REPORT_FLUSH).await;
    // Background runs died with the runner: their spooled output goes with the executor.
    runs.close();
    if let Some(task) = metrics_task {
        // A scraper's idle keep-alive connection must not hold the exit up.
        task.abort();
    }
    Ok(())
}
