//! The toolgate policy service: the decision point and the only writer of the ledger.
//!
//! It serves, behind bearer-token authentication (health and reflection stay open):
//!
//! - `PolicyService.Authorize`: classify a call with the policy in force, record the
//!   decision in the approval ledger, and answer allowed (with a decision id, and for a
//!   consumed approval its lease), denied (rule id and a message for the model), pending
//!   (the approval to wait for), or already executed (this `call_id` ran before; the
//!   recorded outcome is attached). Executors authorize for any principal, agents only
//!   for themselves.
//! - `PolicyService.RecordOutcome`: attach an executor's outcome to its decision,
//!   idempotently, fenced by the consumption the decision holds.
//! - `PolicyService.Classify` / `GetPolicy`: dry-run decisions and the policy in force,
//!   reloaded on change and on SIGHUP (an invalid new version keeps the old one).
//! - `ApprovalService`: list, get, decide, cancel and watch approvals (approvers and
//!   admins; nobody decides their own request), and wait for a decision; propose, learn
//!   (`DecideApprovalRequest.remember`), list and revoke rules learned from approvals, which
//!   lift later asks of the same shape to auto.
//!
//! The ledger is Postgres (shared by replicas) or SQLite (single node), opened from
//! `[ledger]`. A timer sweeps expired approvals and lapsed leases; another probes the
//! database and reports NOT_SERVING on the gRPC health endpoint while it is unreachable.
//! [`PolicyCore`] holds the logic and speaks the domain: its requests and answers are
//! domain types and its errors a [`PolicyError`]; the tonic adapters parse wire messages
//! into those requests and map answers and errors back (`wire`), and the in-process path
//! of `toolgate up` goes through the same adapter methods.

mod approval_service;
pub mod config;
mod core;
mod fault;
mod local;
mod outcome;
mod policy_service;
mod session_service;
mod source;
mod stored;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use toolgate_contracts::policy::v1::approval_service_server::ApprovalServiceServer;
use toolgate_contracts::policy::v1::policy_service_server::PolicyServiceServer;
use toolgate_contracts::policy::v1::session_service_server::SessionServiceServer;
use toolgate_ledger::Ledger;
use toolgate_runtime::auth::{AuthError, Authenticator};
use toolgate_runtime::metrics::{self, PolicyMetrics, Registry};
use toolgate_runtime::transport::Transport;
use toolgate_runtime::{grpc, shutdown, telemetry};

pub use crate::core::{
    ApprovalPage, ApprovalView, AuthorizeDecision, CancelRequest, Classification, ClassifyRequest,
    DecideRequest, Decided, ListApprovalsRequest, PolicyCore, PolicyDescription, PolicyError,
    Remember, RulePage, RuleProposal, RuleScope, WaitRequest,
};
pub use crate::core::{
    ClaimRequest, DEFAULT_CLAIM_TTL, EndRequest, ListSessionsRequest, MAX_CLAIM_TTL, RenewRequest,
    UpdateRequest,
};
pub use approval_service::ApprovalAdapter;
pub use config::Config;
pub use local::Local;
pub use policy_service::PolicyAdapter;
pub use session_service::SessionAdapter;
pub use source::PolicySource;

/// Why the policy service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is incomplete or inconsistent; the message names the field.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The policy document cannot be read or is invalid.
    #[error("cannot load the policy {}: {}", path.display(), policy_cause(error))]
    Policy {
        /// The document (`policy_file`).
        path: std::path::PathBuf,
        /// Why it cannot be loaded (in the message, not a `source`: the message says it once).
        error: toolgate_policy_engine::Error,
    },
    /// The ledger could not be opened.
    #[error("cannot open the ledger: {0}")]
    Ledger(#[from] toolgate_ledger::Error),
    /// The credentials could not be loaded.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// TLS or the connection limits are misconfigured.
    #[error(transparent)]
    Listen(#[from] toolgate_runtime::transport::TransportError),
    /// The metrics endpoint could not listen on `metrics_listen`.
    #[error("metrics_listen: cannot listen on {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: String,
        /// Why binding failed.
        source: std::io::Error,
    },
}

