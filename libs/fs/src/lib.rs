//! Workspace confinement and the executor's filesystem operations.
//!
//! A [`Workspace`] holds an open directory handle of the root. Every path a caller sends
//! is resolved by the kernel beneath that handle (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS`), so `..`, absolute paths, symlinks and symlink races cannot
//! reach outside it. Deny globs hide paths completely; protected globs make them
//! read-only. Both apply to the canonical workspace-relative path of what was opened and
//! to every path the requested spelling passes through. [`HiddenPaths`] adds deny globs
//! for one listing, search or find (the executor passes the policy's read denials).
//! Windows spellings (`C:\x`, `\\server\share`) and, unless configured, backslashes
//! are refused: the workspace is a POSIX tree.
//!
//! Operations are synchronous; an async caller runs them on a blocking thread.
//!
//! Reads, searches and sha256 values see a file's *view*: the userinfo of every URL in it
//! (`https://user:token@host`) replaced by `***` ([`redact_url_credentials`]). Lines holding
//! such a credential cannot be edited, and a write cannot put the marker over one.
//!
//! Result paths are canonical (symlinks resolved) and shown in the caller's style: a
//! relative request gets relative paths, an absolute one gets paths under the same
//! prefix (the root or a configured alias).
//!
//! Known residuals, by design:
//! - Globs match names, not inodes: a hard link inside the workspace to a denied file
//!   (FS-DENY-SYM-02), or to a file outside it, can be read under its workspace name
//!   unless [`WorkspaceConfig::refuse_hard_links`] is set. Writes are unaffected: they
//!   replace the directory entry by rename and never modify a shared inode.
//! - An `expected_sha256` check and the final rename are not one atomic step; the
//!   file's identity (inode, size, mtime, ctime) is re-checked just before the rename,
//!   which narrows the window to a change within the same timestamp tick.
//! - Names that are not UTF-8 are shown lossily in results.
//! - Overwriting keeps the permission bits (`0o777`) but drops set-id bits.

#![warn(missing_docs)]

mod bind;
mod cwd;
mod delete;
mod dir;
mod error;
mod git_state;
mod list;
mod masks;
mod path;
mod read;
mod redact;
mod search;
mod usage;
mod walk;
mod workspace;
mod write;

pub use bind::{BOUND_HASH_CAP, MAX_BOUND_FILES, MAX_BOUND_WORDS};
pub use cwd::OpenDirectory;
pub use delete::{DeleteOutcome, DeleteRequest, MAX_DELETE_DEPTH};
pub use error::{Error, Result};
pub use list::{Entry, ListOutcome, ListRequest, Truncation};
pub use masks::{GIT_PROTECTED, MAX_MASK_WALK_ENTRIES, ProtectedSet, RunMasks, is_plain_relative};
pub use path::{Sha256, WorkspacePath};
pub use read::{ReadOutcome, ReadRange, ReadRequest, StatOutcome, StatRequest};
pub use redact::redact_url_credentials;
pub use search::{
    FileMatches, FindOutcome, FindRequest, Found, SearchLine, SearchOutcome, SearchRequest,
};
pub use usage::{DiskUsage, MAX_USAGE_WALK_DEPTH, MAX_USAGE_WALK_ENTRIES, UsageSnapshot};
pub use workspace::{
    Canonical, DEFAULT_PROTECTED, EntryKind, HiddenPaths, Limits, Workspace, WorkspaceConfig,
};
pub use write::{EditOutcome, EditRequest, MkdirOutcome, MkdirRequest, WriteOutcome, WriteRequest};
