//! OTLP over HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`): the exporter's HTTP client,
//! HTTP/1.1 on hyper, `https://` with the same rustls client configuration as every
//! toolgate client. One connection is kept and reused; a closed one is replaced.
//!
//! The SDK's batch processor runs exports on its own thread, outside Tokio, so every request
//! is run as a task on the runtime that was current when the client was built.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use opentelemetry_http::{HttpClient, HttpError};
use rustls::pki_types::ServerName;

use crate::transport::ClientTls;

/// Largest collector answer read.
const MAX_RESPONSE: usize = 4 << 20;

/// See the module documentation.
pub(super) struct OtlpHttpClient {
    tls: Option<Arc<ClientTls>>,
    timeout: Duration,
    runtime: tokio::runtime::Handle,
    conn: Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>,
}

impl std::fmt::Debug for OtlpHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpHttpClient")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl OtlpHttpClient {
    /// A client on the current Tokio runtime; `tls` is required for `https://`.
    pub(super) fn new(tls: Option<Arc<ClientTls>>, timeout: Duration) -> Self {
        OtlpHttpClient {
            tls,
            timeout,
            runtime: tokio::runtime::Handle::current(),
            conn: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }
}

async fn connect(
    uri: &http::Uri,
    tls: Option<&Arc<ClientTls>>,
) -> Result<SendRequest<Full<Bytes>>, HttpError> {
    let https = uri.scheme_str() == Some("https");
    let tcp = crate::transport::tls::tcp_connect(uri, if https { 443 } else { 80 }).await?;
    if !https {
        return handshake(tcp).await;
    }
    let tls = tls.ok_or("https needs a TLS configuration")?;
    let mut config = (*tls.config()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_owned())?, tcp)
        .await?;
    handshake(stream).await
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, HttpError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "OTLP/HTTP connection ended");
        }
    });
    Ok(sender)
}

async fn send(
    conn: Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>,
    tls: Option<Arc<ClientTls>>,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let (mut parts, body) = request.into_parts();
    let uri = parts.uri.clone();
    // HTTP/1.1 asks for the origin form and a Host header.
    if let Some(authority) = uri.authority() {
        parts
            .headers
            .insert(http::header::HOST, authority.as_str().parse()?);
    }
    parts.uri = uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str)
        .parse()?;
    let mut cached = conn.lock().await;
    let reuse = match cached.as_mut() {
        Some(s) if !s.is_closed() => s.ready().await.is_ok(),
        _ => false,
    };
    if !reuse {
        *cached = Some(connect(&uri, tls.as_ref()).await?);
    }
    let sender = cached.as_mut().ok_or("no connection")?;
    let response = match sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            *cached = None;
            return Err(e.into());
        }
    };
    drop(cached);
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

impl HttpClient for OtlpHttpClient {
    // The trait is declared with `async_trait`; this is its expansion.
    fn send_bytes<'s, 'f>(
        &'s self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'f>>
    where
        's: 'f,
        Self: 'f,
    {
        let (conn, tls, timeout) = (self.conn.clone(), self.tls.clone(), self.timeout);
        // The timer must run on the runtime too: this future may be polled by a plain
        // executor, where Tokio's timers do not exist.
        let task = self.runtime.spawn(async move {
            match tokio::time::timeout(timeout, send(conn, tls, request)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer within {} ms", timeout.as_millis()).into()),
            }
        });
        Box::pin(async move { task.await.map_err(|e| -> HttpError { e.into() })? })
    }
}
