//! Reading files and stat-ing paths.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::time::SystemTime;

use rustix::fs::{FileType, OFlags};
use sha2::Digest;

use crate::error::{Error, Result};
use crate::path::{Sha256, WorkspacePath};
use crate::redact::{self, Redactor};
use crate::workspace::{Access, EntryKind, Workspace, cap, mtime_of, special_kind};

/// Which part of a file to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadRange {
    /// The whole file (up to the byte cap).
    #[default]
    Whole,
    /// `len` bytes from `offset` (to the end when `len` is `None`).
    Bytes {
        /// First byte, 0-based.
        offset: u64,
        /// Number of bytes.
        len: Option<u64>,
    },
    /// `count` lines from line `start` (1-based), newlines included.
    Lines {
        /// First line, 1-based.
        start: u64,
        /// Number of lines (to the end when `None`).
        count: Option<u64>,
    },
}

/// A read request.
#[derive(Debug, Clone)]
pub struct ReadRequest {
    /// The file to read; symlinks inside the workspace are followed.
    pub path: WorkspacePath,
    /// Which part to read.
    pub range: ReadRange,
    /// Byte cap for this call; `None` means the configured maximum.
    pub max_bytes: Option<u64>,
}

impl ReadRequest {
    /// Reads the whole file under the default cap.
    pub fn whole(path: WorkspacePath) -> Self {
        ReadRequest {
            path,
            range: ReadRange::Whole,
            max_bytes: None,
        }
    }
}

/// What a read returned.
#[derive(Debug, Clone)]
pub struct ReadOutcome {
    /// The canonical path, in the caller's style.
    pub path: String,
    /// The bytes read.
    pub content: Vec<u8>,
    /// The byte cap cut the requested range short.
    pub truncated: bool,
    /// The file's total size.
    pub total_size: u64,
    /// sha256 of `content`.
    pub sha256: Sha256,
    /// sha256 of the whole file's view (URL credentials redacted, so equal to the sha256 of
    /// its bytes unless it holds one), when it is no larger than the hash limit.
    pub file_sha256: Option<Sha256>,
    /// URL credentials in `content` were replaced by `***`; `total_size` is still the size
    /// on disk.
    pub redacted: bool,
}

/// A stat request.
#[derive(Debug, Clone)]
pub struct StatRequest {
    /// The path; a final symlink is reported itself, not followed.
    pub path: WorkspacePath,
    /// Also hash a regular file no larger than the hash limit.
    pub sha256: bool,
}

/// What stat found.
#[derive(Debug, Clone)]
pub struct StatOutcome {
    /// The canonical path, in the caller's style.
    pub path: String,
    /// File, directory, symlink or other.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Last modification.
    pub mtime: SystemTime,
    /// Number of hard links.
    pub nlink: u64,
    /// sha256 of a regular file, when asked for and within the hash limit.
    pub sha256: Option<Sha256>,
    /// The link text of a symlink.
    pub symlink_target: Option<String>,
}

/// Bytes read per syscall; also the peak memory besides the returned content.
const CHUNK: usize = 64 * 1024;

/// Picks the requested part out of a stream of chunks, with the raw bytes around it that
/// decide which URL credentials in it are redacted ([`redact::CONTEXT`] before a byte range,
/// up to that many after wherever the selection stops).
struct Selector {
    range: ReadRange,
    cap: u64,
    /// Context before the selection, the selection, context after it.
    out: Vec<u8>,
    /// Where the selection starts in `out`.
    sel_start: usize,
    /// Where the selection ends in `out`, once it is complete.
    sel_end: Option<usize>,
    pos: u64,
    line: u64,
    truncated: bool,
}

impl Selector {
    fn new(range: ReadRange, cap: u64, capacity: usize) -> Self {
        Selector {
            range,
            cap,
            out: Vec::with_capacity(capacity),
            sel_start: 0,
            sel_end: None,
            pos: 0,
            line: 1,
            truncated: false,
        }
    }

    /// The selection and the context after it are complete.
    fn finished(&self) -> bool {
        self.sel_end
            .is_some_and(|end| self.out.len() - end >= redact::CONTEXT)
    }

