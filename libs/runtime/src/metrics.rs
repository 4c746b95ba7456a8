//! Prometheus metrics: typed metric sets per service and a `/metrics` endpoint on its own port.
//!
//! A service builds a [`Registry`] with [`registry`], registers its set ([`PolicyMetrics`],
//! [`ExecutorMetrics`], or both in `toolgate up`) and hands the registry to [`serve`]. The
//! endpoint speaks the OpenMetrics text format, which Prometheus scrapes natively.
//!
//! # Metrics
//!
//! Labels hold closed sets only (tool kinds, tiers, statuses, reasons, gRPC codes) plus the
//! policy's own rule ids; never paths, call ids or principals.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `toolgate_policy_decisions_total` | counter | `tool`, `tier`, `rule` | Authorize decisions by tool kind, tier (`auto`/`ask`/`deny`) and deciding rule (`default` when none) |
//! | `toolgate_policy_approvals_pending` | gauge | | approvals waiting for a human |
//! | `toolgate_policy_approvals_decided_total` | counter | `verdict` | approvals decided (`approved`, `denied`, `cancelled`, `expired`) |
//! | `toolgate_build_info` | gauge | `version` | always 1; the version of the running binary |
//! | `toolgate_policy_approval_decision_duration_seconds` | histogram | | time from an approval's creation to its decision |
//! | `toolgate_policy_authorize_duration_seconds` | histogram | | Authorize handling time, ledger write included |
//! | `toolgate_policy_ledger_write_duration_seconds` | histogram | | one durable ledger write |
//! | `toolgate_policy_ledger_write_errors_total` | counter | | ledger writes that failed |
//! | `toolgate_executor_runs_total` | counter | `status` | finished process runs by final status |
//! | `toolgate_executor_run_duration_seconds` | histogram | | process run wall time, spawn to exit |
//! | `toolgate_executor_runs_in_flight` | gauge | | process runs currently executing |
//! | `toolgate_executor_output_bytes_total` | counter | `stream` | child output bytes read (`stdout`/`stderr`), capped or not |
//! | `toolgate_executor_output_truncations_total` | counter | `stream` | runs whose stream hit its byte cap |
//! | `toolgate_executor_rejections_total` | counter | `reason` | calls refused before running, by `ErrorReason` (`POLICY_DENIED`, `APPROVAL_REQUIRED`, ...) |
//! | `toolgate_executor_fs_ops_total` | counter | `op`, `code` | filesystem operations by operation and gRPC status code |
//! | `toolgate_executor_authorize_duration_seconds` | histogram | | Authorize round trip from the executor to the policy service |
//! | `toolgate_executor_approval_wait_duration_seconds` | histogram | | time a call spent waiting for a human decision |
//! | `toolgate_executor_integrity_violations_total` | counter | `change` | protected paths a run changed that the after-run audit found (`created`, `modified`, `removed`), and audits that could not finish (`audit_failed`) |
//! | `toolgate_executor_admission_queue_depth` | gauge | | runs waiting in the admission queue for a slot and room in the memory budget |
//! | `toolgate_executor_admission_wait_duration_seconds` | histogram | | time a run spent in the admission queue, admitted or not |
//! | `toolgate_executor_admission_refusals_total` | counter | `reason`, `limit` | runs refused `BUSY` or `TOO_LARGE` by admission: `reason` `queue_full`, `wait_expired`, `too_large`, `profile_grew`; `limit` what held them back (`slots`, `memory`, `session_share`, `principal_share`, `reserve`) |
//! | `toolgate_executor_admission_reserved_bytes` | gauge | | memory limits plus tmpfs sizes of the runs admitted now, against the run memory budget |
//! | `toolgate_executor_sandbox_profile_available` | gauge | `profile` | 1 when the profile is enforceable and passed the startup self-test, else 0 |
//!
//! Per RPC, with [`server_layer`] on a tonic server: `grpc_server_handled_total{grpc_service,
//! grpc_method, grpc_code}` and `grpc_server_handling_seconds{grpc_service, grpc_method}`
//! (the grpc-ecosystem names and code spellings, unprefixed; see the `grpc` module).
//!
//! Per tool call, in the OpenTelemetry GenAI and MCP names (unprefixed; see [`semconv`]):
//! `gen_ai_execute_tool_duration_seconds{gen_ai_operation_name, gen_ai_tool_name, error_type}`
//! from the executor and `mcp_server_operation_duration_seconds{mcp_method_name,
//! gen_ai_tool_name, error_type}` from the MCP server.
//!
//! Every duration is a histogram named `..._duration_seconds`. Besides these, the endpoint
//! serves the standard process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), read from `/proc/self` at each scrape.
//!
//! # Formats
//!
//! A scrape gets OpenMetrics text 1.0.0 unless its `Accept` header asks for the classic
//! Prometheus text format (`text/plain`, version 0.0.4) without offering OpenMetrics; then
//! it gets that, with each counter's `# HELP` and `# TYPE` under its `_total` sample name
//! as that format (and `promtool check metrics`) requires.
//!
//! Histogram buckets: request paths 50 µs to ~1.6 s (`authorize`, `ledger_write`), runs 1 ms to
//! ~25 min, human waits 0.1 s to ~41 h.

