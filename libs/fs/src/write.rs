//! Writes, edits and directory creation.
//!
//! Content is never written into an existing inode: a temp file is created next to the
//! target in the same directory handle (`O_CREAT | O_EXCL | O_NOFOLLOW`), synced, and
//! renamed over the target. A hard link or a symlink swapped in at the target is replaced
//! as a directory entry, so whatever it pointed to is never modified.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::path::{Sha256, WorkspacePath};
use crate::read::{hash_file, io_err};
use crate::redact::{self, Redactor, credential_spans, redact_url_credentials};
use crate::workspace::{Access, Request, Workspace, special_kind};

/// A write request.
#[derive(Debug, Clone)]
pub struct WriteRequest {
    /// The file to create or overwrite; a symlink inside the workspace writes its target.
    pub path: WorkspacePath,
    /// The complete new content.
    pub content: Vec<u8>,
    /// Fail with `Conflict` unless the current file has this sha256.
    pub expected_sha256: Option<Sha256>,
    /// Fail with `AlreadyExists` if the file exists.
    pub create_new: bool,
    /// Create missing parent directories.
    pub create_parents: bool,
}

/// What a write did.
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    /// The canonical path written, in the caller's style.
    pub path: String,
    /// sha256 of the new content.
    pub sha256: Sha256,
    /// Size of the new content.
    pub size: u64,
    /// The file did not exist before.
    pub created: bool,
}

/// An exact-text edit request.
#[derive(Debug, Clone)]
pub struct EditRequest {
    /// The file to edit (must exist and be UTF-8).
    pub path: WorkspacePath,
    /// The exact text to replace; must not be empty.
    pub old: String,
    /// The replacement.
    pub new: String,
    /// How many occurrences must be present; `None` means exactly one, or any
    /// positive number with `replace_all`.
    pub expected_occurrences: Option<usize>,
    /// Replace every occurrence.
    pub replace_all: bool,
    /// Fail with `Conflict` unless the current file has this sha256.
    pub expected_sha256: Option<Sha256>,
}

/// What an edit did.
#[derive(Debug, Clone)]
pub struct EditOutcome {
    /// The canonical path edited, in the caller's style.
    pub path: String,
    /// sha256 of the new content.
    pub sha256: Sha256,
    /// Number of occurrences replaced.
    pub replacements: usize,
    /// A unified diff of the change.
    pub diff: String,
}

/// A directory creation request.
#[derive(Debug, Clone)]
pub struct MkdirRequest {
    /// The directory to create.
    pub path: WorkspacePath,
    /// Create missing parents, and succeed if the directory already exists.
    pub parents: bool,
}

/// What a directory creation did.
#[derive(Debug, Clone)]
pub struct MkdirOutcome {
    /// The canonical path, in the caller's style.
    pub path: String,
    /// The directory did not exist before.
    pub created: bool,
}

/// Where a write lands: a directory handle and a single name inside it.
struct Target {
    dir: OwnedFd,
    name: OsString,
    canon: PathBuf,
}

/// What was at the target before the write.
struct Existing {
    stat: Stat,
    sha256: Option<Sha256>,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh temp name beside `name` in the same directory (`.NAME.toolgate-PID-N.tmp`, the stem
/// cut to stay within NAME_MAX): unique in this process, and the shape the executor's start-up
/// sweep removes when an interrupted write left one behind.
pub(crate) fn temp_name(name: &OsStr) -> OsString {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let stem: Vec<u8> = name.as_bytes().iter().take(64).copied().collect();
    let mut tmp = OsString::from(".");
    tmp.push(OsStr::from_bytes(&stem));
    tmp.push(format!(".toolgate-{}-{n}.tmp", std::process::id()));
    tmp
}

fn same_file(a: &Stat, b: &Stat) -> bool {
    (
        a.st_dev,
        a.st_ino,
        a.st_size,
        a.st_mtime,
        a.st_mtime_nsec,
        a.st_ctime,
        a.st_ctime_nsec,
    ) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime,
        b.st_mtime_nsec,
        b.st_ctime,
        b.st_ctime_nsec,
    )
}

impl Workspace {
    /// Splits a request into parent and final name; the final name must be a plain name.
    pub(crate) fn split<'a>(&self, r: &'a Request<'_>) -> Result<(PathBuf, &'a OsStr)> {
        match r.rel.components().next_back() {
            Some(Component::Normal(name)) => {
                let parent = r.rel.parent().unwrap_or(Path::new("")).to_path_buf();
                Ok((parent, name))
            }
            _ => Err(Error::InvalidPath {
                path: r.shown.to_owned(),
                why: "the path must end in a file name",
            }),
        }
    }

