//! Supervising a spawned run: streaming its output, its timeout, cancellation and shutdown,
//! killing every descendant and reaping it, and reporting how it ended.

use tokio::io::AsyncReadExt;

use std::future::pending;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use rustix::process::{Pid, Signal};
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc, watch};

use super::spawn::{Spawned, Spawner, take_reader};
use super::{Error, Request, StopSignal, setup_err};
use crate::cgroup::RunCgroup;
use crate::config::Config;
use crate::event::{CancelCause, Event, Exited, KillMechanism, Status, Stream, Usage};
use crate::limits::{EnforcedLimits, LimitExceeded};
use crate::output::{StreamLimits, pump};
use crate::spec::Audit;
use crate::sys::{self, Reaped};

/// Kills and reaps the child if supervision is abandoned (runtime dropped mid-run), so no process
/// or zombie outlives its run.
pub(super) struct ReapGuard {
    pub(super) pid: i32,
    pub(super) reaped: bool,
}

impl Drop for ReapGuard {
    fn drop(&mut self) {
        if !self.reaped {
            signal_all(self.pid, Signal::KILL);
            let _ = sys::wait4(self.pid, true);
        }
    }
}

/// Signals the child's process group and the child itself. With a PID namespace, SIGKILL to the
/// child (its init) takes the whole namespace down; while the child is unreaped its pid (and so
/// its group id) cannot be reused.
pub(super) fn signal_all(pid: i32, signal: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, signal);
        let _ = rustix::process::kill_process(p, signal);
    }
}

/// Whether `pid` has a handler installed for `signal` (the `SigCgt` mask of its status).
pub(super) fn catches_signal(pid: i32, signal: Signal) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1u64 << (signal.as_raw() - 1)) != 0)
}

/// Resolves once `pid` has no children left. For a namespace init this means every other
/// process of the namespace is gone, because orphans are reparented to it.
pub(super) async fn no_children(pid: i32) {
    let path = format!("/proc/{pid}/task/{pid}/children");
    loop {
        match std::fs::read_to_string(&path) {
            // The frozen init cannot reap, so terminated children linger as zombies.
            Ok(c) if c.split_whitespace().all(is_zombie) => return,
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            // Unreadable (already reaped or no CONFIG_PROC_CHILDREN): leave it to the grace period.
            Err(_) => pending::<()>().await,
        }
    }
}

