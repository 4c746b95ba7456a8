//! The only module with `unsafe`: spawning a child (a `CLONE_VM | CLONE_VFORK` clone, optionally
//! into a fresh PID namespace) and the syscalls that shape it before exec, `wait4` (for rusage)
//! and the Landlock version query; and giving the allocator's free pages back to the OS.
//!
//! Everything here is a thin wrapper with a safe signature; the rest of the crate stays unsafe-free.
#![allow(unsafe_code)]

pub(crate) mod sandbox;

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use rustix::process::{Resource, Rlimit};

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
    /// The `cgroup.procs` file of the run's cgroup, joined before anything else happens.
    pub join_cgroup: Option<std::ffi::CString>,
    /// Mount a tmpfs at this path (the `HOME`) with these options, inside the private mount
    /// namespace (requires `mount_proc`).
    pub home_tmpfs: Option<(std::ffi::CString, std::ffi::CString)>,
    /// The run sandbox; when set, `mount_proc`, `home_tmpfs` and `cwd` are superseded by it
    /// (the child chdirs inside its own view instead).
    pub sandbox: Option<sandbox::SandboxSetup>,
}

const PID_MAX_PATH: &CStr = c"/proc/sys/kernel/pid_max";

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
const CHILD_STACK: usize = 64 << 10;

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
    /// Sandboxed runs: the top of the run's own stack, for the second clone.
    inner_stack: usize,
    /// Sandboxed runs: the run's pid, written by the first child (0 until then, -errno when the
    /// second clone failed).
    inner_pid: libc::c_int,
}

/// Spawns `exec` with `fds` as its standard streams (0, 1, 2) after applying `setup`, as PID 1
/// of a new PID namespace when `new_pid_namespace`, and returns its pid. With a sandbox the
/// child is also born in new user, mount, IPC, UTS and (unless `share_network`) network
/// namespaces.
///
/// The child is cloned with `CLONE_VM | CLONE_VFORK`, the way `posix_spawn` starts one: it
/// borrows the executor's memory until it execs, and this thread waits until then. A `fork`
/// would copy the page tables of the whole executor and write-protect every page, so every
/// thread's next write to each of its pages would fault (measured: a gRPC echo right after a
/// fork took ~100 µs longer than one right after another echo). The price is that the child may
/// only run raw syscalls on data prepared here, which is all `child_main` does.
pub(crate) fn spawn(
    exec: &Exec,
    fds: [BorrowedFd<'_>; 3],
    setup: &ChildSetup,
    new_pid_namespace: bool,
    share_network: bool,
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
        inner_stack: (base + 2 * CHILD_STACK) & !15,
        inner_pid: 0,
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
    let _ = share_network;
    // SAFETY: the signal sets are plain data filled by sigfillset and pthread_sigmask. Every
    // signal stays blocked across the clone, so no handler of the executor ever runs in the
    // child, which shares its memory; the child resets the handlers before it unblocks. The child
    // gets a stack of its own, and `args` outlives its use: with CLONE_VFORK this thread resumes
    // only once the child has exec'd or exited.
    let (pid, clone_err) = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            entry,
            top as *mut libc::c_void,
            flags,
            (&raw mut args).cast(),
        );
        let clone_err = os_err();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        (pid, clone_err)
    };
    if cfg!(debug_assertions) && pid >= 0 {
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
    if pid < 0 {
        return Err(clone_err);
    }
    // SAFETY: the child has exec'd or exited (and with a sandbox, so has the run it cloned,
    // or it failed to), so nothing writes `err` or `inner_pid` any more.
    let (err, inner) = unsafe {
        (
            std::ptr::read_volatile(&raw const args.err),
            std::ptr::read_volatile(&raw const args.inner_pid),
        )
    };
    if !sandboxed {
        if err != 0 {
            // It exited without exec'ing: reap it, so no zombie is left behind.
            let _ = wait4(pid, true);
            return Err(io::Error::from_raw_os_error(err));
        }
        return Ok(pid);
    }
    // The first child has exited: reap it. The run, if it was cloned, is our child too.
    let _ = wait4(pid, true);
    if inner <= 0 {
        return Err(io::Error::from_raw_os_error(if err != 0 {
            err
        } else {
            -inner
        }));
    }
    if err != 0 {
        let _ = wait4(inner, true);
        return Err(io::Error::from_raw_os_error(err));
    }
    Ok(inner)
}

