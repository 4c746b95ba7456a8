//! The server side of propagation: a tower layer giving every RPC a span parented by the
//! caller's `traceparent`.
// pin_project_lite's generated projection enum (`TracedFutureProj`) cannot carry docs.
#![allow(missing_docs)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, ready};

use http::HeaderMap;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{INCOMING, extract, is_exporting};

/// The layer for `tonic::transport::Server::builder().layer(..)`; see [`server_layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcTraceLayer;

/// A span per RPC when exporting, the caller's context passed through when not.
///
/// The span is `info` level, named `package.Service/Method` (`otel.name`), `otel.kind =
/// server`, with `rpc.system = grpc`, `rpc.service`, `rpc.method` and, once known,
/// `rpc.grpc.status_code`. It lasts until the response body (a stream, too) has ended. Server
/// errors (`UNKNOWN`, `DEADLINE_EXCEEDED`, `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE`,
/// `DATA_LOSS`) mark it as an error, as the OpenTelemetry gRPC conventions ask.
pub fn server_layer() -> GrpcTraceLayer {
    GrpcTraceLayer
}

impl<S> tower::Layer<S> for GrpcTraceLayer {
    type Service = GrpcTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcTrace { inner }
    }
}

/// The service [`GrpcTraceLayer`] wraps around a router.
#[derive(Debug, Clone)]
pub struct GrpcTrace<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for GrpcTrace<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<TracedBody<ResBody>>;
    type Error = S::Error;
    type Future = TracedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        if is_exporting() {
            let span = rpc_span(request.uri().path());
            let _ = span.set_parent(extract(&Headers(request.headers())));
            let future = span.in_scope(|| self.inner.call(request));
            return TracedFuture::Traced {
                future,
                span: Some(span),
            };
        }
        let incoming = extract(&Headers(request.headers()));
        if incoming.span().span_context().is_valid() {
            TracedFuture::Forwarded {
                future: INCOMING.scope(incoming, self.inner.call(request)),
            }
        } else {
            TracedFuture::Plain {
                future: self.inner.call(request),
            }
        }
    }
}

/// A `client` span for an outgoing call to `rpc` (`package.Service/Method`), with the same
/// `rpc.*` attributes as the server side. Enter it (or `.instrument(..)` the call) and
/// [`super::inject`] inside it, so the callee's span becomes its child.
pub fn client_span(rpc: &str) -> Span {
    let (service, method) = rpc.split_once('/').unwrap_or((rpc, ""));
    tracing::info_span!(
        "grpc.client",
        otel.name = rpc,
        otel.kind = "client",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
    )
}

/// Records how a client call ended on its [`client_span`]: `rpc.grpc.status_code`, and the
/// span's status `ERROR` for the codes the server side marks as errors too.
pub fn record_client_status(span: &Span, code: tonic::Code) {
    let code = code as i64;
    span.record("rpc.grpc.status_code", code);
    if is_error_code(code) {
        span.record("otel.status_code", "ERROR");
    }
}

/// UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS.
fn is_error_code(code: i64) -> bool {
    matches!(code, 2 | 4 | 12 | 13 | 14 | 15)
}

/// The span for one RPC at `path` (`/package.Service/Method`).
fn rpc_span(path: &str) -> Span {
    let name = path.trim_start_matches('/');
    let (service, method) = name.split_once('/').unwrap_or((name, ""));
    tracing::info_span!(
        "grpc.server",
        otel.name = name,
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
    )
}

/// Records a `grpc-status` found in `headers` (an error answered at once, or the trailers).
fn record_status(span: &Span, headers: &HeaderMap) {
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i64>().ok())
    else {
        return;
    };
    span.record("rpc.grpc.status_code", code);
    if is_error_code(code) {
        span.record("otel.status_code", "ERROR");
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`GrpcTrace`].
    #[project = TracedFutureProj]
    pub enum TracedFuture<F> {
        /// Exporting: the handler runs inside the RPC span.
        Traced { #[pin] future: F, span: Option<Span> },
        /// Not exporting, with a caller context to pass on.
        Forwarded { #[pin] future: tokio::task::futures::TaskLocalFuture<opentelemetry::Context, F> },
        /// Not exporting, no caller context.
        Plain { #[pin] future: F },
    }
}

impl<F, B, E> Future for TracedFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<TracedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        match self.project() {
            TracedFutureProj::Traced { future, span } => {
                let result = {
                    let _entered = span.as_ref().map(Span::enter);
                    ready!(future.poll(cx))
                };
                let span = span.take();
                Poll::Ready(result.map(|response| {
                    if let Some(span) = &span {
                        record_status(span, response.headers());
                    }
                    response.map(|inner| TracedBody { inner, span })
                }))
            }
            TracedFutureProj::Forwarded { future } => {
                Poll::Ready(ready!(future.poll(cx)).map(TracedBody::untraced))
            }
            TracedFutureProj::Plain { future } => {
                Poll::Ready(ready!(future.poll(cx)).map(TracedBody::untraced))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps the RPC span open until the last frame.
    pub struct TracedBody<B> {
        #[pin]
        inner: B,
        span: Option<Span>,
    }
}

impl<B> TracedBody<B> {
    fn untraced(response: http::Response<B>) -> http::Response<Self> {
        response.map(|inner| TracedBody { inner, span: None })
    }
}

impl<B: http_body::Body> http_body::Body for TracedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(span) = this.span.as_ref() else {
            return this.inner.poll_frame(cx);
        };
        let frame = {
            let _entered = span.enter();
            ready!(this.inner.poll_frame(cx))
        };
        match &frame {
            Some(Ok(frame)) => {
                if let Some(trailers) = frame.trailers_ref() {
                    record_status(span, trailers);
                }
            }
            Some(Err(_)) => {
                span.record("otel.status_code", "ERROR");
            }
            None => {}
        }
        if frame.is_none() {
            // The stream is over: end the span now rather than when hyper drops the body.
            this.span.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Reads propagation fields from HTTP/2 request headers.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}
