//! The one error type every filesystem operation returns.

use toolgate_core::{Reason, ReasonedError};

/// Why a filesystem operation failed.
///
/// `path` fields hold the path as the caller spelled it (or the canonical
/// workspace-relative path when that is what matched), never an absolute host
/// path outside the caller's view.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path string is unusable (empty, NUL byte, names no file where one is needed).
    #[error("invalid path `{path}`: {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A request field is out of range.
    #[error("invalid {field}: {why}")]
    InvalidRequest {
        /// The field name as the request spells it.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A regex or glob does not compile.
    #[error("invalid pattern `{pattern}`: {why}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// The compiler's complaint.
        why: String,
    },
    /// The path resolves outside the workspace root.
    #[error("path `{path}` resolves outside the workspace; use a path inside the workspace root")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
    },
    /// A deny pattern matches the path: no access at all.
    #[error("path `{path}` is denied by the workspace policy (pattern match on `{canonical}`)")]
    Denied {
        /// The path as given.
        path: String,
        /// The canonical workspace-relative path that matched.
        canonical: String,
    },
    /// The file has several hard links and the workspace refuses to read those.
    #[error(
        "`{path}` has {nlink} hard links; reading multiply-linked files is disabled because another name for it may be denied or outside the workspace"
    )]
    HardLinked {
        /// The path as given.
        path: String,
        /// The link count seen.
        nlink: u64,
    },
    /// A protected pattern matches the path and the operation would write.
    #[error("path `{path}` is protected and cannot be written (pattern match on `{canonical}`)")]
    Protected {
        /// The path as given.
        path: String,
        /// The canonical workspace-relative path that matched.
        canonical: String,
    },
    /// The operating system refused access inside the workspace.
    #[error("access to `{path}` was refused by the operating system")]
    AccessDenied {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path (or at one of its parents).
    #[error("no such file or directory: `{path}`")]
    NotFound {
        /// The path as given.
        path: String,
    },
    /// Something already exists where the request wanted to create.
    #[error("`{path}` already exists")]
    AlreadyExists {
        /// The path as given.
        path: String,
    },
    /// The path is not a regular file.
    #[error("`{path}` is a {kind}, not a regular file")]
    NotAFile {
        /// The path as given.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// The path or one of its parents is not a directory.
    #[error("`{path}` (or one of its parents) is not a directory")]
    NotADirectory {
        /// The path as given.
        path: String,
    },
    /// A directory to remove still has entries and the request was not recursive.
    #[error(
        "directory `{path}` is not empty; delete its entries first, or ask for a recursive deletion"
    )]
    DirectoryNotEmpty {
        /// The path as given.
        path: String,
    },
    /// Resolution met a symlink loop or too many links.
    #[error("resolving `{path}` met a symlink loop or too many symlinks")]
    SymlinkLoop {
        /// The path as given.
        path: String,
    },
    /// The file's sha256 differs from the expected one; nothing was written.
    #[error("`{path}` changed: expected sha256 {expected}, found {actual}; read it again")]
    Conflict {
        /// The path as given.
        path: String,
        /// The sha256 the caller expected.
        expected: String,
        /// The sha256 found (or `absent`).
        actual: String,
    },
    /// An edit found a different number of occurrences than expected.
    #[error("expected {expected} occurrence(s) of the old text in `{path}`, found {found}")]
    EditMismatch {
        /// The path as given.
        path: String,
        /// The expected count, or `at least 1`.
        expected: String,
        /// The count found.
        found: usize,
    },
    /// An edit's old text reaches a line holding a URL credential, which reads show redacted.
    #[error(
        "the old text in `{path}` reaches a line that holds a URL credential (shown as `***`); such lines cannot be edited through the filesystem API: edit other lines, or ask the user to change it"
    )]
    CredentialLine {
        /// The path as given.
        path: String,
    },
    /// The content or file exceeds a configured size limit.
    #[error("`{path}` is too large: {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The path as given.
        path: String,
        /// The size seen.
        size: u64,
        /// The configured limit.
        limit: u64,
    },
    /// The workspace file system is out of space or quota.
    #[error("no space left on the workspace file system while writing `{path}`")]
    NoSpace {
        /// The path as given.
        path: String,
    },
    /// The workspace was renamed under the walk that prepares a run's view, again and
    /// again: its masks could not be computed from one consistent tree.
    #[error(
        "the workspace kept changing while the run's view was prepared (`{path}` moved); retry when renames in the workspace have stopped"
    )]
    Unsettled {
        /// The path that moved last.
        path: String,
    },
    /// An unexpected operating system error.
    #[error("{op} `{path}` failed: {source}")]
    Io {
        /// The operation that failed.
        op: &'static str,
        /// The path as given.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        match self {
            Error::InvalidPath { .. } => Reason::InvalidPath,
            Error::InvalidRequest { .. } => Reason::InvalidRequest,
            Error::InvalidPattern { .. } => Reason::InvalidPattern,
            Error::OutsideWorkspace { .. } => Reason::PathOutsideWorkspace,
            Error::Denied { .. } | Error::HardLinked { .. } => Reason::PathDenied,
            Error::Protected { .. } => Reason::PathProtected,
            Error::AccessDenied { .. } => Reason::AccessDenied,
            Error::NotFound { .. } => Reason::NotFound,
            Error::AlreadyExists { .. } => Reason::AlreadyExists,
            Error::NotAFile { .. } => Reason::NotAFile,
            Error::NotADirectory { .. } => Reason::NotADirectory,
            Error::DirectoryNotEmpty { .. } => Reason::DirectoryNotEmpty,
            Error::SymlinkLoop { .. } => Reason::SymlinkLoop,
            Error::Conflict { .. } | Error::Unsettled { .. } => Reason::Conflict,
            Error::EditMismatch { .. } | Error::CredentialLine { .. } => Reason::EditMismatch,
            Error::TooLarge { .. } => Reason::TooLarge,
            Error::NoSpace { .. } => Reason::NoSpace,
            Error::Io { .. } => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        let mut meta = Vec::new();
        match self {
            Error::InvalidRequest { field, .. } => meta.push(("field", (*field).to_owned())),
            Error::InvalidPattern { pattern, .. } => meta.push(("pattern", pattern.clone())),
            Error::Conflict {
                path,
                expected,
                actual,
            } => {
                meta.push(("path", path.clone()));
                meta.push(("expected_sha256", expected.clone()));
                meta.push(("actual_sha256", actual.clone()));
            }
            Error::EditMismatch {
                path,
                expected,
                found,
            } => {
                meta.push(("path", path.clone()));
                meta.push(("expected", expected.clone()));
                meta.push(("found", found.to_string()));
            }
            Error::TooLarge {
                path, size, limit, ..
            } => {
                meta.push(("path", path.clone()));
                meta.push(("size", size.to_string()));
                meta.push(("limit", limit.to_string()));
            }
            Error::HardLinked { path, nlink } => {
                meta.push(("path", path.clone()));
                meta.push(("nlink", nlink.to_string()));
            }
            Error::InvalidPath { path, .. }
            | Error::OutsideWorkspace { path }
            | Error::Denied { path, .. }
            | Error::Protected { path, .. }
            | Error::AccessDenied { path }
            | Error::NotFound { path }
            | Error::AlreadyExists { path }
            | Error::NotAFile { path, .. }
            | Error::NotADirectory { path }
            | Error::DirectoryNotEmpty { path }
            | Error::SymlinkLoop { path }
            | Error::CredentialLine { path }
            | Error::NoSpace { path }
            | Error::Unsettled { path }
            | Error::Io { path, .. } => meta.push(("path", path.clone())),
        }
        meta
    }
}

impl Error {
    /// Maps an errno met while resolving or opening `path` onto the closed reason list.
    pub(crate) fn from_errno(op: &'static str, path: &str, errno: rustix::io::Errno) -> Error {
        use rustix::io::Errno;
        let path = path.to_owned();
        match errno {
            // openat2 reports every RESOLVE_BENEATH violation as EXDEV.
            Errno::XDEV => Error::OutsideWorkspace { path },
            Errno::LOOP => Error::SymlinkLoop { path },
            Errno::NOENT => Error::NotFound { path },
            Errno::NOTDIR => Error::NotADirectory { path },
            Errno::NOTEMPTY => Error::DirectoryNotEmpty { path },
            Errno::EXIST => Error::AlreadyExists { path },
            Errno::ISDIR => Error::NotAFile {
                path,
                kind: "directory",
            },
            Errno::ACCESS | Errno::PERM | Errno::ROFS => Error::AccessDenied { path },
            Errno::NOSPC | Errno::DQUOT => Error::NoSpace { path },
            Errno::NAMETOOLONG => Error::InvalidPath {
                path,
                why: "a component or the whole path is too long",
            },
            other => Error::Io {
                op,
                path,
                source: other.into(),
            },
        }
    }
}
