//! The toolgate executor: the enforcement point.
//!
//! `serve` wires the domain crates (`toolgate-fs`, later `toolgate-process`) behind their
//! tonic adapters. Adapters parse wire messages into validated domain requests at the edge
//! (`INVALID_ARGUMENT` dies there) and map domain errors to statuses through
//! `toolgate_contracts::status`, the one place that knows the `ErrorInfo` shape.

pub mod config;
mod fs_search;
mod fs_service;
mod process_service;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use toolgate_contracts::common::v1::ExecutorIdentity;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::executor_service_server::ExecutorServiceServer;
use toolgate_contracts::executor::v1::filesystem_service_server::FilesystemServiceServer;
use toolgate_contracts::executor::v1::process_service_server::ProcessServiceServer;
use toolgate_runtime::{grpc, shutdown};

pub use config::Config;
pub use fs_service::FsService;
pub use process_service::ProcessAdapter;

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
}

/// Who this executor is: configured id, else host name and pid, plus the Kubernetes
/// downward-API variables when the pod sets them.
pub fn identity(config: &Config) -> ExecutorIdentity {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    ExecutorIdentity {
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

/// Serves every executor gRPC service on `listener` until `shutdown` fires, then drains
/// in-flight calls for at most the configured grace period.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: shutdown::Shutdown,
) -> Result<(), Error> {
    let workspace = Arc::new(toolgate_fs::Workspace::open(config.workspace_config())?);
    let addr = listener.local_addr()?;

    let (health, health_service) = grpc::health();
    let (reflection_v1, reflection_v1alpha) = grpc::reflection();
    let fs = FsService::new(workspace.clone());
    let runner = toolgate_process::Runner::new(config.process_config().map_err(Error::Config)?)?;
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
    let process = ProcessAdapter::new(workspace.clone(), runner.clone(), identity(&config), view);
    health
        .set_serving::<FilesystemServiceServer<FsService>>()
        .await;
    health
        .set_serving::<ProcessServiceServer<ProcessAdapter>>()
        .await;
    health
        .set_serving::<ExecutorServiceServer<ProcessAdapter>>()
        .await;

    // One machine-readable line on stdout so scripts and tests learn the bound port.
    println!(
        "{}",
        serde_json::json!({"service": "toolgate-executor", "listening": addr.to_string()})
    );
    tracing::info!(%addr, root = %workspace.real_root().display(), "executor listening");

    let max_request = config.max_request_bytes;
    let server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(FilesystemServiceServer::new(fs).max_decoding_message_size(max_request))
        .add_service(
            ProcessServiceServer::new(process.clone()).max_decoding_message_size(max_request),
        )
        .add_service(ExecutorServiceServer::new(process))
        .serve_with_incoming_shutdown(
            // Without TCP_NODELAY small unary answers wait out delayed ACKs (~40 ms).
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown.clone().wait(),
        );
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    shutdown::serve_until(server, shutdown, grace, async {
        health
            .set_not_serving::<FilesystemServiceServer<FsService>>()
            .await;
        health
            .set_not_serving::<ProcessServiceServer<ProcessAdapter>>()
            .await;
    })
    .await?;
    // Whatever still runs is terminated (TERM, grace, KILL) and reaped before we exit.
    runner.shutdown().await;
    Ok(())
}
