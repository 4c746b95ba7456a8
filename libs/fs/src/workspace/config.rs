//! How a workspace is configured: the default protected globs, the limits, and the check of a
//! request's cap against them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Protected patterns used when the configuration names none: what the human's own tools
/// read as configuration or execute implicitly (on `git status`, `cd`, opening an editor or
/// an agent, starting an interpreter or a toolchain), plus key material and other version
/// control metadata. A glob naming a directory covers everything beneath it.
pub const DEFAULT_PROTECTED: &[&str] = &[
    // Version control metadata, at any depth (nested repositories, submodules' gitdir files).
    "**/.git",
    "**/.git/**",
    "**/.gitattributes",
    "**/.gitmodules",
    "**/.hg",
    "**/.hg/**",
    "**/.svn",
    "**/.svn/**",
    "**/.jj",
    "**/.jj/**",
    // Git hook managers: husky's `core.hooksPath`, and configs the installed hooks run.
    "**/.husky",
    "**/.husky/**",
    "**/.pre-commit-config.yaml",
    "**/lefthook.yml",
    "**/.lefthook.yml",
    // Environment loaders and key material.
    "**/.env",
    "**/.envrc",
    "**/*.pem",
    "**/*.key",
    "**/.ssh",
    "**/.ssh/**",
    // Editors, dev containers and agents.
    "**/.vscode",
    "**/.vscode/**",
    "**/.idea",
    "**/.idea/**",
    "**/.devcontainer",
    "**/.devcontainer/**",
    "**/.zed",
    "**/.zed/**",
    "**/.exrc",
    "**/.nvimrc",
    "**/.nvim.lua",
    "**/.claude",
    "**/.claude/**",
    "**/.codex",
    "**/.codex/**",
    "**/.cursor",
    "**/.cursor/**",
    "**/.gemini",
    "**/.gemini/**",
    "**/.windsurf",
    "**/.windsurf/**",
    "**/.mcp.json",
    // Interpreter startup files (a virtualenv runs every `.pth` at the next `python`).
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/pyvenv.cfg",
    // Toolchain pins and package manager configs read by the next `cargo`, `npm`, `pnpm`...
    "**/rust-toolchain",
    "**/rust-toolchain.toml",
    "**/.cargo/config",
    "**/.cargo/config.toml",
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/.pnpmfile.cjs",
    "**/.tool-versions",
    "**/.mise.toml",
    "**/mise.toml",
    "**/.mise",
    "**/.mise/**",
    "**/.python-version",
    "**/.node-version",
    "**/.nvmrc",
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
    /// Most entries one recursive deletion removes; a larger tree is refused whole (its
    /// subdirectories can be deleted one at a time).
    pub max_delete_entries: usize,
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
            max_delete_entries: 1_000_000,
        }
    }
}

/// How to open a [`Workspace`](super::Workspace).
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

pub(super) fn validate_limits(l: &Limits) -> Result<()> {
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
