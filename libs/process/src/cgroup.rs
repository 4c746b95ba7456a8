//! Per-run cgroups: resource limits (memory without swap, processes, CPU) where the host
//! delegates a cgroup to the executor, on cgroup v2 or on the v1 `memory`, `pids` and `cpu`
//! hierarchies; and, without a PID namespace, the kill mechanism (`cgroup.kill`).
//!
//! Every run cgroup lives under one parent the executor creates at startup
//! (`toolgate-runs-<pid>-<n>`), whose memory limit keeps the executor's own headroom: however many
//! runs there are, together they cannot take the executor's memory. The child joins the run's
//! cgroups before anything else (before it enters the run's user namespace), so every
//! descendant is born inside them.

mod hierarchy;
mod spares;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::process::{Pid, Signal};

pub(crate) use hierarchy::{Budget, Hierarchy, own_cgroup_dir, runs_memory_budget};
pub(crate) use spares::Spares;

use crate::limits::ResourceLimits;
use crate::sys::CgroupJoin;

/// Distinguishes the cgroups of one executor process.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How long removal waits for killed processes to leave the cgroup.
const REMOVE_ATTEMPTS: u32 = 200;
const REMOVE_BACKOFF: Duration = Duration::from_millis(5);

/// Largest charge a released cgroup may still hold and be used again (see
/// [`RunCgroup::rearm`]).
const REUSE_MAX_CHARGE: u64 = 8 << 20;

/// `cpu.max` / `cpu.cfs_period_us`: the bandwidth period.
const CPU_PERIOD_US: u64 = 100_000;

/// One run's cgroups (one on v2, one per controller on v1); killed and removed when dropped,
/// if not removed before.
#[derive(Debug)]
pub(crate) struct RunCgroup {
    /// Every directory the child joins; the first is the one whose members are signalled.
    dirs: Vec<PathBuf>,
    /// The directory with `cgroup.kill` (v2).
    v2: Option<PathBuf>,
    /// Where each statistic is read (absent: not limited by a cgroup).
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
    removed: bool,
    /// What the child joins with, opened when the directories were made (the spawn gets
    /// copies).
    join: CgroupJoin,
    /// The files [`RunCgroup::stats`] reads, opened with the directories.
    counters: Counters,
    /// The counters as they stood when this run took the cgroup (zero for a new one): a
    /// cgroup used again reports only what its current run added.
    base: Base,
    /// The runs' parent, kept until this cgroup is gone: a runner dropped while its last run
    /// is still being removed must not try to remove the parent first (and leave it behind).
    parent: Option<std::sync::Arc<Spares>>,
    /// The limits it was taken with from the parent's spares, for [`RunCgroup::replenish`].
    taken_with: Option<ResourceLimits>,
    /// Whether its run could write the cgroup's files (an unconfined run): then it is used
    /// again only if [`RunCgroup::unchanged`] (see [`Spares::take`]).
    run_could_write: bool,
    /// The limits as the kernel showed them once written, each with its file open for reading
    /// (see [`RunCgroup::unchanged`]).
    settings: Vec<Setting>,
    /// CPU its runs used since its quota was last written (see [`RunCgroup::rearm`]).
    cpu_since_refill: Duration,
}

/// What the kernel counted for a run's cgroups when it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CgroupStats {
    /// Processes the OOM killer killed at the memory limit.
    pub oom_kills: u64,
    /// Largest memory use of the run, in bytes.
    pub peak_memory_bytes: Option<u64>,
    /// Forks refused at `pids.max`.
    pub pids_refused: u64,
    /// CPU time of the whole run (v2: every process, reaped or not).
    pub cpu_time: Option<Duration>,
    /// Time the run was throttled at its CPU limit.
    pub throttled: Option<Duration>,
}

/// The counters of a cgroup when its current run took it.
#[derive(Debug, Clone, Copy, Default)]
struct Base {
    counts: CgroupStats,
    /// The memory charged to it then; its peak watermark starts from here.
    memory_bytes: u64,
}

/// Why a released cgroup is removed rather than used again (never reported: the next run
/// makes a fresh one).
fn no_reuse() -> io::Error {
    io::Error::other("the cgroup cannot be used again")
}

