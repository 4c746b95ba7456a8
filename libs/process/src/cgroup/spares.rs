//! Run cgroups made before they are needed.
//!
//! Making a cgroup is the expensive part of a run's limits: the kernel allocates and
//! initialises each controller's state at `mkdir` (on v1 once per hierarchy), several hundred
//! microseconds on the path from request to `Started`, and takes as long again to tear it down
//! at `rmdir`. So a run takes a cgroup that is ready: one an earlier run with the same limits
//! released, emptied and rearmed ([`RunCgroup::release`]: no process left, little memory still
//! charged, counters rebased so the run's peak memory, OOM kills and throttling are its own),
//! else one made in the background; only when neither is ready does the next run's spare get
//! made.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Hierarchy, RunCgroup};
use crate::limits::ResourceLimits;

/// Spares kept, made or being made, across all limits; beyond it the oldest go (a profile
/// no longer asked for).
const CAPACITY: usize = 4;

/// The runs' hierarchy and the cgroups made ahead in it; cheap to share.
#[derive(Debug)]
pub(crate) struct Spares {
    /// Declared before `hierarchy`: the spares are removed before their parent.
    ready: Mutex<Ready>,
    hierarchy: Hierarchy,
}

#[derive(Debug, Default)]
struct Ready {
    cgroups: VecDeque<(ResourceLimits, RunCgroup)>,
    /// Being made on a blocking thread.
    making: usize,
}

impl Spares {
    pub(crate) fn new(hierarchy: Hierarchy) -> Arc<Self> {
        Arc::new(Spares {
            ready: Mutex::default(),
            hierarchy,
        })
    }

    pub(crate) fn hierarchy(&self) -> &Hierarchy {
        &self.hierarchy
    }

    /// A cgroup with `limits` and no process in it: a spare when one is ready, else made now.
    /// When that was the last spare with these limits, one more is made in the background
    /// (on the current runtime's blocking threads) for the next run when the taker calls
    /// [`RunCgroup::replenish`], once its child is cloned.
    ///
    /// `sandboxed`: the run cannot write its own cgroup's files (its own user namespace, no
    /// capability, Landlock), so the cgroup may be used again after it (see
    /// [`RunCgroup::release`]). An unconfined run runs as the executor's user, which owns the
    /// delegated cgroup: it could raise its own limits or turn its OOM killer off, and a later
    /// run must not inherit that, so its cgroup is used again only if every limit still reads
    /// as it was written (see `RunCgroup::unchanged`), and removed otherwise.
    pub(crate) fn take(
        self: &Arc<Self>,
        limits: &ResourceLimits,
        sandboxed: bool,
    ) -> io::Result<RunCgroup> {
        let spare = {
            let mut ready = self.lock();
            // The newest: one a run just released (its kernel state still in cache) before
            // one made ahead.
            let at = ready.cgroups.iter().rposition(|(l, _)| l == limits);
            at.and_then(|i| ready.cgroups.remove(i)).map(|(_, cg)| cg)
        };
        let mut cgroup = match spare {
            Some(cg) => cg,
            None => RunCgroup::limited(&self.hierarchy, limits)?,
        };
        cgroup.parent = Some(Arc::clone(self));
        cgroup.taken_with = Some(*limits);
        cgroup.run_could_write = !sandboxed;
        Ok(cgroup)
    }

    /// Spares ready now with `limits` (for tests and the bench).
    #[cfg(test)]
    fn ready_for(&self, limits: &ResourceLimits) -> usize {
        self.lock()
            .cgroups
            .iter()
            .filter(|(l, _)| l == limits)
            .count()
    }

    /// Gives a released, rearmed cgroup back for the next run with `limits`; beyond the
    /// capacity the oldest spare is removed.
    pub(super) fn put_back(&self, limits: ResourceLimits, mut cgroup: RunCgroup) {
        // A spare holds no handle on its parent (that would keep both alive for good); taking
        // it sets one again.
        cgroup.parent = None;
        cgroup.taken_with = None;
        cgroup.run_could_write = false;
        let evicted = {
            let mut ready = self.lock();
            ready.cgroups.push_back((limits, cgroup));
            let excess = ready.cgroups.len().saturating_sub(CAPACITY);
            ready.cgroups.drain(..excess).collect::<Vec<_>>()
        };
        // Removed outside the lock.
        drop(evicted);
    }

