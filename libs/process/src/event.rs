//! The events a run emits: `Started`, `Output` chunks, and exactly one final `Exited`.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use toolgate_core::AuditReport;

/// One event of a run, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The child runs (absent when it failed to spawn).
    Started(Started),
    /// A chunk of live output.
    Output(Output),
    /// The run ended; always the last event.
    Exited(Exited),
}

/// The child started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// The child's pid in the executor's PID namespace.
    pub pid: u32,
    /// The isolation actually applied.
    pub isolation: Isolation,
    /// When the child was spawned.
    pub started_at: SystemTime,
}

/// How descendants of a run are tracked and killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KillMechanism {
    /// The child is PID 1 of a new PID namespace; when it exits the kernel kills every descendant.
    PidNamespace,
    /// The child runs in its own cgroup v2, killed as a whole with `cgroup.kill`.
    Cgroup,
    /// Only the process group is signalled; descendants that call `setsid` can escape.
    ProcessGroup,
}

impl KillMechanism {
    /// A stable lowercase name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            KillMechanism::PidNamespace => "pid_namespace",
            KillMechanism::Cgroup => "cgroup",
            KillMechanism::ProcessGroup => "process_group",
        }
    }
}

/// The isolation applied to a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// How descendants are killed.
    pub kill_mechanism: KillMechanism,
    /// The child runs in its own session and process group.
    pub own_process_group: bool,
    /// `no_new_privs` is set.
    pub no_new_privs: bool,
    /// Landlock ABI enforced, 0 when unconfined.
    pub landlock_abi: i32,
    /// Whether the seccomp filters are installed.
    pub seccomp: bool,
    /// Namespaces the child was placed in (`user`, `pid`, `mount`, `ipc`, `uts`, `net`), and
    /// `session` when a confined run shares its session's IPC namespace, `/tmp` and (not
    /// networked) network namespace (see [`crate::session`]).
    pub namespaces: Vec<&'static str>,
    /// `pid_max` of the child's PID namespace, when capped.
    pub pid_limit: Option<u32>,
    /// The sandbox profile the run was started under.
    pub sandbox_profile: String,
    /// The run is sandboxed (false only under an operator's unconfined profile).
    pub sandboxed: bool,
    /// The run may reach the network: through the executor's egress gate when sandboxed
    /// (its own gated network namespace), as the host does when unconfined.
    pub network: bool,
    /// The resource limits the run got and what enforces them.
    pub limits: crate::limits::EnforcedLimits,
}

/// An output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A chunk of output, bytes exactly as the child wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Which stream.
    pub stream: Stream,
    /// Offset of `data` within the stream.
    pub offset: u64,
    /// The bytes; never decoded.
    pub data: Bytes,
}

/// The final event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    /// How the run ended.
    pub status: Status,
    /// Standard output summary.
    pub stdout: StreamSummary,
    /// Standard error summary.
    pub stderr: StreamSummary,
    /// Time and memory used.
    pub usage: Usage,
    /// When the run ended.
    pub finished_at: SystemTime,
    /// What the after-run audit of the protected set found and undid (`None`: no audit was
    /// asked for, or the run never started); `Err` says why the audit could not finish.
    pub audit: Option<Result<AuditReport, String>>,
    /// The resource limit the run ran into, if any (`Memory`: the kernel killed it at its
    /// memory limit).
    pub limit: Option<crate::limits::LimitExceeded>,
    /// What the run wrote to its file descriptor 3 (at most 64 KiB) when the spec asked for
    /// it with [`crate::RunSpec::capture_state`]; `None` when it did not, or the run never
    /// started.
    pub state: Option<Vec<u8>>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The process exited with this code (0-255).
    Exited(i32),
    /// The process was killed by a signal it did not get from toolgate.
    Signaled {
        /// Signal number.
        signal: i32,
        /// Whether it dumped core.
        core_dumped: bool,
    },
    /// The timeout expired; the run was terminated (TERM, grace, KILL).
    TimedOut {
        /// The timeout in force.
        timeout: Duration,
        /// Whether SIGKILL was needed after the grace period.
        killed: bool,
    },
    /// The run was cancelled and terminated.
    Cancelled(CancelCause),
    /// The process could not be started.
    SpawnFailed {
        /// What went wrong, for example `program not found: frobnicate`.
        reason: String,
        /// The OS error number, 0 if none.
        errno: i32,
    },
}

/// Why a run was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelCause {
    /// The caller cancelled through its `CancelHandle`.
    ClientCancelled,
    /// The event receiver was dropped (client disconnect).
    ClientDisconnected,
    /// The runner shut down.
    Shutdown,
    /// A stream exceeded its cap and the request asked to kill at the cap.
    OutputCap,
    /// Something outside the run renamed, created or removed a path the run's view masks,
    /// binds read-only or pins, which detaches that mount in the run: the run was stopped
    /// before it could read or write what appeared there.
    MaskedPathReplaced,
    /// The run went over its workspace disk budget (bytes written or files created) while
    /// it ran, and was stopped; `Exited.limit` says which budget.
    DiskLimit,
    /// Someone stopped the run through its `CancelHandle::stop` and it did not exit by
    /// itself within the kill grace period (or was killed at once).
    Stopped,
}

impl CancelCause {
    /// The wire spelling (`client_cancelled`, `client_disconnected`, `shutdown`, `output_cap`,
    /// `masked_path_replaced`, `disk_limit`, `stopped`).
    pub const fn as_str(self) -> &'static str {
        match self {
            CancelCause::ClientCancelled => "client_cancelled",
            CancelCause::ClientDisconnected => "client_disconnected",
            CancelCause::Shutdown => "shutdown",
            CancelCause::OutputCap => "output_cap",
            CancelCause::MaskedPathReplaced => "masked_path_replaced",
            CancelCause::DiskLimit => "disk_limit",
            CancelCause::Stopped => "stopped",
        }
    }
}

/// One stream's accounting at exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamSummary {
    /// Exact number of bytes the child wrote.
    pub total_bytes: u64,
    /// Bytes delivered live in `Output` events.
    pub streamed_bytes: u64,
    /// Bytes neither streamed nor kept in the tail.
    pub dropped_bytes: u64,
    /// Whether part of the stream was not delivered live.
    pub truncated: bool,
    /// The last bytes of the stream that were not streamed (at most the tail size); empty when
    /// everything was streamed.
    pub tail: Bytes,
    /// Offset of `tail` within the stream.
    pub tail_offset: u64,
}

/// What a run consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// From spawn to reaping the child.
    pub wall_time: Duration,
    /// User CPU time of the child and the descendants it reaped.
    pub user_cpu: Duration,
    /// System CPU time of the child and the descendants it reaped.
    pub system_cpu: Duration,
    /// Peak resident set size of the child (or its largest reaped descendant), in bytes.
    pub peak_rss_bytes: u64,
    /// Peak memory of the whole run (every process, page cache and tmpfs it charged), from
    /// its cgroup; 0 without one.
    pub peak_memory_bytes: u64,
    /// The kernel's OOM killer killed a process of the run at its memory limit.
    pub oom_killed: bool,
    /// Time the run was held back at its CPU limit (from its cgroup).
    pub cpu_throttled: Duration,
}

/// The conventional name of a signal number (`SIGKILL`), or `SIG<n>` when unknown.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("SIG{signal}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_are_conventional() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(25), "SIGXFSZ");
        assert_eq!(signal_name(64), "SIG64");
    }
}