/// The first child of a sandboxed run: enter the runner's user namespace and the run's network
/// namespace, clone the run, report its pid, exit. Raw syscalls only (it shares our memory).
extern "C" fn enter_and_clone(arg: *mut libc::c_void) -> libc::c_int {
    let args = arg.cast::<ChildArgs<'_>>();
    // SAFETY: as for `child_main`: the parent's `ChildArgs` is alive and untouched while this
    // child runs; it writes only `inner_pid` and `err`, then calls `_exit`.
    unsafe {
        let sb = (*args)
            .setup
            .sandbox
            .as_ref()
            .expect("enter_and_clone only runs for a sandbox");
        let fail = |e: io::Error| -> libc::c_int {
            std::ptr::write_volatile(
                &raw mut (*args).inner_pid,
                -e.raw_os_error().unwrap_or(libc::EINVAL),
            );
            libc::_exit(0)
        };
        if libc::setns(sb.userns, libc::CLONE_NEWUSER) != 0 {
            return fail(os_err());
        }
        match &sb.netns {
            sandbox::Netns::Host => {}
            sandbox::Netns::Enter(fd) => {
                if libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return fail(os_err());
                }
            }
            sandbox::Netns::New => {
                if libc::unshare(libc::CLONE_NEWNET) != 0 {
                    return fail(os_err());
                }
            }
        }
        let flags = libc::CLONE_VM
            | libc::CLONE_VFORK
            | libc::CLONE_PARENT
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::SIGCHLD;
        let pid = libc::clone(
            child_main,
            (*args).inner_stack as *mut libc::c_void,
            flags,
            arg,
        );
        if pid < 0 {
            return fail(os_err());
        }
        std::ptr::write_volatile(&raw mut (*args).inner_pid, pid);
        libc::_exit(0)
    }
}

/// Runs `f(arg)` in a `CLONE_VM | CLONE_VFORK | CLONE_FILES` child (so a descriptor it opens
/// is ours) and returns what it reported: a descriptor, or the errno of what failed.
fn in_helper_child(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    slot: &mut HelperSlot,
) -> io::Result<OwnedFd> {
    let mut stack: Vec<u8> = vec![0; CHILD_STACK];
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: as in `spawn`: every signal blocked across the clone, a stack of its own, and
    // `slot` outlives the child, which this thread waits for (CLONE_VFORK).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            f,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
            std::ptr::from_mut(slot).cast(),
        );
        let err = os_err();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        pid
    };
    drop(stack);
    let _ = wait4(pid, true);
    if slot.fd >= 0 {
        // SAFETY: the child opened this descriptor in our shared table and handed it over.
        Ok(unsafe { OwnedFd::from_raw_fd(slot.fd) })
    } else {
        Err(io::Error::from_raw_os_error(if slot.err > 0 {
            slot.err
        } else {
            libc::EIO
        }))
    }
}

/// What a helper child reads and reports.
pub(crate) struct HelperSlot {
    /// For a user namespace: `/proc/self/uid_map` and `gid_map` lines.
    uid_map: CString,
    gid_map: CString,
    /// For a network namespace: the user namespace to create it in.
    userns: RawFd,
    /// The descriptor opened, or -1.
    fd: RawFd,
    /// The errno of the step that failed.
    err: libc::c_int,
}

/// A user namespace owned by this process's user, mapping `uid` and `gid` to themselves, that
/// sandboxed runs enter. The executor's user has every capability in it from outside (it is
/// the owner), which is what lets the first child of each run enter it; inside, the run drops
/// every capability before it execs.
pub(crate) fn new_userns(uid: u32, gid: u32) -> io::Result<OwnedFd> {
    let line = |id: u32| CString::new(format!("{id} {id} 1")).expect("no NUL");
    let mut slot = HelperSlot {
        uid_map: line(uid),
        gid_map: line(gid),
        userns: -1,
        fd: -1,
        err: 0,
    };
    in_helper_child(make_userns, &mut slot)
}

