//! What the cloned child runs between the clone and `execve`. It shares the executor's memory
//! until it execs, so it runs raw syscalls on data the parent prepared and allocates nothing.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use rustix::process::Rlimit;

use super::{CgroupJoin, ChildArgs, Step};
use crate::sys::{os_err, sandbox};

const PID_MAX_PATH: &CStr = c"/proc/sys/kernel/pid_max";

/// Where the run's first process finds the write end of its state pipe.
const STATE_FD: libc::c_int = 3;

/// The first child of a sandboxed run: enter the runner's user namespace, the run's network
/// namespace and the runner's template mount namespace (copying the workspace out of it) or
/// (a session's run) the session's mount and IPC namespaces, clone the run, report its pid,
/// exit. Raw syscalls only (it shares our memory).
pub(super) extern "C" fn enter_and_clone(arg: *mut libc::c_void) -> libc::c_int {
    let args = arg.cast::<ChildArgs<'_>>();
    // SAFETY: as for `child_main`: the parent's `ChildArgs` is alive and untouched while this
    // child runs; it writes only `inner_pid` and `err`, then calls `_exit`.
    unsafe {
        let sb = (*args)
            .setup
            .sandbox
            .as_ref()
            .expect("enter_and_clone only runs for a sandbox");
        let tree_out = &raw mut (*args).tree;
        let fail = |e: io::Error| -> libc::c_int {
            std::ptr::write_volatile(
                &raw mut (*args).inner_pid,
                -e.raw_os_error().unwrap_or(libc::EINVAL),
            );
            libc::_exit(0)
        };
        // Joined here, with the executor's credentials: the run, cloned below, is born inside.
        if let Err(e) = join_cgroups(&(*args).setup.cgroups, (*args).v2_joined) {
            return fail(e);
        }
        if libc::setns(sb.userns, libc::CLONE_NEWUSER) != 0 {
            return fail(os_err());
        }
        match &sb.netns {
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
        let mut flags = libc::CLONE_VM
            | libc::CLONE_VFORK
            | libc::CLONE_PARENT
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::SIGCHLD;
        if let Some(t) = &sb.template {
            // The workspace is copied out of the template's host namespace (where this user
            // may), checked to be the directory the executor resolved, and then moved into
            // the run's copy of the template's view.
            if libc::setns(t.host, libc::CLONE_NEWNS) != 0 {
                return fail(os_err());
            }
            let tree = match sandbox::clone_tree(&t.workspace) {
                Ok(fd) => fd,
                Err(e) => return fail(e),
            };
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(tree, &mut st) != 0 {
                return fail(os_err());
            }
            if (st.st_dev, st.st_ino) != t.identity {
                return fail(io::Error::from_raw_os_error(libc::ESTALE));
            }
            if libc::setns(t.view, libc::CLONE_NEWNS) != 0 {
                return fail(os_err());
            }
            std::ptr::write_volatile(tree_out, tree);
        }
        if let Some(session) = &sb.session {
            // The run's mount namespace is then a copy of the session's, which has the
            // session's /tmp mounted for the view to bind; its IPC namespace is the session's.
            if libc::setns(session.mnt, libc::CLONE_NEWNS) != 0
                || libc::setns(session.ipc, libc::CLONE_NEWIPC) != 0
            {
                return fail(os_err());
            }
            flags &= !libc::CLONE_NEWIPC;
        }
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

/// The cloned child: shape itself and exec, or report why not and exit 127.
pub(super) extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    let args = arg.cast::<ChildArgs<'_>>();
    // SAFETY: `arg` is the parent's `ChildArgs`, alive and untouched while the child runs (the
    // parent thread is suspended by CLONE_VFORK). The child reads it, then writes `err` and
    // calls `_exit`, which is async-signal-safe.
    unsafe {
        let (err, step) = match child_setup(&*args) {
            Ok(()) => (exec_candidates(&*args), Step::Exec),
            Err(Failure { step, err }) => (err.raw_os_error().unwrap_or(libc::EINVAL), step),
        };
        std::ptr::write_volatile(&raw mut (*args).step, step);
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

/// Moves the calling process into each of the run's cgroups it was not born in (`v2_joined`:
/// the clone put it in the v2 one); from then on every descendant is born inside them.
fn join_cgroups(join: &CgroupJoin, v2_joined: bool) -> io::Result<()> {
    let v2 = join.v2_procs.as_ref().filter(|_| !v2_joined);
    // Writing "0" moves the writer: to `tasks`, this thread, which is the whole process (the
    // clone made a thread group of one).
    for fd in join.v1_tasks.iter().chain(v2) {
        // SAFETY: a write of a static byte to a descriptor the parent keeps open until the
        // child has exec'd.
        if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } < 0 {
            return Err(os_err());
        }
    }
    Ok(())
}

/// A step of the child's set-up that failed (no allocation: `io::Error` of an errno is plain
/// data).
struct Failure {
    step: Step,
    err: io::Error,
}

impl From<io::Error> for Failure {
    fn from(err: io::Error) -> Self {
        Failure {
            step: Step::Setup,
            err,
        }
    }
}

impl From<rustix::io::Errno> for Failure {
    fn from(errno: rustix::io::Errno) -> Self {
        io::Error::from(errno).into()
    }
}

/// A failure entering the working directory.
fn in_cwd(err: impl Into<io::Error>) -> Failure {
    Failure {
        step: Step::WorkingDirectory,
        err: err.into(),
    }
}

/// Runs in the cloned child before exec: signal dispositions, standard streams, cgroup, session,
/// working directory, mounts, pid_max, rlimits, no_new_privs and the descriptor sweep.
fn child_setup(args: &ChildArgs<'_>) -> Result<(), Failure> {
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
            return Err(os_err().into());
        }
    }
    // After the standard streams, whose sources may have been 3. The parent's descriptors are
    // all >= 3 (0-2 are always open), so the state pipe is not among 0-2.
    let first_closed = match &setup.state {
        Some(state) => {
            let fd = state.as_raw_fd();
            // SAFETY: fcntl/dup2 on a descriptor the parent keeps open until the child has
            // exec'd; dup2 clears close-on-exec on the copy, fcntl on the original when it
            // already is 3.
            let r = unsafe {
                if fd == STATE_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, STATE_FD)
                }
            };
            if r < 0 {
                return Err(os_err().into());
            }
            STATE_FD as u32 + 1
        }
        None => 3,
    };
    if setup.sandbox.is_none() {
        join_cgroups(&setup.cgroups, args.v2_joined)?;
    }
    // A new session: own process group, no controlling terminal (TIOCSTI has nothing to inject into).
    rustix::process::setsid()?;
    if let Some(sb) = &setup.sandbox {
        // SAFETY: written by the run's first child before it cloned this one, in the memory
        // both share with the parent.
        let tree = unsafe { std::ptr::read_volatile(&raw const args.tree) };
        sandbox::enter(sb, tree)?;
        sandbox::enter_cwd(sb).map_err(in_cwd)?;
    } else {
        // Before unsharing the mount namespace, so the copied namespace carries the cwd along.
        rustix::process::fchdir(setup.cwd.as_fd()).map_err(in_cwd)?;
    }
    if setup.mount_proc && setup.sandbox.is_none() {
        // SAFETY: unshare/mount take static C strings, flags and C strings allocated before fork;
        // the child is single-threaded.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(os_err().into());
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
                return Err(os_err().into());
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
                return Err(os_err().into());
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
                    return Err(os_err().into());
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
                return Err(os_err().into());
            }
            let n = libc::write(fd, pid_max.as_ptr().cast(), pid_max.len());
            let err = os_err();
            libc::close(fd);
            if n < 0 {
                return Err(err.into());
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
    // Only 0, 1 and 2 (and the state pipe) may survive exec. CLOEXEC rather than close: a failed
    // exec still has them.
    // SAFETY: a raw syscall with integer arguments.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first_closed,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            return Err(os_err().into());
        }
    }
    Ok(())
}
