//! `toolgate check` and `toolgate policy validate` output.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};
use toolgate_core::Tier;

use crate::document::Error;
use crate::engine::{Decision, Policy, RuleSource};
use crate::profile::DecidedProfile;

/// Renders a decision as the one JSON object `toolgate check --json` prints.
///
/// Top-level `decision` is `auto`, `ask` or `deny`; `rules`, `commands` and `paths` explain
/// it; `digest` is included when given.
pub fn to_json(d: &Decision, digest: Option<&str>) -> Value {
    let mut v = json!({
        "decision": d.tier.as_str(),
        "message": d.message,
        "policy_version": d.policy_version,
        "rules": d.matches.iter().map(|m| {
            let mut r = json!({
                "id": m.rule_id,
                "decision": m.tier.as_str(),
                "reason": m.reason,
                "source": m.source.as_str(),
            });
            if let (Some((profile, tier)), Some(obj)) = (&m.contained, r.as_object_mut()) {
                obj.insert("contained_by".to_owned(), Value::from(profile.as_str()));
                obj.insert("contained_tier".to_owned(), Value::from(tier.as_str()));
            }
            r
        }).collect::<Vec<_>>(),
        "commands": d.commands.iter().map(|c| json!({
            "argv": c.argv,
            "decision": c.tier.as_str(),
            "rules": c.rule_ids,
            "fully_analyzed": c.fully_analyzed,
            "notes": c.notes,
        })).collect::<Vec<_>>(),
        "paths": d.paths.iter().map(|p| json!({
            "path": p.path,
            "access": p.access.as_str(),
            "decision": p.tier.as_str(),
            "rules": p.rule_ids,
        })).collect::<Vec<_>>(),
    });
    if let (Some(p), Some(obj)) = (&d.profile, v.as_object_mut()) {
        obj.insert("profile".to_owned(), profile_json(p));
    }
    if let (Some(digest), Some(obj)) = (digest, v.as_object_mut()) {
        obj.insert("digest".to_owned(), Value::from(digest));
    }
    v
}

fn profile_json(p: &DecidedProfile) -> Value {
    json!({
        "name": p.name,
        "known": p.known,
        "confined": p.guarantees.confined,
        "network": p.guarantees.network,
        "egress_gated": p.guarantees.egress_gated,
        "read_only_workspace": p.guarantees.read_only_workspace,
    })
}

/// One line about the profile a run was decided under.
fn profile_line(p: &DecidedProfile) -> String {
    let name = p.name.as_deref().unwrap_or("(none named)");
    if !p.known {
        format!(
            "{name}: unknown to this policy, so no guarantee is assumed (decided as unconfined)"
        )
    } else {
        format!("{name}: {}", p.guarantees.describe())
    }
}

/// Why a rule id in a command's or path's list counts as it does: `(contained)` after the
/// ids the profile contained.
fn rule_ids_text(d: &Decision, ids: &[String]) -> String {
    ids.iter()
        .map(|id| {
            if d.matches
                .iter()
                .any(|m| &m.rule_id == id && m.contained.is_some())
            {
                format!("{id} (contained)")
            } else {
                id.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%^".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Renders a decision as the readable table `toolgate check` prints without `--json`.
pub fn to_text(d: &Decision, digest: Option<&str>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "decision: {}", d.tier.as_str().to_uppercase());
    let _ = writeln!(out, "message:  {}", d.message);
    if let Some(p) = &d.profile {
        let _ = writeln!(out, "profile:  {}", profile_line(p));
    }
    if !d.commands.is_empty() {
        let _ = writeln!(out, "\n{:<6}  {:<40}  rules", "tier", "command");
        for c in &d.commands {
            let argv = c
                .argv
                .iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                out,
                "{:<6}  {:<40}  {}",
                c.tier.as_str(),
                argv,
                rule_ids_text(d, &c.rule_ids)
            );
            for n in &c.notes {
                let _ = writeln!(out, "{:<6}    note: {n}", "");
            }
            if !c.fully_analyzed {
                let _ = writeln!(out, "{:<6}    not fully analysed", "");
            }
        }
    }
    if !d.paths.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<6}  {:<6}  {:<32}  rules",
            "tier", "access", "path"
        );
        for p in &d.paths {
            let _ = writeln!(
                out,
                "{:<6}  {:<6}  {:<32}  {}",
                p.tier.as_str(),
                p.access.as_str(),
                p.path,
                rule_ids_text(d, &p.rule_ids)
            );
        }
    }
    let _ = writeln!(
        out,
        "\n{:<6}  {:<9}  {:<36}  reason",
        "tier", "source", "rule"
    );
    for m in &d.matches {
        let reason = match &m.contained {
            Some((profile, t)) => format!(
                "{} [{t} without the sandbox; contained by the {profile} sandbox]",
                m.reason
            ),
            None => m.reason.clone(),
        };
        let _ = writeln!(
            out,
            "{:<6}  {:<9}  {:<36}  {}",
            m.tier.as_str(),
            m.source.as_str(),
            m.rule_id,
            reason
        );
    }
    let _ = writeln!(out, "\npolicy version: {}", d.policy_version);
    if let Some(digest) = digest {
        let _ = writeln!(out, "request digest: {digest}");
    }
    out
}

