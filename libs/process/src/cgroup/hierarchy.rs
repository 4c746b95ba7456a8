//! Finding the cgroup the host delegated to the executor and setting up the runs' parent in it.
//! Delegation is probed by doing what runs need (create a cgroup, write its limits, remove it),
//! never by reading permissions: a read-only mount, a missing controller or a foreign owner
//! all show up as the write that fails.

use std::io;
use std::path::{Path, PathBuf};

use super::{RunCgroup, write, write_if_present};
use crate::limits::{LimitsEnforced, ResourceLimits};

/// The runs' parent cgroup(s), created at startup; removed when dropped.
#[derive(Debug)]
pub(crate) enum Hierarchy {
    /// cgroup v2: one directory with `memory`, `pids` (and `cpu` when `cpu`) enabled for its
    /// children.
    V2 { runs: PathBuf, cpu: bool },
    /// cgroup v1: one directory per controller hierarchy.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// What all runs together may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Budget {
    /// Memory of all runs together (`None`: the executor's own limit minus `reserve_bytes`).
    pub memory_bytes: Option<u64>,
    /// Memory kept for the executor itself below its own limit.
    pub reserve_bytes: u64,
    /// Processes of all runs together.
    pub pids: u32,
}

/// A parsed `/proc/self/mountinfo` line that matters here.
struct Mount<'a> {
    root: &'a str,
    point: &'a str,
    fstype: &'a str,
    super_options: &'a str,
}

fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut l = left.split_whitespace();
        let root = l.nth(3)?;
        let point = l.next()?;
        let mut r = right.split_whitespace();
        let fstype = r.next()?;
        let _source = r.next()?;
        let super_options = r.next().unwrap_or_default();
        Some(Mount {
            root,
            point,
            fstype,
            super_options,
        })
    })
}

/// The directory of this process's cgroup on `mount`, given its path from `/proc/self/cgroup`.
fn dir_on(mount: &Mount<'_>, path: &str) -> PathBuf {
    // A mount of a subtree (a container's view) has that subtree as its root.
    let rel = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(mount.root).unwrap_or(path)
    };
    Path::new(mount.point).join(rel.trim_start_matches('/'))
}

/// The executor's own cgroup v2 directory, or the one holding `controller` on v1.
fn own_dir(mountinfo: &str, cgroups: &str, controller: Option<&str>) -> Option<PathBuf> {
    let path = cgroups.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            None => list.is_empty(),
            Some(c) => list.split(',').any(|x| x == c),
        };
        hit.then(|| path.trim().to_owned())
    })?;
    let mount = mounts(mountinfo).find(|m| match controller {
        None => m.fstype == "cgroup2",
        Some(c) => m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == c),
    })?;
    Some(dir_on(&mount, &path))
}

/// The executor's own cgroup v2 directory under the cgroup2 mount at `mount_point`.
pub(crate) fn own_cgroup_dir(mount_point: &Path) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_owned()))?;
    Some(mount_point.join(path.trim_start_matches('/')))
}

/// `toolgate-runs-<pid>-<n>`: one per runner (a process may have several, as tests do).
fn runs_name() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("toolgate-runs-{}-{n}", std::process::id())
}

