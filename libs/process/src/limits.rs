//! Resource limits of runs: what a profile asks for, what the host let the executor enforce,
//! and which limit ended a run.

/// The resource limits one run gets (`process.limits`, overridden per profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Memory the run's processes may use together (no swap), in bytes.
    pub memory_bytes: u64,
    /// Processes and threads the run may have at once.
    pub pids: u32,
    /// CPU bandwidth in thousandths of a core (1000: one core).
    pub cpu_millicores: u32,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            memory_bytes: 2 << 30,
            pids: 1024,
            cpu_millicores: 1000,
        }
    }
}

/// What a profile changes of the configured [`ResourceLimits`] and timeout ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProfileLimits {
    /// Replaces `memory_bytes`.
    pub memory_bytes: Option<u64>,
    /// Replaces `pids`.
    pub pids: Option<u32>,
    /// Replaces `cpu_millicores`.
    pub cpu_millicores: Option<u32>,
    /// A lower ceiling than the executor's `max_timeout` for runs under this profile.
    pub max_timeout: Option<std::time::Duration>,
}

impl ProfileLimits {
    /// `base` with this profile's replacements applied.
    pub fn apply(&self, base: ResourceLimits) -> ResourceLimits {
        ResourceLimits {
            memory_bytes: self.memory_bytes.unwrap_or(base.memory_bytes),
            pids: self.pids.unwrap_or(base.pids),
            cpu_millicores: self.cpu_millicores.unwrap_or(base.cpu_millicores),
        }
    }
}

/// What one run holds of the executor's run memory budget while it runs: its memory limit
/// plus the sizes of its private tmpfs mounts (their pages are memory too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The run's memory limit (its profile's, else `process.limits.memory_bytes`).
    pub memory_bytes: u64,
    /// The sizes of the run's private tmpfs mounts (`/tmp`, `/dev/shm`, HOME) together.
    pub tmpfs_bytes: u64,
}

impl Reservation {
    /// Memory limit and tmpfs sizes together.
    pub const fn total(self) -> u64 {
        self.memory_bytes.saturating_add(self.tmpfs_bytes)
    }
}

impl std::fmt::Display for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (a {} memory limit and {} of tmpfs)",
            human_bytes(self.total()),
            human_bytes(self.memory_bytes),
            human_bytes(self.tmpfs_bytes)
        )
    }
}

/// How a run's resource limits were enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitsEnforced {
    /// A per-run cgroup on a cgroup v2 hierarchy: memory, processes and CPU.
    CgroupV2,
    /// Per-run cgroups on cgroup v1 hierarchies: memory, processes and CPU.
    CgroupV1,
    /// No delegated cgroup: only the kernel's per-process fallbacks (`pid_max` of the run's PID
    /// namespace, `RLIMIT_CPU`, tmpfs sizes); memory is not bounded.
    Rlimit,
    /// Nothing bounds the run's resources.
    None,
}

impl LimitsEnforced {
    /// The wire spelling: `cgroup-v2`, `cgroup-v1`, `rlimit` or `none`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitsEnforced::CgroupV2 => "cgroup-v2",
            LimitsEnforced::CgroupV1 => "cgroup-v1",
            LimitsEnforced::Rlimit => "rlimit",
            LimitsEnforced::None => "none",
        }
    }

    /// Whether memory, processes and CPU are all bounded per run.
    pub const fn is_cgroup(self) -> bool {
        matches!(self, LimitsEnforced::CgroupV2 | LimitsEnforced::CgroupV1)
    }
}

/// The limits a run actually got; `None` where nothing enforces that resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnforcedLimits {
    /// The mechanism.
    pub enforced: LimitsEnforced,
    /// The run's memory limit in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes the run may have at once (`pids.max`, else its PID namespace's `pid_max`).
    pub pids: Option<u32>,
    /// CPU bandwidth in thousandths of a core.
    pub cpu_millicores: Option<u32>,
    /// `RLIMIT_CPU` of the run's processes, in seconds.
    pub cpu_seconds: Option<u64>,
    /// Bytes the run's private tmpfs mounts (`/tmp`, `/dev/shm`, HOME) may hold together.
    pub tmpfs_bytes: Option<u64>,
    /// Files each of those mounts may hold.
    pub tmpfs_inodes: Option<u64>,
}

impl EnforcedLimits {
    /// Nothing enforced.
    pub const NONE: EnforcedLimits = EnforcedLimits {
        enforced: LimitsEnforced::None,
        memory_bytes: None,
        pids: None,
        cpu_millicores: None,
        cpu_seconds: None,
        tmpfs_bytes: None,
        tmpfs_inodes: None,
    };
}

