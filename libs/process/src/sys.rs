//! The only module with `unsafe`: the syscalls that shape a child between fork and exec, spawning
//! into a fresh PID namespace, `wait4` (for rusage) and the Landlock version query.
//!
//! Everything here is a thin wrapper with a safe signature; the rest of the crate stays unsafe-free.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use rustix::process::{Resource, Rlimit};

/// What the child does to itself after fork, before exec.
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
}

const PID_MAX_PATH: &CStr = c"/proc/sys/kernel/pid_max";

/// Registers the pre-exec hook that applies `setup` in the child.
pub(crate) fn install_child_setup(cmd: &mut Command, setup: ChildSetup) {
    let hook = move || child_setup(&setup);
    // SAFETY: `pre_exec` runs the hook in the forked child of a possibly multi-threaded parent,
    // where only async-signal-safe operations are allowed. `child_setup` performs raw syscalls on
    // data prepared before fork (no allocation, no locks) and reports failure through an OS error
    // code, which `io::Error::from_raw_os_error` builds without allocating.
    unsafe {
        cmd.pre_exec(hook);
    }
}

fn os_err() -> io::Error {
    io::Error::last_os_error()
}

fn child_setup(setup: &ChildSetup) -> io::Result<()> {
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
    // Before unsharing the mount namespace, so the copied namespace carries the cwd along.
    rustix::process::fchdir(setup.cwd.as_fd())?;
    if setup.mount_proc {
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
    // Only 0, 1 and 2 may survive exec. CLOEXEC (not close) keeps std's exec-error pipe working.
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

/// Spawns `cmd` so that the child is PID 1 of a new PID namespace.
///
/// `unshare(CLONE_NEWPID)` only changes the namespace this thread's *future* children are born
/// into; it is undone with `setns` into `own_pid_ns` right after the fork, so the thread is left
/// exactly as it was.
pub(crate) fn spawn_in_new_pid_namespace(
    cmd: &mut Command,
    own_pid_ns: BorrowedFd<'_>,
) -> io::Result<Child> {
    // SAFETY: `unshare_unsafe` is unsafe because CLONE_FILES could split the fd table between
    // threads; CLONE_NEWPID touches nothing but the pid namespace of this thread's children.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWPID)? };
    let spawned = cmd.spawn();
    let restored = rustix::thread::move_into_link_name_space(
        own_pid_ns,
        Some(rustix::thread::LinkNameSpaceType::ProcessID),
    );
    match (spawned, restored) {
        (spawned, Ok(())) => spawned,
        (Ok(mut child), Err(e)) => {
            // The child is PID 1 of its namespace: killing it kills the namespace.
            let _ = child.kill();
            let _ = child.wait();
            Err(e.into())
        }
        (Err(_), Err(e)) => Err(e.into()),
    }
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