extern "C" fn make_userns(arg: *mut libc::c_void) -> libc::c_int {
    let slot = arg.cast::<HelperSlot>();
    // SAFETY: the parent's slot, alive while this CLONE_VFORK child runs; raw syscalls only.
    unsafe {
        let r = (|| -> io::Result<RawFd> {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(os_err());
            }
            sandbox::write_file(c"/proc/self/setgroups", b"deny")?;
            sandbox::write_file(c"/proc/self/uid_map", (*slot).uid_map.as_bytes())?;
            sandbox::write_file(c"/proc/self/gid_map", (*slot).gid_map.as_bytes())?;
            let fd = libc::open(
                c"/proc/self/ns/user".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 { Err(os_err()) } else { Ok(fd) }
        })();
        report(slot, r)
    }
}

/// A network namespace with only its loopback, up, owned by `userns`.
pub(crate) fn new_netns(userns: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut slot = HelperSlot {
        uid_map: CString::default(),
        gid_map: CString::default(),
        userns: userns.as_raw_fd(),
        fd: -1,
        err: 0,
    };
    in_helper_child(make_netns, &mut slot)
}

extern "C" fn make_netns(arg: *mut libc::c_void) -> libc::c_int {
    let slot = arg.cast::<HelperSlot>();
    // SAFETY: the parent's slot, alive while this CLONE_VFORK child runs; raw syscalls only.
    unsafe {
        let r = (|| -> io::Result<RawFd> {
            if libc::setns((*slot).userns, libc::CLONE_NEWUSER) != 0
                || libc::unshare(libc::CLONE_NEWNET) != 0
            {
                return Err(os_err());
            }
            sandbox::loopback_up()?;
            let fd = libc::open(
                c"/proc/self/ns/net".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 { Err(os_err()) } else { Ok(fd) }
        })();
        report(slot, r)
    }
}

/// Writes a helper child's result and exits.
///
/// # Safety
/// `slot` must be the live slot of the parent waiting on this CLONE_VFORK child.
unsafe fn report(slot: *mut HelperSlot, r: io::Result<RawFd>) -> ! {
    // SAFETY: per the function's contract.
    unsafe {
        match r {
            Ok(fd) => std::ptr::write_volatile(&raw mut (*slot).fd, fd),
            Err(e) => std::ptr::write_volatile(
                &raw mut (*slot).err,
                e.raw_os_error().unwrap_or(libc::EINVAL),
            ),
        }
        libc::_exit(0)
    }
}

/// The cloned child: shape itself and exec, or report why not and exit 127.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    let args = arg.cast::<ChildArgs<'_>>();
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and untouched while the child runs (the
    // parent thread is suspended by CLONE_VFORK). The child reads it, then writes `err` and
    // calls `_exit`, which is async-signal-safe.
    unsafe {
        let err = match child_setup(&*args) {
            Ok(()) => exec_candidates(&*args),
            Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
        };
        std::ptr::write_volatile(&raw mut (*args).err, err.max(1));
        libc::_exit(127)
    }
}

/// Tries each candidate path the way `execvp` does: a missing one moves on, a permission error
/// is remembered, anything else stops. Returns only on failure, with the errno to report.
fn exec_candidates(args: &ChildArgs<'_>) -> libc::c_int {
    let mut err = libc::ENOENT;
    let mut denied = false;
    for path in &args.exec.candidates {
        // SAFETY: a NUL-terminated path and NULL-terminated pointer arrays built before clone.
        unsafe { libc::execve(path.as_ptr(), args.argv.as_ptr(), args.envp.as_ptr()) };
        err = os_err().raw_os_error().unwrap_or(libc::EINVAL);
        match err {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return err,
        }
    }
    if denied { libc::EACCES } else { err }
}

pub(crate) fn os_err() -> io::Error {
    io::Error::last_os_error()
}

/// Runs in the cloned child before exec: signal dispositions, standard streams, cgroup, session,
/// working directory, mounts, pid_max, rlimits, no_new_privs and the descriptor sweep.
fn child_setup(args: &ChildArgs<'_>) -> io::Result<()> {
    let setup = args.setup;
    // Every signal starts at its default disposition: no handler of the executor may run in the
    // child while it shares the executor's memory, and no ignore may outlive the exec (Rust
    // ignores SIGPIPE; a supervisor may have ignored TERM or HUP, which the kill path relies on).
    // The raw syscall also reaches the C library's internal signals, which `sigaction` refuses.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: libc::c_ulong,
        restorer: usize,
        mask: u64,
    }
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: rt_sigaction reads a struct in the kernel's layout (the same on x86_64 and aarch64)
    // with an 8-byte mask; sigprocmask on a plain-data set.
    unsafe {
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    &raw const default,
                    std::ptr::null_mut::<KernelSigaction>(),
                    8usize,
                );
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
    for (target, fd) in (0..).zip(args.fds) {
        // SAFETY: dup2 of descriptors the parent keeps open until the child has exec'd.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(os_err());
        }
    }
    if let Some(procs) = &setup.join_cgroup {
        // Writing "0" moves the writer; from here on every descendant is born inside the cgroup.
        // SAFETY: open/write/close on a path allocated before fork.
        unsafe {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(os_err());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = os_err();
            libc::close(fd);
            if n < 0 {
                return Err(err);
            }
        }
    }
    // A new session: own process group, no controlling terminal (TIOCSTI has nothing to inject into).
    rustix::process::setsid()?;
    if let Some(sb) = &setup.sandbox {
        sandbox::enter(sb)?;
    } else {
        // Before unsharing the mount namespace, so the copied namespace carries the cwd along.
        rustix::process::fchdir(setup.cwd.as_fd())?;
    }
    if setup.mount_proc && setup.sandbox.is_none() {
        // SAFETY: unshare/mount take static C strings, flags and C strings allocated before fork;
        // the child is single-threaded.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(os_err());
            }
            // Keep the new /proc from propagating back to the host's mount namespace.
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                return Err(os_err());
            }
            // A /proc of the child's own PID namespace: it cannot see (or read the environment
            // of) the executor or any other process on the host.
            if libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) != 0
            {
                return Err(os_err());
            }
            if let Some((target, options)) = &setup.home_tmpfs {
                // A private, size-capped HOME that disappears with the mount namespace.
                if libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    options.as_ptr().cast(),
                ) != 0
                {
                    return Err(os_err());
                }
            }
        }
    }
    if let Some(pid_max) = &setup.pid_max {
        // The pid_max sysctl is per PID namespace (Linux 6.14+): the namespace init caps its own
        // namespace, which bounds fork bombs even for root, where RLIMIT_NPROC is not enforced.
        // SAFETY: open/write/close on a static path and a buffer allocated before fork.
        unsafe {
            let fd = libc::open(PID_MAX_PATH.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(os_err());
            }
            let n = libc::write(fd, pid_max.as_ptr().cast(), pid_max.len());
            let err = os_err();
            libc::close(fd);
            if n < 0 {
                return Err(err);
            }
        }
    }
    for (resource, value) in &setup.rlimits {
        let inherited = rustix::process::getrlimit(*resource);
        let value = match inherited.maximum {
            Some(max) => (*value).min(max),
            None => *value,
        };
        rustix::process::setrlimit(
            *resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )?;
    }
    rustix::thread::set_no_new_privs(true)?;
    if let Some(sb) = &setup.sandbox {
        sandbox::lock(sb)?;
    }
    // Only 0, 1 and 2 may survive exec. CLOEXEC rather than close: a failed exec still has them.
    // SAFETY: a raw syscall with integer arguments.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            return Err(os_err());
        }
    }
    Ok(())
}

