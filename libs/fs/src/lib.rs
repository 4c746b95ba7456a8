//! Workspace confinement and the executor's filesystem operations.
//!
//! A [`Workspace`] holds an open directory handle of the root. Every path a caller sends
//! is resolved by the kernel beneath that handle (`openat2` with `RESOLVE_BENEATH |
//! RESOLVE_NO_MAGICLINKS`), so `..`, absolute paths, symlinks and symlink races cannot
//! reach outside it. Deny globs hide paths completely; protected globs make them
//! read-only. Both apply to the canonical workspace-relative path of what was opened.
//!
//! Operations are synchronous; an async caller runs them on a blocking thread.

mod error;
mod list;
mod path;
mod read;
mod search;
mod walk;
mod workspace;
mod write;

pub use error::{Error, Result};
pub use list::{Entry, ListOutcome, ListRequest, Truncation};
pub use path::{Sha256, WorkspacePath};
pub use read::{ReadOutcome, ReadRange, ReadRequest, StatOutcome, StatRequest};
pub use search::{
    FileMatches, FindOutcome, FindRequest, Found, SearchLine, SearchOutcome, SearchRequest,
};
pub use workspace::{DEFAULT_PROTECTED, EntryKind, Limits, Workspace, WorkspaceConfig};
pub use write::{EditOutcome, EditRequest, MkdirOutcome, MkdirRequest, WriteOutcome, WriteRequest};