    /// Resolves where a write to `r` lands, following a final symlink only if it stays
    /// inside the workspace, and checks deny and protected globs on the result.
    fn target(&self, r: &Request<'_>, create_parents: bool) -> Result<Target> {
        if r.trailing_slash {
            return Err(Error::InvalidPath {
                path: r.shown.to_owned(),
                why: "a file path must not end with `/`",
            });
        }
        let (parent, name) = self.split(r)?;
        self.precheck(r, Access::Write)?;
        let (dir, dir_canon) = self.open_dir(r.shown, &parent, create_parents)?;
        let canon = dir_canon.join(name);
        self.check(r.shown, &canon, Access::Write)?;
        match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {}
            _ => {
                return Ok(Target {
                    dir,
                    name: name.to_owned(),
                    canon,
                });
            }
        }
        // A final symlink: write what it points to, if that is beneath the root.
        let resolved = self.resolve(r, true, Access::Write).map_err(|e| match e {
            Error::NotFound { path } => Error::NotFound {
                path: format!("{path} (a symlink whose target does not exist)"),
            },
            other => other,
        })?;
        let Some(real_name) = resolved.canon.file_name().map(OsStr::to_owned) else {
            return Err(Error::NotAFile {
                path: r.shown.to_owned(),
                kind: "directory",
            });
        };
        let real_parent = resolved.canon.parent().unwrap_or(Path::new(""));
        let (dir, _) = self.open_dir(r.shown, real_parent, false)?;
        Ok(Target {
            dir,
            name: real_name,
            canon: resolved.canon,
        })
    }

    /// Looks at what the target holds now, hashing it when a sha256 is needed.
    fn existing(
        &self,
        t: &Target,
        shown: &str,
        want_hash: bool,
        max: u64,
    ) -> Result<Option<Existing>> {
        if !want_hash {
            // Only the type and mode are needed: no read permission required.
            return match rustix::fs::statat(&t.dir, &t.name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
                    FileType::RegularFile => Ok(Some(Existing { stat, sha256: None })),
                    // A symlink swapped in after resolution: the rename replaces the link itself.
                    FileType::Symlink => Ok(None),
                    _ => Err(Error::NotAFile {
                        path: shown.to_owned(),
                        kind: special_kind(&stat),
                    }),
                },
                Err(Errno::NOENT) => Ok(None),
                Err(e) => Err(Error::from_errno("stat", shown, e)),
            };
        }
        let fd = match rustix::fs::openat(
            &t.dir,
            &t.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            // A symlink swapped in after resolution: the rename replaces the link itself.
            Err(Errno::LOOP) => return Ok(None),
            Err(e) => return Err(Error::from_errno("open", shown, e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", shown, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(Error::NotAFile {
                path: shown.to_owned(),
                kind: special_kind(&stat),
            });
        }
        let sha256 = if want_hash {
            if stat.st_size as u64 > max {
                return Err(Error::TooLarge {
                    path: shown.to_owned(),
                    size: stat.st_size as u64,
                    limit: max,
                });
            }
            Some(hash_file(File::from(fd), shown)?)
        } else {
            None
        };
        Ok(Some(Existing { stat, sha256 }))
    }

    /// Writes `content` to a fresh temp file beside the target and renames it into place.
    fn commit(
        &self,
        t: &Target,
        shown: &str,
        content: &[u8],
        before: Option<&Existing>,
        create_new: bool,
    ) -> Result<()> {
        let tmp = temp_name(&t.name);
        let mode = before.map_or(0o666, |e| e.stat.st_mode & 0o777);
        let fd = rustix::fs::openat(
            &t.dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| Error::from_errno("create temp file for", shown, e))?;
        let result = self.fill_and_rename(t, shown, &tmp, fd, content, before, create_new);
        if result.is_err() {
            let _ = rustix::fs::unlinkat(&t.dir, &tmp, AtFlags::empty());
        }
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn fill_and_rename(
        &self,
        t: &Target,
        shown: &str,
        tmp: &OsStr,
        fd: OwnedFd,
        content: &[u8],
        before: Option<&Existing>,
        create_new: bool,
    ) -> Result<()> {
        if let Some(e) = before {
            // Keep the overwritten file's permissions exactly, independent of the umask.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(e.stat.st_mode & 0o777))
                .map_err(|err| Error::from_errno("set mode of", shown, err))?;
        }
        let mut file = File::from(fd);
        file.write_all(content)
            .map_err(|source| io_err("write", shown, source))?;
        file.sync_all()
            .map_err(|source| io_err("sync", shown, source))?;
        drop(file);
        // Every rename into a directory happens under that directory's lock, so a write's
        // precondition (the file it checked) still holds at its rename: no update is lost
        // between two writers, in this executor or another one over the same volume.
        let lock = DirLock::acquire(t.dir.as_fd(), shown)?;
        if create_new {
            rustix::fs::renameat_with(&t.dir, tmp, &t.dir, &t.name, RenameFlags::NOREPLACE)
                .map_err(|e| Error::from_errno("rename into", shown, e))?;
        } else {
            if let Some(e) = before {
                // Optimistic concurrency: the file must still be the one that was checked.
                match rustix::fs::statat(&t.dir, &t.name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(now) if same_file(&now, &e.stat) => {}
                    _ => {
                        if let Some(expected) = e.sha256 {
                            return Err(Error::Conflict {
                                path: shown.to_owned(),
                                expected: expected.to_hex(),
                                actual: "changed during the write".to_owned(),
                            });
                        }
                    }
                }
            }
            rustix::fs::renameat(&t.dir, tmp, &t.dir, &t.name)
                .map_err(|e| Error::from_errno("rename into", shown, e))?;
        }
        // The directory's durability needs no lock; other writers may go on.
        drop(lock);
        sync_dir(t.dir.as_fd());
        Ok(())
    }

    /// Refuses a write that would put the redaction marker where the file now holds a URL
    /// credential: content read from the view and written back would destroy the credential
    /// without anyone deciding to.
    fn refuse_marker_over_credentials(
        &self,
        t: &Target,
        shown: &str,
        content: &[u8],
    ) -> Result<()> {
        let mut needle = b"://".to_vec();
        needle.extend_from_slice(redact::MARKER);
        needle.push(b'@');
        if memchr::memmem::find(content, &needle).is_none() {
            return Ok(());
        }
        let Ok(fd) = rustix::fs::openat(
            &t.dir,
            &t.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        ) else {
            return Ok(());
        };
        match rustix::fs::fstat(&fd) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {}
            _ => return Ok(()),
        }
        let mut file = File::from(fd);
        let mut redactor = Redactor::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => redactor.feed(&buf[..n], &mut |_| {}),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => return Err(io_err("read", shown, source)),
            }
        }
        redactor.finish(&mut |_| {});
        if redactor.found() {
            return Err(Error::InvalidRequest {
                field: "content",
                why: format!(
                    "`{shown}` holds URL credentials that reads show as `***`, and this content would write `***` over them; leave those lines out of a full write (use an edit of other lines), or ask the user to change them"
                ),
            });
        }
        Ok(())
    }

    /// Creates or atomically replaces a file.
    pub fn write(&self, req: &WriteRequest) -> Result<WriteOutcome> {
        let limit = self.limits().max_write_bytes;
        let r = self.request(&req.path)?;
        if req.content.len() as u64 > limit {
            return Err(Error::TooLarge {
                path: r.shown.to_owned(),
                size: req.content.len() as u64,
                limit,
            });
        }
        let t = self.target(&r, req.create_parents)?;
        self.refuse_marker_over_credentials(&t, r.shown, &req.content)?;
        let before = self.existing(
            &t,
            r.shown,
            req.expected_sha256.is_some(),
            self.limits().hash_limit,
        )?;
        if req.create_new && before.is_some() {
            return Err(Error::AlreadyExists {
                path: r.shown.to_owned(),
            });
        }
        if let Some(expected) = req.expected_sha256 {
            let actual = before.as_ref().and_then(|e| e.sha256);
            if actual != Some(expected) {
                return Err(Error::Conflict {
                    path: r.shown.to_owned(),
                    expected: expected.to_hex(),
                    actual: actual.map_or_else(|| "absent".to_owned(), |h| h.to_hex()),
                });
            }
        }
        let before_for_commit = before.as_ref().map(|e| Existing {
            stat: e.stat,
            sha256: req.expected_sha256.and(e.sha256),
        });
        self.commit(
            &t,
            r.shown,
            &req.content,
            before_for_commit.as_ref(),
            req.create_new,
        )?;
        Ok(WriteOutcome {
            path: self.render(r.style, &t.canon),
            sha256: view_sha256(&req.content),
            size: req.content.len() as u64,
            created: before.is_none(),
        })
    }

    /// Replaces exact text in a UTF-8 file and returns a unified diff.
    pub fn edit(&self, req: &EditRequest) -> Result<EditOutcome> {
        if req.old.is_empty() {
            return Err(Error::InvalidRequest {
                field: "old",
                why: "the text to replace is empty".to_owned(),
            });
        }
        if req.expected_occurrences == Some(0) {
            return Err(Error::InvalidRequest {
                field: "expected_occurrences",
                why: "must be at least 1".to_owned(),
            });
        }
        let limit = self.limits().max_write_bytes;
        let r = self.request(&req.path)?;
        let t = self.target(&r, false)?;
        let fd = rustix::fs::openat(
            &t.dir,
            &t.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
        .map_err(|e| Error::from_errno("open", r.shown, e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::from_errno("stat", r.shown, e))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(Error::NotAFile {
                path: r.shown.to_owned(),
                kind: special_kind(&stat),
            });
        }
        self.check_links(r.shown, &stat)?;
        if stat.st_size as u64 > limit {
            return Err(Error::TooLarge {
                path: r.shown.to_owned(),
                size: stat.st_size as u64,
                limit,
            });
        }
        let mut bytes = Vec::with_capacity(stat.st_size as usize);
        // Bounded by `take`: one byte past the limit tells a file that grew beyond it.
        #[allow(clippy::disallowed_methods)]
        File::from(fd)
            .take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| io_err("read", r.shown, source))?;
        let view = redact_url_credentials(&bytes);
        let current = Sha256::of(view.as_deref().unwrap_or(&bytes));
        if let Some(expected) = req.expected_sha256
            && expected != current
        {
            return Err(Error::Conflict {
                path: r.shown.to_owned(),
                expected: expected.to_hex(),
                actual: current.to_hex(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| Error::InvalidRequest {
            field: "path",
            why: format!(
                "`{}` is not valid utf-8 text; use a full write instead",
                r.shown
            ),
        })?;
        let at = match &view {
            None => text
                .match_indices(req.old.as_str())
                .map(|(i, _)| i)
                .collect(),
            Some(view) => occurrences_beside_credentials(&text, view, &req.old, r.shown)?,
        };
        let found = at.len();
        let expected = match (req.expected_occurrences, req.replace_all) {
            (Some(n), _) => Some(n),
            (None, false) => Some(1),
            (None, true) => None,
        };
        if found == 0 || expected.is_some_and(|n| n != found) {
            return Err(Error::EditMismatch {
                path: r.shown.to_owned(),
                expected: expected.map_or_else(|| "at least 1".to_owned(), |n| n.to_string()),
                found,
            });
        }
        let mut new_text = String::with_capacity(text.len());
        let mut pos = 0;
        for i in at {
            new_text.push_str(&text[pos..i]);
            new_text.push_str(&req.new);
            pos = i + req.old.len();
        }
        new_text.push_str(&text[pos..]);
        if new_text.len() as u64 > limit {
            return Err(Error::TooLarge {
                path: r.shown.to_owned(),
                size: new_text.len() as u64,
                limit,
            });
        }
        let before = Existing {
            stat,
            sha256: Some(current),
        };
        self.commit(&t, r.shown, new_text.as_bytes(), Some(&before), false)?;
        let shown_path = self.render(r.style, &t.canon);
        let diff = similar::TextDiff::from_lines(&text, &new_text)
            .unified_diff()
            .context_radius(3)
            .header(&shown_path, &shown_path)
            .to_string();
        // Context lines around the change may hold a credential on a line next to it.
        let diff = match redact_url_credentials(diff.as_bytes()) {
            Some(v) => String::from_utf8_lossy(&v).into_owned(),
            None => diff,
        };
        Ok(EditOutcome {
            path: shown_path,
            sha256: view_sha256(new_text.as_bytes()),
            replacements: found,
            diff,
        })
    }

    /// Creates a directory, optionally with its parents (then an existing directory is fine).
    pub fn mkdir(&self, req: &MkdirRequest) -> Result<MkdirOutcome> {
        let mut r = self.request(&req.path)?;
        // A trailing slash is natural for a directory.
        r.trailing_slash = false;
        let (parent, name) = self.split(&r)?;
        self.precheck(&r, Access::Write)?;
        let (dir, dir_canon) = self.open_dir(r.shown, &parent, req.parents)?;
        let canon = dir_canon.join(name);
        self.check(r.shown, &canon, Access::Write)?;
        let created = match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
            Ok(()) => true,
            Err(Errno::EXIST) => {
                let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|e| Error::from_errno("stat", r.shown, e))?;
                if !req.parents || FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    return Err(Error::AlreadyExists {
                        path: r.shown.to_owned(),
                    });
                }
                false
            }
            Err(e) => return Err(Error::from_errno("create directory", r.shown, e)),
        };
        if created {
            sync_dir(dir.as_fd());
        }
        Ok(MkdirOutcome {
            path: self.render(r.style, &canon),
            created,
        })
    }
}

