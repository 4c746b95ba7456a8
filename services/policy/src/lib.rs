//! The toolgate policy service: the decision point.
//!
//! Today it serves `PolicyService.Classify` and `GetPolicy` from the policy engine, with the
//! policy file reloaded on change and on SIGHUP (an invalid new version keeps the old one in
//! force). `Authorize` and `RecordOutcome` answer UNIMPLEMENTED / UNSUPPORTED until the
//! approval ledger is wired in.

pub mod config;
mod policy_service;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use toolgate_contracts::policy::v1::policy_service_server::PolicyServiceServer;
use toolgate_runtime::{grpc, shutdown};

pub use config::Config;
pub use policy_service::{PolicyAdapter, PolicySource};

/// Why the policy service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The policy document is invalid.
    #[error("cannot load the policy: {0}")]
    Policy(#[from] toolgate_policy_engine::Error),
    /// The listener failed.
    #[error("listener: {0}")]
    Io(#[from] std::io::Error),
    /// The gRPC server failed.
    #[error("grpc server: {0}")]
    Transport(#[from] tonic::transport::Error),
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
    let file = Arc::new(toolgate_policy_engine::PolicyFile::load(path.clone())?);
    let watcher = file.watch(Duration::from_millis(config.reload_interval_ms), log_reload);
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        let file = file.clone();
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                log_reload(file.reload());
            }
        });
    }
    Ok((PolicySource::File(file), Some(watcher)))
}

fn log_reload(result: Result<bool, toolgate_policy_engine::Error>) {
    match result {
        Ok(true) => tracing::info!("policy reloaded"),
        Ok(false) => {}
        Err(e) => {
            tracing::error!(error = %e, "new policy version is invalid; the previous one stays in force");
        }
    }
}

/// Serves the policy service on `listener` until `shutdown` fires, then drains in-flight calls
/// for at most the configured grace period.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
) -> Result<(), Error> {
    let (source, _watcher) = policy_source(&config)?;
    let addr = listener.local_addr()?;
    let (health, health_service) = grpc::health();
    let (reflection_v1, reflection_v1alpha) = grpc::reflection();
    let version = source.current().version().to_owned();
    health
        .set_serving::<PolicyServiceServer<PolicyAdapter>>()
        .await;
    println!(
        "{}",
        serde_json::json!({"service": "toolgate-policy", "listening": addr.to_string()})
    );
    tracing::info!(%addr, policy_version = %version, "policy service listening");

    let server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(PolicyServiceServer::new(PolicyAdapter::new(source)))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY small unary answers wait out delayed ACKs (~40 ms).
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.clone().wait(),
        );
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    shutdown::serve_until(server, shutdown, grace, async {
        health
            .set_not_serving::<PolicyServiceServer<PolicyAdapter>>()
            .await;
    })
    .await?;
    Ok(())
}