    fn feed(&mut self, chunk: &[u8]) {
        let rest = if self.sel_end.is_some() {
            0
        } else {
            self.select(chunk)
        };
        if let Some(end) = self.sel_end {
            let want = redact::CONTEXT.saturating_sub(self.out.len() - end);
            let tail = &chunk[rest..];
            self.out.extend_from_slice(&tail[..want.min(tail.len())]);
        }
        self.pos += chunk.len() as u64;
    }

    /// Takes the selected part of `chunk`; returns where the bytes after the selection start.
    fn select(&mut self, chunk: &[u8]) -> usize {
        let n = chunk.len() as u64;
        match self.range {
            ReadRange::Whole => self.take(chunk),
            ReadRange::Bytes { offset, len } => {
                let end = len.map_or(u64::MAX, |l| offset.saturating_add(l));
                let pre = offset.saturating_sub(redact::CONTEXT as u64).max(self.pos);
                let pre_stop = offset.min(self.pos + n);
                if pre < pre_stop {
                    let (a, b) = ((pre - self.pos) as usize, (pre_stop - self.pos) as usize);
                    self.out.extend_from_slice(&chunk[a..b]);
                    self.sel_start = self.out.len();
                }
                let start = offset.max(self.pos);
                let stop = end.min(self.pos + n);
                let mut rest = chunk.len();
                if start < stop {
                    let a = (start - self.pos) as usize;
                    let b = (stop - self.pos) as usize;
                    rest = a + self.take(&chunk[a..b]);
                }
                if self.sel_end.is_none() && self.pos + n >= end {
                    rest = rest.min((end - self.pos) as usize);
                    self.sel_end = Some(self.out.len());
                }
                rest
            }
            ReadRange::Lines { start, count } => {
                let end = count.map_or(u64::MAX, |c| start.saturating_add(c));
                let mut at = 0;
                while at < chunk.len() && self.sel_end.is_none() {
                    let seg = &chunk[at..];
                    let nl = seg.iter().position(|&b| b == b'\n');
                    let seg_len = nl.map_or(seg.len(), |i| i + 1);
                    if self.line >= start && self.line < end {
                        let taken = self.take(&seg[..seg_len]);
                        if self.sel_end.is_some() {
                            return at + taken;
                        }
                    }
                    at += seg_len;
                    if nl.is_some() {
                        self.line += 1;
                        if self.line >= end {
                            self.sel_end = Some(self.out.len());
                        }
                    }
                }
                at
            }
        }
    }

    /// Appends selected bytes up to the cap; returns how many it took.
    fn take(&mut self, bytes: &[u8]) -> usize {
        let room = (self.cap - (self.out.len() - self.sel_start) as u64) as usize;
        if bytes.len() > room {
            self.out.extend_from_slice(&bytes[..room]);
            self.truncated = true;
            self.sel_end = Some(self.out.len());
            room
        } else {
            self.out.extend_from_slice(bytes);
            bytes.len()
        }
    }

    /// The selection as reads show it, and whether credentials in it were redacted.
    fn into_view(mut self) -> (Vec<u8>, bool) {
        let end = self.sel_end.unwrap_or(self.out.len());
        match redact::redact_window(&self.out, self.sel_start..end) {
            Some(view) => (view, true),
            None => {
                self.out.truncate(end);
                self.out.drain(..self.sel_start);
                (self.out, false)
            }
        }
    }
}

