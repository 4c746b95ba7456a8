//! Resolution beneath the root: `openat2` confined by the kernel, canonical paths of open
//! handles, reopening what was resolved, and opening (or creating) parent directories.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use super::Workspace;
use super::request::{Request, Style};
use super::rules::{Access, HiddenPaths};
use crate::error::{Error, Result};
use crate::path::WorkspacePath;

/// A resolved path: a handle to what was opened and its canonical workspace-relative path.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub fd: OwnedFd,
    pub stat: Stat,
    pub canon: PathBuf,
}

/// The canonical form of a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// Workspace-relative, symlinks resolved (`.` for the root): what policies match.
    pub relative: String,
    /// The same path in the caller's style (relative, or under the root or alias used).
    pub display: String,
    /// Whether the whole path exists (otherwise only a prefix was resolved).
    pub exists: bool,
}

/// The kernel-enforced confinement used for every lookup that may follow symlinks.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Confinement for paths already known to be canonical: any symlink means a concurrent swap.
pub(crate) const BENEATH_NO_SYMLINKS: ResolveFlags = BENEATH.union(ResolveFlags::NO_SYMLINKS);

impl Workspace {
    /// `openat2` beneath the root, retrying the `EAGAIN` the kernel returns when a
    /// concurrent rename makes a `..` check inconclusive.
    pub(crate) fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        flags: OFlags,
        resolve: ResolveFlags,
    ) -> std::result::Result<OwnedFd, Errno> {
        // openat2, unlike openat, refuses O_PATH combined with other access flags.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
                Err(Errno::AGAIN | Errno::INTR) if tries < 64 => tries += 1,
                other => return other,
            }
        }
    }

    /// The canonical workspace-relative path of an open handle.
    pub(crate) fn canonical(&self, fd: BorrowedFd<'_>, shown: &str) -> Result<PathBuf> {
        let abs = fd_path(fd).map_err(|source| Error::Io {
            op: "find the canonical path of",
            path: shown.to_owned(),
            source,
        })?;
        // The kernel already guaranteed the handle is beneath the root; this only
        // turns its absolute name back into a relative one.
        match abs.strip_prefix(&self.real) {
            Ok(rel) => Ok(rel.to_path_buf()),
            Err(_) => Err(Error::OutsideWorkspace {
                path: shown.to_owned(),
            }),
        }
    }

    /// Resolves an existing path beneath the root to an `O_PATH` handle, checking the
    /// globs on its canonical path. `follow` decides whether a final symlink is followed.
    pub(crate) fn resolve(
        &self,
        req: &Request<'_>,
        follow: bool,
        access: Access,
    ) -> Result<Resolved> {
        self.resolve_hiding(req, follow, access, None)
    }

    /// [`Self::resolve`] with `hidden` treated as more deny globs, on the spelling and on
    /// the canonical path.
    pub(crate) fn resolve_hiding(
        &self,
        req: &Request<'_>,
        follow: bool,
        access: Access,
        hidden: Option<&HiddenPaths>,
    ) -> Result<Resolved> {
        self.precheck_hiding(req, access, hidden)?;
        let mut flags = OFlags::PATH;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        let kernel = req.kernel_path();
        let mut attempt = 0;
        let (fd, canon) = loop {
            let fd = self
                .openat2(self.root_fd(), &kernel, flags, BENEATH)
                .map_err(|e| Error::from_errno("open", req.shown, e))?;
            match self.canonical(fd.as_fd(), req.shown) {
                Ok(canon) => break (fd, canon),
                // A concurrent write renamed a new file over the one just opened: the path
                // names the new one now.
                Err(e) if replaced(&e) && attempt < RENAME_RETRIES => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", req.shown, e))?;
        self.check_hiding(req.shown, &canon, access, hidden)?;
        Ok(Resolved { fd, stat, canon })
    }

    /// The canonical workspace-relative path a request names, for policy decisions and
    /// approval digests, without opening anything for reading or writing.
    ///
    /// Symlinks beneath the root are resolved; for a path that does not exist yet, the
    /// longest existing prefix is resolved and the remaining plain names are appended.
    /// Escapes, loops and denied paths fail exactly as the operations would.
    pub fn canonicalize(&self, path: &WorkspacePath) -> Result<Canonical> {
        self.canonicalize_as(path, Access::Read)
    }

    /// [`Workspace::canonicalize`] for a path about to be written or created: protected
    /// globs refuse it too, so a write the workspace would refuse is refused before anyone
    /// is asked to approve it.
    pub fn canonicalize_for_write(&self, path: &WorkspacePath) -> Result<Canonical> {
        self.canonicalize_as(path, Access::Write)
    }

    /// [`Workspace::canonicalize_for_write`] for a path whose final component is acted on
    /// itself, never followed (a deletion): the parent is resolved, the name appended. The
    /// root itself has no such form and is `InvalidPath`.
    pub fn canonicalize_entry(&self, path: &WorkspacePath) -> Result<Canonical> {
        let req = self.request(path)?;
        let Some(Component::Normal(name)) = req.rel.components().next_back() else {
            return Err(Error::InvalidPath {
                path: req.shown.to_owned(),
                why: "the path must end in a name inside the workspace (not `.`, `..` or the root)",
            });
        };
        self.precheck(&req, Access::Write)?;
        let parent = Request {
            rel: req.rel.parent().unwrap_or(Path::new("")).to_path_buf(),
            trailing_slash: false,
            ..req.clone()
        };
        let dir = self.canonical_request(&parent, Access::Write)?;
        let mut canon = PathBuf::from(if dir.relative == "." {
            ""
        } else {
            &dir.relative
        });
        canon.push(name);
        self.check(req.shown, &canon, Access::Write)?;
        let exists = dir.exists
            && rustix::fs::statat(
                self.root_fd(),
                &canon,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .is_ok();
        Ok(Canonical {
            display: self.render(req.style, &canon),
            relative: self.render(Style::Relative, &canon),
            exists,
        })
    }

    fn canonicalize_as(&self, path: &WorkspacePath, access: Access) -> Result<Canonical> {
        let req = self.request(path)?;
        self.canonical_request(&req, access)
    }

    fn canonical_request(&self, req: &Request<'_>, access: Access) -> Result<Canonical> {
        let req = req.clone();
        self.precheck(&req, access)?;
        let comps: Vec<Component<'_>> = req.rel.components().collect();
        for keep in (0..=comps.len()).rev() {
            let prefix: PathBuf = comps[..keep].iter().collect();
            let kernel = if prefix.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                prefix
            };
            let mut attempt = 0;
            let opened = loop {
                match self.openat2(self.root_fd(), &kernel, OFlags::PATH, BENEATH) {
                    Ok(fd) => match self.canonical(fd.as_fd(), req.shown) {
                        Ok(canon) => break Ok(canon),
                        Err(e) if replaced(&e) && attempt < RENAME_RETRIES => attempt += 1,
                        Err(e) => return Err(e),
                    },
                    Err(e) => break Err(e),
                }
            };
            match opened {
                Ok(canon) => {
                    let mut canon = canon;
                    for c in &comps[keep..] {
                        match c {
                            Component::Normal(n) => canon.push(n),
                            Component::CurDir => {}
                            // `..` after a missing directory names nothing that exists.
                            _ => {
                                return Err(Error::NotFound {
                                    path: req.shown.to_owned(),
                                });
                            }
                        }
                    }
                    self.check(req.shown, &canon, access)?;
                    return Ok(Canonical {
                        display: self.render(req.style, &canon),
                        relative: self.render(Style::Relative, &canon),
                        exists: keep == comps.len(),
                    });
                }
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(Error::from_errno("resolve", req.shown, e)),
            }
        }
        Err(Error::NotFound {
            path: req.shown.to_owned(),
        })
    }

    /// Opens an already resolved object again with real access flags, by its canonical
    /// path with no symlinks allowed, and checks it is still the same inode.
    pub(crate) fn reopen(&self, r: &Resolved, shown: &str, flags: OFlags) -> Result<OwnedFd> {
        let rel = if r.canon.as_os_str().is_empty() {
            Path::new(".")
        } else {
            r.canon.as_path()
        };
        // Through the handle's own /proc link: the same inode that was resolved and checked,
        // whatever has been renamed over its path since (a concurrent write replaces files by
        // rename). Without /proc, by path, confined as the resolution was.
        let fd = match rustix::fs::open(
            format!("/proc/self/fd/{}", r.fd.as_raw_fd()),
            flags | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => self
                .openat2(
                    self.root_fd(),
                    rel,
                    flags | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                    BENEATH_NO_SYMLINKS,
                )
                .map_err(|e| Error::from_errno("open", shown, e))?,
        };
        let now = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", shown, e))?;
        if (now.st_dev, now.st_ino) != (r.stat.st_dev, r.stat.st_ino) {
            return Err(Error::Io {
                op: "open",
                path: shown.to_owned(),
                source: std::io::Error::other(
                    "the file was replaced while it was being opened; retry",
                ),
            });
        }
        Ok(fd)
    }

    /// Opens a directory (following symlinks beneath the root) for use as a parent,
    /// creating missing components when `create` is set.
    pub(crate) fn open_dir(
        &self,
        shown: &str,
        rel: &Path,
        create: bool,
    ) -> Result<(OwnedFd, PathBuf)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let kernel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        match self.openat2(self.root_fd(), kernel, flags, BENEATH) {
            Ok(fd) => {
                let canon = self.canonical(fd.as_fd(), shown)?;
                return Ok((fd, canon));
            }
            Err(Errno::NOENT) if create => {}
            Err(e) => return Err(Error::from_errno("open directory", shown, e)),
        }
        let mut cur = self
            .openat2(self.root_fd(), Path::new("."), flags, BENEATH)
            .map_err(|e| Error::from_errno("open directory", shown, e))?;
        let mut prefix = PathBuf::new();
        for c in rel.components() {
            prefix.push(c);
            match self.openat2(self.root_fd(), &prefix, flags, BENEATH) {
                Ok(fd) => cur = fd,
                Err(Errno::NOENT) => {
                    let Component::Normal(name) = c else {
                        return Err(Error::NotFound {
                            path: shown.to_owned(),
                        });
                    };
                    let parent = self.canonical(cur.as_fd(), shown)?;
                    self.check(shown, &parent.join(name), Access::Write)?;
                    match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(Error::from_errno("create directory", shown, e)),
                    }
                    // A single fresh component relative to the parent handle, no symlinks:
                    // a concurrent swap to a symlink fails here instead of being followed.
                    cur = self
                        .openat2(cur.as_fd(), Path::new(name), flags, BENEATH_NO_SYMLINKS)
                        .map_err(|e| Error::from_errno("open directory", shown, e))?;
                }
                Err(e) => return Err(Error::from_errno("open directory", shown, e)),
            }
        }
        let canon = self.canonical(cur.as_fd(), shown)?;
        Ok((cur, canon))
    }
}

/// How often a lookup is repeated when a concurrent rename replaced what it opened.
const RENAME_RETRIES: u32 = 16;

/// Whether `e` says the object opened was unlinked (replaced by a rename) before its name was
/// read.
fn replaced(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The absolute path the kernel records for an open handle.
pub(super) fn fd_path(fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    // An unlinked object reads back as `... (deleted)`: it has no canonical path.
    if link.as_os_str().as_bytes().ends_with(b" (deleted)") || !link.is_absolute() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the object was removed while it was being opened",
        ));
    }
    Ok(link)
}
