//! The workspace root handle, path resolution beneath it, and the deny/protected globs.
//!
//! Every path is resolved by the kernel against the root's directory handle with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: each component, symlinks included,
//! must stay beneath the root or the open fails with `EXDEV`. No decision here is ever made
//! by comparing path strings against the root.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::path::WorkspacePath;

/// Protected patterns used when the configuration names none.
pub const DEFAULT_PROTECTED: &[&str] = &[
    "**/.git",
    "**/.git/**",
    "**/.env",
    "**/.envrc",
    "**/*.pem",
    "**/*.key",
    "**/.ssh",
    "**/.ssh/**",
    "**/.claude",
    "**/.claude/**",
    "**/.vscode",
    "**/.vscode/**",
    "**/.codex",
    "**/.codex/**",
    "**/.cursor",
    "**/.cursor/**",
    "**/.gemini",
    "**/.gemini/**",
    "**/.hg",
    "**/.hg/**",
    "**/.svn",
    "**/.svn/**",
    "**/.jj",
    "**/.jj/**",
    "**/.gitattributes",
    "**/.gitmodules",
];

/// Size and count limits; every request cap is checked against the matching maximum.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest number of bytes one read returns (also the default read cap).
    pub max_read_bytes: u64,
    /// Largest content a write or an edit may produce.
    pub max_write_bytes: u64,
    /// Files up to this size get a whole-file sha256 on read and stat.
    pub hash_limit: u64,
    /// Default entry cap of a listing.
    pub default_list_entries: usize,
    /// Largest entry cap a listing may ask for.
    pub max_list_entries: usize,
    /// Default depth of a recursive listing.
    pub default_list_depth: usize,
    /// Largest depth a recursive listing may ask for.
    pub max_list_depth: usize,
    /// Default number of matching lines a search returns.
    pub default_search_results: usize,
    /// Largest result cap a search may ask for.
    pub max_search_results: usize,
    /// Default number of line bytes a search returns.
    pub default_search_bytes: usize,
    /// Largest byte cap a search may ask for.
    pub max_search_bytes: usize,
    /// Default wall-time budget of a search or find.
    pub default_search_time: Duration,
    /// Largest wall-time budget a search or find may ask for.
    pub max_search_time: Duration,
    /// Most files one search or find visits before it stops as truncated.
    pub max_search_files: usize,
    /// Default number of paths a find returns.
    pub default_find_results: usize,
    /// Largest result cap a find may ask for.
    pub max_find_results: usize,
    /// Longest matching line returned by a search; longer lines are cut and flagged.
    pub max_line_bytes: usize,
    /// Largest context (lines before and after) a search may ask for.
    pub max_context_lines: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_read_bytes: 4 << 20,
            max_write_bytes: 16 << 20,
            hash_limit: 64 << 20,
            default_list_entries: 1_000,
            max_list_entries: 50_000,
            default_list_depth: 3,
            max_list_depth: 64,
            default_search_results: 200,
            max_search_results: 10_000,
            default_search_bytes: 1 << 20,
            max_search_bytes: 16 << 20,
            default_search_time: Duration::from_secs(10),
            max_search_time: Duration::from_secs(120),
            max_search_files: 200_000,
            default_find_results: 1_000,
            max_find_results: 100_000,
            max_line_bytes: 2_048,
            max_context_lines: 20,
        }
    }
}

/// How to open a [`Workspace`].
#[derive(Debug, Clone)]
pub struct WorkspaceConfig {
    /// The workspace root directory.
    pub root: PathBuf,
    /// Absolute prefixes an orchestrator uses for the same root (`/home/me/proj`).
    pub aliases: Vec<PathBuf>,
    /// Globs over canonical workspace-relative paths with no access at all.
    ///
    /// `*` stays within one component and `**/` also matches at the root (`**/.env`
    /// covers `.env` and `a/b/.env`). A glob that matches a directory covers everything
    /// beneath it.
    pub deny: Vec<String>,
    /// Globs over canonical workspace-relative paths that are readable but not writable,
    /// with the same syntax as `deny`.
    pub protected: Vec<String>,
    /// Size and count limits.
    pub limits: Limits,
    /// Refuse to return the content of regular files with more than one hard link:
    /// another name for the same inode may be denied or lie outside the workspace, and
    /// globs only see names. Off by default because build trees hard-link freely.
    pub refuse_hard_links: bool,
    /// Accept request paths containing `\` as plain name bytes. Off by default: the
    /// workspace is a POSIX tree where `\` separates nothing, so `src\main.rs` would name
    /// one file called `src\main.rs`, which is never what a caller thinking in Windows
    /// paths meant. Windows drive-letter (`C:\`, `c:/`, `C:x`), UNC (`\\server\share`) and
    /// device (`\\?\`) spellings are refused whatever this says.
    pub allow_backslash_names: bool,
}

