//! Policy documents, shell-aware classification and request digests.
//!
//! [`Policy`] is the decision point's brain: load a TOML document ([`Policy::from_toml`],
//! [`Policy::load`], or [`Policy::builtin_default`]), then [`Policy::classify`] a
//! [`ToolCall`] in a [`CallContext`]. [`request_digest`] is the canonical hash approvals are
//! bound to; [`render`] prints decisions for `toolgate check`; [`PolicyFile`] reloads a file
//! on change while keeping the last good version in force.

mod access;
mod argv;
pub mod baseline;
pub mod call;
mod compute;
pub mod digest;
pub mod document;
pub mod engine;
mod error;
pub mod learned;
mod memo;
pub mod network;
pub mod paths;
pub mod profile;
mod quoting;
pub mod reload;
pub mod render;
mod rule_fields;
pub mod shell;

pub use call::{CallContext, ToolCall};
pub use digest::request_digest;
pub use document::Error;
pub use engine::{
    CommandExplanation, DEFAULT_POLICY_TOML, Decision, PathExplanation, Policy, RuleMatch,
    RuleSource, RuleSummary,
};
pub use paths::Access;
pub use profile::{DecidedProfile, Guarantees};
pub use reload::{PolicyFile, Watcher};
pub use render::{ValidationReport, explain_text, to_json, to_text, validate};
