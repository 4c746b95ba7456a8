//! Admission, spawning and supervision of runs: the runner (admission, limits, sandbox plans)
//! here, the spawn in `spawn`, the supervision of a running child in `supervisor`.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustix::process::Signal;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use toolgate_core::{Reason, ReasonedError};

use crate::caps::{Capabilities, LimitsView, ProfileStatus, probe_host};
use crate::cgroup::{Budget, Hierarchy, Spares};
use crate::config::{self, Config};
use crate::event::{Event, KillMechanism, Started};
use crate::limits::{EnforcedLimits, LimitsEnforced, ResourceLimits};
use crate::output::StreamLimits;
use crate::sandbox::{Built, Resolved, Sandboxes, Unavailable};
use crate::session::SessionNamespaces;
use crate::spec::{RunRequest, RunSpec};
use crate::sys;

mod selftest;
mod spawn;
mod supervisor;
pub use selftest::EscapeCheck;
use spawn::{Io, Launch, Spawned, Spawner, not_started, remove_stale_homes};
use supervisor::{Supervisor, Watched, signal_all};

/// Errors of admission and of checking a request against the configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] config::Error),
    /// The configured `PATH` has no usable `bash`.
    #[error("no executable `bash` on the configured PATH `{path}`; scripts cannot run")]
    NoBash {
        /// The configured PATH.
        path: String,
    },
    /// All run slots are taken.
    #[error("executor is at its limit of {limit} concurrent runs; retry later")]
    Busy {
        /// The configured limit.
        limit: usize,
    },
    /// The runner is shutting down and admits nothing.
    #[error("executor is shutting down; retry on another executor")]
    ShuttingDown,
    /// The request adds an environment variable the configuration does not allow.
    #[error("environment variable `{name}` may not be set; allowed: {allowed}")]
    EnvNotAllowed {
        /// The rejected name.
        name: String,
        /// The allowlist, for the caller to pick from.
        allowed: String,
    },
    /// The request asks for more than a configured maximum.
    #[error("{field} {requested} exceeds the executor maximum {max}")]
    AboveMaximum {
        /// Which field.
        field: &'static str,
        /// What was asked.
        requested: String,
        /// The configured maximum.
        max: String,
    },
    /// Runs must be started from inside a Tokio runtime.
    #[error("no tokio runtime is running; start runs from async code")]
    NoRuntime,
    /// The sandbox profile is unknown or cannot be enforced here; nothing ran.
    #[error("sandbox profile `{profile}` is not available on this executor: {missing}")]
    SandboxUnavailable {
        /// The profile asked for (or the default).
        profile: String,
        /// What is missing, for the operator and the model.
        missing: String,
    },
    /// The run's resource limits cannot be enforced here and the configuration requires them.
    #[error(
        "resource limits cannot be enforced on this executor ({missing}); give it a delegated \
         cgroup or set process.require_limits = false"
    )]
    LimitsUnavailable {
        /// Why no cgroup could be used.
        missing: String,
    },
    /// The working directory was removed after the caller opened it; nothing ran.
    #[error(
        "the working directory {path} was removed before the run could start; run it in a \
         directory that exists"
    )]
    CwdRemoved {
        /// Where it was, as the executor last saw it.
        path: String,
    },
    /// Preparing the run failed on the executor side.
    #[error("cannot prepare the run: {what}: {source}")]
    Setup {
        /// The step that failed.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        match self {
            Error::Busy { .. } | Error::ShuttingDown => Reason::Busy,
            Error::EnvNotAllowed { .. } | Error::AboveMaximum { .. } => Reason::InvalidRequest,
            Error::CwdRemoved { .. } => Reason::NotFound,
            Error::Config(e) => e.reason(),
            Error::SandboxUnavailable { .. } | Error::LimitsUnavailable { .. } => {
                Reason::SandboxUnavailable
            }
            Error::NoBash { .. } | Error::NoRuntime | Error::Setup { .. } => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::Busy { limit } => vec![("limit", limit.to_string())],
            Error::EnvNotAllowed { name, .. } => {
                vec![("field", "env".to_owned()), ("name", name.clone())]
            }
            Error::AboveMaximum { field, max, .. } => {
                vec![("field", (*field).to_owned()), ("max", max.clone())]
            }
            Error::Config(e) => e.metadata(),
            Error::SandboxUnavailable { profile, .. } => vec![("profile", profile.clone())],
            Error::CwdRemoved { path } => vec![("field", "cwd".to_owned()), ("path", path.clone())],
            _ => Vec::new(),
        }
    }
}

