//! The only module with `unsafe`: spawning a child (a `CLONE_VM | CLONE_VFORK` clone, optionally
//! into a fresh PID namespace) and the syscalls that shape it before exec, `wait4` (for rusage)
//! and the Landlock version query; and giving the allocator's free pages back to the OS.
//!
//! Everything here is a thin wrapper with a safe signature; the rest of the crate stays unsafe-free.
//!
//! The submodules inherit this module's `allow(unsafe_code)` (a lint level set on a module covers
//! its children), so none of them repeats it:
//! - `spawn`: the program prepared as C strings and the clone that starts a run (`spawn::clone3`:
//!   the `clone3` into a cgroup v2, with its assembly trampoline), and (`spawn::child`) what the
//!   cloned child does to itself before exec;
//! - `sandbox`: the child's half of the run sandbox (mounts, capabilities, Landlock, seccomp);
//! - `namespaces`: the runner's user namespace, the per-run network namespaces and a session's
//!   mount and IPC namespaces;
//! - `gate`: the original destination of a connection the egress gate's redirect accepted;
//! - `wait`: `wait4`, for the exit status and resource usage;
//! - `probe`: which namespaces a child could create, and the Landlock ABI;
//! - `pidfd`: pidfds of the executor and of a run;
//! - this file: the process-wide switches (SIGPIPE, giving free memory back).
#![allow(unsafe_code)]

mod gate;
mod namespaces;
mod pidfd;
mod probe;
pub(crate) mod sandbox;
mod spawn;
mod wait;

use std::io;

pub(crate) use gate::original_destination;
pub(crate) use namespaces::{
    mount_table_changed, new_gated_netns, new_netns, new_session_namespaces,
    new_template_namespaces, new_userns,
};
pub(crate) use pidfd::{has_exited, open_pidfd, own_pidfd, watch_exit, watch_readable};
pub(crate) use probe::{landlock_abi, probe_namespaces};
pub(crate) use spawn::{CgroupJoin, ChildSetup, Exec, StartFailed, Step, spawn};
pub(crate) use wait::{Reaped, wait4};

/// The calling thread's last OS error (`errno`).
fn os_err() -> io::Error {
    io::Error::last_os_error()
}

/// Puts the calling thread (not the whole process) under `SCHED_IDLE`: it gets only CPU time
/// no other thread wants, and waking up it never preempts one that runs. Lowering one's own
/// policy needs no privilege; a seccomp profile may still refuse it.
pub(crate) fn schedule_idle() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a pointer to a live, plain struct; pid 0 is the calling thread on Linux.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        return Err(os_err());
    }
    Ok(())
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

/// Makes glibc keep little free memory for good: fixed thresholds instead of its dynamic ones
/// (nothing on other C libraries). glibc raises both thresholds to the size of the largest
/// block a program freed, up to 32 and 64 MiB. Then the free memory at the top of a thread's
/// arena stays resident up to that size, and [`release_free_memory`] cannot hand it back:
/// `malloc_trim` trims the top of the main arena only. After eight parallel 500 KiB scripts
/// the policy service kept 22–39 MiB this way; with these thresholds, about 2 MiB.
///
/// Blocks of 256 KiB and more are mapped and unmapped on their own, and an arena keeps at
/// most 1 MiB free at its top. For a service whose calls are small; the executor, which
/// streams large buffers, keeps glibc's dynamic thresholds.
pub fn keep_little_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes the allocator's parameters under its own
    // lock; it may be called from any thread at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
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