/// Whether the process `pid` has exited and only waits to be reaped.
pub(super) fn is_zombie(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        // The state follows the parenthesised command name, which may itself contain `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

/// Resolves with the first request made through the run's `CancelHandle`.
pub(super) async fn requested(mut rx: watch::Receiver<Request>) -> Request {
    let request = rx.wait_for(|r| *r != Request::None).await.map(|r| *r);
    match request {
        Ok(r) => r,
        // The sender is gone, so nothing can be requested any more.
        Err(_) => pending().await,
    }
}

/// Resolves once `stop(Kill)` has been asked for.
pub(super) async fn kill_requested(mut rx: watch::Receiver<Request>) {
    if rx.wait_for(|r| *r == Request::Kill).await.is_err() {
        pending::<()>().await;
    }
}

/// Sends `signal` to every descendant of `init` that can be found: for a PID namespace's init,
/// every other process of the namespace (orphans are reparented to it), which the signal to
/// the init's process group misses when they started sessions or groups of their own. Each
/// process is signalled through a pidfd opened while its parent was still alive and still its
/// parent, so a recycled pid is never signalled. A process forked during the walk may be
/// missed; the walk is repeated until a pass finds no one new (at most a few times), and the
/// kill after the grace period takes whatever is left.
pub(super) fn signal_descendants(init: i32, signal: Signal) {
    let mut signalled = std::collections::HashSet::new();
    for _ in 0..4 {
        let before = signalled.len();
        // The init is the runner's unreaped child: its pid cannot have been reused.
        let Some(root) = sys::open_pidfd(init) else {
            return;
        };
        let mut queue = vec![(init, root)];
        while let Some((parent, parent_fd)) = queue.pop() {
            for child in children(parent) {
                let Some(fd) = sys::open_pidfd(child) else {
                    continue;
                };
                // The pidfd pins `child`; it is ours if `parent` still had it as a child
                // after it was opened (a live parent's pid cannot have been reused).
                if parent_of(child) != Some(parent) || sys::has_exited(&parent_fd) {
                    continue;
                }
                if signalled.insert(child) {
                    let _ = rustix::process::pidfd_send_signal(&fd, signal);
                }
                queue.push((child, fd));
            }
        }
        if signalled.len() == before {
            return;
        }
    }
}

/// The children of every thread of `pid` (needs `CONFIG_PROC_CHILDREN`; none without it).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut all = Vec::new();
    for task in tasks.flatten() {
        let path = task.path().join("children");
        if let Ok(list) = std::fs::read_to_string(path) {
            all.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    all
}

/// The parent pid of `pid`, from its `stat` (after the parenthesised command name, which may
/// itself contain `)`: the state, then the parent).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

pub(super) async fn flag(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|set| *set).await.is_err() {
        // The sender is gone, so the flag can never be raised.
        pending::<()>().await;
    }
}

pub(super) enum Ending {
    Timeout,
    Cancel(CancelCause),
    /// Stopped through `CancelHandle::stop`.
    Stop(StopSignal),
    /// The disk watch found the run over its budget.
    Disk(LimitExceeded),
}

/// A spawned child as the supervisor watches it: its pidfd, the executor's ends of its pipes,
/// the stdin to feed it and the tripwire. Holds the child's [`ReapGuard`] from the start, so a
/// failure to set up any of them kills and reaps the child.
pub(super) struct Watched {
    pub(super) guard: ReapGuard,
    pub(super) pidfd: AsyncFd<OwnedFd>,
    pub(super) tripwire: Option<crate::tripwire::Tripwire>,
    pub(super) stdout: pipe::Receiver,
    pub(super) stderr: pipe::Receiver,
    pub(super) stdin: Option<(pipe::Sender, Bytes)>,
    pub(super) state: Option<pipe::Receiver>,
}

impl Watched {
    /// Must be called inside the runtime the supervisor runs on (the fds register with it).
    pub(super) fn new(
        child: Spawned,
        armed: Option<crate::tripwire::Armed>,
        state: Option<OwnedFd>,
        stdin: Option<Bytes>,
        config: &Config,
    ) -> Result<Self, Error> {
        let guard = ReapGuard {
            pid: child.pid,
            reaped: false,
        };
        let pidfd =
            sys::watch_exit(child.pid).map_err(setup_err("watch the child with a pidfd"))?;
        let tripwire = armed
            .map(crate::tripwire::Armed::into_tripwire)
            .transpose()
            .map_err(setup_err("watch the masked paths"))?;
        let stdout = take_reader(child.stdout, config.pipe_buffer_bytes)
            .map_err(setup_err("read stdout"))?;
        let stderr = take_reader(child.stderr, config.pipe_buffer_bytes)
            .map_err(setup_err("read stderr"))?;
        let state = state
            .map(pipe::Receiver::from_owned_fd)
            .transpose()
            .map_err(setup_err("read the state pipe"))?;
        let stdin = match (child.stdin, stdin) {
            (Some(pipe_in), Some(bytes)) => Some((
                pipe::Sender::from_owned_fd(pipe_in).map_err(setup_err("write stdin"))?,
                bytes,
            )),
            _ => None,
        };
        Ok(Watched {
            guard,
            pidfd,
            tripwire,
            stdout,
            stderr,
            stdin,
            state,
        })
    }
}

pub(super) struct Supervisor {
    /// Kept while the run lives: the run's parent-death signal follows the spawner thread.
    pub(super) _spawner: Arc<Spawner>,
    pub(super) pid: i32,
    pub(super) pidfd: AsyncFd<OwnedFd>,
    pub(super) guard: ReapGuard,
    /// The run's mount namespace (see `Spawned::mount_ns`), released once `Exited` is sent.
    pub(super) mount_ns: Option<OwnedFd>,
    pub(super) mechanism: KillMechanism,
    pub(super) cgroup: Option<RunCgroup>,
    /// The limits the run got, to tell which one it ran into.
    pub(super) enforced: EnforcedLimits,
    pub(super) tx: mpsc::Sender<Event>,
    pub(super) cancel: watch::Receiver<Request>,
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) timeout: Duration,
    pub(super) grace: Duration,
    pub(super) drain: Duration,
    pub(super) final_send_timeout: Duration,
    pub(super) kill_on_cap: bool,
    pub(super) audit: Option<Audit>,
    /// The runner's recent audit cost: where this run's audit runs.
    pub(super) audit_cost: Arc<crate::blocking::BlockingCost>,
    pub(super) tripwire: Option<crate::tripwire::Tripwire>,
    /// Sampled while the run lives and once after it.
    pub(super) disk_watch: Option<crate::spec::DiskWatch>,
    /// `RLIMIT_FSIZE` of the run's processes: SIGXFSZ at it means the file-size limit.
    pub(super) file_size_limit: Option<u64>,
    pub(super) limits: [StreamLimits; 2],
    pub(super) started: Instant,
}

