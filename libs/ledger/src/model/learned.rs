//! Rules learned from approvals, as the ledger stores them. The pattern is the policy
//! engine's stored form, opaque here: the ledger keeps who made a rule, where it applies,
//! until when, and who revoked it.

use super::{ApprovalId, LearnedRuleId, Principal, Timestamp};

/// A rule to store together with the approval it is learned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewLearnedRule {
    /// The pattern's stored form (the policy engine's encoding).
    pub pattern: String,
    /// The pattern as an approver read it when approving.
    pub display: String,
    /// `session`, `workspace` or `all`.
    pub scope: String,
    /// The session id or workspace key; empty for `all`.
    pub scope_value: String,
    /// How long it applies; `None`: until revoked.
    pub ttl: Option<std::time::Duration>,
}

/// A stored learned rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedRuleRecord {
    /// Its id.
    pub id: LearnedRuleId,
    /// The pattern's stored form.
    pub pattern: String,
    /// The pattern as the approver read it.
    pub display: String,
    /// `session`, `workspace` or `all`.
    pub scope: String,
    /// The session id or workspace key; empty for `all`.
    pub scope_value: String,
    /// The approver who made it.
    pub created_by: Principal,
    /// When.
    pub created_at: Timestamp,
    /// When it stops applying; `None`: until revoked.
    pub expires_at: Option<Timestamp>,
    /// When it was revoked.
    pub revoked_at: Option<Timestamp>,
    /// Who revoked it.
    pub revoked_by: Option<Principal>,
    /// The approval it was learned from.
    pub source_approval: ApprovalId,
}

impl LearnedRuleRecord {
    /// Whether it applies at `now`: neither revoked nor expired.
    pub fn active(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| now < e)
    }
}

/// The learned rules at one revision of the set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LearnedRules {
    /// Bumped by every rule learned or revoked; part of the policy version of the decisions
    /// learned rules make.
    pub revision: u64,
    /// The rules, oldest first.
    pub rules: Vec<LearnedRuleRecord>,
}
