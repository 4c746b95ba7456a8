//! The tonic adapter for `FilesystemService`.
//!
//! Every handler parses its request into a validated `toolgate_fs` request, runs the
//! blocking operation on the blocking pool, and maps the outcome back to the wire.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_server::FilesystemService;
use toolgate_contracts::status;
use toolgate_core::ToolKind;
use toolgate_fs::{
    EditRequest, EntryKind, ListRequest, MkdirRequest, ReadRange, ReadRequest, Sha256, StatRequest,
    Truncation, Workspace, WorkspacePath, WriteRequest,
};

use crate::wire::{self, CallContext};

/// Serves `FilesystemService` for one workspace.
#[derive(Debug, Clone)]
pub struct FsService {
    workspace: Arc<Workspace>,
}

impl FsService {
    /// An adapter over `workspace`.
    pub fn new(workspace: Arc<Workspace>) -> Self {
        FsService { workspace }
    }

    /// Runs a blocking workspace operation off the async threads, mapping domain errors.
    pub(crate) async fn blocking<T, F>(&self, span: tracing::Span, op: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace) -> Result<T, toolgate_fs::Error> + Send + 'static,
    {
        let ws = self.workspace.clone();
        let result = tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let result = op(&ws);
            if let Err(e) = &result {
                tracing::info!(reason = %toolgate_core::ReasonedError::reason(e), error = %e, "refused");
            }
            result
        })
        .await;
        match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(status::from_error(&e)),
            Err(join) => Err(status::status(
                toolgate_core::Reason::Internal,
                format!("filesystem operation panicked: {join}"),
                [],
            )),
        }
    }
}

fn path(raw: String) -> Result<WorkspacePath, Status> {
    WorkspacePath::try_from(raw).map_err(|e| status::from_error(&e))
}

/// An empty path means the workspace root, for the walks.
pub(crate) fn path_or_root(raw: String) -> Result<WorkspacePath, Status> {
    path(if raw.is_empty() { ".".to_owned() } else { raw })
}

fn sha(raw: Option<String>) -> Result<Option<Sha256>, Status> {
    raw.map(|s| s.parse::<Sha256>().map_err(|e| status::from_error(&e)))
        .transpose()
}

pub(crate) fn entry_type(k: EntryKind) -> pb::EntryType {
    match k {
        EntryKind::File => pb::EntryType::File,
        EntryKind::Dir => pb::EntryType::Directory,
        EntryKind::Symlink => pb::EntryType::Symlink,
        EntryKind::Other => pb::EntryType::Other,
    }
}

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

#[tonic::async_trait]
impl FilesystemService for FsService {
    async fn read_file(
        &self,
        request: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let range = match r.range {
            None => ReadRange::Whole,
            Some(pb::read_file_request::Range::Bytes(b)) => ReadRange::Bytes {
                offset: b.offset,
                len: wire::cap(b.length),
            },
            Some(pb::read_file_request::Range::Lines(l)) => ReadRange::Lines {
                start: l.start_line.max(1),
                count: wire::cap(l.line_count),
            },
        };
        let req = ReadRequest {
            path: path(r.path)?,
            range,
            max_bytes: wire::cap(r.max_bytes),
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsRead), move |ws| ws.read(&req))
            .await?;
        let (start_line, line_count) = match range {
            ReadRange::Lines { start, .. } => (start, line_count(&out.content)),
            _ => (0, 0),
        };
        Ok(Response::new(pb::ReadFileResponse {
            path: out.path,
            truncated: out.truncated,
            total_size: out.total_size,
            content_sha256: out.sha256.to_hex(),
            file_sha256: out.file_sha256.map(|s| s.to_hex()).unwrap_or_default(),
            start_line,
            line_count,
            content: out.content,
        }))
    }

    async fn write_file(
        &self,
        request: Request<pb::WriteFileRequest>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let req = WriteRequest {
            path: path(r.path)?,
            content: r.content,
            expected_sha256: sha(r.expected_sha256)?,
            create_new: r.create_new,
            create_parents: r.create_parents,
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsWrite), move |ws| ws.write(&req))
            .await?;
        Ok(Response::new(pb::WriteFileResponse {
            path: out.path,
            sha256: out.sha256.to_hex(),
            size: out.size,
            created: out.created,
        }))
    }

    async fn edit_file(
        &self,
        request: Request<pb::EditFileRequest>,
    ) -> Result<Response<pb::EditFileResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let req = EditRequest {
            path: path(r.path)?,
            old: r.old_text,
            new: r.new_text,
            expected_occurrences: r.expected_occurrences.map(|n| n as usize),
            replace_all: r.replace_all,
            expected_sha256: sha(r.expected_sha256)?,
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsEdit), move |ws| ws.edit(&req))
            .await?;
        Ok(Response::new(pb::EditFileResponse {
            path: out.path,
            sha256: out.sha256.to_hex(),
            occurrences: out.replacements as u32,
            unified_diff: out.diff,
        }))
    }

    async fn list_directory(
        &self,
        request: Request<pb::ListDirectoryRequest>,
    ) -> Result<Response<pb::ListDirectoryResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let req = ListRequest {
            path: path(r.path)?,
            recursive: r.recursive,
            max_depth: wire::cap(r.max_depth as usize),
            max_entries: wire::cap(r.max_entries as usize),
            include_hidden: r.include_hidden,
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsList), move |ws| ws.list(&req))
            .await?;
        let (truncated, truncation_reason) = truncation(out.truncated);
        Ok(Response::new(pb::ListDirectoryResponse {
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
        }))
    }

    async fn search_files(
        &self,
        request: Request<pb::SearchFilesRequest>,
    ) -> Result<Response<pb::SearchFilesResponse>, Status> {
        crate::fs_search::search(self, request.into_inner()).await
    }

    async fn find_files(
        &self,
        request: Request<pb::FindFilesRequest>,
    ) -> Result<Response<pb::FindFilesResponse>, Status> {
        crate::fs_search::find(self, request.into_inner()).await
    }

    async fn create_directory(
        &self,
        request: Request<pb::CreateDirectoryRequest>,
    ) -> Result<Response<pb::CreateDirectoryResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let req = MkdirRequest {
            path: path(r.path)?,
            parents: r.parents,
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsMkdir), move |ws| ws.mkdir(&req))
            .await?;
        Ok(Response::new(pb::CreateDirectoryResponse {
            path: out.path,
            created: out.created,
        }))
    }

    async fn stat_path(
        &self,
        request: Request<pb::StatPathRequest>,
    ) -> Result<Response<pb::StatPathResponse>, Status> {
        let r = request.into_inner();
        let ctx = CallContext::try_from(r.context)?;
        let req = StatRequest {
            path: path(r.path)?,
            sha256: r.compute_sha256,
        };
        let out = self
            .blocking(ctx.span(ToolKind::FsStat), move |ws| ws.stat(&req))
            .await?;
        Ok(Response::new(pb::StatPathResponse {
            path: out.path,
            r#type: entry_type(out.kind) as i32,
            size: out.size,
            mode: out.mode,
            mtime: Some(prost_types::Timestamp::from(out.mtime)),
            nlink: out.nlink,
            sha256: out.sha256.map(|s| s.to_hex()).unwrap_or_default(),
            symlink_target: out.symlink_target.unwrap_or_default(),
        }))
    }
}

/// Lines (complete or cut) in a line-range read's content.
fn line_count(content: &[u8]) -> u64 {
    let newlines = content.iter().filter(|&&b| b == b'\n').count() as u64;
    newlines + u64::from(content.last().is_some_and(|&b| b != b'\n'))
}