    pub(super) fn make_one(self: &Arc<Self>, limits: ResourceLimits) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut ready = self.lock();
            if ready.making >= CAPACITY || ready.cgroups.iter().any(|(l, _)| *l == limits) {
                return;
            }
            ready.making += 1;
        }
        let spares = Arc::clone(self);
        runtime.spawn_blocking(move || {
            // A failure here (the hierarchy removed under us, a full pids budget) is seen
            // again, and reported, by the next run that makes its own.
            let made = RunCgroup::limited(&spares.hierarchy, &limits).ok();
            let evicted = {
                let mut ready = spares.lock();
                ready.making -= 1;
                if let Some(cg) = made {
                    ready.cgroups.push_back((limits, cg));
                }
                let excess = ready.cgroups.len().saturating_sub(CAPACITY);
                ready.cgroups.drain(..excess).collect::<Vec<_>>()
            };
            // Removed outside the lock.
            drop(evicted);
        });
    }

    fn lock(&self) -> MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::*;
    use crate::cgroup::Budget;

    /// Runs `script` (sh) inside `cg`'s cgroups: the shell is moved in before it reads the
    /// line that lets it go on, so everything it does is counted there.
    fn run_inside(cg: &RunCgroup, script: &str) {
        let mut child = Command::new("/bin/sh")
            .args(["-c", &format!("read go; {script}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sh");
        for dir in &cg.dirs {
            std::fs::write(dir.join("cgroup.procs"), child.id().to_string())
                .unwrap_or_else(|e| panic!("join {}: {e}", dir.display()));
        }
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        child.wait().expect("wait sh");
    }

    /// Forks more children than `pids.max` allows, waits for those it got, touches 64 MiB.
    const FORKS: &str = "
import os, time
kids = []
for _ in range(12):
    try:
        pid = os.fork()
    except BlockingIOError:
        continue
    if pid == 0:
        time.sleep(0.2)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
b = bytearray(64 << 20)
";

    fn limits() -> ResourceLimits {
        ResourceLimits {
            memory_bytes: 256 << 20,
            pids: 8,
            cpu_millicores: 500,
        }
    }

    fn spares() -> Option<Arc<Spares>> {
        let budget = Budget {
            memory_bytes: Some(1 << 30),
            reserve_bytes: 0,
            pids: 4096,
        };
        match Hierarchy::delegate(&budget, &limits()) {
            Ok(h) => Some(Spares::new(h)),
            Err(e) => {
                eprintln!("no delegated cgroup on this host ({e}); nothing to test");
                None
            }
        }
    }

    async fn wait_for_spare(spares: &Spares, limits: &ResourceLimits) {
        for _ in 0..400 {
            if spares.ready_for(limits) >= 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("no spare was made");
    }

    /// The quota a cgroup is used again with: written afresh once its runs since the last
    /// write used a tenth of a period's quota (50 ms at 500 millicores: 5 ms), left as it
    /// is before (short runs cannot have used up the period).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_released_cgroup_gets_its_quota_written_again_after_a_tenth_of_it_was_used() {
        let Some(spares) = spares() else { return };
        let limits = limits();
        let cg = spares.take(&limits, true).expect("made on demand");
        let Some(cpu) = cg.cpu.clone() else {
            eprintln!("no cpu controller here; nothing to test");
            return;
        };
        let file = cpu.join(if cg.v2 == cg.cpu {
            "cpu.max"
        } else {
            "cpu.cfs_quota_us"
        });
        let quota = || {
            let text = std::fs::read_to_string(&file).expect("quota");
            text.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(quota(), "50000");
        // A marker the release would overwrite: whether it wrote the quota is seen.
        let mark = |cg: &RunCgroup| {
            let text = if cg.v2 == cg.cpu {
                "7000 100000"
            } else {
                "7000"
            };
            std::fs::write(&file, text).expect("write the quota");
        };
        mark(&cg);
        // 4 ms: less than a tenth; not written.
        cg.release(Duration::from_millis(4)).await;
        assert_eq!(quota(), "7000", "written after 4 ms of 50");
        let cg = spares.take(&limits, true).expect("the released one");
        // 4 + 2 ms since the last write: written, back to the run's quota.
        cg.release(Duration::from_millis(2)).await;
        assert_eq!(quota(), "50000", "not written after 6 ms of 50");
        let cg = spares.take(&limits, true).expect("the released one");
        mark(&cg);
        // The count started again at the write.
        cg.release(Duration::from_millis(4)).await;
        assert_eq!(quota(), "7000", "written after 4 ms since the last write");
        spares
            .take(&limits, true)
            .expect("the released one")
            .remove()
            .await;
    }

    /// An unconfined run's cgroup (its files writable by the run) is used again only as it
    /// was made: a changed limit, a cgroup made below it, or (v1) a process moved out of its
    /// `pids` cgroup alone has it removed instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unconfined_runs_cgroup_is_used_again_only_if_left_as_made() {
        let Some(spares) = spares() else { return };
        let limits = limits();
        let first = spares.take(&limits, false).expect("made on demand");
        run_inside(&first, "true");
        first.release(Duration::ZERO).await;
        assert_eq!(spares.ready_for(&limits), 1, "untouched: given back");

        type Tamper = fn(&RunCgroup);
        let tamperings: [(&str, Tamper); 2] = [
            ("a raised pids.max", |cg| {
                let pids = cg.pids.as_ref().expect("pids limited");
                std::fs::write(pids.join("pids.max"), "4321").expect("raise pids.max");
            }),
            ("the OOM killer turned off or the cgroup frozen", |cg| {
                let (dir, file) = match &cg.v2 {
                    Some(d) => (d.clone(), "cgroup.freeze"),
                    None => (cg.memory.clone().expect("memory"), "memory.oom_control"),
                };
                std::fs::write(dir.join(file), "1").expect("write the knob");
            }),
        ];
        for (what, tamper) in tamperings {
            let cg = spares.take(&limits, false).expect("a cgroup");
            let taken = cg.dirs.clone();
            tamper(&cg);
            cg.release(Duration::ZERO).await;
            assert_eq!(spares.ready_for(&limits), 0, "{what}: not given back");
            assert!(!taken[0].exists(), "{what}: {} removed", taken[0].display());
        }

        // A cgroup made below it (which removal could not remove either): checked directly,
        // since the release would then wait for it.
        let cg = spares.take(&limits, false).expect("a cgroup");
        let nested = cg.dirs[0].join("nested");
        std::fs::create_dir(&nested).expect("mkdir below");
        assert!(!cg.unchanged(), "a cgroup below it");
        std::fs::remove_dir(&nested).expect("rmdir below");
        assert!(cg.unchanged(), "as made again");
        cg.remove().await;

        // v1: a process left in the memory cgroup, moved out of the pids cgroup alone, is not
        // counted by pids.current.
        let cg = spares.take(&limits, false).expect("a cgroup");
        if cg.v2.is_some() {
            return cg.remove().await;
        }
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let memory = cg.memory.clone().expect("memory");
        std::fs::write(memory.join("cgroup.procs"), child.id().to_string()).expect("join");
        let pids = cg.dirs[0].clone();
        let release = tokio::spawn(cg.release(Duration::ZERO));
        // Its removal began (the pids cgroup is empty and goes first): the member was seen.
        for _ in 0..400 {
            if !pids.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
        release.await.expect("released");
        assert_eq!(
            spares.ready_for(&limits),
            0,
            "a member left: not given back"
        );
        assert!(!memory.exists(), "{} removed", memory.display());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_released_cgroup_is_used_again_with_its_counters_rebased() {
        let Some(spares) = spares() else { return };
        let limits = limits();
        // The interpreter's files in the page cache already, charged to the test's own
        // cgroup: what the runs below leave charged is only what they made.
        Command::new("python3")
            .args(["-c", "pass"])
            .status()
            .expect("python3");
        let first = spares.take(&limits, true).expect("made on demand");
        let dirs = first.dirs.clone();
        // 64 MiB touched, and more forks than pids.max allows (every child it got is reaped
        // before it exits).
        run_inside(&first, &format!("python3 -c '{FORKS}'"));
        let used = first.stats();
        assert!(
            used.peak_memory_bytes.unwrap_or(0) >= 64 << 20,
            "peak of the first run: {used:?}"
        );
        assert!(used.pids_refused > 0, "forks refused at pids.max: {used:?}");
        first.release(Duration::ZERO).await;
        assert_eq!(spares.ready_for(&limits), 1, "given back, emptied");
        // Other limits are not served from it.
        let other = ResourceLimits { pids: 9, ..limits };
        let third = spares.take(&other, true).expect("made on demand");
        assert_ne!(third.dirs, dirs);
        let pids_max = std::fs::read_to_string(third.pids.as_ref().expect("pids").join("pids.max"))
            .expect("pids.max");
        assert_eq!(pids_max.trim(), "9", "made with the limits asked for");

        let again = spares.take(&limits, true).expect("the released one");
        assert_eq!(again.dirs, dirs, "the same cgroup, used again");
        let fresh = again.stats();
        assert_eq!(fresh.oom_kills, 0, "{fresh:?}");
        assert_eq!(fresh.pids_refused, 0, "{fresh:?}");
        assert!(
            fresh.peak_memory_bytes.unwrap_or(0) < 8 << 20,
            "the first run's peak is not the second's: {fresh:?}"
        );
        // It is joined again, and counts again.
        run_inside(&again, "python3 -c 'b = bytearray(32 << 20)'");
        let second = again.stats();
        let peak = second.peak_memory_bytes.unwrap_or(0);
        assert!((32 << 20..64 << 20).contains(&peak), "{second:?}");

        // A run that leaves much memory charged (page cache of a file it wrote) does not
        // hand its cgroup on: the next run gets a fresh one.
        let scratch = tempfile::tempdir().expect("tempdir");
        let file = scratch.path().join("cache");
        run_inside(
            &again,
            &format!("head -c 33554432 /dev/zero > {}", file.display()),
        );
        again.release(Duration::ZERO).await;
        assert_eq!(spares.ready_for(&limits), 0, "not given back");
        assert!(!dirs[0].exists(), "{} removed", dirs[0].display());

        // With no spare left, taking one has the next made in the background.
        let next = spares.take(&limits, true).expect("made on demand");
        assert_ne!(next.dirs, dirs);
        next.replenish();
        wait_for_spare(&spares, &limits).await;
        next.remove().await;
        third.remove().await;
        // Dropping the last handle removes the spares, then their parent.
        let parent = match spares.hierarchy() {
            Hierarchy::V2 { runs, .. } => runs.clone(),
            Hierarchy::V1 { pids, .. } => pids.clone(),
        };
        for _ in 0..400 {
            if spares.lock().making == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(spares);
        assert!(!parent.exists(), "{} left behind", parent.display());
    }
}
