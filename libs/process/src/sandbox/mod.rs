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
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{Access, AccessFs};

use crate::egress::GateSockets;
use crate::session::{Confined, SessionDir, SessionNamespaces, Shared};

mod bpf;
mod landlock_rules;
pub(crate) mod netlink;
mod netns;
mod profile;
mod seccomp;
mod template;
#[cfg(test)]
mod tests;
mod view;

pub use profile::{
    DEFAULT_PROFILE, Masks, Profile, SHIPPED_PROFILES, SandboxConfig, UNCONFINED_NAME,
};

use crate::sys::sandbox::{
    Bpf, LandlockRules, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MountOp, Netns,
    SandboxSetup, SessionEnter, TemplateEnter,
};
use landlock_rules::{abi_of, fixed_landlock};
use netlink::GatedPlan;
use netns::{Gated, NET_POOL_TARGET, NetPool, make_gated};
use seccomp::seccomp;
use template::Templates;
use view::{
    EMPTY_DIR, EMPTY_FILE, FixedView, SCRATCH, beneath, cstr, dir_chain, fixed_ops, host,
    private_ops, template_ops,
};

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
    /// Which of `ops` mounts the run's private `/tmp` (a session's run binds the session's
    /// there instead).
    tmp_op: Option<usize>,
}