impl Workspace {
    /// Reads a regular file, or part of it, under a byte cap.
    ///
    /// FIFOs, sockets and devices are refused with `NotAFile` without opening them for
    /// reading, so the call never blocks; memory stays bounded by the cap whatever the
    /// file size.
    pub fn read(&self, req: &ReadRequest) -> Result<ReadOutcome> {
        let limits = self.limits();
        let cap = cap(
            "max_bytes",
            req.max_bytes,
            limits.max_read_bytes,
            limits.max_read_bytes,
        )?;
        if let ReadRange::Lines { start: 0, .. } = req.range {
            return Err(Error::InvalidRequest {
                field: "line_start",
                why: "lines are numbered from 1".to_owned(),
            });
        }
        if let ReadRange::Lines { count: Some(0), .. } | ReadRange::Bytes { len: Some(0), .. } =
            req.range
        {
            return Err(Error::InvalidRequest {
                field: "range",
                why: "the range is empty; omit the length to read to the end".to_owned(),
            });
        }
        let r = self.request(&req.path)?;
        let resolved = self.resolve(&r, true, Access::Read)?;
        if FileType::from_raw_mode(resolved.stat.st_mode) != FileType::RegularFile {
            return Err(Error::NotAFile {
                path: r.shown.to_owned(),
                kind: special_kind(&resolved.stat),
            });
        }
        self.check_links(r.shown, &resolved.stat)?;
        let fd = self.reopen(&resolved, r.shown, OFlags::RDONLY)?;
        let total = resolved.stat.st_size as u64;
        let hash_whole = total <= limits.hash_limit;
        let mut file = File::from(fd);
        let mut sel = Selector::new(
            req.range,
            cap,
            cap.min(total).min(CHUNK as u64 * 16) as usize,
        );
        if let (ReadRange::Bytes { offset, .. }, false) = (req.range, hash_whole) {
            // Start early enough to see a URL whose credential reaches into the range.
            let from = offset.saturating_sub(redact::CONTEXT as u64);
            file.seek(SeekFrom::Start(from))
                .map_err(|source| io_err("seek in", r.shown, source))?;
            sel.pos = from;
        }
        let mut hasher = hash_whole.then(ViewHasher::default);
        let mut buf = vec![0u8; CHUNK];
        loop {
            if sel.finished() && hasher.is_none() {
                break;
            }
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(io_err("read", r.shown, source)),
            };
            if let Some(h) = hasher.as_mut() {
                h.update(&buf[..n]);
            }
            sel.feed(&buf[..n]);
        }
        // The byte cap only truncates if something remained in the requested range.
        let truncated = sel.truncated;
        let file_sha256 = hasher.map(ViewHasher::finish);
        let (content, redacted) = sel.into_view();
        let sha256 = Sha256::of(&content);
        Ok(ReadOutcome {
            path: self.render(r.style, &resolved.canon),
            content,
            truncated,
            total_size: total,
            sha256,
            file_sha256,
            redacted,
        })
    }

    // `stat` field widths differ between architectures, so the casts are not always no-ops.
    #[allow(clippy::unnecessary_cast)]
    /// Reports type, size, mode, mtime and link count; a final symlink is described
    /// itself, with its target text.
    pub fn stat(&self, req: &StatRequest) -> Result<StatOutcome> {
        let r = self.request(&req.path)?;
        let resolved = self.resolve(&r, false, Access::Read)?;
        let st = &resolved.stat;
        let kind = EntryKind::of(st);
        let symlink_target = if kind == EntryKind::Symlink {
            let t = rustix::fs::readlinkat(resolved.fd.as_fd(), "", Vec::new())
                .map_err(|e| Error::from_errno("read link", r.shown, e))?;
            Some(String::from_utf8_lossy(t.as_bytes()).into_owned())
        } else {
            None
        };
        let sha256 = if req.sha256
            && kind == EntryKind::File
            && self.check_links(r.shown, st).is_ok()
            && st.st_size as u64 <= self.limits().hash_limit
        {
            let fd = self.reopen(&resolved, r.shown, OFlags::RDONLY)?;
            Some(hash_file(File::from(fd), r.shown)?)
        } else {
            None
        };
        Ok(StatOutcome {
            path: self.render(r.style, &resolved.canon),
            kind,
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            mtime: mtime_of(st),
            nlink: st.st_nlink as u64,
            sha256,
            symlink_target,
        })
    }
}

/// sha256 of a file's view (URL credentials redacted): equal to the sha256 of its bytes
/// unless it holds a URL credential. Reads report it and writes compare against it, so a hash
/// never lets a caller confirm a guess of a credential it was not shown.
pub(crate) fn hash_file(mut file: File, shown: &str) -> Result<Sha256> {
    let mut h = ViewHasher::default();
    let mut buf = vec![0u8; CHUNK];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(h.finish()),
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(source) => return Err(io_err("read", shown, source)),
        }
    }
}

