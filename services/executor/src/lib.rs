//! The toolgate executor: the enforcement point.
//!
//! `serve` wires the domain crates (`toolgate-fs`, later `toolgate-process`) behind their
//! tonic adapters. Adapters parse wire messages into validated domain requests at the edge
//! (`INVALID_ARGUMENT` dies there) and map domain errors to statuses through
//! `toolgate_contracts::status`, the one place that knows the `ErrorInfo` shape.

pub mod config;
mod fs_search;
mod fs_service;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use toolgate_contracts::executor::v1::filesystem_service_server::FilesystemServiceServer;
use toolgate_runtime::{grpc, shutdown};

pub use config::Config;
pub use fs_service::FsService;

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
    health
        .set_serving::<FilesystemServiceServer<FsService>>()
        .await;

    // One machine-readable line on stdout so scripts and tests learn the bound port.
    println!(
        "{}",
        serde_json::json!({"service": "toolgate-executor", "listening": addr.to_string()})
    );
    tracing::info!(%addr, root = %workspace.real_root().display(), "executor listening");

    let server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(FilesystemServiceServer::new(fs))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown.clone().wait());
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result.map_err(Error::from),
        () = shutdown.wait() => {}
    }
    health
        .set_not_serving::<FilesystemServiceServer<FsService>>()
        .await;
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    let drained = shutdown::drain_within(grace, async {
        if let Err(e) = (&mut server).await {
            tracing::warn!(error = %e, "server stopped with an error while draining");
        }
    })
    .await;
    if drained {
        tracing::info!("executor drained and stopped");
    } else {
        tracing::warn!(?grace, "grace period over; abandoning in-flight calls");
    }
    Ok(())
}
