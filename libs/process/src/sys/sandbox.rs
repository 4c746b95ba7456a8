//! The child's half of the run sandbox: raw syscalls on data `crate::sandbox` prepared before
//! the clone. The child shares the executor's memory until it execs (`CLONE_VM | CLONE_VFORK`),
//! so nothing here allocates, locks or touches the executor's state.
//!
//! Order matters and is the same for every run:
//! 1. die with the executor (`PR_SET_PDEATHSIG`), checked against the executor's pidfd for the
//!    race where it died before the prctl;
//! 2. (done by the run's first child in `super::spawn`) enter the runner's user namespace, which
//!    maps the executor's uid and gid to themselves and makes the rest work unprivileged, and
//!    the run's network namespace;
//! 3. build the view: a tmpfs root, pivot into it, bind what the profile allows, mount a private
//!    `/proc`, `/dev`, `/tmp` and `HOME`, mask denied paths, bind protected ones read-only,
//!    detach the old root and make the new root read-only. A run of the runner's template
//!    (`crate::sandbox::template`, built by the same steps once) starts in a copy of that view
//!    instead, and adds only its own `/tmp`, `/dev/shm`, `HOME`, `/proc`, the workspace its first
//!    child copied from the template's host namespace, and the masks;
//! 4. loopback up in the run's own network namespace;
//! 5. after the caller's rlimits and `no_new_privs`: drop every capability, then Landlock, then
//!    seccomp (last, because it forbids the mounts above).

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use super::os_err;

/// `mount_setattr` flags (linux/mount.h).
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// One step of building the run's view, executed in order inside the new root.
#[derive(Debug, Clone)]
pub(crate) enum MountOp {
    /// `mkdir` with this mode; an existing entry is fine.
    Dir(CString, libc::mode_t),
    /// An empty regular file to mount over; an existing entry is fine.
    File(CString),
    /// A new read-only regular file holding `data` (a redacted copy to bind over a workspace
    /// file); it must not exist yet.
    Content {
        /// Where the file is created, in the new root.
        path: CString,
        /// Its content, written whole.
        data: std::sync::Arc<[u8]>,
    },
    /// A symlink, as the host has it (merged-`/usr` systems link `/bin` and `/lib`).
    Symlink {
        /// What the link points to.
        target: CString,
        /// Where the link is created.
        path: CString,
    },
    /// A recursive bind of `src` (a host path under `/oldroot`, or a path in the new root) on
    /// `dst`, then `attrs` (`MOUNT_ATTR_*`) on the whole subtree.
    Bind {
        /// What is bound.
        src: CString,
        /// Where it appears.
        dst: CString,
        /// Attributes set recursively after the bind (0 for none).
        attrs: u64,
    },
    /// A fresh tmpfs with these options.
    Tmpfs {
        /// Mount point.
        dst: CString,
        /// `size=...,mode=...`.
        options: CString,
    },
    /// A `proc` of the run's own PID namespace.
    Proc(CString),
    /// The run's workspace, a detached copy of the host's tree its first child made (see
    /// [`TemplateEnter`]), moved onto `dst`, then `attrs` on the whole subtree.
    Attach {
        /// Where it appears.
        dst: CString,
        /// Attributes set recursively after the move.
        attrs: u64,
    },
    /// `MOUNT_ATTR_RDONLY | NOSUID | NODEV` on the mount at this path alone (not its children),
    /// once nothing more is created in it.
    Seal(CString),
}

/// The Landlock ruleset, built and enforced by the child (paths are in the new view, where the
/// per-run tmpfs mounts exist; the executor cannot name their inodes in advance).
#[derive(Debug, Clone, Default)]
pub(crate) struct LandlockRules {
    /// `handled_access_fs`.
    pub handled_fs: u64,
    /// `handled_access_net`; 0 when the network namespace alone confines the run.
    pub handled_net: u64,
    /// `scoped` (ABI 6): abstract unix sockets and signals stay inside the run.
    pub scoped: u64,
    /// `(directory, allowed access)`; every directory must exist in the view.
    pub paths: Vec<(CString, u64)>,
    /// `(tcp port, allowed access)`.
    pub ports: Vec<(u64, u64)>,
}

/// `struct sock_filter`: one instruction of a seccomp-bpf program (`sandbox::bpf` compiles
/// them; the kernel's layout, so it is defined where the program is installed).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SockFilter {
    /// The opcode.
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// The operand.
    pub k: u32,
}

/// A compiled seccomp-bpf program.
#[derive(Clone)]
pub(crate) struct Bpf(pub std::sync::Arc<[SockFilter]>);

impl std::fmt::Debug for Bpf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bpf({} instructions)", self.0.len())
    }
}

