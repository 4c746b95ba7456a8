//! What the workspace holds on disk: allocated bytes and entries, walked by directory handle,
//! for the disk write budget of runs (the executor compares a run's end, and samples taken
//! while it runs, with what was there when it started).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::masks::cache::DirKey;
use crate::workspace::{BENEATH_NO_SYMLINKS, Workspace};

/// Most entries one usage walk visits; a larger workspace cannot be measured (its runs are
/// refused with `TOO_LARGE`, as the run-mask walk refuses them).
pub const MAX_USAGE_WALK_ENTRIES: u64 = 4_000_000;

/// Most directory levels one usage walk descends (each holds a handle open).
pub const MAX_USAGE_WALK_DEPTH: usize = 512;

/// What the workspace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes allocated on disk (`st_blocks × 512`) by every entry, a multiply-linked file
    /// counted once.
    pub bytes: u64,
    /// Entries of every kind (files, directories, symlinks, others), the root excluded.
    pub files: u64,
}

/// A measurement of the workspace with what tells, without walking it again, that it still
/// holds: the inode and ctime of every directory the walk met (an entry created, removed or
/// renamed in one moves its ctime, which no unprivileged process can set back) and the free
/// blocks and inodes of the file system (a file growing or shrinking in place, which no
/// directory shows, moves them).
#[derive(Debug, Clone)]
pub struct UsageSnapshot {
    /// What the walk counted.
    pub usage: DiskUsage,
    /// `f_bfree`, `f_ffree` before the walk.
    free: (u64, u64),
    /// Every directory met, the root first, by its path beneath the root.
    dirs: Vec<(PathBuf, DirKey)>,
}

/// One component beneath a handle: no symlink, no other mount.
const CHILD: ResolveFlags = BENEATH_NO_SYMLINKS.union(ResolveFlags::NO_XDEV);
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW);

impl Workspace {
    /// Measures the workspace. With `stop_above`, the walk stops as soon as either count
    /// exceeds it and returns what it counted so far (already above): a sample only needs to
    /// know whether a budget is exceeded. Directories on another file system (mounts) and
    /// symlinks' targets are not entered; a directory that cannot be read counts as itself.
    pub fn disk_usage(&self, stop_above: Option<DiskUsage>) -> Result<DiskUsage> {
        self.measure(stop_above, None)
    }

    /// Measures the whole workspace as [`Workspace::disk_usage`] does, and keeps what
    /// [`Workspace::still_holds`] needs to tell later that nothing changed since.
    pub fn disk_snapshot(&self) -> Result<UsageSnapshot> {
        let root = self.open_root()?;
        let free = free_counts(&root)?;
        let mut dirs = Vec::new();
        let usage = self.measure(None, Some(&mut dirs))?;
        Ok(UsageSnapshot { usage, free, dirs })
    }

    /// Whether `snapshot` still measures the workspace: the file system's free blocks and
    /// inodes are what they were before its walk and every directory it met is the same inode
    /// with the same ctime. One `stat` per directory instead of one per entry. A change
    /// elsewhere on the same file system makes it answer `false` (a walk then measures
    /// afresh); only a change inside the workspace exactly offset by one outside it between
    /// the two checks could pass unseen.
    pub fn still_holds(&self, snapshot: &UsageSnapshot) -> bool {
        let Ok(root) = self.open_root() else {
            return false;
        };
        if free_counts(&root).ok() != Some(snapshot.free) {
            return false;
        }
        snapshot.dirs.iter().all(|(rel, key)| {
            // A path through a component that was swapped for a symlink may be followed
            // here, but that component's parent moved its ctime: the answer is `false` anyway.
            let st = if rel.as_os_str().is_empty() {
                rustix::fs::fstat(&root)
            } else {
                rustix::fs::statat(&root, rel, AtFlags::SYMLINK_NOFOLLOW)
            };
            st.is_ok_and(|st| DirKey::of(&st) == *key)
        })
    }

