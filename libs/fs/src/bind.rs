//! The content digests of the workspace files a run names, which its approval binds.
//!
//! An approval of `sh build.sh` is worth nothing if `build.sh` can be rewritten between the
//! approval and the run. The executor, the only party that reads the workspace, resolves
//! every word of the command that could name a file and sends the digest of each regular
//! file it finds with the call; the policy digests them with the rest of the request, so a
//! changed file is a new request that needs a new approval.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;

use rustix::fs::{FileType, OFlags, Stat};
use sha2::Digest as _;

use crate::error::Result;
use crate::path::WorkspacePath;
use crate::workspace::{Access, Workspace};

/// At most this many files are bound into one run's request.
pub const MAX_BOUND_FILES: usize = 32;

/// At most this many words of one command are tried as paths.
pub const MAX_BOUND_WORDS: usize = 256;

/// Files up to this size are hashed whole; a larger one binds the sha256 of its first
/// `BOUND_HASH_CAP` bytes with its size and ctime (which a write always moves and no
/// unprivileged process can set back).
pub const BOUND_HASH_CAP: u64 = 1 << 20;

impl Workspace {
    /// The regular files among `words`, each resolved from the canonical workspace-relative
    /// directory `cwd` (absolute words as absolute request paths), that the workspace lets
    /// be read, with the digest of their content: canonical workspace-relative path →
    /// lowercase hex sha256, or `prefix:<cap>:<sha256>:size:<n>:ctime:<s>.<ns>` for a file
    /// over [`BOUND_HASH_CAP`], or `unreadable:size:<n>:ctime:<s>.<ns>` for one whose
    /// content may not or cannot be read here (a hard link the workspace refuses, mode
    /// 000).
    ///
    /// A word that names nothing, a directory, something outside the workspace or a denied
    /// path binds nothing. Options (`-x`) are not paths, but the value of `--opt=value` and
    /// `name=value` is tried too. At most [`MAX_BOUND_WORDS`] words are tried and
    /// [`MAX_BOUND_FILES`] files bound, in the order of the words.
    pub fn bound_files<'a>(
        &self,
        cwd: &str,
        words: impl IntoIterator<Item = &'a str>,
    ) -> BTreeMap<String, String> {
        let mut bound = BTreeMap::new();
        for word in candidates(words).take(MAX_BOUND_WORDS) {
            if bound.len() == MAX_BOUND_FILES {
                break;
            }
            let spelled = if word.starts_with('/') || matches!(cwd, "" | ".") {
                word.to_owned()
            } else {
                format!("{cwd}/{word}")
            };
            if let Ok(Some((path, digest))) = self.bound_file(spelled) {
                bound.entry(path).or_insert(digest);
            }
        }
        bound
    }

    /// The canonical path and digest of the regular file `spelled` names, if it is one the
    /// workspace lets be read.
    fn bound_file(&self, spelled: String) -> Result<Option<(String, String)>> {
        let path = WorkspacePath::try_from(spelled)?;
        let r = self.request(&path)?;
        let resolved = self.resolve(&r, true, Access::Read)?;
        if FileType::from_raw_mode(resolved.stat.st_mode) != FileType::RegularFile {
            return Ok(None);
        }
        let canonical = resolved.canon.to_string_lossy().into_owned();
        let stat = resolved.stat;
        let digest = if self.check_links(r.shown, &stat).is_err() {
            metadata("unreadable", &stat)
        } else {
            match self.reopen(&resolved, r.shown, OFlags::RDONLY) {
                Ok(fd) => content_digest(File::from(fd), &stat)
                    .unwrap_or_else(|_| metadata("unreadable", &stat)),
                Err(_) => metadata("unreadable", &stat),
            }
        };
        let canonical = if canonical.is_empty() {
            ".".to_owned()
        } else {
            canonical
        };
        Ok(Some((canonical, digest)))
    }
}

/// The words of a command that may name a file: every word but options, plus what follows
/// the first `=` of a word.
fn candidates<'a>(words: impl IntoIterator<Item = &'a str>) -> impl Iterator<Item = &'a str> {
    words
        .into_iter()
        .flat_map(|w| {
            let value = w.split_once('=').map(|(_, v)| v);
            let whole = (!w.starts_with('-')).then_some(w);
            whole.into_iter().chain(value)
        })
        .filter(|w| !w.is_empty() && !w.contains('\0'))
}

/// The sha256 of the file's content, whole up to the cap, else of its first cap bytes with
/// its size and ctime. Reads at most the cap whatever the file does meanwhile.
fn content_digest(file: File, stat: &Stat) -> std::io::Result<String> {
    let mut hasher = sha2::Sha256::new();
    let mut limited = file.take(BOUND_HASH_CAP + 1);
    let mut buf = vec![0u8; 64 * 1024];
    let mut read: u64 = 0;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let keep = (n as u64).min(BOUND_HASH_CAP.saturating_sub(read)) as usize;
        hasher.update(&buf[..keep]);
        read += n as u64;
    }
    let hex = hex::encode(hasher.finalize());
    Ok(if read > BOUND_HASH_CAP {
        format!(
            "prefix:{BOUND_HASH_CAP}:{hex}:{}",
            metadata("", stat).trim_start_matches(':')
        )
    } else {
        hex
    })
}

// `stat` field widths differ between architectures, so the casts are not always no-ops.
#[allow(clippy::unnecessary_cast)]
/// `<kind>:size:<n>:ctime:<s>.<ns>`.
fn metadata(kind: &str, stat: &Stat) -> String {
    format!(
        "{kind}:size:{}:ctime:{}.{:09}",
        stat.st_size as u64, stat.st_ctime as i64, stat.st_ctime_nsec as u64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_not_paths_but_their_values_are() {
        let words: Vec<_> = candidates([
            "sh",
            "-x",
            "build.sh",
            "--file=ci.mk",
            "-fMakefile",
            "A=b.sh",
            "",
        ])
        .collect();
        assert_eq!(words, ["sh", "build.sh", "ci.mk", "A=b.sh", "b.sh"]);
    }
}
