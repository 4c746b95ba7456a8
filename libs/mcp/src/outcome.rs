//! What a tool call came to, typed: the result of a call that ran, a refusal parsed once
//! from the executor's status, or arguments that never made a request; and how each
//! becomes the `CallToolResult` the model reads. Everything else (the span, the metric, the
//! tasks extension's park and resume) matches on these types, never on the result's text
//! or JSON.

use std::collections::BTreeMap;

use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde::Serialize;
use serde_json::{Map, Value};
use tonic::Status;
use tonic::metadata::MetadataMap;
use toolgate_contracts::status;
use toolgate_core::{Reason, Tier};

use crate::tools::{
    FailureDetail, FailureOutput, RefusalApproval, RefusalDecision, RefusalOutput, Tool,
};

/// What a call came to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The executor ran the call; what it returned.
    Ran(Ran),
    /// The executor did not run the call, or could not be asked.
    Refused(Refusal),
    /// The arguments never made a request (the text says why).
    Invalid(String),
}

/// A call that ran.
#[derive(Debug)]
pub(crate) struct Ran {
    structured: Map<String, Value>,
    text: String,
    receipt: Receipt,
    error_type: Option<&'static str>,
}

/// Why the executor did not run a call: its status (code, `ErrorInfo` reason and metadata)
/// parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The policy denied the call; repeated, it is denied again.
    Denied(Decided),
    /// A human must approve the call; the same call runs once they have.
    ApprovalPending {
        /// The decision, with the approval to wait for.
        decided: Decided,
        /// When the approval expires, RFC 3339 (empty when not said).
        expires_at: String,
    },
    /// A human denied the call; repeated in this session, it returns the same denial.
    ApprovalDenied(Decided),
    /// Nobody decided the approval before it expired.
    ApprovalExpired(Decided),
    /// The approval was withdrawn before it was used.
    ApprovalCancelled(Decided),
    /// No decision behind it: the call failed, or was refused before the policy was asked.
    Failed(Failure),
}

/// The decision behind a refusal, from the status's `ErrorInfo` metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Decided {
    /// Why, as the policy rule or the human put it.
    pub(crate) reason: String,
    /// The rule that decided (empty when not known).
    pub(crate) rule_id: String,
    /// The approval asked for or decided (empty for a plain deny).
    pub(crate) approval_id: String,
    /// The ledger's id of the decision (empty when not known).
    pub(crate) decision_id: String,
}

/// A call that failed with no decision behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// What kind of failure, as far as this server acts on it.
    pub(crate) kind: FailureKind,
    code: tonic::Code,
    /// The `ErrorInfo` reason as the executor sent it; empty when it sent none.
    reason: String,
    message: String,
    metadata: BTreeMap<String, String>,
    error_type: &'static str,
}

/// The failures this server tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureKind {
    /// The `call_id` already ran; how it ended is in the metadata.
    AlreadyExecuted,
    /// The `call_id` was allowed and may be running right now.
    InFlight,
    /// The executor is at its limit for now.
    Busy,
    /// The executor cannot reach the policy service.
    PolicyUnavailable,
    /// The executor is out of reach: `UNAVAILABLE` without a reason of toolgate's.
    ExecutorUnavailable,
    /// The executor refused the agent's credential.
    Unauthenticated,
    /// Anything else: the status says what.
    Other,
}

impl FailureKind {
    /// Whether the same call may well succeed later (running elsewhere right now, or a
    /// passing outage).
    pub(crate) fn is_transient(self) -> bool {
        matches!(
            self,
            FailureKind::InFlight
                | FailureKind::Busy
                | FailureKind::PolicyUnavailable
                | FailureKind::ExecutorUnavailable
        )
    }
}

/// The decision behind a call that ran.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// `None` for calls that are not policy decisions (the background-run tools).
    pub(crate) tier: Option<Tier>,
    pub(crate) rule_id: String,
    pub(crate) approval_id: String,
    pub(crate) decision_id: String,
}

/// Who a result is worded for: the tool, the session its approvals are bound to, and how
/// the agent's credential and the executor were given to this server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Said<'a> {
    pub(crate) tool: Tool,
    pub(crate) session_id: &'a str,
    /// The executor's address, as `toolgate mcp --executor` was given it.
    pub(crate) executor: &'a str,
    /// Over HTTP the credential is the request's `Authorization` header; over stdio it is
    /// the server's own (`TOOLGATE_TOKEN`, `--token-file`).
    pub(crate) http: bool,
}

