//! The namespaces sandboxed runs enter: the runner's user namespace and each run's network
//! namespace, made ahead of time in short-lived helper children so the executor itself never
//! moves into any namespace.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::egress::GateSockets;
use crate::sandbox::netlink::{Batch, GatedPlan};

use super::spawn::CHILD_STACK;
use super::{os_err, sandbox, wait4};

/// Runs `f(arg)` in a `CLONE_VM | CLONE_VFORK | CLONE_FILES` child (so a descriptor it opens
/// is ours) and returns what it reported: a descriptor, or the errno of what failed.
fn in_helper_child(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    slot: &mut HelperSlot,
) -> io::Result<OwnedFd> {
    clone_helper(f, std::ptr::from_mut(slot).cast())?;
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

/// Clones `f(arg)` as a `CLONE_VM | CLONE_VFORK | CLONE_FILES` child and waits for it. `arg`
/// must point at a slot that outlives the call; the child reports through it.
fn clone_helper(
    f: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<()> {
    let mut stack: Vec<u8> = vec![0; CHILD_STACK];
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: as in `spawn`: every signal blocked across the clone, a stack of its own, and
    // the slot behind `arg` outlives the child, which this thread waits for (CLONE_VFORK).
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let pid = libc::clone(
            f,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FILES | libc::SIGCHLD,
            arg,
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
    Ok(())
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

/// What a helper child that makes namespaces step by step reports when a step fails: the
/// errno and which step, so the parent's error names it.
#[derive(Debug, Default)]
struct StepError {
    err: libc::c_int,
    step: &'static str,
}

impl StepError {
    /// In the helper child: records that `step` failed with `e`, and exits.
    ///
    /// # Safety
    /// `this` must point into the live slot of the parent waiting on this CLONE_VFORK child.
    unsafe fn record(this: *mut StepError, step: &'static str, e: &io::Error) -> ! {
        // SAFETY: per the function's contract.
        unsafe {
            std::ptr::write_volatile(&raw mut (*this).step, step);
            std::ptr::write_volatile(
                &raw mut (*this).err,
                e.raw_os_error().unwrap_or(libc::EINVAL),
            );
            libc::_exit(0)
        }
    }

    /// Whether no step failed.
    fn is_none(&self) -> bool {
        self.err == 0
    }

    /// In the parent: the failure, named by its step (`EIO` when the child reported nothing
    /// but did not hand over what it should have).
    fn error(&self) -> io::Error {
        let e = io::Error::from_raw_os_error(if self.err > 0 { self.err } else { libc::EIO });
        io::Error::new(e.kind(), format!("{}: {e}", self.step))
    }
}

/// What a gated namespace's helper child reads and reports.
struct GatedSlot<'a> {
    userns: RawFd,
    plan: &'a GatedPlan,
    /// Where acknowledgements are received (allocated before the clone).
    recv: &'a mut [u8],
    /// The namespace, `tcp4`, `tcp6`, `dns4`, `dns6`; -1 for none. Written as each is
    /// opened, so the parent owns (and closes) them whatever fails later.
    fds: [RawFd; 5],
    /// Which step failed, and why.
    failed: StepError,
}

/// A network namespace owned by `userns` whose only way out is the egress gate: loopback up
/// with an extra address, every destination routed through `lo`, the nftables ruleset of
/// `plan` and MPTCP off; with the gate's sockets made inside it.
pub(crate) fn new_gated_netns(
    userns: BorrowedFd<'_>,
    plan: &GatedPlan,
) -> io::Result<(OwnedFd, GateSockets)> {
    let mut recv = vec![0u8; 16 << 10];
    let mut slot = GatedSlot {
        userns: userns.as_raw_fd(),
        plan,
        recv: &mut recv,
        fds: [-1; 5],
        failed: StepError::default(),
    };
    clone_helper(make_gated_netns, std::ptr::from_mut(&mut slot).cast())?;
    // SAFETY: every descriptor >= 0 was opened by the child in our shared table and is ours.
    let [ns, tcp4, tcp6, dns4, dns6] = slot
        .fds
        .map(|fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }));
    match (ns, tcp4, dns4) {
        (Some(ns), Some(tcp4), Some(dns4)) if slot.failed.is_none() => Ok((
            ns,
            GateSockets {
                tcp4,
                tcp6,
                dns4,
                dns6,
            },
        )),
        _ => Err(slot.failed.error()),
    }
}

extern "C" fn make_gated_netns(arg: *mut libc::c_void) -> libc::c_int {
    let slot = arg.cast::<GatedSlot<'_>>();
    // SAFETY: the parent's slot, alive while this CLONE_VFORK child runs; raw syscalls only,
    // on buffers the parent allocated.
    unsafe {
        let fail = |step: &'static str, e: io::Error| -> ! {
            StepError::record(&raw mut (*slot).failed, step, &e)
        };
        let keep = |i: usize, fd: RawFd| std::ptr::write_volatile(&raw mut (*slot).fds[i], fd);
        let plan = (*slot).plan;
        if libc::setns((*slot).userns, libc::CLONE_NEWUSER) != 0 {
            fail("enter the runner's user namespace", os_err());
        }
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            fail("create a network namespace", os_err());
        }
        let ns = libc::open(
            c"/proc/self/ns/net".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if ns < 0 {
            fail("open the network namespace", os_err());
        }
        keep(0, ns);
        if let Err(e) = sandbox::loopback_up() {
            fail("bring up lo", e);
        }
        if let Err(e) = exchange(libc::NETLINK_ROUTE, &plan.routes_v4, (*slot).recv) {
            fail("add the IPv4 address and route", e);
        }
        // Without IPv6 in this kernel the run simply has none.
        let v6 = exchange(libc::NETLINK_ROUTE, &plan.routes_v6, (*slot).recv).is_ok();
        // Belt and braces: seccomp already refuses MPTCP sockets in every confined run, and a
        // container's /proc/sys may be read-only (or the kernel has no MPTCP), so a refusal
        // here does not fail the namespace.
        let _ = sandbox::write_file(c"/proc/sys/net/mptcp/enabled", b"0");
        if let Err(e) = exchange(libc::NETLINK_NETFILTER, &plan.nft, (*slot).recv) {
            fail("program nftables", e);
        }
        match bound(libc::AF_INET, libc::SOCK_STREAM, plan.gate_port) {
            Ok(fd) => keep(1, fd),
            Err(e) => fail("listen on the gate's IPv4 port", e),
        }
        match bound(libc::AF_INET, libc::SOCK_DGRAM, 53) {
            Ok(fd) => keep(3, fd),
            Err(e) => fail("bind the DNS stub's IPv4 port", e),
        }
        if v6 {
            if let Ok(fd) = bound(libc::AF_INET6, libc::SOCK_STREAM, plan.gate_port) {
                keep(2, fd);
            }
            if let Ok(fd) = bound(libc::AF_INET6, libc::SOCK_DGRAM, 53) {
                keep(4, fd);
            }
        }
        libc::_exit(0)
    }
}

