//! What a process run's view of the workspace hides, binds read-only and pins, and the audit
//! of the protected set after the run.
//!
//! The same globs that confine the filesystem API confine runs. Before a run starts, the
//! executor walks the workspace once, by directory handle (a concurrent rename cannot send the
//! walk elsewhere), and the run's sandbox:
//! - mounts an empty read-only file or directory over every path the deny globs (and the
//!   policy's read denials) match, and over every directory the walk cannot read (an
//!   unreadable directory is hidden whole, never skipped);
//! - binds every path of the protected set read-only onto itself. Inside a `.git` directory
//!   that is what git executes or obeys ([`GIT_PROTECTED`]); objects, refs and the index stay
//!   writable so `git add`, `commit`, `branch` and `stash` work;
//! - binds every directory on the way to a hidden or protected path (and every `.git`
//!   directory) onto itself, writable. A mount point cannot be renamed or removed from inside
//!   its mount namespace, so a run can neither move a protected path out from under its bind
//!   (`mv .git .git-old && mkdir .git ...`) nor rename a directory while another run's walk
//!   reads it.
//!
//! What the kernel cannot refuse is a protected path created where none existed (a
//! `.git/hooks/pre-commit` in a repository without hooks, a `.git/commondir`, a `.vscode/`,
//! a `.pth` file): [`Workspace::audit_run`] walks again when the run's processes are gone,
//! removes every protected path that was not there when the run started (and restores a
//! protected symlink the run retargeted), and reports each as an [`IntegrityViolation`]
//! before the run's outcome is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use toolgate_core::{AuditReport, IntegrityChange, IntegrityViolation};

use crate::dir::read_names;
use crate::error::{Error, Result};
use crate::git_state::{GitState, changes, read_small, restorable};
use crate::workspace::{HiddenPaths, Workspace};

pub(crate) mod cache;

pub use cache::MAX_MASK_WALK_ENTRIES;
use cache::{Action, Actions, DirKey, Kind};

/// Paths relative to the workspace root that a run's view changes, and what the after-run
/// audit compares against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunMasks {
    /// Files (anything not a directory) to hide behind an empty read-only file.
    pub hidden_files: Vec<PathBuf>,
    /// Directories to hide behind an empty read-only directory (denied, or unreadable).
    pub hidden_dirs: Vec<PathBuf>,
    /// Existing paths to bind read-only onto themselves.
    pub protected: Vec<PathBuf>,
    /// Directories to bind onto themselves (writable) so no run can rename or remove them,
    /// parents before children.
    pub pinned: Vec<PathBuf>,
    /// Protected files the run sees read-only with this content instead: a repository's
    /// `config` whose URLs carry credentials, redacted (`git remote -v` in a run shows no
    /// token). Not also in `protected`.
    pub redacted: Vec<(PathBuf, std::sync::Arc<[u8]>)>,
    /// The protected set when the walk ran.
    pub snapshot: ProtectedSet,
}

/// The protected paths that exist at one moment, with what the audit needs to restore a
/// protected symlink.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProtectedSet {
    entries: BTreeMap<PathBuf, Kind>,
    /// The state of each repository (by its git directory) the walk found.
    git: BTreeMap<PathBuf, GitState>,
}

impl ProtectedSet {
    /// How many protected paths exist.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no protected path exists.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `rel` is in the set.
    pub fn contains(&self, rel: &Path) -> bool {
        self.entries.contains_key(rel)
    }
}

/// What inside a `.git` directory a run may not change: what git executes or obeys, or where
/// it finds another repository's metadata.
pub const GIT_PROTECTED: &[&str] = &[
    "config",
    "config.worktree",
    "commondir",
    "hooks",
    "info",
    "worktrees",
    "modules",
    "objects/info/alternates",
    "objects/info/http-alternates",
];

/// A walk that met a directory vanishing under it is tried again this many times before the
/// run is refused: the tree is being renamed faster than it can be read.
const WALK_ATTEMPTS: usize = 3;

