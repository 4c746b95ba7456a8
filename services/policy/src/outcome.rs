//! Outcomes between the policy protocol (`toolgate_policy_api::Outcome`) and the ledger.
//!
//! The mapping is deterministic, so an identical retry of `RecordOutcome` maps to an
//! identical ledger outcome and is recognised as a retry rather than a conflict. The stored
//! JSON records (isolation, destinations, audit) use the v1 wire field names.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use toolgate_core::{
    AuditReport, GitChange, GitChangeKind, IntegrityChange, IntegrityViolation, Tier,
};
use toolgate_ledger::{
    DecisionId, ExecutorRecord, ExitStatus, NewOutcome, NotStarted, OutcomeRecord, Timestamp,
};
use toolgate_policy_api as api;

use crate::core::PolicyError;

/// A protocol time as the ledger keeps it (microseconds since the epoch).
pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    let micros = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_micros()).map_or(i64::MIN, |us| -us),
    };
    Timestamp::from_micros(micros)
}

/// A ledger time in protocol terms.
pub(crate) fn system_time(t: Timestamp) -> SystemTime {
    let us = t.as_micros();
    if us >= 0 {
        UNIX_EPOCH + Duration::from_micros(us.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_micros(us.unsigned_abs())
    }
}

/// The ledger outcome for a report, without its fence and reporter (the core sets both).
pub(crate) fn from_api(
    decision_id: DecisionId,
    o: api::Outcome,
) -> Result<NewOutcome, PolicyError> {
    let (started, finished) = match (o.started_at, o.finished_at) {
        (Some(s), Some(f)) => (timestamp(s), timestamp(f)),
        (Some(t), None) | (None, Some(t)) => (timestamp(t), timestamp(t)),
        (None, None) => {
            return Err(PolicyError::invalid(
                "outcome.times",
                "outcome.times needs started_at and finished_at",
            ));
        }
    };
    let code = o.result_code.trim().to_owned();
    let (exit, error) = match o.ended {
        Some(api::Ended::Exited(c)) => (ExitStatus::Exited(c), None),
        Some(api::Ended::Signaled { signal, .. }) => (ExitStatus::Signaled(signal), None),
        Some(api::Ended::TimedOut { .. }) => (ExitStatus::TimedOut, None),
        Some(api::Ended::Cancelled(cause)) => (ExitStatus::Cancelled, non_empty(cause)),
        Some(api::Ended::SpawnFailed { reason, errno }) => (
            ExitStatus::FailedToStart,
            Some(format!("spawn failed: {reason} (errno {errno})")),
        ),
        Some(api::Ended::Completed(_)) => (ExitStatus::Ok, None),
        None if code.is_empty() => {
            return Err(PolicyError::invalid(
                "outcome.status",
                "outcome needs an exit status (runs) or a result_code (filesystem calls)",
            ));
        }
        None if code == "OK" => (ExitStatus::Ok, None),
        // Stored as `CODE REASON` so the protocol's form can be rebuilt.
        None => (
            ExitStatus::Failed,
            Some(
                format!("{code} {}", o.result_reason.trim())
                    .trim_end()
                    .to_owned(),
            ),
        ),
    };
    let stats = |s: Option<api::OutputStats>| {
        let s = s.unwrap_or_default();
        (s.total_bytes, s.truncated)
    };
    let (stdout_bytes, stdout_truncated) = stats(o.stdout);
    let (stderr_bytes, stderr_truncated) = stats(o.stderr);
    let e = o.executor.unwrap_or_default();
    Ok(NewOutcome {
        decision_id,
        lease_token: None,
        lease_held: false,
        executor_principal: None,
        executor: ExecutorRecord {
            pod: if e.pod.is_empty() {
                e.executor_id
            } else {
                e.pod
            },
            node: e.node,
            namespace: e.namespace,
            image: e.image,
        },
        started_at: started,
        finished_at: finished,
        exit,
        stdout_bytes,
        stderr_bytes,
        stdout_truncated,
        stderr_truncated,
        error,
        isolation: match &o.isolation {
            Some(i) => Some(isolation_json(i, o.limit_exceeded.as_ref(), &o.network)),
            // A call without isolation that still reports destinations keeps them.
            None if !o.network.is_empty() => Some(destinations_only_json(&o.network)),
            None => None,
        },
        integrity: o.audit.as_ref().map(audit_json),
    })
}

/// A report that the call was refused before it started; `result_code` and `result_reason`
/// say why (`RESOURCE_EXHAUSTED BUSY`).
pub(crate) fn not_started_from_api(
    decision_id: DecisionId,
    o: &api::Outcome,
) -> Result<NotStarted, PolicyError> {
    let code = o.result_code.trim();
    if code.is_empty() || code == "OK" {
        return Err(PolicyError::invalid(
            "outcome.result_code",
            "a call that did not start needs the status code that refused it",
        ));
    }
    Ok(NotStarted {
        decision_id,
        lease_token: None,
        lease_held: false,
        executor_principal: None,
        reason: format!("{code} {}", o.result_reason.trim())
            .trim_end()
            .to_owned(),
    })
}

/// The stored form of a run's after-run audit: a JSON object with the wire field names, the
/// change spelled as in `toolgate_core::IntegrityChange::as_str` (the ledger redacts it).
fn audit_json(a: &Result<AuditReport, String>) -> String {
    let (completed, error, violations, git): (bool, &str, &[IntegrityViolation], &[GitChange]) =
        match a {
            Ok(r) => (true, "", &r.violations, &r.git),
            Err(e) => (false, e, &[], &[]),
        };
    let found: Vec<serde_json::Value> = violations
        .iter()
        .map(|v| {
            serde_json::json!({
                "path": v.path,
                "change": v.change.as_str(),
                "reverted": v.reverted,
            })
        })
        .collect();
    let git: Vec<serde_json::Value> = git
        .iter()
        .map(|g| {
            serde_json::json!({
                "repository": g.repository,
                "name": g.name,
                "kind": g.kind.as_str(),
                "old": g.old,
                "new": g.new,
                "reverted": g.reverted,
            })
        })
        .collect();
    serde_json::json!({
        "completed": completed,
        "violations": found,
        "error": error,
        "git": git,
    })
    .to_string()
}

/// A stored audit; a change this build does not know reads as `modified`, a git change of
/// an unknown kind is left out.
fn audit_from_json(text: &str) -> Option<Result<AuditReport, String>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let s = |x: &serde_json::Value, k: &str| x[k].as_str().unwrap_or_default().to_owned();
    if !v["completed"].as_bool().unwrap_or_default() {
        return Some(Err(s(&v, "error")));
    }
    let violations = v["violations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| IntegrityViolation {
                    path: s(x, "path"),
                    change: match x["change"].as_str() {
                        Some("created") => IntegrityChange::Created,
                        Some("removed") => IntegrityChange::Removed,
                        _ => IntegrityChange::Modified,
                    },
                    reverted: x["reverted"].as_bool().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let git = v["git"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| {
                    Some(GitChange {
                        kind: x["kind"].as_str().and_then(GitChangeKind::parse)?,
                        repository: s(x, "repository"),
                        name: s(x, "name"),
                        old: s(x, "old"),
                        new: s(x, "new"),
                        reverted: x["reverted"].as_bool().unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Ok(AuditReport { violations, git }))
}

/// The stored form of a run's isolation: a JSON object with the wire field names, plus the
/// limit that ended the run and the destinations its egress gate saw, if any.
fn isolation_json(
    i: &api::RunIsolation,
    limit: Option<&api::ExceededLimit>,
    network: &[api::NetworkDestination],
) -> String {
    let mut v = serde_json::json!({
        "sandbox_profile": i.sandbox_profile,
        "sandboxed": i.sandboxed,
        "namespaces": i.namespaces,
        "landlock_abi": i.landlock_abi,
        "seccomp": i.seccomp,
        "network": i.network,
        "pid_limit": i.pid_limit,
    });
    // What bounded the run's resources and, beside it, the limit that ended it: the ledger
    // keeps one isolation record per outcome.
    if let Some(l) = &i.limits {
        v["limits"] = serde_json::json!({
            "enforced": l.enforced,
            "memory_bytes": l.memory_bytes,
            "pids": l.pids,
            "cpu_millicores": l.cpu_millicores,
            "cpu_seconds": l.cpu_seconds,
            "tmpfs_bytes": l.tmpfs_bytes,
            "tmpfs_inodes": l.tmpfs_inodes,
        });
    }
    if let Some(l) = limit {
        v["limit_exceeded"] = serde_json::json!({
            "resource": l.resource,
            "limit": l.limit,
            "message": l.message,
        });
    }
    if !network.is_empty() {
        v["destinations"] = destinations_json(network);
    }
    v.to_string()
}

/// The stored form of destinations reported without an isolation record.
fn destinations_only_json(network: &[api::NetworkDestination]) -> String {
    serde_json::json!({ "destinations": destinations_json(network) }).to_string()
}

/// Where a run connected, with the wire field names (the tier by its name).
fn destinations_json(network: &[api::NetworkDestination]) -> serde_json::Value {
    network
        .iter()
        .map(|d| {
            serde_json::json!({
                "host": d.host,
                "port": d.port,
                "protocol": d.protocol,
                "address": d.address,
                "tier": d.tier.map(Tier::as_str),
                "rule_id": d.rule_id,
                "approval_id": d.approval_id,
                "connections": d.connections,
                "refused": d.refused,
                "bytes_sent": d.bytes_sent,
                "bytes_received": d.bytes_received,
                "refusal": d.refusal,
                "message": d.message,
            })
        })
        .collect()
}

/// The stored destinations of a run, empty for records without them.
fn destinations_from_json(text: &str) -> Vec<api::NetworkDestination> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    let Some(list) = v.get("destinations").and_then(|d| d.as_array()) else {
        return Vec::new();
    };
    list.iter()
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            let n = |k: &str| d[k].as_u64().unwrap_or_default();
            api::NetworkDestination {
                host: s("host"),
                port: n("port") as u32,
                protocol: s("protocol"),
                address: s("address"),
                tier: d["tier"].as_str().and_then(|t| t.parse::<Tier>().ok()),
                rule_id: s("rule_id"),
                approval_id: s("approval_id"),
                connections: n("connections") as u32,
                refused: n("refused") as u32,
                bytes_sent: n("bytes_sent"),
                bytes_received: n("bytes_received"),
                refusal: s("refusal"),
                message: s("message"),
            }
        })
        .collect()
}

/// The stored run limits of an isolation record, if it has them.
fn limits_from_json(v: &serde_json::Value) -> Option<api::RunLimits> {
    let l = v.get("limits")?;
    let n = |k: &str| l[k].as_u64().unwrap_or_default();
    Some(api::RunLimits {
        enforced: l["enforced"].as_str().unwrap_or_default().to_owned(),
        memory_bytes: n("memory_bytes"),
        pids: n("pids") as u32,
        cpu_millicores: n("cpu_millicores") as u32,
        cpu_seconds: n("cpu_seconds"),
        tmpfs_bytes: n("tmpfs_bytes"),
        tmpfs_inodes: n("tmpfs_inodes"),
    })
}

/// The stored limit a run ran into, if any.
fn limit_exceeded_from_json(text: &str) -> Option<api::ExceededLimit> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let l = v.get("limit_exceeded")?;
    Some(api::ExceededLimit {
        resource: l["resource"].as_str().unwrap_or_default().to_owned(),
        limit: l["limit"].as_u64().unwrap_or_default(),
        message: l["message"].as_str().unwrap_or_default().to_owned(),
    })
}

