//! The filesystem on the wire: request fields parsed into `toolgate_fs` values, and the
//! workspace's outcomes as `FilesystemService` responses.

use tonic::Status;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::status;
use toolgate_fs::{
    DeleteOutcome, EditOutcome, EntryKind, FindOutcome, ListOutcome, MkdirOutcome, ReadOutcome,
    ReadRange, SearchOutcome, Sha256, StatOutcome, Truncation, WorkspacePath, WriteOutcome,
};

use super::cap;

/// A request path, validated.
pub(crate) fn path(raw: String) -> Result<WorkspacePath, Status> {
    WorkspacePath::try_from(raw).map_err(|e| status::from_error(&e))
}

/// An empty path means the workspace root, for the walks.
pub(crate) fn path_or_root(raw: String) -> Result<WorkspacePath, Status> {
    path(if raw.is_empty() { ".".to_owned() } else { raw })
}

/// An optional expected sha256, validated.
pub(crate) fn sha(raw: Option<String>) -> Result<Option<Sha256>, Status> {
    raw.map(|s| s.parse::<Sha256>().map_err(|e| status::from_error(&e)))
        .transpose()
}

/// The part of a file a read asks for (lines count from 1).
pub(crate) fn read_range(range: Option<pb::read_file_request::Range>) -> ReadRange {
    match range {
        None => ReadRange::Whole,
        Some(pb::read_file_request::Range::Bytes(b)) => ReadRange::Bytes {
            offset: b.offset,
            len: cap(b.length),
        },
        Some(pb::read_file_request::Range::Lines(l)) => ReadRange::Lines {
            start: l.start_line.max(1),
            count: cap(l.line_count),
        },
    }
}

/// An entry's kind on the wire.
pub(crate) fn entry_type(k: EntryKind) -> pb::EntryType {
    match k {
        EntryKind::File => pb::EntryType::File,
        EntryKind::Dir => pb::EntryType::Directory,
        EntryKind::Symlink => pb::EntryType::Symlink,
        EntryKind::Other => pb::EntryType::Other,
    }
}

/// Whether a walk stopped early, and why, on the wire.
pub(crate) fn truncation(t: Option<Truncation>) -> (bool, pb::TruncationReason) {
    let reason = match t {
        None => return (false, pb::TruncationReason::Unspecified),
        Some(Truncation::MaxEntries | Truncation::MaxResults | Truncation::MaxFiles) => {
            pb::TruncationReason::MaxResults
        }
        Some(Truncation::MaxBytes) => pb::TruncationReason::MaxBytes,
        Some(Truncation::Timeout) => pb::TruncationReason::Timeout,
    };
    (true, reason)
}

/// A read's answer; `range` is what was asked for (a line range reports its lines).
pub(crate) fn read(out: ReadOutcome, range: ReadRange) -> pb::ReadFileResponse {
    let (start_line, line_count) = match range {
        ReadRange::Lines { start, .. } => (start, line_count(&out.content)),
        _ => (0, 0),
    };
    pb::ReadFileResponse {
        path: out.path,
        truncated: out.truncated,
        total_size: out.total_size,
        content_sha256: out.sha256.to_hex(),
        file_sha256: out.file_sha256.map(|s| s.to_hex()).unwrap_or_default(),
        start_line,
        line_count,
        redacted: out.redacted,
        content: out.content,
    }
}

/// A write's answer.
pub(crate) fn write(out: WriteOutcome) -> pb::WriteFileResponse {
    pb::WriteFileResponse {
        path: out.path,
        sha256: out.sha256.to_hex(),
        size: out.size,
        created: out.created,
    }
}

/// An edit's answer.
pub(crate) fn edit(out: EditOutcome) -> pb::EditFileResponse {
    pb::EditFileResponse {
        path: out.path,
        sha256: out.sha256.to_hex(),
        occurrences: out.replacements as u32,
        unified_diff: out.diff,
    }
}

