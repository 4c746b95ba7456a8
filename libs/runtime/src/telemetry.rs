//! Logs plus OpenTelemetry traces: one trace follows a call through every toolgate hop.
//!
//! A service calls [`init`] once at startup instead of [`crate::logging::init`] and keeps the
//! returned [`Telemetry`] guard until it exits; [`Telemetry::shutdown`] flushes queued spans.
//!
//! # When spans are exported
//!
//! Only when the standard environment asks for it ([`TelemetryConfig::from_env`]):
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set (OTLP over gRPC,
//! for example `http://otel-collector:4317`), `OTEL_SDK_DISABLED` is not `true` and
//! `OTEL_TRACES_EXPORTER` is not `none`. The service name is `OTEL_SERVICE_NAME`, else
//! `service.name` from `OTEL_RESOURCE_ATTRIBUTES`, else the binary's own name; the other
//! `OTEL_RESOURCE_ATTRIBUTES` become resource attributes. The exporter also honours
//! `OTEL_EXPORTER_OTLP_{,TRACES_}HEADERS`, `_TIMEOUT` and `_COMPRESSION`; the SDK honours
//! `OTEL_TRACES_SAMPLER{,_ARG}` and `OTEL_BSP_*`. An `https://` endpoint is verified against
//! `OTEL_EXPORTER_OTLP_{,TRACES_}CERTIFICATE` (else the system's CAs), with
//! `_CLIENT_CERTIFICATE` / `_CLIENT_KEY` for a collector that wants mutual TLS.
//! `OTEL_EXPORTER_OTLP_{,TRACES_}PROTOCOL` is `grpc` (the default) or `http/protobuf`
//! (HTTP/1.1 to `<endpoint>/v1/traces`, or to the traces endpoint as given); `http/json`
//! stops the service with a message rather than dropping every span. Export failures are
//! logged, at most once every 30 s, with the batches and spans lost since the last line.
//! Context travels as W3C `traceparent` /
//! `tracestate` (the TraceContext propagator; baggage is not propagated).
//!
//! With exporting off no OpenTelemetry layer is installed at all: spans cost what they cost
//! with plain logging, and [`server_layer`] adds one header lookup per RPC (to forward the
//! caller's context, below).
//!
//! # Propagation
//!
//! - Servers add [`server_layer`] to `tonic::transport::Server::builder().layer(..)`: each RPC
//!   gets a `server` span named `package.Service/Method` whose parent is the caller's
//!   `traceparent` metadata.
//! - Clients call [`inject`] on outgoing request metadata, inside a [`client_span`] when the
//!   hop should show as its own span; [`traceparent`] gives the header
//!   value for a child's `TRACEPARENT` variable, and [`trace_id`] the id to store on ledger rows.
//! - Work moved to another task keeps its trace with [`in_current_trace`].
//!
//! With exporting off this process makes no spans, but it still forwards the caller's trace
//! context unchanged: [`server_layer`] remembers a valid incoming `traceparent` for the
//! duration of the RPC, and [`inject`], [`traceparent`] and [`trace_id`] return it. The next
//! hop's spans then attach to the caller's span, skipping the silent hop, and ledger rows still
//! carry the caller's trace id. Without an incoming context they return nothing.

mod grpc;
mod http;
#[cfg(feature = "testing")]
pub mod testing;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{EnvResourceDetector, ResourceDetector};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use toolgate_core::traceparent::TraceParent;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

pub use grpc::{
    GrpcTrace, GrpcTraceLayer, TracedBody, TracedFuture, client_span, record_client_status,
    server_layer,
};

use crate::logging::Format;

/// Targets never traced: the exporter's own transport would otherwise trace its exports.
const QUIET_TARGETS: &str = "h2=off,hyper=off,hyper_util=off,tonic=off,tower=off,\
                             opentelemetry=off,opentelemetry_sdk=off,opentelemetry_otlp=off";

/// How long [`Telemetry::shutdown`] and the guard's drop wait for queued spans.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Set once the OpenTelemetry layer is installed; read on the request path.
static EXPORTING: AtomicBool = AtomicBool::new(false);

tokio::task_local! {
    /// The caller's trace context while exporting is off (see the module docs).
    static INCOMING: Context;
}

/// Telemetry failures at startup.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OTLP exporter could not be built from its configuration.
    #[error("invalid OTLP trace exporter configuration ({endpoint}): {message}")]
    Exporter {
        /// The endpoint that was configured.
        endpoint: String,
        /// What the exporter rejected.
        message: String,
    },
    /// The log or trace filter does not parse.
    #[error("invalid {field} `{value}`: {message}")]
    Filter {
        /// Which filter (`log filter` or `traces filter`).
        field: &'static str,
        /// The rejected text.
        value: String,
        /// Why it was rejected.
        message: String,
    },
    /// A global `tracing` subscriber was already installed in this process.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
    /// Flushing or shutting down the exporter failed.
    #[error("cannot flush spans: {0}")]
    Flush(String),
}

