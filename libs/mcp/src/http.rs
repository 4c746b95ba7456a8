//! The streamable HTTP transport at `/mcp`, behind a bearer-token check, on the same
//! `[transport]` listener as the gRPC services (TLS, connection cap, idle and handshake
//! timeouts).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use toolgate_contracts::executor::v1::GetCapabilitiesRequest;
use toolgate_contracts::executor::v1::executor_service_client::ExecutorServiceClient;
use toolgate_runtime::transport::{ActivityLayer, ConnInfo, Transport};
use tower::Service;

use crate::caller::bearer;
use crate::server::McpServer;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// How long a token the executor accepted is trusted without asking again.
const TOKEN_TTL: Duration = Duration::from_secs(30);
/// Most tokens remembered; the cache starts over beyond it.
const TOKEN_CACHE: usize = 1024;

/// The router: `POST/GET/DELETE /mcp`, every request with a bearer token the executor
/// accepts. `any_host` turns off rmcp's `Host` allow-list (loopback names only), for a
/// listener other services reach by a DNS name.
pub fn router(server: McpServer, any_host: bool) -> axum::Router {
    let mut config = StreamableHttpServerConfig::default();
    if any_host {
        config = config.disable_allowed_hosts();
    }
    let tokens = Arc::new(Tokens {
        channel: server.shared().channel.clone(),
        seen: Mutex::new(HashMap::new()),
    });
    // Every session (and every stateless request) gets a clone of the one server.
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .route_service(PATH, service)
        .layer(axum::middleware::from_fn(parse_json))
        .layer(axum::middleware::from_fn_with_state(tokens, authenticate))
}

/// The largest JSON-RPC message read (a `write_file` of the executor's default request limit,
/// escaped, fits).
const MAX_MESSAGE_BYTES: usize = 160 << 20;

/// A JSON body that does not parse is a JSON-RPC parse error (HTTP 400, code -32700), as the
/// specification says, not the `415 Unsupported Media Type` the transport answered.
async fn parse_json(request: Request, next: Next) -> Response {
    let is_json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if request.method() != http::Method::POST || !is_json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return parse_error(
                http::StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the message could not be read whole (at most {MAX_MESSAGE_BYTES} bytes): {e}"
                ),
            );
        }
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return parse_error(
            http::StatusCode::BAD_REQUEST,
            &format!("the body is not valid JSON: {e}"),
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn parse_error(code: http::StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": -32700, "message": format!("parse error: {message}") },
    })
    .to_string();
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Serves `router` on `listener` through `transport` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut incoming = std::pin::pin!(transport.incoming(listener));
    let mut shutdown = std::pin::pin!(shutdown);
    let router = tower::ServiceBuilder::new()
        .layer(ActivityLayer)
        .service(router);
    loop {
        let conn = tokio::select! {
            () = &mut shutdown => return,
            c = incoming.next() => c,
        };
        let Some(conn) = conn else { return };
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "an MCP connection failed before it was served");
                continue;
            }
        };
        let info: ConnInfo = tonic::transport::server::Connected::connect_info(&conn);
        let router = router.clone();
        let service =
            hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(info.clone());
                let mut router = router.clone();
                async move {
                    let response = router.call(request.map(Body::new)).await;
                    Ok::<_, Infallible>(response.unwrap_or_else(|e| match e {}).map(Body::new))
                }
            });
        tokio::spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(conn), service)
                .await;
            if let Err(e) = served {
                tracing::debug!(error = %e, "an MCP connection ended with an error");
            }
        });
    }
}

/// Tokens the executor recently accepted, by sha256.
struct Tokens {
    channel: tonic::transport::Channel,
    seen: Mutex<HashMap<[u8; 32], Instant>>,
}

impl Tokens {
    fn fresh(&self, key: &[u8; 32]) -> bool {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.get(key).is_some_and(|t| t.elapsed() < TOKEN_TTL)
    }

    fn remember(&self, key: [u8; 32]) {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.len() >= TOKEN_CACHE {
            seen.clear();
        }
        seen.insert(key, Instant::now());
    }
}

/// The longest bearer token forwarded to the executor (toolgate's own are 64 characters; the
/// executor's whole header list is capped at 16 KiB by default).
const MAX_TOKEN_BYTES: usize = 1024;

/// Lets a request through only with a bearer token the executor accepts (asked once per
/// token every 30 s): 401 without one or with an unknown one, 403 for a credential that may
/// not call tools, 503 when the executor cannot be asked. Every tool call then carries the
/// same token to the executor, which checks it again.
async fn authenticate(State(tokens): State<Arc<Tokens>>, request: Request, next: Next) -> Response {
    let Some(token) = bearer(request.headers()).map(str::to_owned) else {
        return refuse(
            http::StatusCode::UNAUTHORIZED,
            "send the agent's toolgate token as `Authorization: Bearer <token>`",
        );
    };
    // Checked here, not by the executor: a header above the executor's limit would reset the
    // one connection every agent's calls share, so a stranger's request could fail theirs.
    if token.len() > MAX_TOKEN_BYTES || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return refuse(
            http::StatusCode::UNAUTHORIZED,
            &format!(
                "the bearer token is not a toolgate token: at most {MAX_TOKEN_BYTES} printable ASCII characters"
            ),
        );
    }
    let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if !tokens.fresh(&key) {
        let mut probe = tonic::Request::new(GetCapabilitiesRequest {});
        match toolgate_runtime::auth::bearer(&token) {
            Ok(v) => {
                probe.metadata_mut().insert("authorization", v);
            }
            Err(_) => {
                return refuse(
                    http::StatusCode::UNAUTHORIZED,
                    "the bearer token is not a valid header value",
                );
            }
        }
        let answer = ExecutorServiceClient::new(tokens.channel.clone())
            .get_capabilities(probe)
            .await;
        match answer {
            Ok(_) => tokens.remember(key),
            Err(s) if s.code() == tonic::Code::Unauthenticated => {
                return refuse(http::StatusCode::UNAUTHORIZED, s.message());
            }
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                return refuse(http::StatusCode::FORBIDDEN, s.message());
            }
            Err(s) => {
                return refuse(
                    http::StatusCode::SERVICE_UNAVAILABLE,
                    &format!("the executor cannot check the token: {}", s.message()),
                );
            }
        }
    }
    next.run(request).await
}

fn refuse(code: http::StatusCode, message: &str) -> Response {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut r = (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response();
    if code == http::StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            http::header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer realm=\"toolgate\""),
        );
    }
    r
}
