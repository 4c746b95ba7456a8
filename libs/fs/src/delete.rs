//! Deleting files, symlinks and directories (a whole tree when asked).
//!
//! The target's parent is opened beneath the root like a write's; the final name is never
//! followed, so deleting a symlink removes the link, never what it points to. A tree is
//! removed by walking directory handles (each child opened relative to its parent's handle
//! with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV`), never by resolving path
//! strings again: a directory swapped for a symlink while the walk runs is removed as a link,
//! and nothing outside the tree is ever reached. Before anything is removed, the tree is
//! walked once to check every entry against the deny, hidden and protected globs and the
//! entry bound, so a refused tree is left whole.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::path::{Sha256, WorkspacePath};
use crate::read::hash_file;
use crate::workspace::{Access, BENEATH_NO_SYMLINKS, EntryKind, HiddenPaths, Workspace};
use crate::write::{DirLock, sync_dir};

/// Most directory levels a recursive deletion descends (each level holds one handle open).
pub const MAX_DELETE_DEPTH: usize = 256;

/// A deletion request.
#[derive(Debug, Clone)]
pub struct DeleteRequest {
    /// What to delete: a file, a symlink (the link itself) or a directory.
    pub path: WorkspacePath,
    /// Remove a directory with everything beneath it; without it only an empty one.
    pub recursive: bool,
    /// Succeed (with `deleted = false`) when nothing exists at the path.
    pub missing_ok: bool,
    /// Fail with `Conflict` unless the file (a regular file only) has this sha256.
    pub expected_sha256: Option<Sha256>,
}

/// What a deletion did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteOutcome {
    /// The canonical path of what was deleted, in the caller's style.
    pub path: String,
    /// Whether something was deleted (false only with `missing_ok` and nothing there).
    pub deleted: bool,
    /// What the path was, when it existed.
    pub kind: Option<EntryKind>,
    /// Files, symlinks and other non-directories removed.
    pub files: u64,
    /// Directories removed (the target included).
    pub dirs: u64,
    /// Sum of the sizes of the regular files removed.
    pub bytes: u64,
}

/// Lookups of one component beneath a handle: no symlink, no other mount.
const CHILD: ResolveFlags = BENEATH_NO_SYMLINKS.union(ResolveFlags::NO_XDEV);
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW);

/// One directory being walked: its stream (which owns its handle), its name in its parent,
/// and its canonical workspace-relative path.
struct Frame {
    fd: OwnedFd,
    dir: Dir,
    name: OsString,
    canon: PathBuf,
}

impl Frame {
    fn new(fd: OwnedFd, name: OsString, canon: PathBuf, shown: &str) -> Result<Frame> {
        // The stream reads through its own open file description; `fd` is for the syscalls.
        let dir = Dir::read_from(&fd).map_err(|e| Error::from_errno("list", shown, e))?;
        Ok(Frame {
            fd,
            dir,
            name,
            canon,
        })
    }
}

impl Workspace {
    /// Deletes a file, a symlink, an empty directory or (with `recursive`) a tree.
    pub fn delete(&self, req: &DeleteRequest) -> Result<DeleteOutcome> {
        self.delete_hiding(req, &HiddenPaths::none())
    }

