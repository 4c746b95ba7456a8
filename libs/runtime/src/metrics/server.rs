//! The `/metrics` HTTP endpoint.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::shutdown::Shutdown;

/// The content type of a scrape: OpenMetrics text 1.0.0.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serves `GET /metrics` from `registry` on `listener` until `shutdown` fires; every other
/// path is 404. Logs the bound address.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving metrics on /metrics");
    let app = axum::Router::new()
        .route("/metrics", get(scrape))
        .with_state(registry);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.wait())
        .await
}

async fn scrape(State(registry): State<Arc<Registry>>) -> Response {
    let mut body = String::with_capacity(4096);
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}