/// A listing's answer.
pub(crate) fn list(out: ListOutcome) -> pb::ListDirectoryResponse {
    let (truncated, truncation_reason) = truncation(out.truncated);
    pb::ListDirectoryResponse {
        entries: out
            .entries
            .into_iter()
            .map(|e| pb::DirEntry {
                name: e.path.rsplit('/').next().unwrap_or_default().to_owned(),
                path: e.path,
                r#type: entry_type(e.kind) as i32,
                size: e.size,
                mtime: Some(prost_types::Timestamp::from(e.mtime)),
                symlink_target: e.symlink_target.unwrap_or_default(),
                depth: e.depth as u32,
            })
            .collect(),
        truncated,
        truncation_reason: truncation_reason as i32,
    }
}

/// A search's answer: each match with the context lines around it (`context_lines` each
/// side, as asked).
pub(crate) fn search(out: &SearchOutcome, context_lines: u32) -> pb::SearchFilesResponse {
    let mut matches = Vec::with_capacity(out.match_count);
    for file in &out.files {
        let mut pending_before = Vec::new();
        for line in &file.lines {
            let ctx_line = || pb::ContextLine {
                line_number: line.line_number,
                line: line.text.clone(),
            };
            if line.is_match {
                matches.push(pb::SearchMatch {
                    path: file.path.clone(),
                    line_number: line.line_number,
                    line: line.text.clone(),
                    line_cut: line.cut,
                    before: std::mem::take(&mut pending_before),
                    after: Vec::new(),
                });
            } else if let Some(last) = matches.last_mut().filter(|m: &&mut pb::SearchMatch| {
                m.path == file.path
                    && line.line_number > m.line_number
                    && line.line_number - m.line_number <= u64::from(context_lines)
            }) {
                last.after.push(ctx_line());
            } else {
                pending_before.push(ctx_line());
            }
        }
    }
    let (truncated, reason) = truncation(out.truncated);
    pb::SearchFilesResponse {
        matches,
        truncated,
        truncation_reason: reason as i32,
        files_searched: out.files_searched as u64,
        files_matched: out.files.len() as u64,
    }
}

/// A find's answer: the matches of the kind `want`.
pub(crate) fn find(out: FindOutcome, want: pb::EntryType) -> pb::FindFilesResponse {
    let (truncated, reason) = truncation(out.truncated);
    pb::FindFilesResponse {
        paths: out
            .matches
            .into_iter()
            .filter(|f| entry_type(f.kind) == want)
            .map(|f| f.path)
            .collect(),
        truncated,
        truncation_reason: reason as i32,
    }
}

/// A directory creation's answer.
pub(crate) fn mkdir(out: MkdirOutcome) -> pb::CreateDirectoryResponse {
    pb::CreateDirectoryResponse {
        path: out.path,
        created: out.created,
    }
}

/// A deletion's answer.
pub(crate) fn delete(out: DeleteOutcome) -> pb::DeletePathResponse {
    pb::DeletePathResponse {
        path: out.path,
        deleted: out.deleted,
        r#type: out.kind.map_or(pb::EntryType::Unspecified, entry_type) as i32,
        files_removed: out.files,
        directories_removed: out.dirs,
        bytes_removed: out.bytes,
    }
}

/// A stat's answer.
pub(crate) fn stat(out: StatOutcome) -> pb::StatPathResponse {
    pb::StatPathResponse {
        path: out.path,
        r#type: entry_type(out.kind) as i32,
        size: out.size,
        mode: out.mode,
        mtime: Some(prost_types::Timestamp::from(out.mtime)),
        nlink: out.nlink,
        sha256: out.sha256.map(|s| s.to_hex()).unwrap_or_default(),
        symlink_target: out.symlink_target.unwrap_or_default(),
    }
}

/// Lines in `content`, a last line without a newline included.
fn line_count(content: &[u8]) -> u64 {
    let newlines = content.iter().filter(|&&b| b == b'\n').count() as u64;
    newlines + u64::from(content.last().is_some_and(|&b| b != b'\n'))
}
