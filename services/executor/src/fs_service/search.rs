//! `SearchFiles` and `FindFiles`: the two walks, adapted to the wire.

use tonic::{Response, Status};
use toolgate_contracts::executor::v1 as pb;
use toolgate_fs::{FindRequest, SearchRequest};

use toolgate_core::{ToolCall, ToolKind};
use toolgate_runtime::auth::Principal;

use super::{FsService, Observed, Prepared};
use crate::wire::{self, fs};

/// Largest context a request may ask for; the workspace limit may be lower.
const MAX_CONTEXT_LINES: u32 = 10;

pub(crate) async fn search(
    svc: &FsService,
    obs: &mut Observed,
    caller: (Principal, Option<String>),
    r: pb::SearchFilesRequest,
) -> Result<Response<pb::SearchFilesResponse>, Status> {
    let prepared = Prepared::new(caller, r.context)?;
    if r.pattern.is_empty() {
        return Err(toolgate_contracts::status::invalid(
            "pattern",
            "pattern must not be empty",
        ));
    }
    if r.context_lines > MAX_CONTEXT_LINES {
        return Err(toolgate_contracts::status::invalid(
            "context_lines",
            format!("context_lines must be at most {MAX_CONTEXT_LINES}"),
        ));
    }
    let mut req = SearchRequest::new(fs::path_or_root(r.path)?, r.pattern.clone());
    req.literal = r.literal;
    req.case_insensitive = r.case_insensitive;
    req.context_lines = r.context_lines as usize;
    req.include = r.include_globs.clone();
    req.exclude = r.exclude_globs;
    req.respect_gitignore = r.respect_gitignore;
    req.include_hidden = r.include_hidden;
    req.max_results = wire::cap(r.max_results as usize);
    req.max_bytes = wire::cap(r.max_bytes as usize);
    req.timeout = r
        .timeout
        .map(|d| wire::duration("timeout", d))
        .transpose()?;
    let call = ToolCall {
        path: Some(svc.canonical(&req.path).await?),
        pattern: Some(r.pattern),
        globs: r.include_globs,
        ..ToolCall::new(ToolKind::FsSearch)
    };
    let out = svc
        .perform_hiding(obs, prepared, call, move |ws, hidden| {
            ws.search_hiding(&req, hidden)
        })
        .await?;

    Ok(Response::new(fs::search(&out, r.context_lines)))
}

pub(crate) async fn find(
    svc: &FsService,
    obs: &mut Observed,
    caller: (Principal, Option<String>),
    r: pb::FindFilesRequest,
) -> Result<Response<pb::FindFilesResponse>, Status> {
    let prepared = Prepared::new(caller, r.context)?;
    if r.patterns.is_empty() {
        return Err(toolgate_contracts::status::invalid(
            "patterns",
            "give at least one glob, for example `**/*.rs`",
        ));
    }
    let want = match pb::EntryType::try_from(r.r#type) {
        Ok(pb::EntryType::Unspecified) => pb::EntryType::File,
        Ok(t) => t,
        Err(_) => {
            return Err(toolgate_contracts::status::invalid(
                "type",
                "unknown entry type",
            ));
        }
    };
    let req = FindRequest {
        path: fs::path_or_root(r.path)?,
        patterns: r.patterns.clone(),
        exclude: Vec::new(),
        respect_gitignore: r.respect_gitignore,
        include_hidden: r.include_hidden,
        max_results: wire::cap(r.max_results as usize),
        timeout: r
            .timeout
            .map(|d| wire::duration("timeout", d))
            .transpose()?,
    };
    let call = ToolCall {
        path: Some(svc.canonical(&req.path).await?),
        globs: r.patterns,
        ..ToolCall::new(ToolKind::FsFind)
    };
    let out = svc
        .perform_hiding(obs, prepared, call, move |ws, hidden| {
            ws.find_hiding(&req, hidden)
        })
        .await?;
    Ok(Response::new(fs::find(out, want)))
}
