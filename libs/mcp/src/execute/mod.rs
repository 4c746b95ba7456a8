//! One MCP tool call as exactly one executor call: arguments to a request, the answer (or
//! the refusal) to what the model reads.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_runtime::telemetry;
use tracing::Instrument;

use crate::server::{Caller, Shared};
use crate::tools::*;

/// Bytes of each run stream returned live (the head) to the model by default; a model's
/// context has no room for more, and MCP clients cap a message (the Python SDK at 1 MiB).
pub(crate) const RUN_HEAD_BYTES: u64 = 48 << 10;
/// Bytes of each run stream's end kept after the head.
pub(crate) const RUN_TAIL_BYTES: u64 = 16 << 10;
/// Bytes of a file `read_file` returns unless `max_bytes` says otherwise.
pub(crate) const READ_BYTES: u64 = 256 << 10;

/// What a call came to, before it becomes a `CallToolResult`.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub(crate) is_error: bool,
    pub(crate) text: String,
    pub(crate) structured: Map<String, Value>,
    /// `auto`, `ask`, `deny`, or empty when the call was refused before any decision.
    pub(crate) decision: &'static str,
    pub(crate) rule_id: String,
    pub(crate) approval_id: String,
    pub(crate) decision_id: String,
    /// The OpenTelemetry `error.type`, `None` on success.
    pub(crate) error_type: Option<&'static str>,
}

impl Outcome {
    /// Arguments the executor was never asked about.
    pub(crate) fn invalid(why: &str) -> Self {
        Outcome {
            is_error: true,
            text: format!("invalid arguments: {why}"),
            structured: obj(json!({
                "error": {"code": "INVALID_ARGUMENT", "reason": "INVALID_REQUEST", "message": why}
            })),
            error_type: Some("invalid_request"),
            ..Default::default()
        }
    }

    fn success<O: Serialize>(output: &O, text: String, receipt: Receipt) -> Self {
        Outcome {
            is_error: false,
            text,
            structured: obj(serde_json::to_value(output).unwrap_or(Value::Null)),
            decision: receipt.decision,
            rule_id: receipt.rule_id,
            approval_id: receipt.approval_id,
            decision_id: receipt.decision_id,
            error_type: None,
        }
    }

    /// A refusal or failure the executor answered, as the model should read it: never a
    /// protocol error, so the model can change course.
    pub(crate) fn refused(tool: &str, s: &Status) -> Self {
        let (reason, md) = status::error_info(s).unwrap_or_default();
        let get = |k: &str| md.get(k).cloned().unwrap_or_default();
        let mut out = Outcome {
            is_error: true,
            error_type: Some(status::error_type(s)),
            rule_id: get("rule_id"),
            approval_id: get("approval_id"),
            decision_id: get("decision_id"),
            ..Default::default()
        };
        let message = s.message().to_owned();
        match reason.as_str() {
            r if r == Reason::PolicyDenied.as_str() => {
                out.decision = "deny";
                out.text = format!(
                    "Denied by toolgate policy (rule {}): {message}. The call did not run and will not run if repeated; do something else.",
                    out.rule_id
                );
                out.structured = obj(json!({
                    "decision": "deny",
                    "rule_id": out.rule_id,
                    "reason": message,
                    "decision_id": out.decision_id,
                }));
            }
            r if r == Reason::ApprovalRequired.as_str() => {
                out.decision = "ask";
                let expires_at = get("expires_at");
                let why = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                out.text = format!(
                    "This call needs a human's approval and has not run: {why}.\n\nA human must approve approval {id} (for example `toolgate approvals approve {id}`). After it is approved, call {tool} again with exactly the same arguments and it will run.{until}",
                    id = out.approval_id,
                    until = if expires_at.is_empty() {
                        String::new()
                    } else {
                        format!(" The request expires at {expires_at}.")
                    },
                );
                out.structured = obj(json!({
                    "decision": "ask",
                    "approval_id": out.approval_id,
                    "state": "pending",
                    "expires_at": expires_at,
                    "rule_id": out.rule_id,
                    "decision_id": out.decision_id,
                    "reason": why,
                }));
            }
            r if r == Reason::ApprovalDenied.as_str() => {
                out.decision = "deny";
                let said = md
                    .get("message")
                    .cloned()
                    .unwrap_or_else(|| message.clone());
                out.text = format!(
                    "A human denied this call (approval {}): {said}\n\nIt did not run. Repeating it with the same arguments in this session returns this denial again; change course or ask the user.",
                    out.approval_id
                );
                out.structured = obj(json!({
                    "decision": "deny",
                    "approval_id": out.approval_id,
                    "state": "denied",
                    "rule_id": out.rule_id,
                    "reason": said,
                    "decision_id": out.decision_id,
                }));
            }
            r if r == Reason::ApprovalExpired.as_str()
                || r == Reason::ApprovalNotPending.as_str() =>
            {
                out.decision = "ask";
                let state = if r == Reason::ApprovalExpired.as_str() {
                    "expired"
                } else {
                    "cancelled"
                };
                out.text = format!("{message}. The call did not run.");
                out.structured = obj(json!({
                    "decision": "ask",
                    "approval_id": out.approval_id,
                    "state": state,
                    "reason": message,
                }));
            }
            _ => {
                let code = status::code_name(s.code());
                let shown = if reason.is_empty() {
                    code
                } else {
                    reason.as_str()
                };
                out.text = format!("{shown}: {message}");
                out.structured = obj(json!({
                    "error": {
                        "code": code,
                        "reason": reason,
                        "message": message,
                        "metadata": md,
                    }
                }));
            }
        }
        out
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => {
            let mut m = Map::new();
            m.insert("value".to_owned(), other);
            m
        }
    }
}

