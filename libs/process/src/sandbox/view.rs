//! The mount half of a run's view: what the host offers for the fixed part, probed once, and
//! the mount steps that build it, plus the path helpers the per-run part shares.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::SandboxConfig;
use crate::sys::sandbox::{MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, MountOp};

/// The empty file hidden files are covered with, in the view's own root.
pub(super) const EMPTY_FILE: &str = "/.toolgate/empty";
/// The empty directory (mode 0555) hidden directories are covered with, in the view's own root.
pub(super) const EMPTY_DIR: &str = "/.toolgate/empty.d";

/// What the host offers for the fixed part of every view, probed once.
#[derive(Debug)]
pub(super) struct FixedView {
    /// `(path, Some(symlink target))` or `(path, None)` for a directory to bind.
    pub(super) system: Vec<(PathBuf, Option<PathBuf>)>,
    /// Files to hide that exist (in the system and read-only paths).
    hidden: Vec<(PathBuf, bool)>,
    /// Read-only directories that exist and this user can reach.
    pub(super) read_only: Vec<PathBuf>,
}

impl FixedView {
    pub(super) fn probe(config: &SandboxConfig) -> FixedView {
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

pub(super) fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// A host path as the child sees it after the pivot.
pub(super) fn host(p: &Path) -> io::Result<CString> {
    let mut s = b"/oldroot".to_vec();
    s.extend_from_slice(p.as_os_str().as_bytes());
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL"))
}

/// `root/rel`, refusing anything but plain components in `rel`.
pub(super) fn beneath(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mask path `{}` is not a plain relative path", rel.display()),
        ));
    }
    Ok(root.join(rel))
}

/// `mkdir` of every component of the absolute `path`, outermost first.
pub(super) fn dir_chain(ops: &mut Vec<MountOp>, path: &Path) -> io::Result<()> {
    let mut at = PathBuf::from("/");
    for c in path.components() {
        if let Component::Normal(n) = c {
            at.push(n);
            ops.push(MountOp::Dir(cstr(&at)?, 0o755));
        }
    }
    Ok(())
}

pub(super) fn fixed_ops(
    config: &SandboxConfig,
    fixed: &FixedView,
    home_bytes: u64,
) -> io::Result<Vec<MountOp>> {
    let c = |s: &str| CString::new(s).expect("static path");
    let mut ops = vec![
        MountOp::Dir(c("/.toolgate"), 0o755),
        MountOp::File(c(EMPTY_FILE)),
        MountOp::Dir(c(EMPTY_DIR), 0o555),
        // The private /tmp first: a toolchain (or its hidden credential files) that lives under
        // the host's /tmp is then bound inside it instead of vanishing beneath it, which made
        // the masks over its files fail and every run refused.
        MountOp::Dir(c("/tmp"), 0o1777),
        tmp_tmpfs(config),
    ];
    host_ops(&mut ops, fixed)?;
    dev_ops(&mut ops);
    ops.push(MountOp::Dir(c("/dev/shm"), 0o1777));
    ops.push(shm_tmpfs(config));
    ops.push(MountOp::Dir(c("/proc"), 0o555));
    ops.push(MountOp::Proc(c("/proc")));
    dir_chain(&mut ops, &config.home)?;
    ops.push(home_tmpfs(config, home_bytes)?);
    Ok(ops)
}

/// Where a template run's redacted copies are written (a tmpfs of its own, sealed once they
/// are); the template has the empty mount point.
pub(super) const SCRATCH: &str = "/.toolgate/run";

/// Where the template keeps a `proc` (covered by an empty directory) so that its runs may
/// mount one of their own: the kernel lets a user namespace mount `proc` only where one is
/// already fully visible in the mount namespace.
const HIDDEN_PROC: &str = "/.toolgate/proc";