/// sha256 of the view of `content` (see [`hash_file`]).
fn view_sha256(content: &[u8]) -> Sha256 {
    match redact_url_credentials(content) {
        Some(view) => Sha256::of(&view),
        None => Sha256::of(content),
    }
}

/// Where `old` occurs in `text` (a file holding URL credentials whose view is `view`),
/// leaving out every line that holds a credential.
///
/// An old text the view shows on such a line is refused: it was read redacted, so replacing
/// it would write the marker over the credential, and changing the rest of the line (its
/// host) could send the credential elsewhere. Occurrences the view does not show (a guess at
/// the credential) are neither replaced nor counted, and the answer depends on the view
/// alone, so an edit cannot test a guess either.
fn occurrences_beside_credentials(
    text: &str,
    view: &[u8],
    old: &str,
    shown: &str,
) -> Result<Vec<usize>> {
    let raw = text.as_bytes();
    let newlines = |b: &[u8]| memchr::memchr_iter(b'\n', b).collect::<Vec<usize>>();
    let (raw_nl, view_nl) = (newlines(raw), newlines(view));
    // Redaction never adds or removes a newline: line numbers are shared by file and view.
    let mut lines: Vec<usize> = credential_spans(raw)
        .into_iter()
        .map(|span| raw_nl.partition_point(|&p| p < span.start))
        .collect();
    lines.dedup();
    let touches = |nl: &[usize], at: usize| {
        let first = nl.partition_point(|&p| p < at);
        let last = nl.partition_point(|&p| p < at + old.len().max(1) - 1);
        let i = lines.partition_point(|&l| l < first);
        lines.get(i).is_some_and(|&l| l <= last)
    };
    if memchr::memmem::find_iter(view, old.as_bytes()).any(|at| touches(&view_nl, at)) {
        return Err(Error::CredentialLine {
            path: shown.to_owned(),
        });
    }
    Ok(text
        .match_indices(old)
        .map(|(at, _)| at)
        .filter(|&at| !touches(&raw_nl, at))
        .collect())
}

