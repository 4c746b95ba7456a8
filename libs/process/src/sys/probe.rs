//! What the kernel lets a child do, probed once: the Landlock ABI and which namespaces can be
//! created.

use std::os::unix::process::CommandExt;
use std::process::Command;

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
