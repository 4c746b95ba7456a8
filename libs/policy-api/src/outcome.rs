//! `RecordOutcome`: how an allowed call ended, as its executor reports it and as an
//! `AlreadyExecuted` answer replays it.

use std::time::{Duration, SystemTime};

use toolgate_core::{AuditReport, ExecutorIdentity, Tier};

/// How an allowed call ended, reported against the decision that allowed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeReport {
    /// The decision that allowed the call.
    pub decision_id: String,
    /// What happened.
    pub outcome: Outcome,
}

/// How a call ended. A filesystem call carries its status code name (and `completed` when
/// it succeeded); a run its exit status, usage, output and isolation; a call refused after
/// its decision but before it started is `not_started` with the refusal's code and reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// When it started.
    pub started_at: Option<SystemTime>,
    /// When it ended.
    pub finished_at: Option<SystemTime>,
    /// How it ended; `None` for a filesystem call that failed (see `result_code`).
    pub ended: Option<Ended>,
    /// What a run used.
    pub usage: Option<ResourceUsage>,
    /// A run's stdout.
    pub stdout: Option<OutputStats>,
    /// A run's stderr.
    pub stderr: Option<OutputStats>,
    /// The executor that ran it.
    pub executor: Option<ExecutorIdentity>,
    /// A filesystem call's (or a refusal's) status code name: `OK`, `NOT_FOUND`, ...
    pub result_code: String,
    /// Its `ErrorInfo` reason; empty for `OK`.
    pub result_reason: String,
    /// What a run was given.
    pub isolation: Option<RunIsolation>,
    /// What the after-run audit of the protected set found and undid, or why it could not
    /// finish.
    pub audit: Option<Result<AuditReport, String>>,
    /// Refused after its decision and before it started: nothing ran, so the policy
    /// releases the call for a retry under the same `call_id`.
    pub not_started: bool,
    /// The resource limit the run ran into, if any.
    pub limit_exceeded: Option<ExceededLimit>,
    /// The destinations a run's egress gate saw (or the one a `net.connect` let through).
    pub network: Vec<NetworkDestination>,
}

/// How a run (or a filesystem call) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Exited with this code.
    Exited(i32),
    /// Killed by a signal.
    Signaled {
        /// Its number.
        signal: i32,
        /// Its name (`SIGKILL`); empty when unknown.
        name: String,
        /// Whether it dumped core.
        core_dumped: bool,
    },
    /// Ran out of time.
    TimedOut {
        /// The limit, when known.
        timeout: Option<Duration>,
        /// Whether it had to be killed.
        killed: bool,
    },
    /// Cancelled, with the cause (`client_disconnected`, `disk_limit`, ...).
    Cancelled(String),
    /// Never started.
    SpawnFailed {
        /// Why.
        reason: String,
        /// The errno, 0 when none.
        errno: i32,
    },
    /// A call that completed (a filesystem call, an allowed connection), with a summary.
    Completed(String),
}

/// What a run used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    /// Wall-clock time.
    pub wall_time: Duration,
    /// CPU time in user mode.
    pub user_cpu: Duration,
    /// CPU time in the kernel.
    pub system_cpu: Duration,
    /// Peak resident set of the largest process.
    pub peak_rss_bytes: u64,
    /// Peak memory of the whole run (its cgroup), 0 when unknown.
    pub peak_memory_bytes: u64,
    /// Whether the kernel's OOM killer ended a process of the run.
    pub oom_killed: bool,
    /// Time the run was throttled by its CPU limit.
    pub cpu_throttled: Duration,
}

/// How much of a stream a run wrote and delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputStats {
    /// Bytes written.
    pub total_bytes: u64,
    /// Bytes neither streamed nor kept.
    pub dropped_bytes: u64,
    /// Whether part of it was not delivered live.
    pub truncated: bool,
}

/// What isolation a run was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunIsolation {
    /// The sandbox profile it ran under.
    pub sandbox_profile: String,
    /// Whether it ran sandboxed.
    pub sandboxed: bool,
    /// The namespaces it got (`user`, `mount`, `pid`, `net`, ...).
    pub namespaces: Vec<String>,
    /// The Landlock ABI enforced, 0 for none.
    pub landlock_abi: i32,
    /// Whether a seccomp filter was installed.
    pub seccomp: bool,
    /// Whether it could reach the network.
    pub network: bool,
    /// The process count limit, 0 for none.
    pub pid_limit: u32,
    /// What bounded its resources.
    pub limits: Option<RunLimits>,
}

/// The resource limits a run got (0 where nothing bounds a resource).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// How they were enforced (`cgroup_v2`, `rlimit`, ...).
    pub enforced: String,
    /// Memory.
    pub memory_bytes: u64,
    /// Processes.
    pub pids: u32,
    /// CPU share in thousandths of a core.
    pub cpu_millicores: u32,
    /// CPU time.
    pub cpu_seconds: u64,
    /// Bytes of the run's tmpfs mounts.
    pub tmpfs_bytes: u64,
    /// Inodes of the run's tmpfs mounts.
    pub tmpfs_inodes: u64,
}

/// The resource limit a run ran into.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceededLimit {
    /// Which (`memory`, `pids`, `disk`, ...).
    pub resource: String,
    /// The limit's value.
    pub limit: u64,
    /// What the model is told.
    pub message: String,
}

/// One destination a run's egress gate saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkDestination {
    /// The name the run resolved (lowercase), or the IP literal it used.
    pub host: String,
    /// The port; 0 for a DNS refusal.
    pub port: u32,
    /// `tcp`.
    pub protocol: String,
    /// The address connected to (`ip:port`), empty when none.
    pub address: String,
    /// The decision's tier; `None` when the policy never decided.
    pub tier: Option<Tier>,
    /// The deciding rule.
    pub rule_id: String,
    /// The approval behind the decision, when a human decided.
    pub approval_id: String,
    /// Connections opened (allowed and refused).
    pub connections: u32,
    /// Connections refused.
    pub refused: u32,
    /// Bytes the run sent.
    pub bytes_sent: u64,
    /// Bytes the destination sent back.
    pub bytes_received: u64,
    /// Why the last refused connection was refused; empty when none was.
    pub refusal: String,
    /// The refusal's message.
    pub message: String,
}
