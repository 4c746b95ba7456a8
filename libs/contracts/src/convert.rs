//! Conversions between wire types and domain types.

use toolgate_core::{
    AuditReport, ExecutorIdentity, GitChange, GitChangeKind, IntegrityChange, IntegrityViolation,
    Tier, ToolCall, ToolKind,
};

use crate::common::v1 as pb;
use crate::policy::v1 as policy;

/// An executor's identity on the wire.
pub fn identity_to_wire(e: ExecutorIdentity) -> pb::ExecutorIdentity {
    pb::ExecutorIdentity {
        executor_id: e.executor_id,
        pod: e.pod,
        namespace: e.namespace,
        node: e.node,
        image: e.image,
        version: e.version,
    }
}

/// A wire executor identity in domain terms.
pub fn identity_from_wire(e: pb::ExecutorIdentity) -> ExecutorIdentity {
    ExecutorIdentity {
        executor_id: e.executor_id,
        pod: e.pod,
        namespace: e.namespace,
        node: e.node,
        image: e.image,
        version: e.version,
    }
}

/// A domain tool call on the wire.
pub fn tool_call_to_wire(c: ToolCall) -> policy::ToolCall {
    policy::ToolCall {
        tool: tool_to_wire(c.tool) as i32,
        path: c.path,
        content_sha256: c.content_sha256,
        content_size: c.content_size,
        edit_old_sha256: c.edit_old_sha256,
        edit_new_sha256: c.edit_new_sha256,
        expected_occurrences: c.expected_occurrences,
        recursive: c.recursive,
        pattern: c.pattern,
        globs: c.globs,
        argv: c.argv.unwrap_or_default(),
        script: c.script,
        cwd: c.cwd,
        env: c.env.into_iter().collect(),
        stdin_sha256: c.stdin_sha256,
        timeout_ms: c.timeout_ms,
        stdout_cap_bytes: c.stdout_cap_bytes,
        stderr_cap_bytes: c.stderr_cap_bytes,
        kill_on_cap: c.kill_on_cap,
        background: c.background,
        sandbox_profile: c.sandbox_profile,
        bound_files: c.bound_files.into_iter().collect(),
        host: c.host,
        port: c.port,
        protocol: c.protocol,
    }
}

/// A wire tool call in domain terms, or the offending field and what is wrong with it: an
/// unknown tool kind, a run with both or neither of `argv` and `script`, a filesystem call
/// without a path.
pub fn tool_call_from_wire(c: policy::ToolCall) -> Result<ToolCall, (&'static str, &'static str)> {
    let tool = tool_from_wire(c.tool).ok_or((
        "call.tool",
        "call.tool must be a known tool kind (fs.read ... process.run, net.connect)",
    ))?;
    let process = tool == ToolKind::ProcessRun;
    if process && c.argv.is_empty() == c.script.is_none() {
        return Err((
            "call",
            "a process.run call sets exactly one of `argv` or `script`",
        ));
    }
    if !process && !c.bound_files.is_empty() {
        return Err((
            "call.bound_files",
            "only a process.run call binds workspace files",
        ));
    }
    let net = tool == ToolKind::NetConnect;
    if net
        && (c.host.as_deref().is_none_or(str::is_empty)
            || c.port.is_none_or(|p| p == 0 || p > 65535))
    {
        return Err((
            "call",
            "a net.connect call names its destination: a non-empty `host` and a `port` in 1..=65535",
        ));
    }
    if !net && (c.host.is_some() || c.port.is_some() || c.protocol.is_some()) {
        return Err((
            "call.host",
            "only a net.connect call names a destination (`host`, `port`, `protocol`)",
        ));
    }
    if !process && !net && c.path.as_deref().is_none_or(str::is_empty) {
        return Err(("call.path", "filesystem calls need a canonical path"));
    }
    Ok(ToolCall {
        tool,
        path: c.path,
        content_sha256: c.content_sha256,
        content_size: c.content_size,
        edit_old_sha256: c.edit_old_sha256,
        edit_new_sha256: c.edit_new_sha256,
        expected_occurrences: c.expected_occurrences,
        recursive: c.recursive,
        pattern: c.pattern,
        globs: c.globs,
        argv: (!c.argv.is_empty()).then_some(c.argv),
        script: c.script,
        cwd: c.cwd,
        env: c.env.into_iter().collect(),
        stdin_sha256: c.stdin_sha256,
        timeout_ms: c.timeout_ms,
        stdout_cap_bytes: c.stdout_cap_bytes,
        stderr_cap_bytes: c.stderr_cap_bytes,
        kill_on_cap: c.kill_on_cap,
        background: c.background,
        sandbox_profile: c.sandbox_profile,
        bound_files: c.bound_files.into_iter().collect(),
        host: c.host,
        port: c.port,
        protocol: c.protocol,
    })
}