impl Outcome {
    /// A call that ran: its structured output, the text the model reads, the decision
    /// behind it, and the OpenTelemetry `error.type` when it ran but failed (a run that
    /// could not start or was cut short).
    pub(crate) fn ran<O: Serialize>(
        output: &O,
        text: String,
        receipt: Receipt,
        error_type: Option<&'static str>,
    ) -> Self {
        Outcome::Ran(Ran {
            structured: obj(serde_json::to_value(output).unwrap_or(Value::Null)),
            text,
            receipt,
            error_type,
        })
    }

    /// A call the executor answered with `status`.
    pub(crate) fn refused(status: &Status) -> Self {
        Outcome::Refused(Refusal::from_status(status))
    }

    /// The decision behind the call, when there was one.
    pub(crate) fn tier(&self) -> Option<Tier> {
        match self {
            Outcome::Ran(r) => r.receipt.tier,
            Outcome::Refused(r) => r.tier(),
            Outcome::Invalid(_) => None,
        }
    }

    /// The OpenTelemetry `error.type`, `None` on success.
    pub(crate) fn error_type(&self) -> Option<&'static str> {
        match self {
            Outcome::Ran(r) => r.error_type,
            Outcome::Refused(r) => Some(r.error_type()),
            Outcome::Invalid(_) => Some("invalid_request"),
        }
    }

    /// For a call waiting for a human: its approval id and when the approval expires
    /// (empty when not said). `None` for everything else, and for an `ask` without an id.
    pub(crate) fn pending_approval(&self) -> Option<(&str, &str)> {
        match self {
            Outcome::Refused(Refusal::ApprovalPending {
                decided,
                expires_at,
            }) if !decided.approval_id.is_empty() => {
                Some((decided.approval_id.as_str(), expires_at.as_str()))
            }
            _ => None,
        }
    }

    /// The MCP result: text for the model, the structured fields, and toolgate's `_meta`.
    pub(crate) fn into_result(self, said: &Said<'_>) -> CallToolResult {
        let tier = self.tier();
        let shown = self.render(said);
        let content = vec![ContentBlock::text(shown.text)];
        let mut result = if shown.is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = Some(Value::Object(shown.structured));
        let mut meta = Map::new();
        for (k, v) in [
            ("dev.toolgate/decision", tier.map_or("", Tier::as_str)),
            ("dev.toolgate/rule_id", shown.ids.rule_id.as_str()),
            ("dev.toolgate/approval_id", shown.ids.approval_id.as_str()),
            ("dev.toolgate/decision_id", shown.ids.decision_id.as_str()),
        ] {
            if !v.is_empty() {
                meta.insert(k.to_owned(), Value::String(v.to_owned()));
            }
        }
        result.meta = Some(MetaObject(meta));
        result
    }

    /// The text the model reads.
    pub(crate) fn text(self, said: &Said<'_>) -> String {
        self.render(said).text
    }

    fn render(self, said: &Said<'_>) -> Shown {
        match self {
            Outcome::Ran(r) => Shown {
                is_error: false,
                text: r.text,
                structured: r.structured,
                ids: Decided {
                    reason: String::new(),
                    rule_id: r.receipt.rule_id,
                    approval_id: r.receipt.approval_id,
                    decision_id: r.receipt.decision_id,
                },
            },
            Outcome::Refused(Refusal::Failed(f)) => f.render(said),
            Outcome::Refused(r) => r.render_decided(said),
            Outcome::Invalid(why) => {
                let message = format!("invalid arguments: {why}");
                failure_shown(
                    status::code_name(tonic::Code::InvalidArgument),
                    Reason::InvalidRequest.as_str(),
                    message.clone(),
                    BTreeMap::new(),
                    message,
                )
            }
        }
    }
}

/// A result before it becomes a `CallToolResult`.
struct Shown {
    is_error: bool,
    text: String,
    structured: Map<String, Value>,
    /// The ids for `_meta` (its `reason` unused).
    ids: Decided,
}

