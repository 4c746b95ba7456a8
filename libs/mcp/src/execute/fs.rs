//! The filesystem tools: each is one unary `FilesystemService` call, its answer rendered as
//! structured output plus the text the model reads.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::{Request, Response, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;

use super::Cx;
use crate::outcome::{Outcome, Receipt};
use crate::tools::{
    CreateDirectoryArgs, CreateDirectoryOutput, DeletePathArgs, DeletePathOutput, EditFileArgs,
    EditFileOutput, Entry, EntryType, FindFilesArgs, FindFilesOutput, ListDirectoryArgs,
    ListDirectoryOutput, Match, ReadFileArgs, ReadFileOutput, SearchFilesArgs, SearchFilesOutput,
    StatPathArgs, StatPathOutput, WriteFileArgs, WriteFileOutput,
};

/// A directory argument whose schema says "empty for the root": the executor refuses an
/// empty path, so the root is spelled `.`.
fn root_if_empty(path: String) -> String {
    if path.is_empty() {
        ".".to_owned()
    } else {
        path
    }
}

/// Bytes of a file `read_file` returns unless `max_bytes` says otherwise.
const READ_BYTES: u64 = 256 << 10;

impl Cx<'_> {
    /// A unary call start to end: parse, send, render.
    async fn fs<A, T, R, O, F, Fut>(
        &self,
        args: Value,
        rpc: &str,
        build: impl FnOnce(A, common::CallContext) -> T,
        send: F,
        render: impl FnOnce(R) -> (O, String),
    ) -> Outcome
    where
        A: DeserializeOwned,
        O: Serialize,
        F: FnOnce(Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<R>, Status>>,
    {
        let args: A = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = build(args, self.call_context());
        match self.traced(rpc, message, send).await {
            Ok(response) => {
                let receipt = Receipt::of_headers(response.metadata());
                let (output, text) = render(response.into_inner());
                Outcome::ran(&output, text, receipt, None)
            }
            Err(s) => Outcome::refused(&s),
        }
    }

    pub(super) async fn read(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/ReadFile",
            |a: ReadFileArgs, context| pb::ReadFileRequest {
                context: Some(context),
                path: a.path,
                range: match (a.start_line, a.offset) {
                    (Some(start), _) => Some(pb::read_file_request::Range::Lines(pb::LineRange {
                        start_line: start,
                        line_count: a.line_count.unwrap_or(0),
                    })),
                    (None, Some(offset)) => {
                        Some(pb::read_file_request::Range::Bytes(pb::ByteRange {
                            offset,
                            length: a.length.unwrap_or(0),
                        }))
                    }
                    (None, None) => a.length.map(|length| {
                        pb::read_file_request::Range::Bytes(pb::ByteRange { offset: 0, length })
                    }),
                },
                max_bytes: a.max_bytes.unwrap_or(READ_BYTES),
            },
            |r| async move { self.shared.fs().read_file(r).await },
            |r: pb::ReadFileResponse| {
                let exact = std::str::from_utf8(&r.content).is_ok();
                let content = String::from_utf8_lossy(&r.content).into_owned();
                let mut text = content.clone();
                if r.truncated {
                    text.push_str(&format!(
                        "\n[… cut at the byte cap; the file has {} bytes: read on with a range]",
                        r.total_size
                    ));
                }
                let out = ReadFileOutput {
                    path: r.path,
                    content,
                    exact,
                    truncated: r.truncated,
                    total_size: r.total_size,
                    content_sha256: r.content_sha256,
                    file_sha256: r.file_sha256,
                    start_line: r.start_line,
                    line_count: r.line_count,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn write(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/WriteFile",
            |a: WriteFileArgs, context| pb::WriteFileRequest {
                context: Some(context),
                path: a.path,
                content: a.content.into_bytes(),
                expected_sha256: a.expected_sha256,
                create_parents: a.create_parents,
                create_new: a.create_new,
            },
            |r| async move { self.shared.fs().write_file(r).await },
            |r: pb::WriteFileResponse| {
                let text = format!(
                    "{} {} ({} bytes, sha256 {})",
                    if r.created { "created" } else { "replaced" },
                    r.path,
                    r.size,
                    r.sha256
                );
                let out = WriteFileOutput {
                    path: r.path,
                    sha256: r.sha256,
                    size: r.size,
                    created: r.created,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn edit(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/EditFile",
            |a: EditFileArgs, context| pb::EditFileRequest {
                context: Some(context),
                path: a.path,
                old_text: a.old_text,
                new_text: a.new_text,
                expected_occurrences: a.expected_occurrences,
                expected_sha256: a.expected_sha256,
                replace_all: a.replace_all,
            },
            |r| async move { self.shared.fs().edit_file(r).await },
            |r: pb::EditFileResponse| {
                let text = format!(
                    "edited {} ({} replacement{}, sha256 {})\n{}",
                    r.path,
                    r.occurrences,
                    if r.occurrences == 1 { "" } else { "s" },
                    r.sha256,
                    r.unified_diff
                );
                let out = EditFileOutput {
                    path: r.path,
                    sha256: r.sha256,
                    occurrences: r.occurrences,
                    unified_diff: r.unified_diff,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn list(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/ListDirectory",
            |a: ListDirectoryArgs, context| pb::ListDirectoryRequest {
                context: Some(context),
                path: root_if_empty(a.path),
                recursive: a.recursive,
                max_depth: a.max_depth.unwrap_or(0),
                max_entries: a.max_entries.unwrap_or(0),
                include_hidden: a.include_hidden,
            },
            |r| async move { self.shared.fs().list_directory(r).await },
            |r: pb::ListDirectoryResponse| {
                let entries: Vec<Entry> = r
                    .entries
                    .into_iter()
                    .map(|e| Entry {
                        entry_type: entry_type(e.r#type),
                        path: e.path,
                        name: e.name,
                        size: e.size,
                        symlink_target: e.symlink_target,
                        depth: e.depth,
                    })
                    .collect();
                let mut text: String = entries
                    .iter()
                    .map(|e| match e.entry_type {
                        EntryType::Directory => format!("{}/\n", e.path),
                        EntryType::Symlink => format!("{} -> {}\n", e.path, e.symlink_target),
                        _ => format!("{} ({} bytes)\n", e.path, e.size),
                    })
                    .collect();
                let reason = truncation(r.truncated, r.truncation_reason);
                if r.truncated {
                    text.push_str(&format!("[… more entries not listed: {reason}]\n"));
                }
                if entries.is_empty() {
                    text.push_str("(empty)\n");
                }
                let out = ListDirectoryOutput {
                    entries,
                    truncated: r.truncated,
                    truncation_reason: reason,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn search(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/SearchFiles",
            |a: SearchFilesArgs, context| pb::SearchFilesRequest {
                context: Some(context),
                pattern: a.pattern,
                literal: a.literal,
                case_insensitive: a.case_insensitive,
                path: root_if_empty(a.path),
                include_globs: a.include_globs,
                exclude_globs: a.exclude_globs,
                context_lines: a.context_lines.unwrap_or(0),
                respect_gitignore: a.respect_gitignore,
                include_hidden: a.include_hidden,
                max_results: a.max_results.unwrap_or(0),
                max_bytes: 0,
                timeout: None,
            },
            |r| async move { self.shared.fs().search_files(r).await },
            |r: pb::SearchFilesResponse| {
                let ctx = |v: Vec<pb::ContextLine>| {
                    v.into_iter()
                        .map(|c| format!("{}: {}", c.line_number, c.line))
                        .collect::<Vec<_>>()
                };
                let matches: Vec<Match> = r
                    .matches
                    .into_iter()
                    .map(|m| Match {
                        path: m.path,
                        line_number: m.line_number,
                        line: m.line,
                        before: ctx(m.before),
                        after: ctx(m.after),
                    })
                    .collect();
                let mut text = String::new();
                for m in &matches {
                    for b in &m.before {
                        text.push_str(&format!("{}-{b}\n", m.path));
                    }
                    text.push_str(&format!("{}:{}: {}\n", m.path, m.line_number, m.line));
                    for a in &m.after {
                        text.push_str(&format!("{}-{a}\n", m.path));
                    }
                }
                let reason = truncation(r.truncated, r.truncation_reason);
                text.push_str(&format!(
                    "{} match{} in {} of {} files searched{}\n",
                    matches.len(),
                    if matches.len() == 1 { "" } else { "es" },
                    r.files_matched,
                    r.files_searched,
                    if r.truncated {
                        format!("; stopped early: {reason}")
                    } else {
                        String::new()
                    }
                ));
                let out = SearchFilesOutput {
                    matches,
                    truncated: r.truncated,
                    truncation_reason: reason,
                    files_searched: r.files_searched,
                    files_matched: r.files_matched,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn find(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/FindFiles",
            |a: FindFilesArgs, context| pb::FindFilesRequest {
                context: Some(context),
                patterns: a.patterns,
                path: root_if_empty(a.path),
                r#type: match a.entry_type {
                    None => pb::EntryType::Unspecified,
                    Some(EntryType::File) => pb::EntryType::File,
                    Some(EntryType::Directory) => pb::EntryType::Directory,
                    Some(EntryType::Symlink) => pb::EntryType::Symlink,
                    Some(EntryType::Other) => pb::EntryType::Other,
                } as i32,
                include_hidden: a.include_hidden,
                respect_gitignore: a.respect_gitignore,
                max_results: a.max_results.unwrap_or(0),
                timeout: None,
            },
            |r| async move { self.shared.fs().find_files(r).await },
            |r: pb::FindFilesResponse| {
                let reason = truncation(r.truncated, r.truncation_reason);
                let mut text = r.paths.join("\n");
                if r.paths.is_empty() {
                    text.push_str("(no matches)");
                }
                if r.truncated {
                    text.push_str(&format!("\n[… more paths not listed: {reason}]"));
                }
                let out = FindFilesOutput {
                    paths: r.paths,
                    truncated: r.truncated,
                    truncation_reason: reason,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn mkdir(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/CreateDirectory",
            |a: CreateDirectoryArgs, context| pb::CreateDirectoryRequest {
                context: Some(context),
                path: a.path,
                parents: a.parents,
            },
            |r| async move { self.shared.fs().create_directory(r).await },
            |r: pb::CreateDirectoryResponse| {
                let text = if r.created {
                    format!("created {}", r.path)
                } else {
                    format!("{} already exists", r.path)
                };
                let out = CreateDirectoryOutput {
                    path: r.path,
                    created: r.created,
                };
                (out, text)
            },
        )
        .await
    }

    pub(super) async fn stat(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/StatPath",
            |a: StatPathArgs, context| pb::StatPathRequest {
                context: Some(context),
                path: a.path,
                compute_sha256: a.compute_sha256,
            },
            |r| async move { self.shared.fs().stat_path(r).await },
            |r: pb::StatPathResponse| {
                let out = StatPathOutput {
                    entry_type: entry_type(r.r#type),
                    mode: format!("{:o}", r.mode),
                    mtime: r.mtime.map(|t| t.to_string()).unwrap_or_default(),
                    path: r.path,
                    size: r.size,
                    nlink: r.nlink,
                    sha256: r.sha256,
                    symlink_target: r.symlink_target,
                };
                let text = serde_json::to_string_pretty(&out).unwrap_or_default();
                (out, text)
            },
        )
        .await
    }
}

impl Cx<'_> {
    pub(super) async fn delete(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/DeletePath",
            |a: DeletePathArgs, context| pb::DeletePathRequest {
                context: Some(context),
                path: a.path,
                recursive: a.recursive,
                missing_ok: a.missing_ok,
                expected_sha256: a.expected_sha256,
            },
            |r| async move { self.shared.fs().delete_path(r).await },
            |r: pb::DeletePathResponse| {
                let entry = r.deleted.then(|| entry_type(r.r#type));
                let text = if r.deleted {
                    format!(
                        "deleted {} ({} files, {} directories, {} bytes)",
                        r.path, r.files_removed, r.directories_removed, r.bytes_removed
                    )
                } else {
                    format!("{} does not exist; nothing was deleted", r.path)
                };
                let out = DeletePathOutput {
                    path: r.path,
                    deleted: r.deleted,
                    entry_type: entry,
                    files_removed: r.files_removed,
                    directories_removed: r.directories_removed,
                    bytes_removed: r.bytes_removed,
                };
                (out, text)
            },
        )
        .await
    }
}

fn entry_type(raw: i32) -> EntryType {
    match pb::EntryType::try_from(raw).unwrap_or(pb::EntryType::Unspecified) {
        pb::EntryType::File => EntryType::File,
        pb::EntryType::Directory => EntryType::Directory,
        pb::EntryType::Symlink => EntryType::Symlink,
        _ => EntryType::Other,
    }
}

fn truncation(truncated: bool, raw: i32) -> String {
    if !truncated {
        return String::new();
    }
    match pb::TruncationReason::try_from(raw).unwrap_or(pb::TruncationReason::Unspecified) {
        pb::TruncationReason::MaxResults => "max_results",
        pb::TruncationReason::MaxBytes => "max_bytes",
        pb::TruncationReason::Timeout => "timeout",
        pb::TruncationReason::Unspecified => "unspecified",
    }
    .to_owned()
}
