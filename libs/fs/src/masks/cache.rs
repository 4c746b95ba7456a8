//! The mask walk's memory of unchanged directories, kept by the [`crate::Workspace`] between
//! runs, and the per-entry actions it remembers.

use std::path::{Path, PathBuf};

use crate::git_state::IndexCache;

/// The walk gives up (and the run is refused) beyond this many entries, so a runaway
/// workspace cannot stall every run start.
pub const MAX_MASK_WALK_ENTRIES: usize = 2_000_000;

/// What a protected path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    /// A symlink, with its target (never followed, never bound: a mount would follow it).
    Symlink(PathBuf),
    /// Anything else (regular files mostly).
    Other,
}

/// What the walk does with one directory entry; entries it does nothing with are not kept.
#[derive(Debug, Clone)]
pub(super) enum Action {
    HideDir,
    HideFile,
    /// A `.git` directory: its protected entries are looked up afresh every walk.
    Git,
    Protected(Kind),
    Descend,
}

/// The actions of one directory's entries, shared between the cache and a walk.
pub(super) type Actions = std::sync::Arc<[(std::ffi::OsString, Action)]>;

/// Which directory a cache entry describes, and in which state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirKey {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl DirKey {
    #[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
    pub(crate) fn of(st: &rustix::fs::Stat) -> DirKey {
        DirKey {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        }
    }
}

/// The walk's memory of unchanged directories, so a run's start costs one `open` and `fstat`
/// per directory instead of listing and matching every entry again. Bounded: past
/// [`MAX_MASK_WALK_ENTRIES`] cached entries it starts over.
#[derive(Debug, Default)]
pub(crate) struct WalkCache {
    /// The policy's hidden globs the actions were computed under.
    patterns: Vec<String>,
    dirs: std::collections::HashMap<PathBuf, (DirKey, Actions)>,
    entries: usize,
    /// Parsed index bits of the repositories found.
    pub(super) index: IndexCache,
}

impl WalkCache {
    /// Forgets everything when the hidden globs differ from the ones it was built under.
    pub(super) fn retarget(&mut self, patterns: &[String]) {
        if self.patterns != patterns {
            self.dirs.clear();
            self.entries = 0;
            patterns.clone_into(&mut self.patterns);
        }
    }

    pub(super) fn get(&self, rel: &Path, key: DirKey) -> Option<Actions> {
        self.dirs
            .get(rel)
            .filter(|(k, _)| *k == key)
            .map(|(_, a)| a.clone())
    }

    /// Keeps `actions` unless the directory changed within the last second: its ctime could
    /// then still be the one a change made right after the listing gets (timestamps are
    /// coarse), and that change would go unseen.
    pub(super) fn put(
        &mut self,
        rel: &Path,
        key: DirKey,
        st: &rustix::fs::Stat,
        actions: &Actions,
    ) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        #[allow(clippy::unnecessary_cast)]
        let settled = (st.st_ctime as i64) < now - 1;
        if !settled {
            self.dirs.remove(rel);
            return;
        }
        if self.entries + actions.len() > MAX_MASK_WALK_ENTRIES {
            self.dirs.clear();
            self.entries = 0;
        }
        self.entries += actions.len();
        if let Some((_, old)) = self.dirs.insert(rel.to_owned(), (key, actions.clone())) {
            self.entries -= old.len();
        }
    }
}