/// Which network namespace a run gets.
#[derive(Debug)]
pub(crate) enum Netns {
    /// A prepared one (from the runner's pools): only its loopback, up, or gated for a
    /// networked run; closed here once the run holds it.
    Enter(std::os::fd::OwnedFd),
    /// A new one, created by the run's first child (the pool was empty).
    New,
}

/// The session namespaces a run's first child enters before it clones the run (see
/// [`crate::session`]).
#[derive(Debug)]
pub(crate) struct SessionEnter {
    /// The session's mount namespace (the run's own is cloned from it).
    pub mnt: RawFd,
    /// The session's IPC namespace (the run shares it).
    pub ipc: RawFd,
    /// Keeps both descriptors open until the run has been cloned.
    pub _session: crate::session::SessionNamespaces,
}

/// The runner's template namespaces a run's first child enters instead of a session's (see
/// `crate::sandbox::template`): it copies the workspace out of `host`, then clones the run's
/// mount namespace from `view`, whose root already is the fixed part of every view.
#[derive(Debug)]
pub(crate) struct TemplateEnter {
    /// A copy of the host's mount namespace owned by the runner's user namespace, where the
    /// workspace is copied from (`open_tree`).
    pub host: RawFd,
    /// The prepared view.
    pub view: RawFd,
    /// The workspace's host path.
    pub workspace: CString,
    /// The workspace's `(st_dev, st_ino)` as the executor sees it: the copy must be the same
    /// directory, or the run is refused.
    pub identity: (u64, u64),
    /// Keeps both descriptors open until the run has been cloned.
    pub _template: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

/// Everything the child needs to build its sandbox, prepared before the clone.
#[derive(Debug)]
pub(crate) struct SandboxSetup {
    /// The runner's user namespace, entered by the run's first child.
    pub userns: RawFd,
    /// The run's network namespace.
    pub netns: Netns,
    /// The session whose mount and IPC namespaces the run enters, if it has one.
    pub session: Option<SessionEnter>,
    /// The runner's template the run's view is cloned from; `None`: the view is built whole
    /// (`ops` then start from an empty root with the host at `/oldroot`).
    pub template: Option<TemplateEnter>,
    /// A host directory the new root's tmpfs is mounted on before the pivot.
    pub stage: CString,
    /// The steps that build the view, after the pivot (`/oldroot` is the host).
    pub ops: Vec<MountOp>,
    /// The working directory inside the view.
    pub cwd: CString,
    /// Bring up `lo` (the run got a new network namespace of its own).
    pub loopback: bool,
    /// Enforced after `no_new_privs`.
    pub landlock: Option<LandlockRules>,
    /// Installed last, in order.
    pub seccomp: Vec<Bpf>,
    /// The executor's pidfd (readable once the executor has exited).
    pub executor: RawFd,
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r < 0 { Err(os_err()) } else { Ok(()) }
}

fn check_long(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 { Err(os_err()) } else { Ok(r) }
}

/// Writes `data` to `path` in one `write`.
pub(crate) fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(os_err());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = os_err();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

fn mount(
    src: Option<&std::ffi::CStr>,
    dst: &std::ffi::CStr,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> io::Result<()> {
    let p = |c: Option<&std::ffi::CStr>| c.map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is NUL-terminated or null, as mount(2) accepts.
    check(unsafe {
        libc::mount(
            p(src),
            dst.as_ptr(),
            p(fstype),
            flags,
            p(data).cast::<libc::c_void>(),
        )
    })
}

/// `mount_setattr` on `path`, recursively when `recursive`.
fn set_attrs(path: &std::ffi::CStr, attrs: u64, recursive: bool) -> io::Result<()> {
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a NUL-terminated path and a struct in the kernel's layout with its size.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

fn ignore_exists(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        other => other,
    }
}

impl MountOp {
    /// Runs this step; `tree` is the detached workspace an `Attach` moves (-1: none).
    fn apply(&self, tree: RawFd) -> io::Result<()> {
        match self {
            MountOp::Dir(path, mode) => {
                // SAFETY: a NUL-terminated path.
                ignore_exists(check(unsafe { libc::mkdir(path.as_ptr(), *mode) }))
            }
            MountOp::File(path) => {
                // SAFETY: open/close on a NUL-terminated path.
                ignore_exists(unsafe {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o444,
                    );
                    if fd < 0 {
                        Err(os_err())
                    } else {
                        libc::close(fd);
                        Ok(())
                    }
                })
            }
            MountOp::Content { path, data } => {
                // SAFETY: open/write/close on a NUL-terminated path and a live buffer; the
                // loop advances by what each write took.
                unsafe {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o444,
                    );
                    if fd < 0 {
                        return Err(os_err());
                    }
                    let mut rest: &[u8] = data;
                    while !rest.is_empty() {
                        let n = libc::write(fd, rest.as_ptr().cast(), rest.len());
                        if n <= 0 {
                            let err = os_err();
                            libc::close(fd);
                            return Err(err);
                        }
                        rest = &rest[n as usize..];
                    }
                    libc::close(fd);
                }
                Ok(())
            }
            MountOp::Symlink { target, path } => {
                // SAFETY: two NUL-terminated paths.
                ignore_exists(check(unsafe {
                    libc::symlink(target.as_ptr(), path.as_ptr())
                }))
            }
            MountOp::Bind { src, dst, attrs } => {
                mount(Some(src), dst, None, libc::MS_BIND | libc::MS_REC, None)?;
                if *attrs != 0 {
                    set_attrs(dst, *attrs, true)?;
                }
                Ok(())
            }
            MountOp::Tmpfs { dst, options } => mount(
                Some(c"tmpfs"),
                dst,
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(options),
            ),
            MountOp::Proc(dst) => mount(
                Some(c"proc"),
                dst,
                Some(c"proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            ),
            MountOp::Attach { dst, attrs } => {
                if tree < 0 {
                    return Err(io::Error::from_raw_os_error(libc::EBADF));
                }
                // SAFETY: a descriptor of a detached mount tree and a NUL-terminated path.
                check_long(unsafe {
                    libc::syscall(
                        libc::SYS_move_mount,
                        tree,
                        c"".as_ptr(),
                        libc::AT_FDCWD,
                        dst.as_ptr(),
                        MOVE_MOUNT_F_EMPTY_PATH,
                    )
                })?;
                if *attrs != 0 {
                    set_attrs(dst, *attrs, true)?;
                }
                Ok(())
            }
            MountOp::Seal(path) => set_attrs(
                path,
                MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                false,
            ),
        }
    }
}

/// `move_mount` and `open_tree` flags (linux/mount.h).
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const OPEN_TREE_CLONE: libc::c_uint = 1;

/// A detached copy of the mount tree at `path` (with every mount beneath it), close-on-exec.
pub(crate) fn clone_tree(path: &std::ffi::CStr) -> io::Result<RawFd> {
    // SAFETY: a NUL-terminated path; the kernel returns a new descriptor or -1.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
        )
    })
    .map(|fd| fd as RawFd)
}