/// A limit the run ran into, which ended it or made it fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitExceeded {
    /// The kernel's OOM killer killed a process of the run at its memory limit.
    Memory {
        /// The limit in bytes.
        limit_bytes: u64,
    },
    /// A fork or clone failed because the run had as many processes as it may.
    Pids {
        /// The limit.
        limit: u32,
    },
    /// The run used up its CPU time (`RLIMIT_CPU`).
    CpuTime {
        /// The limit in seconds.
        seconds: u64,
    },
    /// The run added more bytes to the workspace than its disk budget allows.
    DiskBytes {
        /// The budget in bytes.
        limit_bytes: u64,
    },
    /// The run created more entries in the workspace than its disk budget allows.
    DiskFiles {
        /// The budget in entries.
        limit: u64,
    },
    /// A process of the run wrote past `RLIMIT_FSIZE` (the disk budget lowers it to the
    /// budget) and the kernel killed it with `SIGXFSZ`.
    FileSize {
        /// The limit in bytes.
        limit_bytes: u64,
    },
}

impl LimitExceeded {
    /// The wire spelling of the resource: `memory`, `pids`, `cpu_time`, `disk_bytes`,
    /// `disk_files`, `file_size`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitExceeded::Memory { .. } => "memory",
            LimitExceeded::Pids { .. } => "pids",
            LimitExceeded::CpuTime { .. } => "cpu_time",
            LimitExceeded::DiskBytes { .. } => "disk_bytes",
            LimitExceeded::DiskFiles { .. } => "disk_files",
            LimitExceeded::FileSize { .. } => "file_size",
        }
    }

    /// The limit's value (bytes, processes, seconds or files).
    pub const fn value(self) -> u64 {
        match self {
            LimitExceeded::Memory { limit_bytes } => limit_bytes,
            LimitExceeded::Pids { limit } => limit as u64,
            LimitExceeded::CpuTime { seconds } => seconds,
            LimitExceeded::DiskBytes { limit_bytes } => limit_bytes,
            LimitExceeded::DiskFiles { limit } => limit,
            LimitExceeded::FileSize { limit_bytes } => limit_bytes,
        }
    }

    /// What happened, worded for the model that started the run.
    pub fn message(self) -> String {
        match self {
            LimitExceeded::Memory { limit_bytes } => format!(
                "the run exceeded its {} memory limit and was killed by the kernel",
                human_bytes(limit_bytes)
            ),
            LimitExceeded::Pids { limit } => format!(
                "the run reached its limit of {limit} processes; a fork or thread creation failed"
            ),
            LimitExceeded::CpuTime { seconds } => {
                format!("the run used up its {seconds} s of CPU time and was killed")
            }
            LimitExceeded::DiskBytes { limit_bytes } => format!(
                "the run wrote more than its {} disk budget into the workspace and was stopped; delete what it wrote (DeletePath) before running again",
                human_bytes(limit_bytes)
            ),
            LimitExceeded::DiskFiles { limit } => format!(
                "the run created more than its budget of {limit} files in the workspace and was stopped; delete what it created (DeletePath, recursive for a directory) before running again"
            ),
            LimitExceeded::FileSize { limit_bytes } => format!(
                "the run exceeded its {} file-size limit: a write past it killed the writing process (SIGXFSZ); no file may grow beyond it",
                human_bytes(limit_bytes)
            ),
        }
    }
}

/// `256 MiB`, `2 GiB`, `1.5 GiB`, `4096 bytes`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{} {unit}", n / size)
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_limit_in_human_units() {
        assert_eq!(
            LimitExceeded::Memory {
                limit_bytes: 256 << 20
            }
            .message(),
            "the run exceeded its 256 MiB memory limit and was killed by the kernel"
        );
        assert_eq!(
            LimitExceeded::FileSize {
                limit_bytes: 1 << 20
            }
            .message(),
            "the run exceeded its 1 MiB file-size limit: a write past it killed the writing process (SIGXFSZ); no file may grow beyond it"
        );
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(100), "100 bytes");
    }

    #[test]
    fn a_profile_replaces_only_what_it_sets() {
        let p = ProfileLimits {
            memory_bytes: Some(8 << 30),
            ..ProfileLimits::default()
        };
        let l = p.apply(ResourceLimits::default());
        assert_eq!(l.memory_bytes, 8 << 30);
        assert_eq!(l.pids, ResourceLimits::default().pids);
    }
}