/// The result of reaping a child with `wait4`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reaped {
    /// The raw wait status.
    pub status: i32,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
    /// Peak RSS in bytes.
    pub max_rss: u64,
}

impl Reaped {
    /// `Some(code)` when the child exited normally.
    pub fn exit_code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }

    /// `Some((signal, core_dumped))` when a signal killed the child.
    pub fn signal(&self) -> Option<(i32, bool)> {
        libc::WIFSIGNALED(self.status)
            .then(|| (libc::WTERMSIG(self.status), libc::WCOREDUMP(self.status)))
    }
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec.max(0) as u64) + Duration::from_micros(tv.tv_usec.max(0) as u64)
}

/// Reaps `pid` with `wait4`; `Ok(None)` when `block` is false and it has not exited yet.
pub(crate) fn wait4(pid: i32, block: bool) -> io::Result<Option<Reaped>> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, fully written by the kernel on success.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let options = if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: both out-pointers point to live, properly aligned locals.
        let r = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        if r < 0 {
            let err = os_err();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if r == 0 {
            return Ok(None);
        }
        return Ok(Some(Reaped {
            status,
            user: timeval(usage.ru_utime),
            system: timeval(usage.ru_stime),
            max_rss: (usage.ru_maxrss.max(0) as u64) * 1024,
        }));
    }
}