impl WorkspaceConfig {
    /// A configuration for `root` with no aliases, no deny globs, the default protected
    /// globs and default limits.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        WorkspaceConfig {
            root: root.into(),
            aliases: Vec::new(),
            deny: Vec::new(),
            protected: DEFAULT_PROTECTED.iter().map(|s| (*s).to_owned()).collect(),
            limits: Limits::default(),
            refuse_hard_links: false,
            allow_backslash_names: false,
        }
    }
}

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
}

/// How the caller spelled a path, so results can be shown in the same form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// Relative to the root.
    Relative,
    /// Absolute, under `prefixes[i]`.
    Prefix(usize),
}

/// A request path turned into a root-relative path for the kernel.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    /// The path as given, for messages.
    pub shown: &'a str,
    /// Root-relative, possibly with `..` (the kernel decides whether it escapes).
    pub rel: PathBuf,
    /// The caller ended the path with `/`, so it must name a directory.
    pub trailing_slash: bool,
    /// How to show result paths.
    pub style: Style,
}

impl Request<'_> {
    /// The relative path in the form handed to openat2 (`.` for the root).
    pub(crate) fn kernel_path(&self) -> PathBuf {
        let mut p = if self.rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            self.rel.clone()
        };
        if self.trailing_slash {
            p.as_mut_os_string().push("/");
        }
        p
    }
}

/// A resolved path: a handle to what was opened and its canonical workspace-relative path.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub fd: OwnedFd,
    pub stat: Stat,
    pub canon: PathBuf,
}

/// The canonical form of a request path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canonical {
    /// Workspace-relative, symlinks resolved (`.` for the root): what policies match.
    pub relative: String,
    /// The same path in the caller's style (relative, or under the root or alias used).
    pub display: String,
    /// Whether the whole path exists (otherwise only a prefix was resolved).
    pub exists: bool,
}

/// Whether an access reads or writes, for the protected globs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// The kernel-enforced confinement used for every lookup that may follow symlinks.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// Confinement for paths already known to be canonical: any symlink means a concurrent swap.
pub(crate) const BENEATH_NO_SYMLINKS: ResolveFlags = BENEATH.union(ResolveFlags::NO_SYMLINKS);

/// The kind of a directory entry, as listings and stat report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed when listing).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    pub(crate) fn from_file_type(t: FileType) -> EntryKind {
        match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }

    pub(crate) fn of(stat: &Stat) -> EntryKind {
        EntryKind::from_file_type(FileType::from_raw_mode(stat.st_mode))
    }

    /// A lowercase name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::File => "file",
            EntryKind::Dir => "directory",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "special file",
        }
    }
}

pub(crate) fn special_kind(stat: &Stat) -> &'static str {
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        _ => "special file",
    }
}

// `stat` field widths differ between architectures, so the casts are not always no-ops.
#[allow(clippy::unnecessary_cast)]
pub(crate) fn mtime_of(stat: &Stat) -> SystemTime {
    let secs = stat.st_mtime as i64;
    let nanos = stat.st_mtime_nsec as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + Duration::from_nanos(nanos.into())
    }
}