/// A non-blocking, close-on-exec socket of `kind` bound to loopback's `port` (IPv6: only
/// IPv6), listening when it is TCP.
fn bound(family: libc::c_int, kind: libc::c_int, port: u16) -> io::Result<RawFd> {
    let one: libc::c_int = 1;
    let int_len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: socket/setsockopt/bind/listen/close on a descriptor this function owns, with
    // sockaddr structs of the family's layout and their exact sizes.
    unsafe {
        let fd = libc::socket(family, kind | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(os_err());
        }
        let r = (|| {
            let on = std::ptr::from_ref(&one).cast();
            if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, on, int_len) != 0 {
                return Err(os_err());
            }
            let r = if family == libc::AF_INET6 {
                if libc::setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, on, int_len) != 0 {
                    return Err(os_err());
                }
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sa.sin6_port = port.to_be();
                sa.sin6_addr.s6_addr = std::net::Ipv6Addr::LOCALHOST.octets();
                libc::bind(
                    fd,
                    std::ptr::from_ref(&sa).cast(),
                    std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
                )
            } else {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_port = port.to_be();
                sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
                libc::bind(
                    fd,
                    std::ptr::from_ref(&sa).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                )
            };
            if r != 0 || (kind == libc::SOCK_STREAM && libc::listen(fd, 1024) != 0) {
                return Err(os_err());
            }
            Ok(())
        })();
        match r {
            Ok(()) => Ok(fd),
            Err(e) => {
                libc::close(fd);
                Err(e)
            }
        }
    }
}

