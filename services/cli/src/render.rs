//! How approvals look on a terminal and as JSON.

use std::fmt::Write as _;

use serde_json::{Value, json};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::{tier_from_wire, tool_from_wire};
use toolgate_contracts::policy::v1 as pb;

/// `pending`, `approved`, ...
pub(crate) fn state(v: i32) -> String {
    pb::ApprovalState::try_from(v).map_or_else(
        |_| format!("state({v})"),
        |s| {
            s.as_str_name()
                .trim_start_matches("APPROVAL_STATE_")
                .to_ascii_lowercase()
        },
    )
}

/// `once` or `session`.
pub(crate) fn scope(v: i32) -> String {
    match pb::ApprovalScope::try_from(v) {
        Ok(pb::ApprovalScope::Session) => "session".into(),
        _ => "once".into(),
    }
}

/// `created`, `updated`, `snapshot`.
pub(crate) fn event_kind(v: i32) -> String {
    pb::ApprovalEventKind::try_from(v).map_or_else(
        |_| format!("kind({v})"),
        |s| {
            s.as_str_name()
                .trim_start_matches("APPROVAL_EVENT_KIND_")
                .to_ascii_lowercase()
        },
    )
}

/// `auto`, `ask`, `deny`.
pub(crate) fn tier(v: i32) -> String {
    tier_from_wire(v).map_or_else(|| "unspecified".into(), |t| t.as_str().to_owned())
}

/// `fs.write`, `process.run`, ...
pub(crate) fn tool(v: i32) -> String {
    tool_from_wire(v).map_or_else(|| "unspecified".into(), |t| t.as_str().to_owned())
}

fn source(v: i32) -> &'static str {
    match pb::RuleSource::try_from(v) {
        Ok(pb::RuleSource::Baseline) => "baseline",
        Ok(pb::RuleSource::User) => "user",
        Ok(pb::RuleSource::Default) => "default",
        _ => "unspecified",
    }
}

fn access(v: i32) -> &'static str {
    match pb::PathAccess::try_from(v) {
        Ok(pb::PathAccess::Read) => "read",
        Ok(pb::PathAccess::Write) => "write",
        _ => "unspecified",
    }
}

/// RFC 3339, or empty when unset.
pub(crate) fn time(t: Option<&prost_types::Timestamp>) -> String {
    t.map(ToString::to_string).unwrap_or_default()
}