fn build_globs(field: &'static str, patterns: &[String]) -> Result<GlobSet> {
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
fn spelled(rel: &Path, mut visit: impl FnMut(&Path) -> bool) -> bool {
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

/// Why a request path would mean something else on the system its caller had in mind:
/// Windows drive-letter, UNC and device spellings always, and any backslash unless
/// backslashes are allowed in names.
fn foreign_spelling(p: &str, allow_backslash_names: bool) -> Option<&'static str> {
    let b = p.as_bytes();
    // `C:\x`, `c:/x`, `C:` and the drive-relative `C:x` alike.
    if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
        return Some(
            "this is a Windows drive-letter path, but the workspace is a POSIX tree; name files relative to the workspace root with `/` between components (`src/main.rs`; a name that really starts with a letter and a colon is `./c:name`)",
        );
    }
    if b.starts_with(b"\\\\") || b.starts_with(b"\\??\\") {
        return Some(
            "this is a Windows UNC or device path (`\\\\server\\share`, `\\\\?\\`), but the workspace is a POSIX tree; name files relative to the workspace root with `/` between components",
        );
    }
    if !allow_backslash_names && b.contains(&b'\\') {
        return Some(
            "the path contains `\\`, which separates nothing in the workspace's POSIX tree and would become part of a file name; use `/` between components (`src/main.rs`)",
        );
    }
    None
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

    pub(crate) fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    /// Turns the caller's path into a root-relative one, remembering its style.
    pub(crate) fn request<'a>(&self, path: &'a WorkspacePath) -> Result<Request<'a>> {
        let shown = path.as_str();
        if let Some(why) = foreign_spelling(shown, self.allow_backslash_names) {
            return Err(Error::InvalidPath {
                path: shown.to_owned(),
                why,
            });
        }
        let trailing_slash = shown.len() > 1 && shown.ends_with('/');
        let p = Path::new(shown);
        if !p.is_absolute() {
            return Ok(Request {
                shown,
                rel: p.components().collect(),
                trailing_slash,
                style: Style::Relative,
            });
        }
        // Component-wise prefix match: `/ws_secrets` is not under `/ws`. What follows the
        // prefix is still resolved by the kernel, so `/ws/../etc` fails there.
        for (i, prefix) in self.prefixes.iter().enumerate() {
            if let Ok(rest) = p.strip_prefix(prefix) {
                return Ok(Request {
                    shown,
                    rel: rest.components().collect(),
                    trailing_slash,
                    style: Style::Prefix(i),
                });
            }
        }
        Err(Error::OutsideWorkspace {
            path: shown.to_owned(),
        })
    }

    /// Shows a canonical workspace-relative path in the caller's style.
    pub(crate) fn render(&self, style: Style, canon: &Path) -> String {
        match style {
            Style::Relative if canon.as_os_str().is_empty() => ".".to_owned(),
            Style::Relative => canon.to_string_lossy().into_owned(),
            Style::Prefix(i) if canon.as_os_str().is_empty() => {
                self.prefixes[i].to_string_lossy().into_owned()
            }
            Style::Prefix(i) => self.prefixes[i].join(canon).to_string_lossy().into_owned(),
        }
    }

    /// `openat2` beneath the root, retrying the `EAGAIN` the kernel returns when a
    /// concurrent rename makes a `..` check inconclusive.
    pub(crate) fn openat2(
        &self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        flags: OFlags,
        resolve: ResolveFlags,
    ) -> std::result::Result<OwnedFd, Errno> {
        // openat2, unlike openat, refuses O_PATH combined with other access flags.
        let flags = if flags.contains(OFlags::PATH) {
            flags | OFlags::CLOEXEC
        } else {
            flags | OFlags::CLOEXEC | OFlags::NOCTTY
        };
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(dir, rel, flags, Mode::empty(), resolve) {
                Err(Errno::AGAIN | Errno::INTR) if tries < 64 => tries += 1,
                other => return other,
            }
        }
    }

    /// The canonical workspace-relative path of an open handle.
    pub(crate) fn canonical(&self, fd: BorrowedFd<'_>, shown: &str) -> Result<PathBuf> {
        let abs = fd_path(fd).map_err(|source| Error::Io {
            op: "find the canonical path of",
            path: shown.to_owned(),
            source,
        })?;
        // The kernel already guaranteed the handle is beneath the root; this only
        // turns its absolute name back into a relative one.
        match abs.strip_prefix(&self.real) {
            Ok(rel) => Ok(rel.to_path_buf()),
            Err(_) => Err(Error::OutsideWorkspace {
                path: shown.to_owned(),
            }),
        }
    }

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

    /// Whether a single entry (whose ancestors were already checked) is denied or hidden.
    pub(crate) fn entry_denied(&self, canon: &Path, hidden: Option<&HiddenPaths>) -> bool {
        self.deny.is_match(canon) || hidden.is_some_and(|h| h.matches(canon))
    }

    /// Resolves an existing path beneath the root to an `O_PATH` handle, checking the
    /// globs on its canonical path. `follow` decides whether a final symlink is followed.
    pub(crate) fn resolve(
        &self,
        req: &Request<'_>,
        follow: bool,
        access: Access,
    ) -> Result<Resolved> {
        self.resolve_hiding(req, follow, access, None)
    }

    /// [`Self::resolve`] with `hidden` treated as more deny globs, on the spelling and on
    /// the canonical path.
    pub(crate) fn resolve_hiding(
        &self,
        req: &Request<'_>,
        follow: bool,
        access: Access,
        hidden: Option<&HiddenPaths>,
    ) -> Result<Resolved> {
        self.precheck_hiding(req, access, hidden)?;
        let mut flags = OFlags::PATH;
        if !follow {
            flags |= OFlags::NOFOLLOW;
        }
        let kernel = req.kernel_path();
        let mut attempt = 0;
        let (fd, canon) = loop {
            let fd = self
                .openat2(self.root_fd(), &kernel, flags, BENEATH)
                .map_err(|e| Error::from_errno("open", req.shown, e))?;
            match self.canonical(fd.as_fd(), req.shown) {
                Ok(canon) => break (fd, canon),
                // A concurrent write renamed a new file over the one just opened: the path
                // names the new one now.
                Err(e) if replaced(&e) && attempt < RENAME_RETRIES => attempt += 1,
                Err(e) => return Err(e),
            }
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", req.shown, e))?;
        self.check_hiding(req.shown, &canon, access, hidden)?;
        Ok(Resolved { fd, stat, canon })
    }

    /// The canonical workspace-relative path a request names, for policy decisions and
    /// approval digests, without opening anything for reading or writing.
    ///
    /// Symlinks beneath the root are resolved; for a path that does not exist yet, the
    /// longest existing prefix is resolved and the remaining plain names are appended.
    /// Escapes, loops and denied paths fail exactly as the operations would.
    pub fn canonicalize(&self, path: &WorkspacePath) -> Result<Canonical> {
        self.canonicalize_as(path, Access::Read)
    }

    /// [`Workspace::canonicalize`] for a path about to be written or created: protected
    /// globs refuse it too, so a write the workspace would refuse is refused before anyone
    /// is asked to approve it.
    pub fn canonicalize_for_write(&self, path: &WorkspacePath) -> Result<Canonical> {
        self.canonicalize_as(path, Access::Write)
    }

    fn canonicalize_as(&self, path: &WorkspacePath, access: Access) -> Result<Canonical> {
        let req = self.request(path)?;
        self.precheck(&req, access)?;
        let comps: Vec<Component<'_>> = req.rel.components().collect();
        for keep in (0..=comps.len()).rev() {
            let prefix: PathBuf = comps[..keep].iter().collect();
            let kernel = if prefix.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                prefix
            };
            let mut attempt = 0;
            let opened = loop {
                match self.openat2(self.root_fd(), &kernel, OFlags::PATH, BENEATH) {
                    Ok(fd) => match self.canonical(fd.as_fd(), req.shown) {
                        Ok(canon) => break Ok(canon),
                        Err(e) if replaced(&e) && attempt < RENAME_RETRIES => attempt += 1,
                        Err(e) => return Err(e),
                    },
                    Err(e) => break Err(e),
                }
            };
            match opened {
                Ok(canon) => {
                    let mut canon = canon;
                    for c in &comps[keep..] {
                        match c {
                            Component::Normal(n) => canon.push(n),
                            Component::CurDir => {}
                            // `..` after a missing directory names nothing that exists.
                            _ => {
                                return Err(Error::NotFound {
                                    path: req.shown.to_owned(),
                                });
                            }
                        }
                    }
                    self.check(req.shown, &canon, access)?;
                    return Ok(Canonical {
                        display: self.render(req.style, &canon),
                        relative: self.render(Style::Relative, &canon),
                        exists: keep == comps.len(),
                    });
                }
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(Error::from_errno("resolve", req.shown, e)),
            }
        }
        Err(Error::NotFound {
            path: req.shown.to_owned(),
        })
    }

    /// Opens an already resolved object again with real access flags, by its canonical
    /// path with no symlinks allowed, and checks it is still the same inode.
    pub(crate) fn reopen(&self, r: &Resolved, shown: &str, flags: OFlags) -> Result<OwnedFd> {
        let rel = if r.canon.as_os_str().is_empty() {
            Path::new(".")
        } else {
            r.canon.as_path()
        };
        // Through the handle's own /proc link: the same inode that was resolved and checked,
        // whatever has been renamed over its path since (a concurrent write replaces files by
        // rename). Without /proc, by path, confined as the resolution was.
        let fd = match rustix::fs::open(
            format!("/proc/self/fd/{}", r.fd.as_raw_fd()),
            flags | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(_) => self
                .openat2(
                    self.root_fd(),
                    rel,
                    flags | OFlags::NOFOLLOW | OFlags::NONBLOCK,
                    BENEATH_NO_SYMLINKS,
                )
                .map_err(|e| Error::from_errno("open", shown, e))?,
        };
        let now = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", shown, e))?;
        if (now.st_dev, now.st_ino) != (r.stat.st_dev, r.stat.st_ino) {
            return Err(Error::Io {
                op: "open",
                path: shown.to_owned(),
                source: std::io::Error::other(
                    "the file was replaced while it was being opened; retry",
                ),
            });
        }
        Ok(fd)
    }

    /// Opens a directory (following symlinks beneath the root) for use as a parent,
    /// creating missing components when `create` is set.
    pub(crate) fn open_dir(
        &self,
        shown: &str,
        rel: &Path,
        create: bool,
    ) -> Result<(OwnedFd, PathBuf)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let kernel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        match self.openat2(self.root_fd(), kernel, flags, BENEATH) {
            Ok(fd) => {
                let canon = self.canonical(fd.as_fd(), shown)?;
                return Ok((fd, canon));
            }
            Err(Errno::NOENT) if create => {}
            Err(e) => return Err(Error::from_errno("open directory", shown, e)),
        }
        let mut cur = self
            .openat2(self.root_fd(), Path::new("."), flags, BENEATH)
            .map_err(|e| Error::from_errno("open directory", shown, e))?;
        let mut prefix = PathBuf::new();
        for c in rel.components() {
            prefix.push(c);
            match self.openat2(self.root_fd(), &prefix, flags, BENEATH) {
                Ok(fd) => cur = fd,
                Err(Errno::NOENT) => {
                    let Component::Normal(name) = c else {
                        return Err(Error::NotFound {
                            path: shown.to_owned(),
                        });
                    };
                    let parent = self.canonical(cur.as_fd(), shown)?;
                    self.check(shown, &parent.join(name), Access::Write)?;
                    match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(Error::from_errno("create directory", shown, e)),
                    }
                    // A single fresh component relative to the parent handle, no symlinks:
                    // a concurrent swap to a symlink fails here instead of being followed.
                    cur = self
                        .openat2(cur.as_fd(), Path::new(name), flags, BENEATH_NO_SYMLINKS)
                        .map_err(|e| Error::from_errno("open directory", shown, e))?;
                }
                Err(e) => return Err(Error::from_errno("open directory", shown, e)),
            }
        }
        let canon = self.canonical(cur.as_fd(), shown)?;
        Ok((cur, canon))
    }
}

