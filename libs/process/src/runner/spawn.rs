//! Spawning: the child each run gets (environment, sandbox plan, pipes) and the thread that
//! clones it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::Arc;

use rustix::process::Resource;
use tokio::net::unix::pipe;

use std::time::{Duration, Instant, SystemTime};

use super::{Error, Inner, find_on_path, setup_err, unavailable};
use crate::cgroup::RunCgroup;
use crate::egress::GateSockets;
use crate::event::{Exited, StreamSummary, Usage};
use crate::event::{Isolation, KillMechanism, Status};
use crate::limits::{EnforcedLimits, ResourceLimits};
use crate::sandbox::{Built, Masks, Resolved};
use crate::session::SessionNamespaces;
use crate::spec::Command;
use crate::sys::sandbox::SandboxSetup;
use crate::sys::{self, ChildSetup};

/// What a child's standard stream is connected to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Io {
    /// `/dev/null`.
    Null,
    /// A fresh pipe; the executor keeps the other end.
    Pipe,
}

/// A child ready to be spawned: what it executes and what it does to itself first.
pub(super) struct Prepared {
    pub(super) exec: sys::Exec,
    pub(super) setup: ChildSetup,
}

/// A spawned child: its pid and the executor's ends of its pipes.
pub(super) struct Spawned {
    pub(super) pid: i32,
    pub(super) stdin: Option<OwnedFd>,
    pub(super) stdout: Option<OwnedFd>,
    pub(super) stderr: Option<OwnedFd>,
    /// A sandboxed run's mount namespace, held so that it is torn down when this is dropped
    /// (off the run's exit path) rather than by the run's last exiting process: emptying a
    /// mount namespace waits for an RCU grace period, which would delay the run's exit status.
    /// `None` when the run was already gone when it was opened.
    pub(super) mount_ns: Option<OwnedFd>,
}

/// A child being spawned (see [`Inner::launch`]).
pub(super) enum Launch {
    /// Cloned on the calling thread, or failed before any clone.
    Ready(io::Result<Spawned>),
    /// Being cloned on the spawner thread.
    OnSpawner(tokio::sync::oneshot::Receiver<io::Result<Spawned>>),
}

impl Launch {
    /// The spawned child, awaited without holding the thread.
    pub(super) async fn spawned(self) -> io::Result<Spawned> {
        match self {
            Launch::Ready(spawned) => spawned,
            Launch::OnSpawner(rx) => rx.await.unwrap_or_else(|_| Err(spawner_gone())),
        }
    }
}

/// The sandbox a run gets, decided before anything about its child is.
pub(super) struct Confinement<'a> {
    /// The child's half of the sandbox and the profile it was built from; `None` unconfined.
    pub(super) sandbox: Option<(SandboxSetup, &'a Built)>,
    /// The profile's name.
    pub(super) profile: String,
    /// A networked profile's egress gate sockets, handed to the executor's hook.
    pub(super) gate: Option<GateSockets>,
    /// Whether the run enters its session's namespaces.
    pub(super) session: bool,
}

/// Everything decided about a run's child before it is spawned.
pub(super) struct ChildPlan {
    /// The child, or why it cannot be prepared (reported as the run's `SpawnFailed`).
    pub(super) prepared: io::Result<Prepared>,
    /// What its stdin is connected to.
    pub(super) stdin: Io,
    /// The read end of the state pipe ([`RunSpec::capture_state`](crate::RunSpec)).
    pub(super) state: Option<OwnedFd>,
    /// The private HOME of an unconfined run, removed when the run ends.
    pub(super) home: Option<tempfile::TempDir>,
    /// The run's own cgroup, when it gets one.
    pub(super) cgroup: Option<RunCgroup>,
    /// What the run is isolated by, its enforced limits included.
    pub(super) isolation: Isolation,
}

