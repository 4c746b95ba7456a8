//! `RecordOutcome`, and the outcome an `AlreadyExecuted` answer replays.

use std::time::Duration;

use toolgate_policy_api::{
    Ended, ExceededLimit, NetworkDestination, Outcome, OutcomeReport, OutputStats, ResourceUsage,
    RunIsolation, RunLimits,
};

use super::{Invalid, duration_to_wire, time_from_wire, time_to_wire};
use crate::common::v1 as common;
use crate::common::v1::exit_status::Status as Exit;
use crate::convert::{
    audit_from_wire, audit_to_wire, identity_from_wire, identity_to_wire, tier_from_wire,
    tier_to_wire,
};
use crate::policy::v1 as pb;

/// `RecordOutcome`'s request on the wire.
pub fn outcome_report_to_wire(r: OutcomeReport) -> pb::RecordOutcomeRequest {
    pb::RecordOutcomeRequest {
        decision_id: r.decision_id,
        outcome: Some(outcome_to_wire(r.outcome)),
    }
}

/// `RecordOutcome`'s request in protocol terms; the outcome is required.
pub fn outcome_report_from_wire(r: pb::RecordOutcomeRequest) -> Result<OutcomeReport, Invalid> {
    let outcome = r
        .outcome
        .ok_or_else(|| Invalid::new("outcome", "outcome is required"))?;
    Ok(OutcomeReport {
        decision_id: r.decision_id,
        outcome: outcome_from_wire(outcome),
    })
}

fn duration_from_wire(d: Option<prost_types::Duration>) -> Option<Duration> {
    d.and_then(|d| Duration::try_from(d).ok())
}

fn stats_to_wire(s: OutputStats) -> common::OutputStats {
    common::OutputStats {
        total_bytes: s.total_bytes,
        dropped_bytes: s.dropped_bytes,
        truncated: s.truncated,
    }
}

fn stats_from_wire(s: common::OutputStats) -> OutputStats {
    OutputStats {
        total_bytes: s.total_bytes,
        dropped_bytes: s.dropped_bytes,
        truncated: s.truncated,
    }
}

fn ended_to_wire(e: Ended) -> common::ExitStatus {
    let status = match e {
        Ended::Exited(code) => Exit::Exited(code),
        Ended::Signaled {
            signal,
            name,
            core_dumped,
        } => Exit::Signaled(common::Signaled {
            signal,
            name,
            core_dumped,
        }),
        Ended::TimedOut { timeout, killed } => Exit::TimedOut(common::TimedOut {
            timeout: timeout.and_then(duration_to_wire),
            killed,
        }),
        Ended::Cancelled(cause) => Exit::Cancelled(common::Cancelled { cause }),
        Ended::SpawnFailed { reason, errno } => {
            Exit::SpawnFailed(common::SpawnFailed { reason, errno })
        }
        Ended::Completed(summary) => Exit::Completed(common::Completed { summary }),
    };
    common::ExitStatus {
        status: Some(status),
    }
}

fn ended_from_wire(s: Exit) -> Ended {
    match s {
        Exit::Exited(code) => Ended::Exited(code),
        Exit::Signaled(s) => Ended::Signaled {
            signal: s.signal,
            name: s.name,
            core_dumped: s.core_dumped,
        },
        Exit::TimedOut(t) => Ended::TimedOut {
            timeout: duration_from_wire(t.timeout),
            killed: t.killed,
        },
        Exit::Cancelled(c) => Ended::Cancelled(c.cause),
        Exit::SpawnFailed(f) => Ended::SpawnFailed {
            reason: f.reason,
            errno: f.errno,
        },
        Exit::Completed(c) => Ended::Completed(c.summary),
    }
}

fn usage_to_wire(u: ResourceUsage) -> common::ResourceUsage {
    common::ResourceUsage {
        wall_time: duration_to_wire(u.wall_time),
        user_cpu_time: duration_to_wire(u.user_cpu),
        system_cpu_time: duration_to_wire(u.system_cpu),
        peak_rss_bytes: u.peak_rss_bytes,
        peak_memory_bytes: u.peak_memory_bytes,
        oom_killed: u.oom_killed,
        cpu_throttled: duration_to_wire(u.cpu_throttled),
    }
}

