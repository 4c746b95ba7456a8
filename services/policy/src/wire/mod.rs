//! Wire ↔ domain conversions for the policy surfaces: requests are parsed and validated
//! here (`requests`), answers become wire messages here (`answers`), and [`status`] is the
//! one place a [`PolicyError`] becomes a gRPC status.

mod answers;
mod requests;
mod sessions;

use tonic::Status;
use toolgate_contracts::convert::{tier_to_wire, tool_call_from_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::status as wire_status;
use toolgate_core::ReasonedError;
use toolgate_policy_engine::{Access, Decision, RuleSource, ToolCall};

pub(crate) use answers::*;
pub(crate) use requests::*;
pub(crate) use sessions::*;

use crate::core::PolicyError;

/// The status a client gets for `e`; database failures and bugs are logged here, once.
// By value so it reads as `.map_err(status)`.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn status(e: PolicyError) -> Status {
    if e.is_failure() {
        tracing::error!(error = %e, reason = %e.reason(), "policy request failed");
    }
    wire_status::from_error(&e)
}

/// Parses a wire `ToolCall` into the engine's; unknown tool kinds die here.
pub(crate) fn tool_call(call: Option<pb::ToolCall>) -> Result<ToolCall, PolicyError> {
    let c = call.ok_or_else(|| PolicyError::invalid("call", "call is required"))?;
    tool_call_from_wire(c).map_err(|(field, message)| PolicyError::invalid(field, message))
}

/// The wire rule source.
pub(crate) fn source(s: RuleSource) -> pb::RuleSource {
    match s {
        RuleSource::Baseline => pb::RuleSource::Baseline,
        RuleSource::User => pb::RuleSource::User,
        RuleSource::Default => pb::RuleSource::Default,
        RuleSource::Sandbox => pb::RuleSource::Sandbox,
    }
}

/// The wire explanation of a decision.
pub(crate) fn explanation(d: &Decision) -> pb::Explanation {
    into_explanation(d.clone())
}

/// [`explanation`] for a decision no longer needed: its strings move instead of being copied.
pub(crate) fn into_explanation(d: Decision) -> pb::Explanation {
    pb::Explanation {
        tier: tier_to_wire(d.tier) as i32,
        matches: d
            .matches
            .into_iter()
            .map(|m| {
                let (contained_by, contained_tier) = match m.contained {
                    Some((profile, t)) => (profile, tier_to_wire(t) as i32),
                    None => (String::new(), 0),
                };
                pb::RuleMatch {
                    rule_id: m.rule_id,
                    tier: tier_to_wire(m.tier) as i32,
                    reason: m.reason,
                    source: source(m.source) as i32,
                    contained_by,
                    contained_tier,
                }
            })
            .collect(),
        commands: d
            .commands
            .into_iter()
            .map(|c| pb::CommandExplanation {
                argv: c.argv,
                tier: tier_to_wire(c.tier) as i32,
                rule_ids: c.rule_ids,
                fully_analyzed: c.fully_analyzed,
                notes: c.notes,
            })
            .collect(),
        paths: d
            .paths
            .into_iter()
            .map(|p| pb::PathExplanation {
                path: p.path,
                access: match p.access {
                    Access::Read => pb::PathAccess::Read,
                    Access::Write => pb::PathAccess::Write,
                } as i32,
                tier: tier_to_wire(p.tier) as i32,
                rule_ids: p.rule_ids,
            })
            .collect(),
        policy_version: d.policy_version,
        message: d.message,
    }
}
