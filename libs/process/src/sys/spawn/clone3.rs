//! `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7+): the child is born in a cgroup v2 directory
//! instead of moving itself there with a write to `cgroup.procs`, which would take the kernel's
//! global `cgroup_threadgroup_rwsem` for write. The C library has no wrapper that starts the
//! child on a stack of its own and calls a function there, so a few lines of assembly do it
//! (x86_64 and aarch64; other targets keep the write).

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// `CLONE_INTO_CGROUP` from the kernel's `<linux/sched.h>` (a 64-bit flag, clone3 only).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`, 88 bytes): the
/// version that carries `cgroup`.
#[repr(C)]
#[derive(Debug, Default)]
pub(super) struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The entry point the child calls on its new stack; it exits with the returned value.
pub(super) type Entry = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// Set once the kernel (or a seccomp filter of the executor's container) refused `clone3`:
/// every later spawn writes `cgroup.procs` instead, without asking again.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether `clone3` into a cgroup is worth trying on this target and kernel.
pub(super) fn usable() -> bool {
    cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) && !REFUSED.load(Ordering::Relaxed)
}

impl CloneArgs {
    /// Arguments for a child born in the cgroup v2 directory `cgroup`, on the stack
    /// `[stack, stack + stack_size)`, with `clone_flags` in the `clone(2)` form (the exit
    /// signal in the low byte).
    pub(super) fn into_cgroup(
        clone_flags: libc::c_int,
        cgroup: RawFd,
        stack: usize,
        stack_size: usize,
    ) -> CloneArgs {
        let signal_mask = libc::CSIGNAL as u64;
        let flags = u64::from(clone_flags.cast_unsigned());
        CloneArgs {
            flags: (flags & !signal_mask) | CLONE_INTO_CGROUP,
            exit_signal: flags & signal_mask,
            stack: stack as u64,
            stack_size: stack_size as u64,
            cgroup: u64::from(cgroup.cast_unsigned()),
            ..CloneArgs::default()
        }
    }
}

/// Whether `err` from `clone3` means this kernel or its seccomp filter refuses the call (or
/// `CLONE_INTO_CGROUP`), so the caller should start the child the older way. Remembered, and
/// said once on the log: the older way (the child writes `cgroup.procs` before it does
/// anything else) is of equal strength, only slower.
pub(super) fn refused(err: &io::Error) -> bool {
    let refused = matches!(
        err.raw_os_error(),
        Some(libc::ENOSYS | libc::E2BIG | libc::EOPNOTSUPP | libc::EPERM)
    );
    if refused && !REFUSED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            error = %err,
            "clone3 with CLONE_INTO_CGROUP is refused here: runs join their cgroup v2 by writing \
             cgroup.procs before they run anything instead (the same containment, at the cost \
             of the kernel's global cgroup lock on every run start)"
        );
    }
    refused
}

/// Starts a child with `args` that calls `entry(arg)` on its new stack and exits with the
/// result; returns the child's pid.
///
/// # Safety
///
/// As for `libc::clone`: `args` names a stack that is the child's alone and stays allocated
/// while the child runs on it, and `entry` may run with `arg` in the child (with `CLONE_VM`,
/// in this process's memory, so it must not return into or unwind through anything of the
/// caller's).
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone3(
    args: &CloneArgs,
    entry: Entry,
    arg: *mut libc::c_void,
) -> io::Result<libc::c_int> {
    let ret: libc::c_long;
    // SAFETY: the caller's contract. The parent takes the branch to 2 with rax = the pid or
    // -errno; `syscall` clobbers rcx and r11 only, so r12 and r13 still hold `entry` and `arg`
    // in the child, which starts on its new (16-byte aligned) stack with rax = 0, calls
    // `entry` and exits with its result without ever returning here.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") std::ptr::from_ref(args),
            in("rsi") size_of::<CloneArgs>(),
            in("r12") entry,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    result(ret)
}

/// See the x86_64 version.
///
/// # Safety
///
/// As for the x86_64 version.
#[cfg(target_arch = "aarch64")]
pub(super) unsafe fn clone3(
    args: &CloneArgs,
    entry: Entry,
    arg: *mut libc::c_void,
) -> io::Result<libc::c_int> {
    let ret: libc::c_long;
    // SAFETY: as for x86_64: `svc` preserves every register but x0, so the child finds
    // `entry` in x9 and `arg` in x10 on its new stack, calls `entry` and exits with its result
    // (x0) without ever returning here.
    unsafe {
        std::arch::asm!(
            "svc 0",
            "cbnz x0, 2f",
            "mov x0, x10",
            "blr x9",
            "mov x8, {exit}",
            "svc 0",
            "brk 0",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("x0") std::ptr::from_ref(args) => ret,
            in("x1") size_of::<CloneArgs>(),
            in("x8") libc::SYS_clone3,
            in("x9") entry,
            in("x10") arg,
        );
    }
    result(ret)
}

/// Other targets: never called (`usable` is false).
///
/// # Safety
///
/// None needed; it always fails.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(super) unsafe fn clone3(
    _args: &CloneArgs,
    _entry: Entry,
    _arg: *mut libc::c_void,
) -> io::Result<libc::c_int> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// The pid, or the error of a raw syscall's return value.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn result(ret: libc::c_long) -> io::Result<libc::c_int> {
    if ret < 0 {
        let errno = libc::c_int::try_from(-ret).unwrap_or(libc::EINVAL);
        return Err(io::Error::from_raw_os_error(errno));
    }
    libc::c_int::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_args_has_the_kernels_layout() {
        assert_eq!(size_of::<CloneArgs>(), 88, "CLONE_ARGS_SIZE_VER2");
        assert_eq!(std::mem::offset_of!(CloneArgs, cgroup), 80);
        assert_eq!(std::mem::offset_of!(CloneArgs, exit_signal), 32);
        assert_eq!(std::mem::offset_of!(CloneArgs, stack), 40);
        assert_eq!(std::mem::offset_of!(CloneArgs, stack_size), 48);
    }

    #[test]
    fn the_exit_signal_moves_out_of_the_flags() {
        let a = CloneArgs::into_cgroup(
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            7,
            0x1000,
            0x2000,
        );
        assert_eq!(
            a.flags,
            (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP
        );
        assert_eq!(a.exit_signal, libc::SIGCHLD as u64);
        assert_eq!((a.cgroup, a.stack, a.stack_size), (7, 0x1000, 0x2000));
    }
}