/// The decision behind a call that ran.
#[derive(Debug, Default)]
struct Receipt {
    decision: &'static str,
    rule_id: String,
    approval_id: String,
    decision_id: String,
}

impl Receipt {
    /// From a filesystem response's headers.
    fn of_headers(md: &MetadataMap) -> Self {
        let get = |k: &str| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        Receipt {
            decision: tier(&get("toolgate-decision")),
            rule_id: get("toolgate-rule-id"),
            approval_id: get("toolgate-approval-id"),
            decision_id: get("toolgate-decision-id"),
        }
    }
}

fn tier(s: &str) -> &'static str {
    match s {
        "ask" => "ask",
        "deny" => "deny",
        _ => "auto",
    }
}

/// Runs `tool` with `args` for `caller`.
pub(crate) async fn call(
    shared: &Shared,
    tool: &'static str,
    args: Value,
    caller: &Caller,
    context: &RequestContext<RoleServer>,
) -> Outcome {
    let cx = Cx {
        shared,
        caller,
        context,
        tool,
    };
    match tool {
        "read_file" => cx.read(args).await,
        "write_file" => cx.write(args).await,
        "edit_file" => cx.edit(args).await,
        "list_directory" => cx.list(args).await,
        "search_files" => cx.search(args).await,
        "find_files" => cx.find(args).await,
        "create_directory" => cx.mkdir(args).await,
        "stat_path" => cx.stat(args).await,
        "run_command" => cx.run(args).await,
        other => Outcome::invalid(&format!("unknown tool `{other}`")),
    }
}

struct Cx<'a> {
    shared: &'a Shared,
    caller: &'a Caller,
    context: &'a RequestContext<RoleServer>,
    tool: &'static str,
}

