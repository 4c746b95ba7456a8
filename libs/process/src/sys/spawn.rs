//! Starting a run: the program, arguments and environment prepared as C strings, and the
//! `CLONE_VM | CLONE_VFORK` clone (two of them for a sandboxed run) that starts it, the first
//! one a `clone3` into the run's cgroup v2 when it has one (submodule `clone3`). What the cloned child
//! runs is in `child`.

mod child;
mod clone3;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::process::Resource;

use super::{os_err, sandbox, wait4};
use child::{child_main, enter_and_clone};

/// What the child does to itself after the clone, before exec.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// The working directory to `fchdir` into.
    pub cwd: OwnedFd,
    /// Unshare a mount namespace and mount a private `/proc` (needs a PID namespace to be useful).
    pub mount_proc: bool,
    /// `pid_max` of the child's PID namespace, as decimal ASCII.
    pub pid_max: Option<Vec<u8>>,
    /// `setrlimit` values, soft = hard (clamped to the inherited hard limit).
    pub rlimits: Vec<(Resource, u64)>,
    /// The run's cgroups, joined before anything else happens: by a sandboxed run's first
    /// child before it enters the run's user namespace, else by the child itself.
    pub cgroups: CgroupJoin,
    /// Mount a tmpfs at this path (the `HOME`) with these options, inside the private mount
    /// namespace (requires `mount_proc`).
    pub home_tmpfs: Option<(std::ffi::CString, std::ffi::CString)>,
    /// The run sandbox; when set, `mount_proc`, `home_tmpfs` and `cwd` are superseded by it
    /// (the child chdirs inside its own view instead).
    pub sandbox: Option<sandbox::SandboxSetup>,
    /// The write end of the state pipe, which the child gets as fd 3 (the only descriptor
    /// beyond 0-2 that survives its exec).
    pub state: Option<OwnedFd>,
}

/// The descriptors a child joins its run's cgroups with, opened (close-on-exec) when the
/// cgroups were made, so the child only writes `0` to each: no path lookup on the way to the
/// run. The kernel checks the permission of a cgroup write against the credentials that
/// opened the file, the executor's.
#[derive(Debug, Default)]
pub(crate) struct CgroupJoin {
    /// Each v1 hierarchy's `tasks` file: writing `0` moves the calling thread, which is the
    /// whole process (see `RunCgroup`).
    pub v1_tasks: Vec<OwnedFd>,
    /// The v2 cgroup's directory: the child is cloned into it (`CLONE_INTO_CGROUP`) where
    /// the kernel allows; a process is in one v2 cgroup at most.
    pub v2_dir: Option<OwnedFd>,
    /// The v2 cgroup's `cgroup.procs`, written instead where `clone3` is refused.
    pub v2_procs: Option<OwnedFd>,
}

/// What a child executes, as C strings prepared before the clone (the child allocates nothing).
#[derive(Debug)]
pub(crate) struct Exec {
    /// The paths to try with `execve`, in order: the program itself when it names a path, else
    /// each `PATH` entry joined with it (the `execvp` search, done by the parent).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl Exec {
    /// `program` with `args`, in exactly the environment `env` (`NAME`, value); a later entry
    /// replaces an earlier one of the same name. A program without a `/` is looked up on the
    /// `PATH` of that environment. A NUL byte anywhere is `InvalidInput`.
    pub(crate) fn new<'a>(
        program: &str,
        args: &[&str],
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> io::Result<Exec> {
        let env: BTreeMap<&str, &str> = env.into_iter().collect();
        let c = |s: String| {
            CString::new(s).map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a NUL byte in the program, an argument or an environment entry",
                )
            })
        };
        let candidates = if program.contains('/') {
            vec![c(program.to_owned())?]
        } else if program.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        } else {
            env.get("PATH")
                .copied()
                .unwrap_or_default()
                .split(':')
                .map(|dir| match dir.trim_end_matches('/') {
                    "" if dir.is_empty() => c(format!("./{program}")),
                    dir => c(format!("{dir}/{program}")),
                })
                .collect::<io::Result<_>>()?
        };
        let argv = std::iter::once(program)
            .chain(args.iter().copied())
            .map(|a| c(a.to_owned()))
            .collect::<io::Result<_>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| c(format!("{k}={v}")))
            .collect::<io::Result<_>>()?;
        Ok(Exec {
            candidates,
            argv,
            envp,
        })
    }
}