fn validate_limits(l: &Limits) -> Result<()> {
    let checks: [(&'static str, bool); 6] = [
        ("limits.max_read_bytes", l.max_read_bytes > 0),
        ("limits.max_write_bytes", l.max_write_bytes > 0),
        (
            "limits.default_list_entries",
            l.default_list_entries > 0 && l.default_list_entries <= l.max_list_entries,
        ),
        (
            "limits.default_search_results",
            l.default_search_results > 0 && l.default_search_results <= l.max_search_results,
        ),
        (
            "limits.default_search_bytes",
            l.default_search_bytes > 0 && l.default_search_bytes <= l.max_search_bytes,
        ),
        (
            "limits.default_find_results",
            l.default_find_results > 0 && l.default_find_results <= l.max_find_results,
        ),
    ];
    for (field, ok) in checks {
        if !ok {
            return Err(Error::InvalidRequest {
                field,
                why: "must be positive and not above its maximum".to_owned(),
            });
        }
    }
    Ok(())
}

/// How often a lookup is repeated when a concurrent rename replaced what it opened.
const RENAME_RETRIES: u32 = 16;

/// Whether `e` says the object opened was unlinked (replaced by a rename) before its name was
/// read.
fn replaced(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The absolute path the kernel records for an open handle.
fn fd_path(fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    // An unlinked object reads back as `... (deleted)`: it has no canonical path.
    if link.as_os_str().as_bytes().ends_with(b" (deleted)") || !link.is_absolute() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the object was removed while it was being opened",
        ));
    }
    Ok(link)
}

