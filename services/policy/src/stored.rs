//! The JSON texts the ledger stores (redacted) and their way back onto the wire.
//!
//! The request is stored as the canonical digest JSON (the same text whose sha256 the
//! approval is bound to, before redaction); the explanation as the engine's
//! `toolgate check --json` object plus the agent's free-text `description`. Both are
//! readable by an auditor with `psql`, and both decode into the wire messages that
//! `GetApproval` returns.

use std::collections::BTreeMap;

use serde_json::Value;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::{tier_to_wire, tool_call_from_wire, tool_to_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_core::{Tier, ToolKind};
use toolgate_policy_engine::{Decision, ToolCall, render};

/// The explanation JSON stored with an approval. The executor's workspace `labels` are kept
/// too (when it sent any): a rule learned from the approval with workspace scope is bound
/// to them.
pub(crate) fn explanation_json(
    decision: &Decision,
    description: &str,
    labels: &BTreeMap<String, String>,
) -> String {
    let mut v = render::to_json(decision, None);
    if let Some(obj) = v.as_object_mut() {
        if !description.is_empty() {
            obj.insert("description".to_owned(), Value::from(description));
        }
        if !labels.is_empty() {
            obj.insert(
                "labels".to_owned(),
                Value::Object(
                    labels
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                        .collect(),
                ),
            );
        }
    }
    v.to_string()
}

/// The workspace labels stored with an approval's explanation (none for rows written before
/// they were kept).
pub(crate) fn labels_from_json(json: &str) -> BTreeMap<String, String> {
    serde_json::from_str::<Value>(json)
        .map(|v| strings(&v, "labels"))
        .unwrap_or_default()
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn texts(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn tier(v: &Value, key: &str) -> i32 {
    v.get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Tier>().ok())
        .map_or(common::Tier::Unspecified as i32, |t| tier_to_wire(t) as i32)
}

fn rule_source(s: &str) -> pb::RuleSource {
    match s {
        "baseline" => pb::RuleSource::Baseline,
        "user" => pb::RuleSource::User,
        "default" => pb::RuleSource::Default,
        "sandbox" => pb::RuleSource::Sandbox,
        _ => pb::RuleSource::Unspecified,
    }
}

fn access(s: &str) -> pb::PathAccess {
    match s {
        "read" => pb::PathAccess::Read,
        "write" => pb::PathAccess::Write,
        _ => pb::PathAccess::Unspecified,
    }
}

fn list<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// Decodes a stored explanation into the wire form and the agent's description.
///
/// `None` when the text is not an explanation object (a row written by something else).
pub(crate) fn explanation_from_json(json: &str) -> Option<(pb::Explanation, String)> {
    let v: Value = serde_json::from_str(json).ok()?;
    v.as_object()?;
    let explanation = pb::Explanation {
        tier: tier(&v, "decision"),
        matches: list(&v, "rules")
            .map(|m| pb::RuleMatch {
                rule_id: text(m, "id"),
                tier: tier(m, "decision"),
                reason: text(m, "reason"),
                source: rule_source(&text(m, "source")) as i32,
                contained_by: text(m, "contained_by"),
                contained_tier: tier(m, "contained_tier"),
            })
            .collect(),
        commands: list(&v, "commands")
            .map(|c| pb::CommandExplanation {
                argv: texts(c, "argv"),
                tier: tier(c, "decision"),
                rule_ids: texts(c, "rules"),
                fully_analyzed: c
                    .get("fully_analyzed")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                notes: texts(c, "notes"),
            })
            .collect(),
        paths: list(&v, "paths")
            .map(|p| pb::PathExplanation {
                path: text(p, "path"),
                access: access(&text(p, "access")) as i32,
                tier: tier(p, "decision"),
                rule_ids: texts(p, "rules"),
            })
            .collect(),
        policy_version: text(&v, "policy_version"),
        message: text(&v, "message"),
    };
    Some((explanation, text(&v, "description")))
}

/// The object of strings under `key` (`env`, `bound_files`), empty when absent.
fn strings<M: FromIterator<(String, String)>>(v: &Value, key: &str) -> M {
    v.get(key)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, x)| Some((k.clone(), x.as_str()?.to_owned())))
        .collect()
}