/// Where spans go when exporting is on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The OTLP/gRPC endpoint, `http://host:4317` or `https://host:4317`.
    pub endpoint: String,
    /// `OTEL_EXPORTER_OTLP_{TRACES_}PROTOCOL` as given (empty: `grpc`).
    pub protocol: String,
    /// The endpoint came from the generic `OTEL_EXPORTER_OTLP_ENDPOINT`: over HTTP the
    /// signal's path (`/v1/traces`) is appended to it, as the specification says.
    pub generic_endpoint: bool,
    /// `OTEL_EXPORTER_OTLP_{TRACES_}CERTIFICATE`: the CA (PEM) an `https` collector is
    /// verified against; unset: the system's bundle.
    pub ca_file: Option<std::path::PathBuf>,
    /// `OTEL_EXPORTER_OTLP_{TRACES_}CLIENT_CERTIFICATE` / `_CLIENT_KEY`: a client
    /// certificate for a collector that requires mutual TLS.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Everything [`init_with`] needs; [`TelemetryConfig::from_env`] reads the standard variables.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// `service.name` on every exported span.
    pub service_name: String,
    /// Log line format.
    pub format: Format,
    /// Log filter in `RUST_LOG` syntax; invalid text falls back to `info` like [`crate::logging`].
    pub filter: String,
    /// The OTLP exporter, or `None` for logs only.
    pub otlp: Option<OtlpConfig>,
    /// Extra resource attributes (from `OTEL_RESOURCE_ATTRIBUTES`).
    pub resource: Vec<KeyValue>,
    /// Which spans are exported, in `RUST_LOG` syntax (default `info`). The transport crates
    /// (`h2`, `hyper`, `tonic`, `tower`) and OpenTelemetry itself are always excluded.
    pub traces_filter: String,
}

impl TelemetryConfig {
    /// Logs only: no exporter.
    pub fn new(service_name: &str, format: Format, filter: &str) -> Self {
        TelemetryConfig {
            service_name: service_name.to_owned(),
            format,
            filter: filter.to_owned(),
            otlp: None,
            resource: Vec::new(),
            traces_filter: "info".to_owned(),
        }
    }