fn fresh_name() -> String {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("toolgate-run-{}-{id}", std::process::id())
}

impl RunCgroup {
    /// Creates a fresh cgroup under `parent` (the executor's own cgroup v2 directory), with no
    /// limits: the kill mechanism of unconfined runs without a PID namespace.
    pub(crate) fn create(parent: &Path) -> io::Result<Self> {
        let dir = parent.join(fresh_name());
        std::fs::create_dir(&dir)?;
        let mut cg = RunCgroup::empty();
        cg.dirs.push(dir.clone());
        cg.v2 = Some(dir);
        cg.opened()
    }

    /// No directory yet: what the constructors fill in.
    fn empty() -> Self {
        RunCgroup {
            dirs: Vec::new(),
            v2: None,
            memory: None,
            pids: None,
            cpu: None,
            removed: false,
            join: CgroupJoin::default(),
            counters: Counters::default(),
            base: Base::default(),
            parent: None,
            taken_with: None,
            run_could_write: false,
            settings: Vec::new(),
            cpu_since_refill: Duration::ZERO,
        }
    }

    /// Creates the run's cgroups under `hierarchy` with `limits` written before anyone joins.
    pub(crate) fn limited(hierarchy: &Hierarchy, limits: &ResourceLimits) -> io::Result<Self> {
        let name = fresh_name();
        let mut cg = RunCgroup::empty();
        match hierarchy {
            Hierarchy::V2 { runs, cpu } => {
                let dir = runs.join(&name);
                std::fs::create_dir(&dir)?;
                cg.dirs.push(dir.clone());
                cg.v2 = Some(dir.clone());
                write(&dir, "memory.max", limits.memory_bytes)?;
                // Absent without swap accounting; then there is no swap to limit either.
                write_if_present(&dir, "memory.swap.max", 0)?;
                // An OOM kill takes the whole run, not one process of a build that then hangs.
                write_if_present(&dir, "memory.oom.group", 1)?;
                write(&dir, "pids.max", limits.pids)?;
                let mut settings = vec!["memory.max", "memory.swap.max", "memory.oom.group"];
                // Not written, but a run frozen by its predecessor would never start.
                settings.extend(["pids.max", "cgroup.freeze"]);
                if *cpu {
                    std::fs::write(
                        dir.join("cpu.max"),
                        format!("{} {CPU_PERIOD_US}", cpu_quota(limits.cpu_millicores)),
                    )?;
                    cg.cpu = Some(dir.clone());
                    settings.push("cpu.max");
                }
                cg.note(&dir, &settings)?;
                cg.memory = Some(dir.clone());
                cg.pids = Some(dir);
            }
            Hierarchy::V1 { memory, pids, cpu } => {
                // pids first: its members are the ones signalled on v1.
                let p = pids.join(&name);
                std::fs::create_dir(&p)?;
                cg.dirs.push(p.clone());
                write(&p, "pids.max", limits.pids)?;
                cg.note(&p, &["pids.max"])?;
                cg.pids = Some(p);
                let m = memory.join(&name);
                std::fs::create_dir(&m)?;
                cg.dirs.push(m.clone());
                write(&m, "memory.limit_in_bytes", limits.memory_bytes)?;
                // memsw (memory + swap) must be set after, and at least, the memory limit.
                write_if_present(&m, "memory.memsw.limit_in_bytes", limits.memory_bytes)?;
                cg.note(
                    &m,
                    &["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"],
                )?;
                cg.memory = Some(m);
                if let Some(cpu) = cpu {
                    let c = cpu.join(&name);
                    std::fs::create_dir(&c)?;
                    cg.dirs.push(c.clone());
                    write(&c, "cpu.cfs_period_us", CPU_PERIOD_US)?;
                    write(&c, "cpu.cfs_quota_us", cpu_quota(limits.cpu_millicores))?;
                    cg.note(&c, &["cpu.cfs_period_us", "cpu.cfs_quota_us"])?;
                    cg.cpu = Some(c);
                }
            }
        }
        cg.opened()
    }

