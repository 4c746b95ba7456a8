//! The workspace root handle, path resolution beneath it, and the deny/protected globs.
//!
//! Every path is resolved by the kernel against the root's directory handle with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: each component, symlinks included,
//! must stay beneath the root or the open fails with `EXDEV`. No decision here is ever made
//! by comparing path strings against the root.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use globset::GlobSet;
use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};

mod config;
mod entry;
mod request;
mod resolve;
mod rules;
#[cfg(test)]
mod tests;

pub use config::{DEFAULT_PROTECTED, Limits, WorkspaceConfig};
pub use entry::EntryKind;
pub use resolve::Canonical;
pub use rules::HiddenPaths;

pub(crate) use config::cap;
pub(crate) use entry::{mtime_of, special_kind};
pub(crate) use request::{Request, Style};
pub(crate) use resolve::BENEATH_NO_SYMLINKS;
pub(crate) use rules::{Access, compile_glob};

use config::validate_limits;
use resolve::fd_path;
use rules::build_globs;

/// An open workspace: the root's directory handle plus the rules that confine access to it.
#[derive(Debug)]
pub struct Workspace {
    root: OwnedFd,
    real: PathBuf,
    /// Absolute prefixes accepted in requests: the real root path, the configured root and aliases.
    prefixes: Vec<PathBuf>,
    deny: GlobSet,
    protected: GlobSet,
    limits: Limits,
    refuse_hard_links: bool,
    allow_backslash_names: bool,
    /// What the run-mask walk learned about unchanged directories.
    walk_cache: std::sync::Mutex<crate::masks::cache::WalkCache>,
}

impl Workspace {
    /// Opens the root once and compiles the globs; fails if the root is not a directory
    /// or a glob is invalid.
    pub fn open(config: WorkspaceConfig) -> Result<Workspace> {
        let shown = config.root.display().to_string();
        let root = rustix::fs::open(
            &config.root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| Error::from_errno("open workspace root", &shown, e))?;
        let real = fd_path(root.as_fd()).map_err(|source| Error::Io {
            op: "find the real path of workspace root",
            path: shown.clone(),
            source,
        })?;
        let mut prefixes = vec![real.clone()];
        let configured = if config.root.is_absolute() {
            config.root.clone()
        } else {
            std::env::current_dir()
                .map_err(|source| Error::Io {
                    op: "read the current directory for",
                    path: shown.clone(),
                    source,
                })?
                .join(&config.root)
        };
        for p in std::iter::once(configured).chain(config.aliases.iter().cloned()) {
            if !p.is_absolute() {
                return Err(Error::InvalidPath {
                    path: p.display().to_string(),
                    why: "a workspace alias must be an absolute path",
                });
            }
            // Normalise the spelling (`//a/./b/` -> `/a/b`) so component prefixes compare.
            let p: PathBuf = p.components().collect();
            if !prefixes.contains(&p) {
                prefixes.push(p);
            }
        }
        let limits = config.limits;
        validate_limits(&limits)?;
        Ok(Workspace {
            root,
            real,
            prefixes,
            deny: build_globs("deny", &config.deny)?,
            protected: build_globs("protected", &config.protected)?,
            limits,
            refuse_hard_links: config.refuse_hard_links,
            allow_backslash_names: config.allow_backslash_names,
            walk_cache: std::sync::Mutex::default(),
        })
    }

    /// The configured limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The root's real (symlink-free) absolute path.
    pub fn real_root(&self) -> &Path {
        &self.real
    }

    /// The run-mask walk's cache (a poisoned lock only means a walk panicked mid-update of
    /// an entry, which is replaced whole, so the cache is still consistent).
    pub(crate) fn walk_cache(&self) -> std::sync::MutexGuard<'_, crate::masks::cache::WalkCache> {
        self.walk_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }
}
