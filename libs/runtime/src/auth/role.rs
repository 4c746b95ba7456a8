//! The roles a credential can have. A leaf of its own: the transport's TLS settings name
//! the roles that must present a client certificate, and authentication reads the
//! transport's connection info, so neither may import the other's module for this.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An AI agent (through its orchestrator): calls executors, asks the policy for itself.
    Agent,
    /// An executor pod: authorizes calls on behalf of agents and reports outcomes.
    Executor,
    /// A human who reads and decides approvals.
    Approver,
    /// An operator: everything an approver may do, plus administration.
    Admin,
}

impl Role {
    /// The lowercase name used in configuration and messages.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Executor => "executor",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