    /// Keeps each of `files` in `dir` that exists open for reading, with its text as it stands
    /// now (the kernel's own spelling of the value written: rounded to pages, `max`).
    fn note(&mut self, dir: &Path, files: &[&str]) -> io::Result<()> {
        let mut buf = [0u8; 64];
        for name in files {
            if let Some(file) = open_if_present(&dir.join(name))? {
                let text = contents(&file, &mut buf)
                    .ok_or_else(|| io::Error::other(format!("read {name}")))?
                    .as_bytes()
                    .into();
                self.settings.push(Setting { file, text });
            }
        }
        Ok(())
    }

    /// Adds the executor's kill cgroup (v2, no controllers) to a v1 run's cgroups, so that
    /// `cgroup.kill` reaches every process of the run.
    pub(crate) fn with_kill_dir(mut self, parent: &Path) -> io::Result<Self> {
        if self.v2.is_none() {
            let dir = parent.join(fresh_name());
            std::fs::create_dir(&dir)?;
            // The v1 files were opened with the cgroup (a spare's, in the background): only
            // the new directory's are opened here.
            open_v2(&mut self.join, &dir)?;
            self.counters.v2_procs = Some(open_procs(&dir)?);
            self.dirs.push(dir.clone());
            self.v2 = Some(dir);
        }
        Ok(self)
    }

    /// Opens the files the child joins with: `tasks` on v1, `cgroup.procs` on v2.
    ///
    /// Writing `0` to a v1 `cgroup.procs` moves the writer's whole thread group under the
    /// kernel's global `cgroup_threadgroup_rwsem`, taken for write: that waits for an RCU grace
    /// period and for every fork in flight on the machine (milliseconds under load). Writing
    /// `0` to `tasks` moves only the calling thread, and the kernel skips that lock for it
    /// (`cgroup_procs_write_start` in Linux 6.x: no pid and no thread group, no lock). The
    /// child is the only thread of its own thread group when it joins (cloned without
    /// `CLONE_THREAD`, before it runs anything else), so moving the thread moves the whole
    /// process and every descendant is still born inside. v2 has no `tasks`, and its
    /// `cgroup.threads` cannot move a thread across domains: v2 keeps `cgroup.procs`.
    ///
    /// Opened here, where the cgroup is made (on a blocking thread for a spare), so the child
    /// does no path lookup; the descriptors are close-on-exec and the child's descriptor sweep
    /// covers them too, so a run never holds one.
    fn opened(mut self) -> io::Result<Self> {
        self.open_join()?;
        self.counters = Counters::open(&self)?;
        Ok(self)
    }

    fn open_join(&mut self) -> io::Result<()> {
        let mut join = CgroupJoin::default();
        for dir in &self.dirs {
            if self.v2.as_ref() == Some(dir) {
                open_v2(&mut join, dir)?;
            } else {
                join.v1_tasks.push(open_for_write(&dir.join("tasks"))?);
            }
        }
        self.join = join;
        Ok(())
    }

    /// Copies of the descriptors the child joins with (`dup`, close-on-exec): the cgroup keeps
    /// its own, so a run that uses it again needs no path lookup either.
    pub(crate) fn join(&self) -> io::Result<CgroupJoin> {
        let dup = |fd: &OwnedFd| fd.try_clone();
        Ok(CgroupJoin {
            v1_tasks: self
                .join
                .v1_tasks
                .iter()
                .map(dup)
                .collect::<io::Result<_>>()?,
            v2_dir: self.join.v2_dir.as_ref().map(dup).transpose()?,
            v2_procs: self.join.v2_procs.as_ref().map(dup).transpose()?,
        })
    }

    /// Has the next run's spare made in the background. Called once the child has joined (the
    /// clone returned): making a cgroup holds the kernel's cgroup lock, which the child's join
    /// would otherwise wait for when the two meet.
    pub(crate) fn replenish(&self) {
        if let (Some(spares), Some(limits)) = (&self.parent, self.taken_with) {
            spares.make_one(limits);
        }
    }