/// Checks a requested cap: `None` takes the default, zero or above the maximum is refused.
pub(crate) fn cap<T: Copy + PartialOrd + Default + std::fmt::Debug>(
    field: &'static str,
    requested: Option<T>,
    default: T,
    max: T,
) -> Result<T> {
    match requested {
        None => Ok(default),
        Some(v) if v == T::default() => Err(Error::InvalidRequest {
            field,
            why: "must be greater than zero".to_owned(),
        }),
        Some(v) if v > max => Err(Error::InvalidRequest {
            field,
            why: format!("{v:?} is above the maximum of {max:?}"),
        }),
        Some(v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelled_visits_every_path_the_spelling_passes_through() {
        let visits = |p: &str| {
            let mut v = Vec::new();
            spelled(Path::new(p), |q| {
                v.push(q.to_string_lossy().into_owned());
                false
            });
            v
        };
        assert_eq!(visits("a/./b/../c"), ["a", "a/b", "a/c"]);
        assert_eq!(
            visits(".codex/../../.codex/x"),
            [".codex", ".codex", ".codex/x"]
        );
    }

    #[test]
    fn foreign_spellings_are_recognised() {
        for p in [
            "C:\\Users\\me\\x.txt",
            "c:/x",
            "c:",
            "c:d",
            "Z:\\",
            "\\\\server\\share\\x",
            "\\\\?\\C:\\x",
            "\\\\.\\pipe\\x",
            "\\??\\C:\\x",
        ] {
            assert!(foreign_spelling(p, true).is_some(), "{p}");
            assert!(foreign_spelling(p, false).is_some(), "{p}");
        }
        for p in ["src\\main.rs", "a\\ b", "\\x"] {
            assert!(foreign_spelling(p, false).is_some(), "{p}");
            assert!(foreign_spelling(p, true).is_none(), "{p}");
        }
        for p in [
            "src/main.rs",
            "ab:/x",
            "./c:/x",
            "./c:d",
            "/abs/c:/x",
            ".",
            "1:x",
        ] {
            assert!(foreign_spelling(p, false).is_none(), "{p}");
        }
    }

    #[test]
    fn default_protected_globs_match_at_the_root_and_below() {
        let set = build_globs(
            "protected",
            &DEFAULT_PROTECTED
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        for p in [
            ".git",
            ".git/config",
            "a/b/.git/hooks/x",
            ".env",
            "x/.env",
            "k.pem",
            "a/id.key",
            ".codex",
            ".codex/config.toml",
            "a/.cursor/rules",
            ".gitattributes",
            "vendor/x/.gitmodules",
            ".jj/repo",
        ] {
            assert!(set.is_match(p), "{p}");
        }
        for p in [
            "src/main.rs",
            ".github/x",
            "env",
            "a.pem.txt",
            ".gitignore",
            "codex/x",
        ] {
            assert!(!set.is_match(p), "{p}");
        }
    }

    #[test]
    fn workspace_is_shareable_across_blocking_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Workspace>();
    }

    #[test]
    fn caps_refuse_zero_and_above_max() {
        assert_eq!(cap("x", None, 5usize, 10).unwrap(), 5);
        assert_eq!(cap("x", Some(7usize), 5, 10).unwrap(), 7);
        assert!(cap("x", Some(0usize), 5, 10).is_err());
        assert!(cap("x", Some(11usize), 5, 10).is_err());
    }
}