/// The profiles of a runner.
#[derive(Debug)]
pub(crate) struct Sandboxes {
    pub config: SandboxConfig,
    built: BTreeMap<String, Result<Built, String>>,
    /// Readable once the executor has exited; every child checks it right after setting its
    /// parent-death signal.
    executor: std::os::fd::OwnedFd,
    /// The user namespace every sandboxed run enters, and the pools of ready network
    /// namespaces owned by it (plain and gated); `None` when this host refuses to create one.
    userns: Option<Arc<OwnedFd>>,
    netns: Option<Arc<NetPool<OwnedFd>>>,
    gated: Option<Arc<NetPool<Gated>>>,
    /// What a gated namespace is made with when the pool has none ready.
    gated_plan: GatedPlan,
    /// Where sessions mount their `/tmp` (each in its own mount namespace); `None` without
    /// a confined profile or a user namespace.
    session_dir: Option<Arc<SessionDir>>,
    /// The fixed part of the view, built once for runs to copy (see [`template`]); `None`
    /// without a confined profile or a user namespace, or when the host's paths rule it out.
    templates: Option<Templates>,
    /// The size of a run's `HOME`.
    home_bytes: u64,
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
    pub(crate) fn new(
        config: SandboxConfig,
        home_bytes: u64,
        landlock_abi: i32,
        session_parent: Option<&Path>,
    ) -> io::Result<Sandboxes> {
        let executor = crate::sys::own_pidfd()?;
        let userns = crate::sys::new_userns(
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        )
        .ok()
        .map(Arc::new);
        let user_ns = userns.is_some();
        let confined = |network: bool| {
            config
                .profiles
                .values()
                .any(|p| !p.unconfined && p.network == network)
        };
        let netns = userns
            .as_ref()
            .filter(|_| confined(false))
            .map(|u| NetPool::plain(Arc::clone(u), NET_POOL_TARGET));
        let gated_plan = GatedPlan::new(crate::egress::GATE_PORT);
        let gated = userns
            .as_ref()
            .filter(|_| confined(true))
            .map(|u| NetPool::gated(Arc::clone(u), gated_plan.clone(), NET_POOL_TARGET));
        let any_confined = config.profiles.values().any(|p| !p.unconfined);
        // Without it sessions cannot get a /tmp of their own, so making one fails (visibly).
        let session_dir = userns
            .as_ref()
            .filter(|_| any_confined)
            .and_then(|_| SessionDir::create(session_parent).ok())
            .map(Arc::new);
        let fixed = FixedView::probe(&config);
        let templates = match (&userns, any_confined) {
            (Some(u), true) => template_ops(&config, &fixed, config.workspace.as_deref())
                .ok()
                .flatten()
                .and_then(|ops| Some((cstr(&config.stage).ok()?, ops)))
                .map(|(stage, ops)| {
                    Templates::new(Arc::clone(u), stage, ops, config.workspace.clone())
                }),
            _ => None,
        };
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
            gated,
            gated_plan,
            session_dir,
            templates,
            home_bytes,
        })
    }

    /// A new session's namespaces (see [`crate::session`]): a plain network namespace when a
    /// non-networked profile is confined, and mount and IPC namespaces with the session's
    /// capped `/tmp`. Nothing at all when this runner confines no run.
    pub(crate) fn session(&self) -> io::Result<SessionNamespaces> {
        let any_confined = self
            .built
            .values()
            .any(|b| matches!(b, Ok(b) if !b.profile.unconfined));
        let Some(userns) = self.userns.as_ref().filter(|_| any_confined) else {
            return Ok(SessionNamespaces(Arc::new(Shared { confined: None })));
        };
        let dir = self
            .session_dir
            .as_ref()
            .ok_or_else(|| io::Error::other("no directory to mount sessions' /tmp on"))?;
        let options = CString::new(format!(
            "size={},nr_inodes={},mode=1777",
            self.config.tmp_bytes, self.config.tmpfs_inodes
        ))
        .expect("no NUL");
        let (mnt, ipc) =
            crate::sys::new_session_namespaces(userns.as_fd(), &cstr(dir.path())?, &options)?;
        let plain = self
            .config
            .profiles
            .values()
            .any(|p| !p.unconfined && !p.network);
        let netns = if plain {
            Some(match self.netns.as_ref().and_then(|p| p.take()) {
                Some(fd) => fd,
                None => crate::sys::new_netns(userns.as_fd())?,
            })
        } else {
            None
        };
        Ok(SessionNamespaces(Arc::new(Shared {
            confined: Some(Confined {
                userns: Arc::clone(userns),
                netns,
                mnt,
                ipc,
                dir: Arc::clone(dir),
            }),
        })))
    }

    /// The profile a run asking for `name` (empty: the default) gets, or why it cannot run.
    pub(crate) fn resolve<'a>(
        &'a self,
        name: &'a str,
    ) -> Result<Resolved<'a>, (String, Unavailable)> {
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
    pub(crate) fn mark_broken(&mut self, name: &str, why: String) {
        self.built.insert(name.to_owned(), Err(why));
    }

    /// The profiles and whether each can be enforced (for `GetCapabilities` and `doctor`).
    pub(crate) fn report(&self) -> Vec<(String, Result<i32, String>)> {
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
    /// the same path), starting in `cwd` (a host path inside the workspace); for a networked
    /// profile, with the gate's sockets in the run's namespace; in `session`'s namespaces
    /// when it has one.
    pub(crate) fn setup(
        &self,
        built: &Built,
        workspace: &Path,
        cwd: &Path,
        masks: &Masks,
        session: Option<&SessionNamespaces>,
    ) -> io::Result<(SandboxSetup, Option<GateSockets>)> {
        let userns = self
            .userns
            .as_ref()
            .ok_or_else(|| io::Error::other("no user namespace for runs"))?;
        let session = match session {
            None => None,
            Some(s) => match &s.0.confined {
                Some(c) if Arc::ptr_eq(&c.userns, userns) => Some((s, c)),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "the session's namespaces were made by another runner",
                    ));
                }
            },
        };
        let ws_attrs = MOUNT_ATTR_NOSUID
            | MOUNT_ATTR_NODEV
            | if built.profile.read_only_workspace {
                MOUNT_ATTR_RDONLY
            } else {
                0
            };
        let template = match (session, &self.templates) {
            (None, Some(t)) if t.fits(workspace) => t.current(),
            _ => None,
        };
        let mut ops;
        let template = match template {
            Some(t) => {
                ops = private_ops(&self.config, self.home_bytes)?;
                // Only the part of the chain inside the run's own /tmp is made per run; the
                // template has the rest.
                if let Ok(below) = workspace.strip_prefix("/tmp") {
                    let mut at = PathBuf::from("/tmp");
                    for c in below.components() {
                        at.push(c);
                        ops.push(MountOp::Dir(cstr(&at)?, 0o755));
                    }
                }
                ops.push(MountOp::Attach {
                    dst: cstr(workspace)?,
                    attrs: ws_attrs,
                });
                let meta = std::fs::metadata(workspace)?;
                Some(TemplateEnter {
                    host: t.host.as_raw_fd(),
                    view: t.view.as_raw_fd(),
                    workspace: cstr(workspace)?,
                    identity: (
                        std::os::unix::fs::MetadataExt::dev(&meta),
                        std::os::unix::fs::MetadataExt::ino(&meta),
                    ),
                    _template: t,
                })
            }
            None => {
                ops = built.ops.clone();
                if let (Some((_, c)), Some(i)) = (session, built.tmp_op) {
                    ops[i] = MountOp::Bind {
                        src: host(c.dir.path())?,
                        dst: CString::new("/tmp").expect("static path"),
                        attrs: MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                    };
                }
                dir_chain(&mut ops, workspace)?;
                ops.push(MountOp::Bind {
                    src: host(workspace)?,
                    dst: cstr(workspace)?,
                    attrs: ws_attrs,
                });
                None
            }
        };
        mask_ops(&mut ops, workspace, masks, ws_attrs, template.is_some())?;
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
        // A network namespace from the pool when one is ready; else the run's first child
        // creates a plain one (what the pool saves is exactly that creation, ~0.4 ms), or a
        // gated one is made here: a networked run's only way out is the executor's gate.
        let (netns, gate) = if built.profile.network {
            let gated = match self.gated.as_ref().and_then(|p| p.take()) {
                Some(g) => g,
                None => make_gated(userns, &self.gated_plan)?,
            };
            (Netns::Enter(gated.ns), Some(gated.sockets))
        } else if let Some(shared) = session.and_then(|(_, c)| c.netns.as_ref()) {
            (Netns::Enter(shared.try_clone()?), None)
        } else {
            match self.netns.as_ref().and_then(|p| p.take()) {
                Some(fd) => (Netns::Enter(fd), None),
                None => (Netns::New, None),
            }
        };
        let setup = SandboxSetup {
            userns: userns.as_raw_fd(),
            loopback: matches!(netns, Netns::New),
            netns,
            template,
            session: session.map(|(s, c)| SessionEnter {
                mnt: c.mnt.as_raw_fd(),
                ipc: c.ipc.as_raw_fd(),
                _session: s.clone(),
            }),
            stage: cstr(&self.config.stage)?,
            ops,
            cwd: cstr(cwd)?,
            landlock: (landlock.handled_fs != 0).then_some(landlock),
            seccomp: built.seccomp.clone(),
            executor: self.executor.as_raw_fd(),
        };
        Ok((setup, gate))
    }
}

