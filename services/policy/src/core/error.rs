//! [`PolicyError`]: why the core refused or failed a request, in domain terms. The adapters
//! map it to a status (code, message, `ErrorInfo`) in one place, [`crate::wire::status`].

use toolgate_core::{Code, Reason, ReasonedError};
use toolgate_ledger::{self as ledger, ApprovalId};
use toolgate_runtime::auth::NotPermitted;

/// Why [`crate::PolicyCore`] did not answer a request.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A request field is malformed; the message names the field.
    #[error("{message}")]
    Invalid {
        /// The wire field, as a client spells it (`context.call_id`).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The caller's role may not call the method.
    #[error(transparent)]
    RoleNotPermitted(#[from] NotPermitted),
    /// An agent acted on an approval another principal asked for.
    #[error(
        "{principal} is an agent; {method} on approval {approval_id} is allowed only to the \
         principal that asked, an executor, or an approver"
    )]
    NotRequester {
        /// The agent.
        principal: String,
        /// The method it called.
        method: &'static str,
        /// The approval it named.
        approval_id: ApprovalId,
    },
    /// The ledger refused or failed.
    #[error(transparent)]
    Ledger(#[from] ledger::Error),
    /// No rule may be learned from this approval.
    #[error("{0}")]
    Rule(#[from] toolgate_policy_engine::learned::Refusal),
    /// The policy produced a value the ledger refuses: a bug, never the caller's fault.
    #[error("internal: {0}")]
    Internal(String),
}

impl PolicyError {
    /// An invalid `field`.
    pub(crate) fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        PolicyError::Invalid {
            field,
            message: message.into(),
        }
    }

    /// Whether this is the ledger's database failing (not a refusal): what the
    /// ledger-write-errors alert counts and what gets logged.
    pub fn is_failure(&self) -> bool {
        matches!(self.reason().code(), Code::Unavailable | Code::Internal)
    }
}

impl ReasonedError for PolicyError {
    fn reason(&self) -> Reason {
        match self {
            PolicyError::Invalid { .. } => Reason::InvalidRequest,
            PolicyError::RoleNotPermitted(e) => e.reason(),
            PolicyError::NotRequester { .. } => Reason::RoleNotPermitted,
            PolicyError::Ledger(e) => e.reason(),
            PolicyError::Rule(r) => {
                use toolgate_policy_engine::learned::Refusal as R;
                match r {
                    R::Denied { .. } | R::NotLearnable { .. } => Reason::RuleNotLearnable,
                    R::NotAnalyzed { .. } => Reason::RuleNotAnalyzed,
                    R::BannedPrefix { .. } => Reason::RuleBannedPrefix,
                    R::TooBroad { .. } => Reason::RuleTooBroad,
                    R::FlipsCase { .. } => Reason::RuleFlipsCase,
                }
            }
            PolicyError::Internal(_) => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            PolicyError::Invalid { field, .. } => vec![("field", (*field).to_owned())],
            PolicyError::RoleNotPermitted(e) => e.metadata(),
            PolicyError::NotRequester {
                principal,
                approval_id,
                ..
            } => vec![
                ("principal", principal.clone()),
                ("approval_id", approval_id.as_str().to_owned()),
            ],
            PolicyError::Ledger(e) => e.metadata(),
            PolicyError::Rule(r) => {
                use toolgate_policy_engine::learned::Refusal as R;
                match r {
                    R::Denied { rule } => vec![("rule_id", rule.clone())],
                    R::NotLearnable { .. } => Vec::new(),
                    R::NotAnalyzed { command, .. } | R::TooBroad { command, .. } => {
                        vec![("command", command.clone())]
                    }
                    R::BannedPrefix {
                        command, prefix, ..
                    } => vec![("command", command.clone()), ("prefix", prefix.clone())],
                    R::FlipsCase { origin, case, .. } => {
                        vec![("case", case.clone()), ("source", (*origin).to_owned())]
                    }
                }
            }
            PolicyError::Internal(_) => Vec::new(),
        }
    }
}
