//! The run sandbox: named profiles, and the per-run plan the child builds around itself.
//!
//! Every run executes in new user, PID, mount, IPC, UTS and (unless its profile allows the
//! network) network namespaces, with no capabilities, `no_new_privs`, Landlock and seccomp, in a
//! view of the filesystem that holds only what the profile names: the workspace, the system
//! read-only, private `/tmp`, `HOME`, `/dev` and `/proc`, and the configured toolchains
//! read-only. The policy's hidden paths are masked by empty files or directories and its
//! protected paths are bound read-only. Two layers hold the filesystem view, so one failing
//! does not open everything: the mount namespace (what exists at all) and Landlock (what may be
//! touched, by inode, whatever a path spells).
//!
//! The profiles are checked once when the runner starts; a profile the kernel cannot enforce is
//! recorded as unavailable with what is missing, and every run asking for it is refused.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use landlock::{ABI, Access, AccessFs, AccessNet, BitFlags, Scope};

pub(crate) use bpf::SockFilter;
use bpf::{Action, Cond, ret_errno};

mod bpf;

use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use crate::sys::sandbox::{
    Bpf, LandlockRules, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MountOp, Netns,
    SandboxSetup,
};

/// Network namespaces kept ready for runs.
const NET_POOL_TARGET: usize = 4;

/// Network namespaces with only their loopback (up), created ahead of the runs that take them
/// by a thread of their own: creating one costs ~0.4 ms, which a run start then does not pay.
/// Each is used by exactly one run (a run's loopback is its own) and dies with it.
#[derive(Debug)]
pub(crate) struct NetPool {
    ready: Mutex<Vec<OwnedFd>>,
    wake: Condvar,
}

impl NetPool {
    fn start(userns: Arc<OwnedFd>, target: usize) -> Arc<NetPool> {
        let pool = Arc::new(NetPool {
            ready: Mutex::new(Vec::with_capacity(target)),
            wake: Condvar::new(),
        });
        let weak: Weak<NetPool> = Arc::downgrade(&pool);
        let spawned = std::thread::Builder::new()
            .name("toolgate-netns".into())
            .spawn(move || refill(&weak, &userns, target));
        if spawned.is_err() {
            // No thread: every run creates its own namespace, as without a pool.
        }
        pool
    }

    /// A ready namespace, if any; wakes the refill thread.
    fn take(&self) -> Option<OwnedFd> {
        let fd = self.ready.lock().ok()?.pop();
        self.wake.notify_one();
        fd
    }
}

/// Keeps `target` namespaces ready until the pool is dropped.
fn refill(pool: &Weak<NetPool>, userns: &OwnedFd, target: usize) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        let short = p.ready.lock().map_or(0, |r| target.saturating_sub(r.len()));
        if short == 0 {
            if let Ok(guard) = p.ready.lock() {
                let _ = p.wake.wait_timeout(guard, Duration::from_millis(250));
            }
            continue;
        }
        match crate::sys::new_netns(std::os::fd::AsFd::as_fd(userns)) {
            Ok(fd) => {
                if let Ok(mut r) = p.ready.lock() {
                    r.push(fd);
                }
            }
            // The kernel refuses for now (a namespace limit): runs create their own, which
            // fails the same visible way; try again later.
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// The name of the profile every run gets unless it asks for another.
pub const DEFAULT_PROFILE: &str = "workspace";

/// What a profile allows a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// No sandbox at all: the run sees the host as the executor does. Only a profile the
    /// operator defines can be unconfined; none of the shipped ones is.
    pub unconfined: bool,
    /// Share the host's network namespace (egress). Off: the run has only its own loopback.
    pub network: bool,
    /// With `network`, the TCP ports the run may connect to (Landlock, ABI 4 or later); empty
    /// allows every port. Landlock only allows, so a port not listed (the ledger database, the
    /// policy service) is unreachable.
    pub tcp_connect_ports: Vec<u16>,
    /// The workspace is read-only too.
    pub read_only_workspace: bool,
}

impl Profile {
    /// The default profile: workspace read-write, no network.
    pub fn workspace() -> Profile {
        Profile {
            unconfined: false,
            network: false,
            tcp_connect_ports: Vec::new(),
            read_only_workspace: false,
        }
    }

    /// Everything read-only, no network.
    pub fn readonly() -> Profile {
        Profile {
            read_only_workspace: true,
            ..Profile::workspace()
        }
    }

    /// Workspace read-write with egress to the usual package and source ports.
    pub fn network() -> Profile {
        Profile {
            network: true,
            tcp_connect_ports: vec![22, 80, 443, 9418],
            ..Profile::workspace()
        }
    }

    /// No sandbox (an explicit operator choice).
    pub fn unconfined() -> Profile {
        Profile {
            unconfined: true,
            ..Profile::workspace()
        }
    }
}

