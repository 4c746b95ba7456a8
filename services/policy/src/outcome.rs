//! Outcomes between the wire and the ledger.
//!
//! The mapping is deterministic, so an identical retry of `RecordOutcome` maps to an
//! identical ledger outcome and is recognised as a retry rather than a conflict.

use toolgate_contracts::common::v1 as common;
use toolgate_contracts::common::v1::exit_status::Status as Exit;
use toolgate_contracts::convert::{tier_from_wire, tier_to_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_core::Tier;
use toolgate_ledger::{DecisionId, ExecutorIdentity, ExitStatus, NewOutcome, NotStarted, Outcome};

use crate::core::PolicyError;
use crate::wire::timestamp;

fn micros(t: &prost_types::Timestamp) -> toolgate_ledger::Timestamp {
    toolgate_ledger::Timestamp::from_micros(
        t.seconds
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(t.nanos) / 1_000),
    )
}

/// The ledger outcome for a wire report, without its fence and reporter (the core sets
/// both).
pub(crate) fn from_wire(
    decision_id: DecisionId,
    o: pb::Outcome,
) -> Result<NewOutcome, PolicyError> {
    let times = o.times.unwrap_or_default();
    let (started, finished) = match (&times.started_at, &times.finished_at) {
        (Some(s), Some(f)) => (micros(s), micros(f)),
        (Some(t), None) | (None, Some(t)) => (micros(t), micros(t)),
        (None, None) => {
            return Err(PolicyError::invalid(
                "outcome.times",
                "outcome.times needs started_at and finished_at",
            ));
        }
    };
    let code = o.result_code.trim().to_owned();
    let (exit, error) = match o.status.and_then(|s| s.status) {
        Some(Exit::Exited(c)) => (ExitStatus::Exited(c), None),
        Some(Exit::Signaled(s)) => (ExitStatus::Signaled(s.signal), None),
        Some(Exit::TimedOut(_)) => (ExitStatus::TimedOut, None),
        Some(Exit::Cancelled(c)) => (ExitStatus::Cancelled, non_empty(c.cause)),
        Some(Exit::SpawnFailed(f)) => (
            ExitStatus::FailedToStart,
            Some(format!("spawn failed: {} (errno {})", f.reason, f.errno)),
        ),
        Some(Exit::Completed(_)) => (ExitStatus::Ok, None),
        None if code.is_empty() => {
            return Err(PolicyError::invalid(
                "outcome.status",
                "outcome needs an exit status (runs) or a result_code (filesystem calls)",
            ));
        }
        None if code == "OK" => (ExitStatus::Ok, None),
        // Stored as `CODE REASON` so the wire form can be rebuilt.
        None => (
            ExitStatus::Failed,
            Some(
                format!("{code} {}", o.result_reason.trim())
                    .trim_end()
                    .to_owned(),
            ),
        ),
    };
    let stats = |s: Option<common::OutputStats>| {
        let s = s.unwrap_or_default();
        (s.total_bytes, s.truncated)
    };
    let (stdout_bytes, stdout_truncated) = stats(o.stdout);
    let (stderr_bytes, stderr_truncated) = stats(o.stderr);
    let e = o.executor.unwrap_or_default();
    Ok(NewOutcome {
        decision_id,
        lease_token: None,
        executor_principal: None,
        executor: ExecutorIdentity {
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
        isolation: match o.isolation {
            Some(i) => Some(isolation_json(&i, o.limit_exceeded.as_ref(), &o.network)),
            // A call without isolation that still reports destinations keeps them.
            None if !o.network.is_empty() => Some(destinations_only_json(&o.network)),
            None => None,
        },
        integrity: o.audit.map(|a| audit_json(&a)),
    })
}

/// A report that the call was refused before it started; `result_code` and `result_reason`
/// say why (`RESOURCE_EXHAUSTED BUSY`).
pub(crate) fn not_started_from_wire(
    decision_id: DecisionId,
    o: &pb::Outcome,
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
        executor_principal: None,
        reason: format!("{code} {}", o.result_reason.trim())
            .trim_end()
            .to_owned(),
    })
}

