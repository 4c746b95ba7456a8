//! Every call, gRPC or MCP, runs in one `execute_tool {tool}` span (OpenTelemetry GenAI
//! conventions, kind INTERNAL) and is timed in `gen_ai_execute_tool_duration_seconds`. The
//! existing tree hangs under it: the Authorize hop, `approval_wait`, `fs.op`, `process.run`.

use std::time::Instant;

use tonic::Status;
use toolgate_contracts::status;
use toolgate_core::ToolKind;
use toolgate_runtime::metrics::semconv;
use tracing::field::Empty;

use crate::wire::CallContext;

/// The span and clock of one tool call. Ends (attributes recorded, duration observed) at
/// [`ToolSpan::finish`] or [`ToolSpan::fail`]; dropped before that, it ends as `cancelled`
/// (the client went away).
#[derive(Debug)]
pub(crate) struct ToolSpan {
    span: tracing::Span,
    tool: ToolKind,
    started: Instant,
    ended: bool,
}

impl ToolSpan {
    /// Opens the span under the current one (the RPC's server span).
    pub(crate) fn new(tool: ToolKind) -> Self {
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {}", tool.as_str()),
            otel.kind = "internal",
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool.as_str(),
            gen_ai.tool.call.id = Empty,
            gen_ai.conversation.id = Empty,
            approval_wait_ms = Empty,
            error.type = Empty,
            toolgate.decision = Empty,
            toolgate.rule.id = Empty,
            toolgate.decision.id = Empty,
            toolgate.approval.id = Empty,
            toolgate.sandbox.profile = Empty,
            toolgate.output.truncated = Empty,
        );
        ToolSpan {
            span,
            tool,
            started: Instant::now(),
            ended: false,
        }
    }

    /// Names the call and its session once the context is validated.
    pub(crate) fn bind(&self, ctx: &CallContext) -> tracing::Span {
        self.span
            .record("gen_ai.tool.call.id", ctx.call_id.as_str());
        self.span
            .record("gen_ai.conversation.id", ctx.session_id.as_str());
        self.span
            .record("approval_wait_ms", ctx.approval_wait.as_millis() as u64);
        self.span.clone()
    }

    /// The span, for children.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Records whether the call's output was cut at a cap.
    pub(crate) fn truncated(&self, truncated: bool) {
        self.span.record("toolgate.output.truncated", truncated);
    }

    /// Ends the call; `error_type` names its failure class, `None` for success.
    pub(crate) fn finish(&mut self, error_type: Option<&'static str>) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if let Some(e) = error_type {
            self.span.record("error.type", e);
            self.span.record("otel.status_code", "ERROR");
        }
        semconv::execute_tool(self.tool.as_str(), error_type, self.started.elapsed());
    }

    /// Ends the call as failed with `status`.
    pub(crate) fn fail(&mut self, status: &Status) {
        self.finish(Some(status::error_type(status)));
    }

    /// Ends the call with `result`'s outcome.
    pub(crate) fn end<T>(&mut self, result: &Result<T, Status>) {
        match result {
            Ok(_) => self.finish(None),
            Err(s) => self.fail(s),
        }
    }
}

impl Drop for ToolSpan {
    fn drop(&mut self) {
        self.finish(Some("cancelled"));
    }
}

/// Records the policy's answer on a call's `execute_tool` span: `toolgate.decision`
/// (`auto`, `ask`, `deny`) and the ids it came with.
pub(crate) fn record_decision(
    span: &tracing::Span,
    decision: &str,
    rule_id: &str,
    decision_id: &str,
    approval_id: &str,
) {
    span.record("toolgate.decision", decision);
    for (field, value) in [
        ("toolgate.rule.id", rule_id),
        ("toolgate.decision.id", decision_id),
        ("toolgate.approval.id", approval_id),
    ] {
        if !value.is_empty() {
            span.record(field, value);
        }
    }
}

/// Records the sandbox profile a run was decided under.
pub(crate) fn record_profile(span: &tracing::Span, profile: &str) {
    if !profile.is_empty() {
        span.record("toolgate.sandbox.profile", profile);
    }
}