/// How runs are sandboxed (`process.sandbox` in the executor's config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Refuse every run when the default profile cannot be enforced. Off is an explicit
    /// operator choice: runs then go unconfined, and `Started.isolation` says so.
    pub require: bool,
    /// The profile a run gets when it names none.
    pub default_profile: String,
    /// The profiles by name.
    pub profiles: BTreeMap<String, Profile>,
    /// The workspace root; runs see it at the same path. `None`: a run's working directory
    /// is its workspace (for library use).
    pub workspace: Option<PathBuf>,
    /// Host system directories visible read-only (a missing one is skipped; a symlink is
    /// recreated as a symlink).
    pub system_paths: Vec<PathBuf>,
    /// Host files inside the system directories that are hidden (an empty file is mounted
    /// over each that exists): secrets such as `/etc/shadow` and ssh host keys.
    pub hidden_system_paths: Vec<PathBuf>,
    /// Toolchain and cache directories visible read-only (for example `~/.cargo`,
    /// `~/.rustup`, a Python virtualenv); a missing or unreadable one is skipped.
    pub read_only_paths: Vec<PathBuf>,
    /// File names hidden wherever they appear directly inside a read-only path (credentials
    /// a toolchain keeps next to its caches).
    pub hidden_names: Vec<String>,
    /// The run's `HOME` inside the view: a private tmpfs.
    pub home: PathBuf,
    /// Size of the private `/tmp`.
    pub tmp_bytes: u64,
    /// Size of the private `/dev/shm`.
    pub shm_bytes: u64,
    /// A host directory the view's root is staged on before the pivot (only ever mounted on
    /// inside the run's own mount namespace, so the host never sees anything there).
    pub stage: PathBuf,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        let mut profiles = BTreeMap::new();
        profiles.insert(DEFAULT_PROFILE.to_owned(), Profile::workspace());
        profiles.insert("readonly".to_owned(), Profile::readonly());
        profiles.insert("network".to_owned(), Profile::network());
        SandboxConfig {
            require: true,
            default_profile: DEFAULT_PROFILE.to_owned(),
            profiles,
            workspace: None,
            system_paths: [
                "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
            ]
            .map(PathBuf::from)
            .to_vec(),
            hidden_system_paths: [
                "/etc/shadow",
                "/etc/shadow-",
                "/etc/gshadow",
                "/etc/gshadow-",
                "/etc/security/opasswd",
                "/etc/sudoers",
                "/etc/ssl/private",
                "/etc/toolgate",
            ]
            .map(PathBuf::from)
            .to_vec(),
            read_only_paths: Vec::new(),
            hidden_names: [
                "credentials",
                "credentials.toml",
                ".netrc",
                ".npmrc",
                ".pypirc",
            ]
            .map(String::from)
            .to_vec(),
            home: PathBuf::from("/home/toolgate"),
            tmp_bytes: 512 << 20,
            shm_bytes: 64 << 20,
            stage: PathBuf::from("/tmp"),
        }
    }
}

impl SandboxConfig {
    /// A configuration whose only profile is unconfined and not required: the explicit
    /// "no sandbox" choice (tests of the fallback kill mechanisms use it).
    pub fn unconfined() -> SandboxConfig {
        let mut profiles = BTreeMap::new();
        profiles.insert("none".to_owned(), Profile::unconfined());
        SandboxConfig {
            require: false,
            default_profile: "none".to_owned(),
            profiles,
            ..SandboxConfig::default()
        }
    }

    /// Checks names and paths; the runner refuses an invalid config.
    pub fn validate(&self) -> Result<(), String> {
        if !self.profiles.contains_key(&self.default_profile) {
            return Err(format!(
                "default_profile `{}` is not among the profiles ({})",
                self.default_profile,
                self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        for (field, path) in [("home", &self.home), ("stage", &self.stage)] {
            if !path.is_absolute() {
                return Err(format!("{field} must be an absolute path"));
            }
        }
        for path in self
            .system_paths
            .iter()
            .chain(&self.read_only_paths)
            .chain(&self.hidden_system_paths)
        {
            if !path.is_absolute() {
                return Err(format!("{} must be an absolute path", path.display()));
            }
        }
        Ok(())
    }
}

/// Paths of the workspace, relative to its root, that a run's view changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Masks {
    /// Regular files (or anything not a directory) hidden behind an empty read-only file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories hidden behind an empty read-only directory.
    pub hidden_dirs: Vec<PathBuf>,
    /// Existing paths bound read-only onto themselves.
    pub protected: Vec<PathBuf>,
}

/// Why a profile cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// No profile by that name.
    Unknown { known: Vec<String> },
    /// The kernel or the host lacks something the profile needs.
    Missing(String),
}

/// A profile with what the kernel offers for it, decided once at startup.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    pub name: String,
    pub profile: Profile,
    /// The view's fixed part (everything but the workspace and its masks).
    ops: Vec<MountOp>,
    /// The fixed Landlock rules (everything but the workspace).
    landlock: LandlockRules,
    pub landlock_abi: i32,
    seccomp: Vec<Bpf>,
}