    /// Reads the standard `OTEL_*` variables of this process (see the module docs).
    pub fn from_env(default_service_name: &str, format: Format, filter: &str) -> Self {
        let mut config = Self::from_vars(default_service_name, format, filter, |name| {
            std::env::var(name).ok()
        });
        if config.otlp.is_some() {
            // The SDK's detector handles the percent-decoding the specification asks for.
            config.resource = EnvResourceDetector::new()
                .detect()
                .iter()
                .filter(|(key, _)| key.as_str() != "service.name")
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone()))
                .collect();
        }
        config
    }

    /// [`TelemetryConfig::from_env`] over any variable lookup (tests pass a map).
    /// `OTEL_RESOURCE_ATTRIBUTES` contributes only `service.name` here.
    pub fn from_vars(
        default_service_name: &str,
        format: Format,
        filter: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut config = Self::new(default_service_name, format, filter);
        if let Some(name) = set("OTEL_SERVICE_NAME").or_else(|| {
            set("OTEL_RESOURCE_ATTRIBUTES").and_then(|attrs| {
                attrs.split(',').find_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    (key.trim() == "service.name").then(|| value.trim().to_owned())
                })
            })
        }) {
            config.service_name = name;
        }
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        // The traces-specific variable wins over the generic one, as the specification says.
        let either = |name: &str| {
            set(&format!("OTEL_EXPORTER_OTLP_TRACES_{name}"))
                .or_else(|| set(&format!("OTEL_EXPORTER_OTLP_{name}")))
        };
        if !disabled {
            let generic = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none();
            config.otlp = either("ENDPOINT").map(|endpoint| OtlpConfig {
                endpoint,
                generic_endpoint: generic,
                protocol: either("PROTOCOL").unwrap_or_default(),
                ca_file: either("CERTIFICATE").map(Into::into),
                client_cert: either("CLIENT_CERTIFICATE")
                    .zip(either("CLIENT_KEY"))
                    .map(|(c, k)| (c.into(), k.into())),
            });
        }
        config
    }

    /// Exports to `endpoint` (OTLP/gRPC).
    #[must_use]
    pub fn with_otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.otlp = Some(OtlpConfig {
            endpoint: endpoint.into(),
            ..OtlpConfig::default()
        });
        self
    }
}

/// Installs logging, and trace export when the standard `OTEL_*` environment asks for it.
/// `service_name` is the default `service.name`.
pub fn init(service_name: &str, format: Format, filter: &str) -> Result<Telemetry, Error> {
    init_with(&TelemetryConfig::from_env(service_name, format, filter))
}

/// This process's `service.instance.id`: the pod name when the downward API provides it.
fn instance_id() -> String {
    match std::env::var("POD_NAME") {
        Ok(pod) if !pod.is_empty() => pod,
        _ => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default();
            format!("{host}-{}", std::process::id())
        }
    }
}