/// The Landlock ABI version the kernel supports, 0 if none.
pub(crate) fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the syscall only returns
    // a number; it reads and writes no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 { 0 } else { r as i32 }
}

/// Which namespaces a child could create, probed by trying in a throwaway forked child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NamespaceProbe {
    pub user: bool,
    pub pid: bool,
    pub net: bool,
    pub mount: bool,
}

/// Forks a child that tries each `unshare` and reports a bit mask through its exit code; the
/// executor itself is never moved into any namespace.
pub(crate) fn probe_namespaces() -> NamespaceProbe {
    const FLAGS: [libc::c_int; 4] = [
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWNS,
        // Last: entering a user namespace changes what the others would mean.
        libc::CLONE_NEWUSER,
    ];
    let mut cmd = Command::new("/");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let hook = || {
        let mut mask = 0;
        for (bit, flag) in FLAGS.iter().enumerate() {
            // SAFETY: unshare in the single-threaded forked child; it only affects that child.
            if unsafe { libc::unshare(*flag) } == 0 {
                mask |= 1 << bit;
            }
        }
        // SAFETY: _exit is async-signal-safe and ends the child before it would exec.
        unsafe { libc::_exit(mask) }
    };
    // SAFETY: the hook only calls unshare and _exit, both async-signal-safe, and never returns.
    unsafe {
        cmd.pre_exec(hook);
    }
    let mask = match cmd.spawn().and_then(|mut c| c.wait()) {
        Ok(status) => status.code().unwrap_or(0),
        Err(_) => 0,
    };
    NamespaceProbe {
        pid: mask & 1 != 0,
        net: mask & 2 != 0,
        mount: mask & 4 != 0,
        user: mask & 8 != 0,
    }
}

/// A pidfd of the executor itself (close-on-exec), which turns readable once it has exited.
pub(crate) fn own_pidfd() -> io::Result<OwnedFd> {
    let me = rustix::process::getpid();
    Ok(rustix::process::pidfd_open(
        me,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Opens a pidfd for `pid` and registers it with the Tokio reactor; it turns readable when the
/// process exits. Must be called inside a runtime.
pub(crate) fn watch_exit(pid: i32) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    let pid = rustix::process::Pid::from_raw(pid)
        .ok_or_else(|| io::Error::other("child pid is not positive"))?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK)?;
    // SAFETY: an `OwnedFd` is a valid open descriptor that keeps returning the same number until
    // it is dropped, which is exactly the registration contract.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
            .map_err(io::Error::from)
    }
}

/// Makes a write to a closed pipe end the process quietly, as it does for every other Unix
/// command (`toolgate ... | head`). The Rust runtime ignores SIGPIPE, so such a write would
/// otherwise fail with EPIPE and `println!` would panic. Only for commands that print and
/// exit; a server keeps ignoring it and handles EPIPE as an error.
pub fn exit_quietly_on_broken_pipe() {
    // SAFETY: installs the default action (SIG_DFL), no handler code; signal(2) is
    // async-signal-safe and process-wide, so calling it with other threads running is sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Gives the allocator's free memory back to the OS (glibc's `malloc_trim`; nothing on other
/// C libraries). glibc keeps what its per-thread arenas freed, so a burst of connections would
/// otherwise leave its peak resident for good.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it walks the allocator's own free lists under
    // the allocator's locks and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