impl Refusal {
    /// Parses the executor's answer: the decision refusals by their `ErrorInfo` reason,
    /// everything else a [`Failure`] by its reason or code.
    pub(crate) fn from_status(s: &Status) -> Refusal {
        let (reason, md) = status::error_info(s).unwrap_or_default();
        let mut metadata: BTreeMap<String, String> = md.into_iter().collect();
        let known = Reason::ALL.iter().copied().find(|r| r.as_str() == reason);
        let message = s.message().to_owned();
        let m = &mut metadata;
        match known {
            Some(Reason::PolicyDenied) => Refusal::Denied(Decided::from_metadata(message, m)),
            Some(Reason::ApprovalRequired) => {
                let asked = m.get("message").cloned().unwrap_or(message);
                let expires_at = m.get("expires_at").cloned().unwrap_or_default();
                Refusal::ApprovalPending {
                    decided: Decided::from_metadata(asked, m),
                    expires_at,
                }
            }
            Some(Reason::ApprovalDenied) => {
                let said = m.get("message").cloned().unwrap_or(message);
                Refusal::ApprovalDenied(Decided::from_metadata(said, m))
            }
            Some(Reason::ApprovalExpired) => {
                Refusal::ApprovalExpired(Decided::from_metadata(message, m))
            }
            Some(Reason::ApprovalNotPending) => {
                Refusal::ApprovalCancelled(Decided::from_metadata(message, m))
            }
            _ => {
                let kind = match (known, s.code()) {
                    (Some(Reason::AlreadyExecuted), _) => FailureKind::AlreadyExecuted,
                    (Some(Reason::CallInFlight), _) => FailureKind::InFlight,
                    (Some(Reason::Busy), _) => FailureKind::Busy,
                    (Some(Reason::PolicyUnavailable), _) => FailureKind::PolicyUnavailable,
                    (None, tonic::Code::Unavailable) => FailureKind::ExecutorUnavailable,
                    (_, tonic::Code::Unauthenticated) => FailureKind::Unauthenticated,
                    _ => FailureKind::Other,
                };
                Refusal::Failed(Failure {
                    kind,
                    code: s.code(),
                    reason,
                    message,
                    metadata,
                    error_type: status::error_type(s),
                })
            }
        }
    }

    /// The decision behind it: `deny` or `ask`, none for a failure.
    pub(crate) fn tier(&self) -> Option<Tier> {
        match self {
            Refusal::Denied(_) | Refusal::ApprovalDenied(_) => Some(Tier::Deny),
            Refusal::ApprovalPending { .. }
            | Refusal::ApprovalExpired(_)
            | Refusal::ApprovalCancelled(_) => Some(Tier::Ask),
            Refusal::Failed(_) => None,
        }
    }