/// Installs the global subscriber from an explicit configuration. Call it inside the Tokio
/// runtime: the OTLP exporter's connection lives there.
pub fn init_with(config: &TelemetryConfig) -> Result<Telemetry, Error> {
    let log_filter = EnvFilter::try_new(&config.filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(crate::logging::colour())
        .with_writer(std::io::stderr);
    let fmt = match config.format {
        Format::Text => fmt.boxed(),
        Format::Json => fmt.json().flatten_event(true).boxed(),
    }
    .with_filter(log_filter);

    let Some(otlp) = &config.otlp else {
        return tracing_subscriber::registry()
            .with(fmt)
            .try_init()
            .map(|()| Telemetry { provider: None })
            .map_err(|_| Error::AlreadyInstalled);
    };

    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::Exporter {
            endpoint: otlp.endpoint.clone(),
            message: "telemetry::init must run inside the Tokio runtime that drives the exporter"
                .to_owned(),
        });
    }
    let trace_filter = EnvFilter::try_new(format!("{},{QUIET_TARGETS}", config.traces_filter))
        .map_err(|e| Error::Filter {
            field: "traces filter",
            value: config.traces_filter.clone(),
            message: e.to_string(),
        })?;
    let exporter = LoggedExporter::new(exporter(otlp)?, &otlp.endpoint);
    // service.version and service.instance.id (the pod's name when the downward API sets
    // POD_NAME, else host and pid), unless OTEL_RESOURCE_ATTRIBUTES names them.
    let given = |key: &str| config.resource.iter().any(|kv| kv.key.as_str() == key);
    let mut defaults = Vec::new();
    if !given("service.version") {
        defaults.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    if !given("service.instance.id") {
        defaults.push(KeyValue::new("service.instance.id", instance_id()));
    }
    let resource = Resource::builder_empty()
        .with_attributes(config.resource.iter().cloned())
        .with_attributes(defaults)
        .with_service_name(config.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("toolgate"))
        .with_filter(trace_filter);
    if tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .is_err()
    {
        let _ = provider.shutdown();
        return Err(Error::AlreadyInstalled);
    }
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, Ordering::Release);
    tracing::info!(endpoint = %otlp.endpoint, service = %config.service_name, "exporting traces over OTLP");
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// The OTLP exporter for `otlp`: gRPC (the default) or `http/protobuf`; plaintext for
/// `http://`, rustls for `https://` (the same client TLS as every toolgate client).
fn exporter(otlp: &OtlpConfig) -> Result<opentelemetry_otlp::SpanExporter, Error> {
    let err = |message: String| Error::Exporter {
        endpoint: otlp.endpoint.clone(),
        message,
    };
    let https = otlp.endpoint.starts_with("https://");
    let tls = if https {
        Some(
            crate::transport::ClientTls::load(&crate::transport::ClientTlsConfig {
                ca_file: otlp.ca_file.clone(),
                cert_file: otlp.client_cert.as_ref().map(|c| c.0.clone()),
                key_file: otlp.client_cert.as_ref().map(|c| c.1.clone()),
            })
            .map_err(|e| err(e.0))?,
        )
    } else {
        None
    };
    match otlp.protocol.as_str() {
        "" | "grpc" => {}
        "http/protobuf" => {
            use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
            let endpoint = if otlp.generic_endpoint {
                format!("{}/v1/traces", otlp.endpoint.trim_end_matches('/'))
            } else {
                otlp.endpoint.clone()
            };
            return opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(endpoint)
                .with_http_client(http::OtlpHttpClient::new(tls, HTTP_TIMEOUT))
                .build()
                .map_err(|e| err(e.to_string()));
        }
        other => {
            // Refused rather than ignored: a collector that only speaks it would otherwise
            // receive nothing, silently.
            return Err(err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported; use grpc (the default) \
                 or http/protobuf"
            )));
        }
    }
    let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
    let builder = if let Some(tls) = &tls {
        use opentelemetry_otlp::WithTonicConfig;
        let channel = crate::transport::Dial::new(&otlp.endpoint, None, Some(tls))
            .map_err(|e| err(e.0))?
            .connect_lazy();
        builder.with_channel(channel)
    } else {
        builder.with_endpoint(otlp.endpoint.clone())
    };
    builder.build().map_err(|e| err(e.to_string()))
}

/// Longest OTLP/HTTP request, connection included.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// How often export failures are logged at most.
const EXPORT_ERROR_EVERY: Duration = Duration::from_secs(30);

/// An exporter whose failures are logged, at most once per [`EXPORT_ERROR_EVERY`] with the
/// count of batches and spans lost since the last line, instead of vanishing.
#[derive(Debug)]
struct LoggedExporter<E> {
    inner: E,
    endpoint: String,
    /// (when the last line was logged, batches and spans lost since).
    failures: std::sync::Mutex<(Option<std::time::Instant>, u64, u64)>,
}

impl<E> LoggedExporter<E> {
    fn new(inner: E, endpoint: &str) -> Self {
        LoggedExporter {
            inner,
            endpoint: endpoint.to_owned(),
            failures: std::sync::Mutex::new((None, 0, 0)),
        }
    }

    fn failed(&self, spans: usize, error: &dyn std::fmt::Display) {
        let mut f = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.1 += 1;
        f.2 += spans as u64;
        if f.0.is_none_or(|t| t.elapsed() >= EXPORT_ERROR_EVERY) {
            // Not through `tracing` spans: this runs inside the exporter, whose own spans
            // are filtered out anyway; a log event is what operators see.
            tracing::warn!(endpoint = %self.endpoint, %error, batches = f.1, spans = f.2, "trace export failed; spans dropped");
            *f = (Some(std::time::Instant::now()), 0, 0);
        }
    }
}

impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for LoggedExporter<E>
{
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.failed(spans, e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Keeps the exporter alive; dropping it (or [`Telemetry::shutdown`]) flushes queued spans.
/// On a current-thread runtime prefer `shutdown().await`: a drop there blocks the only thread
/// that could drive the export, so queued spans wait out the five-second timeout and are lost.
#[must_use = "dropping the guard shuts the trace exporter down"]
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are being exported.
    pub fn is_exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports every span ended so far.
    pub async fn flush(&self) -> Result<(), Error> {
        let Some(provider) = self.provider.clone() else {
            return Ok(());
        };
        // The batch processor blocks its caller until the export is done; keep that off the
        // runtime's worker threads, which drive the exporter's connection.
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .map_err(|e| Error::Flush(e.to_string()))?
            .map_err(|e| Error::Flush(e.to_string()))
    }

    /// Flushes queued spans (waiting at most five seconds) and stops the exporter.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
            .await
            .map_err(|e| Error::Flush(e.to_string()))?
            .map_err(|e| Error::Flush(e.to_string()))
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        let flush = move || {
            let _ = provider.shutdown_with_timeout(FLUSH_TIMEOUT);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(flush);
            }
            _ => flush(),
        }
    }
}

/// Whether this process exports spans (an OpenTelemetry layer is installed).
pub fn is_exporting() -> bool {
    EXPORTING.load(Ordering::Acquire)
}

/// The trace context outgoing calls continue: the current span's when exporting, else the
/// caller's context remembered by [`server_layer`], else none.
fn current_context() -> Option<Context> {
    if is_exporting() {
        let cx = tracing::Span::current().context();
        if cx.span().span_context().is_valid() {
            return Some(cx);
        }
    }
    INCOMING.try_with(Context::clone).ok()
}

/// Writes the current trace context into outgoing gRPC metadata (`traceparent`, `tracestate`).
/// Does nothing when there is no context.
pub fn inject(metadata: &mut MetadataMap) {
    if let Some(cx) = current_context() {
        TraceContextPropagator::new().inject_context(&cx, &mut MetadataInjector(metadata));
    }
}

/// The W3C `traceparent` value of the current context, for a child's `TRACEPARENT` variable.
pub fn traceparent() -> Option<String> {
    let cx = current_context()?;
    let mut headers = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut headers);
    headers.remove("traceparent")
}

/// The current trace id as 32 lowercase hex digits, for ledger rows.
pub fn trace_id() -> Option<String> {
    let cx = current_context()?;
    let span = cx.span();
    let context = span.span_context();
    context.is_valid().then(|| context.trace_id().to_string())
}

/// The trace id inside a W3C `traceparent` value, if the value is valid.
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    TraceParent::parse(traceparent)
        .ok()
        .map(|t| t.trace_id_hex())
}

/// Makes the caller whose W3C `traceparent` is given (an MCP request's
/// `params._meta.traceparent`) the parent of `span`. Does nothing for a missing or invalid
/// value, or when no spans are exported.
pub fn set_remote_parent(span: &tracing::Span, traceparent: &str) {
    if let Some(cx) = remote_context(Some(traceparent), None) {
        let _ = span.set_parent(cx);
    }
}

/// Runs `future` (typically a spawned task) inside the current span and trace context.
pub fn in_current_trace<F: Future>(future: F) -> impl Future<Output = F::Output> {
    let incoming = INCOMING.try_with(Context::clone).ok();
    let future = future.in_current_span();
    async move {
        match incoming {
            Some(cx) => INCOMING.scope(cx, future).await,
            None => future.await,
        }
    }
}

/// Parses W3C trace context from `carrier`; an empty context when absent or invalid.
fn extract(carrier: &dyn Extractor) -> Context {
    remote_context(carrier.get("traceparent"), carrier.get("tracestate")).unwrap_or_default()
}

