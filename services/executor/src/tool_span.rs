//! Every call, gRPC or MCP, runs in one `execute_tool {tool}` span (OpenTelemetry GenAI
//! conventions, kind INTERNAL) and is timed in `gen_ai_execute_tool_duration_seconds`. The
//! existing tree hangs under it: the Authorize hop, `approval_wait`, `fs.op`, `process.run`.
//!
//! `{tool}` (`gen_ai.tool.name`, the metric's `gen_ai_tool_name`) is the tool's MCP name
//! (`read_file`, `run_command`, ...), the name the MCP server's `tools/call` span carries
//! too, so one call has one tool name from the agent to the run; the executor's operation
//! (`fs.read`, `process.run`) is `toolgate.operation`. The span ends when the call does:
//! for a run, at its exit, not when the RPC handler returns.

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
        let name = tool_name(tool);
        let span = tracing::info_span!(
            "execute_tool",
            otel.name = format!("execute_tool {name}"),
            otel.kind = "internal",
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            toolgate.operation = tool.as_str(),
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
        // The exported span ends at its last exit: a run's span was last entered when the
        // handler started the run, so enter it once more as the call ends.
        self.span.in_scope(|| {});
        semconv::execute_tool(tool_name(self.tool), error_type, self.started.elapsed());
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

/// The MCP tool name of an executor operation: the one `gen_ai.tool.name` vocabulary.
pub(crate) fn tool_name(tool: ToolKind) -> &'static str {
    match tool {
        ToolKind::FsRead => "read_file",
        ToolKind::FsWrite => "write_file",
        ToolKind::FsEdit => "edit_file",
        ToolKind::FsList => "list_directory",
        ToolKind::FsSearch => "search_files",
        ToolKind::FsFind => "find_files",
        ToolKind::FsMkdir => "create_directory",
        ToolKind::FsStat => "stat_path",
        ToolKind::FsDelete => "delete_path",
        ToolKind::ProcessRun => "run_command",
        // Not a tool a caller invokes: a running command's connection, decided on its own.
        ToolKind::NetConnect => "net_connect",
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