/// Sends `batch` on a new netlink socket of `protocol` and reads until every message that
/// asked for one is acknowledged; the first error any of them reports fails the exchange.
/// No allocation: `buf` receives the replies.
fn exchange(protocol: libc::c_int, batch: &Batch, buf: &mut [u8]) -> io::Result<()> {
    // SAFETY: socket/setsockopt/send/recv/close on a descriptor this function owns and on
    // live buffers of the lengths given; the replies are read with unaligned loads, within
    // `n` bytes.
    unsafe {
        let s = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            protocol,
        );
        if s < 0 {
            return Err(os_err());
        }
        let r = (|| {
            // A kernel that never answers must not hang the runner's thread.
            let tv = libc::timeval {
                tv_sec: 5,
                tv_usec: 0,
            };
            if libc::setsockopt(
                s,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::from_ref(&tv).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            ) != 0
            {
                return Err(os_err());
            }
            let sent = libc::send(s, batch.bytes.as_ptr().cast(), batch.bytes.len(), 0);
            if sent < 0 {
                return Err(os_err());
            }
            if sent as usize != batch.bytes.len() {
                return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
            }
            let mut acked = 0;
            while acked < batch.acks {
                let n = libc::recv(s, buf.as_mut_ptr().cast(), buf.len(), 0);
                if n < 0 {
                    return Err(os_err());
                }
                let n = n as usize;
                let mut at = 0;
                while at + 20 <= n {
                    let len = std::ptr::read_unaligned(buf.as_ptr().add(at).cast::<u32>()) as usize;
                    let kind = std::ptr::read_unaligned(buf.as_ptr().add(at + 4).cast::<u16>());
                    if len < 16 {
                        break;
                    }
                    if kind == libc::NLMSG_ERROR as u16 {
                        let errno =
                            std::ptr::read_unaligned(buf.as_ptr().add(at + 16).cast::<i32>());
                        if errno != 0 {
                            return Err(io::Error::from_raw_os_error(-errno));
                        }
                        acked += 1;
                    }
                    at += (len + 3) & !3;
                }
            }
            Ok(())
        })();
        libc::close(s);
        r
    }
}

/// What a session's helper child reads and reports.
struct SessionSlot<'a> {
    userns: RawFd,
    /// The empty host directory the session's `/tmp` is mounted on, and the tmpfs options.
    dir: &'a std::ffi::CStr,
    options: &'a std::ffi::CStr,
    /// The mount and IPC namespaces; -1 until opened. Written as each is opened, so the
    /// parent owns (and closes) them whatever fails later.
    fds: [RawFd; 2],
    /// Which step failed, and why.
    failed: StepError,
}

/// A session's mount and IPC namespaces, owned by `userns`: a copy of the host's mount
/// namespace, all private, with a tmpfs of `options` on `dir` (the session's `/tmp`, which
/// each of its runs binds into its view), and a fresh IPC namespace.
pub(crate) fn new_session_namespaces(
    userns: BorrowedFd<'_>,
    dir: &std::ffi::CStr,
    options: &std::ffi::CStr,
) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut slot = SessionSlot {
        userns: userns.as_raw_fd(),
        dir,
        options,
        fds: [-1; 2],
        failed: StepError::default(),
    };
    clone_helper(make_session, std::ptr::from_mut(&mut slot).cast())?;
    // SAFETY: every descriptor >= 0 was opened by the child in our shared table and is ours.
    let [mnt, ipc] = slot
        .fds
        .map(|fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }));
    match (mnt, ipc) {
        (Some(mnt), Some(ipc)) if slot.failed.is_none() => Ok((mnt, ipc)),
        _ => Err(slot.failed.error()),
    }
}

extern "C" fn make_session(arg: *mut libc::c_void) -> libc::c_int {
    let slot = arg.cast::<SessionSlot<'_>>();
    // SAFETY: the parent's slot, alive while this CLONE_VFORK child runs; raw syscalls only,
    // on C strings the parent owns.
    unsafe {
        let fail = |step: &'static str, e: io::Error| -> ! {
            StepError::record(&raw mut (*slot).failed, step, &e)
        };
        let keep = |i: usize, fd: RawFd| std::ptr::write_volatile(&raw mut (*slot).fds[i], fd);
        if libc::setns((*slot).userns, libc::CLONE_NEWUSER) != 0 {
            fail("enter the runner's user namespace", os_err());
        }
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWIPC) != 0 {
            fail("create the session's mount and IPC namespaces", os_err());
        }
        // Nothing mounted here propagates back to the host (or from it).
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail("make the session's mounts private", os_err());
        }
        if libc::mount(
            c"tmpfs".as_ptr(),
            (*slot).dir.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            (*slot).options.as_ptr().cast(),
        ) != 0
        {
            fail("mount the session's /tmp", os_err());
        }
        for (i, path) in [c"/proc/self/ns/mnt", c"/proc/self/ns/ipc"]
            .into_iter()
            .enumerate()
        {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                fail("open the session's namespaces", os_err());
            }
            keep(i, fd);
        }
        libc::_exit(0)
    }
}