/// Stack of the cloned child: it runs a few raw syscalls and `execve`, nothing deeper. It has
/// no guard page, so debug builds check after every spawn that the child used less than half.
pub(super) const CHILD_STACK: usize = 64 << 10;

/// What a debug build fills the child's stack with, to find how deep the child went.
const STACK_FILL: u8 = 0xa5;

/// Everything `child_main` reads, owned by the parent's frame, and the slot it reports in.
struct ChildArgs<'a> {
    exec: &'a Exec,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    fds: [RawFd; 3],
    setup: &'a ChildSetup,
    /// The errno of the step that failed, written by the child just before it exits.
    err: libc::c_int,
    /// Which step `err` is of, written with it.
    step: Step,
    /// Sandboxed runs: the top of the run's own stack, for the second clone.
    inner_stack: usize,
    /// Sandboxed runs: the run's pid, written by the first child (0 until then, -errno when the
    /// second clone failed).
    inner_pid: libc::c_int,
    /// Sandboxed runs from the template: the detached copy of the workspace, written by the
    /// first child for the run (-1: none).
    tree: RawFd,
    /// Whether the first child was cloned into the run's cgroup v2 (it then joins only the
    /// v1 hierarchies itself).
    v2_joined: bool,
}

/// Spawns `exec` with `fds` as its standard streams (0, 1, 2) after applying `setup`, as PID 1
/// of a new PID namespace when `new_pid_namespace`, and returns its pid. With a sandbox the
/// child is also born in new user, mount, IPC and UTS namespaces, and enters its network
/// namespace (its own, plain or gated).
///
/// The child is cloned with `CLONE_VM | CLONE_VFORK`, the way `posix_spawn` starts one: it
/// borrows the executor's memory until it execs, and this thread waits until then. A `fork`
/// would copy the page tables of the whole executor and write-protect every page, so every
/// thread's next write to each of its pages would fault (measured: a gRPC echo right after a
/// fork took ~100 µs longer than one right after another echo). The price is that the child may
/// only run raw syscalls on data prepared here, which is all `child_main` does.
///
/// A run with a cgroup v2 is cloned into it (`clone3` with `CLONE_INTO_CGROUP`); where the
/// kernel refuses that, the child writes the cgroup's `cgroup.procs` first thing instead.
pub(crate) fn spawn(
    exec: &Exec,
    fds: [BorrowedFd<'_>; 3],
    setup: &ChildSetup,
    new_pid_namespace: bool,
) -> io::Result<i32> {
    let terminated = |v: &[CString]| {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect::<Vec<_>>()
    };
    let (argv, envp) = (terminated(&exec.argv), terminated(&exec.envp));
    let sandboxed = setup.sandbox.is_some();
    let stacks = if sandboxed { 2 } else { 1 };
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK * stacks);
    if cfg!(debug_assertions) {
        stack.resize(CHILD_STACK * stacks, STACK_FILL);
    }
    // The stacks grow down on every target this builds for; each top is 16-byte aligned.
    let base = stack.as_mut_ptr() as usize;
    let top = (base + CHILD_STACK) & !15;
    let mut args = ChildArgs {
        exec,
        argv: &argv,
        envp: &envp,
        fds: fds.map(|fd| fd.as_raw_fd()),
        setup,
        err: 0,
        step: Step::Exec,
        inner_stack: (base + 2 * CHILD_STACK) & !15,
        inner_pid: 0,
        tree: -1,
        v2_joined: false,
    };
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    if new_pid_namespace && !sandboxed {
        flags |= libc::CLONE_NEWPID;
    }
    // A sandboxed run is started in two steps: the first child enters the runner's user
    // namespace (and the run's network namespace), then clones the run itself into new PID,
    // mount, IPC and UTS namespaces as a child of the executor (CLONE_PARENT), and exits once
    // the run has exec'd. Entering prepared namespaces instead of creating them in the clone
    // saves the network namespace's creation (~0.4 ms) on every run start.
    let entry: extern "C" fn(*mut libc::c_void) -> libc::c_int = if sandboxed {
        enter_and_clone
    } else {
        child_main
    };
    // A run with a cgroup v2 is born in it (`clone3` with `CLONE_INTO_CGROUP`): no write to
    // `cgroup.procs`, whose global lock waits for every fork in flight on the machine.
    let into_cgroup = setup
        .cgroups
        .v2_dir
        .as_ref()
        .filter(|_| clone3::usable())
        .map(|dir| clone3::CloneArgs::into_cgroup(flags, dir.as_raw_fd(), base, top - base));
    // SAFETY: the signal sets are plain data filled by sigfillset and pthread_sigmask. Every
    // signal stays blocked across the clone, so no handler of the executor ever runs in the
    // child, which shares its memory; the child resets the handlers before it unblocks. The child
    // gets a stack of its own, and `args` outlives its use: with CLONE_VFORK this thread resumes
    // only once the child has exec'd or exited.
    let cloned = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut cloned = None;
        if let Some(clone_args) = &into_cgroup {
            // Read by the child: set before it exists.
            args.v2_joined = true;
            match clone3::clone3(clone_args, entry, (&raw mut args).cast()) {
                Err(e) if clone3::refused(&e) => args.v2_joined = false,
                other => cloned = Some(other),
            }
        }
        let cloned = cloned.unwrap_or_else(|| {
            let pid = libc::clone(
                entry,
                top as *mut libc::c_void,
                flags,
                (&raw mut args).cast(),
            );
            if pid < 0 { Err(os_err()) } else { Ok(pid) }
        });
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        cloned
    };
    if cfg!(debug_assertions) && cloned.is_ok() {
        for (i, chunk) in stack.chunks(CHILD_STACK).enumerate() {
            let untouched = chunk.iter().take_while(|b| **b == STACK_FILL).count();
            assert!(
                untouched >= CHILD_STACK / 2,
                "spawned child {i} used {} of its {CHILD_STACK} stack bytes",
                CHILD_STACK - untouched
            );
        }
    }
    drop(stack);
    let pid = cloned?;
    // SAFETY: the child has exec'd or exited (and with a sandbox, so has the run it cloned,
    // or it failed to), so nothing writes `err` or `inner_pid` any more.
    let (err, step, inner) = unsafe {
        (
            std::ptr::read_volatile(&raw const args.err),
            std::ptr::read_volatile(&raw const args.step),
            std::ptr::read_volatile(&raw const args.inner_pid),
        )
    };
    if !sandboxed {
        if err != 0 {
            // It exited without exec'ing: reap it, so no zombie is left behind.
            let _ = wait4(pid, true);
            return Err(failed(step, err));
        }
        return Ok(pid);
    }
    // The first child has exited: reap it. The run, if it was cloned, is our child too.
    let _ = wait4(pid, true);
    if inner <= 0 {
        return Err(if err != 0 {
            failed(step, err)
        } else {
            // The first child's own steps: namespaces, cgroups, the workspace's copy.
            failed(Step::Setup, -inner)
        });
    }
    if err != 0 {
        let _ = wait4(inner, true);
        return Err(failed(step, err));
    }
    Ok(inner)
}