impl Supervisor {
    pub(super) async fn run(
        mut self,
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
        stdin: Option<(pipe::Sender, Bytes)>,
        state: Option<pipe::Receiver>,
    ) {
        let cap_hit = Notify::new();
        let (reaped_tx, reaped_rx) = watch::channel(false);
        let drain = self.drain;
        let stop = || {
            let mut rx = reaped_rx.clone();
            async move {
                let _ = rx.wait_for(|r| *r).await;
                tokio::time::sleep(drain).await;
            }
        };
        let out = pump(
            Stream::Stdout,
            stdout,
            self.limits[0],
            self.tx.clone(),
            &cap_hit,
            stop(),
        );
        let err = pump(
            Stream::Stderr,
            stderr,
            self.limits[1],
            self.tx.clone(),
            &cap_hit,
            stop(),
        );
        let feed = async {
            if let Some((mut sender, bytes)) = stdin {
                let mut reaped = reaped_rx.clone();
                tokio::select! {
                    // EPIPE just means the child stopped reading; that is its business.
                    _ = sender.write_all(&bytes) => {}
                    _ = reaped.wait_for(|r| *r) => {}
                }
            }
        };
        let state = read_state(state, stop());
        let life = async {
            let outcome = self.lifecycle(&cap_hit).await;
            reaped_tx.send_replace(true);
            outcome
        };
        let ((ending, killed, reaped), stdout, stderr, (), state) =
            tokio::join!(life, out, err, feed, state);
        let ending: Option<Ending> = ending;

        let status = match ending {
            Some(Ending::Timeout) => Status::TimedOut {
                timeout: self.timeout,
                killed,
            },
            Some(Ending::Cancel(cause)) => Status::Cancelled(cause),
            Some(Ending::Disk(_)) => Status::Cancelled(CancelCause::DiskLimit),
            // Killed by us: stopped. Ended by itself after the TERM: as it ended.
            Some(Ending::Stop(_)) if killed => Status::Cancelled(CancelCause::Stopped),
            Some(Ending::Stop(_)) | None => match (reaped.exit_code(), reaped.signal()) {
                (Some(code), _) => Status::Exited(code),
                (None, Some((signal, core_dumped))) => Status::Signaled {
                    signal,
                    core_dumped,
                },
                (None, None) => Status::Exited(-1),
            },
        };
        // Every process of the run is gone (its PID namespace died with its first process),
        // so nothing it started can change the workspace after the audit.
        let audit = match self.audit.take() {
            Some(audit) => Some(
                self.audit_cost
                    .run_off(move || audit.run())
                    .await
                    .unwrap_or_else(|e| Err(format!("the audit panicked: {e}"))),
            ),
            None => None,
        };
        let stats = self
            .cgroup
            .as_ref()
            .map(RunCgroup::stats)
            .unwrap_or_default();
        let mut limit = match &ending {
            Some(Ending::Disk(hit)) => Some(*hit),
            _ => limit_exceeded(&self.enforced, &stats, &status, self.file_size_limit),
        };
        // What the run wrote in its last moments (after the last sample) still counts: the
        // run is over, so it is reported, not stopped.
        if limit.is_none()
            && let Some(watch) = &self.disk_watch
        {
            limit = watch.sample(true).await;
        }
        // For the cgroup's release: v2 counts every process of the run, the reap those the
        // run's first process waited for (on v1 the only figure).
        let cpu_used = stats
            .cpu_time
            .unwrap_or_default()
            .max(reaped.user + reaped.system);
        let exited = Event::Exited(Exited {
            limit,
            status,
            stdout,
            stderr,
            usage: Usage {
                wall_time: self.started.elapsed(),
                user_cpu: reaped.user,
                system_cpu: reaped.system,
                peak_rss_bytes: reaped.max_rss,
                peak_memory_bytes: stats.peak_memory_bytes.unwrap_or(0),
                oom_killed: stats.oom_kills > 0,
                cpu_throttled: stats.throttled.unwrap_or_default(),
            },
            finished_at: SystemTime::now(),
            audit,
            state,
        });
        // A stalled consumer must not hold the run (and its admission slot) forever; during a
        // shutdown it gets only the kill grace period.
        let grace = self.grace;
        let shutdown = flag(self.shutdown.clone());
        tokio::select! {
            biased;
            _ = self.tx.send(exited) => {}
            () = tokio::time::sleep(self.final_send_timeout) => {}
            () = async { shutdown.await; tokio::time::sleep(grace).await } => {}
        }
        // The consumer sees the end of the run now, not after the kernel has emptied the
        // cgroup (the run's slot stays taken until then).
        let cgroup = self.cgroup.take();
        let mount_ns = self.mount_ns.take();
        drop(self);
        if cgroup.is_some() || mount_ns.is_some() {
            // Let the consumer the send woke, and whose stream just ended, answer before the
            // clean-up below: on the same worker it would otherwise wait for the release's
            // reads of the cgroup's files (~50 µs on v1) and a blocking thread's wake-up,
            // and the client for its `Exited`.
            tokio::task::yield_now().await;
        }
        if let Some(ns) = mount_ns {
            // Its teardown waits for an RCU grace period: not on a runtime worker.
            drop(tokio::task::spawn_blocking(move || drop(ns)));
        }
        if let Some(cgroup) = cgroup {
            cgroup.release(cpu_used).await;
        }
    }