/// The stored form of a run's after-run audit: a JSON object with the wire field names, the
/// change spelled as in `toolgate_core::IntegrityChange::as_str` (the ledger redacts it).
fn audit_json(a: &common::IntegrityAudit) -> String {
    let found: Vec<serde_json::Value> = a
        .violations
        .iter()
        .map(|v| {
            let change = common::IntegrityChange::try_from(v.change)
                .unwrap_or(common::IntegrityChange::Unspecified);
            serde_json::json!({
                "path": v.path,
                "change": change_name(change),
                "reverted": v.reverted,
            })
        })
        .collect();
    let git: Vec<serde_json::Value> = a
        .git
        .iter()
        .map(|g| {
            serde_json::json!({
                "repository": g.repository,
                "name": g.name,
                "kind": toolgate_contracts::convert::git_kind_from_wire(g.kind)
                    .map_or("unspecified", toolgate_core::GitChangeKind::as_str),
                "old": g.old,
                "new": g.new,
                "reverted": g.reverted,
            })
        })
        .collect();
    serde_json::json!({
        "completed": a.completed,
        "violations": found,
        "error": a.error,
        "git": git,
    })
    .to_string()
}

fn change_name(c: common::IntegrityChange) -> &'static str {
    match c {
        common::IntegrityChange::Created => "created",
        common::IntegrityChange::Modified => "modified",
        common::IntegrityChange::Removed => "removed",
        common::IntegrityChange::Unspecified => "unspecified",
    }
}

