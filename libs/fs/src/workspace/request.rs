//! A caller's path turned into a root-relative request, and result paths shown back in the
//! caller's style. Spellings meant for another system are refused here.

use std::path::{Path, PathBuf};

use super::Workspace;
use crate::error::{Error, Result};
use crate::path::WorkspacePath;

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

/// Why a request path would mean something else on the system its caller had in mind:
/// Windows drive-letter, UNC and device spellings always, and any backslash unless
/// backslashes are allowed in names.
pub(super) fn foreign_spelling(p: &str, allow_backslash_names: bool) -> Option<&'static str> {
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
}
