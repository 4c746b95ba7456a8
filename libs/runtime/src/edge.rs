//! The edge of every toolgate gRPC server: whatever goes wrong, the client gets a status with
//! an `ErrorInfo` from the closed reason list, small enough for its metadata limit.
//!
//! Statuses built by toolgate already carry one ([`toolgate_contracts::status::status`]).
//! This layer covers the ones the gRPC stack makes by itself: a request that does not decode,
//! one above the size limit, an unknown method, an expired deadline. It rewrites the status
//! wherever it travels: in the headers of a trailers-only response, or in the trailers at
//! the end of a stream ([`toolgate_contracts::status::at_edge`] decides what to write).
//!
//! Deadlines. tonic enforces `grpc-timeout` in a layer *outside* the ones a service adds, and
//! answers `CANCELLED` "Timeout expired" with no details, which no layer of ours sees. So this
//! layer keeps the same deadline itself, [`DEADLINE_LEAD`] earlier, and answers
//! `DEADLINE_EXCEEDED` / `TIMEOUT` first (tonic polls the inner future before its own timer,
//! so when both fire in one timer tick ours still wins).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::HeaderMap;
use toolgate_contracts::status::at_edge;

/// How much earlier than the client's `grpc-timeout` this layer answers the deadline.
pub const DEADLINE_LEAD: Duration = Duration::from_millis(2);

/// The layer for `tonic::transport::Server::builder().layer(..)`; add it first, so that it
/// sees every response, including the metrics and tracing layers' inner ones.
pub fn layer() -> EdgeLayer {
    EdgeLayer
}

/// See [`layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EdgeLayer;

impl<S> tower::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Edge { inner }
    }
}

/// The service [`EdgeLayer`] wraps around a router.
#[derive(Debug, Clone)]
pub struct Edge<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for Edge<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    ResBody: Default,
{
    type Response = http::Response<EdgeBody<ResBody>>;
    type Error = S::Error;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let deadline = request
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_timeout)
            .map(|t| Box::pin(tokio::time::sleep(t.saturating_sub(DEADLINE_LEAD))));
        EdgeFuture {
            future: self.inner.call(request),
            method: Some(method),
            deadline,
        }
    }
}

/// A `grpc-timeout` value: up to 8 digits and a unit (H, M, S, m, u, n).
fn parse_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Rewrites the status in `headers` (response headers or trailers) when it needs an
/// `ErrorInfo` or does not fit.
fn fix(headers: &mut HeaderMap, method: &str) {
    if headers
        .get("grpc-status")
        .is_none_or(|v| v.as_bytes() == b"0")
    {
        return;
    }
    let Some(status) = tonic::Status::from_header_map(headers) else {
        return;
    };
    let Some(fixed) = at_edge(&status, method) else {
        return;
    };
    for name in ["grpc-status", "grpc-message", "grpc-status-details-bin"] {
        headers.remove(name);
    }
    if fixed.add_header(headers).is_err() {
        // Only an invalid header byte could fail, and the message is percent-encoded.
        headers.insert("grpc-status", http::HeaderValue::from_static("13"));
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Edge`].
    pub struct EdgeFuture<F> {
        #[pin]
        future: F,
        method: Option<String>,
        deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F, B, E> Future for EdgeFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: Default,
{
    type Output = Result<http::Response<EdgeBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = match this.future.poll(cx) {
            Poll::Ready(r) => r,
            Poll::Pending => {
                if let Some(d) = this.deadline.as_mut() {
                    ready!(d.as_mut().poll(cx));
                    let method = this.method.take().unwrap_or_default();
                    let mut response = tonic::Status::cancelled("Timeout expired").into_http::<B>();
                    fix(response.headers_mut(), &method);
                    return Poll::Ready(Ok(response.map(|inner| EdgeBody {
                        inner,
                        method: None,
                    })));
                }
                return Poll::Pending;
            }
        };
        let method = this.method.take().unwrap_or_default();
        Poll::Ready(result.map(|mut response| {
            // A trailers-only response (an error answered at once) carries its status here.
            let trailers_only = response.headers().contains_key("grpc-status");
            if trailers_only {
                fix(response.headers_mut(), &method);
            }
            response.map(|inner| EdgeBody {
                inner,
                method: (!trailers_only).then_some(method),
            })
        }))
    }
}

pin_project_lite::pin_project! {
    /// A response body whose trailers get the same treatment as a trailers-only response.
    pub struct EdgeBody<B> {
        #[pin]
        inner: B,
        // The RPC's path while its status is still to come in the trailers.
        method: Option<String>,
    }
}

impl<B: http_body::Body> http_body::Body for EdgeBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        Poll::Ready(frame.map(|f| {
            f.map(|frame| match frame.into_trailers() {
                Ok(mut trailers) => {
                    if let Some(method) = this.method.take() {
                        fix(&mut trailers, &method);
                    }
                    http_body::Frame::trailers(trailers)
                }
                Err(frame) => frame,
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_parse_per_the_spec() {
        assert_eq!(parse_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            parse_timeout("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(parse_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_timeout("123456789S"), None, "at most 8 digits");
        assert_eq!(parse_timeout("5"), None);
        assert_eq!(parse_timeout("5x"), None);
        assert_eq!(parse_timeout("-5S"), None);
    }

    #[test]
    fn a_status_without_error_info_is_rewritten_in_place() {
        let mut headers = HeaderMap::new();
        tonic::Status::unimplemented("")
            .add_header(&mut headers)
            .unwrap();
        fix(&mut headers, "/nope.Service/Method");
        let s = tonic::Status::from_header_map(&headers).unwrap();
        assert_eq!(s.code(), tonic::Code::Unimplemented);
        let (reason, md) = toolgate_contracts::status::error_info(&s).unwrap();
        assert_eq!(reason, "UNSUPPORTED");
        assert_eq!(md["method"], "nope.Service/Method");
        // OK is left alone.
        let mut ok = HeaderMap::new();
        ok.insert("grpc-status", http::HeaderValue::from_static("0"));
        fix(&mut ok, "/m");
        assert_eq!(ok.len(), 1);
    }
}