/// The profiles of a runner.
#[derive(Debug)]
pub(crate) struct Sandboxes {
    pub config: SandboxConfig,
    built: BTreeMap<String, Result<Built, String>>,
    /// Readable once the executor has exited; every child checks it right after setting its
    /// parent-death signal.
    executor: std::os::fd::OwnedFd,
    /// The user namespace every sandboxed run enters, and the pool of ready network
    /// namespaces owned by it; `None` when this host refuses to create one.
    userns: Option<Arc<OwnedFd>>,
    netns: Option<Arc<NetPool>>,
}

/// What a run resolves to.
#[derive(Debug)]
pub(crate) enum Resolved<'a> {
    /// Sandboxed as this profile.
    Confined(&'a Built),
    /// The operator's explicit choice of no sandbox, under this profile name.
    Unconfined(&'a str),
}

impl Sandboxes {
    /// Builds every profile against what this kernel offers.
    pub fn new(config: SandboxConfig, home_bytes: u64, landlock_abi: i32) -> io::Result<Sandboxes> {
        let executor = crate::sys::own_pidfd()?;
        let userns = crate::sys::new_userns(
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )
        .ok()
        .map(Arc::new);
        let user_ns = userns.is_some();
        let needs_pool = config
            .profiles
            .values()
            .any(|p| !p.unconfined && !p.network);
        let netns = userns
            .as_ref()
            .filter(|_| needs_pool)
            .map(|u| NetPool::start(Arc::clone(u), NET_POOL_TARGET));
        let fixed = FixedView::probe(&config);
        let built = config
            .profiles
            .iter()
            .map(|(name, profile)| {
                let b = build(
                    name,
                    profile,
                    &config,
                    &fixed,
                    landlock_abi,
                    user_ns,
                    home_bytes,
                );
                (name.clone(), b)
            })
            .collect();
        Ok(Sandboxes {
            config,
            built,
            executor,
            userns,
            netns,
        })
    }

    /// The profile a run asking for `name` (empty: the default) gets, or why it cannot run.
    pub fn resolve<'a>(&'a self, name: &'a str) -> Result<Resolved<'a>, (String, Unavailable)> {
        let name = if name.is_empty() {
            self.config.default_profile.as_str()
        } else {
            name
        };
        match self.built.get(name) {
            None => Err((
                name.to_owned(),
                Unavailable::Unknown {
                    known: self.config.profiles.keys().cloned().collect(),
                },
            )),
            Some(Ok(b)) if b.profile.unconfined => Ok(Resolved::Unconfined(&b.name)),
            Some(Ok(b)) => Ok(Resolved::Confined(b)),
            Some(Err(_)) if name == self.config.default_profile && !self.config.require => {
                Ok(Resolved::Unconfined(name))
            }
            Some(Err(missing)) => Err((name.to_owned(), Unavailable::Missing(missing.clone()))),
        }
    }

    /// Records that the default profile failed its startup self-test.
    pub fn mark_broken(&mut self, name: &str, why: String) {
        self.built.insert(name.to_owned(), Err(why));
    }

    /// The profiles and whether each can be enforced (for `GetCapabilities` and `doctor`).
    pub fn report(&self) -> Vec<(String, Result<i32, String>)> {
        self.built
            .iter()
            .map(|(n, b)| {
                (
                    n.clone(),
                    b.as_ref().map(|b| b.landlock_abi).map_err(Clone::clone),
                )
            })
            .collect()
    }

    /// The child's plan for one run of `built` in `workspace` (host path; the run sees it at
    /// the same path), starting in `cwd` (a host path inside the workspace).
    pub fn setup(
        &self,
        built: &Built,
        workspace: &Path,
        cwd: &Path,
        masks: &Masks,
    ) -> io::Result<SandboxSetup> {
        let mut ops = built.ops.clone();
        let ws_attrs = MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | if built.profile.read_only_workspace {
                MOUNT_ATTR_RDONLY
            } else {
                0
            };
        dir_chain(&mut ops, workspace)?;
        ops.push(MountOp::Bind {
            src: host(workspace)?,
            dst: cstr(workspace)?,
            attrs: ws_attrs,
        });
        let masked = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        for rel in &masks.protected {
            let p = beneath(workspace, rel)?;
            ops.push(MountOp::Bind {
                src: cstr(&p)?,
                dst: cstr(&p)?,
                attrs: masked,
            });
        }
        for (list, source) in [
            (&masks.hidden_files, EMPTY_FILE),
            (&masks.hidden_dirs, EMPTY_DIR),
        ] {
            for rel in list {
                ops.push(MountOp::Bind {
                    src: CString::new(source).expect("static path"),
                    dst: cstr(&beneath(workspace, rel)?)?,
                    attrs: masked,
                });
            }
        }
        let mut landlock = built.landlock.clone();
        if landlock.handled_fs != 0 {
            let abi = abi_of(built.landlock_abi);
            let rights = if built.profile.read_only_workspace {
                AccessFs::from_read(abi)
            } else {
                AccessFs::from_all(abi)
            };
            landlock.paths.push((cstr(workspace)?, rights.bits()));
        }
        let userns = self
            .userns
            .as_ref()
            .ok_or_else(|| io::Error::other("no user namespace for runs"))?;
        // A network namespace from the pool when one is ready; else the run's first child
        // creates one (what the pool saves is exactly that creation, ~0.4 ms).
        let netns = if built.profile.network {
            Netns::Host
        } else {
            match self.netns.as_ref().and_then(|p| p.take()) {
                Some(fd) => Netns::Enter(fd),
                None => Netns::New,
            }
        };
        Ok(SandboxSetup {
            userns: std::os::fd::AsRawFd::as_raw_fd(&**userns),
            loopback: matches!(netns, Netns::New),
            netns,
            stage: cstr(&self.config.stage)?,
            ops,
            cwd: cstr(cwd)?,
            landlock: (landlock.handled_fs != 0).then_some(landlock),
            seccomp: built.seccomp.clone(),
            executor: std::os::fd::AsRawFd::as_raw_fd(&self.executor),
        })
    }
}

/// The empty file and directory hidden paths are covered with, in the view's own root.
const EMPTY_FILE: &str = "/.toolgate/empty";
const EMPTY_DIR: &str = "/.toolgate/empty.d";

/// What the host offers for the fixed part of every view, probed once.
#[derive(Debug)]
struct FixedView {
    /// `(path, Some(symlink target))` or `(path, None)` for a directory to bind.
    system: Vec<(PathBuf, Option<PathBuf>)>,
    /// Files to hide that exist (in the system and read-only paths).
    hidden: Vec<(PathBuf, bool)>,
    /// Read-only directories that exist and this user can reach.
    read_only: Vec<PathBuf>,
}

impl FixedView {
    fn probe(config: &SandboxConfig) -> FixedView {
        let mut system = Vec::new();
        for path in &config.system_paths {
            match std::fs::symlink_metadata(path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(path) {
                        system.push((path.clone(), Some(target)));
                    }
                }
                Ok(m) if m.is_dir() => system.push((path.clone(), None)),
                _ => {}
            }
        }
        let read_only: Vec<PathBuf> = config
            .read_only_paths
            .iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter(|p| std::fs::read_dir(p).is_ok())
            .collect();
        let mut hidden = Vec::new();
        let mut hide = |p: PathBuf| {
            if let Ok(m) = std::fs::symlink_metadata(&p)
                && !m.file_type().is_symlink()
            {
                hidden.push((p, m.is_dir()));
            }
        };
        for p in &config.hidden_system_paths {
            hide(p.clone());
        }
        // ssh host keys: private halves only, whatever their algorithm.
        if let Ok(dir) = std::fs::read_dir("/etc/ssh") {
            for e in dir.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if name.starts_with("ssh_host_") && name.ends_with("_key") {
                    hide(e.path());
                }
            }
        }
        for dir in &read_only {
            for name in &config.hidden_names {
                hide(dir.join(name));
            }
        }
        FixedView {
            system,
            hidden,
            read_only,
        }
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// A host path as the child sees it after the pivot.
fn host(p: &Path) -> io::Result<CString> {
    let mut s = b"/oldroot".to_vec();
    s.extend_from_slice(p.as_os_str().as_bytes());
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL"))
}

/// `root/rel`, refusing anything but plain components in `rel`.
fn beneath(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mask path `{}` is not a plain relative path", rel.display()),
        ));
    }
    Ok(root.join(rel))
}

