//! Directory listings, walked by directory handles.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{AtFlags, FileType, OFlags};

use crate::dir::read_names;
use crate::error::{Error, Result};
use crate::path::WorkspacePath;
use crate::workspace::{
    Access, BENEATH_NO_SYMLINKS, EntryKind, HiddenPaths, Workspace, cap, mtime_of,
};

/// A listing request.
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// The directory to list; a symlink to a directory inside the workspace is followed.
    pub path: WorkspacePath,
    /// Descend into subdirectories (never through symlinks).
    pub recursive: bool,
    /// Depth cap for recursion (1 = only direct entries); `None` means the default.
    pub max_depth: Option<usize>,
    /// Entry cap; `None` means the default.
    pub max_entries: Option<usize>,
    /// Include names starting with `.`.
    pub include_hidden: bool,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Canonical path in the caller's style.
    pub path: String,
    /// The entry's own type (a symlink is reported as a symlink).
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Last modification.
    pub mtime: SystemTime,
    /// The link text of a symlink.
    pub symlink_target: Option<String>,
    /// 1 for direct entries of the listed directory.
    pub depth: usize,
}

/// Why a result stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Truncation {
    /// The entry cap was reached.
    MaxEntries,
    /// The result cap was reached.
    MaxResults,
    /// The byte cap was reached.
    MaxBytes,
    /// The configured maximum number of visited files was reached.
    MaxFiles,
    /// The time budget ran out.
    Timeout,
}

impl Truncation {
    /// A lowercase name for messages and the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Truncation::MaxEntries => "max_entries",
            Truncation::MaxResults => "max_results",
            Truncation::MaxBytes => "max_bytes",
            Truncation::MaxFiles => "max_files",
            Truncation::Timeout => "timeout",
        }
    }
}

/// A listing.
#[derive(Debug, Clone)]
pub struct ListOutcome {
    /// The listed directory's canonical path in the caller's style.
    pub path: String,
    /// Entries, depth-first, sorted by name within each directory.
    pub entries: Vec<Entry>,
    /// Set when the listing stopped early, with the reason.
    pub truncated: Option<Truncation>,
}

pub(crate) fn is_hidden(name: &OsStr) -> bool {
    name.as_bytes().first() == Some(&b'.')
}

impl Workspace {
    /// Lists a directory, optionally recursively, never following symlinks while descending
    /// and never showing denied entries.
    pub fn list(&self, req: &ListRequest) -> Result<ListOutcome> {
        self.list_inner(req, None)
    }

    /// [`Self::list`] that also never shows what `hidden` matches (the listed directory
    /// included, by its spelling or its canonical path), exactly like a deny glob.
    pub fn list_hiding(&self, req: &ListRequest, hidden: &HiddenPaths) -> Result<ListOutcome> {
        self.list_inner(req, Some(hidden))
    }

    fn list_inner(&self, req: &ListRequest, hidden: Option<&HiddenPaths>) -> Result<ListOutcome> {
        let l = self.limits();
        let max_entries = cap(
            "max_entries",
            req.max_entries,
            l.default_list_entries,
            l.max_list_entries,
        )?;
        let depth = if req.recursive {
            cap(
                "max_depth",
                req.max_depth,
                l.default_list_depth,
                l.max_list_depth,
            )?
        } else {
            1
        };
        let r = self.request(&req.path)?;
        let resolved = self.resolve_hiding(&r, true, Access::Read, hidden)?;
        if FileType::from_raw_mode(resolved.stat.st_mode) != FileType::Directory {
            return Err(Error::NotADirectory {
                path: r.shown.to_owned(),
            });
        }
        let fd = self.reopen(&resolved, r.shown, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut out = ListOutcome {
            path: self.render(r.style, &resolved.canon),
            entries: Vec::new(),
            truncated: None,
        };
        let mut walk = ListWalk {
            ws: self,
            style: r.style,
            include_hidden: req.include_hidden,
            max_depth: depth,
            max_entries,
            hidden,
            out: &mut out,
        };
        walk.dir(&fd, &resolved.canon, 1)?;
        Ok(out)
    }
}

struct ListWalk<'a> {
    ws: &'a Workspace,
    style: crate::workspace::Style,
    include_hidden: bool,
    max_depth: usize,
    max_entries: usize,
    hidden: Option<&'a HiddenPaths>,
    out: &'a mut ListOutcome,
}

impl ListWalk<'_> {
    fn dir(&mut self, fd: &OwnedFd, canon: &Path, depth: usize) -> Result<()> {
        let mut names = read_names(fd).map_err(|source| Error::Io {
            op: "read directory",
            path: self.ws.render(self.style, canon),
            source,
        })?;
        names.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (name, _) in names {
            if self.out.truncated.is_some() {
                return Ok(());
            }
            if !self.include_hidden && is_hidden(&name) {
                continue;
            }
            let child: PathBuf = canon.join(&name);
            if self.ws.entry_denied(&child, self.hidden) {
                continue;
            }
            // Vanished between readdir and stat: skip rather than fail the listing.
            let Ok(st) = rustix::fs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if self.out.entries.len() >= self.max_entries {
                self.out.truncated = Some(crate::list::Truncation::MaxEntries);
                return Ok(());
            }
            let kind = EntryKind::of(&st);
            let symlink_target = (kind == EntryKind::Symlink)
                .then(|| rustix::fs::readlinkat(fd, &name, Vec::new()).ok())
                .flatten()
                .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
            self.out.entries.push(Entry {
                path: self.ws.render(self.style, &child),
                kind,
                size: st.st_size as u64,
                mtime: mtime_of(&st),
                symlink_target,
                depth,
            });
            if kind == EntryKind::Dir && depth < self.max_depth {
                // One component relative to this handle, with no symlinks: a directory
                // swapped for a symlink after the stat fails to open instead of leading out.
                let Ok(sub) = self.ws.openat2(
                    fd.as_fd(),
                    Path::new(&name),
                    OFlags::RDONLY | OFlags::DIRECTORY,
                    BENEATH_NO_SYMLINKS,
                ) else {
                    continue;
                };
                self.dir(&sub, &child, depth + 1)?;
            }
        }
        Ok(())
    }
}
