//! Tool-call durations under the OpenTelemetry GenAI and MCP semantic-convention names, so
//! dashboards built for agent traces find them: `gen_ai.execute_tool.duration` and
//! `mcp.server.operation.duration`, exported the way OpenTelemetry's Prometheus exporter
//! spells them (dots become underscores, the unit becomes a `_seconds` suffix, no
//! `toolgate_` prefix):
//!
//! | name | labels |
//! |---|---|
//! | `gen_ai_execute_tool_duration_seconds` | `gen_ai_operation_name` (`execute_tool`), `gen_ai_tool_name` (the MCP tool name: `read_file`, `run_command`, ...), `error_type` (empty on success) |
//! | `mcp_server_operation_duration_seconds` | `mcp_method_name` (`tools/call`, `tools/list`, ...), `gen_ai_tool_name` (the MCP tool, empty for other methods), `error_type` |
//!
//! Like the gRPC families they live in one process-wide registry that every `/metrics`
//! endpoint of the process serves. Every label is a closed set: tool kinds, the MCP server's
//! own tool and method names (anything else is `_OTHER`), and error types derived from the
//! closed `ErrorReason` list.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_tool_name: &'static str,
    error_type: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct McpLabels {
    mcp_method_name: &'static str,
    gen_ai_tool_name: &'static str,
    error_type: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn buckets() -> Histogram {
    // 1 ms, ×4 each, to ~4.5 h: a stat and a long build alike.
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

struct Families {
    registry: Registry,
    tool: Histograms<ToolLabels>,
    mcp: Histograms<McpLabels>,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(|| {
        let mut registry = Registry::default();
        let tool: Histograms<ToolLabels> = Family::new_with_constructor(buckets);
        let mcp: Histograms<McpLabels> = Family::new_with_constructor(buckets);
        registry.register(
            "gen_ai_execute_tool_duration_seconds",
            "Duration of tool executions (OpenTelemetry gen_ai.execute_tool.duration)",
            tool.clone(),
        );
        registry.register(
            "mcp_server_operation_duration_seconds",
            "Duration of MCP requests handled by the server (OpenTelemetry mcp.server.operation.duration)",
            mcp.clone(),
        );
        Families {
            registry,
            tool,
            mcp,
        }
    })
}

/// The process-wide registry of these families (empty until something is observed).
pub(super) fn registry() -> &'static Registry {
    &families().registry
}

/// Observes one tool execution: `tool` is the MCP tool name (`read_file`, `run_command`, ...),
/// `error_type` the failure class (`policy_denied`, `approval_required`, `timeout`, ...) or
/// `None` when it succeeded.
pub fn execute_tool(tool: &'static str, error_type: Option<&'static str>, elapsed: Duration) {
    families()
        .tool
        .get_or_create(&ToolLabels {
            gen_ai_operation_name: "execute_tool",
            gen_ai_tool_name: tool,
            error_type: error_type.unwrap_or(""),
        })
        .observe(elapsed.as_secs_f64());
}

/// Observes one MCP request: `method` (`tools/call`, ...), the MCP tool for `tools/call`
/// (empty otherwise), and the failure class or `None`.
pub fn mcp_operation(
    method: &'static str,
    tool: &'static str,
    error_type: Option<&'static str>,
    elapsed: Duration,
) {
    families()
        .mcp
        .get_or_create(&McpLabels {
            mcp_method_name: method,
            gen_ai_tool_name: tool,
            error_type: error_type.unwrap_or(""),
        })
        .observe(elapsed.as_secs_f64());
}