    /// The pids listed in `dir`'s `cgroup.procs`, read afresh (at most 64 KiB of them).
    ///
    /// v1 lists members through a pid list the kernel builds at the first read after an
    /// open and keeps for reads through the same descriptor (for about a second after the
    /// last): a descriptor kept open would list processes that have gone and miss new ones.
    /// So v1 opens the file for every read; v2 iterates the cgroup at every read from the
    /// start, and its descriptor opened with the cgroup serves.
    fn members(&self, dir: &Path) -> Option<String> {
        match &self.counters.v2_procs {
            Some(file) if self.v2.as_deref() == Some(dir) => {
                let mut buf = vec![0u8; 64 << 10];
                contents(file, &mut buf).map(str::to_owned)
            }
            _ => std::fs::read_to_string(dir.join("cgroup.procs")).ok(),
        }
    }

    /// Sends `signal` to every process currently in the cgroup.
    pub(crate) fn signal_all(&self, signal: Signal) {
        // The v2 directory when there is one (the kill directory of a v1 run), else the first.
        let Some(dir) = self.v2.as_ref().or(self.dirs.first()) else {
            return;
        };
        let Some(procs) = self.members(dir) else {
            return;
        };
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
    }

    /// SIGKILLs every process in the cgroup (and every one that would be forked meanwhile).
    pub(crate) fn kill(&self) {
        let killed = self
            .v2
            .as_ref()
            .is_some_and(|d| std::fs::write(d.join("cgroup.kill"), b"1").is_ok());
        if !killed {
            // v1, and v2 before Linux 5.14: signal the members one by one (removal repeats it
            // until the cgroup is empty).
            self.signal_all(Signal::KILL);
        }
    }

    /// What the kernel counted for the current run; read before the cgroups are released.
    pub(crate) fn stats(&self) -> CgroupStats {
        let now = self.counts();
        let b = &self.base;
        let since = |now: Option<Duration>, then: Duration| now.map(|n| n.saturating_sub(then));
        CgroupStats {
            oom_kills: now.oom_kills.saturating_sub(b.counts.oom_kills),
            // The watermark was reset to the charge the cgroup held when the run took it.
            peak_memory_bytes: now
                .peak_memory_bytes
                .map(|p| p.saturating_sub(b.memory_bytes)),
            pids_refused: now.pids_refused.saturating_sub(b.counts.pids_refused),
            cpu_time: since(now.cpu_time, b.counts.cpu_time.unwrap_or_default()),
            throttled: since(now.throttled, b.counts.throttled.unwrap_or_default()),
        }
    }

    /// The cumulative counters as the kernel has them now.
    fn counts(&self) -> CgroupStats {
        let c = &self.counters;
        let mut buf = [0u8; 2048];
        let mut read =
            |file: &Option<File>, key: &str| file.as_ref().and_then(|f| keyed(f, &mut buf, key));
        // `oom_kill` in v2's memory.events and in v1's memory.oom_control alike.
        let oom_kills = read(&c.oom, "oom_kill").unwrap_or(0);
        let pids_refused = read(&c.pids, "max").unwrap_or(0);
        let (cpu_time, throttled) = if self.v2.is_some() && self.v2 == self.cpu {
            (
                read(&c.cpu, "usage_usec").map(Duration::from_micros),
                read(&c.cpu, "throttled_usec").map(Duration::from_micros),
            )
        } else {
            (
                None,
                read(&c.cpu, "throttled_time").map(Duration::from_nanos),
            )
        };
        CgroupStats {
            oom_kills,
            peak_memory_bytes: c.peak.as_ref().and_then(|f| number(f, &mut buf)),
            pids_refused,
            cpu_time,
            throttled,
        }
    }

    /// Ends the run's hold on its cgroups: kills what is left and, once the kernel has
    /// emptied them, gives them back to the runs' spares for a later run with the same
    /// limits (see [`RunCgroup::rearm`]), or removes them when they cannot be used again.
    /// `cpu_used`: the CPU time the run took (user and system, its reaped processes').
    pub(crate) async fn release(mut self, cpu_used: Duration) {
        let Some((spares, limits)) = self.parent.clone().zip(self.taken_with) else {
            return self.remove().await;
        };
        // A run's processes died with its PID namespace: usually empty already.
        let mut empty = false;
        for _ in 0..REMOVE_ATTEMPTS {
            if self.no_process_left() {
                empty = true;
                break;
            }
            self.kill();
            // Killed processes are still exiting.
            tokio::time::sleep(REMOVE_BACKOFF).await;
        }
        if empty && self.unchanged() && self.rearm(&limits, cpu_used).is_ok() {
            spares.put_back(limits, self);
        } else {
            self.remove().await;
        }
    }