/// The step of a child's start that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub(crate) enum Step {
    /// `execve` of the program (or of every candidate on `PATH`).
    Exec,
    /// Entering the working directory.
    WorkingDirectory,
    /// Everything else before the exec: descriptors, cgroups, namespaces, the view, limits,
    /// capabilities, Landlock, seccomp.
    Setup,
}

/// A child that failed before it could exec its program; an `io::Error` of the errno's kind
/// carries it, so the run's report does not mistake it for a missing program.
#[derive(Debug)]
pub(crate) struct StartFailed {
    /// Where it failed.
    pub step: Step,
    /// The errno.
    pub errno: i32,
}

impl std::fmt::Display for StartFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.step {
            Step::Exec => "executing the program",
            Step::WorkingDirectory => "entering the working directory",
            Step::Setup => "setting up the run's isolation",
        };
        write!(f, "{what}: {}", io::Error::from_raw_os_error(self.errno))
    }
}

impl std::error::Error for StartFailed {}

/// The error of a child that failed at `step` with `errno`: the plain OS error for the exec
/// (what `std::process::Command` reports), else one that names the step.
fn failed(step: Step, errno: i32) -> io::Error {
    let os = io::Error::from_raw_os_error(errno);
    match step {
        Step::Exec => os,
        step => io::Error::new(os.kind(), StartFailed { step, errno }),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::cgroup::RunCgroup;

    /// A fresh cgroup v2 under this process's own and the cgroup2 mount point, where the host
    /// lets this process make one (root, a writable cgroup2 mount).
    fn v2_cgroup() -> Option<(RunCgroup, PathBuf)> {
        let support = crate::caps::probe_cgroup();
        let mount = support.mount_point.filter(|_| support.writable)?;
        let own = crate::cgroup::own_cgroup_dir(&mount)?;
        Some((RunCgroup::create(&own).ok()?, mount))
    }

    /// The `0::` line of a `/proc/<pid>/cgroup` text.
    fn v2_line(text: &str) -> Option<&str> {
        text.lines().find_map(|l| l.strip_prefix("0::"))
    }

    /// Spawns `cat /proc/self/cgroup` with `cgroups` and returns what it printed.
    fn cat_own_cgroup(cgroups: CgroupJoin) -> io::Result<String> {
        let exec = Exec::new("/bin/cat", &["/proc/self/cgroup"], [])?;
        let setup = ChildSetup {
            cwd: File::open("/")?.into(),
            mount_proc: false,
            pid_max: None,
            rlimits: Vec::new(),
            cgroups,
            home_tmpfs: None,
            sandbox: None,
            state: None,
        };
        let null = File::open("/dev/null")?;
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let pid = spawn(
            &exec,
            [null.as_fd(), write.as_fd(), null.as_fd()],
            &setup,
            false,
        );
        drop(write);
        let pid = pid?;
        let mut out = String::new();
        File::from(read).read_to_string(&mut out)?;
        let reaped = wait4(pid, true)?;
        assert_eq!(reaped.and_then(|r| r.exit_code()), Some(0), "{out}");
        Ok(out)
    }

    #[test]
    fn a_child_is_born_in_its_cgroup_v2() {
        let Some((cgroup, mount)) = v2_cgroup() else {
            eprintln!("no writable cgroup v2 here; nothing to test");
            return;
        };
        let mut join = cgroup.join().expect("copies of the join descriptors");
        let dir = join.v2_dir.as_ref().expect("a v2 directory").as_raw_fd();
        let dir = std::fs::read_link(format!("/proc/self/fd/{dir}")).expect("its path");
        let expected = Path::new("/").join(dir.strip_prefix(&mount).expect("under the mount"));
        let ours = std::fs::read_to_string("/proc/self/cgroup").expect("our cgroups");
        // The write that would join it is made to fail (a read-only descriptor): the child can
        // only be in the cgroup if the clone put it there, before its first instruction.
        join.v2_procs = Some(
            File::open(dir.join("cgroup.procs"))
                .expect("cgroup.procs")
                .into(),
        );
        let born = match cat_own_cgroup(join) {
            Err(e) if !clone3::usable() => {
                eprintln!("clone3 into a cgroup is refused here ({e}); nothing to test");
                return;
            }
            other => other.expect("spawned into the cgroup"),
        };
        assert_eq!(
            v2_line(&born).map(Path::new),
            Some(expected.as_path()),
            "{born}"
        );
        let after = std::fs::read_to_string("/proc/self/cgroup").expect("our cgroups");
        assert_eq!(v2_line(&after), v2_line(&ours), "the parent never joined");
        assert_ne!(v2_line(&ours).map(Path::new), Some(expected.as_path()));

        // The way a kernel that refuses clone3 joins: the child writes `cgroup.procs`.
        let fallback = CgroupJoin {
            v2_procs: Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .expect("cgroup.procs")
                    .into(),
            ),
            ..CgroupJoin::default()
        };
        let joined = cat_own_cgroup(fallback).expect("spawned");
        assert_eq!(
            v2_line(&joined).map(Path::new),
            Some(expected.as_path()),
            "{joined}"
        );
        drop(cgroup);
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
