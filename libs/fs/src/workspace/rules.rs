//! The confinement rules applied to paths: deny, protected and hidden globs, on the spelling
//! and on the canonical path, and the hard-link refusal.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use rustix::fs::{FileType, Stat};

use super::Workspace;
use super::request::Request;
use crate::error::{Error, Result};

/// Globs over canonical workspace-relative paths that an operation must not reveal, on top
/// of the workspace's own deny globs: in the executor, the paths whose read the policy in
/// force denies, as the policy's answer carried them, with that policy's version.
///
/// A path is hidden when it or one of its ancestors matches (a glob naming a directory
/// hides everything beneath it). The glob syntax is the deny globs' (and the policy
/// document's): `*` stays within one component, `**/` also matches at the root.
#[derive(Debug, Clone, Default)]
pub struct HiddenPaths {
    version: String,
    patterns: Vec<String>,
    set: GlobSet,
}

impl HiddenPaths {
    /// Hides nothing.
    pub fn none() -> HiddenPaths {
        HiddenPaths::default()
    }

    /// Compiles `patterns`, remembering the `version` of the rule set they come from.
    pub fn new(version: impl Into<String>, patterns: Vec<String>) -> Result<HiddenPaths> {
        let set = build_globs("hidden", &patterns)?;
        Ok(HiddenPaths {
            version: version.into(),
            patterns,
            set,
        })
    }

    /// The version of the rule set the globs come from (for the executor, the policy
    /// version; empty for [`HiddenPaths::none`]).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The globs as given.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether nothing is hidden.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Whether `path` (canonical, workspace-relative, without a leading `./`) or one of
    /// its ancestors matches a glob.
    pub fn hides(&self, path: &Path) -> bool {
        if self.set.is_empty() {
            return false;
        }
        let mut acc = PathBuf::new();
        path.components().any(|c| {
            acc.push(c);
            self.set.is_match(&acc)
        })
    }

    /// Whether `path` itself matches, its ancestors being known not to.
    pub(crate) fn matches(&self, path: &Path) -> bool {
        !self.set.is_empty() && self.set.is_match(path)
    }
}

/// Whether an access reads or writes, for the protected globs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

pub(super) fn build_globs(field: &'static str, patterns: &[String]) -> Result<GlobSet> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        if p.is_empty() {
            return Err(Error::InvalidPattern {
                pattern: String::new(),
                why: format!("empty glob in `{field}`"),
            });
        }
        set.add(compile_glob(p)?);
    }
    set.build().map_err(|e| Error::InvalidPattern {
        pattern: patterns.join(","),
        why: e.to_string(),
    })
}

/// Compiles one glob with `*` confined to a single component, as in gitignore.
pub(crate) fn compile_glob(p: &str) -> Result<globset::Glob> {
    GlobBuilder::new(p)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| Error::InvalidPattern {
            pattern: p.to_owned(),
            why: e.kind().to_string(),
        })
}

/// Calls `visit` with every path the spelling `rel` names on its way, in order: each
/// component appended to the path so far, `..` taking one back (never above the root, where
/// only a symlink could have led). `a/../b` visits `a` and `b`; `.codex/../../.codex/x`
/// visits `.codex` and `.codex/x`. Stops at the first `true`.
pub(super) fn spelled(rel: &Path, mut visit: impl FnMut(&Path) -> bool) -> bool {
    let mut acc = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => {
                acc.push(n);
                if visit(&acc) {
                    return true;
                }
            }
            Component::ParentDir => {
                acc.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    false
}

impl Workspace {
    /// Applies the deny globs (and the protected ones for writes) to `canon` and each of
    /// its ancestors, so a pattern naming a directory covers everything inside it.
    pub(crate) fn check(&self, shown: &str, canon: &Path, access: Access) -> Result<()> {
        self.check_hiding(shown, canon, access, None)
    }

    /// [`Self::check`] with `hidden` treated as more deny globs.
    pub(crate) fn check_hiding(
        &self,
        shown: &str,
        canon: &Path,
        access: Access,
        hidden: Option<&HiddenPaths>,
    ) -> Result<()> {
        let mut acc = PathBuf::new();
        for c in canon.components() {
            acc.push(c);
            self.check_one(shown, &acc, canon, access, hidden)?;
        }
        Ok(())
    }

    /// The globs on one path (not its ancestors); `canon` is what the error reports.
    fn check_one(
        &self,
        shown: &str,
        path: &Path,
        canon: &Path,
        access: Access,
        hidden: Option<&HiddenPaths>,
    ) -> Result<()> {
        if self.deny.is_match(path) || hidden.is_some_and(|h| h.matches(path)) {
            return Err(Error::Denied {
                path: shown.to_owned(),
                canonical: canon.to_string_lossy().into_owned(),
            });
        }
        if access == Access::Write && self.protected.is_match(path) {
            return Err(Error::Protected {
                path: shown.to_owned(),
                canonical: canon.to_string_lossy().into_owned(),
            });
        }
        Ok(())
    }

    /// The globs on the requested spelling, before anything is opened, so a denied name is
    /// refused the same way whether or not it exists, and a symlink cannot launder a
    /// protected name: every path the spelling passes through is checked (`.codex`, then
    /// `.codex/config.toml`), not only its lexical end point.
    pub(crate) fn precheck(&self, req: &Request<'_>, access: Access) -> Result<()> {
        self.precheck_hiding(req, access, None)
    }

    /// [`Self::precheck`] with `hidden` treated as more deny globs.
    pub(crate) fn precheck_hiding(
        &self,
        req: &Request<'_>,
        access: Access,
        hidden: Option<&HiddenPaths>,
    ) -> Result<()> {
        let mut result = Ok(());
        spelled(&req.rel, |p| {
            result = self.check_one(req.shown, p, p, access, hidden);
            result.is_err()
        });
        result
    }

    /// Refuses content access to a multiply-linked regular file when so configured.
    // `st_nlink` is u64 on some architectures and narrower on others.
    #[allow(clippy::unnecessary_cast)]
    pub(crate) fn check_links(&self, shown: &str, stat: &Stat) -> Result<()> {
        if self.refuse_hard_links
            && FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
            && stat.st_nlink > 1
        {
            return Err(Error::HardLinked {
                path: shown.to_owned(),
                nlink: stat.st_nlink as u64,
            });
        }
        Ok(())
    }

    /// Whether hard-linked files are refused (walks then check each file's link count).
    pub(crate) fn refuses_hard_links(&self) -> bool {
        self.refuse_hard_links
    }

    /// Whether any deny glob is configured or hidden (walks skip building paths when not).
    pub(crate) fn has_deny(&self, hidden: Option<&HiddenPaths>) -> bool {
        !self.deny.is_empty() || hidden.is_some_and(|h| !h.is_empty())
    }

    /// Whether a single entry (whose ancestors were already checked) is protected.
    pub(crate) fn entry_protected(&self, canon: &Path) -> bool {
        self.protected.is_match(canon)
    }

    /// Whether a single entry (whose ancestors were already checked) is denied or hidden.
    pub(crate) fn entry_denied(&self, canon: &Path, hidden: Option<&HiddenPaths>) -> bool {
        self.deny.is_match(canon) || hidden.is_some_and(|h| h.matches(canon))
    }
}
