//! The core's requests and answers, in domain types. The executor protocol's own types
//! (`toolgate_policy_api`) are taken and answered as they are; the rest (classification,
//! approvals for humans, sessions) are here. The adapters build these from wire messages and
//! turn the answers back into wire messages; the core sees neither prost nor tonic.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use toolgate_core::ExecutorIdentity;
use toolgate_ledger::{
    self as ledger, ApprovalFilter, ApprovalId, ApprovalState, DecisionId, PageToken, Timestamp,
    Verdict,
};
use toolgate_policy_api::Authorization;
use toolgate_policy_engine::{CallContext, Decision, Policy, ToolCall};

/// What an executor reported about itself as the JSON object kept beside its credential on
/// the decision: its non-empty fields, or `None` when it reported nothing.
pub(crate) fn reported_json(e: &ExecutorIdentity) -> Option<String> {
    let fields = [
        ("executor_id", &e.executor_id),
        ("pod", &e.pod),
        ("namespace", &e.namespace),
        ("node", &e.node),
        ("image", &e.image),
        ("version", &e.version),
    ];
    let map: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.clone())))
        .collect();
    (!map.is_empty()).then(|| serde_json::Value::Object(map).to_string())
}

/// An [`Authorization`] with how the policy reached it.
#[derive(Debug, Clone)]
pub struct AuthorizeDecision {
    /// The answer, as the protocol carries it.
    pub authorization: Authorization,
    /// The policy's decision, rule by rule.
    pub decision: Decision,
    /// The sha256 the decision (and any approval) is bound to.
    pub request_digest: String,
}

/// A dry-run classification.
#[derive(Debug, Clone)]
pub struct ClassifyRequest {
    /// The call.
    pub call: ToolCall,
    /// Who and where.
    pub context: CallContext,
}

/// What [`ClassifyRequest`] answers.
#[derive(Debug, Clone)]
pub struct Classification {
    /// The policy's decision.
    pub decision: Decision,
    /// The digest an approval for this call would bind to.
    pub request_digest: String,
}

/// The policy in force.
#[derive(Debug, Clone)]
pub struct PolicyDescription {
    /// The policy.
    pub policy: Arc<Policy>,
    /// When the core loaded its source.
    pub loaded_at: SystemTime,
    /// Where it comes from.
    pub source: String,
}

/// Waits for a human's decision.
#[derive(Debug, Clone)]
pub struct WaitRequest {
    /// The approval.
    pub approval_id: ApprovalId,
    /// How long to wait (clamped to the service's maximum).
    pub timeout: Duration,
}

/// Approvals to list.
#[derive(Debug, Clone)]
pub struct ListApprovalsRequest {
    /// What the ledger filters on.
    pub filter: ApprovalFilter,
    /// Several states, checked in memory (the ledger filters on one at most); empty: all.
    pub states: Vec<ApprovalState>,
    /// At most this many.
    pub page_size: usize,
    /// Where the previous page ended.
    pub page_token: Option<PageToken>,
}

/// One page of approvals.
#[derive(Debug, Clone)]
pub struct ApprovalPage {
    /// Newest first.
    pub approvals: Vec<ApprovalView>,
    /// Where the next page starts, when there is one.
    pub next_page_token: Option<PageToken>,
}

/// A human's verdict on a pending approval.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// The approval.
    pub approval_id: ApprovalId,
    /// Approve (once or for the session) or deny.
    pub verdict: Verdict,
    /// The approver's reason, for the audit trail.
    pub reason: Option<String>,
    /// What the model is told.
    pub message: Option<String>,
    /// How long an approval stays usable.
    pub ttl: Option<Duration>,
    /// Also learn a rule from the call (approvals only).
    pub remember: Option<Remember>,
}

/// Where a learned rule applies, before it is bound to the approved call's session or
/// workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleScope {
    /// The approved call's session.
    Session,
    /// The approved call's workspace (its executor's labels).
    Workspace,
    /// Everywhere.
    All,
}

/// Turn an approval into a rule ("always allow").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remember {
    /// Where the rule applies.
    pub scope: RuleScope,
    /// How long; `None`: until revoked.
    pub ttl: Option<Duration>,
}

/// The rule that would be learned from an approval.
#[derive(Debug, Clone)]
pub struct RuleProposal {
    /// The pattern.
    pub pattern: toolgate_policy_engine::learned::Pattern,
    /// Its scope, bound to the approved call's session or workspace.
    pub scope: toolgate_policy_engine::learned::Scope,
}

/// A decided approval, and the rule learned from it when one was asked for.
#[derive(Debug, Clone)]
pub struct Decided {
    /// The approval.
    pub view: ApprovalView,
    /// The rule.
    pub rule: Option<ledger::LearnedRuleRecord>,
}

/// The learned rules.
#[derive(Debug, Clone)]
pub struct RulePage {
    /// The rules, oldest first.
    pub rules: Vec<ledger::LearnedRuleRecord>,
    /// The set's revision.
    pub revision: u64,
    /// When they were listed (what `active` is judged against).
    pub now: Timestamp,
}

/// Withdraws a pending approval.
#[derive(Debug, Clone)]
pub struct CancelRequest {
    /// The approval.
    pub approval_id: ApprovalId,
    /// Why, for the audit trail.
    pub reason: Option<String>,
}

/// A stored approval as callers see it.
#[derive(Debug, Clone)]
pub struct ApprovalView {
    /// The row.
    pub approval: ledger::Approval,
    /// Its state now: a pending or approved one past its expiry reads `expired` before the
    /// sweeper gets to it.
    pub state: ApprovalState,
    /// The decision of the call that consumed it.
    pub consumed_decision_id: Option<DecisionId>,
}