    fn open_root(&self) -> Result<rustix::fd::OwnedFd> {
        self.openat2(
            self.root_fd(),
            Path::new("."),
            DIR_FLAGS,
            BENEATH_NO_SYMLINKS,
        )
        .map_err(|e| Error::from_errno("open", ".", e))
    }

    /// The walk; with `dirs`, every directory it meets is recorded (before it is listed).
    #[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
    fn measure(
        &self,
        stop_above: Option<DiskUsage>,
        mut dirs: Option<&mut Vec<(PathBuf, DirKey)>>,
    ) -> Result<DiskUsage> {
        let root = self.open_root()?;
        if let Some(d) = dirs.as_deref_mut() {
            let st = rustix::fs::fstat(&root).map_err(|e| Error::from_errno("stat", ".", e))?;
            d.push((PathBuf::new(), DirKey::of(&st)));
        }
        let mut usage = DiskUsage::default();
        let mut linked: HashSet<(u64, u64)> = HashSet::new();
        let mut stack: Vec<(Dir, PathBuf)> = Vec::new();
        stack.push((
            Dir::new(root).map_err(|e| Error::from_errno("list", ".", e))?,
            PathBuf::new(),
        ));
        loop {
            let depth = stack.len();
            let Some((dir, rel)) = stack.last_mut() else {
                break;
            };
            let Some(entry) = dir.read() else {
                stack.pop();
                continue;
            };
            let Ok(entry) = entry else {
                // A directory that vanished or became unreadable mid-listing: counted as itself.
                stack.pop();
                continue;
            };
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
            let name = name.as_os_str();
            if name == "." || name == ".." {
                continue;
            }
            let Ok(fd) = dir.fd() else {
                stack.pop();
                continue;
            };
            let st = match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(Error::from_errno("stat", &name.to_string_lossy(), e)),
            };
            usage.files += 1;
            let kind = FileType::from_raw_mode(st.st_mode);
            if kind == FileType::Directory
                || st.st_nlink <= 1
                || linked.insert((st.st_dev as u64, st.st_ino as u64))
            {
                usage.bytes += st.st_blocks as u64 * 512;
            }
            if usage.files > MAX_USAGE_WALK_ENTRIES {
                return Err(Error::TooLarge {
                    path: "workspace entries to measure for the disk budget".to_owned(),
                    size: usage.files,
                    limit: MAX_USAGE_WALK_ENTRIES,
                });
            }
            if stop_above.is_some_and(|s| usage.bytes > s.bytes || usage.files > s.files) {
                return Ok(usage);
            }
            if kind != FileType::Directory {
                continue;
            }
            let path = dirs.is_some().then(|| rel.join(name));
            if let (Some(d), Some(path)) = (dirs.as_deref_mut(), &path) {
                d.push((path.clone(), DirKey::of(&st)));
            }
            if depth >= MAX_USAGE_WALK_DEPTH {
                // Deeper than a measurement may hold handles open: nothing is hidden by
                // nesting, the measurement fails (and the run with it).
                return Err(Error::TooLarge {
                    path: "workspace directory levels to measure for the disk budget".to_owned(),
                    size: MAX_USAGE_WALK_DEPTH as u64 + 1,
                    limit: MAX_USAGE_WALK_DEPTH as u64,
                });
            }
            // Gone, swapped, unreadable or a mount: counted as itself.
            let Ok(child) = self.openat2(fd, Path::new(name), DIR_FLAGS, CHILD) else {
                continue;
            };
            let Ok(dir) = Dir::new(child) else {
                continue;
            };
            stack.push((dir, path.unwrap_or_default()));
        }
        Ok(usage)
    }
}

/// The free blocks and inodes of the file system holding `fd`.
#[allow(clippy::unnecessary_cast)] // the statfs field types differ between architectures
fn free_counts(fd: &rustix::fd::OwnedFd) -> Result<(u64, u64)> {
    let st = rustix::fs::fstatfs(fd).map_err(|e| Error::from_errno("statfs", ".", e))?;
    Ok((st.f_bfree as u64, st.f_ffree as u64))
}
