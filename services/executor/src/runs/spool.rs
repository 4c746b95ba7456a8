//! A background run's output on the executor's disk.
//!
//! Each run has a directory under the spool root with one file per stream. A stream keeps what
//! the live stream of a foreground run carries: its head (the bytes the runner streamed, up to
//! the run's cap) written as it comes, and, once the run ended, the tail window the runner kept
//! after the cap (at most `tail_bytes`), appended behind the head. A file is therefore never
//! larger than cap + tail, and the executor holds no output in memory: the runner's bounded
//! channel and tail ring are all there is.
//!
//! Bytes are only ever appended and published after they are written, so a reader never sees
//! a byte change under it and reads at an offset with one `pread` (O(bytes read)).

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use toolgate_process::Stream;

/// The directory every run's spool lives under: cleared when the executor starts, removed
/// when it stops (unless the operator named it).
#[derive(Debug)]
pub(crate) struct SpoolRoot {
    path: PathBuf,
    /// The executor made it (the default, private one): removed whole at stop.
    owned: bool,
    /// Held locked while the executor lives (the default root): a later executor that can lock
    /// it knows this one died without removing its spool, and removes it.
    _lock: Option<File>,
}

/// Name of the lock file inside a default spool root.
const LOCK: &str = ".lock";

impl SpoolRoot {
    /// Opens `configured` (cleared of every previous run's spool), or a private directory of
    /// its own under the system's temp directory; both mode 0700.
    pub(crate) fn open(configured: Option<&Path>) -> io::Result<SpoolRoot> {
        let (path, owned, lock) = match configured {
            Some(p) => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(p)?;
                (p.to_owned(), false, None)
            }
            None => {
                let (path, lock) = default_root()?;
                (path, true, Some(lock))
            }
        };
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        // A previous executor's runs ended with it: their output is nobody's now.
        for entry in std::fs::read_dir(&path)? {
            let entry = entry?;
            if entry.file_name() == LOCK && lock.is_some() {
                continue;
            }
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(SpoolRoot {
            path,
            owned,
            _lock: lock,
        })
    }

    /// The root directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A fresh spool for run `run_id`.
    pub(crate) fn create(&self, run_id: &str) -> io::Result<Spool> {
        let dir = self.path.join(run_id);
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dir.join(name))
        };
        Ok(Spool {
            dir: dir.clone(),
            stdout: Arc::new(SpoolStream::new(open("stdout")?)),
            stderr: Arc::new(SpoolStream::new(open("stderr")?)),
        })
    }

    /// Removes the root at executor stop: whole when the executor made it, else its content.
    pub(crate) fn remove(&self) {
        let result = if self.owned {
            std::fs::remove_dir_all(&self.path)
        } else {
            std::fs::read_dir(&self.path).map(|entries| {
                for e in entries.flatten() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            })
        };
        if let Err(e) = result {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the run output spool");
        }
    }
}

/// A fresh default spool root, `<temp>/toolgate-spool-<euid>/<pid>-<random>`, locked for the
/// executor's life. The per-user parent must be a directory of this user that nobody else may
/// enter (a planted symlink or a shared directory is refused). Spools in it whose lock can be
/// taken belong to executors that died (SIGKILL, OOM) before removing them: they are removed
/// here, so killed executors do not leave their output behind in the temp directory.
fn default_root() -> io::Result<(PathBuf, File)> {
    use std::os::unix::fs::MetadataExt;
    let euid = rustix::process::geteuid().as_raw();
    let parent = std::env::temp_dir().join(format!("toolgate-spool-{euid}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&parent)?;
    if !meta.is_dir() || meta.uid() != euid || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a directory private to uid {euid}; remove it or set sessions.spool_dir",
                parent.display()
            ),
        ));
    }
    sweep_dead(&parent);
    let name = format!("{}-{:016x}", std::process::id(), fastrand::u64(..));
    // Made under a dot name and renamed once locked: a sweep never sees it unlocked.
    let staging = parent.join(format!(".{name}"));
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(staging.join(LOCK))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
    let path = parent.join(name);
    std::fs::rename(&staging, &path)?;
    Ok((path, lock))
}