/// A stored isolation; fields it lacks stay at their defaults.
fn isolation_from_json(text: &str) -> Option<api::RunIsolation> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    // Only destinations were stored: the call had no isolation record.
    v.get("sandbox_profile")?;
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let b = |k: &str| v[k].as_bool().unwrap_or_default();
    Some(api::RunIsolation {
        sandbox_profile: s("sandbox_profile"),
        sandboxed: b("sandboxed"),
        namespaces: v["namespaces"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        landlock_abi: v["landlock_abi"].as_i64().unwrap_or_default() as i32,
        seccomp: b("seccomp"),
        network: b("network"),
        pid_limit: v["pid_limit"].as_u64().unwrap_or_default() as u32,
        limits: limits_from_json(&v),
    })
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A recorded outcome in protocol terms (what `AlreadyExecuted` carries).
pub(crate) fn to_api(o: &OutcomeRecord) -> api::Outcome {
    let error = o.error.clone().unwrap_or_default();
    let (ended, result_code, result_reason) = match o.exit {
        ExitStatus::Exited(c) => (Some(api::Ended::Exited(c)), String::new(), String::new()),
        ExitStatus::Signaled(signal) => (
            Some(api::Ended::Signaled {
                signal,
                name: String::new(),
                core_dumped: false,
            }),
            String::new(),
            String::new(),
        ),
        ExitStatus::TimedOut => (
            Some(api::Ended::TimedOut {
                timeout: None,
                killed: true,
            }),
            String::new(),
            String::new(),
        ),
        ExitStatus::Cancelled => (
            Some(api::Ended::Cancelled(error)),
            String::new(),
            String::new(),
        ),
        ExitStatus::FailedToStart => (
            Some(api::Ended::SpawnFailed {
                reason: error,
                errno: 0,
            }),
            String::new(),
            String::new(),
        ),
        ExitStatus::Ok => (
            Some(api::Ended::Completed(String::new())),
            "OK".to_owned(),
            String::new(),
        ),
        ExitStatus::Failed => {
            let (code, reason) = error.split_once(' ').unwrap_or((error.as_str(), ""));
            (None, code.to_owned(), reason.to_owned())
        }
    };
    api::Outcome {
        started_at: Some(system_time(o.started_at)),
        finished_at: Some(system_time(o.finished_at)),
        ended,
        usage: None,
        stdout: Some(api::OutputStats {
            total_bytes: o.stdout_bytes,
            dropped_bytes: 0,
            truncated: o.stdout_truncated,
        }),
        stderr: Some(api::OutputStats {
            total_bytes: o.stderr_bytes,
            dropped_bytes: 0,
            truncated: o.stderr_truncated,
        }),
        executor: Some(toolgate_core::ExecutorIdentity {
            executor_id: o.executor.pod.clone(),
            pod: o.executor.pod.clone(),
            namespace: o.executor.namespace.clone(),
            node: o.executor.node.clone(),
            image: o.executor.image.clone(),
            version: String::new(),
        }),
        result_code,
        result_reason,
        isolation: o.isolation.as_deref().and_then(isolation_from_json),
        audit: o.integrity.as_deref().and_then(audit_from_json),
        limit_exceeded: o.isolation.as_deref().and_then(limit_exceeded_from_json),
        network: o
            .isolation
            .as_deref()
            .map(destinations_from_json)
            .unwrap_or_default(),
        // A recorded outcome is an execution; a call that did not start has none.
        not_started: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Option<SystemTime> {
        Some(system_time(Timestamp::from_micros(s * 1_000_000 + 500)))
    }

    fn timed() -> api::Outcome {
        api::Outcome {
            started_at: at(10),
            finished_at: at(11),
            ..Default::default()
        }
    }

    fn exec() -> toolgate_ledger::Principal {
        toolgate_ledger::Principal::try_from("executor-1").unwrap()
    }

    #[test]
    fn runs_and_filesystem_results_map_both_ways() {
        let run = api::Outcome {
            ended: Some(api::Ended::Exited(3)),
            stdout: Some(api::OutputStats {
                total_bytes: 9,
                dropped_bytes: 0,
                truncated: true,
            }),
            ..timed()
        };
        let d = DecisionId::try_from("dec_1").unwrap();
        let n = from_api(d.clone(), run).unwrap();
        assert_eq!(n.exit, ExitStatus::Exited(3));
        assert_eq!(n.started_at.as_micros(), 10_000_500);
        assert!(n.stdout_truncated);

        let fs = api::Outcome {
            result_code: "NOT_FOUND".into(),
            result_reason: "NOT_FOUND".into(),
            ..timed()
        };
        let n = from_api(d.clone(), fs).unwrap();
        assert_eq!(n.exit, ExitStatus::Failed);
        let back = to_api(&OutcomeRecord {
            executor_principal: Some(exec()),
            decision_id: d,
            approval_id: None,
            executor: n.executor.clone(),
            started_at: n.started_at,
            finished_at: n.finished_at,
            exit: n.exit,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            error: n.error.clone(),
            recorded_at: n.finished_at,
            isolation: None,
            integrity: None,
        });
        assert_eq!(back.result_code, "NOT_FOUND");
        assert_eq!(back.result_reason, "NOT_FOUND");
    }

    #[test]
    fn an_audit_is_stored_and_read_back_with_its_changes() {
        let audit = Ok(AuditReport {
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
        });
        let back = audit_from_json(&audit_json(&audit)).unwrap();
        assert_eq!(back, audit);
        let failed = Err("walk failed".to_owned());
        assert_eq!(audit_from_json(&audit_json(&failed)).unwrap(), failed);
    }

    #[test]
    fn the_limits_and_the_limit_a_run_hit_are_stored_and_read_back() {
        let limits = api::RunLimits {
            enforced: "cgroup-v1".into(),
            memory_bytes: 256 << 20,
            pids: 32,
            cpu_millicores: 500,
            cpu_seconds: 0,
            tmpfs_bytes: 700 << 20,
            tmpfs_inodes: 65_536,
        };
        let hit = api::ExceededLimit {
            resource: "memory".into(),
            limit: 256 << 20,
            message: "the run exceeded its 256 MiB memory limit and was killed by the kernel"
                .into(),
        };
        let isolation = api::RunIsolation {
            sandbox_profile: "workspace".into(),
            limits: Some(limits.clone()),
            ..Default::default()
        };
        let text = isolation_json(&isolation, Some(&hit), &[]);
        assert_eq!(
            isolation_from_json(&text).and_then(|i| i.limits),
            Some(limits)
        );
        assert_eq!(limit_exceeded_from_json(&text), Some(hit));
        // Records from before limits were reported read back without them.
        let old = isolation_json(&api::RunIsolation::default(), None, &[]);
        assert_eq!(isolation_from_json(&old).and_then(|i| i.limits), None);
        assert_eq!(limit_exceeded_from_json(&old), None);
    }

    fn destination(host: &str, tier: Tier) -> api::NetworkDestination {
        api::NetworkDestination {
            host: host.into(),
            port: 443,
            protocol: "tcp".into(),
            address: "93.184.216.34:443".into(),
            tier: Some(tier),
            rule_id: "package-registries".into(),
            approval_id: String::new(),
            connections: 3,
            refused: 1,
            bytes_sent: 1_234,
            bytes_received: 5 << 30,
            refusal: "sni_mismatch".into(),
            message: "the TLS name was not the one resolved".into(),
        }
    }

    fn stored(n: NewOutcome) -> OutcomeRecord {
        OutcomeRecord {
            executor_principal: Some(exec()),
            decision_id: n.decision_id,
            approval_id: None,
            executor: n.executor,
            started_at: n.started_at,
            finished_at: n.finished_at,
            exit: n.exit,
            stdout_bytes: n.stdout_bytes,
            stderr_bytes: n.stderr_bytes,
            stdout_truncated: n.stdout_truncated,
            stderr_truncated: n.stderr_truncated,
            error: n.error,
            recorded_at: n.finished_at,
            isolation: n.isolation,
            integrity: n.integrity,
        }
    }

    #[test]
    fn the_destinations_a_run_reached_are_stored_and_read_back() {
        let network = vec![
            destination("registry.npmjs.org", Tier::Auto),
            destination("example.com", Tier::Ask),
            destination("metadata.google.internal", Tier::Deny),
        ];
        let run = api::Outcome {
            ended: Some(api::Ended::Exited(0)),
            isolation: Some(api::RunIsolation {
                sandbox_profile: "network".into(),
                network: true,
                ..Default::default()
            }),
            network: network.clone(),
            ..timed()
        };
        let d = DecisionId::try_from("dec_1").unwrap();
        let back = to_api(&stored(from_api(d.clone(), run).unwrap()));
        assert_eq!(back.network, network);
        assert_eq!(
            back.isolation.map(|i| i.sandbox_profile).as_deref(),
            Some("network")
        );
        // Without an isolation record the destinations are kept, and no isolation appears.
        let bare = api::Outcome {
            result_code: "OK".into(),
            network: network.clone(),
            ..timed()
        };
        let back = to_api(&stored(from_api(d.clone(), bare).unwrap()));
        assert_eq!((back.network, back.isolation), (network, None));
        // Records from before destinations were reported read back without them.
        let none = api::Outcome {
            result_code: "OK".into(),
            ..timed()
        };
        let n = from_api(d, none).unwrap();
        assert!(n.isolation.is_none());
        assert!(to_api(&stored(n)).network.is_empty());
    }

    #[test]
    fn an_outcome_without_status_or_times_is_refused() {
        let d = DecisionId::try_from("dec_1").unwrap();
        let e = from_api(d.clone(), api::Outcome::default()).unwrap_err();
        assert!(
            matches!(
                e,
                PolicyError::Invalid {
                    field: "outcome.times",
                    ..
                }
            ),
            "{e}"
        );
        let e = from_api(d, timed()).unwrap_err();
        assert!(e.to_string().contains("exit status"), "{e}");
    }

    #[test]
    fn times_keep_microseconds_both_ways() {
        for us in [0, 1_700_000_000_123_456, -5_000_001] {
            let t = Timestamp::from_micros(us);
            assert_eq!(timestamp(system_time(t)), t);
        }
    }
}
