//! What a run may move in a repository and the human must see: branches, tags, `HEAD`, and the
//! index bits that hide edits from `git status` and `git diff`.
//!
//! Read before and after every run from the files git keeps (loose refs, `packed-refs`,
//! `HEAD`, the index), never by running anything the repository configures. Whether a moved
//! branch still contains its old commit is asked of the host's `git merge-base
//! --is-ancestor` with the repository's hooks, fsmonitor and global configuration switched
//! off; where no `git` is installed the move is reported without that verdict.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use toolgate_core::{GitChange, GitChangeKind};

/// Refs read per repository at most; a repository with more loose refs than this is read up
/// to it (packed refs are unaffected).
const MAX_LOOSE_REFS: usize = 10_000;

/// Largest `packed-refs` or index read.
const MAX_STATE_FILE: u64 = 64 << 20;

/// One repository's state at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GitState {
    /// `HEAD`, `refs/heads/*` and `refs/tags/*` → their value (an object id, or `ref: ...`
    /// for a symbolic `HEAD`).
    refs: BTreeMap<String, String>,
    /// Paths whose index entry has the assume-unchanged (`a`) or skip-worktree (`s`) bit.
    hidden_edits: BTreeMap<String, IndexBits>,
}

/// The index bits that hide a path's edits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct IndexBits {
    assume_unchanged: bool,
    skip_worktree: bool,
}

/// Parsed `packed-refs` and index bits by git directory, each reused while its file is
/// unchanged (same inode, size, mtime and ctime; git replaces both by rename): a repository
/// with many tags or a large index costs milliseconds to parse, twice per run.
#[derive(Debug, Default)]
pub(crate) struct IndexCache {
    packed: FileCache<BTreeMap<String, String>>,
    index: FileCache<BTreeMap<String, IndexBits>>,
}

type FileCache<T> = std::collections::HashMap<PathBuf, (FileKey, T)>;

type FileKey = (u64, u64, i64, i64, i64, i64);

impl GitState {
    /// Reads the state of the git directory `git` (an open directory handle) at
    /// workspace-relative `repo`.
    pub(crate) fn read(git: &OwnedFd, repo: &Path, cache: &mut IndexCache) -> GitState {
        let mut refs = cached(&mut cache.packed, git, repo, "packed-refs", packed_refs);
        let mut budget = MAX_LOOSE_REFS;
        for top in ["refs/heads", "refs/tags"] {
            loose_refs(git, Path::new(top), &mut refs, &mut budget);
        }
        if let Some(head) = read_small(git, "HEAD") {
            refs.insert(
                "HEAD".to_owned(),
                String::from_utf8_lossy(&head).trim().to_owned(),
            );
        }
        let hidden_edits = cached(&mut cache.index, git, repo, "index", index_bits);
        GitState { refs, hidden_edits }
    }
}

/// `parse` of the file `name` of the git directory, from `cache` while the file is unchanged;
/// empty when it is absent or unreadable.
#[allow(clippy::unnecessary_cast)] // the stat field types differ between architectures
fn cached<T: Clone + Default>(
    cache: &mut FileCache<T>,
    git: &OwnedFd,
    repo: &Path,
    name: &str,
    parse: fn(&[u8]) -> T,
) -> T {
    let Ok(st) = rustix::fs::statat(git, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) else {
        cache.remove(repo);
        return T::default();
    };
    let key = (
        st.st_ino as u64,
        st.st_size as u64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    );
    if let Some((k, value)) = cache.get(repo)
        && *k == key
    {
        return value.clone();
    }
    let value = read_small(git, name)
        .map(|bytes| parse(&bytes))
        .unwrap_or_default();
    cache.insert(repo.to_owned(), (key, value.clone()));
    value
}

/// The branches and tags of a `packed-refs` file (peeled `^` lines and comments skipped).
fn packed_refs(packed: &[u8]) -> BTreeMap<String, String> {
    let mut refs = BTreeMap::new();
    for line in String::from_utf8_lossy(packed).lines() {
        if line.starts_with('#') || line.starts_with('^') {
            continue;
        }
        if let Some((oid, name)) = line.split_once(' ')
            && (name.starts_with("refs/heads/") || name.starts_with("refs/tags/"))
        {
            refs.insert(name.to_owned(), oid.to_owned());
        }
    }
    refs
}