/// `mkdir` of every component of the absolute `path`, outermost first.
fn dir_chain(ops: &mut Vec<MountOp>, path: &Path) -> io::Result<()> {
    let mut at = PathBuf::from("/");
    for c in path.components() {
        if let Component::Normal(n) = c {
            at.push(n);
            ops.push(MountOp::Dir(cstr(&at)?, 0o755));
        }
    }
    Ok(())
}

fn abi_of(n: i32) -> ABI {
    match n {
        i32::MIN..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

fn build(
    name: &str,
    profile: &Profile,
    config: &SandboxConfig,
    fixed: &FixedView,
    landlock_abi: i32,
    user_ns: bool,
    home_bytes: u64,
) -> Result<Built, String> {
    let mut built = Built {
        name: name.to_owned(),
        profile: profile.clone(),
        ops: Vec::new(),
        landlock: LandlockRules::default(),
        landlock_abi: 0,
        seccomp: Vec::new(),
    };
    if profile.unconfined {
        return Ok(built);
    }
    if !user_ns {
        return Err("user namespaces (the kernel refuses to create one for this user)".into());
    }
    if landlock_abi < 1 {
        return Err("Landlock (Linux 5.13 or later with `landlock` among the enabled LSMs)".into());
    }
    let abi = abi_of(landlock_abi);
    if profile.network && !profile.tcp_connect_ports.is_empty() && landlock_abi < 4 {
        return Err(format!(
            "Landlock ABI 4 for TCP port rules (the kernel has ABI {landlock_abi})"
        ));
    }
    built.landlock_abi = landlock_abi.min(7);
    built.ops = fixed_ops(config, fixed, home_bytes).map_err(|e| e.to_string())?;
    built.landlock = fixed_landlock(profile, config, fixed, abi).map_err(|e| e.to_string())?;
    built.seccomp = seccomp();
    Ok(built)
}

fn fixed_ops(
    config: &SandboxConfig,
    fixed: &FixedView,
    home_bytes: u64,
) -> io::Result<Vec<MountOp>> {
    let c = |s: &str| CString::new(s).expect("static path");
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let mut ops = vec![
        MountOp::Dir(c("/.toolgate"), 0o755),
        MountOp::File(c(EMPTY_FILE)),
        MountOp::Dir(c(EMPTY_DIR), 0o555),
    ];
    for (path, link) in &fixed.system {
        match link {
            Some(target) => ops.push(MountOp::Symlink {
                target: cstr(target)?,
                path: cstr(path)?,
            }),
            None => {
                dir_chain(&mut ops, path)?;
                ops.push(MountOp::Bind {
                    src: host(path)?,
                    dst: cstr(path)?,
                    attrs: ro,
                });
            }
        }
    }
    for path in &fixed.read_only {
        dir_chain(&mut ops, path)?;
        ops.push(MountOp::Bind {
            src: host(path)?,
            dst: cstr(path)?,
            attrs: ro,
        });
    }
    for (path, is_dir) in &fixed.hidden {
        ops.push(MountOp::Bind {
            src: c(if *is_dir { EMPTY_DIR } else { EMPTY_FILE }),
            dst: cstr(path)?,
            attrs: ro,
        });
    }
    // A /dev of the few harmless devices, bound from the host (a user namespace cannot mknod).
    ops.push(MountOp::Dir(c("/dev"), 0o755));
    ops.push(MountOp::Tmpfs {
        dst: c("/dev"),
        options: c("size=64k,nr_inodes=64,mode=0755"),
    });
    for dev in ["null", "zero", "full", "random", "urandom"] {
        let path = format!("/dev/{dev}");
        ops.push(MountOp::File(c(&path)));
        ops.push(MountOp::Bind {
            src: c(&format!("/oldroot/dev/{dev}")),
            dst: c(&path),
            attrs: MOUNT_ATTR_NOSUID,
        });
    }
    for (target, path) in [
        ("/proc/self/fd", "/dev/fd"),
        ("/proc/self/fd/0", "/dev/stdin"),
        ("/proc/self/fd/1", "/dev/stdout"),
        ("/proc/self/fd/2", "/dev/stderr"),
    ] {
        ops.push(MountOp::Symlink {
            target: c(target),
            path: c(path),
        });
    }
    ops.push(MountOp::Dir(c("/dev/shm"), 0o1777));
    ops.push(MountOp::Tmpfs {
        dst: c("/dev/shm"),
        options: c(&format!("size={},mode=1777", config.shm_bytes)),
    });
    ops.push(MountOp::Dir(c("/proc"), 0o555));
    ops.push(MountOp::Proc(c("/proc")));
    ops.push(MountOp::Dir(c("/tmp"), 0o1777));
    ops.push(MountOp::Tmpfs {
        dst: c("/tmp"),
        options: c(&format!("size={},mode=1777", config.tmp_bytes)),
    });
    dir_chain(&mut ops, &config.home)?;
    ops.push(MountOp::Tmpfs {
        dst: cstr(&config.home)?,
        options: c(&format!("size={home_bytes},mode=0700")),
    });
    Ok(ops)
}

fn fixed_landlock(
    profile: &Profile,
    config: &SandboxConfig,
    fixed: &FixedView,
    abi: ABI,
) -> io::Result<LandlockRules> {
    let all = AccessFs::from_all(abi);
    let read: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let dev = (AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::ReadDir
        | AccessFs::Truncate
        | AccessFs::IoctlDev)
        & all;
    let mut paths = vec![(
        CString::new("/").expect("static"),
        BitFlags::from(AccessFs::ReadDir).bits(),
    )];
    for (path, link) in &fixed.system {
        if link.is_none() {
            paths.push((cstr(path)?, read.bits()));
        }
    }
    for path in &fixed.read_only {
        paths.push((cstr(path)?, read.bits()));
    }
    paths.push((CString::new("/dev").expect("static"), dev.bits()));
    paths.push((CString::new("/dev/shm").expect("static"), all.bits()));
    paths.push((
        CString::new("/proc").expect("static"),
        (AccessFs::ReadFile | AccessFs::ReadDir).bits(),
    ));
    paths.push((CString::new("/tmp").expect("static"), all.bits()));
    paths.push((cstr(&config.home)?, all.bits()));
    let (handled_net, ports) = if profile.network && !profile.tcp_connect_ports.is_empty() {
        let connect = AccessNet::ConnectTcp as u64;
        (
            connect,
            profile
                .tcp_connect_ports
                .iter()
                .map(|p| (u64::from(*p), connect))
                .collect(),
        )
    } else {
        (0, Vec::new())
    };
    Ok(LandlockRules {
        handled_fs: all.bits(),
        handled_net,
        scoped: Scope::from_all(abi).bits(),
        paths,
        ports,
    })
}

/// The syscalls a sandboxed run may never make; each group says why. `ARCHITECTURE.md` and the
/// README have the same list.
const DENIED: &[libc::c_long] = &[
    // Reading or steering another process's memory.
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    // Changing the view: mounts, old and new API, and pivoting the root.
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    // New namespaces (a nested user namespace would regain capabilities there) and joining
    // other ones.
    libc::SYS_unshare,
    libc::SYS_setns,
    // The kernel keyring is not namespaced.
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    // Large kernel attack surface that no build or test needs.
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    // Whole-machine operations.
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    // File handles bypass path-based confinement.
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
];

/// Namespace flags of clone(2), including `CLONE_NEWTIME`.
const NS_FLAGS: u32 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWCGROUP
    | 0x80) as u32;
/// The set-id mode bits.
const SET_ID: u32 = libc::S_ISUID | libc::S_ISGID;
/// Flags of open(2) that create a file: `O_CREAT`, and `__O_TMPFILE` (`O_TMPFILE` without its
/// `O_DIRECTORY` part).
const CREATING: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// What every sandboxed run's seccomp filter does, by syscall number.
fn seccomp_rules() -> Vec<(u32, Action)> {
    let eperm = ret_errno(libc::EPERM);
    let nr = |n: libc::c_long| n as u32;
    let mut rules: Vec<(u32, Action)> = DENIED
        .iter()
        .map(|n| (nr(*n), Action::Always(eperm)))
        .collect();
    let when = |conds: Vec<Cond>| Action::When {
        rules: vec![conds],
        ret: eperm,
    };
    let setid = |arg| Cond::AnyBit { arg, mask: SET_ID };
    let creating = |arg| Cond::AnyBit {
        arg,
        mask: CREATING,
    };
    // Execution domains other than plain Linux (0; 0xffffffff only queries) change the
    // address-space layout and syscall semantics.
    rules.push((
        nr(libc::SYS_personality),
        when(vec![Cond::NoneOf {
            arg: 0,
            values: vec![0, 0xffff_ffff],
        }]),
    ));
    // clone with a namespace flag: the same reason as unshare.
    rules.push((
        nr(libc::SYS_clone),
        when(vec![Cond::AnyBit {
            arg: 0,
            mask: NS_FLAGS,
        }]),
    ));
    // Set-id mode bits: a run must not leave a set-uid or set-gid file for the host (a
    // set-uid copy of a shell owned by the executor's user hands that user to whoever runs it).
    rules.push((nr(libc::SYS_fchmod), when(vec![setid(1)])));
    rules.push((nr(libc::SYS_fchmodat), when(vec![setid(2)])));
    rules.push((nr(libc::SYS_fchmodat2), when(vec![setid(2)])));
    rules.push((nr(libc::SYS_mknodat), when(vec![setid(2)])));
    rules.push((nr(libc::SYS_openat), when(vec![creating(2), setid(3)])));
    #[cfg(target_arch = "x86_64")]
    {
        rules.push((nr(libc::SYS_chmod), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_mknod), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_creat), when(vec![setid(1)])));
        rules.push((nr(libc::SYS_open), when(vec![creating(1), setid(2)])));
    }
    // Calls whose arguments a filter cannot read (a struct behind a pointer) answer ENOSYS,
    // so the C library falls back to the older call the rules above check.
    for n in [libc::SYS_clone3, libc::SYS_openat2] {
        rules.push((nr(n), Action::Always(ret_errno(libc::ENOSYS))));
    }
    rules
}