impl Hierarchy {
    /// Sets up the runs' parent on cgroup v2 if the executor's cgroup delegates `memory` and
    /// `pids`, else on the v1 hierarchies; `probe` is a run's limits, tried once for real.
    /// The error says what is missing, for `toolgate doctor` and the logs.
    pub(crate) fn delegate(budget: &Budget, probe: &ResourceLimits) -> Result<Hierarchy, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let cgroups = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let v2 = match own_dir(&mountinfo, &cgroups, None) {
            Some(own) => match Self::v2(&own, budget) {
                Ok(h) => return h.probed(probe),
                Err(e) => e,
            },
            None => "no cgroup v2 hierarchy".to_owned(),
        };
        let v1 = match Self::v1(&mountinfo, &cgroups, budget) {
            Ok(h) => return h.probed(probe),
            Err(e) => e,
        };
        Err(format!("cgroup v2: {v2}; cgroup v1: {v1}"))
    }

    /// Whether this host delegates a cgroup for runs' limits under `config` (the same real
    /// writes a runner does at start, undone at once), for tools that choose a configuration.
    pub(crate) fn probe(config: &crate::Config) -> Result<LimitsEnforced, String> {
        let budget = Budget {
            memory_bytes: config.runs_memory_bytes,
            reserve_bytes: config.executor_reserve_bytes,
            pids: config.runs_pids,
        };
        Hierarchy::delegate(&budget, &config.limits).map(|h| h.enforced())
    }

    /// What runs under this hierarchy get.
    pub(crate) fn enforced(&self) -> LimitsEnforced {
        match self {
            Hierarchy::V2 { .. } => LimitsEnforced::CgroupV2,
            Hierarchy::V1 { .. } => LimitsEnforced::CgroupV1,
        }
    }

    /// Whether CPU bandwidth is limited per run.
    pub(crate) fn limits_cpu(&self) -> bool {
        match self {
            Hierarchy::V2 { cpu, .. } => *cpu,
            Hierarchy::V1 { cpu, .. } => cpu.is_some(),
        }
    }

    /// The v2 directory runs are created in (what `cgroup.kill` works on).
    pub(crate) fn v2_runs(&self) -> Option<&Path> {
        match self {
            Hierarchy::V2 { runs, .. } => Some(runs),
            Hierarchy::V1 { .. } => None,
        }
    }

    fn probed(self, probe: &ResourceLimits) -> Result<Hierarchy, String> {
        let cg = RunCgroup::limited(&self, probe)
            .map_err(|e| format!("cannot create a run cgroup: {e}"))?;
        drop(cg);
        Ok(self)
    }

    fn v2(own: &Path, budget: &Budget) -> Result<Hierarchy, String> {
        let available = std::fs::read_to_string(own.join("cgroup.controllers"))
            .map_err(|e| format!("{}: {e}", own.display()))?;
        let has = |c: &str| available.split_whitespace().any(|x| x == c);
        if !has("memory") || !has("pids") {
            return Err(format!(
                "{} does not delegate the memory and pids controllers (it has: {})",
                own.display(),
                available.trim()
            ));
        }
        let cpu = has("cpu");
        let enable = if cpu {
            "+memory +pids +cpu"
        } else {
            "+memory +pids"
        };
        let limit = own_limit(&own.join("memory.max"));
        if std::fs::write(own.join("cgroup.subtree_control"), enable).is_err() {
            // A cgroup with processes of its own cannot enable controllers for its children
            // (v2's no-internal-processes rule): move the executor into a leaf beside the runs.
            let leaf = own.join("toolgate-executor");
            match std::fs::create_dir(&leaf) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                    return Err(format!("cannot create {}: {e}", leaf.display()));
                }
                _ => {}
            }
            std::fs::write(leaf.join("cgroup.procs"), std::process::id().to_string())
                .map_err(|e| format!("cannot move the executor into {}: {e}", leaf.display()))?;
            std::fs::write(own.join("cgroup.subtree_control"), enable).map_err(|e| {
                format!(
                    "cannot enable {enable} in {} (another process shares the executor's cgroup?): {e}",
                    own.display()
                )
            })?;
        }
        remove_stale(own);
        let runs = own.join(runs_name());
        make_dir(&runs)?;
        let h = Hierarchy::V2 {
            runs: runs.clone(),
            cpu,
        };
        let cap = runs_cap(limit, budget);
        let set = || -> io::Result<()> {
            write(&runs, "memory.max", cap)?;
            write_if_present(&runs, "memory.swap.max", 0)?;
            write(&runs, "pids.max", budget.pids)?;
            write(&runs, "cgroup.subtree_control", enable)
        };
        set().map_err(|e| format!("{}: {e}", runs.display()))?;
        Ok(h)
    }

    fn v1(mountinfo: &str, cgroups: &str, budget: &Budget) -> Result<Hierarchy, String> {
        let own = |c: &str| {
            own_dir(mountinfo, cgroups, Some(c)).ok_or_else(|| format!("no {c} hierarchy"))
        };
        let (memory_own, pids_own) = (own("memory")?, own("pids")?);
        let cpu_own = own("cpu").ok();
        let limit = own_limit(&memory_own.join("memory.limit_in_bytes"));
        let name = runs_name();
        for dir in [Some(&memory_own), Some(&pids_own), cpu_own.as_ref()]
            .into_iter()
            .flatten()
        {
            remove_stale(dir);
        }
        let memory = memory_own.join(&name);
        let pids = pids_own.join(&name);
        make_dir(&memory)?;
        // From here on, dropping `h` removes what was created.
        let mut h = Hierarchy::V1 {
            memory: memory.clone(),
            pids: pids.clone(),
            cpu: None,
        };
        make_dir(&pids)?;
        let cap = runs_cap(limit, budget);
        write(&memory, "memory.limit_in_bytes", cap).map_err(|e| format!("{name}: {e}"))?;
        write_if_present(&memory, "memory.memsw.limit_in_bytes", cap)
            .map_err(|e| format!("{name}: {e}"))?;
        write(&pids, "pids.max", budget.pids).map_err(|e| format!("{name}: {e}"))?;
        if let Some(cpu_own) = cpu_own {
            let cpu = cpu_own.join(&name);
            if make_dir(&cpu).is_ok()
                && let Hierarchy::V1 { cpu: slot, .. } = &mut h
            {
                *slot = Some(cpu);
            }
        }
        Ok(h)
    }
}

