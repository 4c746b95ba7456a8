//! The executor's wire at the edge: parsing wire messages into domain values (here), the
//! domain's answers as wire messages ([`run`], [`fs`], [`capabilities`]) and its errors as
//! statuses ([`status`]). The adapters (`process_service.rs`, `fs_service/`) use these; the
//! domain code (`confined.rs`, the gate, the runner) never sees prost or `tonic::Status`.

pub(crate) mod capabilities;
pub(crate) mod fs;
pub(crate) mod run;
mod status;

pub(crate) use status::count_refusal;

use std::time::Duration;

use tonic::{Request, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::status::invalid;
use toolgate_runtime::auth::{self, Principal, Role};

/// Who may call the executor's services.
const CALLERS: &[Role] = &[Role::Agent, Role::Admin];

/// Longest free-text description forwarded to approvers.
const MAX_DESCRIPTION_LEN: usize = 4096;

/// Longest `call_id` / `session_id` accepted.
const MAX_ID_LEN: usize = 128;

/// A validated call context.
#[derive(Debug, Clone)]
pub(crate) struct CallContext {
    /// The orchestrator's idempotency key.
    pub call_id: String,
    /// The agent session.
    pub session_id: String,
    /// How long to wait for a human on `ask`.
    pub approval_wait: Duration,
    /// Free text for the approver; never trusted, never in the digest.
    pub description: String,
}

impl TryFrom<Option<common::CallContext>> for CallContext {
    type Error = Status;

    fn try_from(ctx: Option<common::CallContext>) -> Result<Self, Status> {
        let ctx = ctx.ok_or_else(|| {
            invalid(
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
        if ctx.description.len() > MAX_DESCRIPTION_LEN {
            return Err(invalid(
                "context.description",
                format!("context.description must be at most {MAX_DESCRIPTION_LEN} bytes"),
            ));
        }
        Ok(CallContext {
            call_id,
            session_id,
            approval_wait,
            description: ctx.description,
        })
    }
}

fn id(field: &'static str, v: String) -> Result<String, Status> {
    if v.is_empty() {
        return Err(invalid(field, format!("{field} is required")));
    }
    if v.len() > MAX_ID_LEN || v.chars().any(char::is_control) {
        return Err(invalid(
            field,
            format!("{field} must be at most {MAX_ID_LEN} bytes without control characters"),
        ));
    }
    Ok(v)
}

/// A non-negative wire duration.
pub(crate) fn duration(field: &'static str, d: prost_types::Duration) -> Result<Duration, Status> {
    if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 {
        return Err(invalid(
            field,
            format!("{field} must be a non-negative duration"),
        ));
    }
    Ok(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// Zero means "use the default", anything else is a requested cap.
pub(crate) fn cap<T: Default + PartialEq>(v: T) -> Option<T> {
    if v == T::default() { None } else { Some(v) }
}

/// The authenticated caller of an executor method (agent or admin) and its trace context:
/// the RPC span's when exporting, else the caller's own `traceparent` as the telemetry
/// layer passed it on (see `toolgate_runtime::telemetry`).
pub(crate) fn caller<T>(
    request: &Request<T>,
    method: &str,
) -> Result<(Principal, Option<String>), Status> {
    let principal = auth::require(request, method, CALLERS)?;
    Ok((principal, toolgate_runtime::telemetry::traceparent()))
}
