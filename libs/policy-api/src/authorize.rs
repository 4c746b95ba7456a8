//! `Authorize`: one call an executor is about to run, and the policy's answer.

use std::collections::HashMap;
use std::time::SystemTime;

use toolgate_core::{ExecutorIdentity, ToolCall};

use crate::outcome::Outcome;

/// One call the executor is about to run.
#[derive(Debug, Clone)]
pub struct AuthorizeRequest {
    /// The orchestrator's idempotency key; a repeat is a retry.
    pub call_id: String,
    /// The agent session approvals bind to.
    pub session_id: String,
    /// Free text for the approver.
    pub description: String,
    /// The agent the call runs for; empty: the caller itself.
    pub principal: String,
    /// The canonical call, as resolved in the workspace.
    pub call: ToolCall,
    /// The workspace's labels.
    pub labels: HashMap<String, String>,
    /// The executor asking, as it reports itself.
    pub executor: ExecutorIdentity,
}

/// What the policy's rules hide from an allowed call: globs, not yet compiled (the executor
/// compiles them into a `toolgate_fs::HiddenPaths`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenGlobs {
    /// The policy version they come from.
    pub policy_version: String,
    /// Workspace-relative globs of paths to leave out.
    pub globs: Vec<String>,
}

/// How the policy reached its answer, as far as the executor acts on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    /// What the model is told.
    pub message: String,
    /// The deciding rule: the first match at the final tier, `default` when none matched.
    pub rule_id: String,
    /// The policy version that decided.
    pub policy_version: String,
}

/// The policy's answer to one [`AuthorizeRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authorization {
    /// Run it.
    Allowed {
        /// The recorded decision.
        decision_id: String,
        /// The approval consumed; empty for `auto`.
        approval_id: String,
        /// When the outcome must be reported by.
        lease_expires_at: Option<SystemTime>,
        /// What the call must not reveal (tools that show more than one path); `None` from a
        /// policy service that did not say.
        hidden: Option<HiddenGlobs>,
        /// The profile to run under; empty: the request's.
        sandbox_profile: String,
        /// For a run under a networked profile: the host globs its egress gate's DNS answers
        /// as nonexistent. Empty otherwise.
        denied_hosts: Vec<String>,
    },
    /// A human must decide first.
    Pending {
        /// The recorded decision.
        decision_id: String,
        /// The approval to wait for.
        approval_id: String,
        /// When it lapses.
        expires_at: Option<SystemTime>,
    },
    /// Refused by a rule, or by a human (`approval_id` set).
    Denied {
        /// The recorded decision.
        decision_id: String,
        /// The deciding rule.
        rule_id: String,
        /// What the model is told.
        message: String,
        /// The approval a human denied; empty for a rule's denial.
        approval_id: String,
    },
    /// This `call_id` ran before.
    AlreadyExecuted {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// How it ended; `None` from an older policy service that did not say.
        outcome: Option<Box<Outcome>>,
    },
    /// This `call_id` was allowed and may still be running.
    InFlight {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// Until when its executor may report.
        lease_expires_at: Option<SystemTime>,
    },
    /// This `call_id` was allowed and its lease ran out without an outcome.
    OutcomeUnknown {
        /// The recorded decision.
        decision_id: String,
        /// The approval it consumed, if any.
        approval_id: String,
        /// When the lease ran out.
        lease_expired_at: Option<SystemTime>,
    },
}

/// An [`Authorization`] with how the policy reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizeAnswer {
    /// The answer.
    pub authorization: Authorization,
    /// Why; `None` from a policy service that sent none.
    pub explanation: Option<Explanation>,
}
