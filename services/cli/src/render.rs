//! How approvals look on a terminal and as JSON.
//!
//! Everything in an approval that the request or a person wrote is shown through
//! [`toolgate_core::display`]: a terminal must never obey a character the agent chose (an
//! escape sequence that rewrites the line, a bidi override that reorders it). The JSON
//! output stays real JSON, with those characters written as `\uXXXX` escapes.

use std::fmt::Write as _;

use serde_json::{Value, json};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::{tier_from_wire, tool_call_from_wire, tool_from_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_core::display::{self, escape, word};

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
        Ok(pb::RuleSource::Sandbox) => "sandbox",
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

/// What the call does, in one line: the script, the argv, or the path.
pub(crate) fn summary(call: Option<&pb::ToolCall>) -> String {
    let Some(c) = call else {
        return String::new();
    };
    let what = if let Some(s) = &c.script {
        escape(s).into_owned()
    } else if !c.argv.is_empty() {
        c.argv.iter().map(|w| word(w)).collect::<Vec<_>>().join(" ")
    } else if let Some(host) = &c.host {
        format!(
            "{}:{} ({})",
            escape(host),
            c.port.unwrap_or_default(),
            escape(c.protocol.as_deref().unwrap_or("tcp"))
        )
    } else {
        escape(c.path.as_deref().unwrap_or_default()).into_owned()
    };
    let binds = if c.bound_files.is_empty() {
        String::new()
    } else {
        format!(" (binds {} file(s))", c.bound_files.len())
    };
    format!("{} {what}{binds}", tool(c.tool))
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
            escape(&a.approval_id),
            state(a.state),
            clip(&created, 20),
            clip(&escape(&a.session_id), 16),
            clip(&escape(&a.principal), 16),
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
                escape(&a.approval_id).into_owned(),
                state(a.state),
                escape(&a.session_id).into_owned(),
                escape(&a.principal).into_owned(),
                summary(a.call.as_ref()),
            )
        });
    format!(
        "{} {} {id} {st} session={session} principal={principal} {call}",
        escape(&ev.cursor),
        event_kind(ev.kind)
    )
}

/// The full explanation an approver reads before deciding.
pub(crate) fn show(a: &pb::Approval) -> String {
    let mut o = String::new();
    // Every value is escaped here, whatever wrote it.
    let mut field = |k: &str, v: &str| {
        if !v.is_empty() {
            let _ = writeln!(o, "{k:<12}{}", escape(v));
        }
    };
    field("approval", &a.approval_id);
    field("state", &state(a.state));
    field("session", &a.session_id);
    field("principal", &a.principal);
    field("call id", &a.call_id);
    if let Some(c) = &a.call {
        match tool_call_from_wire(c.clone()) {
            // The rows come escaped.
            Ok(call) => o.push_str(&display::call_text(&call)),
            Err((_, why)) => {
                let _ = writeln!(o, "{:<12}{}", "call", escape(why));
            }
        }
    }
    let mut field = |k: &str, v: &str| {
        if !v.is_empty() {
            let _ = writeln!(o, "{k:<12}{}", escape(v));
        }
    };
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
        let _ = writeln!(o, "{:<12}{}", "why", escape(&e.message));
    }
    if !e.matches.is_empty() {
        let _ = writeln!(o, "rules:");
        for m in &e.matches {
            let contained = if m.contained_by.is_empty() {
                String::new()
            } else {
                format!(
                    " [{} without the sandbox; contained by the {} sandbox]",
                    tier(m.contained_tier),
                    escape(&m.contained_by)
                )
            };
            let _ = writeln!(
                o,
                "  [{}] {} ({}): {}{contained}",
                tier(m.tier),
                escape(&m.rule_id),
                source(m.source),
                escape(&m.reason)
            );
        }
    }
    if !e.commands.is_empty() {
        let _ = writeln!(o, "commands:");
        for c in &e.commands {
            let argv: Vec<_> = c.argv.iter().map(|w| word(w)).collect();
            let _ = write!(o, "  [{}] {}", tier(c.tier), argv.join(" "));
            if !c.rule_ids.is_empty() {
                let _ = write!(o, "  rules: {}", escape(&c.rule_ids.join(", ")));
            }
            if !c.fully_analyzed {
                let _ = write!(o, "  (not fully analysed)");
            }
            o.push('\n');
            for n in &c.notes {
                let _ = writeln!(o, "      note: {}", escape(n));
            }
        }
    }
    if !e.paths.is_empty() {
        let _ = writeln!(o, "paths:");
        for p in &e.paths {
            let _ = write!(
                o,
                "  [{}] {} {}",
                tier(p.tier),
                access(p.access),
                word(&p.path)
            );
            if !p.rule_ids.is_empty() {
                let _ = write!(o, "  rules: {}", escape(&p.rule_ids.join(", ")));
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
        "bound_files": c.bound_files,
        "host": opt(c.host.clone()),
        "port": opt(c.port),
        "protocol": opt(c.protocol.clone()),
    })
}