fn unavailable(profile: String, why: Unavailable) -> Error {
    Error::SandboxUnavailable {
        profile,
        missing: match why {
            Unavailable::Unknown { known } => {
                format!("no such profile; this executor has: {}", known.join(", "))
            }
            Unavailable::Missing(m) => format!("this host cannot provide {m}"),
        },
    }
}

/// Raises this process's soft limit of open files to its hard limit. Every run holds pipes,
/// a pidfd and its cgroup's join and counter files (about ten on v1), so a soft limit of
/// 1 024, a common default, would refuse runs with `EMFILE` well below
/// `max_concurrent_runs`. Runs are unaffected: each gets its own `rlimits.nofile`.
fn raise_open_files_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum
        && limit.current.is_some_and(|soft| soft < hard)
    {
        let raised = Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the open files limit");
        }
    }
}

fn setup_err(what: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Setup { what, source }
}

/// How children are isolated, decided once at startup.
#[derive(Debug, Clone)]
struct Plan {
    mechanism: KillMechanism,
    pid_limit: Option<u32>,
    /// The executor's own cgroup, parent of the per-run cgroups (cgroup mechanism only).
    cgroup_parent: Option<PathBuf>,
    /// Each run mounts a fresh tmpfs on `Inner::home_mount` as its HOME (PID namespace only).
    home_tmpfs: bool,
}

struct Inner {
    config: Config,
    plan: Plan,
    caps: Capabilities,
    bash: PathBuf,
    /// `/dev/null`, open for reading and writing: every standard stream that is not a pipe.
    dev_null: Arc<OwnedFd>,
    /// The thread sandboxed children are cloned from (their parent-death signal follows it).
    spawner: Arc<Spawner>,
    permits: Arc<Semaphore>,
    shutdown: watch::Sender<bool>,
    /// The empty directory runs mount their tmpfs HOME on (each in its own mount namespace).
    home_mount: Option<PathBuf>,
    /// The sandbox profiles, checked against this kernel at startup.
    sandboxes: Sandboxes,
    /// `pid_max` of a sandboxed run's PID namespace, when the kernel allows capping it.
    sandbox_pid_limit: Option<u32>,
    /// What the escape self-test found at startup.
    escapes: Vec<EscapeCheck>,
    /// The runs' parent cgroup(s) and the run cgroups made ahead in them, where the host
    /// delegates them; else why not.
    hierarchy: Result<Arc<Spares>, String>,
    /// Memory all runs together may use (the runs' parent cgroup cap, cgroup or not).
    memory_budget: u64,
    /// How long the recent after-run audits took: short ones run on the supervisor's worker.
    audits: Arc<crate::blocking::BlockingCost>,
}

impl Inner {
    /// What the profile named `name` changes of the configured limits (nothing for an
    /// unknown name: resolving it fails elsewhere).
    fn profile_limits(&self, name: &str) -> crate::limits::ProfileLimits {
        let sandbox = &self.config.sandbox;
        let name = if name.is_empty() {
            sandbox.default_profile.as_str()
        } else {
            name
        };
        sandbox
            .profiles
            .get(name)
            .map(|p| p.limits)
            .unwrap_or_default()
    }