/// The policy's masks in the workspace: pins first (the binds below then land inside them,
/// and the pins' parents before their children, or a later pin would cover an earlier one's
/// mounts), protected paths read-only, redacted copies, hidden paths covered. A template's run
/// writes its redacted copies in a tmpfs of its own ([`SCRATCH`]), sealed once they are.
fn mask_ops(
    ops: &mut Vec<MountOp>,
    workspace: &Path,
    masks: &Masks,
    ws_attrs: u64,
    template: bool,
) -> io::Result<()> {
    for rel in &masks.pinned {
        let p = beneath(workspace, rel)?;
        ops.push(MountOp::Bind {
            src: cstr(&p)?,
            dst: cstr(&p)?,
            attrs: ws_attrs,
        });
    }
    let masked = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    for rel in &masks.protected {
        let p = beneath(workspace, rel)?;
        ops.push(MountOp::Bind {
            src: cstr(&p)?,
            dst: cstr(&p)?,
            attrs: masked,
        });
    }
    let (dir, scratch) = if template {
        (SCRATCH, Some(CString::new(SCRATCH).expect("static path")))
    } else {
        ("/.toolgate", None)
    };
    if let Some(scratch) = scratch.as_ref().filter(|_| !masks.redacted.is_empty()) {
        // Whole pages per file, and room for the directory itself.
        let bytes: usize = masks
            .redacted
            .iter()
            .map(|(_, data)| data.len().div_ceil(4096) * 4096 + 4096)
            .sum::<usize>()
            + 4096;
        ops.push(MountOp::Tmpfs {
            dst: scratch.clone(),
            options: CString::new(format!(
                "size={bytes},nr_inodes={},mode=0755",
                masks.redacted.len() + 8
            ))
            .expect("no NUL"),
        });
    }
    for (i, (rel, data)) in masks.redacted.iter().enumerate() {
        let copy = cstr(Path::new(&format!("{dir}/redacted-{i}")))?;
        ops.push(MountOp::Content {
            path: copy.clone(),
            data: data.clone(),
        });
        ops.push(MountOp::Bind {
            src: copy,
            dst: cstr(&beneath(workspace, rel)?)?,
            attrs: masked,
        });
    }
    if let Some(scratch) = scratch.filter(|_| !masks.redacted.is_empty()) {
        ops.push(MountOp::Seal(scratch));
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
    Ok(())
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
        tmp_op: None,
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
    built.tmp_op = built
        .ops
        .iter()
        .position(|op| matches!(op, MountOp::Tmpfs { dst, .. } if dst.as_bytes() == b"/tmp"));
    built.landlock = fixed_landlock(profile, config, fixed, abi).map_err(|e| e.to_string())?;
    built.seccomp = seccomp();
    Ok(built)
}