/// Builds a view from an empty root: a tmpfs on `stage`, pivoted into with the host at
/// `/oldroot`, `ops` applied, the host detached and the root sealed read-only.
pub(crate) fn build_view(stage: &std::ffi::CStr, ops: &[MountOp], tree: RawFd) -> io::Result<()> {
    mount(
        Some(c"tmpfs"),
        stage,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"size=1m,nr_inodes=4096,mode=0755"),
    )?;
    // SAFETY: chdir/mkdir/pivot_root on static or prepared NUL-terminated paths.
    unsafe {
        check(libc::chdir(stage.as_ptr()))?;
        check(libc::mkdir(c"oldroot".as_ptr(), 0o700))?;
        check_long(libc::syscall(
            libc::SYS_pivot_root,
            c".".as_ptr(),
            c"oldroot".as_ptr(),
        ))?;
        check(libc::chdir(c"/".as_ptr()))?;
    }
    for op in ops {
        op.apply(tree)?;
    }
    // SAFETY: umount2/rmdir on static paths.
    unsafe {
        check(libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH))?;
        check(libc::rmdir(c"/oldroot".as_ptr()))?;
    }
    // The root holds only mount points and the mask sources: nothing in it is writable.
    set_attrs(
        c"/",
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
    )
}

/// Steps 1–4: runs in the cloned child (new user, PID, mount, IPC, UTS and, unless the profile
/// allows the network, network namespaces) before the rlimits. `tree` is the workspace its
/// first child copied from the template's host namespace (-1: none).
pub(crate) fn enter(sb: &SandboxSetup, tree: RawFd) -> io::Result<()> {
    // SAFETY: prctl and poll with plain integer arguments and a stack pollfd.
    unsafe {
        check(libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ))?;
        // The executor may have died between the clone and the prctl, and then no signal
        // comes: its pidfd turns readable once it has exited.
        let mut pfd = libc::pollfd {
            fd: sb.executor,
            events: libc::POLLIN,
            revents: 0,
        };
        if libc::poll(&mut pfd, 1, 0) != 0 {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    if sb.template.is_some() {
        // The run's mount namespace is a private copy of the template's view: only the
        // per-run steps remain.
        for op in &sb.ops {
            op.apply(tree)?;
        }
    } else {
        // Nothing mounted here propagates back to the host.
        mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
        build_view(&sb.stage, &sb.ops, tree)?;
    }
    if tree >= 0 {
        // SAFETY: closing the detached tree's descriptor (moved, or unused on failure).
        unsafe { libc::close(tree) };
    }
    // SAFETY: sethostname on a static buffer.
    unsafe {
        let name = b"toolgate";
        check(libc::sethostname(name.as_ptr().cast(), name.len()))?;
    }
    if sb.loopback {
        loopback_up()?;
    }
    Ok(())
}

/// Enters the run's working directory inside its view (after [`enter`]).
pub(crate) fn enter_cwd(sb: &SandboxSetup) -> io::Result<()> {
    // SAFETY: chdir on a prepared NUL-terminated path.
    check(unsafe { libc::chdir(sb.cwd.as_ptr()) })
}

/// Brings up `lo` in the run's own network namespace (`SIOCSIFFLAGS`).
pub(crate) fn loopback_up() -> io::Result<()> {
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut req = IfReq {
        name: [0; 16],
        flags: 0,
        _pad: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: socket/ioctl/close with a struct in `struct ifreq`'s layout (40 bytes).
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(os_err());
        }
        let r = (|| {
            check(libc::ioctl(s, libc::SIOCGIFFLAGS, &raw mut req))?;
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            check(libc::ioctl(s, libc::SIOCSIFFLAGS, &raw const req))
        })();
        libc::close(s);
        r
    }
}