    /// The limits a run with `resources` gets here: its cgroup's when it has one, else the
    /// kernel's fallbacks (its PID namespace's `pid_max`, `RLIMIT_CPU` worth `timeout` at its
    /// CPU share, tmpfs sizes). `RLIMIT_AS` is never used: Node, the JVM and Go reserve far
    /// more address space than they touch.
    fn enforced(
        &self,
        resources: &ResourceLimits,
        sandbox: Option<&Built>,
        timeout: Duration,
        cgroup: bool,
    ) -> EnforcedLimits {
        let pid_ns_limit = match sandbox {
            Some(_) => self.sandbox_pid_limit,
            None if self.plan.mechanism == KillMechanism::PidNamespace => self.plan.pid_limit,
            None => None,
        };
        let sb = &self.sandboxes.config;
        let (tmpfs_bytes, tmpfs_inodes) = match sandbox {
            Some(_) => (
                Some(sb.tmp_bytes + sb.shm_bytes + self.config.home_tmpfs_bytes),
                Some(sb.tmpfs_inodes),
            ),
            None if self.plan.home_tmpfs && self.home_mount.is_some() => {
                (Some(self.config.home_tmpfs_bytes), Some(sb.tmpfs_inodes))
            }
            None => (None, None),
        };
        let configured_cpu = self.config.rlimits.cpu_seconds;
        match (self.hierarchy.as_deref().map(Spares::hierarchy), cgroup) {
            (Ok(h), true) => EnforcedLimits {
                enforced: h.enforced(),
                memory_bytes: Some(resources.memory_bytes),
                pids: Some(pid_ns_limit.map_or(resources.pids, |p| p.min(resources.pids))),
                cpu_millicores: h.limits_cpu().then_some(resources.cpu_millicores),
                cpu_seconds: configured_cpu,
                tmpfs_bytes,
                tmpfs_inodes,
            },
            _ => {
                let share = timeout.as_secs_f64() * f64::from(resources.cpu_millicores) / 1000.0;
                let fallback = (share.ceil() as u64).max(1);
                let cpu_seconds = Some(configured_cpu.map_or(fallback, |c| c.min(fallback)));
                EnforcedLimits {
                    enforced: LimitsEnforced::Rlimit,
                    memory_bytes: None,
                    pids: pid_ns_limit,
                    cpu_millicores: None,
                    cpu_seconds,
                    tmpfs_bytes,
                    tmpfs_inodes,
                }
            }
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(dir) = &self.home_mount {
            // Only ever mounted on inside children's private mount namespaces, so it is empty.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Runs commands under the configured limits; cheap to clone.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("kill_mechanism", &self.inner.plan.mechanism)
            .field("pid_limit", &self.inner.plan.pid_limit)
            .finish_non_exhaustive()
    }
}

/// The limits a run gets once request values and configured defaults are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EffectiveLimits {
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Bytes of stdout streamed live.
    pub stdout_cap: u64,
    /// Bytes of stderr streamed live.
    pub stderr_cap: u64,
    /// Bytes of each stream's end kept after its cap.
    pub tail_bytes: usize,
}

/// How [`CancelHandle::stop`] ends a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM to every process of the run, then after the kill grace period SIGKILL to
    /// whatever is left (as a timeout does).
    Term,
    /// SIGKILL to every process of the run at once.
    Kill,
}

/// What the holders of a run's [`CancelHandle`] asked for; a later request only ever raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Request {
    None,
    Cancel,
    Term,
    Kill,
}

/// Cancels or stops a run from anywhere; cloning is cheap.
#[derive(Debug, Clone)]
pub struct CancelHandle(Arc<watch::Sender<Request>>);

impl CancelHandle {
    /// Terminates the run (TERM, grace, KILL); its final status is `Cancelled(ClientCancelled)`.
    pub fn cancel(&self) {
        self.raise(Request::Cancel);
    }

    /// Stops the run by `signal`. `Term`: SIGTERM to every process of the run (its cgroup's
    /// processes when it has one, else every process of its PID namespace, else its process
    /// group), then after the kill grace period SIGKILL to the whole run; `Kill`: SIGKILL to
    /// the whole run at once (also during a `Term`'s grace period). The run's final status
    /// is `Cancelled(Stopped)` when it had to be killed; one that exits by itself first
    /// reports how it exited (`Exited(0)` for a handler of TERM that exits 0,
    /// `Signaled { signal: 15 }` for a process TERM killed).
    pub fn stop(&self, signal: StopSignal) {
        self.raise(match signal {
            StopSignal::Term => Request::Term,
            StopSignal::Kill => Request::Kill,
        });
    }

    fn raise(&self, request: Request) {
        self.0.send_if_modified(|r| {
            let raised = request > *r;
            if raised {
                *r = request;
            }
            raised
        });
    }
}

/// A started run: its events, and a way to cancel it. Dropping the receiver cancels the run too.
#[derive(Debug)]
pub struct Run {
    events: mpsc::Receiver<Event>,
    cancel: CancelHandle,
}