/// What [`serve_with`] takes beyond the configuration and the core.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The registry the core's metrics are registered in, served on `metrics_listen`.
    /// `None`: no metrics endpoint (an embedding process such as `toolgate up` serves its
    /// own registry).
    pub metrics_registry: Option<Arc<Registry>>,
    /// Do not print the listening line: the embedding process (`toolgate up`) prints its own,
    /// and promises exactly one.
    pub quiet: bool,
}

/// Loads the policy named by the configuration (or the shipped default) and, for a file,
/// starts reloading it on change and on SIGHUP.
pub fn policy_source(
    config: &Config,
) -> Result<(PolicySource, Option<toolgate_policy_engine::Watcher>), Error> {
    let Some(path) = &config.policy_file else {
        return Ok((
            PolicySource::Builtin(Arc::new(toolgate_policy_engine::Policy::builtin_default())),
            None,
        ));
    };
    let file =
        toolgate_policy_engine::PolicyFile::load(path.clone()).map_err(|error| Error::Policy {
            path: path.clone(),
            error,
        })?;
    let file = Arc::new(file);
    let watched = path.clone();
    let watcher = file.watch(
        Duration::from_millis(config.reload_interval_ms),
        move |result| log_reload(&watched, result),
    );
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        let file = file.clone();
        let path = path.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                log_reload(&path, file.reload());
            }
        });
    }
    Ok((PolicySource::File(file), Some(watcher)))
}

/// What went wrong with a policy document, without repeating its path (the message around
/// it names the file once).
fn policy_cause(e: &toolgate_policy_engine::Error) -> String {
    match e {
        toolgate_policy_engine::Error::Read { source, .. } => format!("cannot read it: {source}"),
        other => other.to_string(),
    }
}

fn log_reload(path: &std::path::Path, result: Result<bool, toolgate_policy_engine::Error>) {
    match result {
        Ok(true) => tracing::info!(path = %path.display(), "policy reloaded"),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(
                path = %path.display(),
                error = %policy_cause(&e),
                "new policy version is invalid; the previous one stays in force"
            );
        }
    }
}

/// Opens the core from `config` and serves until `shutdown` fires, with the metrics
/// endpoint on `metrics_listen` when set.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
) -> Result<(), Error> {
    let mut registry = metrics::registry();
    let core = PolicyCore::open_with(&config, PolicyMetrics::register(&mut registry)).await?;
    let options = ServeOptions {
        metrics_registry: Some(Arc::new(registry)),
        quiet: false,
    };
    serve_with(config, core, listener, shutdown, options).await
}

/// Serves `PolicyService` and `ApprovalService` from `core` on `listener` until `shutdown`
/// fires, then drains in-flight calls for at most the configured grace period; what
/// [`serve`] does with a core it opened itself, and what `toolgate up` calls with its own.
///
/// Prints one JSON line `{"service": "toolgate-policy", "listening": "ip:port"}` on stdout
/// once the socket accepts calls (unless [`ServeOptions::quiet`]); it gains
/// `"metrics": "ip:port"` when the metrics endpoint is served.
pub async fn serve_with(
    config: Config,
    core: PolicyCore,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
    options: ServeOptions,
) -> Result<(), Error> {
    let options_quiet = options.quiet;
    let metrics_listener = match (&config.metrics_listen, options.metrics_registry) {
        (Some(addr), Some(registry)) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Metrics {
                    addr: addr.clone(),
                    source,
                })?;
            Some((listener, registry))
        }
        (Some(addr), None) => {
            tracing::warn!(%addr, "metrics_listen ignored: the embedding process serves the metrics");
            None
        }
        (None, _) => None,
    };
    let addr = listener.local_addr()?;
    let transport = Transport::new(&config.transport, addr)?;
    let authenticator = Authenticator::from_config(&config.auth)?
        .with_client_cert_roles(&config.transport.tls.client_cert_roles);
    let (health, health_service) = grpc::health();
    let (reflection_v1, reflection_v1alpha) = grpc::reflection(&[
        toolgate_contracts::policy::v1::policy_service_server::SERVICE_NAME,
        toolgate_contracts::policy::v1::approval_service_server::SERVICE_NAME,
        toolgate_contracts::policy::v1::session_service_server::SERVICE_NAME,
    ]);

    // The first probe runs before the address is announced, so a client that sees the
    // listening line also sees an accurate health status.
    let ledger = core.ledger();
    let up = ledger.health().await.is_ok();
    set_health(&health, up).await;
    // Background work that ends with the server: dropping the set aborts it.
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(probe_health(
        ledger.clone(),
        health.clone(),
        Duration::from_millis(config.ledger.health_interval_ms),
        up,
        shutdown.clone(),
    ));
    tasks.spawn(sweep(
        ledger,
        core.metrics().clone(),
        Duration::from_millis(config.ledger.sweep_interval_ms),
        shutdown.clone(),
    ));

    // One machine-readable line on stdout so scripts and tests learn the bound ports.
    let mut line = serde_json::json!({
        "service": "toolgate-policy",
        "listening": addr.to_string(),
        "scheme": transport.scheme(),
    });
    if let Some((listener, registry)) = metrics_listener {
        line["metrics"] = listener.local_addr()?.to_string().into();
        let serve = metrics::serve(listener, registry, shutdown.clone());
        tasks.spawn(async move {
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "metrics endpoint failed");
            }
        });
    }
    let _tasks = tasks;
    if !options_quiet {
        println!("{line}");
    }
    tracing::info!(%addr, policy_version = %core.policy().version(), ledger_up = up, "policy service listening");

    let policy = PolicyServiceServer::with_interceptor(
        PolicyAdapter::new(core.clone()),
        authenticator.interceptor(),
    );
    let sessions = SessionServiceServer::with_interceptor(
        SessionAdapter::new(core.clone()),
        authenticator.interceptor(),
    );
    let approvals = ApprovalServiceServer::with_interceptor(
        ApprovalAdapter::new(core, shutdown.clone()),
        authenticator.interceptor(),
    );
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
        .add_service(policy)
        .add_service(approvals)
        .add_service(sessions)
        .serve_with_incoming_shutdown(transport.incoming(listener), shutdown.clone().wait());
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    shutdown::serve_until(server, shutdown, grace, async {
        set_health(&health, false).await;
    })
    .await?;
    Ok(())
}

