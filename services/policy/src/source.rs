//! Where the policy in force comes from: a watched file or the shipped default. Shared by
//! the core and the adapters, so it lives in neither.

use std::sync::Arc;

use toolgate_policy_engine::Policy;

/// Where the policy in force comes from: a watched file or the shipped default.
#[derive(Debug, Clone)]
pub enum PolicySource {
    /// A document on disk, reloaded on change and on SIGHUP.
    File(Arc<toolgate_policy_engine::PolicyFile>),
    /// The shipped default policy.
    Builtin(Arc<Policy>),
}

impl PolicySource {
    /// The policy in force now.
    pub fn current(&self) -> Arc<Policy> {
        match self {
            PolicySource::File(f) => f.current(),
            PolicySource::Builtin(p) => p.clone(),
        }
    }

    /// A path, or `builtin`.
    pub fn describe(&self) -> String {
        match self {
            PolicySource::File(f) => f.path().display().to_string(),
            PolicySource::Builtin(_) => "builtin".into(),
        }
    }
}