impl Run {
    /// The next event; `None` after `Exited`.
    pub async fn recv(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    /// A handle that cancels this run.
    pub fn cancel_handle(&self) -> CancelHandle {
        self.cancel.clone()
    }

    /// The raw parts, for adapters that turn the receiver into a stream.
    pub fn into_parts(self) -> (mpsc::Receiver<Event>, CancelHandle) {
        (self.events, self.cancel)
    }
}

fn find_on_path(path: &str, name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':').filter(|d| !d.is_empty()).find_map(|dir| {
        let candidate = Path::new(dir).join(name);
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}

/// What a run needs once its child exists: everything [`Runner::try_run`] decided before the
/// clone, kept for [`Pending::watch`] (on the calling thread, or in a task when the clone runs
/// on the spawner thread).
struct Pending {
    inner: Arc<Inner>,
    handle: tokio::runtime::Handle,
    /// The program, for a run that does not start.
    program: String,
    cgroup: Option<crate::cgroup::RunCgroup>,
    isolation: crate::event::Isolation,
    state: Option<OwnedFd>,
    home: Option<tempfile::TempDir>,
    armed: Option<crate::tripwire::Armed>,
    stdin: Option<bytes::Bytes>,
    tx: mpsc::Sender<Event>,
    cancel: watch::Receiver<Request>,
    limits: EffectiveLimits,
    kill_on_cap: bool,
    audit: Option<crate::spec::Audit>,
    disk_watch: Option<crate::spec::DiskWatch>,
    hold: Option<crate::spec::Hold>,
    permit: OwnedSemaphorePermit,
    started: Instant,
    started_at: SystemTime,
}

impl Pending {
    /// Takes the spawned child under watch: queues `Started` and returns the run's
    /// supervision, to be spawned or awaited; or, when the child could not be spawned, queues
    /// its `Exited` (`SpawnFailed`) and returns `None`. An error setting up the watch kills
    /// and reaps the child.
    fn watch(
        self,
        spawned: io::Result<Spawned>,
    ) -> Result<Option<impl std::future::Future<Output = ()> + Send + 'static>, Error> {
        let _enter = self.handle.enter();
        if let Some(cgroup) = &self.cgroup {
            cgroup.replenish();
        }
        let mut spawned = match spawned {
            Ok(spawned) => spawned,
            Err(err) => {
                // The channel is fresh and has room for at least one event.
                let _ = self.tx.try_send(Event::Exited(not_started(
                    &self.program,
                    &err,
                    self.started,
                )));
                return Ok(None);
            }
        };
        let inner = &self.inner;
        let mount_ns = spawned.mount_ns.take();
        let watched = Watched::new(spawned, self.armed, self.state, self.stdin, &inner.config)?;
        let pid = watched.guard.pid;
        let limits = self.limits;
        let sup = Supervisor {
            _spawner: Arc::clone(&inner.spawner),
            pid,
            pidfd: watched.pidfd,
            guard: watched.guard,
            mount_ns,
            mechanism: self.isolation.kill_mechanism,
            cgroup: self.cgroup,
            enforced: self.isolation.limits,
            tx: self.tx,
            cancel: self.cancel,
            shutdown: inner.shutdown.subscribe(),
            timeout: limits.timeout,
            grace: inner.config.kill_grace,
            drain: inner.config.drain_after_exit,
            final_send_timeout: inner.config.final_send_timeout,
            kill_on_cap: self.kill_on_cap,
            audit: self.audit,
            audit_cost: Arc::clone(&inner.audits),
            tripwire: watched.tripwire,
            disk_watch: self.disk_watch,
            file_size_limit: inner.config.rlimits.fsize,
            limits: [
                StreamLimits {
                    cap: limits.stdout_cap,
                    tail: limits.tail_bytes,
                },
                StreamLimits {
                    cap: limits.stderr_cap,
                    tail: limits.tail_bytes,
                },
            ],
            started: self.started,
        };
        // The channel is fresh and holds at least one event, so this cannot fail.
        let _ = sup.tx.try_send(Event::Started(Started {
            pid: pid as u32,
            isolation: self.isolation,
            started_at: self.started_at,
        }));
        let (stdout, stderr, stdin_feed, state) =
            (watched.stdout, watched.stderr, watched.stdin, watched.state);
        let (hold, permit, home) = (self.hold, self.permit, self.home);
        Ok(Some(async move {
            // Dropped last, after the runner's own permit: a caller's slot held here is never
            // free before the runner's.
            let _hold = hold;
            let _permit: OwnedSemaphorePermit = permit;
            let _home = home;
            Box::pin(sup.run(stdout, stderr, stdin_feed, state)).await;
        }))
    }
}

impl Runner {
    /// Validates `config`, probes the host once and decides the isolation every run gets.
    pub fn new(config: Config) -> Result<Runner, Error> {
        config.validate()?;
        raise_open_files_limit();
        let bash = find_on_path(&config.path, "bash").ok_or_else(|| Error::NoBash {
            path: config.path.clone(),
        })?;
        let (namespaces, landlock_abi, seccomp, cgroup) = probe_host();
        let dev_null = File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map(Arc::new)
            .map_err(setup_err("open /dev/null"))?;
        let spawner = Spawner::start().map_err(setup_err("start the spawner thread"))?;
        let mut plan = Plan {
            mechanism: KillMechanism::ProcessGroup,
            pid_limit: None,
            cgroup_parent: None,
            home_tmpfs: false,
        };
        remove_stale_homes(config.home_parent.as_deref());
        let sandboxes = Sandboxes::new(
            config.sandbox.clone(),
            config.home_tmpfs_bytes,
            landlock_abi,
            config.home_parent.as_deref(),
        )
        .map_err(setup_err("open the executor's own pidfd"))?;
        let unconfined_possible =
            !config.sandbox.require || config.sandbox.profiles.values().any(|p| p.unconfined);
        let home_mount =
            if config.home_tmpfs_bytes > 0 && config.use_pid_namespace && unconfined_possible {
                let mut builder = tempfile::Builder::new();
                // The owner's pid is in the name, so a later executor can tell a dead one's
                // leftover from a live one's mount point.
                let prefix = format!("toolgate-homes-{}-", std::process::id());
                builder
                    .prefix(&prefix)
                    .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
                match &config.home_parent {
                    Some(parent) => builder.tempdir_in(parent),
                    None => builder.tempdir(),
                }
                .map(tempfile::TempDir::keep)
                .ok()
            } else {
                None
            };
        let budget = Budget {
            memory_bytes: config.runs_memory_bytes,
            reserve_bytes: config.executor_reserve_bytes,
            pids: config.runs_pids,
        };
        // Before `delegate`, which may move the executor into a leaf cgroup of its own.
        let memory_budget = crate::cgroup::runs_memory_budget(&budget);
        let hierarchy = if config.use_cgroup {
            Hierarchy::delegate(&budget, &config.limits).map(Spares::new)
        } else {
            Err("process.use_cgroup is off".to_owned())
        };
        // On v2 the runs' parent is where run cgroups go, for killing as for limits (the
        // executor may have moved itself into a leaf beside it).
        let cgroup_parent = match hierarchy
            .as_deref()
            .ok()
            .and_then(|s| s.hierarchy().v2_runs())
        {
            Some(runs) => Some(runs.to_path_buf()),
            None => cgroup
                .mount_point
                .as_deref()
                .filter(|_| cgroup.writable)
                .and_then(crate::cgroup::own_cgroup_dir),
        };
        let mut inner = Inner {
            permits: Arc::new(Semaphore::new(config.max_concurrent_runs)),
            shutdown: watch::Sender::new(false),
            caps: Capabilities {
                version: env!("CARGO_PKG_VERSION"),
                namespaces,
                landlock_abi,
                seccomp,
                cgroup,
                kill_mechanism: plan.mechanism,
                pid_limit: None,
                limits: LimitsView::of(&config),
                profiles: Vec::new(),
                default_profile: config.sandbox.default_profile.clone(),
                require_sandbox: config.sandbox.require,
                limits_enforced: hierarchy
                    .as_deref()
                    .map(|s| s.hierarchy().enforced())
                    .map_err(Clone::clone),
                require_limits: config.require_limits,
            },
            config,
            plan: plan.clone(),
            bash,
            dev_null,
            spawner,
            home_mount,
            sandboxes,
            sandbox_pid_limit: None,
            escapes: Vec::new(),
            hierarchy,
            memory_budget,
            audits: Arc::default(),
        };
        inner.self_test_sandboxes();
        if inner.config.use_pid_namespace && namespaces.pid && namespaces.mount {
            // Try the real spawn path once: with a capped pid_max, then without (pre-6.14 kernels).
            // Most isolation first; drop what this kernel refuses (per-namespace pid_max needs
            // Linux 6.14, a tmpfs mount may be forbidden).
            let tmpfs = inner.home_mount.is_some();
            let candidates = [
                (Some(inner.config.pid_limit), tmpfs),
                (Some(inner.config.pid_limit), false),
                (None, tmpfs),
                (None, false),
            ]
            .map(|(pid_limit, home_tmpfs)| Plan {
                mechanism: KillMechanism::PidNamespace,
                pid_limit,
                cgroup_parent: None,
                home_tmpfs,
            });
            for candidate in candidates {
                inner.plan = candidate.clone();
                if inner.probe_spawn() {
                    plan = candidate;
                    break;
                }
            }
        }
        if plan.mechanism == KillMechanism::ProcessGroup
            && inner.config.use_cgroup
            && cgroup_parent.is_some()
        {
            let candidate = Plan {
                mechanism: KillMechanism::Cgroup,
                pid_limit: None,
                cgroup_parent,
                home_tmpfs: false,
            };
            inner.plan = candidate.clone();
            if inner.probe_spawn() {
                plan = candidate;
            }
        }
        inner.caps.profiles = inner
            .sandboxes
            .report()
            .into_iter()
            .map(|(name, available)| {
                let profile = &inner.config.sandbox.profiles[&name];
                ProfileStatus {
                    available,
                    network: profile.network,
                    unconfined: profile.unconfined,
                    name,
                }
            })
            .collect();
        inner.caps.kill_mechanism = plan.mechanism;
        inner.caps.pid_limit = plan.pid_limit;
        inner.plan = plan;
        Ok(Runner {
            inner: Arc::new(inner),
        })
    }