fn usage_from_wire(u: common::ResourceUsage) -> ResourceUsage {
    let d = |d| duration_from_wire(d).unwrap_or_default();
    ResourceUsage {
        wall_time: d(u.wall_time),
        user_cpu: d(u.user_cpu_time),
        system_cpu: d(u.system_cpu_time),
        peak_rss_bytes: u.peak_rss_bytes,
        peak_memory_bytes: u.peak_memory_bytes,
        oom_killed: u.oom_killed,
        cpu_throttled: d(u.cpu_throttled),
    }
}

fn limits_to_wire(l: RunLimits) -> common::RunLimits {
    common::RunLimits {
        enforced: l.enforced,
        memory_bytes: l.memory_bytes,
        pids: l.pids,
        cpu_millicores: l.cpu_millicores,
        cpu_seconds: l.cpu_seconds,
        tmpfs_bytes: l.tmpfs_bytes,
        tmpfs_inodes: l.tmpfs_inodes,
    }
}

fn limits_from_wire(l: common::RunLimits) -> RunLimits {
    RunLimits {
        enforced: l.enforced,
        memory_bytes: l.memory_bytes,
        pids: l.pids,
        cpu_millicores: l.cpu_millicores,
        cpu_seconds: l.cpu_seconds,
        tmpfs_bytes: l.tmpfs_bytes,
        tmpfs_inodes: l.tmpfs_inodes,
    }
}

fn isolation_to_wire(i: RunIsolation) -> pb::RunIsolation {
    pb::RunIsolation {
        sandbox_profile: i.sandbox_profile,
        sandboxed: i.sandboxed,
        namespaces: i.namespaces,
        landlock_abi: i.landlock_abi,
        seccomp: i.seccomp,
        network: i.network,
        pid_limit: i.pid_limit,
        limits: i.limits.map(limits_to_wire),
    }
}

fn isolation_from_wire(i: pb::RunIsolation) -> RunIsolation {
    RunIsolation {
        sandbox_profile: i.sandbox_profile,
        sandboxed: i.sandboxed,
        namespaces: i.namespaces,
        landlock_abi: i.landlock_abi,
        seccomp: i.seccomp,
        network: i.network,
        pid_limit: i.pid_limit,
        limits: i.limits.map(limits_from_wire),
    }
}

/// A destination a run's egress gate saw, on the wire.
pub fn destination_to_wire(d: NetworkDestination) -> common::NetworkDestination {
    common::NetworkDestination {
        host: d.host,
        port: d.port,
        protocol: d.protocol,
        address: d.address,
        tier: d.tier.map_or(common::Tier::Unspecified, tier_to_wire) as i32,
        rule_id: d.rule_id,
        approval_id: d.approval_id,
        connections: d.connections,
        refused: d.refused,
        bytes_sent: d.bytes_sent,
        bytes_received: d.bytes_received,
        refusal: d.refusal,
        message: d.message,
    }
}

fn destination_from_wire(d: common::NetworkDestination) -> NetworkDestination {
    NetworkDestination {
        host: d.host,
        port: d.port,
        protocol: d.protocol,
        address: d.address,
        tier: tier_from_wire(d.tier),
        rule_id: d.rule_id,
        approval_id: d.approval_id,
        connections: d.connections,
        refused: d.refused,
        bytes_sent: d.bytes_sent,
        bytes_received: d.bytes_received,
        refusal: d.refusal,
        message: d.message,
    }
}

/// An outcome on the wire.
pub fn outcome_to_wire(o: Outcome) -> pb::Outcome {
    let times = (o.started_at.is_some() || o.finished_at.is_some()).then(|| common::Timestamps {
        started_at: o.started_at.map(time_to_wire),
        finished_at: o.finished_at.map(time_to_wire),
    });
    pb::Outcome {
        status: o.ended.map(ended_to_wire),
        times,
        usage: o.usage.map(usage_to_wire),
        stdout: o.stdout.map(stats_to_wire),
        stderr: o.stderr.map(stats_to_wire),
        executor: o.executor.map(identity_to_wire),
        result_code: o.result_code,
        result_reason: o.result_reason,
        isolation: o.isolation.map(isolation_to_wire),
        audit: o.audit.as_ref().map(audit_to_wire),
        not_started: o.not_started,
        limit_exceeded: o.limit_exceeded.map(|l| common::LimitExceeded {
            resource: l.resource,
            limit: l.limit,
            message: l.message,
        }),
        network: o.network.into_iter().map(destination_to_wire).collect(),
    }
}