impl Cx<'_> {
    fn call_context(&self) -> common::CallContext {
        let wait = self.shared.config.approval_wait;
        common::CallContext {
            call_id: self.caller.call_id.clone(),
            session_id: self.caller.session_id.clone(),
            approval_wait: (!wait.is_zero())
                .then(|| prost_types::Duration::try_from(wait).ok())
                .flatten(),
            description: String::new(),
        }
    }

    /// A request carrying the agent's credential and this trace.
    fn request<T>(&self, message: T) -> Result<Request<T>, Status> {
        let mut r = Request::new(message);
        if let Some(t) = &self.caller.token {
            let v = format!("Bearer {t}").parse().map_err(|_| {
                Status::unauthenticated("the bearer token holds characters a header cannot carry")
            })?;
            r.metadata_mut().insert("authorization", v);
        }
        telemetry::inject(r.metadata_mut());
        Ok(r)
    }

    /// Sends one unary executor call under a client span, given up when the MCP client
    /// cancels the request.
    /// Sends one executor call under a client span with the agent's credential, given up
    /// when the MCP client cancels the request. `send` makes the call and reads its answer.
    async fn traced<T, O, F, Fut>(&self, rpc: &str, message: T, send: F) -> Result<O, Status>
    where
        F: FnOnce(Request<T>) -> Fut,
        Fut: Future<Output = Result<O, Status>>,
    {
        let span = telemetry::client_span(rpc);
        let result = async {
            let request = self.request(message)?;
            tokio::select! {
                r = send(request) => r,
                () = self.context.ct.cancelled() => Err(Status::cancelled(
                    "the MCP client cancelled the call; it was abandoned (a running command is killed)",
                )),
            }
        }
        .instrument(span.clone())
        .await;
        telemetry::record_client_status(
            &span,
            result
                .as_ref()
                .map_or_else(Status::code, |_| tonic::Code::Ok),
        );
        result
    }

    fn parse<A: DeserializeOwned>(&self, args: Value) -> Result<A, Box<Outcome>> {
        serde_json::from_value(args)
            .map_err(|e| Box::new(Outcome::invalid(&format!("{}: {e}", self.tool))))
    }

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
                Outcome::success(&output, text, receipt)
            }
            Err(s) => Outcome::refused(self.tool, &s),
        }
    }

    async fn read(&self, args: Value) -> Outcome {
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

    async fn write(&self, args: Value) -> Outcome {
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

    async fn edit(&self, args: Value) -> Outcome {
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

    async fn list(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/ListDirectory",
            |a: ListDirectoryArgs, context| pb::ListDirectoryRequest {
                context: Some(context),
                path: a.path,
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

    async fn search(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/SearchFiles",
            |a: SearchFilesArgs, context| pb::SearchFilesRequest {
                context: Some(context),
                pattern: a.pattern,
                literal: a.literal,
                case_insensitive: a.case_insensitive,
                path: a.path,
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

    async fn find(&self, args: Value) -> Outcome {
        self.fs(
            args,
            "toolgate.executor.v1.FilesystemService/FindFiles",
            |a: FindFilesArgs, context| pb::FindFilesRequest {
                context: Some(context),
                patterns: a.patterns,
                path: a.path,
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

    async fn mkdir(&self, args: Value) -> Outcome {
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

    async fn stat(&self, args: Value) -> Outcome {
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

// ---------------------------------------------------------------- run_command

impl Cx<'_> {
    async fn run(&self, args: Value) -> Outcome {
        let a: RunCommandArgs = match self.parse(args) {
            Ok(a) => a,
            Err(o) => return *o,
        };
        let message = pb::RunRequest {
            context: Some(self.call_context()),
            command: Some(pb::run_request::Command::Script(a.script)),
            cwd: a.cwd,
            env: a.env.into_iter().collect(),
            stdin: a.stdin.map(String::into_bytes),
            timeout: a.timeout_ms.map(|ms| prost_types::Duration {
                seconds: (ms / 1000) as i64,
                nanos: ((ms % 1000) * 1_000_000) as i32,
            }),
            limits: Some(pb::OutputLimits {
                stdout_cap_bytes: RUN_HEAD_BYTES,
                stderr_cap_bytes: RUN_HEAD_BYTES,
                tail_bytes: RUN_TAIL_BYTES,
                kill_on_cap: false,
            }),
            sandbox_profile: String::new(),
        };
        let result = self
            .traced(
                "toolgate.executor.v1.ProcessService/Run",
                message,
                |request| async move {
                    let stream = self.shared.process().run(request).await?.into_inner();
                    self.follow(stream).await
                },
            )
            .await;
        match result {
            Ok((output, receipt)) => {
                let text = run_text(&output);
                let mut o = Outcome::success(&output, text, receipt);
                // A run that could not start, or was cut short, is the tool failing.
                o.error_type = match output.status.as_str() {
                    "timed_out" => Some("timeout"),
                    "cancelled" => Some("cancelled"),
                    "spawn_failed" => Some("spawn_failed"),
                    "signaled" => Some("signaled"),
                    _ => None,
                };
                o
            }
            Err(s) => Outcome::refused(self.tool, &s),
        }
    }

    /// Reads a run's events to its end, reporting output as progress when the client asked.
    async fn follow(
        &self,
        mut stream: tonic::Streaming<pb::RunResponse>,
    ) -> Result<(RunCommandOutput, Receipt), Status> {
        use pb::run_response::Event;
        let token = self.context.meta.get_progress_token();
        let mut out = RunCommandOutput::default();
        let mut receipt = Receipt::default();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut progress = 0u64;
        while let Some(event) = stream.message().await? {
            let note = match event.event {
                Some(Event::AwaitingApproval(w)) => Some(format!(
                    "waiting for a human to decide approval {}: {}",
                    w.approval_id, w.message
                )),
                Some(Event::Started(s)) => {
                    receipt = Receipt {
                        decision: tier(&s.decision),
                        rule_id: s.rule_id,
                        approval_id: s.approval_id,
                        decision_id: s.decision_id,
                    };
                    out.sandbox_profile =
                        s.isolation.map(|i| i.sandbox_profile).unwrap_or_default();
                    None
                }
                Some(Event::Output(chunk)) => {
                    progress += chunk.data.len() as u64;
                    let note = String::from_utf8_lossy(&chunk.data).into_owned();
                    if chunk.stream == pb::Stream::Stderr as i32 {
                        stderr.extend_from_slice(&chunk.data);
                    } else {
                        stdout.extend_from_slice(&chunk.data);
                    }
                    Some(note)
                }
                Some(Event::Exited(x)) => {
                    finish(&mut out, x, &stdout, &stderr);
                    return Ok((out, receipt));
                }
                None => None,
            };
            if let (Some(token), Some(note)) = (&token, note) {
                let _ = self
                    .context
                    .peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), progress as f64)
                            .with_message(note),
                    )
                    .await;
            }
        }
        Err(Status::unavailable(
            "the executor ended the run's stream without an exit event",
        ))
    }
}

/// Fills `out` from the final event and the streamed heads.
fn finish(out: &mut RunCommandOutput, x: pb::Exited, stdout: &[u8], stderr: &[u8]) {
    use common::exit_status::Status as S;
    let (status, code, detail) = match x.status.and_then(|s| s.status) {
        Some(S::Exited(c)) => ("exited", Some(c), String::new()),
        Some(S::Signaled(s)) => ("signaled", None, s.name),
        Some(S::TimedOut(t)) => (
            "timed_out",
            None,
            t.timeout
                .map(|d| format!("after {}s", d.seconds))
                .unwrap_or_default(),
        ),
        Some(S::Cancelled(c)) => ("cancelled", None, c.cause),
        Some(S::SpawnFailed(f)) => ("spawn_failed", None, f.reason),
        Some(S::Completed(c)) => ("exited", Some(0), c.summary),
        None => ("unknown", None, String::new()),
    };
    out.status = status.to_owned();
    out.exit_code = code;
    out.detail = detail;
    out.stdout = stream_output(stdout, x.stdout);
    out.stderr = stream_output(stderr, x.stderr);
    out.wall_time_ms = x
        .usage
        .and_then(|u| u.wall_time)
        .map_or(0, |d| d.seconds as u64 * 1000 + d.nanos as u64 / 1_000_000);
}

/// Head, a marker naming the dropped bytes, tail.
fn stream_output(head: &[u8], summary: Option<pb::StreamSummary>) -> StreamOutput {
    let summary = summary.unwrap_or_default();
    let stats = summary.stats.unwrap_or_default();
    let mut text = String::from_utf8_lossy(head).into_owned();
    if stats.truncated {
        if !text.ends_with('\n') && !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("[… {} bytes dropped …]\n", stats.dropped_bytes));
        text.push_str(&String::from_utf8_lossy(&summary.tail));
    }
    StreamOutput {
        text,
        total_bytes: stats.total_bytes,
        dropped_bytes: stats.dropped_bytes,
        truncated: stats.truncated,
    }
}

fn run_text(o: &RunCommandOutput) -> String {
    let head = match (o.status.as_str(), o.exit_code) {
        ("exited", Some(c)) => format!("exit code {c}"),
        ("signaled", _) => format!("killed by {}", o.detail),
        ("timed_out", _) => format!("timed out {}", o.detail),
        ("cancelled", _) => format!("cancelled ({})", o.detail),
        ("spawn_failed", _) => format!("could not start: {}", o.detail),
        (s, _) => s.to_owned(),
    };
    let mut text = head;
    for (name, s) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if !s.text.is_empty() {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!("--- {name} ---\n{}", s.text));
        }
    }
    text
}