/// The domain call an approval stored, for the policy core (which never sees the wire types):
/// `None` when the JSON is not a stored call, `Err` when it is one no longer valid.
pub(crate) fn call_from_json(json: &str) -> Option<Result<ToolCall, String>> {
    tool_call_from_json(json)
        .map(|c| tool_call_from_wire(c).map_err(|(field, message)| format!("{field}: {message}")))
}

/// Decodes a stored canonical request into the wire `ToolCall` (secrets already redacted).
///
/// `None` when the text is not a canonical request.
pub(crate) fn tool_call_from_json(json: &str) -> Option<pb::ToolCall> {
    let v: Value = serde_json::from_str(json).ok()?;
    let tool: ToolKind = v.get("tool")?.as_str()?.parse().ok()?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let b = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    Some(pb::ToolCall {
        tool: tool_to_wire(tool) as i32,
        path: s("path"),
        content_sha256: s("content_sha256"),
        content_size: n("content_size"),
        edit_old_sha256: s("edit_old_sha256"),
        edit_new_sha256: s("edit_new_sha256"),
        expected_occurrences: n("expected_occurrences").and_then(|x| u32::try_from(x).ok()),
        recursive: b("recursive"),
        pattern: s("pattern"),
        globs: texts(&v, "globs"),
        argv: texts(&v, "argv"),
        script: s("script"),
        cwd: s("cwd"),
        env: strings(&v, "env"),
        stdin_sha256: s("stdin_sha256"),
        timeout_ms: n("timeout_ms"),
        stdout_cap_bytes: n("stdout_cap_bytes"),
        stderr_cap_bytes: n("stderr_cap_bytes"),
        kill_on_cap: b("kill_on_cap"),
        background: b("background"),
        sandbox_profile: s("sandbox_profile"),
        bound_files: strings(&v, "bound_files"),
        host: s("host"),
        port: n("port").and_then(|x| u32::try_from(x).ok()),
        protocol: s("protocol"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_policy_engine::digest::canonical_json;
    use toolgate_policy_engine::{CallContext, Policy, ToolCall};

    #[test]
    fn a_request_round_trips_through_its_canonical_json() {
        let mut call = ToolCall::new(ToolKind::ProcessRun);
        call.script = Some("terraform apply && rm -rf build".into());
        call.cwd = Some("infra".into());
        call.env.insert("TF_LOG".into(), "debug".into());
        call.timeout_ms = Some(5_000);
        call.kill_on_cap = true;
        call.background = true;
        call.sandbox_profile = Some("workspace-write".into());
        call.bound_files
            .insert("infra/apply.sh".into(), "ab".repeat(32));
        let json = canonical_json(&call, "s1", "agent-1", "v1");
        let wire = tool_call_from_json(&json).unwrap();
        let back = crate::wire::tool_call(Some(wire)).unwrap();
        assert_eq!(back, call);
        assert!(tool_call_from_json("not json").is_none());
    }

    #[test]
    fn an_explanation_round_trips_with_its_description() {
        let policy = Policy::builtin_default();
        let mut call = ToolCall::new(ToolKind::ProcessRun);
        call.script = Some("echo hi > out.txt; git push --force".into());
        let ctx = CallContext {
            session_id: "s".into(),
            principal: "p".into(),
            labels: Default::default(),
        };
        let d = policy.classify(&call, &ctx);
        let stored = explanation_json(&d, "push my branch", &BTreeMap::new());
        let (e, description) = explanation_from_json(&stored).unwrap();
        assert_eq!(e, crate::wire::explanation(&d));
        assert_eq!(description, "push my branch");
        assert!(labels_from_json(&stored).is_empty());
        // The workspace labels ride along, for rules learned with workspace scope.
        let labels = BTreeMap::from([("team".to_owned(), "web".to_owned())]);
        let stored = explanation_json(&d, "", &labels);
        assert_eq!(labels_from_json(&stored), labels);
        assert_eq!(explanation_from_json(&stored).unwrap().0, e);
    }
}
