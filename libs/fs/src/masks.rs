//! What a process run's view of the workspace hides and binds read-only.
//!
//! The same globs that confine the filesystem API confine runs: before a run starts, the
//! executor walks the workspace once and the run's sandbox mounts an empty file or directory
//! over every path the deny globs (and the policy's read denials) match, and binds every path
//! the protected globs match read-only onto itself. Inside a `.git` directory only what git
//! executes or obeys (`config`, `hooks/`, `info/`) is read-only; objects, refs and the index
//! stay writable so `git commit` works.
//!
//! The walk sees what exists when the run starts. A matching path the run creates itself is
//! not masked during that run (the run wrote it, so it holds no secret the run did not
//! have); the filesystem API still refuses to write protected paths, and the next run's view
//! masks or protects what now exists.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::workspace::{Access, HiddenPaths, Workspace};

/// Paths relative to the workspace root that a run's view changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunMasks {
    /// Files (anything not a directory) to hide behind an empty read-only file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories to hide behind an empty read-only directory.
    pub hidden_dirs: Vec<PathBuf>,
    /// Existing paths to bind read-only onto themselves.
    pub protected: Vec<PathBuf>,
}

/// What inside a `.git` directory a run may not change: what git executes or obeys.
const GIT_PROTECTED: &[&str] = &["config", "hooks", "info", "modules"];

/// The walk gives up (and the run is refused) beyond this many entries, so a runaway
/// workspace cannot stall every run start.
pub const MAX_MASK_WALK_ENTRIES: usize = 2_000_000;

impl Workspace {
    /// Walks the workspace for the paths a run's view must hide (`hidden` adds the policy's
    /// read denials to the deny globs) or bind read-only. Symlinks are never masked: a mount
    /// would follow them, and what they point to is masked on its own if it matches.
    pub fn run_masks(&self, hidden: &HiddenPaths) -> Result<RunMasks> {
        let mut masks = RunMasks::default();
        let mut seen = 0usize;
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dir = self.real_root().join(&rel);
            // Vanished or unreadable since it was listed: nothing to mask there.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                seen += 1;
                if seen > MAX_MASK_WALK_ENTRIES {
                    return Err(Error::TooLarge {
                        path: "workspace entries to mask for a run".to_owned(),
                        size: seen as u64,
                        limit: MAX_MASK_WALK_ENTRIES as u64,
                    });
                }
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_symlink() {
                    continue;
                }
                let path = rel.join(entry.file_name());
                let shown = path.to_string_lossy();
                if self.entry_denied(&path, Some(hidden)) {
                    if kind.is_dir() {
                        masks.hidden_dirs.push(path);
                    } else {
                        masks.hidden_files.push(path);
                    }
                    continue;
                }
                if kind.is_dir() && entry.file_name() == ".git" {
                    for name in GIT_PROTECTED {
                        let inner = path.join(name);
                        if let Ok(m) = std::fs::symlink_metadata(self.real_root().join(&inner))
                            && !m.file_type().is_symlink()
                        {
                            masks.protected.push(inner);
                        }
                    }
                    continue;
                }
                if matches!(
                    self.check(&shown, &path, Access::Write),
                    Err(Error::Protected { .. })
                ) {
                    masks.protected.push(path);
                    continue;
                }
                if kind.is_dir() {
                    stack.push(path);
                }
            }
        }
        Ok(masks)
    }
}

/// Whether `rel` is a plain relative path (what [`RunMasks`] holds).
pub fn is_plain_relative(rel: &Path) -> bool {
    rel.components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
}