/// Why one walk attempt stopped.
enum Stop {
    Failed(Error),
    /// A directory listed a moment ago could not be opened: renamed or removed meanwhile.
    Moved(PathBuf),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl Workspace {
    /// Walks the workspace for the paths a run's view must hide (`hidden` adds the policy's
    /// read denials to the deny globs), bind read-only or pin, and for the protected set the
    /// after-run audit starts from. Symlinks are never masked: a mount would follow them, and
    /// what they point to is masked on its own if it matches.
    pub fn run_masks(&self, hidden: &HiddenPaths) -> Result<RunMasks> {
        let mut last = PathBuf::new();
        for _ in 0..WALK_ATTEMPTS {
            let mut masks = RunMasks::default();
            match self.walk_masks(hidden, &mut masks) {
                Ok(()) => {
                    masks.pinned = pins(&masks);
                    return Ok(masks);
                }
                Err(Stop::Failed(e)) => return Err(e),
                Err(Stop::Moved(path)) => last = path,
            }
        }
        Err(Error::Unsettled {
            path: last.to_string_lossy().into_owned(),
        })
    }

    /// The after-run audit: every protected path that exists now but did not when the run
    /// started (`before`) is removed, and every protected symlink the run retargeted or
    /// removed is put back; and what the run moved in each repository's state is reported.
    /// With `quarantine` (no human approved the run), branches and tags it rewrote or
    /// deleted are put back and index bits that hide edits are cleared.
    ///
    /// Existing protected paths other than symlinks were bound read-only for the whole run,
    /// so a change to one of them was made on the host (by the human), not by the run, and
    /// is left alone.
    pub fn audit_run(
        &self,
        before: &ProtectedSet,
        hidden: &HiddenPaths,
        quarantine: bool,
    ) -> Result<AuditReport> {
        let after = self.run_masks(hidden)?.snapshot;
        let mut found = Vec::new();
        for (path, kind) in &after.entries {
            match before.entries.get(path) {
                None => {
                    // Something beneath a path that is itself new goes with it.
                    if path
                        .ancestors()
                        .skip(1)
                        .any(|a| after.entries.contains_key(a) && !before.contains(a))
                    {
                        continue;
                    }
                    found.push(IntegrityViolation {
                        path: path.to_string_lossy().into_owned(),
                        change: IntegrityChange::Created,
                        reverted: self.remove_beneath(path).is_ok(),
                    });
                }
                Some(Kind::Symlink(target)) if kind != &Kind::Symlink(target.clone()) => {
                    found.push(IntegrityViolation {
                        path: path.to_string_lossy().into_owned(),
                        change: IntegrityChange::Modified,
                        reverted: self.remove_beneath(path).is_ok()
                            && self.symlink_beneath(target, path).is_ok(),
                    });
                }
                Some(_) => {}
            }
        }
        for (path, kind) in &before.entries {
            if let Kind::Symlink(target) = kind
                && !after.entries.contains_key(path)
            {
                found.push(IntegrityViolation {
                    path: path.to_string_lossy().into_owned(),
                    change: IntegrityChange::Removed,
                    reverted: self.symlink_beneath(target, path).is_ok(),
                });
            }
        }
        found.sort();
        let mut git = Vec::new();
        for (repo, old) in &before.git {
            let new = after.git.get(repo).cloned().unwrap_or_default();
            if *old == new {
                continue;
            }
            let host_git = self.real_root().join(repo);
            let tree = repo.parent().map_or_else(
                || self.real_root().to_path_buf(),
                |p| self.real_root().join(p),
            );
            let write_ref = |name: &str, oid: &str| {
                if !restorable(name, oid) {
                    return Err(std::io::Error::other("not a plain ref"));
                }
                self.write_beneath(&repo.join(name), format!("{oid}\n").as_bytes())
            };
            git.extend(changes(
                &repo.to_string_lossy(),
                (&host_git, &tree),
                old,
                &new,
                quarantine,
                &write_ref,
            ));
        }
        Ok(AuditReport {
            violations: found,
            git,
        })
    }

    fn walk_masks(&self, hidden: &HiddenPaths, masks: &mut RunMasks) -> Result<(), Stop> {
        let root = self
            .openat2(self.root_fd(), Path::new("."), DIR_FLAGS, NO_SYMLINKS)
            .map_err(|e| Error::from_errno("open", ".", e))?;
        self.walk_cache().retarget(hidden.patterns());
        let mut seen = 0usize;
        let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::new())];
        while let Some((fd, rel)) = stack.pop() {
            let Some(actions) = self.actions(&fd, &rel, hidden)? else {
                // Unreadable (mode 000, 311): hidden whole, never skipped.
                masks.hidden_dirs.push(rel);
                continue;
            };
            seen += actions.len();
            if seen > MAX_MASK_WALK_ENTRIES {
                return Err(Stop::Failed(Error::TooLarge {
                    path: "workspace entries to mask for a run".to_owned(),
                    size: seen as u64,
                    limit: MAX_MASK_WALK_ENTRIES as u64,
                }));
            }
            for (name, action) in actions.iter() {
                let path = rel.join(name);
                match action {
                    Action::HideDir => masks.hidden_dirs.push(path),
                    Action::HideFile => masks.hidden_files.push(path),
                    // The directory itself stays writable (git writes its index, refs and
                    // objects there) but pinned: what it holds that git obeys is bound.
                    Action::Git => match self.open_child(&fd, name, &path)? {
                        Some(git) => {
                            self.git_protected(&git, &path, masks);
                            let state = GitState::read(&git, &path, &mut self.walk_cache().index);
                            masks.snapshot.git.insert(path.clone(), state);
                            masks.pinned.push(path);
                        }
                        None => masks.hidden_dirs.push(path),
                    },
                    Action::Protected(entry) => {
                        if !matches!(entry, Kind::Symlink(_)) {
                            masks.protected.push(path.clone());
                        }
                        masks.snapshot.entries.insert(path, entry.clone());
                    }
                    Action::Descend => match self.open_child(&fd, name, &path)? {
                        Some(child) => stack.push((child, path)),
                        None => masks.hidden_dirs.push(path),
                    },
                }
            }
        }
        Ok(())
    }

    /// What the walk does with each entry of the directory `fd` (at `rel`): from the cache
    /// while the directory is the same inode with the same ctime (any entry created, removed
    /// or renamed in it moves its ctime, which no unprivileged process can set back), else
    /// listed and classified afresh. `None` when the directory cannot be read.
    fn actions(
        &self,
        fd: &OwnedFd,
        rel: &Path,
        hidden: &HiddenPaths,
    ) -> Result<Option<Actions>, Stop> {
        let st = rustix::fs::fstat(fd).map_err(|e| Error::from_errno("stat", &shown(rel), e))?;
        let key = DirKey::of(&st);
        if let Some(actions) = self.walk_cache().get(rel, key) {
            return Ok(Some(actions));
        }
        let entries = match read_names(fd) {
            Ok(entries) => entries,
            Err(e) if is_access(&e) && !rel.as_os_str().is_empty() => return Ok(None),
            Err(e) => {
                return Err(Stop::Failed(Error::Io {
                    op: "list",
                    path: shown(rel),
                    source: e,
                }));
            }
        };
        let mut actions = Vec::with_capacity(entries.len());
        for (name, mut kind) in entries {
            let path = rel.join(&name);
            if kind == FileType::Unknown {
                kind = match rustix::fs::statat(fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => FileType::from_raw_mode(st.st_mode),
                    Err(Errno::NOENT) => return Err(Stop::Moved(path)),
                    Err(_) => FileType::Unknown,
                };
            }
            let action = if self.entry_denied(&path, Some(hidden)) {
                match kind {
                    FileType::Symlink => continue,
                    FileType::Directory => Action::HideDir,
                    _ => Action::HideFile,
                }
            } else if kind == FileType::Socket {
                // A host service's socket (a database, a Docker daemon) would be a way out
                // of the run's network namespace: masked like a hidden file. A socket the
                // run creates itself appears after the walk and is its own.
                Action::HideFile
            } else if kind == FileType::Directory && name == ".git" {
                Action::Git
            } else if self.is_protected(&path) {
                Action::Protected(match kind {
                    FileType::Directory => Kind::Dir,
                    FileType::Symlink => Kind::Symlink(read_link(fd, &name)),
                    _ => Kind::Other,
                })
            } else if kind == FileType::Directory {
                Action::Descend
            } else {
                continue;
            };
            actions.push((name, action));
        }
        let actions: Actions = actions.into();
        self.walk_cache().put(rel, key, &st, &actions);
        Ok(Some(actions))
    }

    /// Opens a directory the walk just listed: `None` when it is unreadable (hidden whole),
    /// [`Stop::Moved`] when it vanished or was swapped for something else.
    fn open_child(
        &self,
        parent: &OwnedFd,
        name: &OsStr,
        path: &Path,
    ) -> Result<Option<OwnedFd>, Stop> {
        match self.openat2(parent.as_fd(), Path::new(name), DIR_FLAGS, NO_SYMLINKS) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ACCESS | Errno::PERM) => Ok(None),
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP | Errno::XDEV) => {
                Err(Stop::Moved(path.to_owned()))
            }
            Err(e) => Err(Stop::Failed(Error::from_errno("open", &shown(path), e))),
        }
    }

    /// The protected entries of one `.git` directory, present or not: present ones are bound
    /// read-only, and every one (present or not) is in the audited set when it exists.
    fn git_protected(&self, git: &OwnedFd, path: &Path, masks: &mut RunMasks) {
        for inner in GIT_PROTECTED {
            let rel = path.join(inner);
            let Ok(st) = rustix::fs::statat(git, *inner, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            let entry = match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => Kind::Symlink(read_link(git, OsStr::new(inner))),
                FileType::Directory => Kind::Dir,
                _ => Kind::Other,
            };
            if *inner == "config"
                && entry == Kind::Other
                && let Some(redacted) = redacted_config(git)
            {
                masks.redacted.push((rel.clone(), redacted.into()));
            } else if !matches!(entry, Kind::Symlink(_)) {
                masks.protected.push(rel.clone());
            }
            masks.snapshot.entries.insert(rel, entry);
        }
    }

    /// Whether `rel` is in the protected set by the protected globs (its ancestors were
    /// checked on the way down: the walk enters neither hidden nor protected directories).
    fn is_protected(&self, rel: &Path) -> bool {
        self.entry_protected(rel)
    }

    /// Removes `rel` (recursively for a directory) beneath the root, never following a
    /// symlink on the way.
    fn remove_beneath(&self, rel: &Path) -> std::io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        remove_at(&parent, name)
    }

    /// Creates the symlink `rel` pointing at `target` beneath the root.
    fn symlink_beneath(&self, target: &Path, rel: &Path) -> std::io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        rustix::fs::symlinkat(target, &parent, name)?;
        Ok(())
    }

    /// Replaces the file `rel` beneath the root with `content`: a temp file created next to
    /// it and renamed over it, never through a symlink. Its directory must exist.
    fn write_beneath(&self, rel: &Path, content: &[u8]) -> std::io::Result<()> {
        let (parent, name) = self.parent_of(rel)?;
        let tmp = crate::write::temp_name(name);
        let fd = rustix::fs::openat(
            &parent,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )?;
        let written = std::io::Write::write_all(&mut std::fs::File::from(fd), content);
        let renamed = written
            .and_then(|()| rustix::fs::renameat(&parent, &tmp, &parent, name).map_err(Into::into));
        if renamed.is_err() {
            let _ = rustix::fs::unlinkat(&parent, &tmp, AtFlags::empty());
        }
        renamed
    }

    fn parent_of<'p>(&self, rel: &'p Path) -> std::io::Result<(OwnedFd, &'p OsStr)> {
        let name = rel
            .file_name()
            .ok_or_else(|| std::io::Error::other("no file name"))?;
        let parent = match rel.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let fd = self.openat2(self.root_fd(), parent, DIR_FLAGS, NO_SYMLINKS)?;
        Ok((fd, name))
    }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW);

