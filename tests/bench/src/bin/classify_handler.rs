//! Where a `Classify` round trip spends its time on the server, without the transport: the
//! policy engine alone, the request digest alone, the whole `PolicyService.Classify` handler
//! called in-process (wire parsing, engine, digest, explanation building), and the protobuf
//! encoding of its answer, each interleaved with the in-process health `Check` handler (what
//! the gRPC echo runs on the server).
//!
//! A diagnostic for the brief's goal "Classify over gRPC ≤ echo + 10 µs at p50": the
//! round-trip difference measured by `--bin grpc` cannot be smaller than what the handler adds
//! here, which is printed against the same 10 µs.
//!
//! `cargo run --release -p toolgate-bench --bin classify_handler`

use std::hint::black_box;

use prost::Message;
use tonic::Request;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_server::Health;
use toolgate_bench::{
    Goal, Samples, heading, interleave_async, print_side, report_ratio, sample_count,
};
use toolgate_contracts::common::v1::ToolKind;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_policy_engine::{CallContext, ToolCall, request_digest};
use toolgate_runtime::auth::{Principal, Role};

const SCRIPT: &str = "git status && cargo test -p foo 2>&1 | tail -n 20";

fn main() {
    let n = sample_count(20_000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    rt.block_on(async {
        let core = toolgate_bench::sqlite_policy_core(dir.path()).await;
        let policy = core.policy();
        let adapter = toolgate_policy::PolicyAdapter::new(core);
        let health = tonic_health::server::HealthService::from_health_reporter(
            tonic_health::server::HealthReporter::new(),
        );

        let call = ToolCall::script(SCRIPT);
        let ctx = CallContext {
            session_id: "bench".into(),
            principal: "bench-agent".into(),
            ..Default::default()
        };
        let wire_req = pb::ClassifyRequest {
            call: Some(pb::ToolCall {
                tool: ToolKind::ProcessRun as i32,
                script: Some(SCRIPT.into()),
                ..Default::default()
            }),
            session_id: "bench".into(),
            ..Default::default()
        };
        let request = || {
            let mut r = Request::new(wire_req.clone());
            r.extensions_mut().insert(Principal {
                name: "bench-agent".into(),
                role: Role::Agent,
            });
            r
        };
        let echo = || async {
            black_box(
                health
                    .check(Request::new(HealthCheckRequest {
                        service: String::new(),
                    }))
                    .await
                    .expect("health check"),
            );
        };

        heading("engine classify alone vs in-process echo handler");
        let (e, s) = interleave_async(n, 500, echo, || async {
            black_box(policy.classify(&call, &ctx));
        })
        .await;
        print_side("health Check handler (echo)", &e);
        print_side("Policy::classify", &s);

        heading("request digest alone vs in-process echo handler");
        let (e, s) = interleave_async(n, 500, echo, || async {
            black_box(request_digest(
                &call,
                "bench",
                "bench-agent",
                policy.version(),
            ));
        })
        .await;
        print_side("health Check handler (echo)", &e);
        print_side("request_digest", &s);

        heading("whole Classify handler in-process vs in-process echo handler");
        let (e, s) = interleave_async(n, 500, echo, || async {
            black_box(adapter.classify(request()).await.expect("classify"));
        })
        .await;
        report_added(
            "PolicyService::classify handler",
            "classify_handler",
            &e,
            &s,
        );

        // The same handler with a script it has never seen (a different package each time):
        // the bash parse and the analysis run on every call instead of coming from the memo,
        // as in `--bin grpc`'s first-seen scenario.
        heading("whole Classify handler, first-seen script, vs in-process echo handler");
        let seq = std::cell::Cell::new(0usize);
        let (e, s) = interleave_async(n, 500, echo, || {
            let i = seq.replace(seq.get() + 1);
            let mut r = request();
            if let Some(call) = r.get_mut().call.as_mut() {
                call.script = Some(format!(
                    "git status && cargo test -p foo{i} 2>&1 | tail -n 20"
                ));
            }
            let adapter = &adapter;
            async move {
                black_box(adapter.classify(r).await.expect("classify"));
            }
        })
        .await;
        report_added(
            "PolicyService::classify, first-seen",
            "classify_handler_first_seen",
            &e,
            &s,
        );

        let answer = adapter
            .classify(request())
            .await
            .expect("classify")
            .into_inner();
        heading("protobuf encoding of the answer");
        println!(
            "  ClassifyResponse is {} bytes encoded (the echo answer is {} bytes)",
            answer.encoded_len(),
            tonic_health::pb::HealthCheckResponse { status: 1 }.encoded_len()
        );
        let (e, s) = interleave_async(
            n,
            500,
            || async {
                black_box(wire_req.encode_to_vec());
            },
            || async {
                black_box(answer.encode_to_vec());
            },
        )
        .await;
        print_side("encode ClassifyRequest", &e);
        print_side("encode ClassifyResponse", &s);
    });
}

/// Prints the echo and the handler sides, and what the handler adds at p50 against the brief's
/// goal for Classify over gRPC (the echo + 10 µs): what the handler adds in process is a lower
/// bound of what the round trip adds.
fn report_added(label: &str, ratio: &str, echo: &Samples, handler: &Samples) {
    print_side("health Check handler (echo)", echo);
    print_side(label, handler);
    let added = handler.p50().saturating_sub(echo.p50());
    report_ratio(
        &format!("{ratio}_added_us_p50"),
        added.as_secs_f64() * 1e6,
        Goal::AtMost(10.0),
    );
}