    /// The OpenTelemetry `error.type`: the status's reason in lower case (else its code).
    pub(crate) fn error_type(&self) -> &'static str {
        match self {
            Refusal::Denied(_) => "policy_denied",
            Refusal::ApprovalPending { .. } => "approval_required",
            Refusal::ApprovalDenied(_) => "approval_denied",
            Refusal::ApprovalExpired(_) => "approval_expired",
            Refusal::ApprovalCancelled(_) => "approval_not_pending",
            Refusal::Failed(f) => f.error_type,
        }
    }

    /// A decision refusal as the model should read it: never a protocol error, so the
    /// model can change course. The text is what most clients show the model; `guidance`
    /// carries the same advice for clients that show the structured content instead.
    ///
    /// A call waiting for a human (`ask`, pending) is not an error: nothing failed, the
    /// same call runs once approved, and clients that count tool errors against a retry
    /// budget (pydantic-ai) would otherwise end the agent's run.
    fn render_decided(self, said: &Said<'_>) -> Shown {
        let (decision, state, d, expires_at) = match self {
            Refusal::Denied(d) => (RefusalDecision::Deny, None, d, String::new()),
            Refusal::ApprovalPending {
                decided,
                expires_at,
            } => (
                RefusalDecision::Ask,
                Some(RefusalApproval::Pending),
                decided,
                expires_at,
            ),
            Refusal::ApprovalDenied(d) => (
                RefusalDecision::Deny,
                Some(RefusalApproval::Denied),
                d,
                String::new(),
            ),
            Refusal::ApprovalExpired(d) => (
                RefusalDecision::Ask,
                Some(RefusalApproval::Expired),
                d,
                String::new(),
            ),
            Refusal::ApprovalCancelled(d) => (
                RefusalDecision::Ask,
                Some(RefusalApproval::Cancelled),
                d,
                String::new(),
            ),
            Refusal::Failed(f) => return f.render(said),
        };
        let (guidance, text) = match state {
            None => {
                let guidance =
                    "The call did not run and will not run if repeated; do something else.";
                let text = format!(
                    "Denied by toolgate policy (rule {}): {}. {guidance}",
                    d.rule_id, d.reason
                );
                (guidance.to_owned(), text)
            }
            Some(RefusalApproval::Pending) => {
                let id = &d.approval_id;
                let guidance = format!(
                    "A human must approve approval {id} (for example `toolgate approvals approve {id}`). After it is approved, call {tool} again with exactly the same arguments and it will run. The approval is bound to this agent session ({session}): the repeated call must come from it.{until}",
                    tool = said.tool,
                    session = said.session_id,
                    until = if expires_at.is_empty() {
                        String::new()
                    } else {
                        format!(" The request expires at {expires_at}.")
                    },
                );
                let text = format!(
                    "This call needs a human's approval and has not run: {}.\n\n{guidance}",
                    d.reason
                );
                (guidance, text)
            }
            Some(RefusalApproval::Denied) => {
                let guidance = "It did not run. Repeating it with the same arguments in this session returns this denial again; change course or ask the user.";
                let text = format!(
                    "A human denied this call (approval {}): {}\n\n{guidance}",
                    d.approval_id, d.reason
                );
                (guidance.to_owned(), text)
            }
            Some(RefusalApproval::Expired | RefusalApproval::Cancelled) => {
                let guidance = "The call did not run. Calling it again asks a human anew.";
                (guidance.to_owned(), format!("{}. {guidance}", d.reason))
            }
        };
        let refusal = RefusalOutput {
            decision,
            state,
            reason: d.reason.clone(),
            guidance,
            rule_id: d.rule_id.clone(),
            approval_id: d.approval_id.clone(),
            expires_at,
            decision_id: d.decision_id.clone(),
            session_id: said.session_id.to_owned(),
        };
        Shown {
            is_error: state != Some(RefusalApproval::Pending),
            text,
            structured: obj(serde_json::to_value(&refusal).unwrap_or(Value::Null)),
            ids: d,
        }
    }
}

impl Decided {
    /// The decision's ids, taken from a refusal's `ErrorInfo` metadata.
    fn from_metadata(reason: String, metadata: &mut BTreeMap<String, String>) -> Self {
        Decided {
            reason,
            rule_id: metadata.remove("rule_id").unwrap_or_default(),
            approval_id: metadata.remove("approval_id").unwrap_or_default(),
            decision_id: metadata.remove("decision_id").unwrap_or_default(),
        }
    }
}

impl Failure {
    /// Worded for an MCP user: the credential and the executor are this server's settings,
    /// not gRPC headers.
    fn render(self, said: &Said<'_>) -> Shown {
        let code = status::code_name(self.code);
        let executor = said.executor;
        let message = self.message;
        let message = match (self.kind, self.reason.as_str()) {
            (FailureKind::Unauthenticated, _) if said.http => format!(
                "the toolgate executor at {executor} refused the agent's credential ({message}): this MCP endpoint needs the agent's token as `Authorization: Bearer <token>`; ask the user to configure it"
            ),
            (FailureKind::Unauthenticated, _) => format!(
                "the toolgate executor at {executor} refused the agent's credential ({message}): `toolgate mcp` needs the agent's token in TOOLGATE_TOKEN or --token-file; ask the user to configure it and restart the MCP server"
            ),
            (FailureKind::ExecutorUnavailable, "") => format!(
                "cannot reach the toolgate executor at {executor} ({message}); the call did not run. Try again later, or ask the user to start the executor (`toolgate up`) or fix `toolgate mcp --executor`"
            ),
            _ => message,
        };
        let shown = if self.reason.is_empty() {
            code
        } else {
            self.reason.as_str()
        };
        let text = format!("{shown}: {message}");
        failure_shown(code, &self.reason, message, self.metadata, text)
    }
}

