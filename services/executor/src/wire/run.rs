//! A run on the wire: the runner's events as `RunResponse`s, and the records they carry
//! (isolation, limits, exit status, resource usage, output summaries).

use std::time::Duration;

use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::audit_to_wire;
use toolgate_contracts::executor::v1 as pb;
use toolgate_process::{Event, Isolation, KillMechanism, Status as RunStatus, StreamSummary};

use crate::authz::Receipt;

/// What a run's `Started` says about it beyond the runner's event.
#[derive(Debug, Clone)]
pub(crate) struct RunTag {
    /// The run's id in this executor's registry.
    pub run_id: String,
    /// This executor, as every `Started` names it.
    pub executor: common::ExecutorIdentity,
    /// Whether the run outlives its call.
    pub background: bool,
    /// The canonical working directory the run started in.
    pub cwd: String,
}

/// The wire form of one of a run's events; `receipt` is the decision that let it run.
pub(crate) fn event(event: Event, receipt: &Receipt, tag: &RunTag) -> pb::RunResponse {
    use pb::run_response::Event as E;
    let event = match event {
        Event::Started(s) => E::Started(pb::Started {
            pid: s.pid as i32,
            isolation: Some(isolation(&s.isolation)),
            started_at: Some(prost_types::Timestamp::from(s.started_at)),
            decision_id: receipt.decision_id.clone(),
            approval_id: receipt.approval_id.clone(),
            rule_id: receipt.rule_id.clone(),
            decision: receipt.tier.to_owned(),
            run_id: tag.run_id.clone(),
            executor: Some(tag.executor.clone()),
            background: tag.background,
            cwd: tag.cwd.clone(),
        }),
        Event::Output(o) => E::Output(pb::OutputChunk {
            stream: stream(o.stream) as i32,
            offset: o.offset,
            data: o.data,
        }),
        Event::Exited(x) => E::Exited(pb::Exited {
            status: Some(exit_status(&x.status)),
            stdout: Some(summary(&x.stdout)),
            stderr: Some(summary(&x.stderr)),
            usage: Some(usage(&x.usage)),
            finished_at: Some(prost_types::Timestamp::from(x.finished_at)),
            audit: x.audit.as_ref().map(audit_to_wire),
            limit_exceeded: x.limit.map(limit_to_wire),
            network: Vec::new(),
            session: None,
        }),
    };
    pb::RunResponse { event: Some(event) }
}

/// An output stream on the wire.
pub(crate) fn stream(s: toolgate_process::Stream) -> pb::Stream {
    match s {
        toolgate_process::Stream::Stdout => pb::Stream::Stdout,
        toolgate_process::Stream::Stderr => pb::Stream::Stderr,
    }
}

/// What a run's output stream amounted to, with its tail.
pub(crate) fn summary(s: &StreamSummary) -> pb::StreamSummary {
    pb::StreamSummary {
        stats: Some(common::OutputStats {
            total_bytes: s.total_bytes,
            dropped_bytes: s.dropped_bytes,
            truncated: s.truncated,
        }),
        tail: s.tail.clone(),
        tail_offset: s.tail_offset,
    }
}

/// The wire form of a run's final status.
pub(crate) fn exit_status(s: &RunStatus) -> common::ExitStatus {
    use common::exit_status::Status as S;
    let status = match s {
        RunStatus::Exited(code) => S::Exited(*code),
        RunStatus::Signaled {
            signal,
            core_dumped,
        } => S::Signaled(common::Signaled {
            signal: *signal,
            name: toolgate_process::signal_name(*signal),
            core_dumped: *core_dumped,
        }),
        RunStatus::TimedOut { timeout, killed } => S::TimedOut(common::TimedOut {
            timeout: Some(duration(*timeout)),
            killed: *killed,
        }),
        RunStatus::Cancelled(cause) => S::Cancelled(common::Cancelled {
            cause: cause.as_str().to_owned(),
        }),
        RunStatus::SpawnFailed { reason, errno } => S::SpawnFailed(common::SpawnFailed {
            reason: reason.clone(),
            errno: *errno,
        }),
    };
    common::ExitStatus {
        status: Some(status),
    }
}

/// How the runner kills a run's processes, on the wire.
pub(crate) fn kill_mechanism(k: KillMechanism) -> pb::KillMechanism {
    match k {
        KillMechanism::PidNamespace => pb::KillMechanism::PidNamespace,
        KillMechanism::Cgroup => pb::KillMechanism::Cgroup,
        KillMechanism::ProcessGroup => pb::KillMechanism::ProcessGroup,
    }
}

/// What confined a run, on the wire.
pub(crate) fn isolation(i: &Isolation) -> pb::Isolation {
    pb::Isolation {
        kill_mechanism: kill_mechanism(i.kill_mechanism) as i32,
        own_process_group: i.own_process_group,
        no_new_privs: i.no_new_privs,
        landlock_abi: i.landlock_abi,
        seccomp: i.seccomp,
        namespaces: i.namespaces.iter().map(|s| (*s).to_owned()).collect(),
        sandbox_profile: i.sandbox_profile.clone(),
        sandboxed: i.sandboxed,
        network: i.network,
        pid_limit: i.pid_limit.unwrap_or(0),
        limits: Some(limits_to_wire(&i.limits)),
    }
}

/// A wire duration; the configured limits are far below the (saturated) overflow point.
pub(crate) fn duration(d: Duration) -> prost_types::Duration {
    d.try_into().unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A run's resource usage on the wire.
pub(crate) fn usage(u: &toolgate_process::Usage) -> common::ResourceUsage {
    common::ResourceUsage {
        wall_time: Some(duration(u.wall_time)),
        user_cpu_time: Some(duration(u.user_cpu)),
        system_cpu_time: Some(duration(u.system_cpu)),
        peak_rss_bytes: u.peak_rss_bytes,
        peak_memory_bytes: u.peak_memory_bytes,
        oom_killed: u.oom_killed,
        cpu_throttled: Some(duration(u.cpu_throttled)),
    }
}

/// The limits a run got, on the wire (0 where nothing bounds a resource).
pub(crate) fn limits_to_wire(l: &toolgate_process::EnforcedLimits) -> common::RunLimits {
    common::RunLimits {
        enforced: l.enforced.as_str().to_owned(),
        memory_bytes: l.memory_bytes.unwrap_or(0),
        pids: l.pids.unwrap_or(0),
        cpu_millicores: l.cpu_millicores.unwrap_or(0),
        cpu_seconds: l.cpu_seconds.unwrap_or(0),
        tmpfs_bytes: l.tmpfs_bytes.unwrap_or(0),
        tmpfs_inodes: l.tmpfs_inodes.unwrap_or(0),
    }
}

/// The limit a run ran into, on the wire, with the message for the model.
pub(crate) fn limit_to_wire(l: toolgate_process::LimitExceeded) -> common::LimitExceeded {
    common::LimitExceeded {
        resource: l.as_str().to_owned(),
        limit: l.value(),
        message: l.message(),
    }
}