/// A word as a shell would need it quoted, for showing argv.
fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        w.to_owned()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// What the call does, in one line: the script, the argv, or the path.
pub(crate) fn summary(call: Option<&pb::ToolCall>) -> String {
    let Some(c) = call else {
        return String::new();
    };
    let what = if let Some(s) = &c.script {
        s.clone()
    } else if !c.argv.is_empty() {
        c.argv
            .iter()
            .map(|w| shell_word(w))
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        c.path.clone().unwrap_or_default()
    };
    format!("{} {}", tool(c.tool), what.replace('\n', "⏎"))
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// The `approvals list` table.
pub(crate) fn table(approvals: &[pb::Approval]) -> String {
    let mut out = format!(
        "{:<36}  {:<9}  {:<20}  {:<16}  {:<16}  {}\n",
        "ID", "STATE", "CREATED", "SESSION", "PRINCIPAL", "CALL"
    );
    for a in approvals {
        let created = time(a.created_at.as_ref());
        let _ = writeln!(
            out,
            "{:<36}  {:<9}  {:<20}  {:<16}  {:<16}  {}",
            a.approval_id,
            state(a.state),
            clip(&created, 20),
            clip(&a.session_id, 16),
            clip(&a.principal, 16),
            clip(&summary(a.call.as_ref()), 70)
        );
    }
    out
}

/// One `approvals watch` line: cursor, kind, id, state, session, principal and the call.
pub(crate) fn watch_line(ev: &pb::WatchApprovalsResponse) -> String {
    let (id, st, session, principal, call) =
        ev.approval.as_ref().map_or_else(Default::default, |a| {
            (
                a.approval_id.clone(),
                state(a.state),
                a.session_id.clone(),
                a.principal.clone(),
                summary(a.call.as_ref()),
            )
        });
    format!(
        "{} {} {id} {st} session={session} principal={principal} {call}",
        ev.cursor,
        event_kind(ev.kind)
    )
}

/// The full explanation an approver reads before deciding.
pub(crate) fn show(a: &pb::Approval) -> String {
    let mut o = String::new();
    let mut field = |k: &str, v: &str| {
        if !v.is_empty() {
            let _ = writeln!(o, "{k:<12}{v}");
        }
    };
    field("approval", &a.approval_id);
    field("state", &state(a.state));
    field("session", &a.session_id);
    field("principal", &a.principal);
    field("call id", &a.call_id);
    if let Some(c) = &a.call {
        field("tool", &tool(c.tool));
        if let Some(s) = &c.script {
            field("script", s);
        }
        if !c.argv.is_empty() {
            let argv: Vec<_> = c.argv.iter().map(|w| shell_word(w)).collect();
            field("argv", &argv.join(" "));
        }
        field("path", c.path.as_deref().unwrap_or_default());
        field("cwd", c.cwd.as_deref().unwrap_or_default());
        if c.content_size.is_some() || c.content_sha256.is_some() {
            field(
                "content",
                &format!(
                    "{} bytes, sha256 {}",
                    c.content_size.unwrap_or_default(),
                    c.content_sha256.as_deref().unwrap_or("?")
                ),
            );
        }
        if c.edit_old_sha256.is_some() {
            field(
                "edit",
                &format!(
                    "replace sha256 {} with sha256 {} ({} occurrence(s))",
                    c.edit_old_sha256.as_deref().unwrap_or_default(),
                    c.edit_new_sha256.as_deref().unwrap_or_default(),
                    c.expected_occurrences.unwrap_or(1)
                ),
            );
        }
        if !c.env.is_empty() {
            let mut env: Vec<_> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            env.sort();
            field("env", &env.join(" "));
        }
        field("stdin", c.stdin_sha256.as_deref().unwrap_or_default());
        if let Some(t) = c.timeout_ms {
            field("timeout", &format!("{t} ms"));
        }
        field("sandbox", c.sandbox_profile.as_deref().unwrap_or_default());
    }
    field("description", &a.description);
    field("digest", &a.request_digest);
    field("policy", &a.policy_version);
    field("created", &time(a.created_at.as_ref()));
    field("expires", &time(a.expires_at.as_ref()));
    field("trace", &a.trace_id);
    if !a.decided_by.is_empty() {
        field(
            "decided",
            &format!("by {} at {}", a.decided_by, time(a.decided_at.as_ref())),
        );
        field("scope", &scope(a.scope));
    }
    field("reason", &a.reason);
    field("message", &a.message_to_model);
    if !a.consumed_decision_id.is_empty() || !a.consumed_by.is_empty() {
        field(
            "consumed",
            &format!(
                "by {} at {} (decision {})",
                a.consumed_by,
                time(a.consumed_at.as_ref()),
                a.consumed_decision_id
            ),
        );
    }
    if let Some(e) = &a.explanation {
        explanation(&mut o, e);
    }
    o
}

fn explanation(o: &mut String, e: &pb::Explanation) {
    let _ = writeln!(o, "{:<12}{}", "decision", tier(e.tier));
    if !e.message.is_empty() {
        let _ = writeln!(o, "{:<12}{}", "why", e.message);
    }
    if !e.matches.is_empty() {
        let _ = writeln!(o, "rules:");
        for m in &e.matches {
            let _ = writeln!(
                o,
                "  [{}] {} ({}): {}",
                tier(m.tier),
                m.rule_id,
                source(m.source),
                m.reason
            );
        }
    }
    if !e.commands.is_empty() {
        let _ = writeln!(o, "commands:");
        for c in &e.commands {
            let argv: Vec<_> = c.argv.iter().map(|w| shell_word(w)).collect();
            let _ = write!(o, "  [{}] {}", tier(c.tier), argv.join(" "));
            if !c.rule_ids.is_empty() {
                let _ = write!(o, "  rules: {}", c.rule_ids.join(", "));
            }
            if !c.fully_analyzed {
                let _ = write!(o, "  (not fully analysed)");
            }
            o.push('\n');
            for n in &c.notes {
                let _ = writeln!(o, "      note: {n}");
            }
        }
    }
    if !e.paths.is_empty() {
        let _ = writeln!(o, "paths:");
        for p in &e.paths {
            let _ = write!(o, "  [{}] {} {}", tier(p.tier), access(p.access), p.path);
            if !p.rule_ids.is_empty() {
                let _ = write!(o, "  rules: {}", p.rule_ids.join(", "));
            }
            o.push('\n');
        }
    }
}

fn opt<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or(Value::Null, Into::into)
}