/// An exclusive `flock` on a directory, released on drop. Taken with `LOCK_NB` and retried
/// for a bounded time: a run can hold a lock on a workspace directory forever, and a write must
/// then fail (a retryable conflict), not hang.
pub(crate) struct DirLock<'a>(BorrowedFd<'a>);

/// How long a writer waits for a directory lock before it gives up.
const DIR_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl<'a> DirLock<'a> {
    pub(crate) fn acquire(dir: BorrowedFd<'a>, shown: &str) -> Result<DirLock<'a>> {
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_micros(50);
        loop {
            match rustix::fs::flock(dir, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(DirLock(dir)),
                Err(Errno::WOULDBLOCK | Errno::INTR) if start.elapsed() < DIR_LOCK_WAIT => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(20));
                }
                Err(Errno::WOULDBLOCK) => {
                    return Err(Error::Conflict {
                        path: shown.to_owned(),
                        expected: "its directory free for the write".to_owned(),
                        actual: "another writer held the directory for 2 s; retry".to_owned(),
                    });
                }
                Err(e) => return Err(Error::from_errno("lock the directory of", shown, e)),
            }
        }
    }
}

impl Drop for DirLock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, rustix::fs::FlockOperation::Unlock);
    }
}

/// Makes a rename or mkdir durable; failure only weakens durability, so it is not reported.
pub(crate) fn sync_dir(dir: BorrowedFd<'_>) {
    let _ = rustix::fs::fsync(dir);
}