impl Inner {
    /// The profile `profile` names (empty: the default) as this run's sandbox, or why the run
    /// cannot have it; and the refusal of a run the configuration requires limits for when the
    /// host enforces none.
    pub(super) fn confine<'a>(
        &'a self,
        profile: &'a str,
        cwd: &OwnedFd,
        masks: &Masks,
        has_egress: bool,
        session: Option<&SessionNamespaces>,
    ) -> Result<Confinement<'a>, Error> {
        let mut gate = None;
        let (sandbox, profile) = match self.sandboxes.resolve(profile) {
            Ok(Resolved::Confined(built)) => {
                // Fail closed: nothing would serve a networked run's only way out.
                if built.profile.network && !has_egress {
                    return Err(Error::SandboxUnavailable {
                        profile: built.name.clone(),
                        missing: "its runs are networked and need the executor's egress gate, \
                                  which this run was not given"
                            .to_owned(),
                    });
                }
                let (setup, sockets) = self.sandbox_setup(built, cwd, masks, None, session)?;
                gate = sockets;
                (Some((setup, built)), built.name.clone())
            }
            Ok(Resolved::Unconfined(name)) => (None, name.to_owned()),
            Err((profile, why)) => return Err(unavailable(profile, why)),
        };
        if self.config.require_limits
            && let Err(missing) = &self.hierarchy
        {
            return Err(Error::LimitsUnavailable {
                missing: missing.clone(),
            });
        }
        Ok(Confinement {
            sandbox,
            profile,
            gate,
            session: session.is_some(),
        })
    }

    /// The program a command executes and its arguments (a script runs under `bash`).
    pub(super) fn program<'a>(&'a self, command: &'a Command) -> (&'a str, Vec<&'a str>) {
        match command {
            Command::Argv(argv) => (&argv[0], argv[1..].iter().map(String::as_str).collect()),
            Command::Script(script) => (
                self.bash.to_str().unwrap_or("bash"),
                vec!["--noprofile", "--norc", "-c", script.as_str()],
            ),
        }
    }

    /// The child of a run in `confinement`: its HOME, cgroup, limits and isolation, and the
    /// prepared clone (whose failure is the run's `SpawnFailed`, not an error here).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn plan_child(
        &self,
        command: &Command,
        cwd: OwnedFd,
        env: &[(String, String)],
        stdin: bool,
        confinement: Confinement<'_>,
        timeout: Duration,
        capture_state: bool,
    ) -> Result<ChildPlan, Error> {
        let Confinement {
            sandbox,
            profile,
            session,
            ..
        } = confinement;
        let built = sandbox.as_ref().map(|(_, b)| *b);
        let resources = self.profile_limits(&profile).apply(self.config.limits);
        let home = if sandbox.is_some() {
            None
        } else {
            self.private_home()?
        };
        let home_path = match (&sandbox, &home, &self.home_mount) {
            (Some(_), _, _) => self.sandboxes.config.home.clone(),
            (None, Some(dir), _) => dir.path().to_path_buf(),
            (None, None, Some(mount)) => mount.clone(),
            (None, None, None) => std::env::temp_dir(),
        };
        let (program, args) = self.program(command);
        let mut cgroup = self.run_cgroup(Some(&resources), sandbox.is_some())?;
        let enforced = self.enforced(&resources, built, timeout, cgroup.is_some());
        let mut isolation = self.isolation(built, &profile, built.is_some() && session);
        isolation.limits = enforced;
        let mut prepared = self.prepare(
            program,
            &args,
            env,
            &home_path,
            cwd,
            cgroup.as_mut(),
            enforced.cpu_seconds,
            sandbox.map(|(setup, _)| setup),
        );
        // Only the child gets the write end: it is dropped with `prepared` once the child has
        // been spawned, so the reader sees EOF when the run's last holder is gone.
        let state = if capture_state {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| setup_err("create the state pipe")(e.into()))?;
            if let Ok(p) = &mut prepared {
                p.setup.state = Some(write);
            }
            Some(read)
        } else {
            None
        };
        Ok(ChildPlan {
            prepared,
            stdin: if stdin { Io::Pipe } else { Io::Null },
            state,
            home,
            cgroup,
            isolation,
        })
    }

    /// The child for `program` and `args`: a cleared environment with the allowlist and `env`
    /// added (an addition replaces a fixed entry of the same name), and its setup.
    // One argument per part of a child; bundling them would only move the list elsewhere.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prepare(
        &self,
        program: &str,
        args: &[&str],
        env: &[(String, String)],
        home: &Path,
        cwd: OwnedFd,
        cgroup: Option<&mut RunCgroup>,
        cpu_seconds: Option<u64>,
        sandbox: Option<SandboxSetup>,
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
            (Resource::Cpu, cpu_seconds),
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
                        "size={},nr_inodes={},mode=0700",
                        self.config.home_tmpfs_bytes, self.sandboxes.config.tmpfs_inodes
                    ))
                    .ok()?;
                    Some((target, options))
                }),
            cgroups: cgroup.map(|c| c.join()).transpose()?.unwrap_or_default(),
            sandbox,
            state: None,
        };
        Ok(Prepared { exec, setup })
    }

    /// A per-run HOME directory on disk, unless runs get a tmpfs HOME.
    pub(super) fn private_home(&self) -> Result<Option<tempfile::TempDir>, Error> {
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

    /// A fresh cgroup for one run: with `resources` as its limits where the host delegates a
    /// hierarchy, and (unsandboxed runs without a PID namespace) the one `cgroup.kill` ends.
    pub(super) fn run_cgroup(
        &self,
        resources: Option<&ResourceLimits>,
        sandboxed: bool,
    ) -> Result<Option<RunCgroup>, Error> {
        let kill_parent = match (&self.plan.mechanism, &self.plan.cgroup_parent) {
            (KillMechanism::Cgroup, Some(parent)) if !sandboxed => Some(parent),
            _ => None,
        };
        let limited = match (resources, &self.hierarchy) {
            (Some(r), Ok(spares)) => Some(
                spares
                    .take(r, sandboxed)
                    .map_err(setup_err("create the run's limits cgroup"))?,
            ),
            _ => None,
        };
        match (limited, kill_parent) {
            (Some(cg), Some(parent)) => cg
                .with_kill_dir(parent)
                .map(Some)
                .map_err(setup_err("create the run's cgroup")),
            (Some(cg), None) => Ok(Some(cg)),
            (None, Some(parent)) => RunCgroup::create(parent)
                .map(Some)
                .map_err(setup_err("create the run's cgroup")),
            (None, None) => Ok(None),
        }
    }

    /// Spawns `prepared` with its standard streams connected as `io` (stdin, stdout, stderr),
    /// holding the calling thread until the child has exec'd. A sandboxed child is cloned on the
    /// runner's spawner thread (see [`Spawner`]). For the probes and the benchmarks' baseline;
    /// runs go through [`Inner::launch`], which does not hold a runtime worker.
    pub(super) fn spawn(&self, prepared: Prepared, io: [Io; 3]) -> io::Result<Spawned> {
        let (sandboxed, clone) = self.cloner(prepared, io)?;
        if sandboxed {
            self.spawner.call(clone)?
        } else {
            clone()
        }
    }

    /// Starts spawning `prepared` with its standard streams connected as `io`. An unsandboxed
    /// child is cloned on the calling thread, which the `CLONE_VFORK` clone holds only until
    /// the child execs. A sandboxed child is cloned on the spawner thread, and its clone lasts
    /// as long as the sandbox's set-up (a millisecond or more): the caller gets a
    /// [`Launch::OnSpawner`] to await instead of waiting on its thread, so a runtime worker
    /// keeps serving other calls meanwhile.
    pub(super) fn launch(&self, prepared: Prepared, io: [Io; 3]) -> Launch {
        let (sandboxed, clone) = match self.cloner(prepared, io) {
            Ok(c) => c,
            Err(e) => return Launch::Ready(Err(e)),
        };
        if !sandboxed {
            return Launch::Ready(clone());
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.spawner.submit(Box::new(move || {
            if let Err(Ok(orphan)) = tx.send(clone()) {
                // Nobody waits for the run any more (its task ended with the runtime): it
                // must not run unsupervised.
                drop(super::supervisor::ReapGuard {
                    pid: orphan.pid,
                    reaped: false,
                });
            }
        }));
        match sent {
            Ok(()) => Launch::OnSpawner(rx),
            Err(e) => Launch::Ready(Err(e)),
        }
    }

    /// The pipes of `io` and the clone of `prepared` with them, which returns the spawned
    /// child; and whether it must run on the spawner thread (a sandboxed child).
    fn cloner(
        &self,
        prepared: Prepared,
        io: [Io; 3],
    ) -> io::Result<(bool, impl FnOnce() -> io::Result<Spawned> + Send + 'static)> {
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
            let pid = sys::spawn(&prepared.exec, fds, &prepared.setup, new_pid_namespace)?;
            let [stdin, stdout, stderr] = ours;
            // Our unreaped child: its pid cannot have been reused.
            let mount_ns = sandboxed
                .then(|| File::open(format!("/proc/{pid}/ns/mnt")).ok())
                .flatten()
                .map(OwnedFd::from);
            Ok(Spawned {
                pid,
                stdin,
                stdout,
                stderr,
                mount_ns,
            })
        };
        Ok((sandboxed, clone))
    }

    /// Spawns `true` with the current plan and checks it exits 0.
    pub(super) fn probe_spawn(&self) -> bool {
        let Some(program) = find_on_path(&self.config.path, "true") else {
            return false;
        };
        let Ok(cwd) = File::open("/") else {
            return false;
        };
        let program = program.to_string_lossy().into_owned();
        let home = self.home_mount.clone().unwrap_or_else(std::env::temp_dir);
        let Ok(mut cgroup) = self.run_cgroup(None, false) else {
            return false;
        };
        self.prepare(
            &program,
            &[],
            &[],
            &home,
            cwd.into(),
            cgroup.as_mut(),
            None,
            None,
        )
        .and_then(|p| self.spawn(p, [Io::Null; 3]))
        .and_then(|child| sys::wait4(child.pid, true))
        .is_ok_and(|r| r.and_then(|r| r.exit_code()) == Some(0))
    }

    /// What a run gets: under `built`'s sandbox (in its session's namespaces when `session`),
    /// or unconfined (the operator's choice; a session changes nothing then).
    pub(super) fn isolation(
        &self,
        built: Option<&Built>,
        profile: &str,
        session: bool,
    ) -> Isolation {
        if let Some(b) = built {
            // A networked run's namespace is gated: its only way out is the executor's gate.
            let mut namespaces = vec!["user", "pid", "mount", "ipc", "uts", "net"];
            if session {
                namespaces.push("session");
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
                limits: EnforcedLimits::NONE,
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
            limits: EnforcedLimits::NONE,
        }
    }

    /// The child's sandbox plan for a run starting in `cwd`, in `session`'s namespaces when
    /// it has one.
    pub(super) fn sandbox_setup(
        &self,
        built: &Built,
        cwd: &OwnedFd,
        masks: &Masks,
        workspace: Option<&Path>,
        session: Option<&SessionNamespaces>,
    ) -> Result<(SandboxSetup, Option<GateSockets>), Error> {
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
            .setup(built, &workspace, &cwd_path, masks, session)
            .map_err(setup_err("plan the sandbox"))
    }

    /// Runs `exit 0` under every confined profile once, then the escapes; a profile whose
    /// self-test fails is marked unavailable with the error, so runs asking for it are refused
    /// (fail closed).
    pub(super) fn self_test_sandboxes(&mut self) {
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
                    .map(|(code, _, _)| code == Some(0));
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
pub(super) struct Spawner {
    pub(super) jobs: std::sync::mpsc::Sender<Box<dyn FnOnce() + Send>>,
}

impl Spawner {
    pub(super) fn start() -> io::Result<Arc<Spawner>> {
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

    /// Runs `f` on the spawner thread and returns its result, holding this thread meanwhile.
    pub(super) fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(Box::new(move || {
            let _ = tx.send(f());
        }))?;
        rx.recv().map_err(|_| spawner_gone())
    }

    /// Queues `job` on the spawner thread and returns at once.
    pub(super) fn submit(&self, job: Box<dyn FnOnce() + Send>) -> io::Result<()> {
        self.jobs.send(job).map_err(|_| spawner_gone())
    }
}

fn spawner_gone() -> io::Error {
    io::Error::other("the spawner thread is gone")
}

/// Removes the empty `toolgate-homes-<pid>-*` and `toolgate-sessions-<pid>-*` mount points that
/// executors which no longer run left behind (a SIGKILL skips their clean-up). They are only
/// ever mounted on inside the runs' (or sessions') own mount namespaces, so they are empty; a
/// live executor's are left alone.
pub(super) fn remove_stale_homes(parent: Option<&Path>) {
    let parent = parent.map_or_else(std::env::temp_dir, Path::to_path_buf);
    let Ok(entries) = std::fs::read_dir(&parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| {
            n.strip_prefix("toolgate-homes-")
                .or_else(|| n.strip_prefix(crate::session::SESSION_DIR_PREFIX))
        }) else {
            continue;
        };
        let owner = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

pub(super) fn take_reader(
    out: Option<impl Into<OwnedFd>>,
    pipe_size: usize,
) -> io::Result<pipe::Receiver> {
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

/// Where `dir` was, when it has been removed since it was opened (no link to it is left).
pub(super) fn removed_directory(dir: &OwnedFd) -> Option<String> {
    let stat = rustix::fs::fstat(dir).ok()?;
    if stat.st_nlink != 0 {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok();
    Some(path.map_or_else(
        || "(unknown)".to_owned(),
        |p| {
            let p = p.display().to_string();
            p.strip_suffix(" (deleted)").map(str::to_owned).unwrap_or(p)
        },
    ))
}

/// The only event of a run whose child could not be spawned.
pub(super) fn not_started(program: &str, err: &io::Error, started: Instant) -> Exited {
    Exited {
        status: spawn_failed(program, err),
        stdout: StreamSummary::default(),
        stderr: StreamSummary::default(),
        usage: Usage {
            wall_time: started.elapsed(),
            ..Usage::default()
        },
        finished_at: SystemTime::now(),
        audit: None,
        limit: None,
        state: None,
    }
}

pub(super) fn spawn_failed(program: &str, err: &io::Error) -> Status {
    // The child failed before its exec: the program was never looked at.
    if let Some(failed) = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<sys::StartFailed>())
    {
        let os = io::Error::from_raw_os_error(failed.errno);
        let reason = match failed.step {
            sys::Step::WorkingDirectory => format!(
                "cannot start {program}: its working directory is gone or cannot be entered \
                 ({os}); run it in a directory that exists"
            ),
            _ => format!("cannot start {program}: {failed}"),
        };
        return Status::SpawnFailed {
            reason,
            errno: failed.errno,
        };
    }
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
