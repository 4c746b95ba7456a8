//! The namespaces sandboxed runs enter: the runner's user namespace and each run's network
//! namespace, made ahead of time in short-lived helper children so the executor itself never
//! moves into any namespace.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::spawn::CHILD_STACK;
use super::{os_err, sandbox, wait4};

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
struct HelperSlot {
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