const NO_SYMLINKS: rustix::fs::ResolveFlags = crate::workspace::BENEATH_NO_SYMLINKS;

/// A repository's `config` (in the `.git` directory `git`) with the credentials in its URLs
/// redacted, when it has any.
fn redacted_config(git: &OwnedFd) -> Option<Vec<u8>> {
    crate::redact_url_credentials(&read_small(git, "config")?)
}

/// Removes `name` in `dir`, a directory with everything beneath it.
fn remove_at(dir: &OwnedFd, name: &OsStr) -> std::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let sub = rustix::fs::openat(dir, name, DIR_FLAGS | OFlags::CLOEXEC, Mode::empty())?;
    for (child, _) in read_names(&sub)? {
        remove_at(&sub, &child)?;
    }
    rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    Ok(())
}

fn read_link(dir: &OwnedFd, name: &OsStr) -> PathBuf {
    rustix::fs::readlinkat(dir, name, Vec::new())
        .map(|t| PathBuf::from(OsStr::from_bytes(t.as_bytes())))
        .unwrap_or_default()
}

fn is_access(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".to_owned()
    } else {
        rel.to_string_lossy().into_owned()
    }
}

/// Every directory on the way to a hidden or protected path, and every `.git` directory the
/// walk already pinned, parents before children (a sorted set of paths orders a parent before what it holds).
fn pins(masks: &RunMasks) -> Vec<PathBuf> {
    let mut pinned: BTreeSet<PathBuf> = masks.pinned.iter().cloned().collect();
    let targets = masks
        .hidden_files
        .iter()
        .chain(&masks.hidden_dirs)
        .chain(&masks.protected)
        .chain(masks.redacted.iter().map(|(p, _)| p))
        .chain(masks.snapshot.entries.keys());
    for path in targets {
        for a in path.ancestors().skip(1) {
            if a.as_os_str().is_empty() {
                break;
            }
            pinned.insert(a.to_path_buf());
        }
    }
    // A path that is itself masked or bound is a mount point already; binding it again
    // beneath its own mask would undo the mask.
    for path in masks
        .hidden_files
        .iter()
        .chain(&masks.hidden_dirs)
        .chain(&masks.protected)
        .chain(masks.redacted.iter().map(|(p, _)| p))
    {
        pinned.remove(path);
    }
    // Nothing beneath a hidden directory is visible, so nothing there needs pinning.
    pinned.retain(|p| !masks.hidden_dirs.iter().any(|h| p.starts_with(h) && p != h));
    pinned.into_iter().collect()
}

/// Whether `rel` is a plain relative path (what [`RunMasks`] holds).
pub fn is_plain_relative(rel: &Path) -> bool {
    rel.components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
}