impl Drop for Hierarchy {
    fn drop(&mut self) {
        // Runs removed their own cgroups; an executor killed mid-run leaves them to the next
        // executor's `remove_stale`.
        let dirs: Vec<&PathBuf> = match &*self {
            Hierarchy::V2 { runs, .. } => vec![runs],
            Hierarchy::V1 { memory, pids, cpu } => [Some(memory), Some(pids), cpu.as_ref()]
                .into_iter()
                .flatten()
                .collect(),
        };
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn make_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// The executor's own memory limit (`max` or v1's near-2^63 "unlimited": none).
fn own_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.trim().parse::<u64>().ok().filter(|v| *v < 1 << 60)
}

/// Memory all runs together may use, as their parent cgroup is capped at: the executor's own
/// limit (its v2 `memory.max`, else its v1 `memory.limit_in_bytes`) or the host's memory,
/// less the reserve, within the configured budget. Read before the executor moves itself
/// into a leaf cgroup, and also when no cgroup is delegated: the admission budget is the same
/// figure either way.
pub(crate) fn runs_memory_budget(budget: &Budget) -> u64 {
    let own = || -> Option<u64> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        own_dir(&mountinfo, &cgroups, None)
            .and_then(|d| own_limit(&d.join("memory.max")))
            .or_else(|| {
                own_dir(&mountinfo, &cgroups, Some("memory"))
                    .and_then(|d| own_limit(&d.join("memory.limit_in_bytes")))
            })
    };
    runs_cap(own(), budget)
}

/// Memory of all runs together: below the executor's own limit (or the host's memory) by the
/// reserve, and within the configured budget.
fn runs_cap(own_limit: Option<u64>, budget: &Budget) -> u64 {
    let host = mem_total().unwrap_or(u64::MAX);
    let ceiling = own_limit.unwrap_or(host).min(host);
    let below = ceiling.saturating_sub(budget.reserve_bytes).max(64 << 20);
    budget.memory_bytes.map_or(below, |b| b.min(below))
}

fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Removes the runs' parents (and the run cgroups inside) of executors that no longer run.
fn remove_stale(own: &Path) {
    let Ok(entries) = std::fs::read_dir(own) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolgate-runs-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(runs) = std::fs::read_dir(e.path()) {
            for r in runs.flatten().filter(|r| r.path().is_dir()) {
                let _ = std::fs::remove_dir(r.path());
            }
        }
        let _ = std::fs::remove_dir(e.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /kubepods/pod1 /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
42 31 0:39 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const CGROUPS: &str = "\
8:pids:/kubepods/pod1/c1
4:memory:/process_api/abc
1:cpu:/
0::/
";

    #[test]
    fn finds_each_controllers_own_directory() {
        assert_eq!(
            own_dir(MOUNTINFO, CGROUPS, Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"))
        );
        // A mount of a subtree: the path is relative to the mount's root.
        assert_eq!(
            own_dir(MOUNTINFO, CGROUPS, Some("pids")),
            Some(PathBuf::from("/sys/fs/cgroup/pids/c1"))
        );
        assert_eq!(
            own_dir(MOUNTINFO, CGROUPS, Some("cpu")),
            Some(PathBuf::from("/sys/fs/cgroup/cpu"))
        );
        assert_eq!(
            own_dir(MOUNTINFO, CGROUPS, None),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(own_dir(MOUNTINFO, CGROUPS, Some("cpuset")), None);
    }

    #[test]
    fn runs_stay_below_the_executors_own_limit() {
        let budget = Budget {
            memory_bytes: None,
            reserve_bytes: 512 << 20,
            pids: 4096,
        };
        assert_eq!(runs_cap(Some(4 << 30), &budget), (4 << 30) - (512 << 20));
        let tight = Budget {
            memory_bytes: Some(1 << 30),
            ..budget
        };
        assert_eq!(runs_cap(Some(4 << 30), &tight), 1 << 30);
        assert!(runs_cap(None, &budget) <= mem_total().unwrap_or(u64::MAX));
    }
}
