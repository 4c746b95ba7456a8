//! Exporting off: no OpenTelemetry layer, yet a caller's trace context passes through unchanged.
//! (One test per binary: the tracing subscriber is global to the process.)

mod support;

use std::time::Duration;

use toolgate_runtime::logging::Format;
use toolgate_runtime::telemetry::testing::OtlpReceiver;
use toolgate_runtime::telemetry::{self, TelemetryConfig};

const INCOMING: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exporter_the_callers_context_is_forwarded_as_is() {
    // An endpoint is configured, but the standard switch turns the SDK off.
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let endpoint = receiver.endpoint();
    let config =
        TelemetryConfig::from_vars("toolgate-test", Format::Text, "warn", |name| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(endpoint.clone()),
            "OTEL_SDK_DISABLED" => Some("true".to_owned()),
            _ => None,
        });
    assert_eq!(config.otlp, None);
    let telemetry = telemetry::init_with(&config).expect("telemetry");
    assert!(!telemetry.is_exporting());
    assert!(!telemetry::is_exporting());

    // Outside any RPC there is nothing to propagate.
    assert_eq!(telemetry::traceparent(), None);
    assert_eq!(telemetry::trace_id(), None);
    let mut metadata = tonic::metadata::MetadataMap::new();
    telemetry::inject(&mut metadata);
    assert!(metadata.is_empty());

    let server = support::Server::start().await;
    let mut client = server.client().await;
    client
        .check(support::check("", Some(INCOMING)))
        .await
        .expect("serving");
    client
        .check(support::check("", None))
        .await
        .expect("serving");
    client
        .check(support::check(
            "",
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        ))
        .await
        .expect("serving");
    drop(client);
    let seen = server.seen();
    server.stop().await;

    assert_eq!(seen.len(), 3);
    // The caller's context, unchanged, in the handler and in a task it spawned.
    assert_eq!(seen[0].traceparent.as_deref(), Some(INCOMING));
    assert_eq!(seen[0].spawned_traceparent.as_deref(), Some(INCOMING));
    assert_eq!(
        seen[0].trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736")
    );
    // No caller context, or an invalid one: nothing.
    for without in &seen[1..] {
        assert_eq!(without.traceparent, None);
        assert_eq!(without.spawned_traceparent, None);
        assert_eq!(without.trace_id, None);
    }

    // Nothing was exported: a flush is a no-op and the receiver stays empty.
    telemetry.flush().await.expect("flush");
    assert_eq!(
        receiver
            .wait_for(|spans| !spans.is_empty(), Duration::from_millis(200))
            .await,
        Err(Vec::new())
    );
}