    /// Whether no process is left in any of the cgroups, exited or not: `pids.current`,
    /// which counts every process in the pids cgroup until it is reaped, is 0.
    ///
    /// That one counter speaks for the memory and cpu cgroups too: a run's first process
    /// joins all of them before it runs anything, so every process of the run is born in
    /// each, and only a writer of the cgroups' files could move one out of the pids cgroup
    /// alone: a sandboxed run cannot, and an unconfined run's other cgroups are checked by
    /// [`RunCgroup::unchanged`]. Reading the v1 `cgroup.procs` lists instead cost three
    /// opens, each building a pid list, on every sandboxed run's release: about 50 µs of CPU
    /// that the next run's start competed with.
    fn no_process_left(&self) -> bool {
        let mut buf = [0u8; 64];
        self.counters
            .pids_current
            .as_ref()
            .is_some_and(|f| number(f, &mut buf) == Some(0))
    }

    /// Whether a run that could write the cgroup's files (an unconfined one, as the executor's
    /// user) left them as they were made, so that the next run with the same limits may use
    /// it; always true for a sandboxed run. The cgroup is used again only if:
    /// - it has no kill directory (an unconfined run without a PID namespace, whose
    ///   processes may outlive it);
    /// - it has no cgroup below it (one the run made);
    /// - on v1, no process is left in its `memory` and `cpu` cgroups either (a process moved
    ///   out of the `pids` cgroup alone is not counted by `pids.current`);
    /// - every limit reads as it did when it was written, v2's `cgroup.freeze` is still 0
    ///   and v1's OOM killer is still on.
    ///
    /// Removing it instead and making the next in the background costs every such run three
    /// `mkdir`s and three `rmdir`s on v1 (about 350 µs of a `Run` on this project's 2-core
    /// bench machine). The check does not cover a file nobody writes for a run (swappiness, a
    /// soft limit, CPU weight); such a run can write those of the spare made for its
    /// successor just as well, since the executor's user owns both.
    fn unchanged(&self) -> bool {
        if !self.run_could_write {
            return true;
        }
        // A v2 directory beside v1 memory is the kill directory `with_kill_dir` added (pure
        // v2 kills through the run's own cgroup and adds none).
        if self.v2.is_some() && self.v2 != self.memory {
            return false;
        }
        // A directory's link count is 2 plus its subdirectories.
        let below = |dir: &PathBuf| {
            !std::fs::metadata(dir).is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) <= 2)
        };
        if self.dirs.iter().any(below) {
            return false;
        }
        let v1 = self.v2.is_none();
        let occupied = |dir: &Option<PathBuf>| match dir {
            Some(d) if v1 => self.members(d).is_none_or(|m| !m.trim().is_empty()),
            _ => false,
        };
        if occupied(&self.memory) || occupied(&self.cpu) {
            return false;
        }
        let mut buf = [0u8; 256];
        if v1
            && let Some(oom) = &self.counters.oom
            && keyed(oom, &mut buf, "oom_kill_disable") != Some(0)
        {
            return false;
        }
        self.settings
            .iter()
            .all(|s| contents(&s.file, &mut buf).is_some_and(|t| t.as_bytes() == &*s.text))
    }

    /// Makes an emptied cgroup ready for the next run, as if new:
    /// - only when it holds at most [`REUSE_MAX_CHARGE`] (page cache the run read in stays
    ///   charged to it), so a later run's memory is its own and not a predecessor's cache;
    /// - the peak-memory watermark is reset (v1: `memory.max_usage_in_bytes`; v2: through the
    ///   `memory.peak` descriptor the stats are read with, Linux 6.12 and later; an older
    ///   kernel cannot, and its cgroups are not used again);
    /// - the CPU quota is written again, which refills the period's bandwidth a busy run used
    ///   up (the next run would otherwise start throttled), once the runs since the last
    ///   write together used a tenth of one period's quota: a next run then starts with at
    ///   least nine tenths of its bandwidth. The write makes the scheduler update the group on
    ///   every CPU, and short runs, most runs, use far less than a tenth;
    /// - the cumulative counters (OOM kills, refused forks, CPU time, throttling) are noted as
    ///   the next run's base.
    ///
    /// Every file is one opened with the cgroup: a few `pread`s and `pwrite`s, no lookup.
    fn rearm(&mut self, limits: &ResourceLimits, cpu_used: Duration) -> io::Result<()> {
        let q = cpu_quota(limits.cpu_millicores);
        let used = self.cpu_since_refill + cpu_used;
        let refill = used >= Duration::from_micros(q / 10);
        let c = &self.counters;
        let mut buf = [0u8; 64];
        let usage = c.usage.as_ref().ok_or_else(no_reuse)?;
        let charge = number(usage, &mut buf).ok_or_else(no_reuse)?;
        if charge > REUSE_MAX_CHARGE || !c.peak_resettable {
            return Err(no_reuse());
        }
        let peak = c.peak.as_ref().ok_or_else(no_reuse)?;
        // v1 resets to the current usage on "0"; v2 on any text, for this descriptor.
        peak.write_at(b"0", 0)?;
        if let Some(quota) = c.quota.as_ref().filter(|_| refill) {
            let text = if self.v2.is_some() && self.v2 == self.cpu {
                format!("{q} {CPU_PERIOD_US}")
            } else {
                q.to_string()
            };
            quota.write_at(text.as_bytes(), 0)?;
        }
        self.cpu_since_refill = if refill { Duration::ZERO } else { used };
        self.base = Base {
            counts: self.counts(),
            memory_bytes: number(usage, &mut buf).unwrap_or(charge),
        };
        Ok(())
    }

    /// Kills what is left and removes the directories once the kernel has emptied them.
    pub(crate) async fn remove(mut self) {
        for _ in 0..REMOVE_ATTEMPTS {
            self.kill();
            if self.try_remove() {
                self.removed = true;
                return;
            }
            // EBUSY while killed processes are still exiting.
            tokio::time::sleep(REMOVE_BACKOFF).await;
        }
    }

    /// Removes every directory that is empty; true when none is left.
    fn try_remove(&mut self) -> bool {
        self.dirs.retain(|d| match std::fs::remove_dir(d) {
            Ok(()) => false,
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        });
        self.dirs.is_empty()
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if !self.removed {
            self.kill();
            self.try_remove();
        }
    }
}