    /// [`Self::delete`] refusing also a tree that holds something `hidden` matches: a
    /// deletion never destroys what the policy does not let the caller see.
    pub fn delete_hiding(
        &self,
        req: &DeleteRequest,
        hidden: &HiddenPaths,
    ) -> Result<DeleteOutcome> {
        let mut r = self.request(&req.path)?;
        if r.rel.components().all(|c| {
            matches!(
                c,
                std::path::Component::CurDir | std::path::Component::RootDir
            )
        }) {
            return Err(Error::InvalidPath {
                path: r.shown.to_owned(),
                why: "the workspace root itself cannot be deleted; name something inside it",
            });
        }
        let must_be_dir = std::mem::take(&mut r.trailing_slash);
        let (parent, name) = self.split(&r)?;
        self.precheck_hiding(&r, Access::Write, Some(hidden))?;
        let missing = |e: Error| match e {
            Error::NotFound { .. } if req.missing_ok => Ok(None),
            other => Err(other),
        };
        let Some((dir, dir_canon)) = self
            .open_dir(r.shown, &parent, false)
            .map(Some)
            .or_else(missing)?
        else {
            return Ok(self.nothing(&r, &parent.join(name)));
        };
        let canon = dir_canon.join(name);
        self.check_hiding(r.shown, &canon, Access::Write, Some(hidden))?;
        let stat = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) if req.missing_ok => return Ok(self.nothing(&r, &canon)),
            Err(e) => return Err(Error::from_errno("stat", r.shown, e)),
        };
        let kind = EntryKind::of(&stat);
        let shown_path = self.render(r.style, &canon);
        if kind != EntryKind::Dir {
            if must_be_dir {
                return Err(Error::NotADirectory {
                    path: r.shown.to_owned(),
                });
            }
            self.unlink_one(&dir, name, &stat, r.shown, req.expected_sha256)?;
            let bytes = if kind == EntryKind::File {
                stat.st_size as u64
            } else {
                0
            };
            return Ok(DeleteOutcome {
                path: shown_path,
                deleted: true,
                kind: Some(kind),
                files: 1,
                dirs: 0,
                bytes,
            });
        }
        if req.expected_sha256.is_some() {
            return Err(Error::InvalidRequest {
                field: "expected_sha256",
                why: format!(
                    "`{}` is a directory; a sha256 applies to a file only",
                    r.shown
                ),
            });
        }
        let counts = if req.recursive {
            let sub = self.open_same_dir(&dir, name, &stat, r.shown)?;
            // Refuse before removing anything: a tree holding a protected or hidden path, or
            // more entries than a deletion may take, stays whole.
            self.check_tree(sub, &canon, r.shown, hidden)?;
            let sub = self.open_same_dir(&dir, name, &stat, r.shown)?;
            self.remove_tree(&dir, name, sub, &canon, r.shown, hidden)?
        } else {
            self.rmdir(&dir, name, &stat, r.shown)?;
            Counts {
                dirs: 1,
                ..Counts::default()
            }
        };
        sync_dir(dir.as_fd());
        Ok(DeleteOutcome {
            path: shown_path,
            deleted: true,
            kind: Some(EntryKind::Dir),
            files: counts.files,
            dirs: counts.dirs,
            bytes: counts.bytes,
        })
    }

    fn nothing(&self, r: &crate::workspace::Request<'_>, canon: &Path) -> DeleteOutcome {
        DeleteOutcome {
            path: self.render(r.style, canon),
            deleted: false,
            kind: None,
            files: 0,
            dirs: 0,
            bytes: 0,
        }
    }

    /// Removes one non-directory entry, still the inode that was checked, under the
    /// directory's lock (so a write's rename cannot slip in between the check and the unlink).
    fn unlink_one(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        stat: &Stat,
        shown: &str,
        expected: Option<Sha256>,
    ) -> Result<()> {
        if let Some(expected) = expected {
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(Error::NotAFile {
                    path: shown.to_owned(),
                    kind: crate::workspace::special_kind(stat),
                });
            }
            let limit = self.limits().hash_limit;
            if stat.st_size as u64 > limit {
                return Err(Error::TooLarge {
                    path: shown.to_owned(),
                    size: stat.st_size as u64,
                    limit,
                });
            }
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| Error::from_errno("open", shown, e))?;
            let now = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", shown, e))?;
            let actual = if same_inode(&now, stat) {
                hash_file(File::from(fd), shown)?.to_hex()
            } else {
                "changed during the deletion".to_owned()
            };
            if actual != expected.to_hex() {
                return Err(Error::Conflict {
                    path: shown.to_owned(),
                    expected: expected.to_hex(),
                    actual,
                });
            }
        }
        let lock = DirLock::acquire(dir.as_fd(), shown)?;
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(now)
                if same_inode(&now, stat) && (expected.is_none() || same_content(&now, stat)) => {}
            Ok(_) | Err(Errno::NOENT) => {
                return Err(Error::Conflict {
                    path: shown.to_owned(),
                    expected: "the entry that was checked".to_owned(),
                    actual: "it was replaced during the deletion; look again and retry".to_owned(),
                });
            }
            Err(e) => return Err(Error::from_errno("stat", shown, e)),
        }
        rustix::fs::unlinkat(dir, name, AtFlags::empty())
            .map_err(|e| Error::from_errno("delete", shown, e))?;
        drop(lock);
        sync_dir(dir.as_fd());
        Ok(())
    }

    /// Removes an empty directory; one with entries is `DirectoryNotEmpty`.
    fn rmdir(&self, dir: &OwnedFd, name: &OsStr, stat: &Stat, shown: &str) -> Result<()> {
        // Confirms it is still the directory that was checked (not a swapped-in symlink).
        drop(self.open_same_dir(dir, name, stat, shown)?);
        match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(()),
            Err(Errno::NOTEMPTY | Errno::EXIST) => Err(Error::DirectoryNotEmpty {
                path: shown.to_owned(),
            }),
            Err(e) => Err(Error::from_errno("remove directory", shown, e)),
        }
    }

    /// Opens `name` in `dir` as a directory, one component, no symlink, no other mount,
    /// and checks it is the inode that was looked at.
    fn open_same_dir(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        stat: &Stat,
        shown: &str,
    ) -> Result<OwnedFd> {
        let fd = self
            .openat2(dir.as_fd(), Path::new(name), DIR_FLAGS, CHILD)
            .map_err(|e| match e {
                Errno::XDEV => Error::AccessDenied {
                    path: format!("{shown} (another file system is mounted there)"),
                },
                other => Error::from_errno("open directory", shown, other),
            })?;
        let now = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", shown, e))?;
        if !same_inode(&now, stat) {
            return Err(Error::Conflict {
                path: shown.to_owned(),
                expected: "the directory that was checked".to_owned(),
                actual: "it was replaced during the deletion; look again and retry".to_owned(),
            });
        }
        Ok(fd)
    }

    /// The globs on one entry of a tree being deleted (its ancestors already passed).
    fn check_entry(&self, shown: &str, canon: &Path, hidden: &HiddenPaths) -> Result<()> {
        if self.entry_denied(canon, Some(hidden)) {
            // The entry's name is not revealed: the caller may not know it exists.
            return Err(Error::Denied {
                path: shown.to_owned(),
                canonical: format!(
                    "{} (the tree holds a path the workspace policy denies; delete its other entries one by one)",
                    canon.parent().unwrap_or(Path::new("")).display()
                ),
            });
        }
        if self.entry_protected(canon) {
            return Err(Error::Protected {
                path: shown.to_owned(),
                canonical: canon.to_string_lossy().into_owned(),
            });
        }
        Ok(())
    }

    /// Walks the tree beneath `top` once, checking every entry and the bounds.
    fn check_tree(
        &self,
        top: OwnedFd,
        canon: &Path,
        shown: &str,
        hidden: &HiddenPaths,
    ) -> Result<()> {
        let max = self.limits().max_delete_entries;
        let mut seen = 0usize;
        let mut stack = vec![Frame::new(top, OsString::new(), canon.to_owned(), shown)?];
        loop {
            let depth = stack.len();
            let Some(frame) = stack.last_mut() else {
                break;
            };
            let Some(entry) = frame.dir.read() else {
                stack.pop();
                continue;
            };
            let entry = entry.map_err(|e| Error::from_errno("list", shown, e))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            if name == "." || name == ".." {
                continue;
            }
            seen += 1;
            if seen > max {
                return Err(too_many(shown, seen, max));
            }
            let path = frame.canon.join(&name);
            self.check_entry(shown, &path, hidden)?;
            let mut kind = entry.file_type();
            let parent = frame.fd.as_fd();
            if kind == FileType::Unknown {
                kind = rustix::fs::statat(parent, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                    .map_or(FileType::Unknown, |st| FileType::from_raw_mode(st.st_mode));
            }
            if kind != FileType::Directory {
                continue;
            }
            if depth >= MAX_DELETE_DEPTH {
                return Err(too_deep(shown));
            }
            let child = match self.openat2(parent, Path::new(&name), DIR_FLAGS, CHILD) {
                Ok(fd) => fd,
                // Gone or swapped since it was listed: the removal pass deals with what is there.
                Err(Errno::NOENT | Errno::LOOP | Errno::NOTDIR) => continue,
                Err(Errno::XDEV) => return Err(mounted(shown, &path)),
                Err(e) => return Err(Error::from_errno("open directory", shown, e)),
            };
            stack.push(Frame::new(child, name, path, shown)?);
        }
        Ok(())
    }

    /// Removes the tree `top` (the directory `name` in `parent`) by its handles, depth first,
    /// checking every entry again (the tree may have changed since the check).
    fn remove_tree(
        &self,
        parent: &OwnedFd,
        name: &OsStr,
        top: OwnedFd,
        canon: &Path,
        shown: &str,
        hidden: &HiddenPaths,
    ) -> Result<Counts> {
        let max = self.limits().max_delete_entries;
        let mut counts = Counts::default();
        let mut seen = 0usize;
        let mut stack = vec![Frame::new(top, name.to_owned(), canon.to_owned(), shown)?];
        // Whether the top frame's stream reached its end once since it last removed something:
        // a second pass finds entries a concurrent creator added, or the stream skipped.
        let mut clean_pass = vec![false];
        loop {
            let depth = stack.len();
            let Some(frame) = stack.last_mut() else {
                break;
            };
            let Some(entry) = frame.dir.read() else {
                if !clean_pass[depth - 1] {
                    // Read the directory once more from the start.
                    clean_pass[depth - 1] = true;
                    frame.dir.rewind();
                    continue;
                }
                let done = stack
                    .pop()
                    .unwrap_or_else(|| unreachable!("the stack is not empty"));
                clean_pass.pop();
                let owner = stack.last().map_or(parent.as_fd(), |f| f.fd.as_fd());
                match rustix::fs::unlinkat(owner, &done.name, AtFlags::REMOVEDIR) {
                    Ok(()) => counts.dirs += 1,
                    Err(Errno::NOENT) => {}
                    Err(Errno::NOTEMPTY | Errno::EXIST) => {
                        return Err(Error::DirectoryNotEmpty {
                            path: format!(
                                "{shown} (`{}` kept getting new entries during the deletion)",
                                done.canon.display()
                            ),
                        });
                    }
                    Err(e) => return Err(Error::from_errno("remove directory", shown, e)),
                }
                continue;
            };
            let entry = entry.map_err(|e| Error::from_errno("list", shown, e))?;
            let entry_name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            if entry_name == "." || entry_name == ".." {
                continue;
            }
            clean_pass[depth - 1] = false;
            seen += 1;
            if seen > max {
                return Err(too_many(shown, seen, max));
            }
            let path = frame.canon.join(&entry_name);
            self.check_entry(shown, &path, hidden)?;
            let fd: BorrowedFd<'_> = frame.fd.as_fd();
            let st = match rustix::fs::statat(fd, entry_name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
            {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(Error::from_errno("stat", shown, e)),
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                match rustix::fs::unlinkat(fd, entry_name.as_os_str(), AtFlags::empty()) {
                    Ok(()) => {
                        counts.files += 1;
                        if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile {
                            counts.bytes += st.st_size as u64;
                        }
                    }
                    Err(Errno::NOENT) => {}
                    // Swapped for a directory since the stat: the next pass descends into it.
                    Err(Errno::ISDIR) => {}
                    Err(e) => return Err(Error::from_errno("delete", shown, e)),
                }
                continue;
            }
            if depth >= MAX_DELETE_DEPTH {
                return Err(too_deep(shown));
            }
            let child = match self.openat2(fd, Path::new(&entry_name), DIR_FLAGS, CHILD) {
                Ok(child) => child,
                Err(Errno::NOENT) => continue,
                // Swapped for a symlink or a file since the stat: removed as such next pass.
                Err(Errno::LOOP | Errno::NOTDIR) => continue,
                Err(Errno::XDEV) => return Err(mounted(shown, &path)),
                Err(e) => return Err(Error::from_errno("open directory", shown, e)),
            };
            stack.push(Frame::new(child, entry_name, path, shown)?);
            clean_pass.push(false);
        }
        Ok(counts)
    }
}

/// What a tree's removal took away.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    files: u64,
    dirs: u64,
    bytes: u64,
}

