//! An OTLP/gRPC trace receiver for tests: the real OTLP `TraceService` served by tonic on a
//! loopback port, keeping every span it is sent. Enabled by the `testing` feature.
//!
//! ```no_run
//! # async fn example() -> std::io::Result<()> {
//! use std::time::Duration;
//! use toolgate_runtime::telemetry::testing::OtlpReceiver;
//!
//! let receiver = OtlpReceiver::start().await?;
//! // Start a service with OTEL_EXPORTER_OTLP_ENDPOINT=<receiver.endpoint()>, call it, stop it.
//! let spans = receiver
//!     .wait_for(|spans| spans.len() >= 2, Duration::from_secs(10))
//!     .await
//!     .unwrap_or_else(|got| panic!("expected 2 spans, got {got:#?}"));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use tokio::sync::{oneshot, watch};

/// One span as the receiver got it, ids in lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedSpan {
    /// `service.name` of the exporting process.
    pub service_name: String,
    /// The span name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The OTLP span kind (2 = server, 3 = client).
    pub kind: i32,
    /// String renderings of the span's attributes.
    pub attributes: HashMap<String, String>,
    /// String renderings of the exporting process's resource attributes.
    pub resource: HashMap<String, String>,
    /// How long the span lasted (its end minus its start).
    pub duration: std::time::Duration,
}

impl ReceivedSpan {
    /// An attribute's value, rendered as a string.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    tls: bool,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    changed: watch::Receiver<usize>,
    _stop: oneshot::Sender<()>,
}

impl OtlpReceiver {
    /// Serves on `127.0.0.1:0`.
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(None).await
    }

    /// Serves on `127.0.0.1:0` over TLS with this certificate and key (PEM); the endpoint
    /// names `localhost`.
    pub async fn start_tls(cert: &std::path::Path, key: &std::path::Path) -> std::io::Result<Self> {
        let mut config = crate::transport::TransportConfig::default();
        config.tls.cert_file = Some(cert.to_owned());
        config.tls.key_file = Some(key.to_owned());
        Self::start_with(Some(config)).await
    }

    async fn start_with(
        transport: Option<crate::transport::TransportConfig>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let (count_tx, changed) = watch::channel(0);
        let (stop, stopped) = oneshot::channel::<()>();
        let service = Collector {
            spans: Arc::clone(&spans),
            count: count_tx,
        };
        let router =
            tonic::transport::Server::builder().add_service(TraceServiceServer::new(service));
        let stopped = async {
            let _ = stopped.await;
        };
        let tls = transport.is_some();
        match transport {
            Some(config) => {
                let t = crate::transport::Transport::new(&config, addr)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                tokio::spawn(router.serve_with_incoming_shutdown(t.incoming(listener), stopped));
            }
            None => {
                tokio::spawn(router.serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stopped,
                ));
            }
        }
        Ok(OtlpReceiver {
            addr,
            tls,
            spans,
            changed,
            _stop: stop,
        })
    }

    /// Serves OTLP/HTTP (`POST /v1/traces`, protobuf) on `127.0.0.1:0`; its endpoint is the
    /// base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub async fn start_http() -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let (count_tx, changed) = watch::channel(0);
        let (stop, stopped) = oneshot::channel::<()>();
        let collector = Arc::new(Collector {
            spans: Arc::clone(&spans),
            count: count_tx,
        });
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(http_export))
            .with_state(collector);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(OtlpReceiver {
            addr,
            tls: false,
            spans,
            changed,
            _stop: stop,
        })
    }

    /// The endpoint to export to, `http://127.0.0.1:<port>` (`https://localhost:<port>`
    /// over TLS).
    pub fn endpoint(&self) -> String {
        if self.tls {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until `done` holds for the received spans; on timeout, returns what arrived.
    pub async fn wait_for(
        &self,
        done: impl Fn(&[ReceivedSpan]) -> bool,
        timeout: Duration,
    ) -> Result<Vec<ReceivedSpan>, Vec<ReceivedSpan>> {
        let mut changed = self.changed.clone();
        let wait = async {
            loop {
                let spans = self.spans();
                if done(&spans) {
                    return spans;
                }
                if changed.changed().await.is_err() {
                    return spans;
                }
            }
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(spans) if done(&spans) => Ok(spans),
            _ => Err(self.spans()),
        }
    }
}

/// The OTLP `TraceService` implementation.
struct Collector {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    count: watch::Sender<usize>,
}

impl Collector {
    /// Keeps the spans of one export request.
    fn record(&self, request: ExportTraceServiceRequest) -> Result<(), String> {
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| attributes(&r.attributes))
                .unwrap_or_default();
            let service_name = resource.get("service.name").cloned().unwrap_or_default();
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                received.push(ReceivedSpan {
                    service_name: service_name.clone(),
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty())
                        .then(|| hex::encode(&span.parent_span_id)),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    resource: resource.clone(),
                    duration: std::time::Duration::from_nanos(
                        span.end_time_unix_nano
                            .saturating_sub(span.start_time_unix_nano),
                    ),
                });
            }
        }
        let total = {
            let mut spans = self
                .spans
                .lock()
                .map_err(|_| "receiver state poisoned".to_owned())?;
            spans.extend(received);
            spans.len()
        };
        self.count.send_replace(total);
        Ok(())
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(request.into_inner())
            .map_err(tonic::Status::internal)?;
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// `POST /v1/traces` of OTLP/HTTP with a protobuf body.
async fn http_export(
    axum::extract::State(collector): axum::extract::State<Arc<Collector>>,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, Vec<u8>) {
    use prost::Message;
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => {
            return (
                axum::http::StatusCode::BAD_REQUEST,
                e.to_string().into_bytes(),
            );
        }
    };
    match collector.record(request) {
        Ok(()) => (
            axum::http::StatusCode::OK,
            ExportTraceServiceResponse {
                partial_success: None,
            }
            .encode_to_vec(),
        ),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            e.into_bytes(),
        ),
    }
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(render).unwrap_or_default(),
            )
        })
        .collect()
}

fn render(value: &AnyValue) -> String {
    match &value.value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