    /// Waits for the child to exit, enforcing timeout and cancellation, and reaps it.
    pub(super) async fn lifecycle(&mut self, cap_hit: &Notify) -> (Option<Ending>, bool, Reaped) {
        let deadline = tokio::time::Instant::from_std(self.started + self.timeout);
        let ending = tokio::select! {
            biased;
            () = exited(&self.pidfd) => None,
            () = tokio::time::sleep_until(deadline) => Some(Ending::Timeout),
            () = cap_hit.notified(), if self.kill_on_cap => Some(Ending::Cancel(CancelCause::OutputCap)),
            request = requested(self.cancel.clone()) => Some(match request {
                Request::Term => Ending::Stop(StopSignal::Term),
                Request::Kill => Ending::Stop(StopSignal::Kill),
                Request::Cancel | Request::None => Ending::Cancel(CancelCause::ClientCancelled),
            }),
            () = flag(self.shutdown.clone()) => Some(Ending::Cancel(CancelCause::Shutdown)),
            () = self.tx.closed() => Some(Ending::Cancel(CancelCause::ClientDisconnected)),
            () = tripped(self.tripwire.as_ref()) => Some(Ending::Cancel(CancelCause::MaskedPathReplaced)),
            hit = over_budget(self.disk_watch.as_ref()) => Some(Ending::Disk(hit)),
        };
        let mut killed = false;
        if let Some(ending) = &ending {
            if matches!(
                ending,
                Ending::Cancel(CancelCause::OutputCap | CancelCause::MaskedPathReplaced)
                    | Ending::Disk(_)
                    | Ending::Stop(StopSignal::Kill)
            ) {
                // The point of kill_on_cap is to stop the flood now, not after a grace period;
                // a run whose mask came off must not get a grace period to read behind it.
                self.kill_everything();
                killed = true;
            } else {
                // A namespace init only receives the signals it catches: one that does not
                // catch TERM would ignore it and carry on (a script would start its next
                // command after its current one was terminated). Freeze such an init so nothing
                // new starts, TERM the rest of the tree, and kill the init once its descendants
                // are gone or the grace period is over.
                let frozen = self.mechanism == KillMechanism::PidNamespace
                    && !catches_signal(self.pid, Signal::TERM);
                if frozen && let Some(p) = Pid::from_raw(self.pid) {
                    let _ = rustix::process::kill_process(p, Signal::STOP);
                }
                signal_all(self.pid, Signal::TERM);
                match &self.cgroup {
                    Some(cgroup) => cgroup.signal_all(Signal::TERM),
                    // The group misses processes that left it (setsid, a job-control shell).
                    None if self.mechanism == KillMechanism::PidNamespace => {
                        signal_descendants(self.pid, Signal::TERM);
                    }
                    None => {}
                }
                let pid = self.pid;
                tokio::select! {
                    biased;
                    () = exited(&self.pidfd) => {}
                    () = no_children(pid), if frozen => {
                        self.kill_everything();
                        killed = true;
                    }
                    () = kill_requested(self.cancel.clone()) => {
                        self.kill_everything();
                        killed = true;
                    }
                    () = tokio::time::sleep(self.grace) => {
                        self.kill_everything();
                        killed = true;
                    }
                }
            }
            exited(&self.pidfd).await;
        }
        if self.mechanism != KillMechanism::PidNamespace {
            // Background descendants would hold the pipes and outlive the run. The pid is still
            // unreaped, so the group id cannot have been reused.
            if let Some(p) = Pid::from_raw(self.pid) {
                let _ = rustix::process::kill_process_group(p, Signal::KILL);
            }
            if let Some(cgroup) = &self.cgroup {
                cgroup.kill();
            }
        }
        let reaped = loop {
            match sys::wait4(self.pid, true) {
                Ok(Some(r)) => break r,
                Ok(None) => continue,
                Err(_) => {
                    // Only ECHILD is possible here, which means someone else reaped it.
                    break Reaped {
                        status: 0,
                        user: Duration::ZERO,
                        system: Duration::ZERO,
                        max_rss: 0,
                    };
                }
            }
        };
        self.guard.reaped = true;
        (ending, killed, reaped)
    }
}