/// `cpu.max` quota in microseconds per period for `millicores`.
fn cpu_quota(millicores: u32) -> u64 {
    (u64::from(millicores) * CPU_PERIOD_US / 1000).max(1000)
}

/// Opens what a child joins the v2 cgroup `dir` with: the directory (read-only, since
/// `CLONE_INTO_CGROUP` takes no O_PATH descriptor) and its `cgroup.procs` for the fallback.
fn open_v2(join: &mut CgroupJoin, dir: &Path) -> io::Result<()> {
    join.v2_dir = Some(std::fs::File::open(dir).map(OwnedFd::from)?);
    join.v2_procs = Some(open_for_write(&dir.join("cgroup.procs"))?);
    Ok(())
}

/// `file` opened write-only (and close-on-exec, as `std` opens every file).
fn open_for_write(file: &Path) -> io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .map(OwnedFd::from)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", file.display())))
}

fn write(dir: &Path, file: &str, value: impl std::fmt::Display) -> io::Result<()> {
    std::fs::write(dir.join(file), value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("write {file}: {e}")))
}

fn write_if_present(dir: &Path, file: &str, value: impl std::fmt::Display) -> io::Result<()> {
    match std::fs::write(dir.join(file), value.to_string()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(|e| io::Error::new(e.kind(), format!("write {file}: {e}"))),
    }
}

/// One limit of a run's cgroup as it was made (see [`RunCgroup::unchanged`]).
#[derive(Debug)]
struct Setting {
    file: File,
    text: Box<[u8]>,
}

