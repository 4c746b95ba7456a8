//! What a call came to: the model-facing result of a success, a refusal or a failure, and
//! the decision (tier, rule, approval) behind a call that ran.

use serde::Serialize;
use serde_json::{Map, Value};
use tonic::Status;
use tonic::metadata::MetadataMap;
use toolgate_contracts::status;
use toolgate_core::Reason;

use crate::tools::{ApprovalState, Decision, Failure, FailureDetail, Refusal};

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

/// Who a refusal is worded for: the tool, the session its approvals are bound to, and how
/// the agent's credential and the executor were given to this server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Said<'a> {
    pub(crate) tool: &'a str,
    pub(crate) session_id: &'a str,
    /// The executor's address, as `toolgate mcp --executor` was given it.
    pub(crate) executor: &'a str,
    /// Over HTTP the credential is the request's `Authorization` header; over stdio it is
    /// the server's own (`TOOLGATE_TOKEN`, `--token-file`).
    pub(crate) http: bool,
}

impl Outcome {
    /// Arguments the executor was never asked about.
    pub(crate) fn invalid(why: &str) -> Self {
        Outcome::failure(
            "INVALID_ARGUMENT",
            "INVALID_REQUEST",
            format!("invalid arguments: {why}"),
            Default::default(),
            Some("invalid_request"),
        )
    }

    fn failure(
        code: &str,
        reason: &str,
        message: String,
        metadata: std::collections::BTreeMap<String, String>,
        error_type: Option<&'static str>,
    ) -> Self {
        let failure = Failure {
            error: FailureDetail {
                code: code.to_owned(),
                reason: reason.to_owned(),
                message: message.clone(),
                metadata,
            },
        };
        Outcome {
            is_error: true,
            text: message,
            structured: obj(serde_json::to_value(&failure).unwrap_or(Value::Null)),
            error_type,
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
    /// protocol error, so the model can change course. The text is what most clients show
    /// the model; a refusal's `guidance` carries the same advice for clients that show the
    /// structured content instead.
    ///
    /// A call waiting for a human (`ask`, pending) is not an error: nothing failed, the
    /// same call runs once approved, and clients that count tool errors against a retry
    /// budget (pydantic-ai) would otherwise end the agent's run.
    pub(crate) fn refused(said: Said<'_>, s: &Status) -> Self {
        let (reason, md) = status::error_info(s).unwrap_or_default();
        let get = |k: &str| md.get(k).cloned().unwrap_or_default();
        let message = s.message().to_owned();
        let error_type = Some(status::error_type(s));
        let mut refusal = Refusal {
            decision: Decision::Deny,
            state: None,
            reason: message.clone(),
            guidance: String::new(),
            rule_id: get("rule_id"),
            approval_id: get("approval_id"),
            expires_at: String::new(),
            decision_id: get("decision_id"),
            session_id: said.session_id.to_owned(),
        };
        let text = match reason.as_str() {
            r if r == Reason::PolicyDenied.as_str() => {
                refusal.guidance =
                    "The call did not run and will not run if repeated; do something else."
                        .to_owned();
                format!(
                    "Denied by toolgate policy (rule {}): {message}. {}",
                    refusal.rule_id, refusal.guidance
                )
            }
            r if r == Reason::ApprovalRequired.as_str() => {
                refusal.decision = Decision::Ask;
                refusal.state = Some(ApprovalState::Pending);
                refusal.expires_at = get("expires_at");
                refusal.reason = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                let id = &refusal.approval_id;
                refusal.guidance = format!(
                    "A human must approve approval {id} (for example `toolgate approvals approve {id}`). After it is approved, call {tool} again with exactly the same arguments and it will run. The approval is bound to this agent session ({session}): the repeated call must come from it.{until}",
                    tool = said.tool,
                    session = said.session_id,
                    until = if refusal.expires_at.is_empty() {
                        String::new()
                    } else {
                        format!(" The request expires at {}.", refusal.expires_at)
                    },
                );
                format!(
                    "This call needs a human's approval and has not run: {}.\n\n{}",
                    refusal.reason, refusal.guidance
                )
            }
            r if r == Reason::ApprovalDenied.as_str() => {
                refusal.state = Some(ApprovalState::Denied);
                refusal.reason = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                refusal.guidance = "It did not run. Repeating it with the same arguments in this session returns this denial again; change course or ask the user.".to_owned();
                format!(
                    "A human denied this call (approval {}): {}\n\n{}",
                    refusal.approval_id, refusal.reason, refusal.guidance
                )
            }
            r if r == Reason::ApprovalExpired.as_str()
                || r == Reason::ApprovalNotPending.as_str() =>
            {
                refusal.decision = Decision::Ask;
                refusal.state = Some(if r == Reason::ApprovalExpired.as_str() {
                    ApprovalState::Expired
                } else {
                    ApprovalState::Cancelled
                });
                refusal.guidance =
                    "The call did not run. Calling it again asks a human anew.".to_owned();
                format!("{message}. {}", refusal.guidance)
            }
            _ => {
                let md = md.into_iter().collect();
                return Outcome::failed(said, s, &reason, md, message, error_type);
            }
        };
        let pending = refusal.state == Some(ApprovalState::Pending);
        Outcome {
            is_error: !pending,
            text,
            decision: match refusal.decision {
                Decision::Deny => "deny",
                Decision::Ask => "ask",
            },
            rule_id: refusal.rule_id.clone(),
            approval_id: refusal.approval_id.clone(),
            decision_id: refusal.decision_id.clone(),
            structured: obj(serde_json::to_value(&refusal).unwrap_or(Value::Null)),
            error_type,
        }
    }

    /// A failure with no decision behind it, worded for an MCP user: the credential and the
    /// executor are this server's settings, not gRPC headers.
    fn failed(
        said: Said<'_>,
        s: &Status,
        reason: &str,
        md: std::collections::BTreeMap<String, String>,
        message: String,
        error_type: Option<&'static str>,
    ) -> Self {
        let code = status::code_name(s.code());
        let executor = said.executor;
        let message = match (s.code(), reason) {
            (tonic::Code::Unauthenticated, _) if said.http => format!(
                "the toolgate executor at {executor} refused the agent's credential ({message}): this MCP endpoint needs the agent's token as `Authorization: Bearer <token>`; ask the user to configure it"
            ),
            (tonic::Code::Unauthenticated, _) => format!(
                "the toolgate executor at {executor} refused the agent's credential ({message}): `toolgate mcp` needs the agent's token in TOOLGATE_TOKEN or --token-file; ask the user to configure it and restart the MCP server"
            ),
            (tonic::Code::Unavailable, "") => format!(
                "cannot reach the toolgate executor at {executor} ({message}); the call did not run. Try again later, or ask the user to start the executor (`toolgate up`) or fix `toolgate mcp --executor`"
            ),
            _ => message,
        };
        let shown = if reason.is_empty() { code } else { reason };
        let mut o = Outcome::failure(code, reason, message, md, error_type);
        o.text = format!("{shown}: {}", o.text);
        o
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