/// Removes the spools under `parent` whose executor died: their lock is free.
fn sweep_dead(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let dir = entry.path();
        let Ok(lock) = File::open(dir.join(LOCK)) else {
            continue;
        };
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => {
                    tracing::info!(dir = %dir.display(), "removed the run output spool of an executor that died");
                }
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a dead executor's run output spool");
                }
            }
        }
    }
}

/// One run's spooled output.
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    stdout: Arc<SpoolStream>,
    stderr: Arc<SpoolStream>,
}

impl Spool {
    /// The stream's spool.
    pub(crate) fn stream(&self, stream: Stream) -> &Arc<SpoolStream> {
        match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }

    /// Deletes the run's directory (its retention is over).
    pub(crate) fn remove(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot remove a run's spooled output");
        }
    }

    /// The run's directory.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// What of a stream is written and where.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Extent {
    /// Bytes of the head written (stream offsets `0..head`, file offsets the same).
    pub head: u64,
    /// Stream offset of the tail window (meaningful when `tail_len > 0`).
    pub tail_offset: u64,
    /// Bytes of the tail window, written at file offset `head`.
    pub tail_len: u64,
    /// Bytes the run wrote to the stream so far (exact once `ended`).
    pub total: u64,
    /// The run ended: nothing more will come.
    pub ended: bool,
}

impl Extent {
    /// The half-open stream ranges that can be read, in order.
    pub(crate) fn retained(&self) -> Vec<(u64, u64)> {
        let mut r = Vec::with_capacity(2);
        if self.tail_len > 0 && self.tail_offset <= self.head {
            // The tail continues the head: one range.
            r.push((0, self.tail_offset + self.tail_len));
            return r;
        }
        if self.head > 0 {
            r.push((0, self.head));
        }
        if self.tail_len > 0 {
            r.push((self.tail_offset, self.tail_offset + self.tail_len));
        }
        r
    }

    /// The first readable offset at or after `offset`, and the file position and bytes
    /// readable from there in one go; `None` when nothing at or after it is retained.
    pub(crate) fn locate(&self, offset: u64) -> Option<Located> {
        if offset < self.head {
            return Some(Located {
                offset,
                file_pos: offset,
                len: self.head - offset,
            });
        }
        if self.tail_len == 0 {
            return None;
        }
        let tail_end = self.tail_offset + self.tail_len;
        // Past the head: the tail's bytes from `offset`, or from its start when `offset` lies
        // in the gap the runner dropped.
        let from = offset.max(self.tail_offset).max(self.head);
        (from < tail_end).then(|| Located {
            offset: from,
            file_pos: self.head + (from - self.tail_offset),
            len: tail_end - from,
        })
    }
}

/// A readable piece of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Located {
    /// Its stream offset.
    pub offset: u64,
    /// Where it is in the file.
    pub file_pos: u64,
    /// Bytes readable from there.
    pub len: u64,
}

/// One stream's file and how much of it is published.
#[derive(Debug)]
pub(crate) struct SpoolStream {
    file: File,
    extent: Mutex<Extent>,
}

impl SpoolStream {
    fn new(file: File) -> Self {
        SpoolStream {
            file,
            extent: Mutex::new(Extent::default()),
        }
    }

