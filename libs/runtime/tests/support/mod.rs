//! A real gRPC server for telemetry tests: the standard health service behind
//! `telemetry::server_layer()`, with a probe recording the trace context its handler sees.

#![allow(dead_code)] // each test binary uses a different part

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use toolgate_runtime::shutdown::{self, Trigger};
use toolgate_runtime::telemetry;

/// What a handler saw: `traceparent()` / `trace_id()` in the handler and in a task it spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub traceparent: Option<String>,
    pub trace_id: Option<String>,
    pub spawned_traceparent: Option<String>,
}

/// Wraps a service: records what its handler sees before delegating.
#[derive(Clone)]
struct Probe<S> {
    inner: S,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl<S: NamedService> NamedService for Probe<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for Probe<S>
where
    S: tower::Service<http::Request<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The handler runs when the future is polled, as tonic's generated handlers do.
        let mut inner = self.inner.clone();
        let seen = Arc::clone(&self.seen);
        Box::pin(async move {
            let spawned_traceparent = tokio::spawn(telemetry::in_current_trace(async {
                telemetry::traceparent()
            }))
            .await
            .expect("probe task");
            seen.lock().expect("probe lock").push(Seen {
                traceparent: telemetry::traceparent(),
                trace_id: telemetry::trace_id(),
                spawned_traceparent,
            });
            inner.call(request).await
        })
    }
}

/// A running health server with the trace layer.
pub(crate) struct Server {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    trigger: Trigger,
    task: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Server {
    /// Serves on `127.0.0.1:0`.
    pub(crate) async fn start() -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (_reporter, health) = toolgate_runtime::grpc::health();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let probe = Probe {
            inner: health,
            seen: Arc::clone(&seen),
        };
        let (trigger, stop) = shutdown::channel();
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .layer(telemetry::server_layer())
                .add_service(probe)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.wait(),
                ),
        );
        Server {
            addr,
            seen,
            trigger,
            task,
        }
    }

    /// A health client connected to the server.
    pub(crate) async fn client(&self) -> HealthClient<Channel> {
        let channel = Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        HealthClient::new(channel)
    }

    /// What the handler saw, one entry per call, in call order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("probe lock").clone()
    }

    /// Stops the server and waits until every connection is closed, so every RPC span has ended.
    pub(crate) async fn stop(self) {
        self.trigger.trigger();
        self.task.await.expect("server task").expect("server");
    }
}

/// A health check request for `service` carrying `traceparent`, if any.
pub(crate) fn check(
    service: &str,
    traceparent: Option<&str>,
) -> tonic::Request<HealthCheckRequest> {
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    if let Some(value) = traceparent {
        request
            .metadata_mut()
            .insert("traceparent", value.parse().expect("ascii"));
    }
    request
}