mod grpc;
pub mod semconv;
mod server;

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

pub use grpc::{GrpcMetrics, GrpcMetricsLayer, MeteredBody, MeteredFuture, server_layer};
pub use prometheus_client::registry::Registry;
pub use server::{CONTENT_TYPE, TEXT_CONTENT_TYPE, serve};

/// A registry whose metric names start with `toolgate_`, holding `toolgate_build_info`.
pub fn registry() -> Registry {
    let mut registry = Registry::with_prefix("toolgate");
    let build_info = Family::<BuildLabels, Gauge>::default();
    build_info
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register(
        "build_info",
        "The running toolgate build; always 1",
        build_info,
    );
    registry
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Buckets for latencies on the request path: 50 µs doubling to ~1.6 s.
fn request_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

/// Buckets for process runs: 1 ms, ×2.5 each, to ~25 min.
fn run_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 16))
}

/// Buckets for human decisions: 0.1 s, ×2.5 each, to ~41 h.
fn human_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.5, 15))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    tool: &'static str,
    tier: &'static str,
    rule: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    verdict: &'static str,
}

/// The policy service's metrics, under `toolgate_policy_`.
#[derive(Debug, Clone)]
pub struct PolicyMetrics {
    decisions: Family<DecisionLabels, Counter>,
    approvals_pending: Gauge,
    approvals_decided: Family<VerdictLabels, Counter>,
    approval_decision: Histogram,
    authorize_duration: Histogram,
    ledger_write: Histogram,
    ledger_write_errors: Counter,
}