/// The caller's context from its `traceparent` (read by the workspace's one parser,
/// [`TraceParent::parse`]) and `tracestate`; `None` without a valid `traceparent`. An
/// invalid `tracestate` is dropped, as the TraceContext propagator drops it.
fn remote_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Context> {
    let tp = TraceParent::parse(traceparent?).ok()?;
    let state = tracestate
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let span = SpanContext::new(
        TraceId::from_bytes(tp.trace_id),
        SpanId::from_bytes(tp.parent_id),
        TraceFlags::new(tp.flags & TraceParent::SAMPLED),
        true,
        state,
    );
    Some(Context::new().with_remote_span_context(span))
}

/// Writes propagation fields into gRPC metadata, skipping values metadata cannot carry.
struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[derive(Debug)]
    struct Refused;

    impl opentelemetry_sdk::trace::SpanExporter for Refused {
        async fn export(
            &self,
            _: Vec<opentelemetry_sdk::trace::SpanData>,
        ) -> opentelemetry_sdk::error::OTelSdkResult {
            Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "collector refused".into(),
            ))
        }
    }

    #[tokio::test]
    async fn export_failures_are_logged_once_per_window_with_what_was_lost() {
        use opentelemetry_sdk::trace::SpanExporter as _;
        let e = LoggedExporter::new(Refused, "https://collector:4317");
        for _ in 0..3 {
            assert!(
                e.export(Vec::new()).await.is_err(),
                "the failure still reaches the SDK"
            );
        }
        // The first failure was logged (and reset the counts); the next two are counted
        // for the next line.
        let f = e.failures.lock().unwrap();
        assert!(f.0.is_some());
        assert_eq!((f.1, f.2), (2, 0));
    }

    #[test]
    fn protocol_and_certificates_come_from_the_traces_variables_first() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/c.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/c.key"),
        ]);
        let o = c.otlp.unwrap();
        assert_eq!(o.protocol, "grpc");
        assert_eq!(o.ca_file.as_deref(), Some(std::path::Path::new("/ca.pem")));
        assert!(o.client_cert.is_some());
    }

    fn config(pairs: &[(&str, &str)]) -> TelemetryConfig {
        TelemetryConfig::from_vars("toolgate-policy", Format::Text, "info", vars(pairs))
    }

    #[test]
    fn no_endpoint_means_no_exporter() {
        let c = config(&[("OTEL_SERVICE_NAME", "policy-a")]);
        assert_eq!(c.otlp, None);
        assert_eq!(c.service_name, "policy-a");
    }

    #[test]
    fn traces_endpoint_wins_over_the_generic_one() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
        ]);
        assert_eq!(
            c.otlp.map(|o| o.endpoint).as_deref(),
            Some("http://traces:4317")
        );
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4317")]);
        assert_eq!(
            c.otlp.map(|o| o.endpoint).as_deref(),
            Some("http://generic:4317")
        );
    }

    #[test]
    fn sdk_disabled_or_exporter_none_turns_export_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317");
        assert_eq!(
            config(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]).otlp,
            None
        );
        assert_eq!(
            config(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).otlp,
            None
        );
        assert!(
            config(&[endpoint, ("OTEL_SDK_DISABLED", "false")])
                .otlp
                .is_some()
        );
        assert!(
            config(&[endpoint, ("OTEL_TRACES_EXPORTER", "otlp")])
                .otlp
                .is_some()
        );
    }

    #[test]
    fn service_name_precedence() {
        assert_eq!(config(&[]).service_name, "toolgate-policy");
        let attrs = (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod,service.name=p2",
        );
        assert_eq!(config(&[attrs]).service_name, "p2");
        assert_eq!(
            config(&[attrs, ("OTEL_SERVICE_NAME", "p3")]).service_name,
            "p3"
        );
    }

    #[test]
    fn trace_id_of_parses_only_valid_traceparents() {
        assert_eq!(
            trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            trace_id_of("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(trace_id_of("garbage"), None);
    }

    #[test]
    fn nothing_to_propagate_outside_a_trace() {
        assert_eq!(traceparent(), None);
        assert_eq!(trace_id(), None);
        let mut md = MetadataMap::new();
        inject(&mut md);
        assert!(md.is_empty());
    }
}