/// Renders a decision as `toolgate policy explain` prints it: for each command and path,
/// its tier and, rule by rule, why — which sandbox guarantee made it auto, or what asks.
pub fn explain_text(d: &Decision) -> String {
    let mut out = String::new();
    if let Some(p) = &d.profile {
        let _ = writeln!(out, "profile:  {}", profile_line(p));
    }
    let _ = writeln!(out, "decision: {}", d.tier.as_str().to_uppercase());
    let _ = writeln!(out, "message:  {}", d.message);
    let why = |out: &mut String, ids: &[String]| {
        for id in ids {
            let Some(m) = d.matches.iter().find(|m| &m.rule_id == id) else {
                continue;
            };
            let line = match &m.contained {
                Some((profile, t)) => format!(
                    "auto  {id}: contained by the {profile} sandbox (it would be {t} without it: {})",
                    m.reason
                ),
                None => format!("{:<4}  {id}: {}", m.tier.as_str(), m.reason),
            };
            let _ = writeln!(out, "          {line}");
        }
    };
    for c in &d.commands {
        let argv = c
            .argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(out, "\n{:<6}  {argv}", c.tier.as_str());
        why(&mut out, &c.rule_ids);
    }
    for p in d
        .paths
        .iter()
        .filter(|p| p.tier != Tier::Auto || p.rule_ids.iter().any(|i| i.starts_with("sandbox.")))
    {
        let _ = writeln!(
            out,
            "\n{:<6}  {} {}",
            p.tier.as_str(),
            p.access.as_str(),
            p.path
        );
        why(&mut out, &p.rule_ids);
    }
    if d.commands.is_empty() && d.paths.is_empty() {
        // A call decided as a whole (a `net.connect`): every rule that matched it.
        let ids: Vec<String> = d.matches.iter().map(|m| m.rule_id.clone()).collect();
        let _ = writeln!(out, "\n{:<6}  the whole call", d.tier.as_str());
        why(&mut out, &ids);
    }
    let _ = writeln!(out, "\npolicy version: {}", d.policy_version);
    out
}

/// What `toolgate policy validate` reports for a valid document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationReport {
    /// The policy version (sha256 of the normalised document).
    pub version: String,
    /// Number of user rules.
    pub rules: usize,
    /// Number of user rules per tier (auto, ask, deny).
    pub by_tier: [usize; 3],
    /// The default tier.
    pub default: Tier,
    /// Whether the read-only allowlist is enabled.
    pub safe_commands: bool,
}

impl std::fmt::Display for ValidationReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "policy ok: version {}, {} rules ({} auto, {} ask, {} deny), default {}, safe commands {}; all examples pass",
            self.version,
            self.rules,
            self.by_tier[0],
            self.by_tier[1],
            self.by_tier[2],
            self.default,
            if self.safe_commands { "on" } else { "off" },
        )
    }
}

/// Loads and checks a policy file (syntax, rules, examples).
pub fn validate(path: &Path) -> Result<ValidationReport, Error> {
    let policy = Policy::load(path)?;
    Ok(report(&policy))
}

/// The report for an already loaded policy.
pub fn report(policy: &Policy) -> ValidationReport {
    let mut by_tier = [0; 3];
    for r in policy
        .summary()
        .iter()
        .filter(|r| r.source == RuleSource::User)
    {
        by_tier[r.tier as usize] += 1;
    }
    ValidationReport {
        version: policy.version().to_owned(),
        rules: policy.rule_count(),
        by_tier,
        default: policy.default_tier(),
        safe_commands: policy.safe_commands(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CallContext, ToolCall, request_digest};

    #[test]
    fn json_has_a_top_level_decision_and_the_explanation() {
        let p = Policy::builtin_default();
        let call = ToolCall::script("ls && rm -rf build");
        let d = p.classify(&call, &CallContext::default());
        let digest = request_digest(&call, "s", "p", p.version());
        let v = to_json(&d, Some(&digest));
        assert_eq!(v["decision"], "ask");
        assert_eq!(v["digest"], digest.as_str());
        assert_eq!(v["policy_version"], p.version());
        assert_eq!(
            v["commands"][1]["argv"],
            serde_json::json!(["rm", "-rf", "build"])
        );
        assert_eq!(v["commands"][1]["decision"], "ask");
        assert_eq!(v["commands"][0]["decision"], "auto");
        assert!(
            v["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["id"] == "baseline.rm-recursive-or-forced" && r["source"] == "baseline")
        );
        assert_eq!(v["paths"][0]["path"], "build");
    }

    #[test]
    fn text_table_names_commands_and_rules() {
        let p = Policy::builtin_default();
        let d = p.classify(
            &ToolCall::script("ls && rm -rf 'my build'"),
            &CallContext::default(),
        );
        let t = to_text(&d, None);
        assert!(t.starts_with("decision: ASK\n"), "{t}");
        assert!(t.contains("rm -rf 'my build'"), "{t}");
        assert!(t.contains("baseline.rm-recursive-or-forced"), "{t}");
        assert!(
            t.contains(&format!("policy version: {}", p.version())),
            "{t}"
        );
    }

    #[test]
    fn the_shipped_default_policy_is_valid() {
        let p = Policy::from_toml(crate::DEFAULT_POLICY_TOML).unwrap();
        let r = report(&p);
        assert_eq!((r.default, r.safe_commands), (Tier::Ask, true));
        assert!(r.rules >= 4);
    }
}
