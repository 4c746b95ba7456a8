//! What a call came to: the model-facing result of a success, a refusal or a failure, and
//! the decision (tier, rule, approval) behind a call that ran.

use serde::Serialize;
use serde_json::{Map, Value, json};
use tonic::Status;
use tonic::metadata::MetadataMap;
use toolgate_contracts::status;
use toolgate_core::Reason;

/// What a call came to, before it becomes a `CallToolResult`.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) is_error: bool,
    pub(crate) text: String,
    pub(crate) structured: Map<String, Value>,
    /// `auto`, `ask`, `deny`, or empty when the call was refused before any decision.
    pub(crate) decision: &'static str,
    pub(crate) rule_id: String,
    pub(crate) approval_id: String,
    pub(crate) decision_id: String,
    /// The OpenTelemetry `error.type`, `None` on success.
    pub(crate) error_type: Option<&'static str>,
}

impl Outcome {
    /// Arguments the executor was never asked about.
    pub(crate) fn invalid(why: &str) -> Self {
        Outcome {
            is_error: true,
            text: format!("invalid arguments: {why}"),
            structured: obj(json!({
                "error": {"code": "INVALID_ARGUMENT", "reason": "INVALID_REQUEST", "message": why}
            })),
            error_type: Some("invalid_request"),
            ..Default::default()
        }
    }

    pub(super) fn success<O: Serialize>(output: &O, text: String, receipt: Receipt) -> Self {
        Outcome {
            is_error: false,
            text,
            structured: obj(serde_json::to_value(output).unwrap_or(Value::Null)),
            decision: receipt.decision,
            rule_id: receipt.rule_id,
            approval_id: receipt.approval_id,
            decision_id: receipt.decision_id,
            error_type: None,
        }
    }

    /// A refusal or failure the executor answered, as the model should read it: never a
    /// protocol error, so the model can change course.
    pub(crate) fn refused(tool: &str, s: &Status) -> Self {
        let (reason, md) = status::error_info(s).unwrap_or_default();
        let get = |k: &str| md.get(k).cloned().unwrap_or_default();
        let mut out = Outcome {
            is_error: true,
            error_type: Some(status::error_type(s)),
            rule_id: get("rule_id"),
            approval_id: get("approval_id"),
            decision_id: get("decision_id"),
            ..Default::default()
        };
        let message = s.message().to_owned();
        match reason.as_str() {
            r if r == Reason::PolicyDenied.as_str() => {
                out.decision = "deny";
                out.text = format!(
                    "Denied by toolgate policy (rule {}): {message}. The call did not run and will not run if repeated; do something else.",
                    out.rule_id
                );
                out.structured = obj(json!({
                    "decision": "deny",
                    "rule_id": out.rule_id,
                    "reason": message,
                    "decision_id": out.decision_id,
                }));
            }
            r if r == Reason::ApprovalRequired.as_str() => {
                out.decision = "ask";
                let expires_at = get("expires_at");
                let why = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                out.text = format!(
                    "This call needs a human's approval and has not run: {why}.\n\nA human must approve approval {id} (for example `toolgate approvals approve {id}`). After it is approved, call {tool} again with exactly the same arguments and it will run.{until}",
                    id = out.approval_id,
                    until = if expires_at.is_empty() {
                        String::new()
                    } else {
                        format!(" The request expires at {expires_at}.")
                    },
                );
                out.structured = obj(json!({
                    "decision": "ask",
                    "approval_id": out.approval_id,
                    "state": "pending",
                    "expires_at": expires_at,
                    "rule_id": out.rule_id,
                    "decision_id": out.decision_id,
                    "reason": why,
                }));
            }
            r if r == Reason::ApprovalDenied.as_str() => {
                out.decision = "deny";
                let said = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                out.text = format!(
                    "A human denied this call (approval {}): {said}\n\nIt did not run. Repeating it with the same arguments in this session returns this denial again; change course or ask the user.",
                    out.approval_id
                );
                out.structured = obj(json!({
                    "decision": "deny",
                    "approval_id": out.approval_id,
                    "state": "denied",
                    "rule_id": out.rule_id,
                    "reason": said,
                    "decision_id": out.decision_id,
                }));
            }
            r if r == Reason::ApprovalExpired.as_str()
                || r == Reason::ApprovalNotPending.as_str() =>
            {
                out.decision = "ask";
                let state = if r == Reason::ApprovalExpired.as_str() {
                    "expired"
                } else {
                    "cancelled"
                };
                out.text = format!("{message}. The call did not run.");
                out.structured = obj(json!({
                    "decision": "ask",
                    "approval_id": out.approval_id,
                    "state": state,
                    "reason": message,
                }));
            }
            _ => {
                let code = status::code_name(s.code());
                let shown = if reason.is_empty() {
                    code
                } else {
                    reason.as_str()
                };
                out.text = format!("{shown}: {message}");
                out.structured = obj(json!({
                    "error": {
                        "code": code,
                        "reason": reason,
                        "message": message,
                        "metadata": md,
                    }
                }));
            }
        }
        out
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".to_owned(), other);
            m
        }
    }
}

/// The decision behind a call that ran.
#[derive(Debug, Default)]
pub(super) struct Receipt {
    pub(super) decision: &'static str,
    pub(super) rule_id: String,
    pub(super) approval_id: String,
    pub(super) decision_id: String,
}

impl Receipt {
    /// From a filesystem response's headers.
    pub(super) fn of_headers(md: &MetadataMap) -> Self {
        let get = |k: &str| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        Receipt {
            decision: tier(&get("toolgate-decision")),
            rule_id: get("toolgate-rule-id"),
            approval_id: get("toolgate-approval-id"),
            decision_id: get("toolgate-decision-id"),
        }
    }
}

pub(super) fn tier(s: &str) -> &'static str {
    match s {
        "ask" => "ask",
        "deny" => "deny",
        _ => "auto",
    }
}
