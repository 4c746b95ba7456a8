//! Admission, spawning and supervision of runs.

use std::ffi::CString;
use std::fs::File;
use std::future::pending;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use rustix::process::{Pid, Resource, Signal};
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use toolgate_core::{Reason, ReasonedError};

use crate::caps::{Capabilities, LimitsView, ProfileStatus, probe_host};
use crate::cgroup::RunCgroup;
use crate::config::{self, Config};
use crate::event::{
    CancelCause, Event, Exited, Isolation, KillMechanism, Started, Status, Stream, StreamSummary,
    Usage,
};
use crate::output::{StreamLimits, pump};
use crate::sandbox::{Built, Masks, Resolved, Sandboxes, Unavailable};
use crate::spec::{Command, RunSpec};
use crate::sys::sandbox::SandboxSetup;
use crate::sys::{self, ChildSetup, Reaped};

mod selftest;
pub use selftest::EscapeCheck;

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
            Error::Config(e) => e.reason(),
            Error::SandboxUnavailable { .. } => Reason::SandboxUnavailable,
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

/// Cancels a run from anywhere; cloning is cheap.
#[derive(Debug, Clone)]
pub struct CancelHandle(Arc<watch::Sender<bool>>);

impl CancelHandle {
    /// Terminates the run (TERM, grace, KILL); its final status is `Cancelled(ClientCancelled)`.
    pub fn cancel(&self) {
        self.0.send_replace(true);
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

impl Runner {
    /// Validates `config`, probes the host once and decides the isolation every run gets.
    pub fn new(config: Config) -> Result<Runner, Error> {
        config.validate()?;
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
        let cgroup_parent = cgroup
            .mount_point
            .as_deref()
            .filter(|_| cgroup.writable)
            .and_then(crate::cgroup::own_cgroup_dir);
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
        if timeout > config.max_timeout {
            return Err(Error::AboveMaximum {
                field: "timeout",
                requested: format!("{timeout:?}"),
                max: format!("{:?}", config.max_timeout),
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
        let config = &inner.config;
        if *inner.shutdown.borrow() {
            return Err(Error::ShuttingDown);
        }
        let limits = self.effective(&spec)?;
        let (timeout, caps, tail) = (
            limits.timeout,
            [limits.stdout_cap, limits.stderr_cap],
            limits.tail_bytes,
        );
        let RunSpec {
            request: req,
            trace_parent,
        } = spec;
        // The call's trace context wins over a caller-supplied one.
        let mut env = req.env;
        if let Some(tp) = trace_parent {
            env.retain(|(name, _)| name != "TRACEPARENT");
            env.push(("TRACEPARENT".to_owned(), tp));
        }
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let permit = Arc::clone(&inner.permits)
            .try_acquire_owned()
            .map_err(|_| Error::Busy {
                limit: config.max_concurrent_runs,
            })?;

        let (sandbox, profile_name) = match inner.sandboxes.resolve(&req.profile) {
            Ok(Resolved::Confined(built)) => {
                let setup = inner.sandbox_setup(built, &req.cwd, &req.masks, None)?;
                (Some((setup, built)), built.name.clone())
            }
            Ok(Resolved::Unconfined(name)) => (None, name.to_owned()),
            Err((profile, why)) => return Err(unavailable(profile, why)),
        };
        let home = if sandbox.is_some() {
            None
        } else {
            inner.private_home()?
        };
        let home_path = match (&sandbox, &home, &inner.home_mount) {
            (Some(_), _, _) => inner.sandboxes.config.home.clone(),
            (None, Some(dir), _) => dir.path().to_path_buf(),
            (None, None, Some(mount)) => mount.clone(),
            (None, None, None) => std::env::temp_dir(),
        };

        let (program, args): (&str, Vec<&str>) = match &req.command {
            Command::Argv(argv) => (&argv[0], argv[1..].iter().map(String::as_str).collect()),
            Command::Script(script) => (
                inner.bash.to_str().unwrap_or("bash"),
                vec!["--noprofile", "--norc", "-c", script.as_str()],
            ),
        };
        let stdin = if req.stdin.is_some() {
            Io::Pipe
        } else {
            Io::Null
        };
        let run_cgroup = if sandbox.is_some() {
            None
        } else {
            inner.run_cgroup()?
        };
        let isolation = inner.isolation(sandbox.as_ref().map(|(_, b)| *b), &profile_name);
        let mechanism = isolation.kill_mechanism;
        let prepared = inner.prepare(
            program,
            &args,
            &env,
            &home_path,
            req.cwd,
            run_cgroup.as_ref(),
            sandbox.map(|(setup, built)| (setup, built.profile.network)),
        );

        let (tx, rx) = mpsc::channel(config.event_buffer);
        let cancel = CancelHandle(Arc::new(watch::Sender::new(false)));
        let run = Run {
            events: rx,
            cancel: cancel.clone(),
        };
        let started = Instant::now();
        let started_at = SystemTime::now();
        let spawned = prepared.and_then(|p| inner.spawn(p, [stdin, Io::Pipe, Io::Pipe]));
        let child = match spawned {
            Ok(child) => child,
            Err(err) => {
                let exited = Exited {
                    status: spawn_failed(program, &err),
                    stdout: StreamSummary::default(),
                    stderr: StreamSummary::default(),
                    usage: Usage {
                        wall_time: started.elapsed(),
                        ..Usage::default()
                    },
                    finished_at: SystemTime::now(),
                };
                // The channel is fresh and has room for at least one event.
                let _ = tx.try_send(Event::Exited(exited));
                return Ok(run);
            }
        };
        let pid = child.pid;
        let guard = ReapGuard { pid, reaped: false };
        let _enter = handle.enter();
        let pidfd = sys::watch_exit(pid).map_err(setup_err("watch the child with a pidfd"))?;
        let stdout = take_reader(child.stdout, config.pipe_buffer_bytes)
            .map_err(setup_err("read stdout"))?;
        let stderr = take_reader(child.stderr, config.pipe_buffer_bytes)
            .map_err(setup_err("read stderr"))?;
        let stdin_feed = match (child.stdin, req.stdin) {
            (Some(pipe_in), Some(bytes)) => Some((
                pipe::Sender::from_owned_fd(pipe_in).map_err(setup_err("write stdin"))?,
                bytes,
            )),
            _ => None,
        };

        let sup = Supervisor {
            _spawner: Arc::clone(&inner.spawner),
            pid,
            pidfd,
            guard,
            mechanism,
            cgroup: run_cgroup,
            tx,
            cancel: cancel.0.subscribe(),
            shutdown: inner.shutdown.subscribe(),
            timeout,
            grace: config.kill_grace,
            drain: config.drain_after_exit,
            final_send_timeout: config.final_send_timeout,
            kill_on_cap: req.kill_on_cap,
            limits: [
                StreamLimits { cap: caps[0], tail },
                StreamLimits { cap: caps[1], tail },
            ],
            started,
        };
        // `Started` is queued before the supervisor task exists, so whoever polls the run at
        // once finds it ready: the executor's response then carries its headers and `Started`
        // in one write instead of waking the client twice. The channel is fresh and holds at
        // least one event, so this cannot fail.
        let _ = sup.tx.try_send(Event::Started(Started {
            pid: pid as u32,
            isolation,
            started_at,
        }));
        handle.spawn(async move {
            let _permit: OwnedSemaphorePermit = permit;
            let _home = home;
            Box::pin(sup.run(stdout, stderr, stdin_feed)).await;
        });
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
        let prepared = self
            .inner
            .prepare(argv[0], &argv[1..], &[], &home, cwd, None, None)?;
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

/// What a child's standard stream is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Io {
    /// `/dev/null`.
    Null,
    /// A fresh pipe; the executor keeps the other end.
    Pipe,
}

/// A child ready to be spawned: what it executes and what it does to itself first.
struct Prepared {
    exec: sys::Exec,
    setup: ChildSetup,
    /// A sandboxed child keeps the host's network namespace (its profile allows egress).
    share_network: bool,
}

/// A spawned child: its pid and the executor's ends of its pipes.
struct Spawned {
    pid: i32,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Inner {
    /// The child for `program` and `args`: a cleared environment with the allowlist and `env`
    /// added (an addition replaces a fixed entry of the same name), and its setup.
    // One argument per part of a child; bundling them would only move the list elsewhere.
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        program: &str,
        args: &[&str],
        env: &[(String, String)],
        home: &Path,
        cwd: OwnedFd,
        cgroup: Option<&RunCgroup>,
        sandbox: Option<(SandboxSetup, bool)>,
    ) -> io::Result<Prepared> {
        let home = home
            .to_str()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "HOME is not UTF-8"))?;
        let fixed = [
            ("PATH", self.config.path.as_str()),
            ("HOME", home),
            ("LANG", "C.UTF-8"),
            ("TERM", "dumb"),
            ("PAGER", "cat"),
            ("GIT_PAGER", "cat"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("EDITOR", "true"),
            ("CI", "1"),
            // git may read configuration only from the repository it is pointed at: no system
            // or global file, and discovery stops above the workspace.
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ];
        let ceiling = self
            .sandboxes
            .config
            .workspace
            .as_deref()
            .and_then(Path::parent)
            .and_then(Path::to_str)
            .map(|p| ("GIT_CEILING_DIRECTORIES", p));
        let exec = sys::Exec::new(
            program,
            args,
            fixed
                .into_iter()
                .chain(ceiling)
                .chain(
                    self.config
                        .env
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                )
                .chain(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        )?;
        let rl = &self.config.rlimits;
        let mut rlimits = vec![(Resource::Core, 0)];
        for (resource, value) in [
            (Resource::Nofile, rl.nofile),
            (Resource::Fsize, rl.fsize),
            (Resource::Cpu, rl.cpu_seconds),
            (Resource::As, rl.address_space),
            (Resource::Nproc, rl.nproc),
        ] {
            if let Some(v) = value {
                rlimits.push((resource, v));
            }
        }
        let sandboxed = sandbox.is_some();
        let pid_ns = sandboxed || self.plan.mechanism == KillMechanism::PidNamespace;
        let pid_limit = if sandboxed {
            self.sandbox_pid_limit
        } else {
            self.plan.pid_limit
        };
        let share_network = sandbox.as_ref().is_some_and(|(_, network)| *network);
        let setup = ChildSetup {
            cwd,
            mount_proc: pid_ns,
            pid_max: pid_limit
                .filter(|_| pid_ns)
                .map(|n| n.to_string().into_bytes()),
            rlimits,
            home_tmpfs: self
                .home_mount
                .as_ref()
                .filter(|_| pid_ns && self.plan.home_tmpfs)
                .and_then(|dir| {
                    let target = CString::new(dir.clone().into_os_string().into_vec()).ok()?;
                    let options = CString::new(format!(
                        "size={},nr_inodes=65536,mode=0700",
                        self.config.home_tmpfs_bytes
                    ))
                    .ok()?;
                    Some((target, options))
                }),
            join_cgroup: cgroup
                .and_then(|c| CString::new(c.procs_file().into_os_string().into_vec()).ok()),
            sandbox: sandbox.map(|(setup, _)| setup),
        };
        Ok(Prepared {
            exec,
            setup,
            share_network,
        })
    }

    /// A per-run HOME directory on disk, unless runs get a tmpfs HOME.
    fn private_home(&self) -> Result<Option<tempfile::TempDir>, Error> {
        if self.plan.mechanism == KillMechanism::PidNamespace && self.plan.home_tmpfs {
            return Ok(None);
        }
        let mut builder = tempfile::Builder::new();
        builder
            .prefix("toolgate-home-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
        match &self.config.home_parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map(Some)
        .map_err(setup_err("create the private HOME"))
    }

    /// A fresh cgroup for one run when the cgroup mechanism is in force.
    fn run_cgroup(&self) -> Result<Option<RunCgroup>, Error> {
        match (&self.plan.mechanism, &self.plan.cgroup_parent) {
            (KillMechanism::Cgroup, Some(parent)) => RunCgroup::create(parent)
                .map(Some)
                .map_err(setup_err("create the run's cgroup")),
            _ => Ok(None),
        }
    }

    /// Spawns `prepared` with its standard streams connected as `io` (stdin, stdout, stderr).
    /// A sandboxed child is cloned on the runner's spawner thread (see [`Spawner`]).
    fn spawn(&self, prepared: Prepared, io: [Io; 3]) -> io::Result<Spawned> {
        let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
        let mut theirs: [Option<OwnedFd>; 3] = [None, None, None];
        for (i, mode) in io.into_iter().enumerate() {
            if mode == Io::Pipe {
                let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
                let (mine, child) = if i == 0 { (write, read) } else { (read, write) };
                ours[i] = Some(mine);
                theirs[i] = Some(child);
            }
        }
        let sandboxed = prepared.setup.sandbox.is_some();
        let dev_null = Arc::clone(&self.dev_null);
        let new_pid_namespace = self.plan.mechanism == KillMechanism::PidNamespace;
        let clone = move || {
            let fds =
                [0, 1, 2].map(|i| theirs[i].as_ref().map_or(dev_null.as_fd(), |fd| fd.as_fd()));
            sys::spawn(
                &prepared.exec,
                fds,
                &prepared.setup,
                new_pid_namespace,
                prepared.share_network,
            )
        };
        let pid = if sandboxed {
            self.spawner.call(clone)??
        } else {
            clone()?
        };
        let [stdin, stdout, stderr] = ours;
        Ok(Spawned {
            pid,
            stdin,
            stdout,
            stderr,
        })
    }

    /// Spawns `true` with the current plan and checks it exits 0.
    fn probe_spawn(&self) -> bool {
        let Some(program) = find_on_path(&self.config.path, "true") else {
            return false;
        };
        let Ok(cwd) = File::open("/") else {
            return false;
        };
        let program = program.to_string_lossy().into_owned();
        let home = self.home_mount.clone().unwrap_or_else(std::env::temp_dir);
        let Ok(cgroup) = self.run_cgroup() else {
            return false;
        };
        self.prepare(&program, &[], &[], &home, cwd.into(), cgroup.as_ref(), None)
            .and_then(|p| self.spawn(p, [Io::Null; 3]))
            .and_then(|child| sys::wait4(child.pid, true))
            .is_ok_and(|r| r.and_then(|r| r.exit_code()) == Some(0))
    }

    /// What a run gets: under `built`'s sandbox, or unconfined (the operator's choice).
    fn isolation(&self, built: Option<&Built>, profile: &str) -> Isolation {
        if let Some(b) = built {
            let mut namespaces = vec!["user", "pid", "mount", "ipc", "uts"];
            if !b.profile.network {
                namespaces.push("net");
            }
            return Isolation {
                kill_mechanism: KillMechanism::PidNamespace,
                own_process_group: true,
                no_new_privs: true,
                landlock_abi: b.landlock_abi,
                seccomp: true,
                namespaces,
                pid_limit: self.sandbox_pid_limit,
                sandbox_profile: profile.to_owned(),
                sandboxed: true,
                network: b.profile.network,
            };
        }
        let pid_ns = self.plan.mechanism == KillMechanism::PidNamespace;
        Isolation {
            kill_mechanism: self.plan.mechanism,
            own_process_group: true,
            no_new_privs: true,
            landlock_abi: 0,
            seccomp: false,
            namespaces: if pid_ns {
                vec!["pid", "mount"]
            } else {
                Vec::new()
            },
            pid_limit: self.plan.pid_limit,
            sandbox_profile: profile.to_owned(),
            sandboxed: false,
            network: true,
        }
    }

    /// The child's sandbox plan for a run starting in `cwd`.
    fn sandbox_setup(
        &self,
        built: &Built,
        cwd: &OwnedFd,
        masks: &Masks,
        workspace: Option<&Path>,
    ) -> Result<SandboxSetup, Error> {
        // The directory the executor opened (confined by openat2), by its real path: the view
        // has the workspace at the same path, so this names the same directory inside.
        let cwd_path = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(cwd)
        ))
        .map_err(setup_err("read the working directory's path"))?;
        let workspace = workspace
            .or(self.sandboxes.config.workspace.as_deref())
            .map_or_else(|| cwd_path.clone(), Path::to_path_buf);
        if !cwd_path.starts_with(&workspace) {
            return Err(Error::Setup {
                what: "place the working directory",
                source: io::Error::other(format!(
                    "{} is not inside the workspace {}",
                    cwd_path.display(),
                    workspace.display()
                )),
            });
        }
        self.sandboxes
            .setup(built, &workspace, &cwd_path, masks)
            .map_err(setup_err("plan the sandbox"))
    }

    /// Runs `exit 0` under every confined profile once, then the escapes; a profile whose
    /// self-test fails is marked unavailable with the error, so runs asking for it are refused
    /// (fail closed).
    fn self_test_sandboxes(&mut self) {
        let Ok(dir) = tempfile::Builder::new()
            .prefix("toolgate-selftest-")
            .tempdir()
        else {
            return;
        };
        let names: Vec<String> = self.sandboxes.config.profiles.keys().cloned().collect();
        for name in names {
            let Ok(Resolved::Confined(built)) = self.sandboxes.resolve(&name) else {
                continue;
            };
            let built = built.clone();
            let mut last_err = None;
            // Most isolation first: a capped pid_max needs Linux 6.14.
            for pid_limit in [Some(self.config.pid_limit), None] {
                self.sandbox_pid_limit = pid_limit;
                let attempt = self
                    .probe_script(&built, dir.path(), "exit 0", &Masks::default())
                    .map(|(code, _)| code == Some(0));
                match attempt {
                    Ok(true) => {
                        last_err = None;
                        break;
                    }
                    Ok(false) => last_err = Some("a sandboxed `exit 0` did not exit 0".to_owned()),
                    Err(e) => last_err = Some(e),
                }
            }
            if let Some(e) = last_err {
                self.sandbox_pid_limit = None;
                self.sandboxes
                    .mark_broken(&name, format!("a working sandbox (self-test: {e})"));
                continue;
            }
            match self.escape_checks(&built) {
                Ok(checks) => {
                    if let Some(c) = checks.iter().find(|c| c.escaped.is_some()) {
                        self.sandboxes.mark_broken(
                            &name,
                            format!(
                                "a sandbox that holds (escape self-test: {}: {})",
                                c.name,
                                c.escaped.as_deref().unwrap_or_default()
                            ),
                        );
                    }
                    self.escapes.extend(checks);
                }
                Err(e) => self
                    .sandboxes
                    .mark_broken(&name, format!("a working sandbox (escape self-test: {e})")),
            }
        }
    }
}

/// The thread every sandboxed child is cloned from.
///
/// A run's PID 1 gets `PR_SET_PDEATHSIG`, so it dies with the executor. The kernel sends that
/// signal when the *thread* that cloned it exits, not the process, and a Tokio worker thread can
/// retire while the executor lives (after `block_in_place` its core moves to a new thread). So
/// the clone happens on one plain thread that lives as long as the runner or any of its runs;
/// a call costs two thread hand-offs.
#[derive(Debug)]
struct Spawner {
    jobs: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
}

impl Spawner {
    fn start() -> io::Result<Arc<Spawner>> {
        let (jobs, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
        std::thread::Builder::new()
            .name("toolgate-spawn".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })?;
        Ok(Arc::new(Spawner { jobs }))
    }

    /// Runs `f` on the spawner thread and returns its result.
    fn call<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let gone = || io::Error::other("the spawner thread is gone");
        self.jobs
            .send(Box::new(move || {
                let _ = tx.send(f());
            }))
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())
    }
}

/// Removes the empty `toolgate-homes-<pid>-*` mount points that executors which no longer run
/// left behind (a SIGKILL skips their clean-up). They are only ever mounted on inside the
/// runs' own mount namespaces, so they are empty; a live executor's is left alone.
fn remove_stale_homes(parent: Option<&Path>) {
    let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix("toolgate-homes-"))
        else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

fn take_reader(out: Option<impl Into<OwnedFd>>, pipe_size: usize) -> io::Result<pipe::Receiver> {
    let fd: OwnedFd = out
        .ok_or_else(|| io::Error::other("pipe was not created"))?
        .into();
    if pipe_size > 0 {
        // Best effort: a bigger pipe lets the child keep writing while a chunk is being forwarded.
        // The kernel may refuse (pipe-max-size, per-user pipe quota); the default still works.
        let _ = rustix::pipe::fcntl_setpipe_size(&fd, pipe_size);
    }
    pipe::Receiver::from_owned_fd(fd)
}

fn spawn_failed(program: &str, err: &io::Error) -> Status {
    let reason = match err.kind() {
        io::ErrorKind::NotFound => format!("program not found: {program}"),
        io::ErrorKind::PermissionDenied => format!("permission denied executing {program}"),
        _ => format!("cannot start {program}: {err}"),
    };
    Status::SpawnFailed {
        reason,
        errno: err.raw_os_error().unwrap_or(0),
    }
}

/// Kills and reaps the child if supervision is abandoned (runtime dropped mid-run), so no process
/// or zombie outlives its run.
struct ReapGuard {
    pid: i32,
    reaped: bool,
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
fn signal_all(pid: i32, signal: Signal) {
    if let Some(p) = Pid::from_raw(pid) {
        let _ = rustix::process::kill_process_group(p, signal);
        let _ = rustix::process::kill_process(p, signal);
    }
}

/// Whether `pid` has a handler installed for `signal` (the `SigCgt` mask of its status).
fn catches_signal(pid: i32, signal: Signal) -> bool {
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
async fn no_children(pid: i32) {
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
fn is_zombie(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        // The state follows the parenthesised command name, which may itself contain `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

async fn flag(mut rx: watch::Receiver<bool>) {
    if rx.wait_for(|set| *set).await.is_err() {
        // The sender is gone, so the flag can never be raised.
        pending::<()>().await;
    }
}

enum Ending {
    Timeout,
    Cancel(CancelCause),
}

struct Supervisor {
    /// Kept while the run lives: the run's parent-death signal follows the spawner thread.
    _spawner: Arc<Spawner>,
    pid: i32,
    pidfd: AsyncFd<OwnedFd>,
    guard: ReapGuard,
    mechanism: KillMechanism,
    cgroup: Option<RunCgroup>,
    tx: mpsc::Sender<Event>,
    cancel: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
    timeout: Duration,
    grace: Duration,
    drain: Duration,
    final_send_timeout: Duration,
    kill_on_cap: bool,
    limits: [StreamLimits; 2],
    started: Instant,
}

impl Supervisor {
    async fn run(
        mut self,
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
        stdin: Option<(pipe::Sender, Bytes)>,
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
        let life = async {
            let outcome = self.lifecycle(&cap_hit).await;
            reaped_tx.send_replace(true);
            outcome
        };
        let ((ending, killed, reaped), stdout, stderr, ()) = tokio::join!(life, out, err, feed);

        let status = match ending {
            Some(Ending::Timeout) => Status::TimedOut {
                timeout: self.timeout,
                killed,
            },
            Some(Ending::Cancel(cause)) => Status::Cancelled(cause),
            None => match (reaped.exit_code(), reaped.signal()) {
                (Some(code), _) => Status::Exited(code),
                (None, Some((signal, core_dumped))) => Status::Signaled {
                    signal,
                    core_dumped,
                },
                (None, None) => Status::Exited(-1),
            },
        };
        let exited = Event::Exited(Exited {
            status,
            stdout,
            stderr,
            usage: Usage {
                wall_time: self.started.elapsed(),
                user_cpu: reaped.user,
                system_cpu: reaped.system,
                peak_rss_bytes: reaped.max_rss,
            },
            finished_at: SystemTime::now(),
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
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove().await;
        }
    }

    /// Waits for the child to exit, enforcing timeout and cancellation, and reaps it.
    async fn lifecycle(&mut self, cap_hit: &Notify) -> (Option<Ending>, bool, Reaped) {
        let deadline = tokio::time::Instant::from_std(self.started + self.timeout);
        let ending = tokio::select! {
            biased;
            () = exited(&self.pidfd) => None,
            () = tokio::time::sleep_until(deadline) => Some(Ending::Timeout),
            () = cap_hit.notified(), if self.kill_on_cap => Some(Ending::Cancel(CancelCause::OutputCap)),
            () = flag(self.cancel.clone()) => Some(Ending::Cancel(CancelCause::ClientCancelled)),
            () = flag(self.shutdown.clone()) => Some(Ending::Cancel(CancelCause::Shutdown)),
            () = self.tx.closed() => Some(Ending::Cancel(CancelCause::ClientDisconnected)),
        };
        let mut killed = false;
        if let Some(ending) = &ending {
            if matches!(ending, Ending::Cancel(CancelCause::OutputCap)) {
                // The point of kill_on_cap is to stop the flood now, not after a grace period.
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
                if let Some(cgroup) = &self.cgroup {
                    cgroup.signal_all(Signal::TERM);
                }
                let pid = self.pid;
                tokio::select! {
                    biased;
                    () = exited(&self.pidfd) => {}
                    () = no_children(pid), if frozen => {
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
    fn kill_everything(&self) {
        signal_all(self.pid, Signal::KILL);
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
    }
}

/// Resolves once the child has exited (its pidfd turns readable); it stays readable until reaped.
async fn exited(pidfd: &AsyncFd<OwnedFd>) {
    if pidfd.readable().await.is_err() {
        pending::<()>().await;
    }
}