/// Domain tool kind to wire.
pub fn tool_to_wire(k: ToolKind) -> pb::ToolKind {
    match k {
        ToolKind::FsRead => pb::ToolKind::FsRead,
        ToolKind::FsWrite => pb::ToolKind::FsWrite,
        ToolKind::FsEdit => pb::ToolKind::FsEdit,
        ToolKind::FsList => pb::ToolKind::FsList,
        ToolKind::FsSearch => pb::ToolKind::FsSearch,
        ToolKind::FsFind => pb::ToolKind::FsFind,
        ToolKind::FsMkdir => pb::ToolKind::FsMkdir,
        ToolKind::FsStat => pb::ToolKind::FsStat,
        ToolKind::FsDelete => pb::ToolKind::FsDelete,
        ToolKind::ProcessRun => pb::ToolKind::ProcessRun,
        ToolKind::NetConnect => pb::ToolKind::NetConnect,
    }
}

/// Wire tool kind to domain; `None` for unspecified or unknown values.
pub fn tool_from_wire(v: i32) -> Option<ToolKind> {
    Some(match pb::ToolKind::try_from(v).ok()? {
        pb::ToolKind::Unspecified => return None,
        pb::ToolKind::FsRead => ToolKind::FsRead,
        pb::ToolKind::FsWrite => ToolKind::FsWrite,
        pb::ToolKind::FsEdit => ToolKind::FsEdit,
        pb::ToolKind::FsList => ToolKind::FsList,
        pb::ToolKind::FsSearch => ToolKind::FsSearch,
        pb::ToolKind::FsFind => ToolKind::FsFind,
        pb::ToolKind::FsMkdir => ToolKind::FsMkdir,
        pb::ToolKind::FsStat => ToolKind::FsStat,
        pb::ToolKind::FsDelete => ToolKind::FsDelete,
        pb::ToolKind::ProcessRun => ToolKind::ProcessRun,
        pb::ToolKind::NetConnect => ToolKind::NetConnect,
    })
}

/// Domain tier to wire.
pub fn tier_to_wire(t: Tier) -> pb::Tier {
    match t {
        Tier::Auto => pb::Tier::Auto,
        Tier::Ask => pb::Tier::Ask,
        Tier::Deny => pb::Tier::Deny,
    }
}

/// Wire tier to domain; `None` for unspecified or unknown values.
pub fn tier_from_wire(v: i32) -> Option<Tier> {
    Some(match pb::Tier::try_from(v).ok()? {
        pb::Tier::Unspecified => return None,
        pb::Tier::Auto => Tier::Auto,
        pb::Tier::Ask => Tier::Ask,
        pb::Tier::Deny => Tier::Deny,
    })
}

/// The wire form of an after-run audit: what it found, or why it could not finish.
pub fn audit_to_wire(a: &Result<AuditReport, String>) -> pb::IntegrityAudit {
    let violation = |v: &IntegrityViolation| pb::IntegrityViolation {
        path: v.path.clone(),
        change: match v.change {
            IntegrityChange::Created => pb::IntegrityChange::Created,
            IntegrityChange::Modified => pb::IntegrityChange::Modified,
            IntegrityChange::Removed => pb::IntegrityChange::Removed,
        } as i32,
        reverted: v.reverted,
    };
    let git = |g: &GitChange| pb::GitChange {
        repository: g.repository.clone(),
        name: g.name.clone(),
        kind: git_kind_to_wire(g.kind) as i32,
        old: g.old.clone(),
        new: g.new.clone(),
        reverted: g.reverted,
    };
    match a {
        Ok(report) => pb::IntegrityAudit {
            completed: true,
            violations: report.violations.iter().map(violation).collect(),
            error: String::new(),
            git: report.git.iter().map(git).collect(),
        },
        Err(why) => pb::IntegrityAudit {
            completed: false,
            error: why.clone(),
            ..Default::default()
        },
    }
}

/// The domain form of a wire audit; a change this build does not know reads as `modified`
/// (a protected path) or is dropped (git state).
pub fn audit_from_wire(a: pb::IntegrityAudit) -> Result<AuditReport, String> {
    if !a.completed {
        return Err(a.error);
    }
    Ok(AuditReport {
        violations: a
            .violations
            .into_iter()
            .map(|v| IntegrityViolation {
                change: match pb::IntegrityChange::try_from(v.change) {
                    Ok(pb::IntegrityChange::Created) => IntegrityChange::Created,
                    Ok(pb::IntegrityChange::Removed) => IntegrityChange::Removed,
                    _ => IntegrityChange::Modified,
                },
                path: v.path,
                reverted: v.reverted,
            })
            .collect(),
        git: a
            .git
            .into_iter()
            .filter_map(|g| {
                Some(GitChange {
                    kind: git_kind_from_wire(g.kind)?,
                    repository: g.repository,
                    name: g.name,
                    old: g.old,
                    new: g.new,
                    reverted: g.reverted,
                })
            })
            .collect(),
    })
}