/// The wire form of a stored audit; a change this build does not know reads as unspecified.
fn audit_from_json(text: &str) -> Option<common::IntegrityAudit> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let violations = v["violations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| common::IntegrityViolation {
                    path: x["path"].as_str().unwrap_or_default().to_owned(),
                    change: match x["change"].as_str() {
                        Some("created") => common::IntegrityChange::Created,
                        Some("modified") => common::IntegrityChange::Modified,
                        Some("removed") => common::IntegrityChange::Removed,
                        _ => common::IntegrityChange::Unspecified,
                    } as i32,
                    reverted: x["reverted"].as_bool().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let s = |x: &serde_json::Value, k: &str| x[k].as_str().unwrap_or_default().to_owned();
    let git = v["git"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| common::GitChange {
                    repository: s(x, "repository"),
                    name: s(x, "name"),
                    kind: x["kind"]
                        .as_str()
                        .and_then(toolgate_core::GitChangeKind::parse)
                        .map_or(common::GitChangeKind::Unspecified, |k| {
                            toolgate_contracts::convert::git_kind_to_wire(k)
                        }) as i32,
                    old: s(x, "old"),
                    new: s(x, "new"),
                    reverted: x["reverted"].as_bool().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(common::IntegrityAudit {
        completed: v["completed"].as_bool().unwrap_or_default(),
        violations,
        error: s(&v, "error"),
        git,
    })
}

/// The stored form of a run's isolation: a JSON object with the wire field names, plus the
/// limit that ended the run and the destinations its egress gate saw, if any.
fn isolation_json(
    i: &pb::RunIsolation,
    limit: Option<&common::LimitExceeded>,
    network: &[common::NetworkDestination],
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
fn destinations_only_json(network: &[common::NetworkDestination]) -> String {
    serde_json::json!({ "destinations": destinations_json(network) }).to_string()
}

/// Where a run connected, with the wire field names (the tier by its name).
fn destinations_json(network: &[common::NetworkDestination]) -> serde_json::Value {
    network
        .iter()
        .map(|d| {
            serde_json::json!({
                "host": d.host,
                "port": d.port,
                "protocol": d.protocol,
                "address": d.address,
                "tier": tier_from_wire(d.tier).map(Tier::as_str),
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
fn destinations_from_json(text: &str) -> Vec<common::NetworkDestination> {
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
            common::NetworkDestination {
                host: s("host"),
                port: n("port") as u32,
                protocol: s("protocol"),
                address: s("address"),
                tier: d["tier"]
                    .as_str()
                    .and_then(|t| t.parse::<Tier>().ok())
                    .map_or(common::Tier::Unspecified, tier_to_wire) as i32,
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
fn limits_from_json(v: &serde_json::Value) -> Option<common::RunLimits> {
    let l = v.get("limits")?;
    let n = |k: &str| l[k].as_u64().unwrap_or_default();
    Some(common::RunLimits {
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
fn limit_exceeded_from_json(text: &str) -> Option<common::LimitExceeded> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let l = v.get("limit_exceeded")?;
    Some(common::LimitExceeded {
        resource: l["resource"].as_str().unwrap_or_default().to_owned(),
        limit: l["limit"].as_u64().unwrap_or_default(),
        message: l["message"].as_str().unwrap_or_default().to_owned(),
    })
}

/// The wire form of a stored isolation; fields it lacks stay at their defaults.
fn isolation_from_json(text: &str) -> Option<pb::RunIsolation> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    // Only destinations were stored: the call had no isolation record.
    v.get("sandbox_profile")?;
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let b = |k: &str| v[k].as_bool().unwrap_or_default();
    Some(pb::RunIsolation {
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

/// The wire form of a recorded outcome (what `AlreadyExecuted` carries).
pub(crate) fn to_wire(o: &Outcome) -> pb::Outcome {
    let error = o.error.clone().unwrap_or_default();
    let (status, result_code, result_reason) = match o.exit {
        ExitStatus::Exited(c) => (Some(Exit::Exited(c)), String::new(), String::new()),
        ExitStatus::Signaled(s) => (
            Some(Exit::Signaled(common::Signaled {
                signal: s,
                ..Default::default()
            })),
            String::new(),
            String::new(),
        ),
        ExitStatus::TimedOut => (
            Some(Exit::TimedOut(common::TimedOut {
                timeout: None,
                killed: true,
            })),
            String::new(),
            String::new(),
        ),
        ExitStatus::Cancelled => (
            Some(Exit::Cancelled(common::Cancelled { cause: error })),
            String::new(),
            String::new(),
        ),
        ExitStatus::FailedToStart => (
            Some(Exit::SpawnFailed(common::SpawnFailed {
                reason: error,
                errno: 0,
            })),
            String::new(),
            String::new(),
        ),
        ExitStatus::Ok => (
            Some(Exit::Completed(common::Completed::default())),
            "OK".to_owned(),
            String::new(),
        ),
        ExitStatus::Failed => {
            let (code, reason) = error.split_once(' ').unwrap_or((error.as_str(), ""));
            (None, code.to_owned(), reason.to_owned())
        }
    };
    pb::Outcome {
        status: status.map(|s| common::ExitStatus { status: Some(s) }),
        times: Some(common::Timestamps {
            started_at: Some(timestamp(o.started_at)),
            finished_at: Some(timestamp(o.finished_at)),
        }),
        usage: None,
        stdout: Some(common::OutputStats {
            total_bytes: o.stdout_bytes,
            dropped_bytes: 0,
            truncated: o.stdout_truncated,
        }),
        stderr: Some(common::OutputStats {
            total_bytes: o.stderr_bytes,
            dropped_bytes: 0,
            truncated: o.stderr_truncated,
        }),
        executor: Some(common::ExecutorIdentity {
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

    fn at(s: i64) -> Option<prost_types::Timestamp> {
        Some(prost_types::Timestamp {
            seconds: s,
            nanos: 500_000,
        })
    }

    fn times() -> Option<common::Timestamps> {
        Some(common::Timestamps {
            started_at: at(10),
            finished_at: at(11),
        })
    }

    fn exec() -> toolgate_ledger::Principal {
        toolgate_ledger::Principal::try_from("executor-1").unwrap()
    }

    #[test]
    fn runs_and_filesystem_results_map_both_ways() {
        let run = pb::Outcome {
            status: Some(common::ExitStatus {
                status: Some(Exit::Exited(3)),
            }),
            times: times(),
            stdout: Some(common::OutputStats {
                total_bytes: 9,
                dropped_bytes: 0,
                truncated: true,
            }),
            ..Default::default()
        };
        let d = DecisionId::try_from("dec_1").unwrap();
        let n = from_wire(d.clone(), run).unwrap();
        assert_eq!(n.exit, ExitStatus::Exited(3));
        assert_eq!(n.started_at.as_micros(), 10_000_500);
        assert!(n.stdout_truncated);

        let fs = pb::Outcome {
            times: times(),
            result_code: "NOT_FOUND".into(),
            result_reason: "NOT_FOUND".into(),
            ..Default::default()
        };
        let n = from_wire(d.clone(), fs).unwrap();
        assert_eq!(n.exit, ExitStatus::Failed);
        let back = to_wire(&Outcome {
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
        let audit = common::IntegrityAudit {
            completed: true,
            violations: vec![common::IntegrityViolation {
                path: ".git/hooks/pre-commit".into(),
                change: common::IntegrityChange::Created as i32,
                reverted: true,
            }],
            error: String::new(),
            git: vec![common::GitChange {
                repository: ".git".into(),
                name: "refs/heads/main".into(),
                kind: common::GitChangeKind::RefRewritten as i32,
                old: "a".repeat(40),
                new: "b".repeat(40),
                reverted: true,
            }],
        };
        let back = audit_from_json(&audit_json(&audit)).unwrap();
        assert_eq!(back, audit);
        let failed = common::IntegrityAudit {
            completed: false,
            violations: Vec::new(),
            error: "walk failed".into(),
            git: Vec::new(),
        };
        assert_eq!(audit_from_json(&audit_json(&failed)).unwrap(), failed);
    }

    #[test]
    fn the_limits_and_the_limit_a_run_hit_are_stored_and_read_back() {
        let limits = common::RunLimits {
            enforced: "cgroup-v1".into(),
            memory_bytes: 256 << 20,
            pids: 32,
            cpu_millicores: 500,
            cpu_seconds: 0,
            tmpfs_bytes: 700 << 20,
            tmpfs_inodes: 65_536,
        };
        let hit = common::LimitExceeded {
            resource: "memory".into(),
            limit: 256 << 20,
            message: "the run exceeded its 256 MiB memory limit and was killed by the kernel"
                .into(),
        };
        let isolation = pb::RunIsolation {
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
        let old = isolation_json(&pb::RunIsolation::default(), None, &[]);
        assert_eq!(isolation_from_json(&old).and_then(|i| i.limits), None);
        assert_eq!(limit_exceeded_from_json(&old), None);
    }

    fn destination(host: &str, tier: common::Tier) -> common::NetworkDestination {
        common::NetworkDestination {
            host: host.into(),
            port: 443,
            protocol: "tcp".into(),
            address: "93.184.216.34:443".into(),
            tier: tier as i32,
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

    fn stored(n: NewOutcome) -> Outcome {
        Outcome {
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
            destination("registry.npmjs.org", common::Tier::Auto),
            destination("example.com", common::Tier::Ask),
            destination("metadata.google.internal", common::Tier::Deny),
        ];
        let run = pb::Outcome {
            status: Some(common::ExitStatus {
                status: Some(Exit::Exited(0)),
            }),
            times: times(),
            isolation: Some(pb::RunIsolation {
                sandbox_profile: "network".into(),
                network: true,
                ..Default::default()
            }),
            network: network.clone(),
            ..Default::default()
        };
        let d = DecisionId::try_from("dec_1").unwrap();
        let back = to_wire(&stored(from_wire(d.clone(), run).unwrap()));
        assert_eq!(back.network, network);
        assert_eq!(
            back.isolation.map(|i| i.sandbox_profile).as_deref(),
            Some("network")
        );
        // Without an isolation record the destinations are kept, and no isolation appears.
        let bare = pb::Outcome {
            times: times(),
            result_code: "OK".into(),
            network: network.clone(),
            ..Default::default()
        };
        let back = to_wire(&stored(from_wire(d.clone(), bare).unwrap()));
        assert_eq!((back.network, back.isolation), (network, None));
        // Records from before destinations were reported read back without them.
        let none = pb::Outcome {
            times: times(),
            result_code: "OK".into(),
            ..Default::default()
        };
        let n = from_wire(d, none).unwrap();
        assert!(n.isolation.is_none());
        assert!(to_wire(&stored(n)).network.is_empty());
    }

    #[test]
    fn an_outcome_without_status_or_times_is_refused() {
        let d = DecisionId::try_from("dec_1").unwrap();
        let e = from_wire(d.clone(), pb::Outcome::default()).unwrap_err();
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
        let e = from_wire(
            d,
            pb::Outcome {
                times: times(),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("exit status"), "{e}");
    }
}