/// Every loose ref beneath `dir` (relative to the git directory).
fn loose_refs(git: &OwnedFd, dir: &Path, refs: &mut BTreeMap<String, String>, budget: &mut usize) {
    let Ok(fd) = rustix::fs::openat(
        git,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let Ok(names) = crate::dir::read_names(&fd) else {
        return;
    };
    for (name, kind) in names {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let path = dir.join(&name);
        if kind == rustix::fs::FileType::Directory {
            loose_refs(git, &path, refs, budget);
        } else if let Some(value) = read_small(git, &path) {
            let value = String::from_utf8_lossy(&value).trim().to_owned();
            if !name.to_string_lossy().ends_with(".lock") {
                refs.insert(path.to_string_lossy().into_owned(), value);
            }
        }
    }
}

/// A file of the git directory, up to [`MAX_STATE_FILE`] bytes, never through a symlink.
pub(crate) fn read_small(git: &OwnedFd, rel: impl AsRef<Path>) -> Option<Vec<u8>> {
    let fd = rustix::fs::openat(
        git,
        rel.as_ref(),
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut out = Vec::new();
    // Bounded by `take(MAX_STATE_FILE)`.
    #[allow(clippy::disallowed_methods)]
    std::fs::File::from(fd)
        .take(MAX_STATE_FILE)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// The paths of an index (versions 2 to 4, SHA-1 or SHA-256 object ids) with a bit set that
/// hides their edits. An index this parser cannot read yields nothing.
fn index_bits(index: &[u8]) -> BTreeMap<String, IndexBits> {
    let mut out = BTreeMap::new();
    if index.len() < 12 || &index[..4] != b"DIRC" {
        return out;
    }
    let version = u32::from_be_bytes([index[4], index[5], index[6], index[7]]);
    let count = u32::from_be_bytes([index[8], index[9], index[10], index[11]]) as usize;
    if !(2..=4).contains(&version) {
        return out;
    }
    // Both object id sizes are tried; the one that parses every entry and lands on the
    // trailing checksum (or an extension) is the repository's.
    for oid in [20usize, 32] {
        if let Some(bits) = entries(index, version, count, oid) {
            return bits;
        }
    }
    out.clear();
    out
}

fn entries(
    index: &[u8],
    version: u32,
    count: usize,
    oid: usize,
) -> Option<BTreeMap<String, IndexBits>> {
    let mut out = BTreeMap::new();
    let mut at = 12usize;
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        let fixed = 40 + oid;
        let flags_at = start + fixed;
        let flags = u16::from_be_bytes([*index.get(flags_at)?, *index.get(flags_at + 1)?]);
        at = flags_at + 2;
        let extended = flags & 0x4000 != 0;
        let mut ext = 0u16;
        if extended {
            if version < 3 {
                return None;
            }
            ext = u16::from_be_bytes([*index.get(at)?, *index.get(at + 1)?]);
            at += 2;
        }
        let name = if version == 4 {
            let (strip, used) = varint(index.get(at..)?)?;
            at += used;
            let end = at + index.get(at..)?.iter().position(|b| *b == 0)?;
            let keep = previous.len().checked_sub(strip)?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(&index[at..end]);
            at = end + 1;
            name
        } else {
            let end = at + index.get(at..)?.iter().position(|b| *b == 0)?;
            let name = index[at..end].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            let len = end - start;
            at = start + (len + 8) / 8 * 8;
            name
        };
        let bits = IndexBits {
            assume_unchanged: flags & 0x8000 != 0,
            skip_worktree: ext & 0x4000 != 0,
        };
        if bits.assume_unchanged || bits.skip_worktree {
            out.insert(String::from_utf8_lossy(&name).into_owned(), bits);
        }
        previous = name;
    }
    // What follows the entries is extensions and the checksum: at least one object id.
    (index.len() >= at + oid).then_some(out)
}

/// git's offset varint (`decode_varint`): 7 bits a byte, each continuation adding one.
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut it = bytes.iter();
    let mut c = *it.next()?;
    let mut value = usize::from(c & 0x7f);
    let mut used = 1;
    while c & 0x80 != 0 {
        c = *it.next()?;
        used += 1;
        value = value.checked_add(1)?.checked_mul(128)? + usize::from(c & 0x7f);
    }
    Some((value, used))
}

/// What changed between `before` and `after` in the repository whose git directory is `git`
/// (workspace-relative `repo`, host path `host_git`, work tree `host_tree`). When `quarantine`
/// is set (no human approved the run), rewritten and deleted refs are put back through
/// `write_ref` (ref name, object id) and hiding index bits cleared.
pub(crate) fn changes(
    repo: &str,
    (host_git, host_tree): (&Path, &Path),
    before: &GitState,
    after: &GitState,
    quarantine: bool,
    write_ref: &dyn Fn(&str, &str) -> std::io::Result<()>,
) -> Vec<GitChange> {
    let mut out = Vec::new();
    let mut change = |name: &str, kind, old: &str, new: &str, reverted| {
        out.push(GitChange {
            repository: repo.to_owned(),
            name: name.to_owned(),
            kind,
            old: old.to_owned(),
            new: new.to_owned(),
            reverted,
        });
    };
    for (name, old) in &before.refs {
        match after.refs.get(name) {
            Some(new) if new == old => {}
            Some(new) if name == "HEAD" => change(name, GitChangeKind::HeadMoved, old, new, false),
            Some(new) => {
                let kind = match is_ancestor(host_git, old, new) {
                    Some(true) => GitChangeKind::RefFastForward,
                    Some(false) => GitChangeKind::RefRewritten,
                    None => GitChangeKind::RefMoved,
                };
                let reverted = quarantine
                    && kind == GitChangeKind::RefRewritten
                    && write_ref(name, old).is_ok();
                change(name, kind, old, new, reverted);
            }
            None if name == "HEAD" => change(name, GitChangeKind::HeadMoved, old, "", false),
            None => {
                let reverted = quarantine && write_ref(name, old).is_ok();
                change(name, GitChangeKind::RefDeleted, old, "", reverted);
            }
        }
    }
    for (name, new) in &after.refs {
        if !before.refs.contains_key(name) {
            change(name, GitChangeKind::RefCreated, "", new, false);
        }
    }
    for (path, bits) in &after.hidden_edits {
        let was = before.hidden_edits.get(path).copied().unwrap_or_default();
        for (set, was_set, kind, flag) in [
            (
                bits.assume_unchanged,
                was.assume_unchanged,
                GitChangeKind::AssumeUnchangedSet,
                "--no-assume-unchanged",
            ),
            (
                bits.skip_worktree,
                was.skip_worktree,
                GitChangeKind::SkipWorktreeSet,
                "--no-skip-worktree",
            ),
        ] {
            if set && !was_set {
                let reverted = quarantine
                    && host_git_ok(host_git, host_tree, &["update-index", flag, "--", path]);
                change(path, kind, "", "set", reverted);
            }
        }
    }
    out.sort();
    out
}

/// Whether `old` is an ancestor of `new`, by the host's git; `None` when it cannot tell.
fn is_ancestor(host_git: &Path, old: &str, new: &str) -> Option<bool> {
    if !is_oid(old) || !is_oid(new) {
        return None;
    }
    let status = git(host_git, None)
        .args(["merge-base", "--is-ancestor", old, new])
        .status()
        .ok()?;
    match status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        _ => None,
    }
}