/// The wire form of a git change's kind.
pub fn git_kind_to_wire(k: GitChangeKind) -> pb::GitChangeKind {
    match k {
        GitChangeKind::RefCreated => pb::GitChangeKind::RefCreated,
        GitChangeKind::RefDeleted => pb::GitChangeKind::RefDeleted,
        GitChangeKind::RefFastForward => pb::GitChangeKind::RefFastForward,
        GitChangeKind::RefRewritten => pb::GitChangeKind::RefRewritten,
        GitChangeKind::RefMoved => pb::GitChangeKind::RefMoved,
        GitChangeKind::HeadMoved => pb::GitChangeKind::HeadMoved,
        GitChangeKind::AssumeUnchangedSet => pb::GitChangeKind::AssumeUnchangedSet,
        GitChangeKind::SkipWorktreeSet => pb::GitChangeKind::SkipWorktreeSet,
    }
}

/// The domain form of a wire git change kind; `None` for one this build does not know.
pub fn git_kind_from_wire(v: i32) -> Option<GitChangeKind> {
    Some(match pb::GitChangeKind::try_from(v).ok()? {
        pb::GitChangeKind::RefCreated => GitChangeKind::RefCreated,
        pb::GitChangeKind::RefDeleted => GitChangeKind::RefDeleted,
        pb::GitChangeKind::RefFastForward => GitChangeKind::RefFastForward,
        pb::GitChangeKind::RefRewritten => GitChangeKind::RefRewritten,
        pb::GitChangeKind::RefMoved => GitChangeKind::RefMoved,
        pb::GitChangeKind::HeadMoved => GitChangeKind::HeadMoved,
        pb::GitChangeKind::AssumeUnchangedSet => GitChangeKind::AssumeUnchangedSet,
        pb::GitChangeKind::SkipWorktreeSet => GitChangeKind::SkipWorktreeSet,
        pb::GitChangeKind::Unspecified => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_round_trip_and_invalid_ones_name_the_field() {
        let mut run = ToolCall::argv(["echo", "hi"]);
        run.env.insert("A".into(), "1".into());
        run.timeout_ms = Some(5);
        let mut write = ToolCall::fs(ToolKind::FsWrite, "a/b");
        write.content_sha256 = Some("ab".into());
        for c in [run, write, ToolCall::script("true")] {
            assert_eq!(tool_call_from_wire(tool_call_to_wire(c.clone())), Ok(c));
        }
        let field = |c: policy::ToolCall| tool_call_from_wire(c).unwrap_err().0;
        assert_eq!(field(policy::ToolCall::default()), "call.tool");
        let mut both = tool_call_to_wire(ToolCall::script("true"));
        both.argv = vec!["x".into()];
        assert_eq!(field(both), "call");
        let mut no_path = tool_call_to_wire(ToolCall::fs(ToolKind::FsRead, "x"));
        no_path.path = Some(String::new());
        assert_eq!(field(no_path), "call.path");
    }

    #[test]
    fn tool_kinds_round_trip() {
        for k in ToolKind::ALL {
            assert_eq!(tool_from_wire(tool_to_wire(*k) as i32), Some(*k));
        }
        assert_eq!(tool_from_wire(0), None);
        assert_eq!(tool_from_wire(999), None);
    }

    #[test]
    fn tiers_round_trip() {
        for t in [Tier::Auto, Tier::Ask, Tier::Deny] {
            assert_eq!(tier_from_wire(tier_to_wire(t) as i32), Some(t));
        }
    }

    #[test]
    fn an_audit_round_trips_and_a_failed_one_keeps_its_reason() {
        let report = AuditReport {
            violations: vec![IntegrityViolation {
                path: ".git/hooks/pre-commit".into(),
                change: IntegrityChange::Created,
                reverted: true,
            }],
            git: vec![GitChange {
                repository: ".git".into(),
                name: "refs/heads/main".into(),
                kind: GitChangeKind::RefRewritten,
                old: "a".repeat(40),
                new: "b".repeat(40),
                reverted: true,
            }],
        };
        assert_eq!(
            audit_from_wire(audit_to_wire(&Ok(report.clone()))),
            Ok(report)
        );
        let failed: Result<AuditReport, String> = Err("walk failed".into());
        assert_eq!(audit_from_wire(audit_to_wire(&failed)), failed);
    }
}
