//! Parsing wire messages into domain values at the edge.

use std::time::Duration;

use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::status;

/// Longest `call_id` / `session_id` accepted.
const MAX_ID_LEN: usize = 128;

/// A validated call context.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The orchestrator's idempotency key.
    pub call_id: String,
    /// The agent session.
    pub session_id: String,
    /// How long to wait for a human on `ask`.
    pub approval_wait: Duration,
}

impl TryFrom<Option<common::CallContext>> for CallContext {
    type Error = Status;

    fn try_from(ctx: Option<common::CallContext>) -> Result<Self, Status> {
        let ctx = ctx.ok_or_else(|| {
            status::invalid(
                "context",
                "context is required: set context.call_id and context.session_id",
            )
        })?;
        let call_id = id("context.call_id", ctx.call_id)?;
        let session_id = id("context.session_id", ctx.session_id)?;
        let approval_wait = match ctx.approval_wait {
            None => Duration::ZERO,
            Some(d) => duration("context.approval_wait", d)?,
        };
        Ok(CallContext {
            call_id,
            session_id,
            approval_wait,
        })
    }
}

impl CallContext {
    /// A span naming the call, so every log line of it carries its ids.
    pub fn span(&self, tool: toolgate_core::ToolKind) -> tracing::Span {
        tracing::info_span!(
            "call",
            tool = tool.as_str(),
            call_id = %self.call_id,
            session_id = %self.session_id,
            approval_wait_ms = self.approval_wait.as_millis() as u64,
        )
    }
}

fn id(field: &'static str, v: String) -> Result<String, Status> {
    if v.is_empty() {
        return Err(status::invalid(field, format!("{field} is required")));
    }
    if v.len() > MAX_ID_LEN || v.chars().any(char::is_control) {
        return Err(status::invalid(
            field,
            format!("{field} must be at most {MAX_ID_LEN} bytes without control characters"),
        ));
    }
    Ok(v)
}

/// A non-negative wire duration.
pub fn duration(field: &'static str, d: prost_types::Duration) -> Result<Duration, Status> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(status::invalid(
            field,
            format!("{field} must be a non-negative duration"),
        ));
    }
    Ok(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// Zero means "use the default", anything else is a requested cap.
pub fn cap<T: Default + PartialEq>(v: T) -> Option<T> {
    if v == T::default() { None } else { Some(v) }
}