/// The fixed part of every view as a runner's template builds it once: everything of
/// [`fixed_ops`] but the mounts each run must have its own of (`/tmp`, `/dev/shm`, `/proc`,
/// `HOME`), whose mount points it prepares, plus the mount points of `workspace`'s chain.
/// `None` when a fixed path lies where a run's own mount would cover it (a toolchain under
/// `/tmp`): only the whole per-run build keeps that order.
pub(super) fn template_ops(
    config: &SandboxConfig,
    fixed: &FixedView,
    workspace: Option<&Path>,
) -> io::Result<Option<Vec<MountOp>>> {
    let c = |s: &str| CString::new(s).expect("static path");
    let per_run = [
        Path::new("/tmp"),
        Path::new("/dev"),
        Path::new("/proc"),
        Path::new("/.toolgate"),
        config.home.as_path(),
    ];
    let covered = |p: &Path| per_run.iter().any(|r| p.starts_with(r));
    let fixed_paths = fixed
        .system
        .iter()
        .map(|(p, _)| p)
        .chain(&fixed.read_only)
        .chain(fixed.hidden.iter().map(|(p, _)| p));
    if fixed_paths.into_iter().any(|p| covered(p)) {
        return Ok(None);
    }
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    let mut ops = vec![
        MountOp::Dir(c("/.toolgate"), 0o755),
        MountOp::File(c(EMPTY_FILE)),
        MountOp::Dir(c(EMPTY_DIR), 0o555),
        MountOp::Dir(c(SCRATCH), 0o755),
        MountOp::Dir(c(HIDDEN_PROC), 0o555),
        MountOp::Dir(c("/tmp"), 0o1777),
    ];
    host_ops(&mut ops, fixed)?;
    dev_ops(&mut ops);
    ops.push(MountOp::Dir(c("/dev/shm"), 0o1777));
    // Nothing is created in the shared /dev after this (Landlock forbids it too).
    ops.push(MountOp::Seal(c("/dev")));
    ops.push(MountOp::Dir(c("/proc"), 0o555));
    ops.push(MountOp::Bind {
        src: c("/oldroot/proc"),
        dst: c(HIDDEN_PROC),
        attrs: ro,
    });
    ops.push(MountOp::Bind {
        src: c(EMPTY_DIR),
        dst: c(HIDDEN_PROC),
        attrs: ro,
    });
    dir_chain(&mut ops, &config.home)?;
    // A workspace under a run's own mount gets its chain there, per run.
    if let Some(ws) = workspace.filter(|ws| !covered(ws)) {
        dir_chain(&mut ops, ws)?;
    }
    Ok(Some(ops))
}

/// The mounts every run of a template has its own of, in [`fixed_ops`]'s order.
pub(super) fn private_ops(config: &SandboxConfig, home_bytes: u64) -> io::Result<Vec<MountOp>> {
    let c = |s: &str| CString::new(s).expect("static path");
    Ok(vec![
        tmp_tmpfs(config),
        shm_tmpfs(config),
        MountOp::Proc(c("/proc")),
        home_tmpfs(config, home_bytes)?,
    ])
}

fn tmp_tmpfs(config: &SandboxConfig) -> MountOp {
    MountOp::Tmpfs {
        dst: CString::new("/tmp").expect("static path"),
        options: CString::new(format!(
            "size={},nr_inodes={},mode=1777",
            config.tmp_bytes, config.tmpfs_inodes
        ))
        .expect("no NUL"),
    }
}

fn shm_tmpfs(config: &SandboxConfig) -> MountOp {
    MountOp::Tmpfs {
        dst: CString::new("/dev/shm").expect("static path"),
        options: CString::new(format!(
            "size={},nr_inodes={},mode=1777",
            config.shm_bytes, config.tmpfs_inodes
        ))
        .expect("no NUL"),
    }
}

fn home_tmpfs(config: &SandboxConfig, home_bytes: u64) -> io::Result<MountOp> {
    Ok(MountOp::Tmpfs {
        dst: cstr(&config.home)?,
        options: CString::new(format!(
            "size={home_bytes},nr_inodes={},mode=0700",
            config.tmpfs_inodes
        ))
        .expect("no NUL"),
    })
}

/// The host's system and read-only paths bound read-only, and the hidden ones covered.
fn host_ops(ops: &mut Vec<MountOp>, fixed: &FixedView) -> io::Result<()> {
    let c = |s: &str| CString::new(s).expect("static path");
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    for (path, link) in &fixed.system {
        match link {
            Some(target) => ops.push(MountOp::Symlink {
                target: cstr(target)?,
                path: cstr(path)?,
            }),
            None => {
                dir_chain(ops, path)?;
                ops.push(MountOp::Bind {
                    src: host(path)?,
                    dst: cstr(path)?,
                    attrs: ro,
                });
            }
        }
    }
    for path in &fixed.read_only {
        dir_chain(ops, path)?;
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
    Ok(())
}

/// A /dev of the few harmless devices, bound from the host (a user namespace cannot mknod).
fn dev_ops(ops: &mut Vec<MountOp>) {
    let c = |s: &str| CString::new(s).expect("static path");
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
}