/// What a template's helper child reads and reports.
struct TemplateSlot<'a> {
    userns: RawFd,
    /// Where the view's root is staged before the pivot, and the steps that build it.
    stage: &'a std::ffi::CStr,
    ops: &'a [sandbox::MountOp],
    /// The host copy's and the view's mount namespaces, and the helper's `/proc/self/ns`
    /// (the view has no `/proc` to open the second from); -1 until opened. Written as each is
    /// opened, so the parent owns (and closes) them whatever fails later.
    fds: [RawFd; 3],
    /// Which step failed, and why.
    failed: StepError,
}

/// A runner's template mount namespaces, owned by `userns`: a private copy of the host's
/// (where runs copy their workspace from), and one whose root is the view `ops` build from an
/// empty root staged on `stage` (where runs clone their own from).
pub(crate) fn new_template_namespaces(
    userns: BorrowedFd<'_>,
    stage: &std::ffi::CStr,
    ops: &[sandbox::MountOp],
) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut slot = TemplateSlot {
        userns: userns.as_raw_fd(),
        stage,
        ops,
        fds: [-1; 3],
        failed: StepError::default(),
    };
    clone_helper(make_template, std::ptr::from_mut(&mut slot).cast())?;
    // SAFETY: every descriptor >= 0 was opened by the child in our shared table and is ours.
    let [host, view, _dir] = slot
        .fds
        .map(|fd| (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) }));
    match (host, view) {
        (Some(host), Some(view)) if slot.failed.is_none() => Ok((host, view)),
        _ => Err(slot.failed.error()),
    }
}

extern "C" fn make_template(arg: *mut libc::c_void) -> libc::c_int {
    let slot = arg.cast::<TemplateSlot<'_>>();
    // SAFETY: the parent's slot, alive while this CLONE_VFORK child runs; raw syscalls only,
    // on data the parent prepared.
    unsafe {
        let fds = &raw mut (*slot).fds;
        let fail = |step: &'static str, e: io::Error| -> ! {
            StepError::record(&raw mut (*slot).failed, step, &e)
        };
        let ns_dir = libc::open(
            c"/proc/self/ns".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if ns_dir < 0 {
            fail("open the helper's namespaces", os_err());
        }
        std::ptr::write_volatile(&raw mut (*fds)[2], ns_dir);
        let keep = |i: usize| {
            let fd = libc::openat(ns_dir, c"mnt".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                fail("open the template's namespaces", os_err());
            }
            std::ptr::write_volatile(&raw mut (*fds)[i], fd);
        };
        if libc::setns((*slot).userns, libc::CLONE_NEWUSER) != 0 {
            fail("enter the runner's user namespace", os_err());
        }
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            fail("copy the host's mount namespace", os_err());
        }
        // Nothing mounted here propagates back to the host (or from it).
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            fail("make the host copy's mounts private", os_err());
        }
        keep(0);
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            fail("create the view's mount namespace", os_err());
        }
        if let Err(e) = sandbox::build_view((*slot).stage, (*slot).ops, -1) {
            fail("build the template view", e);
        }
        keep(1);
        libc::_exit(0)
    }
}

/// Whether the mount table `mountinfo` (an open `/proc/<pid>/mountinfo`) shows changed since
/// it was opened or last asked; `true` when that cannot be told.
pub(crate) fn mount_table_changed(mountinfo: BorrowedFd<'_>) -> bool {
    let mut pfd = libc::pollfd {
        fd: mountinfo.as_raw_fd(),
        events: libc::POLLPRI,
        revents: 0,
    };
    // SAFETY: poll on one stack pollfd, without waiting.
    match unsafe { libc::poll(&mut pfd, 1, 0) } {
        0 => false,
        n if n > 0 => pfd.revents & (libc::POLLPRI | libc::POLLERR) != 0,
        _ => true,
    }
}
