//! Per-RPC server metrics under the names the gRPC ecosystem's dashboards use
//! (go-grpc-prometheus / grpc-ecosystem): `grpc_server_handled_total{grpc_service,
//! grpc_method, grpc_code}` and `grpc_server_handling_seconds{grpc_service, grpc_method}`.
//!
//! A service adds [`server_layer`] to its tonic server; the families live in one
//! process-wide, unprefixed registry that every `/metrics` endpoint of the process serves
//! (in `toolgate up` both services' RPCs, told apart by `grpc_service`). An RPC counts when
//! its response ends (the trailers of a stream), with the code from `grpc-status`; a
//! response dropped before its end (the client went away) counts as `Canceled`. Paths that
//! no service implements are counted under `grpc_service="unknown"`, `grpc_method="unknown"`
//! so that a client cannot grow the label set.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context as TaskContext, Poll, ready};
use std::time::Instant;

use http::HeaderMap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use toolgate_contracts::status;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandledLabels {
    grpc_service: String,
    grpc_method: String,
    grpc_code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    grpc_service: String,
    grpc_method: String,
}

fn handling_buckets() -> Histogram {
    // 50 µs, ×4 each, to ~14 min: unary calls and long streamed runs alike.
    Histogram::new(exponential_buckets(0.000_05, 4.0, 13))
}

struct Families {
    registry: Registry,
    handled: Family<HandledLabels, Counter>,
    handling: Family<MethodLabels, Histogram, fn() -> Histogram>,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut registry = Registry::default();
        let handled = Family::<HandledLabels, Counter>::default();
        let handling = Family::<MethodLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            handling_buckets,
        );
        registry.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure",
            handled.clone(),
        );
        registry.register(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server",
            handling.clone(),
        );
        Families {
            registry,
            handled,
            handling,
        }
    })
}

/// The process-wide registry of the gRPC server metrics (empty until an RPC ends).
pub(super) fn registry() -> &'static Registry {
    &families().registry
}

/// The layer for `tonic::transport::Server::builder().layer(..)`: counts and times every RPC.
pub fn server_layer() -> GrpcMetricsLayer {
    GrpcMetricsLayer
}

/// See [`server_layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics { inner }
    }
}

/// The service [`GrpcMetricsLayer`] wraps around a router.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = MeteredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let name = request.uri().path().trim_start_matches('/');
        let (service, method) = name.split_once('/').unwrap_or((name, ""));
        let rpc = Rpc {
            service: service.to_owned(),
            method: method.to_owned(),
            start: Instant::now(),
        };
        MeteredFuture {
            future: self.inner.call(request),
            rpc: Some(rpc),
        }
    }
}

/// One RPC being measured; counted once, by [`Rpc::finish`] or on drop as `Canceled`.
#[derive(Debug)]
struct Rpc {
    service: String,
    method: String,
    start: Instant,
}

impl Rpc {
    fn finish(self, code: i32) {
        let code = code_name(code);
        let (grpc_service, grpc_method) = if code == "Unimplemented" {
            ("unknown".to_owned(), "unknown".to_owned())
        } else {
            (self.service, self.method)
        };
        let f = families();
        f.handling
            .get_or_create(&MethodLabels {
                grpc_service: grpc_service.clone(),
                grpc_method: grpc_method.clone(),
            })
            .observe(self.start.elapsed().as_secs_f64());
        f.handled
            .get_or_create(&HandledLabels {
                grpc_service,
                grpc_method,
                grpc_code: code,
            })
            .inc();
    }
}

/// The `grpc-status` in `headers`, if any.
fn status(headers: &HeaderMap) -> Option<i32> {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// The code's name as grpc-go spells it (what grpc-ecosystem dashboards filter on); an
/// unknown number is `Unknown`.
fn code_name(code: i32) -> &'static str {
    status::code_go_name(tonic::Code::from_i32(code))
}

pin_project_lite::pin_project! {
    /// The response future of [`GrpcMetrics`].
    pub struct MeteredFuture<F> {
        #[pin]
        future: F,
        rpc: Option<Rpc>,
    }
}

impl<F, B, E> Future for MeteredFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<MeteredBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.future.poll(cx));
        let rpc = this.rpc.take();
        Poll::Ready(match result {
            Ok(response) => {
                // A trailers-only response (an error answered at once) ends here.
                let rpc = match (rpc, status(response.headers())) {
                    (Some(rpc), Some(code)) => {
                        rpc.finish(code);
                        None
                    }
                    (rpc, _) => rpc,
                };
                Ok(response.map(|inner| MeteredBody {
                    inner,
                    rpc: Guard(rpc),
                }))
            }
            Err(e) => {
                if let Some(rpc) = rpc {
                    rpc.finish(2);
                }
                Err(e)
            }
        })
    }
}

/// Counts its RPC as `Canceled` if dropped unfinished.
#[derive(Debug)]
struct Guard(Option<Rpc>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(rpc) = self.0.take() {
            rpc.finish(1);
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that counts its RPC when the trailers (or the end) arrive.
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        rpc: Guard,
    }
}

impl<B: http_body::Body> http_body::Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if this.rpc.0.is_some() {
            let code = match &frame {
                Some(Ok(frame)) => frame.trailers_ref().map(|t| status(t).unwrap_or(2)),
                Some(Err(_)) => Some(2),
                None => Some(2),
            };
            if let Some(code) = code
                && let Some(rpc) = this.rpc.0.take()
            {
                rpc.finish(code);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::{Layer, Service};

    fn text() -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode_registry(&mut s, &families().registry)
            .expect("encodes");
        s
    }

    #[tokio::test]
    async fn trailers_only_errors_and_unknown_paths_are_counted() {
        let mut svc =
            server_layer().layer(tower::service_fn(|req: http::Request<()>| async move {
                let code = if req.uri().path().ends_with("/Missing") {
                    "12"
                } else {
                    "5"
                };
                Ok::<_, Infallible>(
                    http::Response::builder()
                        .header("grpc-status", code)
                        .body(http_body_util_empty())
                        .expect("response"),
                )
            }));
        for path in ["/test.v1.Svc/Read", "/test.v1.Svc/Missing"] {
            let request = http::Request::builder()
                .uri(path)
                .body(())
                .expect("request");
            let response = svc.call(request).await.expect("infallible");
            drop(response);
        }
        let t = text();
        assert!(t.contains(
            "grpc_server_handled_total{grpc_service=\"test.v1.Svc\",grpc_method=\"Read\",grpc_code=\"NotFound\"} 1\n"
        ), "{t}");
        assert!(t.contains(
            "grpc_server_handled_total{grpc_service=\"unknown\",grpc_method=\"unknown\",grpc_code=\"Unimplemented\"} 1\n"
        ), "{t}");
        assert!(t.contains(
            "grpc_server_handling_seconds_count{grpc_service=\"test.v1.Svc\",grpc_method=\"Read\"} 1\n"
        ), "{t}");
    }

    /// An empty body (`http_body` has no ready-made one without extra crates).
    fn http_body_util_empty() -> Empty {
        Empty
    }

    struct Empty;

    impl http_body::Body for Empty {
        type Data = &'static [u8];
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut TaskContext<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            Poll::Ready(None)
        }
    }
}