/// Hashes the view of a stream of raw chunks.
#[derive(Default)]
pub(crate) struct ViewHasher {
    redactor: Redactor,
    hash: sha2::Sha256,
}

impl ViewHasher {
    pub(crate) fn update(&mut self, chunk: &[u8]) {
        let hash = &mut self.hash;
        self.redactor.feed(chunk, &mut |b| hash.update(b));
    }

    pub(crate) fn finish(mut self) -> Sha256 {
        let hash = &mut self.hash;
        self.redactor.finish(&mut |b| hash.update(b));
        Sha256(self.hash.finalize().into())
    }
}

pub(crate) fn io_err(op: &'static str, shown: &str, source: std::io::Error) -> Error {
    match source.raw_os_error() {
        Some(code) => Error::from_errno(op, shown, rustix::io::Errno::from_raw_os_error(code)),
        None => Error::Io {
            op,
            path: shown.to_owned(),
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select(range: ReadRange, cap: u64, chunks: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut s = Selector::new(range, cap, 0);
        for c in chunks {
            s.feed(c);
        }
        let truncated = s.truncated;
        (s.into_view().0, truncated)
    }

    #[test]
    fn line_ranges_span_chunks() {
        let range = ReadRange::Lines {
            start: 2,
            count: Some(2),
        };
        let (out, t) = select(range, 100, &[b"one\ntw", b"o\nthree\nfour\n"]);
        assert_eq!(out, b"two\nthree\n");
        assert!(!t);
    }

    #[test]
    fn byte_ranges_and_caps() {
        let range = ReadRange::Bytes {
            offset: 3,
            len: Some(4),
        };
        assert_eq!(select(range, 100, &[b"0123", b"456789"]).0, b"3456");
        let (out, t) = select(ReadRange::Whole, 5, &[b"0123", b"456789"]);
        assert_eq!((out.as_slice(), t), (&b"01234"[..], true));
        let (out, t) = select(ReadRange::Whole, 10, &[b"0123", b"456789"]);
        assert_eq!((out.as_slice(), t), (&b"0123456789"[..], false));
    }

    /// Every way of cutting a read around a credential shows none of it.
    #[test]
    fn reading_a_token_by_byte_range_or_cap_shows_none_of_it() {
        let file = b"[remote \"origin\"]\n\turl = https://user:ghp_SECRET@github.com/o/r.git\n";
        let secret_at = file.windows(10).position(|w| w == b"ghp_SECRET").unwrap() as u64;
        for offset in 0..file.len() as u64 {
            for len in 1..=(file.len() as u64 - offset) {
                for chunk in [1, 7, file.len()] {
                    let chunks: Vec<&[u8]> = file.chunks(chunk).collect();
                    let range = ReadRange::Bytes {
                        offset,
                        len: Some(len),
                    };
                    let (out, _) = select(range, 100, &chunks);
                    let shown = String::from_utf8_lossy(&out);
                    for piece in ["SECRET", "ghp_", "user:", "T@", "er:g"] {
                        assert!(!shown.contains(piece), "{offset}+{len}: {shown}");
                    }
                    if offset > secret_at + 10 {
                        assert_eq!(out, &file[offset as usize..(offset + len) as usize]);
                    }
                }
            }
        }
        for cap in 1..file.len() as u64 {
            let (out, _) = select(ReadRange::Whole, cap, &[file]);
            assert!(!String::from_utf8_lossy(&out).contains("ghp_"), "cap {cap}");
            let lines = ReadRange::Lines {
                start: 2,
                count: None,
            };
            let (out, _) = select(lines, cap, &[file]);
            assert!(!String::from_utf8_lossy(&out).contains("ghp_"), "cap {cap}");
        }
        let (out, _) = select(ReadRange::Whole, 1000, &[file]);
        assert_eq!(
            out,
            b"[remote \"origin\"]\n\turl = https://***@github.com/o/r.git\n"
        );
    }
}