#[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
fn same_inode(a: &Stat, b: &Stat) -> bool {
    (a.st_dev as u64, a.st_ino as u64) == (b.st_dev as u64, b.st_ino as u64)
}

/// The file was not written since it was hashed.
fn same_content(a: &Stat, b: &Stat) -> bool {
    (
        a.st_size,
        a.st_mtime,
        a.st_mtime_nsec,
        a.st_ctime,
        a.st_ctime_nsec,
    ) == (
        b.st_size,
        b.st_mtime,
        b.st_mtime_nsec,
        b.st_ctime,
        b.st_ctime_nsec,
    )
}

fn too_many(shown: &str, seen: usize, max: usize) -> Error {
    Error::TooLarge {
        path: format!("{shown} (entries in the tree; delete its subdirectories one at a time)"),
        size: seen as u64,
        limit: max as u64,
    }
}

fn too_deep(shown: &str) -> Error {
    Error::TooLarge {
        path: format!(
            "{shown} (directory levels in the tree; delete its deepest subdirectories first)"
        ),
        size: MAX_DELETE_DEPTH as u64 + 1,
        limit: MAX_DELETE_DEPTH as u64,
    }
}

fn mounted(shown: &str, canon: &Path) -> Error {
    Error::AccessDenied {
        path: format!(
            "{shown} (`{}` is another file system mounted in the tree; it is never deleted through)",
            canon.display()
        ),
    }
}