fn failure_shown(
    code: &str,
    reason: &str,
    message: String,
    metadata: BTreeMap<String, String>,
    text: String,
) -> Shown {
    let failure = FailureOutput {
        error: FailureDetail {
            code: code.to_owned(),
            reason: reason.to_owned(),
            message,
            metadata,
        },
    };
    Shown {
        is_error: true,
        text,
        structured: obj(serde_json::to_value(&failure).unwrap_or(Value::Null)),
        ids: Decided::default(),
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

impl Receipt {
    /// From a filesystem response's headers.
    pub(crate) fn of_headers(md: &MetadataMap) -> Self {
        let get = |k: &str| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        Receipt {
            tier: Some(tier_of(&get("toolgate-decision"))),
            rule_id: get("toolgate-rule-id"),
            approval_id: get("toolgate-approval-id"),
            decision_id: get("toolgate-decision-id"),
        }
    }
}

/// The tier the executor reported for a call that ran; `auto` unless it said otherwise.
pub(crate) fn tier_of(s: &str) -> Tier {
    s.parse().unwrap_or(Tier::Auto)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use toolgate_contracts::status::{self, status, status_with_retry};
    use toolgate_core::{Reason, Tier};

    use super::{Decided, FailureKind, Outcome, Receipt, Refusal, Said};
    use crate::tools::Tool;

    fn said(http: bool) -> Said<'static> {
        Said {
            tool: Tool::RunCommand,
            session_id: "sess-1",
            executor: "http://127.0.0.1:50051",
            http,
        }
    }

    /// The result a client sees, as JSON.
    fn shown(s: &tonic::Status, http: bool) -> Value {
        serde_json::to_value(Outcome::refused(s).into_result(&said(http))).unwrap()
    }

    fn text(v: &Value) -> &str {
        v["content"][0]["text"].as_str().unwrap()
    }

    fn md(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    fn failure(s: &tonic::Status) -> super::Failure {
        match Refusal::from_status(s) {
            Refusal::Failed(f) => f,
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[test]
    fn a_policy_deny_is_an_error_naming_the_rule() {
        let s = status(
            Reason::PolicyDenied,
            "rm -rf / is denied",
            md(&[("rule_id", "no-rm"), ("decision_id", "dec_1")]),
        );
        let refusal = Refusal::from_status(&s);
        assert_eq!(
            refusal,
            Refusal::Denied(Decided {
                reason: "rm -rf / is denied".into(),
                rule_id: "no-rm".into(),
                approval_id: String::new(),
                decision_id: "dec_1".into(),
            })
        );
        assert_eq!(refusal.tier(), Some(Tier::Deny));
        let v = shown(&s, false);
        assert_eq!(v["isError"], true);
        assert_eq!(v["structuredContent"]["decision"], "deny");
        assert_eq!(v["structuredContent"]["session_id"], "sess-1");
        assert!(v["structuredContent"].get("state").is_none(), "{v}");
        assert_eq!(
            v["_meta"],
            json!({"dev.toolgate/decision": "deny", "dev.toolgate/rule_id": "no-rm", "dev.toolgate/decision_id": "dec_1"})
        );
        assert!(
            text(&v).starts_with("Denied by toolgate policy (rule no-rm): rm -rf / is denied."),
            "{v}"
        );
    }

    #[test]
    fn a_pending_approval_is_not_an_error_and_says_how_to_go_on() {
        let s = status(
            Reason::ApprovalRequired,
            "approval required",
            md(&[
                ("approval_id", "apr_0a"),
                ("expires_at", "2026-11-27T01:00:00Z"),
                ("message", "git push asks"),
                ("rule_id", "push"),
            ]),
        );
        let outcome = Outcome::refused(&s);
        assert_eq!(
            outcome.pending_approval(),
            Some(("apr_0a", "2026-11-27T01:00:00Z"))
        );
        assert_eq!(outcome.tier(), Some(Tier::Ask));
        let v = shown(&s, false);
        assert_eq!(v["isError"], false);
        let sc = &v["structuredContent"];
        assert_eq!(
            (&sc["decision"], &sc["state"]),
            (&json!("ask"), &json!("pending"))
        );
        assert_eq!(sc["reason"], "git push asks");
        assert_eq!(sc["expires_at"], "2026-11-27T01:00:00Z");
        let guidance = sc["guidance"].as_str().unwrap();
        for needle in [
            "approve apr_0a",
            "call run_command again",
            "(sess-1)",
            "01:00:00Z",
        ] {
            assert!(guidance.contains(needle), "{needle}: {guidance}");
        }
        assert_eq!(v["_meta"]["dev.toolgate/approval_id"], "apr_0a");
        // An ask without an approval id cannot become a task.
        let bare = status(Reason::ApprovalRequired, "approval required", []);
        assert_eq!(Outcome::refused(&bare).pending_approval(), None);
    }

    #[test]
    fn a_human_denial_is_a_deny_with_the_humans_words() {
        let s = status(
            Reason::ApprovalDenied,
            "approval apr_0b was denied",
            md(&[("approval_id", "apr_0b"), ("message", "not on main")]),
        );
        assert!(
            matches!(Refusal::from_status(&s), Refusal::ApprovalDenied(ref d) if d.reason == "not on main")
        );
        let v = shown(&s, false);
        assert_eq!(v["isError"], true);
        let sc = &v["structuredContent"];
        assert_eq!(
            (&sc["decision"], &sc["state"]),
            (&json!("deny"), &json!("denied"))
        );
        assert!(text(&v).starts_with("A human denied this call (approval apr_0b): not on main"));
        // Without the human's words, the status message stands in.
        let s = status(Reason::ApprovalDenied, "denied by alice", []);
        assert_eq!(
            shown(&s, false)["structuredContent"]["reason"],
            "denied by alice"
        );
    }

    #[test]
    fn an_expired_or_cancelled_approval_is_an_ask_that_asks_anew() {
        for (reason, state) in [
            (Reason::ApprovalExpired, "expired"),
            (Reason::ApprovalNotPending, "cancelled"),
        ] {
            let s = status(
                reason,
                "approval apr_0c is over",
                md(&[("approval_id", "apr_0c")]),
            );
            let refusal = Refusal::from_status(&s);
            assert_eq!(refusal.tier(), Some(Tier::Ask));
            assert_eq!(Outcome::refused(&s).pending_approval(), None);
            let v = shown(&s, false);
            assert_eq!(v["isError"], true);
            assert_eq!(v["structuredContent"]["state"], state);
            assert_eq!(
                text(&v),
                "approval apr_0c is over. The call did not run. Calling it again asks a human anew."
            );
        }
    }

    #[test]
    fn a_decision_refusal_names_its_error_type_as_the_status_does() {
        for reason in [
            Reason::PolicyDenied,
            Reason::ApprovalRequired,
            Reason::ApprovalDenied,
            Reason::ApprovalExpired,
            Reason::ApprovalNotPending,
        ] {
            let s = status(reason, "m", []);
            assert_eq!(
                Outcome::refused(&s).error_type(),
                Some(status::error_type(&s)),
                "{reason:?}"
            );
        }
    }

    #[test]
    fn an_already_executed_call_is_a_failure_with_its_outcome() {
        let s = status(
            Reason::AlreadyExecuted,
            "call mcp-1 already ran",
            md(&[("outcome", "exited"), ("exit_code", "0")]),
        );
        let f = failure(&s);
        assert_eq!(f.kind, FailureKind::AlreadyExecuted);
        assert!(!f.kind.is_transient());
        let v = shown(&s, false);
        assert_eq!(
            v["structuredContent"],
            json!({"error": {"code": "ALREADY_EXISTS", "reason": "ALREADY_EXECUTED", "message": "call mcp-1 already ran", "metadata": {"outcome": "exited", "exit_code": "0"}}})
        );
        assert_eq!(text(&v), "ALREADY_EXECUTED: call mcp-1 already ran");
        assert_eq!(v["_meta"], json!({}));
    }

    #[test]
    fn in_flight_busy_and_outages_are_transient() {
        let cases = [
            (
                status(Reason::CallInFlight, "running", []),
                FailureKind::InFlight,
            ),
            (
                status_with_retry(Reason::Busy, "busy", [], std::time::Duration::from_secs(1)),
                FailureKind::Busy,
            ),
            (
                status(Reason::PolicyUnavailable, "policy down", []),
                FailureKind::PolicyUnavailable,
            ),
            (
                tonic::Status::unavailable("connection refused"),
                FailureKind::ExecutorUnavailable,
            ),
        ];
        for (s, kind) in cases {
            let f = failure(&s);
            assert_eq!(f.kind, kind);
            assert!(f.kind.is_transient(), "{kind:?}");
            assert_eq!(
                Outcome::refused(&s).error_type(),
                Some(status::error_type(&s))
            );
            assert_eq!(shown(&s, false)["isError"], true);
        }
        // The ledger being down is not something a parked task waits out.
        let s = status(Reason::LedgerUnavailable, "ledger down", []);
        assert_eq!(failure(&s).kind, FailureKind::Other);
    }

    #[test]
    fn an_unreachable_executor_is_named_with_what_to_fix() {
        let v = shown(&tonic::Status::unavailable("connection refused"), false);
        let t = text(&v);
        assert!(
            t.starts_with("UNAVAILABLE: cannot reach the toolgate executor at http://127.0.0.1:50051 (connection refused)"),
            "{t}"
        );
        assert!(t.contains("`toolgate mcp --executor`"), "{t}");
        assert_eq!(v["structuredContent"]["error"]["reason"], "");
        // The policy service being down is said as the executor said it.
        let v = shown(&status(Reason::PolicyUnavailable, "policy down", []), false);
        assert_eq!(text(&v), "POLICY_UNAVAILABLE: policy down");
    }

    #[test]
    fn a_refused_credential_says_where_the_token_goes_per_transport() {
        let s = status(Reason::Unauthenticated, "unknown token", []);
        assert_eq!(failure(&s).kind, FailureKind::Unauthenticated);
        let stdio = shown(&s, false);
        assert!(
            text(&stdio).contains("TOOLGATE_TOKEN or --token-file"),
            "{stdio}"
        );
        let http = shown(&s, true);
        assert!(
            text(&http).contains("`Authorization: Bearer <token>`"),
            "{http}"
        );
        assert_eq!(
            http["structuredContent"]["error"]["code"],
            "UNAUTHENTICATED"
        );
        // A bare status (a proxy's, say) gets the same wording.
        let bare = tonic::Status::unauthenticated("no token");
        assert_eq!(failure(&bare).kind, FailureKind::Unauthenticated);
    }

    #[test]
    fn any_other_failure_keeps_its_code_reason_and_metadata() {
        let s = status(
            Reason::PathOutsideWorkspace,
            "../x is outside",
            md(&[("path", "../x")]),
        );
        let f = failure(&s);
        assert_eq!(f.kind, FailureKind::Other);
        assert!(!f.kind.is_transient());
        let v = shown(&s, false);
        assert_eq!(
            v["structuredContent"]["error"],
            json!({"code": "PERMISSION_DENIED", "reason": "PATH_OUTSIDE_WORKSPACE", "message": "../x is outside", "metadata": {"path": "../x"}})
        );
        assert_eq!(text(&v), "PATH_OUTSIDE_WORKSPACE: ../x is outside");
        assert_eq!(Outcome::refused(&s).tier(), None);
    }

    #[test]
    fn invalid_arguments_never_reached_the_executor() {
        let v = serde_json::to_value(
            Outcome::Invalid("read_file: missing field `path`".into()).into_result(&said(false)),
        )
        .unwrap();
        assert_eq!(v["isError"], true);
        assert_eq!(
            v["structuredContent"]["error"],
            json!({"code": "INVALID_ARGUMENT", "reason": "INVALID_REQUEST", "message": "invalid arguments: read_file: missing field `path`", "metadata": {}})
        );
        assert_eq!(
            text(&v),
            "invalid arguments: read_file: missing field `path`"
        );
    }

    #[test]
    fn a_call_that_ran_carries_its_decision_in_meta() {
        let receipt = Receipt {
            tier: Some(Tier::Ask),
            rule_id: "push".into(),
            approval_id: "apr_0d".into(),
            decision_id: "dec_2".into(),
        };
        let outcome = Outcome::ran(&json!({"ok": true}), "done".into(), receipt, None);
        assert_eq!(
            (outcome.tier(), outcome.error_type()),
            (Some(Tier::Ask), None)
        );
        let v = serde_json::to_value(outcome.into_result(&said(false))).unwrap();
        assert_eq!(v["isError"], false);
        assert_eq!(v["structuredContent"], json!({"ok": true}));
        assert_eq!(
            v["_meta"],
            json!({"dev.toolgate/decision": "ask", "dev.toolgate/rule_id": "push", "dev.toolgate/approval_id": "apr_0d", "dev.toolgate/decision_id": "dec_2"})
        );
        // A background-run tool is no decision: nothing in `_meta`.
        let outcome = Outcome::ran(&json!({}), String::new(), Receipt::default(), None);
        let v = serde_json::to_value(outcome.into_result(&said(false))).unwrap();
        assert_eq!(v["_meta"], json!({}));
    }
}