impl PolicyMetrics {
    /// Registers the set in `registry` (normally from [`registry`]).
    pub fn register(registry: &mut Registry) -> Self {
        let m = PolicyMetrics {
            decisions: Family::default(),
            approvals_pending: Gauge::default(),
            approvals_decided: Family::default(),
            approval_decision: human_buckets(),
            authorize_duration: request_buckets(),
            ledger_write: request_buckets(),
            ledger_write_errors: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("policy");
        r.register(
            "decisions",
            "Authorize decisions by tool kind, tier and deciding rule",
            m.decisions.clone(),
        );
        r.register(
            "approvals_pending",
            "Approvals waiting for a human decision",
            m.approvals_pending.clone(),
        );
        r.register(
            "approvals_decided",
            "Approvals decided, by verdict",
            m.approvals_decided.clone(),
        );
        r.register_with_unit(
            "approval_decision_duration",
            "Time from an approval's creation to its decision",
            Unit::Seconds,
            m.approval_decision.clone(),
        );
        r.register_with_unit(
            "authorize_duration",
            "Authorize handling time, ledger write included",
            Unit::Seconds,
            m.authorize_duration.clone(),
        );
        r.register_with_unit(
            "ledger_write_duration",
            "Duration of one durable ledger write",
            Unit::Seconds,
            m.ledger_write.clone(),
        );
        r.register(
            "ledger_write_errors",
            "Ledger writes that failed",
            m.ledger_write_errors.clone(),
        );
        m
    }

    /// Counts one decision. `tool` is `ToolKind::as_str`, `tier` is `Tier::as_str`, `rule` the
    /// deciding rule id (`None` when the default applied).
    pub fn decision(&self, tool: &'static str, tier: &'static str, rule: Option<&str>) {
        self.decisions
            .get_or_create(&DecisionLabels {
                tool,
                tier,
                rule: rule.unwrap_or("default").to_owned(),
            })
            .inc();
    }

    /// Sets the number of pending approvals. Replicas share one ledger, so set it from a count
    /// over the ledger rather than adding and subtracting locally.
    pub fn set_approvals_pending(&self, pending: i64) {
        self.approvals_pending.set(pending);
    }

    /// Counts a decided approval (`approved`, `denied`, `cancelled`, `expired`) and, for a
    /// human verdict, how long it was pending.
    pub fn approval_decided(&self, verdict: &'static str, pending_for: Option<Duration>) {
        self.approvals_decided
            .get_or_create(&VerdictLabels { verdict })
            .inc();
        if let Some(d) = pending_for {
            self.approval_decision.observe(d.as_secs_f64());
        }
    }

    /// Observes one Authorize call's handling time.
    pub fn authorize_duration(&self, elapsed: Duration) {
        self.authorize_duration.observe(elapsed.as_secs_f64());
    }

    /// Observes one ledger write.
    pub fn ledger_write(&self, elapsed: Duration) {
        self.ledger_write.observe(elapsed.as_secs_f64());
    }

    /// Counts one failed ledger write.
    pub fn ledger_write_error(&self) {
        self.ledger_write_errors.inc();
    }
}

/// A child output stream: the process runner's own type, so the executor passes what a run
/// reports as is.
pub use toolgate_process::Stream;

/// A stream's label value: `stdout` or `stderr`.
const fn stream_label(stream: Stream) -> &'static str {
    match stream {
        Stream::Stdout => "stdout",
        Stream::Stderr => "stderr",
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StreamLabels {
    stream: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FsOpLabels {
    op: &'static str,
    code: &'static str,
}

/// The executor's metrics, under `toolgate_executor_`.
#[derive(Debug, Clone)]
pub struct ExecutorMetrics {
    runs: Family<StatusLabels, Counter>,
    run_duration: Histogram,
    runs_in_flight: Gauge,
    output: Family<StreamLabels, Counter>,
    output_truncations: Family<StreamLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    fs_ops: Family<FsOpLabels, Counter>,
    authorize: Histogram,
    approval_wait: Histogram,
    sandbox_profiles: Family<ProfileLabels, Gauge>,
    integrity: Family<ChangeLabels, Counter>,
    admission_queue: Gauge,
    admission_wait: Histogram,
    admission_refusals: Family<AdmissionLabels, Counter>,
    admission_reserved: Gauge,
    egress_connections: Family<ResultLabels, Counter>,
    egress_bytes: Family<DirectionLabels, Counter>,
    egress_held: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    reason: &'static str,
    limit: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    change: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProfileLabels {
    profile: String,
}

impl ExecutorMetrics {
    /// Registers the set in `registry` (normally from [`registry`]).
    pub fn register(registry: &mut Registry) -> Self {
        let m = ExecutorMetrics {
            runs: Family::default(),
            run_duration: run_buckets(),
            runs_in_flight: Gauge::default(),
            output: Family::default(),
            output_truncations: Family::default(),
            rejections: Family::default(),
            fs_ops: Family::default(),
            authorize: request_buckets(),
            approval_wait: human_buckets(),
            sandbox_profiles: Family::default(),
            integrity: Family::default(),
            admission_queue: Gauge::default(),
            admission_wait: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            admission_refusals: Family::default(),
            admission_reserved: Gauge::default(),
            egress_connections: Family::default(),
            egress_bytes: Family::default(),
            egress_held: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("executor");
        r.register(
            "runs",
            "Finished process runs by final status",
            m.runs.clone(),
        );
        r.register_with_unit(
            "run_duration",
            "Process run wall time, spawn to exit",
            Unit::Seconds,
            m.run_duration.clone(),
        );
        r.register(
            "runs_in_flight",
            "Process runs currently executing",
            m.runs_in_flight.clone(),
        );
        r.register_with_unit(
            "output",
            "Child output bytes read, by stream",
            Unit::Bytes,
            m.output.clone(),
        );
        r.register(
            "output_truncations",
            "Runs whose stream hit its byte cap",
            m.output_truncations.clone(),
        );
        r.register(
            "rejections",
            "Calls refused before running, by error reason",
            m.rejections.clone(),
        );
        r.register(
            "fs_ops",
            "Filesystem operations by operation and gRPC status code",
            m.fs_ops.clone(),
        );
        r.register_with_unit(
            "authorize_duration",
            "Authorize round trip to the policy service",
            Unit::Seconds,
            m.authorize.clone(),
        );
        r.register_with_unit(
            "approval_wait_duration",
            "Time a call spent waiting for a human decision",
            Unit::Seconds,
            m.approval_wait.clone(),
        );
        r.register(
            "sandbox_profile_available",
            "1 when the sandbox profile is enforceable and passed the startup self-test, else 0",
            m.sandbox_profiles.clone(),
        );
        r.register(
            "integrity_violations",
            "Protected paths a run changed that the after-run audit found, by change",
            m.integrity.clone(),
        );
        r.register(
            "admission_queue_depth",
            "Runs waiting in the admission queue",
            m.admission_queue.clone(),
        );
        r.register_with_unit(
            "admission_wait_duration",
            "Time a run spent in the admission queue, admitted or not",
            Unit::Seconds,
            m.admission_wait.clone(),
        );
        r.register(
            "admission_refusals",
            "Runs refused by admission, by reason and by the limit that held them back",
            m.admission_refusals.clone(),
        );
        r.register(
            "admission_reserved_bytes",
            "Memory limits plus tmpfs sizes of the runs admitted now",
            m.admission_reserved.clone(),
        );
        r.register(
            "egress_connections",
            "Connections runs opened through the egress gate, by result (`allowed` or the refusal)",
            m.egress_connections.clone(),
        );
        r.register_with_unit(
            "egress",
            "Bytes relayed through the egress gate, by direction (`sent` by runs, `received`)",
            Unit::Bytes,
            m.egress_bytes.clone(),
        );
        r.register(
            "egress_held_connections",
            "Connections the egress gate holds open while a human decides",
            m.egress_held.clone(),
        );
        for direction in ["sent", "received"] {
            let _ = m.egress_bytes.get_or_create(&DirectionLabels { direction });
        }
        // Series the alerts and the dashboard select by label exist from the start, at 0,
        // so a rate over them is 0 rather than absent ("no data") until the first event.
        for change in ["created", "modified", "removed", "audit_failed"] {
            let _ = m.integrity.get_or_create(&ChangeLabels { change });
        }
        for stream in [Stream::Stdout, Stream::Stderr].map(stream_label) {
            let _ = m.output.get_or_create(&StreamLabels { stream });
            let _ = m.output_truncations.get_or_create(&StreamLabels { stream });
        }
        for reason in [
            toolgate_core::Reason::PolicyUnavailable,
            toolgate_core::Reason::SandboxUnavailable,
        ] {
            let _ = m.rejections.get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            });
        }
        m
    }

    /// Counts a connection through the egress gate by result (`allowed`, or the refusal).
    pub fn egress_connection(&self, result: &'static str) {
        self.egress_connections
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// Counts bytes relayed through the egress gate (`sent` or `received`).
    pub fn egress_bytes(&self, direction: &'static str, bytes: u64) {
        self.egress_bytes
            .get_or_create(&DirectionLabels { direction })
            .inc_by(bytes);
    }

    /// Marks a connection as held for a human; it counts until the guard is dropped.
    pub fn egress_held(&self) -> InFlight {
        self.egress_held.inc();
        InFlight(self.egress_held.clone())
    }

    /// Marks a run as started; the run counts as in flight until the guard is dropped.
    pub fn run_started(&self) -> InFlight {
        self.runs_in_flight.inc();
        InFlight(self.runs_in_flight.clone())
    }

    /// Counts a finished run by final status (`exited`, `signaled`, `timed_out`, `cancelled`,
    /// `failed`, ...) and observes its duration.
    pub fn run_finished(&self, status: &'static str, elapsed: Duration) {
        self.runs.get_or_create(&StatusLabels { status }).inc();
        self.run_duration.observe(elapsed.as_secs_f64());
    }

    /// Adds a stream's bytes at the end of a run and whether it hit its cap.
    pub fn output(&self, stream: Stream, bytes: u64, truncated: bool) {
        let labels = StreamLabels {
            stream: stream_label(stream),
        };
        self.output.get_or_create(&labels).inc_by(bytes);
        if truncated {
            self.output_truncations.get_or_create(&labels).inc();
        }
    }

    /// Counts one change to the protected set found by an after-run audit (`created`,
    /// `modified`, `removed`), or an audit that could not finish (`audit_failed`).
    pub fn integrity_violation(&self, change: &'static str) {
        self.integrity.get_or_create(&ChangeLabels { change }).inc();
    }

    /// Counts a call refused before running; `reason` is `toolgate_core::Reason::as_str`.
    pub fn rejection(&self, reason: &'static str) {
        self.rejections
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }

    /// Counts a filesystem operation (`read`, `write`, ...) by its outcome.
    pub fn fs_op(&self, op: &'static str, code: tonic::Code) {
        self.fs_ops
            .get_or_create(&FsOpLabels {
                op,
                code: toolgate_contracts::status::code_name(code),
            })
            .inc();
    }

    /// Observes one Authorize round trip to the policy service.
    pub fn authorize(&self, elapsed: Duration) {
        self.authorize.observe(elapsed.as_secs_f64());
    }

    /// Observes the time one call waited for a human decision.
    pub fn approval_wait(&self, elapsed: Duration) {
        self.approval_wait.observe(elapsed.as_secs_f64());
    }

    /// Sets the number of runs waiting in the admission queue.
    pub fn admission_queue(&self, depth: usize) {
        self.admission_queue.set(depth as i64);
    }

    /// Observes the time one run spent in the admission queue.
    pub fn admission_wait(&self, elapsed: Duration) {
        self.admission_wait.observe(elapsed.as_secs_f64());
    }

    /// Counts a run admission refused: `reason` (`queue_full`, `wait_expired`, `too_large`,
    /// `profile_grew`) and the `limit` that held it back.
    pub fn admission_refusal(&self, reason: &'static str, limit: &'static str) {
        self.admission_refusals
            .get_or_create(&AdmissionLabels { reason, limit })
            .inc();
    }

    /// Sets the bytes the admitted runs reserve of the run memory budget.
    pub fn admission_reserved(&self, bytes: u64) {
        self.admission_reserved
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Records whether `profile` can be enforced here (after the startup self-test).
    pub fn sandbox_profile(&self, profile: &str, available: bool) {
        self.sandbox_profiles
            .get_or_create(&ProfileLabels {
                profile: profile.to_owned(),
            })
            .set(i64::from(available));
    }
}

/// Keeps a run counted in `toolgate_executor_runs_in_flight` until dropped.
#[derive(Debug)]
#[must_use = "the run stops counting as in flight when this is dropped"]
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Helpers for tests that scrape a service's metrics endpoint.
#[cfg(feature = "testing")]
pub mod testing {
    /// The `Accept` header Prometheus scrapes with by default: OpenMetrics preferred.
    pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

    /// One HTTP/1.1 GET of `path` from `addr`, asking as Prometheus does; returns the status
    /// code and the body. Panics on any failure, as a test helper should.
    pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
        let (status, _, body) = http_get_with_headers(addr, path).await;
        (status, body)
    }

    /// [`http_get`], also returning the response headers (names in lowercase).
    pub async fn http_get_with_headers(
        addr: &str,
        path: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        http_get_accepting(addr, path, Some(PROMETHEUS_ACCEPT)).await
    }

    /// [`http_get_with_headers`] with this `Accept` header, or none.
    pub async fn http_get_accepting(
        addr: &str,
        path: &str,
        accept: Option<&str>,
    ) -> (u16, Vec<(String, String)>, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let accept = accept
            .map(|a| format!("Accept: {a}\r\n"))
            .unwrap_or_default();
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write request");
        let mut response = Vec::new();
        // Bounded by `take`.
        #[allow(clippy::disallowed_methods)]
        stream
            .take(1 << 20)
            .read_to_end(&mut response)
            .await
            .expect("read response");
        let response = String::from_utf8(response).expect("utf-8 response");
        let (head, body) = response.split_once("\r\n\r\n").expect("header end");
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        (status, headers, body.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).expect("encodes");
        text
    }

    #[test]
    fn both_sets_share_one_registry_without_clashes() {
        let mut registry = registry();
        let policy = PolicyMetrics::register(&mut registry);
        let executor = ExecutorMetrics::register(&mut registry);
        policy.decision("fs.write", "ask", Some("protect-git"));
        policy.decision("fs.read", "auto", None);
        executor.fs_op("read", tonic::Code::NotFound);
        let text = render(&registry);
        assert!(text.contains(
            "toolgate_policy_decisions_total{tool=\"fs.write\",tier=\"ask\",rule=\"protect-git\"} 1\n"
        ));
        assert!(text.contains(
            "toolgate_policy_decisions_total{tool=\"fs.read\",tier=\"auto\",rule=\"default\"} 1\n"
        ));
        assert!(
            text.contains("toolgate_executor_fs_ops_total{op=\"read\",code=\"NOT_FOUND\"} 1\n")
        );
    }

    #[test]
    fn in_flight_guard_decrements() {
        let mut registry = registry();
        let executor = ExecutorMetrics::register(&mut registry);
        let first = executor.run_started();
        let second = executor.run_started();
        assert!(render(&registry).contains("toolgate_executor_runs_in_flight 2\n"));
        drop(first);
        drop(second);
        assert!(render(&registry).contains("toolgate_executor_runs_in_flight 0\n"));
    }

    #[test]
    fn build_and_process_metrics_are_served() {
        let registry = registry();
        let text = server::render(&registry, false).expect("renders");
        assert!(text.contains(&format!(
            "toolgate_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(&format!("\n{name}")), "{name} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn classic_text_names_counters_by_their_samples() {
        let mut registry = registry();
        let policy = PolicyMetrics::register(&mut registry);
        let executor = ExecutorMetrics::register(&mut registry);
        policy.decision("fs.read", "auto", None);
        executor.output(Stream::Stdout, 3, false);
        let text = server::render(&registry, true).expect("renders");
        assert!(text.contains("# TYPE toolgate_policy_decisions_total counter\n"));
        assert!(text.contains("# HELP toolgate_policy_decisions_total Authorize decisions"));
        assert!(text.contains("# TYPE toolgate_executor_output_bytes_total counter\n"));
        assert!(text.contains("# TYPE process_cpu_seconds_total counter\n"));
        assert!(text.contains("# TYPE toolgate_build_info gauge\n"));
        assert!(
            !text.contains("# UNIT") && !text.contains("# EOF"),
            "{text}"
        );
        // Every sample's family has a TYPE line under exactly its name (or histogram base).
        let typed: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().expect("name");
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|b| typed.contains(b)))
                .unwrap_or(name);
            assert!(typed.contains(base), "no TYPE for {name}");
        }
    }

    #[test]
    fn accept_header_chooses_the_format() {
        // The Prometheus text format unless the scraper asks for OpenMetrics (what `curl`
        // and `promtool check metrics` read by default).
        assert!(!server::wants_open_metrics(""));
        assert!(!server::wants_open_metrics("*/*"));
        assert!(!server::wants_open_metrics("text/plain;version=0.0.4"));
        assert!(server::wants_open_metrics(testing::PROMETHEUS_ACCEPT));
        assert!(server::wants_open_metrics(
            "application/openmetrics-text; version=1.0.0"
        ));
        // A scraper that prefers the text format, or refuses OpenMetrics, gets it.
        assert!(!server::wants_open_metrics(
            "text/plain;version=0.0.4,application/openmetrics-text;version=1.0.0;q=0.5"
        ));
        assert!(!server::wants_open_metrics(
            "application/openmetrics-text;q=0,*/*"
        ));
    }

    #[test]
    fn every_code_has_a_distinct_name() {
        let names: std::collections::HashSet<_> = (0..=16)
            .map(|i| toolgate_contracts::status::code_name(tonic::Code::from_i32(i)))
            .collect();
        assert_eq!(names.len(), 17);
    }
}
