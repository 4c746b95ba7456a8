//! The core's domain answers → wire responses.

use std::fmt::Write as _;

use toolgate_contracts::convert::{tier_to_wire, tool_call_from_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy_wire::{approval_state_to_wire, authorization_to_wire};
use toolgate_ledger as ledger;

use super::{explanation, into_explanation, source};
use crate::core::{
    ApprovalPage, ApprovalView, AuthorizeDecision, Classification, PolicyDescription,
};
use crate::stored;

/// `Authorize`'s response: the answer, and the whole decision as its explanation.
pub(crate) fn authorize_response(a: AuthorizeDecision) -> pb::AuthorizeResponse {
    pb::AuthorizeResponse {
        result: Some(authorization_to_wire(a.authorization)),
        explanation: Some(explanation(&a.decision)),
        request_digest: a.request_digest,
    }
}

/// `Classify`'s response.
pub(crate) fn classify_response(c: Classification) -> pb::ClassifyResponse {
    pb::ClassifyResponse {
        explanation: Some(into_explanation(c.decision)),
        request_digest: c.request_digest,
    }
}

/// `GetPolicy`'s response.
pub(crate) fn policy_response(d: PolicyDescription) -> pb::GetPolicyResponse {
    let policy = d.policy;
    pb::GetPolicyResponse {
        version: policy.version().to_owned(),
        default_tier: tier_to_wire(policy.default_tier()) as i32,
        rules: policy
            .summary()
            .into_iter()
            .map(|r| pb::RuleSummary {
                rule_id: r.id,
                tier: tier_to_wire(r.tier) as i32,
                reason: r.reason,
                source: source(r.source) as i32,
                line: r.line as u32,
            })
            .collect(),
        loaded_at: Some(prost_types::Timestamp::from(d.loaded_at)),
        source: d.source,
    }
}

/// `ListApprovals`' response.
pub(crate) fn list_response(page: ApprovalPage) -> pb::ListApprovalsResponse {
    pb::ListApprovalsResponse {
        approvals: page.approvals.into_iter().map(approval).collect(),
        next_page_token: page
            .next_page_token
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
    }
}

/// The wire form of a stored approval, with its explanation and redacted call decoded.
pub(crate) fn approval(v: ApprovalView) -> pb::Approval {
    let a = v.approval;
    let (explanation, description) = match stored::explanation_from_json(&a.explanation_json) {
        Some((e, d)) => (Some(e), d),
        None => (None, String::new()),
    };
    let call = stored::tool_call_from_json(&a.request_json);
    let display = display(call.as_ref(), &description);
    pb::Approval {
        approval_id: a.id.as_str().to_owned(),
        state: approval_state_to_wire(v.state) as i32,
        session_id: a.session_id.as_str().to_owned(),
        principal: a.principal.as_str().to_owned(),
        call_id: a.call_id.as_str().to_owned(),
        call,
        request_digest: a.digest.to_hex(),
        policy_version: a.policy_version.as_str().to_owned(),
        explanation,
        description,
        created_at: Some(timestamp(a.created_at)),
        expires_at: Some(timestamp(a.expires_at)),
        decided_by: text(a.decided_by.as_ref()),
        decided_at: a.decided_at.map(timestamp),
        reason: a.reason.unwrap_or_default(),
        message_to_model: a.message.unwrap_or_default(),
        scope: match a.scope {
            ledger::Scope::Once => pb::ApprovalScope::Once,
            ledger::Scope::Session => pb::ApprovalScope::Session,
        } as i32,
        consumed_by: a.consumed_by_executor.unwrap_or_default(),
        consumed_at: a.consumed_at.map(timestamp),
        consumed_decision_id: v
            .consumed_decision_id
            .map(|d| d.as_str().to_owned())
            .unwrap_or_default(),
        trace_id: text(a.trace_id.as_ref()),
        display,
    }
}

/// `Approval.display`: the call's rows and the description, every request-derived string
/// escaped for a terminal.
fn display(call: Option<&pb::ToolCall>, description: &str) -> String {
    let mut out = call
        .and_then(|c| tool_call_from_wire(c.clone()).ok())
        .map(|c| toolgate_core::display::call_text(&c))
        .unwrap_or_default();
    if !description.is_empty() {
        let _ = writeln!(
            out,
            "{:<12}{}",
            "description",
            toolgate_core::display::escape(description)
        );
    }
    out
}

fn text<T: std::fmt::Display>(v: Option<&T>) -> String {
    v.map(ToString::to_string).unwrap_or_default()
}

/// A ledger timestamp on the wire.
pub(crate) fn timestamp(t: ledger::Timestamp) -> prost_types::Timestamp {
    let us = t.as_micros();
    prost_types::Timestamp {
        seconds: us.div_euclid(1_000_000),
        nanos: (us.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

/// The wire scope of a stored learned rule.
fn rule_scope_to_wire(scope: &str) -> pb::LearnedRuleScope {
    match scope {
        "session" => pb::LearnedRuleScope::Session,
        "workspace" => pb::LearnedRuleScope::Workspace,
        "all" => pb::LearnedRuleScope::All,
        _ => pb::LearnedRuleScope::Unspecified,
    }
}

/// A stored learned rule on the wire; `active` as of `now`.
pub(crate) fn learned_rule(
    r: ledger::LearnedRuleRecord,
    now: ledger::Timestamp,
) -> pb::LearnedRule {
    let active = r.active(now);
    pb::LearnedRule {
        rule_id: r.id.as_str().to_owned(),
        pattern: r.display,
        scope: rule_scope_to_wire(&r.scope) as i32,
        scope_value: r.scope_value,
        created_by: r.created_by.as_str().to_owned(),
        created_at: Some(timestamp(r.created_at)),
        expires_at: r.expires_at.map(timestamp),
        revoked_at: r.revoked_at.map(timestamp),
        revoked_by: text(r.revoked_by.as_ref()),
        source_approval_id: r.source_approval.as_str().to_owned(),
        active,
    }
}

/// A rule proposal on the wire.
pub(crate) fn rule_proposal(p: &crate::core::RuleProposal) -> pb::ProposeRuleResponse {
    pb::ProposeRuleResponse {
        pattern: p.pattern.to_text(),
        scope: rule_scope_to_wire(p.scope.kind()) as i32,
        scope_value: p.scope.value().to_owned(),
    }
}

/// `ListRules`' response.
pub(crate) fn rules_response(page: crate::core::RulePage) -> pb::ListRulesResponse {
    let now = page.now;
    pb::ListRulesResponse {
        rules: page
            .rules
            .into_iter()
            .map(|r| learned_rule(r, now))
            .collect(),
        revision: page.revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_keep_microseconds() {
        let t = timestamp(ledger::Timestamp::from_micros(1_700_000_000_123_456));
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 123_456_000));
    }
}
