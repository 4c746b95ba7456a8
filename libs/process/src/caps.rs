//! What this executor can enforce, probed once when the runner starts (`GetCapabilities`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::event::KillMechanism;
use crate::sys;

/// The executor's self-report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// The toolgate version of this crate.
    pub version: &'static str,
    /// Namespaces a child could be placed in.
    pub namespaces: Namespaces,
    /// Landlock ABI supported by the kernel, 0 if none.
    pub landlock_abi: i32,
    /// Whether the kernel supports seccomp filters.
    pub seccomp: bool,
    /// cgroup v2 support.
    pub cgroup: CgroupSupport,
    /// How descendants of a run are killed (what `Started` reports for every run).
    pub kill_mechanism: KillMechanism,
    /// `pid_max` of each run's PID namespace, when the kernel allows capping it.
    pub pid_limit: Option<u32>,
    /// Run limits and defaults.
    pub limits: LimitsView,
    /// Every sandbox profile and whether this executor can enforce it.
    pub profiles: Vec<ProfileStatus>,
    /// The profile a run gets when it names none.
    pub default_profile: String,
    /// Runs are refused when the default profile cannot be enforced.
    pub require_sandbox: bool,
    /// What enforces runs' resource limits (a per-run cgroup), or why no cgroup can.
    pub limits_enforced: Result<crate::limits::LimitsEnforced, String>,
    /// Runs are refused when no cgroup can enforce their limits.
    pub require_limits: bool,
}

/// A sandbox profile as `GetCapabilities` and `toolgate doctor` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileStatus {
    /// The profile's name.
    pub name: String,
    /// `Ok(landlock_abi)` when enforceable (0 for an unconfined profile), else what is missing.
    pub available: Result<i32, String>,
    /// The profile's runs reach the network (through the executor's egress gate when confined).
    pub network: bool,
    /// The profile runs without any sandbox (an operator's explicit choice).
    pub unconfined: bool,
}

/// Namespaces the executor can create.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Namespaces {
    /// User namespaces.
    pub user: bool,
    /// PID namespaces.
    pub pid: bool,
    /// Network namespaces.
    pub net: bool,
    /// Mount namespaces.
    pub mount: bool,
}

/// What cgroup v2 support was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupSupport {
    /// A cgroup v2 hierarchy is mounted.
    pub available: bool,
    /// The executor could create (and remove) a child cgroup under its own.
    pub writable: bool,
    /// Where the hierarchy is mounted.
    pub mount_point: Option<PathBuf>,
}

/// The configured run limits, as `GetCapabilities` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsView {
    /// Timeout when a request sets none.
    pub default_timeout: Duration,
    /// Largest timeout a request may ask for.
    pub max_timeout: Duration,
    /// Grace between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// Default per-stream cap.
    pub default_cap_bytes: u64,
    /// Largest per-stream cap.
    pub max_cap_bytes: u64,
    /// Default tail size.
    pub default_tail_bytes: u64,
    /// Concurrent runs admitted.
    pub max_concurrent_runs: u32,
    /// Resource limits by name.
    pub rlimits: Vec<(&'static str, u64)>,
    /// Environment names callers may add (`*` suffix = prefix).
    pub allowed_env: Vec<String>,
}

impl LimitsView {
    pub(crate) fn of(config: &Config) -> Self {
        LimitsView {
            default_timeout: config.default_timeout,
            max_timeout: config.max_timeout,
            kill_grace: config.kill_grace,
            default_cap_bytes: config.default_cap_bytes,
            max_cap_bytes: config.max_cap_bytes,
            default_tail_bytes: config.default_tail_bytes as u64,
            max_concurrent_runs: u32::try_from(config.max_concurrent_runs).unwrap_or(u32::MAX),
            rlimits: config.rlimits.view(),
            allowed_env: config.allowed_env.patterns(),
        }
    }
}

/// Probes everything that does not depend on the runner's own isolation choice.
pub(crate) fn probe_host() -> (Namespaces, i32, bool, CgroupSupport) {
    let ns = sys::probe_namespaces();
    let namespaces = Namespaces {
        user: ns.user,
        pid: ns.pid,
        net: ns.net,
        mount: ns.mount,
    };
    (
        namespaces,
        sys::landlock_abi(),
        seccomp_supported(),
        probe_cgroup(),
    )
}

/// The kernel reports a `Seccomp:` line in `/proc/self/status` only when built with seccomp.
fn seccomp_supported() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}

/// Finds the cgroup2 mount and checks whether a child cgroup can be created under our own.
pub(crate) fn probe_cgroup() -> CgroupSupport {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return CgroupSupport::default();
    };
    let Some(mount_point) = cgroup2_mount(&mountinfo) else {
        return CgroupSupport::default();
    };
    let own = crate::cgroup::own_cgroup_dir(&mount_point).unwrap_or_else(|| mount_point.clone());
    // Creating (and dropping, which removes) a run cgroup is exactly what runs would need.
    let writable = crate::cgroup::RunCgroup::create(&own).is_ok();
    CgroupSupport {
        available: true,
        writable,
        mount_point: Some(mount_point),
    }
}

/// The mount point of the first `cgroup2` file system in a mountinfo table.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        left.split_whitespace()
            .nth(4)
            .map(|p| Path::new(p).to_path_buf())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount() {
        let table = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            cgroup2_mount(table),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/sda rw\n"), None);
    }
}
