//! The domain form of a tool call and its context, as the policy sees them.

use std::collections::BTreeMap;

pub use toolgate_core::ToolCall;

/// Who makes the call and where: the selectors `sessions`, `principals` and `labels` match it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallContext {
    /// The agent session.
    pub session_id: String,
    /// The authenticated principal acting.
    pub principal: String,
    /// Workspace labels (`env = "prod"`).
    pub labels: BTreeMap<String, String>,
}