impl Supervisor {
    pub(super) fn kill_everything(&self) {
        signal_all(self.pid, Signal::KILL);
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
    }
}

/// Bytes of a run's final state kept; the rest is read and discarded.
const STATE_MAX: usize = 64 << 10;

/// Reads the state pipe until EOF or until `stop` (the run reaped, then the drain period),
/// then takes what is still buffered: at most [`STATE_MAX`] bytes. `None` without a pipe.
async fn read_state(
    state: Option<pipe::Receiver>,
    stop: impl std::future::Future<Output = ()>,
) -> Option<Vec<u8>> {
    let mut rx = state?;
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 16 << 10];
    let keep = |kept: &mut Vec<u8>, data: &[u8]| {
        let room = STATE_MAX - kept.len();
        kept.extend_from_slice(&data[..data.len().min(room)]);
    };
    let to_eof = async {
        loop {
            match rx.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => keep(&mut kept, &chunk[..n]),
            }
        }
    };
    let eof = tokio::select! {
        biased;
        () = to_eof => true,
        () = stop => false,
    };
    if !eof {
        // A holder outlived the run: take what it has written, never wait for more. Bounded,
        // so a writer that keeps writing cannot keep this going.
        for _ in 0..64 {
            match rx.try_read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => keep(&mut kept, &chunk[..n]),
            }
        }
    }
    Some(kept)
}

/// Resolves with the first limit the disk watch reports, sampling every interval; never
/// without a watch.
async fn over_budget(watch: Option<&crate::spec::DiskWatch>) -> LimitExceeded {
    let Some(watch) = watch else {
        return pending().await;
    };
    loop {
        tokio::time::sleep(watch.interval()).await;
        if let Some(hit) = watch.sample(false).await {
            return hit;
        }
    }
}

/// Which limit the run ran into: the OOM killer at its memory limit, a refused fork at its
/// process limit, `RLIMIT_CPU` (SIGXCPU at the soft limit, SIGKILL at the hard one), or
/// `RLIMIT_FSIZE` (SIGXFSZ to the process whose write went past it: the run's first process
/// itself, or a command of the shell it is, which exits 128 + SIGXFSZ as every POSIX shell
/// reports a child a signal killed).
fn limit_exceeded(
    enforced: &EnforcedLimits,
    stats: &crate::cgroup::CgroupStats,
    status: &Status,
    file_size_limit: Option<u64>,
) -> Option<LimitExceeded> {
    if stats.oom_kills > 0
        && let Some(limit_bytes) = enforced.memory_bytes
    {
        return Some(LimitExceeded::Memory { limit_bytes });
    }
    if stats.pids_refused > 0
        && let Some(limit) = enforced.pids
    {
        return Some(LimitExceeded::Pids { limit });
    }
    match (status, enforced.cpu_seconds, file_size_limit) {
        (Status::Signaled { signal, .. }, Some(seconds), _) if *signal == libc::SIGXCPU => {
            Some(LimitExceeded::CpuTime { seconds })
        }
        (Status::Signaled { signal, .. }, _, Some(limit_bytes)) if *signal == libc::SIGXFSZ => {
            Some(LimitExceeded::FileSize { limit_bytes })
        }
        (Status::Exited(code), _, Some(limit_bytes)) if *code == 128 + libc::SIGXFSZ => {
            Some(LimitExceeded::FileSize { limit_bytes })
        }
        _ => None,
    }
}

/// Resolves once the child has exited (its pidfd turns readable); it stays readable until reaped.
/// Waits for the tripwire, forever when the run has none.
async fn tripped(tripwire: Option<&crate::tripwire::Tripwire>) {
    match tripwire {
        Some(t) => t.tripped().await,
        None => std::future::pending().await,
    }
}

pub(super) async fn exited(pidfd: &AsyncFd<OwnedFd>) {
    if pidfd.readable().await.is_err() {
        pending::<()>().await;
    }
}