fn explanation_json(e: &pb::Explanation) -> Value {
    json!({
        "tier": tier(e.tier),
        "message": e.message,
        "policy_version": e.policy_version,
        "matches": e.matches.iter().map(|m| json!({
            "rule_id": m.rule_id, "tier": tier(m.tier), "reason": m.reason, "source": source(m.source),
            "contained_by": m.contained_by,
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
        "display": a.display,
    })
}

/// `v` as compact JSON in which every character [`display::needs_escape`] names is written
/// as a `\uXXXX` escape (JSON escapes only C0 controls itself): real JSON that decodes to
/// exactly `v`, and inert on a terminal.
pub(crate) fn safe_json(v: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, InertFormatter);
    // Writing a Value into a Vec cannot fail.
    let _ = serde::Serialize::serialize(v, &mut ser);
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// serde_json's compact formatter, escaping what a terminal could act on or hide.
struct InertFormatter;

impl serde_json::ser::Formatter for InertFormatter {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some(i) = rest.find(display::needs_escape) {
            let (head, tail) = rest.split_at(i);
            writer.write_all(head.as_bytes())?;
            let c = tail.chars().next().unwrap_or_default();
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(writer, "\\u{u:04x}")?;
            }
            rest = &tail[c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
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
        assert_eq!(word("ls"), "ls");
        assert_eq!(word("a b"), "'a b'");
        assert_eq!(word("it's"), r"'it'\''s'");
        assert_eq!(word(""), "''");
    }

    /// Whether a terminal would print `s` as it is: no control but the newlines that end
    /// rows, nothing that reorders or hides text.
    fn inert(s: &str) -> bool {
        !s.chars().any(|c| c != '\n' && display::needs_escape(c))
    }

    /// An approval in which every string the agent or a person wrote tries to rewrite the
    /// approver's screen.
    fn hostile_approval() -> pb::Approval {
        let h = |s: &str| format!("{s}\x1b[2K\rcargo fmt --check\u{202e}\u{9b}0m\u{200b}");
        let mut env = std::collections::HashMap::new();
        env.insert(h("K"), h("v"));
        let mut bound = std::collections::HashMap::new();
        bound.insert(h("build.sh"), h("ab"));
        pb::Approval {
            approval_id: h("apr"),
            session_id: h("s"),
            principal: h("p"),
            call_id: h("c"),
            call: Some(pb::ToolCall {
                tool: common::ToolKind::ProcessRun as i32,
                script: Some(h("rm -rf src\nsh build.sh")),
                cwd: Some(h("sub")),
                env,
                bound_files: bound,
                sandbox_profile: Some(h("workspace")),
                ..Default::default()
            }),
            explanation: Some(pb::Explanation {
                message: h("why"),
                matches: vec![pb::RuleMatch {
                    rule_id: h("r"),
                    reason: h("reason"),
                    ..Default::default()
                }],
                commands: vec![pb::CommandExplanation {
                    argv: vec![h("rm"), h("-rf")],
                    rule_ids: vec![h("r")],
                    notes: vec![h("note")],
                    ..Default::default()
                }],
                paths: vec![pb::PathExplanation {
                    path: h("src"),
                    rule_ids: vec![h("r")],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            description: h("formatting"),
            decided_by: h("alice"),
            reason: h("ok"),
            message_to_model: h("go"),
            consumed_by: h("exec"),
            consumed_decision_id: h("dec"),
            trace_id: h("t"),
            request_digest: h("d"),
            policy_version: h("v"),
            display: h("display"),
            ..Default::default()
        }
    }

    #[test]
    fn escape_sequences_in_a_request_never_reach_the_approvers_terminal() {
        let a = hostile_approval();
        let shown = show(&a);
        assert!(inert(&shown), "{shown}");
        // The script's newline starts a row of its own, marked as part of the script.
        assert!(
            shown.contains(concat!(
                "script      | rm -rf src\n",
                r"            | sh build.sh\x1b[2K\rcargo fmt --check\u{202e}\u{9b}0m\u{200b}",
            )),
            "{shown}"
        );
        assert!(shown.contains("binds       "), "{shown}");
        let table = table(std::slice::from_ref(&a));
        assert!(inert(&table), "{table}");
        assert_eq!(table.lines().count(), 2, "{table}");
        let line = watch_line(&pb::WatchApprovalsResponse {
            cursor: "1".into(),
            kind: 0,
            approval: Some(a),
        });
        assert!(inert(&line) && !line.contains('\n'), "{line}");
    }

    #[test]
    fn json_output_is_real_json_and_inert() {
        let a = hostile_approval();
        let v = approval_json(&a);
        let text = safe_json(&v);
        assert!(inert(&text) && !text.contains('\n'), "{text}");
        assert!(
            text.contains(r"\u202e") && text.contains(r"\u009b"),
            "{text}"
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
        // Beyond the basic plane: a tag character as a surrogate pair.
        let tag = safe_json(&Value::from("a\u{e0041}"));
        assert_eq!(tag, r#""a\udb40\udc41""#);
        assert_eq!(serde_json::from_str::<Value>(&tag).unwrap(), "a\u{e0041}");
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
        let s = pb::ToolCall {
            tool: common::ToolKind::ProcessRun as i32,
            script: Some("ls\nrm -rf /".into()),
            ..Default::default()
        };
        assert_eq!(summary(Some(&s)), r"process.run ls\nrm -rf /");
        let n = pb::ToolCall {
            tool: common::ToolKind::NetConnect as i32,
            host: Some("evil.example\x1b[2K".into()),
            port: Some(443),
            protocol: Some("tcp".into()),
            ..Default::default()
        };
        assert_eq!(
            summary(Some(&n)),
            r"net.connect evil.example\x1b[2K:443 (tcp)"
        );
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