/// The seccomp program every sandboxed run installs.
fn seccomp() -> Vec<Bpf> {
    vec![Bpf(bpf::compile(bpf::NATIVE, &seccomp_rules()).into())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_profiles_validate_and_none_is_unconfined() {
        let c = SandboxConfig::default();
        c.validate().unwrap();
        assert!(c.profiles.values().all(|p| !p.unconfined));
        assert!(c.profiles.contains_key("readonly") && c.profiles.contains_key("network"));
        let bad = SandboxConfig {
            default_profile: "strict".into(),
            ..SandboxConfig::default()
        };
        assert!(bad.validate().unwrap_err().contains("strict"));
    }

    #[test]
    fn mask_paths_must_stay_beneath_the_workspace() {
        assert!(beneath(Path::new("/w"), Path::new("../x")).is_err());
        assert!(beneath(Path::new("/w"), Path::new("/etc")).is_err());
        assert_eq!(
            beneath(Path::new("/w"), Path::new("a/.env")).unwrap(),
            PathBuf::from("/w/a/.env")
        );
    }

    /// The same rules compiled by `seccompiler` (linear, two filters: EPERM, then ENOSYS),
    /// the way this crate built them before; the binary-search program must answer exactly
    /// like the pair for every syscall number and a spread of arguments.
    fn seccompiler_reference() -> Vec<Vec<bpf::SockFilter>> {
        use seccompiler::{
            SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as C,
            SeccompFilter, SeccompRule, TargetArch,
        };
        #[cfg(target_arch = "x86_64")]
        let arch = TargetArch::x86_64;
        #[cfg(target_arch = "aarch64")]
        let arch = TargetArch::aarch64;
        let bit = |arg, mask: u32| {
            C::new(
                arg,
                Len::Dword,
                Op::MaskedEq(u64::from(mask)),
                u64::from(mask),
            )
            .unwrap()
        };
        let any = |arg, mask: u32| -> Vec<SeccompRule> {
            (0..32)
                .map(|b| 1u32 << b)
                .filter(|b| mask & b != 0)
                .map(|b| SeccompRule::new(vec![bit(arg, b)]).unwrap())
                .collect()
        };
        let both = |flags, mode| -> Vec<SeccompRule> {
            let mut out = Vec::new();
            for c in (0..32).map(|b| 1u32 << b).filter(|b| CREATING & b != 0) {
                for m in (0..32).map(|b| 1u32 << b).filter(|b| SET_ID & b != 0) {
                    out.push(SeccompRule::new(vec![bit(flags, c), bit(mode, m)]).unwrap());
                }
            }
            out
        };
        let mut deny: BTreeMap<i64, Vec<SeccompRule>> =
            DENIED.iter().map(|n| (*n, Vec::new())).collect();
        deny.insert(
            libc::SYS_personality,
            vec![
                SeccompRule::new(vec![
                    C::new(0, Len::Dword, Op::Ne, 0).unwrap(),
                    C::new(0, Len::Dword, Op::Ne, 0xffff_ffff).unwrap(),
                ])
                .unwrap(),
            ],
        );
        deny.insert(libc::SYS_clone, any(0, NS_FLAGS));
        deny.insert(libc::SYS_fchmod, any(1, SET_ID));
        deny.insert(libc::SYS_fchmodat, any(2, SET_ID));
        deny.insert(libc::SYS_fchmodat2, any(2, SET_ID));
        deny.insert(libc::SYS_mknodat, any(2, SET_ID));
        deny.insert(libc::SYS_openat, both(2, 3));
        #[cfg(target_arch = "x86_64")]
        {
            deny.insert(libc::SYS_chmod, any(1, SET_ID));
            deny.insert(libc::SYS_mknod, any(1, SET_ID));
            deny.insert(libc::SYS_creat, any(1, SET_ID));
            deny.insert(libc::SYS_open, both(1, 2));
        }
        let unknown: BTreeMap<i64, Vec<SeccompRule>> = [libc::SYS_clone3, libc::SYS_openat2]
            .into_iter()
            .map(|n| (n, Vec::new()))
            .collect();
        [(deny, libc::EPERM), (unknown, libc::ENOSYS)]
            .into_iter()
            .map(|(rules, errno)| {
                let f = SeccompFilter::new(
                    rules,
                    SeccompAction::Allow,
                    SeccompAction::Errno(errno as u32),
                    arch,
                )
                .unwrap();
                let prog: seccompiler::BpfProgram = f.try_into().unwrap();
                prog.iter()
                    .map(|i| bpf::SockFilter {
                        code: i.code,
                        jt: i.jt,
                        jf: i.jf,
                        k: i.k,
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn the_seccomp_program_answers_like_seccompiler_for_every_syscall() {
        let ours = &seccomp()[0].0;
        let reference = seccompiler_reference();
        let arches = [bpf::NATIVE.audit, 0xc000_00b7, 0x4000_0003];
        let args: Vec<[u64; 6]> = vec![
            [0; 6],
            [u64::MAX; 6],
            [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            [libc::SIGCHLD as u64 | libc::CLONE_VM as u64, 0, 0, 0, 0, 0],
            [0x80, 0, 0, 0, 0, 0],
            [0, 0o4755, 0o4755, 0o4755, 0, 0],
            [0, 0o2755, 0o2755, 0o2755, 0, 0],
            [0, 0o755, 0o755, 0o755, 0, 0],
            [0, libc::O_CREAT as u64, libc::O_CREAT as u64, 0o4755, 0, 0],
            [
                0,
                libc::O_CREAT as u64 | 0o4000,
                libc::O_WRONLY as u64,
                0o6755,
                0,
                0,
            ],
            [
                0,
                libc::O_TMPFILE as u64,
                libc::O_TMPFILE as u64,
                0o2700,
                0,
                0,
            ],
            [0xffff_ffff, 0, 0, 0, 0, 0],
            [8, 0, 0, 0, 0, 0],
            [0x0040_0000, 0, 0, 0, 0, 0],
        ];
        let mut checked = 0;
        for arch in arches {
            for nr in (0..520).chain([0x4000_0000, 0x4000_0001, u32::MAX]) {
                for a in &args {
                    let got = bpf::run(ours, arch, nr, *a);
                    let first = bpf::run(&reference[0], arch, nr, *a);
                    let second = bpf::run(&reference[1], arch, nr, *a);
                    // Two filters: the kernel keeps the most restrictive answer.
                    let want = if first != bpf::RET_ALLOW {
                        first
                    } else {
                        second
                    };
                    if arch != bpf::NATIVE.audit
                        || (bpf::NATIVE.x32_bit.is_some() && nr >= 0x4000_0000)
                    {
                        assert_eq!(got, bpf::RET_KILL_PROCESS, "arch {arch:#x} nr {nr:#x}");
                        continue;
                    }
                    assert_eq!(got, want, "nr {nr} args {a:?}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 7000);
        // The point of the exercise: far fewer instructions on the path of a syscall that is
        // not in the list, which is what the kernel emulates for every number at install.
        let steps = |prog: &[bpf::SockFilter]| prog.len();
        assert!(
            steps(ours) < steps(&reference[0]),
            "{} vs {}",
            steps(ours),
            steps(&reference[0])
        );
    }

    #[test]
    fn the_seccomp_program_denies_what_the_escape_suite_tries() {
        let p = &seccomp()[0].0;
        let run = |nr: libc::c_long, a: [u64; 6]| bpf::run(p, bpf::NATIVE.audit, nr as u32, a);
        let eperm = ret_errno(libc::EPERM);
        assert_eq!(run(libc::SYS_ptrace, [0; 6]), eperm);
        assert_eq!(
            run(
                libc::SYS_unshare,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]
            ),
            eperm
        );
        assert_eq!(
            run(libc::SYS_clone, [libc::CLONE_NEWNS as u64, 0, 0, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            bpf::RET_ALLOW
        );
        assert_eq!(run(libc::SYS_fchmodat, [0, 0, 0o4755, 0, 0, 0]), eperm);
        assert_eq!(
            run(libc::SYS_fchmodat, [0, 0, 0o755, 0, 0, 0]),
            bpf::RET_ALLOW
        );
        assert_eq!(
            run(libc::SYS_openat, [0, 0, libc::O_CREAT as u64, 0o2755, 0, 0]),
            eperm
        );
        assert_eq!(
            run(
                libc::SYS_openat,
                [0, 0, libc::O_RDONLY as u64, 0o4755, 0, 0]
            ),
            bpf::RET_ALLOW
        );
        assert_eq!(run(libc::SYS_clone3, [0; 6]), ret_errno(libc::ENOSYS));
        assert_eq!(run(libc::SYS_read, [0; 6]), bpf::RET_ALLOW);
        assert_eq!(
            run(libc::SYS_personality, [0xffff_ffff, 0, 0, 0, 0, 0]),
            bpf::RET_ALLOW
        );
        assert_eq!(
            run(libc::SYS_personality, [0x0040_0000, 0, 0, 0, 0, 0]),
            eperm
        );
    }
}