const POLICY: &str = <PolicyServiceServer<PolicyAdapter> as NamedService>::NAME;
const APPROVALS: &str = <ApprovalServiceServer<ApprovalAdapter> as NamedService>::NAME;
const SESSIONS: &str = <SessionServiceServer<SessionAdapter> as NamedService>::NAME;

async fn set_health(health: &HealthReporter, up: bool) {
    let status = if up {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in ["", POLICY, APPROVALS, SESSIONS] {
        health.set_service_status(name, status).await;
    }
}

/// Reports NOT_SERVING while the database does not answer, SERVING once it does again.
async fn probe_health(
    ledger: Arc<dyn Ledger>,
    health: HealthReporter,
    every: Duration,
    mut up: bool,
    shutdown: shutdown::Shutdown,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.clone().wait() => return,
        }
        let result = ledger.health().await;
        // Draining owns the status from here on.
        if shutdown.is_triggered() {
            return;
        }
        let now_up = result.is_ok();
        if now_up != up {
            match &result {
                Ok(()) => tracing::info!("ledger database available again; serving"),
                Err(e) => tracing::error!(error = %e, "ledger database unavailable; not serving"),
            }
            set_health(&health, now_up).await;
            up = now_up;
        }
    }
}

/// Expires overdue approvals and turns lapsed leases `unknown`, so states are current
/// even when nobody touches them (use-time checks guard correctness regardless). Each
/// round also sets the pending-approvals gauge from the ledger, which replicas share.
async fn sweep(
    ledger: Arc<dyn Ledger>,
    metrics: PolicyMetrics,
    every: Duration,
    shutdown: shutdown::Shutdown,
) {
    let mut failing = false;
    loop {
        match ledger.count_pending().await {
            Ok(n) => metrics.set_approvals_pending(i64::try_from(n).unwrap_or(i64::MAX)),
            Err(e) => tracing::debug!(error = %e, "cannot count pending approvals"),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = shutdown.clone().wait() => return,
        }
        match ledger.sweep().await {
            Ok(r) => {
                failing = false;
                for _ in 0..r.expired {
                    metrics.approval_decided("expired", None);
                }
                if r.expired + r.unknown > 0 {
                    tracing::info!(
                        expired = r.expired,
                        unknown = r.unknown,
                        "ledger sweep closed approvals"
                    );
                }
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "ledger sweep failed; retrying on the next tick");
            }
            Err(_) => {}
        }
    }
}
