//! What a run changed in the workspace's protected set, and what the executor did about it.
//!
//! The protected set is what the human's own tools read as configuration or execute
//! implicitly (git metadata that configures or runs code, editor and agent configs,
//! interpreter startup files, toolchain pins). A run cannot write the protected paths that
//! exist when it starts (the kernel binds them read-only); what it creates where none existed
//! is found by the after-run audit and undone before the run's outcome is reported.

use std::fmt;

/// How one protected path changed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IntegrityChange {
    /// It did not exist when the run started and did when it ended.
    Created,
    /// Its content or kind differs from what it was when the run started.
    Modified,
    /// It existed when the run started and no longer did when it ended.
    Removed,
}

impl IntegrityChange {
    /// The lowercase name used on the wire, in the ledger and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            IntegrityChange::Created => "created",
            IntegrityChange::Modified => "modified",
            IntegrityChange::Removed => "removed",
        }
    }

    /// The change named by [`Self::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "created" => Some(IntegrityChange::Created),
            "modified" => Some(IntegrityChange::Modified),
            "removed" => Some(IntegrityChange::Removed),
            _ => None,
        }
    }
}

impl fmt::Display for IntegrityChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change to the protected set that no decision allowed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IntegrityViolation {
    /// The workspace-relative path (POSIX, lossy UTF-8).
    pub path: String,
    /// What the run did to it.
    pub change: IntegrityChange,
    /// Whether the executor put it back as it was before the run (a created path removed, a
    /// modified file restored from the executor's copy).
    pub reverted: bool,
}

impl fmt::Display for IntegrityViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}`{}",
            self.change,
            self.path,
            if self.reverted {
                " (reverted)"
            } else {
                " (not reverted)"
            }
        )
    }
}

/// What the after-run audit found: changes to the protected set, and what the run moved in
/// the state of the workspace's git repositories.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditReport {
    /// Changes to the protected set, sorted by path.
    pub violations: Vec<IntegrityViolation>,
    /// What the run changed in git state (branches, tags, `HEAD`, index bits that hide
    /// edits), sorted by repository and name.
    pub git: Vec<GitChange>,
}

/// How a run changed one piece of a repository's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GitChangeKind {
    /// A branch or tag that did not exist.
    RefCreated,
    /// A branch or tag that no longer exists.
    RefDeleted,
    /// A branch or tag moved to a descendant of its old commit (new commits on top).
    RefFastForward,
    /// A branch or tag moved to a commit its old value is not an ancestor of: history was
    /// rewritten or replaced.
    RefRewritten,
    /// A branch or tag moved, and whether its old commit is an ancestor could not be checked.
    RefMoved,
    /// `HEAD` points elsewhere (another branch checked out, or detached).
    HeadMoved,
    /// A path's `assume-unchanged` bit was set: `git status` and `diff` stop showing edits.
    AssumeUnchangedSet,
    /// A path's `skip-worktree` bit was set: `git status` and `diff` stop showing edits.
    SkipWorktreeSet,
}

impl GitChangeKind {
    /// The lowercase name used on the wire, in the ledger and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            GitChangeKind::RefCreated => "ref_created",
            GitChangeKind::RefDeleted => "ref_deleted",
            GitChangeKind::RefFastForward => "ref_fast_forward",
            GitChangeKind::RefRewritten => "ref_rewritten",
            GitChangeKind::RefMoved => "ref_moved",
            GitChangeKind::HeadMoved => "head_moved",
            GitChangeKind::AssumeUnchangedSet => "assume_unchanged_set",
            GitChangeKind::SkipWorktreeSet => "skip_worktree_set",
        }
    }

    /// The kind named by [`Self::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [
            GitChangeKind::RefCreated,
            GitChangeKind::RefDeleted,
            GitChangeKind::RefFastForward,
            GitChangeKind::RefRewritten,
            GitChangeKind::RefMoved,
            GitChangeKind::HeadMoved,
            GitChangeKind::AssumeUnchangedSet,
            GitChangeKind::SkipWorktreeSet,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
}

impl fmt::Display for GitChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One change a run made to a repository's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitChange {
    /// The repository's git directory, workspace-relative (`.git`, `vendor/x/.git`).
    pub repository: String,
    /// The ref (`refs/heads/main`, `HEAD`) or, for index bits, the path.
    pub name: String,
    /// What happened.
    pub kind: GitChangeKind,
    /// The value before the run (an object id, `ref: refs/heads/x`), empty when none.
    pub old: String,
    /// The value after the run, empty when none.
    pub new: String,
    /// Whether the executor put it back (quarantine: history rewritten, refs deleted or
    /// edits hidden by a run no human approved).
    pub reverted: bool,
}