fn call_json(c: &pb::ToolCall) -> Value {
    json!({
        "tool": tool(c.tool),
        "path": opt(c.path.clone()),
        "content_sha256": opt(c.content_sha256.clone()),
        "content_size": opt(c.content_size),
        "edit_old_sha256": opt(c.edit_old_sha256.clone()),
        "edit_new_sha256": opt(c.edit_new_sha256.clone()),
        "expected_occurrences": opt(c.expected_occurrences),
        "recursive": c.recursive,
        "pattern": opt(c.pattern.clone()),
        "globs": c.globs,
        "argv": c.argv,
        "script": opt(c.script.clone()),
        "cwd": opt(c.cwd.clone()),
        "env": c.env,
        "stdin_sha256": opt(c.stdin_sha256.clone()),
        "timeout_ms": opt(c.timeout_ms),
        "sandbox_profile": opt(c.sandbox_profile.clone()),
    })
}

fn explanation_json(e: &pb::Explanation) -> Value {
    json!({
        "tier": tier(e.tier),
        "message": e.message,
        "policy_version": e.policy_version,
        "matches": e.matches.iter().map(|m| json!({
            "rule_id": m.rule_id, "tier": tier(m.tier), "reason": m.reason, "source": source(m.source),
        })).collect::<Vec<_>>(),
        "commands": e.commands.iter().map(|c| json!({
            "argv": c.argv, "tier": tier(c.tier), "rule_ids": c.rule_ids,
            "fully_analyzed": c.fully_analyzed, "notes": c.notes,
        })).collect::<Vec<_>>(),
        "paths": e.paths.iter().map(|p| json!({
            "path": p.path, "access": access(p.access), "tier": tier(p.tier), "rule_ids": p.rule_ids,
        })).collect::<Vec<_>>(),
    })
}

/// An approval as one JSON object (enums as lowercase names, times as RFC 3339).
pub(crate) fn approval_json(a: &pb::Approval) -> Value {
    json!({
        "approval_id": a.approval_id,
        "state": state(a.state),
        "session_id": a.session_id,
        "principal": a.principal,
        "call_id": a.call_id,
        "call": a.call.as_ref().map_or(Value::Null, call_json),
        "request_digest": a.request_digest,
        "policy_version": a.policy_version,
        "explanation": a.explanation.as_ref().map_or(Value::Null, explanation_json),
        "description": a.description,
        "created_at": time(a.created_at.as_ref()),
        "expires_at": time(a.expires_at.as_ref()),
        "decided_by": a.decided_by,
        "decided_at": time(a.decided_at.as_ref()),
        "reason": a.reason,
        "message_to_model": a.message_to_model,
        "scope": scope(a.scope),
        "consumed_by": a.consumed_by,
        "consumed_at": time(a.consumed_at.as_ref()),
        "consumed_decision_id": a.consumed_decision_id,
        "trace_id": a.trace_id,
    })
}

/// A run's exit status in words, for messages.
pub(crate) fn exit_status(s: Option<&common::ExitStatus>) -> String {
    use common::exit_status::Status;
    match s.and_then(|s| s.status.as_ref()) {
        Some(Status::Exited(c)) => format!("exited with {c}"),
        Some(Status::Signaled(sig)) => format!("killed by {} ({})", sig.name, sig.signal),
        Some(Status::TimedOut(_)) => "timed out".into(),
        Some(Status::Cancelled(c)) => format!("cancelled ({})", c.cause),
        Some(Status::SpawnFailed(f)) => format!("could not start: {}", f.reason),
        Some(Status::Completed(c)) => format!("completed: {}", c.summary),
        None => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("ls"), "ls");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn summaries_name_the_tool_and_the_target() {
        let c = pb::ToolCall {
            tool: common::ToolKind::FsWrite as i32,
            path: Some("a/b.txt".into()),
            ..Default::default()
        };
        assert_eq!(summary(Some(&c)), "fs.write a/b.txt");
        let r = pb::ToolCall {
            tool: common::ToolKind::ProcessRun as i32,
            argv: vec!["echo".into(), "hi there".into()],
            ..Default::default()
        };
        assert_eq!(summary(Some(&r)), "process.run echo 'hi there'");
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