/// A wire outcome in protocol terms. An exit status without one of its cases reads as
/// absent; an audit change this build does not know reads as `modified`.
pub fn outcome_from_wire(o: pb::Outcome) -> Outcome {
    let times = o.times.unwrap_or_default();
    Outcome {
        started_at: time_from_wire(times.started_at),
        finished_at: time_from_wire(times.finished_at),
        ended: o.status.and_then(|s| s.status).map(ended_from_wire),
        usage: o.usage.map(usage_from_wire),
        stdout: o.stdout.map(stats_from_wire),
        stderr: o.stderr.map(stats_from_wire),
        executor: o.executor.map(identity_from_wire),
        result_code: o.result_code,
        result_reason: o.result_reason,
        isolation: o.isolation.map(isolation_from_wire),
        audit: o.audit.map(audit_from_wire),
        not_started: o.not_started,
        limit_exceeded: o.limit_exceeded.map(|l| ExceededLimit {
            resource: l.resource,
            limit: l.limit,
            message: l.message,
        }),
        network: o.network.into_iter().map(destination_from_wire).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;
    use toolgate_core::{AuditReport, ExecutorIdentity, IntegrityChange, IntegrityViolation, Tier};

    #[test]
    fn outcomes_round_trip_through_the_wire() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let run = Outcome {
            started_at: Some(t0),
            finished_at: Some(t0 + Duration::from_millis(1500)),
            ended: Some(Ended::Signaled {
                signal: 9,
                name: "SIGKILL".into(),
                core_dumped: false,
            }),
            usage: Some(ResourceUsage {
                wall_time: Duration::from_millis(3),
                peak_rss_bytes: 4096,
                ..Default::default()
            }),
            stdout: Some(OutputStats {
                total_bytes: 10,
                dropped_bytes: 2,
                truncated: true,
            }),
            stderr: Some(OutputStats::default()),
            executor: Some(ExecutorIdentity {
                executor_id: "e-1".into(),
                ..Default::default()
            }),
            isolation: Some(RunIsolation {
                sandbox_profile: "workspace".into(),
                sandboxed: true,
                namespaces: vec!["user".into(), "mount".into()],
                landlock_abi: 4,
                seccomp: true,
                network: false,
                pid_limit: 64,
                limits: Some(RunLimits {
                    enforced: "cgroup_v2".into(),
                    memory_bytes: 1 << 20,
                    ..Default::default()
                }),
            }),
            audit: Some(Ok(AuditReport {
                violations: vec![IntegrityViolation {
                    path: ".git/hooks/x".into(),
                    change: IntegrityChange::Created,
                    reverted: true,
                }],
                git: Vec::new(),
            })),
            limit_exceeded: Some(ExceededLimit {
                resource: "memory".into(),
                limit: 1 << 20,
                message: "out of memory".into(),
            }),
            network: vec![NetworkDestination {
                host: "example.com".into(),
                port: 443,
                protocol: "tcp".into(),
                tier: Some(Tier::Auto),
                connections: 1,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(outcome_from_wire(outcome_to_wire(run.clone())), run);
        let refused = Outcome {
            not_started: true,
            result_code: "RESOURCE_EXHAUSTED".into(),
            result_reason: "BUSY".into(),
            ..Default::default()
        };
        let wire = outcome_to_wire(refused.clone());
        assert!(wire.times.is_none() && wire.status.is_none());
        assert_eq!(outcome_from_wire(wire), refused);
        let report = outcome_report_from_wire(pb::RecordOutcomeRequest {
            decision_id: "d-1".into(),
            outcome: None,
        });
        assert_eq!(report.unwrap_err().field, "outcome");
    }
}