/// Step 5: after `no_new_privs`. Drops every capability (bounding, ambient, effective,
/// permitted, inheritable), enforces Landlock and installs the seccomp programs.
pub(crate) fn lock(sb: &SandboxSetup) -> io::Result<()> {
    // SAFETY: prctl with integer arguments; capset with the v3 header and two data words.
    unsafe {
        // Capabilities are numbered from 0 to the kernel's last without a gap: the first
        // number it calls invalid ends the bounding set.
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                let e = os_err();
                if e.raw_os_error() == Some(libc::EINVAL) {
                    break;
                }
                return Err(e);
            }
        }
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ))?;
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const VERSION_3: u32 = 0x2008_0522;
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let none = [
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
            Data {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        check_long(libc::syscall(
            libc::SYS_capset,
            &raw const header,
            none.as_ptr(),
        ))?;
    }
    if let Some(rules) = &sb.landlock {
        landlock(rules)?;
    }
    for bpf in &sb.seccomp {
        #[repr(C)]
        struct Fprog {
            len: libc::c_ushort,
            filter: *const SockFilter,
        }
        let prog = Fprog {
            len: bpf.0.len() as libc::c_ushort,
            filter: bpf.0.as_ptr(),
        };
        // SAFETY: a sock_fprog pointing at a live, compiled program.
        check(unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &raw const prog,
                0,
                0,
            )
        })?;
    }
    Ok(())
}

fn landlock(rules: &LandlockRules) -> io::Result<()> {
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
        handled_access_net: u64,
        scoped: u64,
    }
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    #[repr(C)]
    struct NetPort {
        allowed_access: u64,
        port: u64,
    }
    const RULE_PATH_BENEATH: libc::c_int = 1;
    const RULE_NET_PORT: libc::c_int = 2;
    let attr = RulesetAttr {
        handled_access_fs: rules.handled_fs,
        handled_access_net: rules.handled_net,
        scoped: rules.scoped,
    };
    // Older kernels accept the larger struct as long as the fields they do not know are zero,
    // which the ABI negotiation in `crate::sandbox` guarantees.
    // SAFETY: a ruleset attribute in the kernel's layout with its size.
    let ruleset = check_long(unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    })? as RawFd;
    let result = (|| {
        for (path, access) in &rules.paths {
            // SAFETY: open with O_PATH on a prepared path; the fd is closed below.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(os_err());
            }
            let beneath = PathBeneath {
                allowed_access: *access,
                parent_fd: fd,
            };
            // SAFETY: a path-beneath attribute in the kernel's (packed) layout.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    RULE_PATH_BENEATH,
                    &raw const beneath,
                    0u32,
                )
            };
            let err = os_err();
            // SAFETY: closing the descriptor opened above.
            unsafe { libc::close(fd) };
            if r < 0 {
                return Err(err);
            }
        }
        for (port, access) in &rules.ports {
            let rule = NetPort {
                allowed_access: *access,
                port: *port,
            };
            // SAFETY: a net-port attribute in the kernel's layout.
            check_long(unsafe {
                libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    RULE_NET_PORT,
                    &raw const rule,
                    0u32,
                )
            })?;
        }
        // SAFETY: restrict_self on the ruleset fd; no_new_privs is already set.
        check_long(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) })
            .map(drop)
    })();
    // SAFETY: closing the ruleset descriptor.
    unsafe { libc::close(ruleset) };
    result
}
