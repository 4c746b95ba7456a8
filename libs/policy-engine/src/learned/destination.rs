//! Destinations learned from approvals: an approver who answers a run's connection "always
//! allow" makes a rule for exactly that host, port and protocol, under the run's sandbox
//! profile, which turns later `net.connect` asks for it into `auto` within the rule's scope.
//!
//! Like a command rule it lifts only an `ask`, and only one asked for the reasons the
//! approved connection was (the ask-tier `[[network]]` rule ids, or the network default): a
//! connection the policy denies, or one a stricter rule added later asks about, still gets
//! that answer. Names are matched exactly, never as globs: `pypi.org` does not cover
//! `files.pythonhosted.org`, and an IP literal is never learned (the egress gate refuses
//! connections to addresses a run did not look up).

use std::collections::BTreeSet;

use toolgate_core::Tier;

use crate::call::ToolCall;
use crate::engine::{Decision, RuleMatch, RuleSource};
use crate::learned::{LearnedRule, Lifted, Pattern, Refusal, lift_to_auto};
use crate::network::Host;

/// The stored form's `kind`.
pub(crate) const KIND: &str = "destination";

/// What a rule learned from a `net.connect` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestinationPattern {
    /// The host name, lowercase without a trailing dot; matched exactly.
    pub host: String,
    /// The port.
    pub port: u16,
    /// The transport (`tcp`).
    pub protocol: String,
    /// The sandbox profile of the run whose connection was approved.
    pub profile: String,
    /// Ids of the ask-tier rules the approved connection asked for (sorted): a connection
    /// asking for any other reason is not lifted.
    pub lifts: Vec<String>,
}

impl DestinationPattern {
    /// The rule as an approver reads it.
    pub(crate) fn to_text(&self) -> String {
        let profile = if self.profile.is_empty() {
            "the executor's default"
        } else {
            &self.profile
        };
        format!(
            "connect to {}:{} ({})\n  (sandbox profile: {profile}; lifts: {})",
            self.host,
            self.port,
            self.protocol,
            self.lifts.join(", ")
        )
    }

    pub(crate) fn encode(&self) -> String {
        serde_json::json!({
            "v": 1,
            "kind": KIND,
            "host": self.host,
            "port": self.port,
            "protocol": self.protocol,
            "profile": self.profile,
            "lifts": self.lifts,
        })
        .to_string()
    }

    pub(crate) fn decode(v: &serde_json::Value) -> Result<DestinationPattern, String> {
        let text = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("{k}: expected a string"))
        };
        let host = text("host")?;
        if !matches!(Host::parse(&host), Host::Name(n) if n == host) || host.is_empty() {
            return Err(format!("host `{host}` is not a lowercase host name"));
        }
        let port = v
            .get("port")
            .and_then(serde_json::Value::as_u64)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0)
            .ok_or("port: expected 1 to 65535")?;
        let lifts = v
            .get("lifts")
            .and_then(serde_json::Value::as_array)
            .ok_or("lifts: expected a list")?
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .ok_or("lifts: expected strings")
            })
            .collect::<Result<Vec<_>, _>>()?;
        if lifts.is_empty() {
            return Err("lifts: a destination rule lifts at least one ask".into());
        }
        Ok(DestinationPattern {
            host,
            port,
            protocol: text("protocol")?,
            profile: text("profile")?,
            lifts,
        })
    }
}

/// The ask-tier rule ids of a connection's decision, sorted.
fn asks(decision: &Decision) -> Vec<String> {
    let ids: BTreeSet<&str> = decision
        .matches
        .iter()
        .filter(|m| m.tier == Tier::Ask)
        .map(|m| m.rule_id.as_str())
        .collect();
    ids.into_iter().map(str::to_owned).collect()
}

/// The narrowest rule covering the asking connection `call`.
pub(crate) fn propose(call: &ToolCall, decision: &Decision) -> Result<DestinationPattern, Refusal> {
    if decision.tier == Tier::Auto {
        return Err(Refusal::NotLearnable {
            why: "the policy already allows this destination; there is nothing to learn".into(),
        });
    }
    let raw = call.host.as_deref().unwrap_or_default();
    let host = match Host::parse(raw) {
        Host::Name(n) if !n.is_empty() && !n.contains('*') => n,
        _ => {
            return Err(Refusal::NotLearnable {
                why: format!(
                    "`{raw}` is not a host name; only named destinations are learned, add a [[network]] rule for an address to the policy"
                ),
            });
        }
    };
    let Some(port) = call
        .port
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0)
    else {
        return Err(Refusal::NotLearnable {
            why: format!("the connection to {host} names no port a rule can hold"),
        });
    };
    let lifts = asks(decision);
    if lifts.is_empty() || decision.matches.iter().any(|m| m.tier > Tier::Ask) {
        return Err(Refusal::NotLearnable {
            why: format!(
                "nothing a rule may lift asks about {host}:{port}: {}",
                decision.message
            ),
        });
    }
    Ok(DestinationPattern {
        host,
        port,
        protocol: call.protocol.clone().unwrap_or_else(|| "tcp".to_owned()),
        profile: call.sandbox_profile.clone().unwrap_or_default(),
        lifts,
    })
}

/// The first of `candidates` (usable rules for the call's host and port) that lifts
/// `decision`: same protocol and profile, and every ask one it was made for.
pub(crate) fn lifting<'a>(
    decision: &Decision,
    call: &ToolCall,
    candidates: impl Iterator<Item = &'a LearnedRule>,
) -> Option<(&'a LearnedRule, &'a DestinationPattern)> {
    if decision.matches.iter().any(|m| m.tier > Tier::Ask) {
        return None;
    }
    let asks = asks(decision);
    if asks.is_empty() {
        return None;
    }
    let protocol = call.protocol.as_deref().unwrap_or("tcp");
    let profile = call.sandbox_profile.as_deref().unwrap_or_default();
    candidates
        .filter_map(|r| match &r.pattern {
            Pattern::Destination(d) => Some((r, d)),
            Pattern::Commands(_) => None,
        })
        .find(|(_, d)| {
            d.protocol == protocol
                && d.profile == profile
                && asks.iter().all(|a| d.lifts.contains(a))
        })
}

/// Turns `decision` into the `auto` that `rule` makes it.
pub(crate) fn lift(
    decision: &mut Decision,
    rule: &LearnedRule,
    d: &DestinationPattern,
    lifted: &Lifted,
) {
    let matches = vec![RuleMatch {
        rule_id: lifted.rule_id.clone(),
        tier: Tier::Auto,
        reason: format!(
            "learned from approval {} by {}: connect to {}:{} ({})",
            rule.source_approval, rule.created_by, d.host, d.port, d.protocol
        ),
        source: RuleSource::User,
        contained: None,
    }];
    lift_to_auto(decision, matches, lifted);
}