fn host_git_ok(host_git: &Path, host_tree: &Path, args: &[&str]) -> bool {
    git(host_git, Some(host_tree))
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

/// The host's git on one repository with nothing the repository configures able to run:
/// no hooks, no fsmonitor, no system or global configuration, no prompts, no optional locks.
fn git(host_git: &Path, tree: Option<&Path>) -> std::process::Command {
    let mut cmd = std::process::Command::new("git");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .arg("-c")
        .arg("core.fsmonitor=false")
        .arg("-c")
        .arg("core.hooksPath=/dev/null")
        .arg("--git-dir")
        .arg(host_git)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if let Some(tree) = tree {
        cmd.arg("--work-tree").arg(tree).current_dir(tree);
    }
    cmd
}

fn is_oid(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` is a plain ref name and `value` an object id, so putting it back writes
/// one file beneath the git directory.
pub(crate) fn restorable(name: &str, value: &str) -> bool {
    is_oid(value)
        && name.starts_with("refs/")
        && !name
            .split('/')
            .any(|c| c.is_empty() || c == ".." || c == "." || c.ends_with(".lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_decode_as_git_writes_them() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0x81, 0x7f]), Some((383, 2)));
        assert_eq!(varint(&[0x80]), None);
    }

    #[test]
    fn a_foreign_file_is_no_index() {
        assert!(index_bits(b"not an index at all").is_empty());
        assert!(index_bits(b"DIRC\0\0\0\x09\0\0\0\x01").is_empty());
    }
}
