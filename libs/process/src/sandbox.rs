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
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use crate::sys::sandbox::{
    Bpf, LandlockRules, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MountOp,
    SandboxSetup,
};

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
    uid: u32,
    gid: u32,
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
    pub fn new(
        config: SandboxConfig,
        home_bytes: u64,
        landlock_abi: i32,
        user_ns: bool,
    ) -> io::Result<Sandboxes> {
        let executor = crate::sys::own_pidfd()?;
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
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
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
        let id_map = |id: u32| CString::new(format!("{id} {id} 1")).expect("no NUL");
        Ok(SandboxSetup {
            uid_map: id_map(self.uid),
            gid_map: id_map(self.gid),
            stage: cstr(&self.config.stage)?,
            ops,
            cwd: cstr(cwd)?,
            loopback: !built.profile.network,
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
    built.seccomp = seccomp().map_err(|e| format!("seccomp: {e}"))?;
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

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// The seccomp programs every sandboxed run gets, in installation order. Each entry says why
/// it is there; `ARCHITECTURE.md` has the same list.
fn seccomp() -> Result<Vec<Bpf>, seccompiler::BackendError> {
    let mut deny: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let always = |m: &mut BTreeMap<i64, Vec<SeccompRule>>, nrs: &[libc::c_long]| {
        for nr in nrs {
            m.insert(*nr, Vec::new());
        }
    };
    always(
        &mut deny,
        &[
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
            // New namespaces (a nested user namespace would regain capabilities there) and
            // joining other ones.
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
        ],
    );
    let cond = |arg: u8, mask: u64| {
        SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(mask),
            mask,
        )
    };
    // Execution domains other than plain Linux (and the query) change address-space layout
    // and syscall semantics.
    deny.insert(
        libc::SYS_personality,
        vec![SeccompRule::new(vec![
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)?,
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0xffff_ffff)?,
        ])?],
    );
    // clone with any namespace flag: the same reason as unshare.
    let ns_flags = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWCGROUP,
        0x80, // CLONE_NEWTIME
    ];
    deny.insert(
        libc::SYS_clone,
        ns_flags
            .iter()
            .map(|f| SeccompRule::new(vec![cond(0, *f as u64)?]))
            .collect::<Result<_, _>>()?,
    );
    // Set-id mode bits: a run must not leave a set-uid or set-gid file for the host (a
    // set-uid copy of a shell owned by the executor's user would hand that user to whoever
    // runs it later).
    let setid = [libc::S_ISUID as u64, libc::S_ISGID as u64];
    let mode_rules = |arg: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        setid
            .iter()
            .map(|bit| SeccompRule::new(vec![cond(arg, *bit)?]))
            .collect()
    };
    let create_rules =
        |flags: u8, mode: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
            let mut rules = Vec::new();
            for create in [
                libc::O_CREAT as u64,
                libc::O_TMPFILE as u64 & !(libc::O_DIRECTORY as u64),
            ] {
                for bit in setid {
                    rules.push(SeccompRule::new(vec![
                        cond(flags, create)?,
                        cond(mode, bit)?,
                    ])?);
                }
            }
            Ok(rules)
        };
    deny.insert(libc::SYS_fchmod, mode_rules(1)?);
    deny.insert(libc::SYS_fchmodat, mode_rules(2)?);
    deny.insert(libc::SYS_fchmodat2, mode_rules(2)?);
    deny.insert(libc::SYS_mknodat, mode_rules(2)?);
    deny.insert(libc::SYS_openat, create_rules(2, 3)?);
    #[cfg(target_arch = "x86_64")]
    {
        deny.insert(libc::SYS_chmod, mode_rules(1)?);
        deny.insert(libc::SYS_mknod, mode_rules(1)?);
        deny.insert(libc::SYS_creat, mode_rules(1)?);
        deny.insert(libc::SYS_open, create_rules(1, 2)?);
    }
    let eperm = SeccompFilter::new(
        deny,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )?;
    // Calls whose arguments a filter cannot read (a struct behind a pointer) answer ENOSYS,
    // so the C library falls back to the older call that the rules above can check.
    let mut unknown: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    always(&mut unknown, &[libc::SYS_clone3, libc::SYS_openat2]);
    let enosys = SeccompFilter::new(
        unknown,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        ARCH,
    )?;
    let compile = |f: SeccompFilter| -> Result<Bpf, seccompiler::BackendError> {
        let prog: seccompiler::BpfProgram = f.try_into()?;
        Ok(Bpf(prog.into()))
    };
    Ok(vec![compile(eperm)?, compile(enosys)?])
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

    #[test]
    fn the_seccomp_programs_compile_for_this_arch() {
        let progs = seccomp().unwrap();
        assert_eq!(progs.len(), 2);
        assert!(progs[0].0.len() > 40);
    }
}