/// The counter files of a run's cgroups, opened read-only when the directories are made (on
/// the spares' background thread), so the end of a run reads them with one `pread` each
/// instead of a path lookup, an open and a close per file. `None`: the file does not exist on
/// this kernel (v2's `memory.peak` before 5.19) or the controller is not limited.
#[derive(Debug, Default)]
struct Counters {
    /// v2 `memory.events`, v1 `memory.oom_control`.
    oom: Option<File>,
    /// v2 `memory.peak`, v1 `memory.max_usage_in_bytes`.
    peak: Option<File>,
    /// `pids.events`.
    pids: Option<File>,
    /// `cpu.stat`.
    cpu: Option<File>,
    /// `peak` is open for writing too, which resets the watermark (v1 always; v2 on Linux
    /// 6.12 and later, for reads through this descriptor).
    peak_resettable: bool,
    /// v2 `memory.current`, v1 `memory.usage_in_bytes`.
    usage: Option<File>,
    /// `pids.current` (it counts a process until it is reaped).
    pids_current: Option<File>,
    /// The v2 directory's `cgroup.procs` (v1's are opened for every read: see
    /// [`RunCgroup::members`]).
    v2_procs: Option<File>,
    /// v2 `cpu.max`, v1 `cpu.cfs_quota_us`, open for writing.
    quota: Option<File>,
}

impl Counters {
    fn open(cg: &RunCgroup) -> io::Result<Self> {
        let mut c = Counters::default();
        if let Some(m) = &cg.memory {
            let v2 = cg.v2.as_ref() == Some(m);
            let (oom, peak, usage) = if v2 {
                ("memory.events", "memory.peak", "memory.current")
            } else {
                (
                    "memory.oom_control",
                    "memory.max_usage_in_bytes",
                    "memory.usage_in_bytes",
                )
            };
            c.oom = open_if_present(&m.join(oom))?;
            c.usage = open_if_present(&m.join(usage))?;
            // v2's watermark resets per descriptor: the one it is read through must be the
            // one written. Before 6.12 that file is read-only, and opening it so fails.
            let peak = m.join(peak);
            match OpenOptions::new().read(true).write(true).open(&peak) {
                Ok(f) => {
                    c.peak = Some(f);
                    c.peak_resettable = true;
                }
                Err(_) => c.peak = open_if_present(&peak)?,
            }
        }
        if let Some(p) = &cg.pids {
            c.pids = open_if_present(&p.join("pids.events"))?;
            c.pids_current = open_if_present(&p.join("pids.current"))?;
        }
        if let Some(d) = &cg.cpu {
            c.cpu = open_if_present(&d.join("cpu.stat"))?;
            let quota = if cg.v2.as_ref() == Some(d) {
                "cpu.max"
            } else {
                "cpu.cfs_quota_us"
            };
            c.quota = Some(open_for_write(&d.join(quota)).map(File::from)?);
        }
        if let Some(v2) = &cg.v2 {
            c.v2_procs = Some(open_procs(v2)?);
        }
        Ok(c)
    }
}

fn open_procs(dir: &Path) -> io::Result<File> {
    let procs = dir.join("cgroup.procs");
    File::open(&procs)
        .map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", procs.display())))
}

fn open_if_present(file: &Path) -> io::Result<Option<File>> {
    match File::open(file) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("open {}: {e}", file.display()),
        )),
    }
}

/// The whole of a counter file, read from its start: a cgroup file regenerates its text at
/// offset 0, so the same descriptor serves every read. Its reads fill the buffer as far as
/// the text goes, so a short read is the end and one `pread` is the usual cost.
fn contents<'b>(file: &File, buf: &'b mut [u8]) -> Option<&'b str> {
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if len < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(&buf[..len]).ok()
}

fn number(file: &File, buf: &mut [u8]) -> Option<u64> {
    contents(file, buf)?.trim().parse().ok()
}

/// The value of `key` in a flat-keyed counter file (`oom_kill 3`).
fn keyed(file: &File, buf: &mut [u8], key: &str) -> Option<u64> {
    parse_keyed(contents(file, buf)?, key)
}

fn parse_keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_keyed_files() {
        let events = "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_keyed(events, "oom_kill"), Some(1));
        assert_eq!(parse_keyed(events, "max"), Some(4));
        assert_eq!(parse_keyed(events, "missing"), None);
    }

    #[test]
    fn cpu_quota_is_per_period() {
        assert_eq!(cpu_quota(1000), 100_000);
        assert_eq!(cpu_quota(250), 25_000);
        // The kernel refuses quotas below 1 ms.
        assert_eq!(cpu_quota(1), 1000);
    }
}