    /// What is published now.
    pub(crate) fn extent(&self) -> Extent {
        *self.extent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends head bytes the runner streamed at `offset` (blocking: call on the blocking
    /// pool). Bytes that do not continue the head are refused, never written out of place.
    pub(crate) fn append_head(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let head = self.extent().head;
        if offset != head {
            return Err(io::Error::other(format!(
                "output chunk at offset {offset} does not continue the head at {head}"
            )));
        }
        self.file.write_all_at(data, head)?;
        let mut e = self.extent.lock().unwrap_or_else(|e| e.into_inner());
        e.head += data.len() as u64;
        e.total = e.total.max(e.head);
        Ok(())
    }

    /// Writes the tail window the runner kept after the cap and marks the stream ended with
    /// its exact total (blocking).
    pub(crate) fn finish(&self, total: u64, tail_offset: u64, tail: &[u8]) -> io::Result<()> {
        let head = self.extent().head;
        let written = if tail.is_empty() {
            Ok(())
        } else {
            self.file.write_all_at(tail, head)
        };
        let mut e = self.extent.lock().unwrap_or_else(|e| e.into_inner());
        if written.is_ok() && !tail.is_empty() {
            e.tail_offset = tail_offset;
            e.tail_len = tail.len() as u64;
        }
        e.total = total.max(e.head);
        e.ended = true;
        written
    }

    /// Marks the stream ended without a tail (the run ended without a summary).
    pub(crate) fn end(&self) {
        self.extent.lock().unwrap_or_else(|e| e.into_inner()).ended = true;
    }

    /// Reads at most `max` bytes of `at` (blocking). Short only at the end of the file.
    pub(crate) fn read(&self, at: Located, max: u64) -> io::Result<Bytes> {
        let len = at.len.min(max) as usize;
        let mut buf = vec![0; len];
        let mut done = 0;
        while done < len {
            match self
                .file
                .read_at(&mut buf[done..], at.file_pos + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(done);
        Ok(Bytes::from(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_and_tail_are_read_back_at_their_stream_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let root = SpoolRoot::open(Some(&dir.path().join("spool"))).unwrap();
        let spool = root.create("run_1").unwrap();
        let s = spool.stream(Stream::Stdout);
        s.append_head(0, b"hello ").unwrap();
        s.append_head(6, b"world").unwrap();
        assert!(s.append_head(3, b"x").is_err(), "out of place");
        let e = s.extent();
        assert_eq!(e.retained(), vec![(0, 11)]);
        let at = e.locate(6).unwrap();
        assert_eq!(&s.read(at, 64).unwrap()[..], b"world");
        // 100 bytes dropped after the cap, then a 4-byte tail window.
        s.finish(115, 111, b"tail").unwrap();
        let e = s.extent();
        assert!(e.ended);
        assert_eq!(e.retained(), vec![(0, 11), (111, 115)]);
        assert_eq!(
            e.locate(50).unwrap().offset,
            111,
            "the gap skips to the tail"
        );
        let at = e.locate(113).unwrap();
        assert_eq!(&s.read(at, 64).unwrap()[..], b"il");
        assert_eq!(e.locate(115), None);
        let size = std::fs::metadata(spool.dir().join("stdout")).unwrap().len();
        assert_eq!(size, 15, "head plus tail, never the dropped middle");
        spool.remove();
        assert!(!spool.dir().exists());
    }

    #[test]
    fn a_dead_executors_default_spool_is_removed_and_a_live_ones_is_kept() {
        let live = SpoolRoot::open(None).unwrap();
        let parent = live.path().parent().unwrap().to_owned();
        // An executor that died: its root exists, its lock is free.
        let dead = parent.join(format!("1-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(dead.join("run_x")).unwrap();
        std::fs::write(dead.join(LOCK), b"").unwrap();
        let next = SpoolRoot::open(None).unwrap();
        assert!(!dead.exists(), "the dead executor's spool is swept");
        assert!(live.path().exists(), "a live executor's spool is kept");
        next.remove();
        live.remove();
        assert!(!live.path().exists());
    }

    #[test]
    fn opening_a_configured_root_clears_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        std::fs::create_dir_all(path.join("run_old")).unwrap();
        std::fs::write(path.join("run_old/stdout"), b"stale").unwrap();
        let root = SpoolRoot::open(Some(&path)).unwrap();
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        root.remove();
        assert!(path.exists(), "an operator's directory stays, empty");
    }
}
