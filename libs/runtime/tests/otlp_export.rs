//! Exporting on: spans reach a real OTLP/gRPC receiver, parented by the caller's
//! `traceparent`, and a handler's outgoing context is its RPC span.
//! (One test per binary: the tracing subscriber is global to the process.)

mod support;

use std::time::Duration;

use toolgate_runtime::logging::Format;
use toolgate_runtime::telemetry::testing::{OtlpReceiver, ReceivedSpan};
use toolgate_runtime::telemetry::{self, TelemetryConfig};
use tracing::Instrument;

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";
const SERVER_KIND: i32 = 2;
const CLIENT_KIND: i32 = 3;

fn one<'a>(
    spans: &'a [ReceivedSpan],
    what: &str,
    pred: impl Fn(&ReceivedSpan) -> bool,
) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|s| pred(s)).collect();
    assert_eq!(found.len(), 1, "expected one {what} span in {spans:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_continue_the_callers_trace_and_reach_the_receiver() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let config = TelemetryConfig::new("toolgate-test", Format::Text, "warn")
        .with_otlp_endpoint(receiver.endpoint());
    let telemetry = telemetry::init_with(&config).expect("telemetry");
    assert!(telemetry.is_exporting());
    assert!(telemetry::is_exporting());

    let server = support::Server::start().await;
    let mut client = server.client().await;

    // 1. A caller that sent a traceparent: the RPC span is its child.
    let incoming = format!("00-{TRACE}-{PARENT}-01");
    client
        .check(support::check("", Some(&incoming)))
        .await
        .expect("serving");
    // 2. The same, answered with an error status before any body.
    let status = client
        .check(support::check("no.such.Service", Some(&incoming)))
        .await
        .expect_err("unknown service");
    assert_eq!(status.code(), tonic::Code::NotFound);
    // 3. A caller span of our own, propagated with `inject`.
    let caller = telemetry::client_span("grpc.health.v1.Health/Check");
    let (caller_traceparent, caller_trace_id) = async {
        let mut request = support::check("", None);
        telemetry::inject(request.metadata_mut());
        let sent = request
            .metadata()
            .get("traceparent")
            .map(|v| v.to_str().expect("ascii").to_owned());
        assert_eq!(sent, telemetry::traceparent());
        client.check(request).await.expect("serving");
        (telemetry::traceparent(), telemetry::trace_id())
    }
    .instrument(caller)
    .await;
    // 4. No caller context: a new root trace.
    client
        .check(support::check("", None))
        .await
        .expect("serving");

    drop(client);
    let seen = server.seen();
    server.stop().await;
    telemetry.flush().await.expect("flush");
    let spans = receiver
        .wait_for(|spans| spans.len() >= 5, Duration::from_secs(10))
        .await
        .unwrap_or_else(|spans| panic!("expected 5 spans, got {spans:#?}"));
    assert_eq!(spans.len(), 5, "{spans:#?}");

    let rpcs: Vec<_> = spans.iter().filter(|s| s.kind == SERVER_KIND).collect();
    assert_eq!(rpcs.len(), 4, "{spans:#?}");
    for rpc in &rpcs {
        assert_eq!(rpc.service_name, "toolgate-test");
        assert_eq!(rpc.name, "grpc.health.v1.Health/Check");
        assert_eq!(rpc.attribute("rpc.system"), Some("grpc"));
        assert_eq!(rpc.attribute("rpc.service"), Some("grpc.health.v1.Health"));
        assert_eq!(rpc.attribute("rpc.method"), Some("Check"));
    }

    // 1 and 2: children of the incoming traceparent, status codes recorded.
    let from_incoming: Vec<_> = rpcs.iter().filter(|s| s.trace_id == TRACE).collect();
    assert_eq!(from_incoming.len(), 2, "{spans:#?}");
    for rpc in &from_incoming {
        assert_eq!(rpc.parent_span_id.as_deref(), Some(PARENT));
    }
    let ok = one(&spans, "OK", |s| {
        s.trace_id == TRACE && s.attribute("rpc.grpc.status_code") == Some("0")
    });
    let not_found = one(&spans, "NOT_FOUND", |s| {
        s.trace_id == TRACE && s.attribute("rpc.grpc.status_code") == Some("5")
    });
    assert_ne!(ok.span_id, not_found.span_id);

    // The handler's outgoing context is its RPC span, in a spawned task too.
    let handler_view = format!("00-{TRACE}-{}-01", ok.span_id);
    assert_eq!(seen[0].traceparent.as_deref(), Some(handler_view.as_str()));
    assert_eq!(
        seen[0].spawned_traceparent.as_deref(),
        Some(handler_view.as_str())
    );
    assert_eq!(seen[0].trace_id.as_deref(), Some(TRACE));

    // 3: the caller span is a root, the RPC its child, and inject sent exactly that context.
    let caller = one(&spans, "caller", |s| s.kind == CLIENT_KIND);
    assert_eq!(caller.parent_span_id, None);
    assert_eq!(caller.name, "grpc.health.v1.Health/Check");
    assert_eq!(caller.attribute("rpc.system"), Some("grpc"));
    assert_eq!(caller.attribute("rpc.method"), Some("Check"));
    assert_eq!(caller_trace_id.as_deref(), Some(caller.trace_id.as_str()));
    assert_eq!(
        caller_traceparent,
        Some(format!("00-{}-{}-01", caller.trace_id, caller.span_id))
    );
    let child = one(&spans, "caller's RPC", |s| {
        s.parent_span_id.as_deref() == Some(caller.span_id.as_str())
    });
    assert_eq!(child.trace_id, caller.trace_id);
    assert_eq!(child.kind, SERVER_KIND);

    // 4: a root RPC span in a trace of its own.
    let root = one(&spans, "root RPC", |s| {
        s.kind == SERVER_KIND && s.parent_span_id.is_none()
    });
    assert_ne!(root.trace_id, TRACE);
    assert_ne!(root.trace_id, caller.trace_id);

    telemetry.shutdown().await.expect("shutdown");
}