    /// A new set of session namespaces (see [`crate::session`]) for
    /// [`RunSpec::set_session`]: the confined runs of one session share its network (non-
    /// networked profiles), IPC and `/tmp`. On a runner that confines no run it holds nothing
    /// (unconfined runs ignore a session). Costs two helper processes and, when the pool of
    /// ready network namespaces is empty, a third.
    pub fn session_namespaces(&self) -> Result<SessionNamespaces, Error> {
        self.inner
            .sandboxes
            .session()
            .map_err(setup_err("create the session's namespaces"))
    }

    /// What this executor enforces (probed once at startup).
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.caps
    }

    /// What the escape self-test tried at startup under each confined profile, and what
    /// (if anything) got through. A profile with an escape is unavailable.
    pub fn escape_checks(&self) -> &[EscapeCheck] {
        &self.inner.escapes
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The profile a run asking for `name` (empty: the default) runs under, or the
    /// `SandboxUnavailable` error `try_run` would refuse it with. The executor asks the policy
    /// about exactly this name, so an approval covers exactly one confinement.
    pub fn profile(&self, name: &str) -> Result<String, Error> {
        match self.inner.sandboxes.resolve(name) {
            Ok(Resolved::Confined(b)) => Ok(b.name.clone()),
            Ok(Resolved::Unconfined(n)) => Ok(n.to_owned()),
            Err((profile, why)) => Err(unavailable(profile, why)),
        }
    }

    /// Memory all concurrent runs together may reserve ([`Runner::reservation`]): the cap of
    /// their parent cgroup, which is `process.runs_memory_bytes` within the executor's own
    /// limit (or the host's memory) less `process.executor_reserve_bytes`.
    pub fn memory_budget(&self) -> u64 {
        self.inner.memory_budget
    }

    /// What a run under the profile named `name` (empty: the default) holds of
    /// [`Runner::memory_budget`] while it runs: its memory limit and its tmpfs sizes. Counted
    /// whether or not a cgroup enforces the limit, so admission never overcommits either way.
    pub fn reservation(&self, name: &str) -> Result<crate::limits::Reservation, Error> {
        let inner = &self.inner;
        let tmpfs_bytes = match inner.sandboxes.resolve(name) {
            Ok(Resolved::Confined(_)) => {
                let sb = &inner.sandboxes.config;
                sb.tmp_bytes + sb.shm_bytes + inner.config.home_tmpfs_bytes
            }
            Ok(Resolved::Unconfined(_)) if inner.plan.home_tmpfs && inner.home_mount.is_some() => {
                inner.config.home_tmpfs_bytes
            }
            Ok(Resolved::Unconfined(_)) => 0,
            Err((profile, why)) => return Err(unavailable(profile, why)),
        };
        let memory_bytes = inner
            .profile_limits(name)
            .apply(inner.config.limits)
            .memory_bytes;
        Ok(crate::limits::Reservation {
            memory_bytes,
            tmpfs_bytes,
        })
    }

    /// Whether a run under profile `name` is confined by the kernel sandbox here: false for an
    /// unconfined profile, for the default profile's unconfined fallback (sandbox not
    /// required, not enforceable on this host), and for a name this runner refuses.
    pub fn confines(&self, name: &str) -> bool {
        matches!(
            self.inner.sandboxes.resolve(name),
            Ok(Resolved::Confined(_))
        )
    }

    /// Whether runs under profile `name` (empty: the default) are networked here: confined
    /// in a gated network namespace whose only way out is the executor's egress gate, so
    /// their [`RunSpec`] needs [`RunSpec::with_egress`] or the run is refused.
    pub fn networked(&self, name: &str) -> bool {
        matches!(
            self.inner.sandboxes.resolve(name),
            Ok(Resolved::Confined(b)) if b.profile.network
        )
    }

    /// The limits a run of `spec` gets (request values, else the configured defaults), or
    /// the error `try_run` would fail with: an environment name outside the allowlist or a
    /// value above its maximum. The executor asks the policy about exactly these values.
    pub fn effective(&self, spec: &RunSpec) -> Result<EffectiveLimits, Error> {
        let config = &self.inner.config;
        let req = &spec.request;
        for (name, _) in &req.env {
            if !config.allowed_env.allows(name) || config.env.iter().any(|(n, _)| n == name) {
                return Err(Error::EnvNotAllowed {
                    name: name.clone(),
                    allowed: config.allowed_env.patterns().join(", "),
                });
            }
        }
        let timeout = req.timeout.unwrap_or(config.default_timeout);
        let max_timeout = self
            .inner
            .profile_limits(&req.profile)
            .max_timeout
            .map_or(config.max_timeout, |ceiling| {
                ceiling.min(config.max_timeout)
            });
        if timeout > max_timeout {
            return Err(Error::AboveMaximum {
                field: "timeout",
                requested: format!("{timeout:?}"),
                max: format!("{max_timeout:?}"),
            });
        }
        let mut caps = [0u64; 2];
        for (i, (field, cap)) in [
            ("stdout_cap", req.stdout_cap),
            ("stderr_cap", req.stderr_cap),
        ]
        .into_iter()
        .enumerate()
        {
            let cap = cap.unwrap_or(config.default_cap_bytes);
            if cap > config.max_cap_bytes {
                return Err(Error::AboveMaximum {
                    field,
                    requested: cap.to_string(),
                    max: config.max_cap_bytes.to_string(),
                });
            }
            caps[i] = cap;
        }
        let tail_bytes = req.tail_bytes.unwrap_or(config.default_tail_bytes);
        if tail_bytes > config.max_tail_bytes {
            return Err(Error::AboveMaximum {
                field: "tail_bytes",
                requested: tail_bytes.to_string(),
                max: config.max_tail_bytes.to_string(),
            });
        }
        Ok(EffectiveLimits {
            timeout,
            stdout_cap: caps[0],
            stderr_cap: caps[1],
            tail_bytes,
        })
    }

    /// Starts a run, or fails at once with `Busy` when all slots are taken.
    ///
    /// Must be called from inside a Tokio runtime: the run is supervised by a spawned task. A
    /// program that cannot be started is not an error here: the run's only event is then an
    /// `Exited` with `Status::SpawnFailed`.
    pub fn try_run(&self, spec: RunSpec) -> Result<Run, Error> {
        let inner = &self.inner;
        if *inner.shutdown.borrow() {
            return Err(Error::ShuttingDown);
        }
        let limits = self.effective(&spec)?;
        let RunSpec {
            request: mut req,
            trace_parent,
            audit,
            tripwire,
            hold,
            disk_watch,
            egress,
            session,
            capture_state,
        } = spec;
        // The call's trace context wins over a caller-supplied one.
        if let Some(tp) = trace_parent {
            req.env.retain(|(name, _)| name != "TRACEPARENT");
            req.env.push(("TRACEPARENT".to_owned(), tp));
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let permit = Arc::clone(&inner.permits)
            .try_acquire_owned()
            .map_err(|_| Error::Busy {
                limit: inner.config.max_concurrent_runs,
            })?;
        // A directory removed since it was opened can still be entered by descriptor, but not
        // by path (a sandboxed run's view names it by path): no run starts in one.
        if let Some(path) = spawn::removed_directory(&req.cwd) {
            return Err(Error::CwdRemoved { path });
        }
        let mut confinement = inner.confine(
            &req.profile,
            &req.cwd,
            &req.masks,
            egress.is_some(),
            session.as_ref(),
        )?;
        let gate = confinement.gate.take();
        let RunRequest {
            command,
            cwd,
            env,
            stdin,
            kill_on_cap,
            ..
        } = req;
        let child = inner.plan_child(
            &command,
            cwd,
            &env,
            stdin.is_some(),
            confinement,
            limits.timeout,
            capture_state,
        )?;

        let (tx, rx) = mpsc::channel(inner.config.event_buffer);
        let cancel = CancelHandle(Arc::new(watch::Sender::new(Request::None)));
        let run = Run {
            events: rx,
            cancel: cancel.clone(),
        };
        // Armed before the view is built: a replacement between the walk and the end of the
        // run is seen, whenever it happens.
        let armed =
            crate::tripwire::Armed::arm(&tripwire).map_err(setup_err("watch the masked paths"))?;
        // The sockets already listen: whatever the run sends before the gate serves them
        // waits in their queues.
        if let (Some(sockets), Some(hook)) = (gate, egress) {
            (hook.0)(sockets);
        }
        let started = Instant::now();
        let started_at = SystemTime::now();
        let launch = match child.prepared {
            Ok(p) => inner.launch(p, [child.stdin, Io::Pipe, Io::Pipe]),
            Err(e) => Launch::Ready(Err(e)),
        };
        let pending = Pending {
            inner: Arc::clone(inner),
            handle: handle.clone(),
            program: inner.program(&command).0.to_owned(),
            cgroup: child.cgroup,
            isolation: child.isolation,
            state: child.state,
            home: child.home,
            armed,
            stdin,
            tx,
            cancel: cancel.0.subscribe(),
            limits,
            kill_on_cap,
            audit,
            disk_watch,
            hold,
            permit,
            started,
            started_at,
        };
        match launch {
            // Cloned already (unsandboxed, or nothing to clone): `Started` is queued before
            // this returns, so whoever polls the run at once finds it ready, and the executor's
            // response carries its headers and `Started` in one write.
            Launch::Ready(spawned) => {
                if let Some(supervise) = pending.watch(spawned)? {
                    handle.spawn(supervise);
                }
            }
            // Being cloned on the spawner thread: the rest happens in a task once it is done,
            // and a failure to watch the child then ends the run as not started.
            launch @ Launch::OnSpawner(_) => {
                handle.spawn(async move {
                    let (tx, program, started) =
                        (pending.tx.clone(), pending.program.clone(), pending.started);
                    match pending.watch(launch.spawned().await) {
                        Ok(Some(supervise)) => {
                            drop(tx);
                            supervise.await;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            let err = io::Error::other(e.to_string());
                            let _ =
                                tx.try_send(Event::Exited(not_started(&program, &err, started)));
                        }
                    }
                });
            }
        }
        Ok(run)
    }

    /// Stops admitting runs, cancels every run in flight (TERM, grace, KILL) and waits until each
    /// has been reaped and has sent its final event (or given up on a stalled consumer).
    pub async fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
        let all = u32::try_from(self.inner.config.max_concurrent_runs).unwrap_or(u32::MAX);
        // Every run holds a permit until its supervisor is done.
        if let Ok(permits) = self.inner.permits.acquire_many(all).await {
            drop(permits);
        }
    }

    /// Spawns `argv` with exactly the isolation, environment, spawn path and pipe size of a run
    /// but none of its supervision (no pidfd, no pumps, no events), with stdout on a pipe when
    /// `capture_stdout` and on `/dev/null` otherwise. For benchmarks that need the raw cost.
    pub fn spawn_baseline(
        &self,
        argv: &[&str],
        cwd: OwnedFd,
        capture_stdout: bool,
    ) -> io::Result<BaselineChild> {
        let home = self
            .inner
            .home_mount
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        // Joins no cgroup: a baseline for the PID-namespace and process-group mechanisms.
        let prepared =
            self.inner
                .prepare(argv[0], &argv[1..], &[], &home, cwd, None, None, None)?;
        let stdout = if capture_stdout { Io::Pipe } else { Io::Null };
        let child = self.inner.spawn(prepared, [Io::Null, stdout, Io::Null])?;
        if let Some(out) = &child.stdout {
            // Same pipe size as a run gets, so a throughput comparison measures only the stream.
            let _ = rustix::pipe::fcntl_setpipe_size(out, self.inner.config.pipe_buffer_bytes);
        }
        Ok(BaselineChild {
            pid: child.pid,
            reaped: false,
            stdout: child.stdout.map(File::from),
        })
    }
}

/// A child started by [`Runner::spawn_baseline`]; killed and reaped on drop unless waited for.
#[derive(Debug)]
pub struct BaselineChild {
    pid: i32,
    reaped: bool,
    /// The read end of the child's stdout, when it was captured.
    pub stdout: Option<File>,
}

impl BaselineChild {
    /// Waits for the child to exit and reaps it; `Some(code)` for a normal exit.
    pub fn wait(&mut self) -> io::Result<Option<i32>> {
        let reaped = sys::wait4(self.pid, true)?.ok_or_else(|| io::Error::other("not reaped"))?;
        self.reaped = true;
        Ok(reaped.exit_code())
    }
}

impl Drop for BaselineChild {
    fn drop(&mut self) {
        if !self.reaped {
            signal_all(self.pid, Signal::KILL);
            let _ = sys::wait4(self.pid, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        let Some(hard) = getrlimit(Resource::Nofile).maximum else {
            return;
        };
        // One below: harmless to the tests running beside this one.
        let lowered = Rlimit {
            current: Some(hard - 1),
            maximum: Some(hard),
        };
        setrlimit(Resource::Nofile, lowered).expect("lower the soft limit");
        super::raise_open_files_limit();
        assert_eq!(getrlimit(Resource::Nofile).current, Some(hard));
    }
}
