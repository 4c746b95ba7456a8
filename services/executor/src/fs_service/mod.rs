//! The tonic adapter for `FilesystemService`.
//!
//! Every handler authenticates the caller, parses its request into a validated `toolgate_fs`
//! request, resolves the canonical form the policy decides on, gets an [`Authorized`] proof
//! through the [`Gate`], performs the operation on the blocking pool and reports its outcome.

mod search;

use std::sync::Arc;
use std::time::SystemTime;

use sha2::Digest;
use tonic::{Request, Response, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::executor::v1 as pb;
use toolgate_contracts::executor::v1::filesystem_service_server::FilesystemService;
use toolgate_core::{ToolCall, ToolKind};
use toolgate_fs::{
    DeleteRequest, EditRequest, HiddenPaths, ListRequest, MkdirRequest, ReadRequest, StatRequest,
    Workspace, WorkspacePath, WriteRequest,
};
use toolgate_runtime::auth::Principal;
use tracing::Instrument;

use crate::authz::{Authorized, Call, Gate, Receipt, fs_outcome};
use crate::confined::Confined;
use crate::tool_span::ToolSpan;
use crate::wire::{self, CallContext, fs};

/// Serves `FilesystemService` for one workspace.
#[derive(Debug, Clone)]
pub struct FsService {
    confined: Confined,
    gate: Gate,
}

impl FsService {
    /// An adapter over the confined workspace, authorizing every call through `gate`.
    pub(crate) fn new(confined: Confined, gate: Gate) -> Self {
        FsService { confined, gate }
    }

    /// The canonical workspace-relative path the policy sees for `path` (read or listed).
    pub(crate) async fn canonical(&self, path: &WorkspacePath) -> Result<String, Status> {
        Ok(self
            .confined
            .canonicalize(path.clone(), false)
            .await?
            .relative)
    }

    /// The canonical workspace-relative path the policy sees for `path` (written or created).
    pub(crate) async fn canonical_write(&self, path: &WorkspacePath) -> Result<String, Status> {
        Ok(self
            .confined
            .canonicalize(path.clone(), true)
            .await?
            .relative)
    }

    /// Asks the policy about `call`, then performs `op` with the proof (in a span named
    /// after the tool) and reports its outcome.
    pub(crate) async fn perform<T, F>(
        &self,
        obs: &mut Observed,
        prepared: Prepared,
        call: ToolCall,
        op: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace) -> Result<T, toolgate_fs::Error> + Send + 'static,
    {
        self.perform_as(obs, prepared, call, false, move |ws, _| op(ws))
            .await
    }

    /// [`Self::perform`] for an operation that reveals more than the path it names (a
    /// listing, search or find): `op` also gets the paths the policy's rules hide, which
    /// this call's answer carried ([`Authorized::hidden_globs`]). Without them the call is
    /// refused and nothing is revealed.
    pub(crate) async fn perform_hiding<T, F>(
        &self,
        obs: &mut Observed,
        prepared: Prepared,
        call: ToolCall,
        op: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace, &HiddenPaths) -> Result<T, toolgate_fs::Error> + Send + 'static,
    {
        self.perform_as(obs, prepared, call, true, op).await
    }

    async fn perform_as<T, F>(
        &self,
        obs: &mut Observed,
        prepared: Prepared,
        call: ToolCall,
        hiding: bool,
        op: F,
    ) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Workspace, &HiddenPaths) -> Result<T, toolgate_fs::Error> + Send + 'static,
    {
        let tool = obs.tool;
        let span = obs.span.bind(&prepared.ctx);
        let call = Call {
            principal: prepared.principal,
            ctx: prepared.ctx,
            call: ToolCall { tool, ..call },
            trace_parent: prepared.trace_parent,
            span: span.clone(),
        };
        let proof: Authorized = self.gate.authorize(&call).instrument(span.clone()).await?;
        obs.performed = true;
        obs.receipt = Some(Receipt::of(&proof));
        let started = SystemTime::now();
        let hidden = if hiding {
            match proof.hidden_globs() {
                Ok(h) => h.clone(),
                Err(unknown) => {
                    let refused = Status::from(unknown);
                    // The decision was recorded as allowed: close it with what happened.
                    self.gate
                        .reporter()
                        .report(&proof, fs_outcome(started, Err(&refused)));
                    return Err(refused);
                }
            }
        } else {
            Arc::new(HiddenPaths::none())
        };
        let op_span = tracing::info_span!(
            parent: &span,
            "fs.op",
            otel.name = tool.as_str(),
            fs.op = op_label(tool),
            decision_id = %proof.decision_id(),
            policy_version = hiding.then(|| hidden.version().to_owned()),
        );
        let result = self
            .confined
            .fs(&proof, op_span, tool.writes(), move |ws| op(ws, &hidden))
            .await
            .map_err(Status::from);
        // Answered only once the outcome is recorded (or it cannot be for now; the header
        // says which): an answer the client saw never reads as unknown after a crash.
        obs.recorded = self
            .gate
            .reporter()
            .record(&proof, fs_outcome(started, result.as_ref().map(|_| ())))
            .await;
        result
    }
}

/// One filesystem call as the metrics and traces see it: which operation, its
/// `execute_tool` span, whether it got as far as running (an error before that is a
/// refusal), and the decision that let it run.
#[derive(Debug)]
pub(crate) struct Observed {
    tool: ToolKind,
    span: ToolSpan,
    performed: bool,
    receipt: Option<Receipt>,
    /// Whether the outcome was recorded before the answer.
    recorded: bool,
}

impl Observed {
    fn new(tool: ToolKind) -> Self {
        Observed {
            tool,
            span: ToolSpan::new(tool),
            performed: false,
            receipt: None,
            recorded: false,
        }
    }
}

/// The response headers of a successful filesystem call: the tier that let it run (`auto`,
/// or `ask` for an approved call), the recorded decision, the consumed approval (when
/// any) and the deciding rule. `Run` carries the same in its `Started` event.
pub(crate) const RECEIPT_HEADERS: [&str; 4] = [
    "toolgate-decision",
    "toolgate-decision-id",
    "toolgate-approval-id",
    "toolgate-rule-id",
];

/// The response header of a successful filesystem call that says whether its outcome is
/// in the ledger: `recorded`, or `pending` when the policy service could not take it in time
/// (it is still being retried, and is lost if the executor dies first).
pub(crate) const OUTCOME_HEADER: &str = "toolgate-outcome";

/// Puts `receipt` and whether the outcome was `recorded` into a successful response's
/// headers.
fn attach<T>(receipt: &Receipt, recorded: bool, response: &mut Response<T>) {
    let md = response.metadata_mut();
    md.insert(
        OUTCOME_HEADER,
        tonic::metadata::MetadataValue::from_static(if recorded { "recorded" } else { "pending" }),
    );
    let values = [
        receipt.tier,
        receipt.decision_id.as_str(),
        receipt.approval_id.as_str(),
        receipt.rule_id.as_str(),
    ];
    for (name, value) in RECEIPT_HEADERS.into_iter().zip(values) {
        if let Ok(v) = value.parse()
            && !value.is_empty()
        {
            md.insert(name, v);
        }
    }
}

impl FsService {
    /// Records a finished call: `fs_ops{op,code}` always, a rejection by reason when it was
    /// refused before the operation ran (auth, validation, policy, approval), and the end
    /// of its `execute_tool` span. A successful response carries the decision's receipt.
    fn observe<T>(
        &self,
        mut obs: Observed,
        result: Result<Response<T>, Status>,
    ) -> Result<Response<T>, Status> {
        let code = result.as_ref().err().map_or(tonic::Code::Ok, Status::code);
        self.gate.metrics().fs_op(op_label(obs.tool), code);
        obs.span.end(&result);
        let result = result.map(|mut r| {
            if let Some(receipt) = &obs.receipt {
                attach(receipt, obs.recorded, &mut r);
            }
            r
        });
        if obs.performed {
            result
        } else {
            wire::count_refusal(self.gate.metrics(), result)
        }
    }
}

/// The `op` label of a filesystem tool: `read`, `write`, ...
fn op_label(tool: ToolKind) -> &'static str {
    let name = tool.as_str();
    name.strip_prefix("fs.").unwrap_or(name)
}

/// A call whose caller and context are known, before the policy is asked.
#[derive(Debug)]
pub(crate) struct Prepared {
    principal: Principal,
    trace_parent: Option<String>,
    ctx: CallContext,
}

impl Prepared {
    /// The authenticated caller plus the validated context.
    pub(crate) fn new(
        (principal, trace_parent): (Principal, Option<String>),
        context: Option<common::CallContext>,
    ) -> Result<Self, Status> {
        Ok(Prepared {
            principal,
            trace_parent,
            ctx: CallContext::try_from(context)?,
        })
    }
}

/// Lowercase hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The handlers; each records what it did through [`FsService::observe`].
impl FsService {
    async fn read_file_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/ReadFile")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let range = fs::read_range(r.range);
        let req = ReadRequest {
            path: fs::path(r.path)?,
            range,
            max_bytes: wire::cap(r.max_bytes),
        };
        let call = ToolCall {
            path: Some(self.canonical(&req.path).await?),
            ..ToolCall::new(ToolKind::FsRead)
        };
        let out = self
            .perform(obs, prepared, call, move |ws| ws.read(&req))
            .await?;
        Ok(Response::new(fs::read(out, range)))
    }

    async fn write_file_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::WriteFileRequest>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/WriteFile")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = WriteRequest {
            path: fs::path(r.path)?,
            content: r.content,
            expected_sha256: fs::sha(r.expected_sha256)?,
            create_new: r.create_new,
            create_parents: r.create_parents,
        };
        let call = ToolCall {
            path: Some(self.canonical_write(&req.path).await?),
            content_sha256: Some(sha256_hex(&req.content)),
            content_size: Some(req.content.len() as u64),
            ..ToolCall::new(ToolKind::FsWrite)
        };
        let out = self
            .perform(obs, prepared, call, move |ws| ws.write(&req))
            .await?;
        Ok(Response::new(fs::write(out)))
    }

    async fn edit_file_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::EditFileRequest>,
    ) -> Result<Response<pb::EditFileResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/EditFile")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = EditRequest {
            path: fs::path(r.path)?,
            old: r.old_text,
            new: r.new_text,
            expected_occurrences: r.expected_occurrences.map(|n| n as usize),
            replace_all: r.replace_all,
            expected_sha256: fs::sha(r.expected_sha256)?,
        };
        let call = ToolCall {
            path: Some(self.canonical_write(&req.path).await?),
            edit_old_sha256: Some(sha256_hex(req.old.as_bytes())),
            edit_new_sha256: Some(sha256_hex(req.new.as_bytes())),
            expected_occurrences: r.expected_occurrences,
            ..ToolCall::new(ToolKind::FsEdit)
        };
        let out = self
            .perform(obs, prepared, call, move |ws| ws.edit(&req))
            .await?;
        Ok(Response::new(fs::edit(out)))
    }

    async fn list_directory_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::ListDirectoryRequest>,
    ) -> Result<Response<pb::ListDirectoryResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/ListDirectory")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = ListRequest {
            path: fs::path(r.path)?,
            recursive: r.recursive,
            max_depth: wire::cap(r.max_depth as usize),
            max_entries: wire::cap(r.max_entries as usize),
            include_hidden: r.include_hidden,
        };
        let call = ToolCall {
            path: Some(self.canonical(&req.path).await?),
            recursive: req.recursive,
            ..ToolCall::new(ToolKind::FsList)
        };
        let out = self
            .perform_hiding(obs, prepared, call, move |ws, hidden| {
                ws.list_hiding(&req, hidden)
            })
            .await?;
        Ok(Response::new(fs::list(out)))
    }

    async fn search_files_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::SearchFilesRequest>,
    ) -> Result<Response<pb::SearchFilesResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/SearchFiles")?;
        search::search(self, obs, caller, request.into_inner()).await
    }

    async fn find_files_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::FindFilesRequest>,
    ) -> Result<Response<pb::FindFilesResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/FindFiles")?;
        search::find(self, obs, caller, request.into_inner()).await
    }

    async fn create_directory_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::CreateDirectoryRequest>,
    ) -> Result<Response<pb::CreateDirectoryResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/CreateDirectory")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = MkdirRequest {
            path: fs::path(r.path)?,
            parents: r.parents,
        };
        let call = ToolCall {
            path: Some(self.canonical_write(&req.path).await?),
            ..ToolCall::new(ToolKind::FsMkdir)
        };
        let out = self
            .perform(obs, prepared, call, move |ws| ws.mkdir(&req))
            .await?;
        Ok(Response::new(fs::mkdir(out)))
    }

    async fn delete_path_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::DeletePathRequest>,
    ) -> Result<Response<pb::DeletePathResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/DeletePath")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = DeleteRequest {
            path: fs::path(r.path)?,
            recursive: r.recursive,
            missing_ok: r.missing_ok,
            expected_sha256: fs::sha(r.expected_sha256)?,
        };
        // The policy decides on the canonical path (protected globs refuse it before anyone is
        // asked), whether a whole tree goes, and which content a conditional deletion removes.
        // The root is refused here, before anyone is asked: no decision makes it valid.
        let canonical = self
            .confined
            .canonicalize_entry(req.path.clone())
            .await?
            .relative;
        let call = ToolCall {
            path: Some(canonical),
            recursive: req.recursive,
            content_sha256: req.expected_sha256.map(|s| s.to_hex()),
            ..ToolCall::new(ToolKind::FsDelete)
        };
        let out = self
            .perform_hiding(obs, prepared, call, move |ws, hidden| {
                ws.delete_hiding(&req, hidden)
            })
            .await?;
        Ok(Response::new(fs::delete(out)))
    }

    async fn stat_path_call(
        &self,
        obs: &mut Observed,
        request: Request<pb::StatPathRequest>,
    ) -> Result<Response<pb::StatPathResponse>, Status> {
        let caller = wire::caller(&request, "FilesystemService/StatPath")?;
        let r = request.into_inner();
        let prepared = Prepared::new(caller, r.context)?;
        let req = StatRequest {
            path: fs::path(r.path)?,
            sha256: r.compute_sha256,
        };
        let call = ToolCall {
            path: Some(self.canonical(&req.path).await?),
            ..ToolCall::new(ToolKind::FsStat)
        };
        let out = self
            .perform(obs, prepared, call, move |ws| ws.stat(&req))
            .await?;
        Ok(Response::new(fs::stat(out)))
    }
}

#[tonic::async_trait]
impl FilesystemService for FsService {
    async fn read_file(
        &self,
        request: Request<pb::ReadFileRequest>,
    ) -> Result<Response<pb::ReadFileResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsRead);
        let result = self.read_file_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn write_file(
        &self,
        request: Request<pb::WriteFileRequest>,
    ) -> Result<Response<pb::WriteFileResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsWrite);
        let result = self.write_file_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn edit_file(
        &self,
        request: Request<pb::EditFileRequest>,
    ) -> Result<Response<pb::EditFileResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsEdit);
        let result = self.edit_file_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn list_directory(
        &self,
        request: Request<pb::ListDirectoryRequest>,
    ) -> Result<Response<pb::ListDirectoryResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsList);
        let result = self.list_directory_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn search_files(
        &self,
        request: Request<pb::SearchFilesRequest>,
    ) -> Result<Response<pb::SearchFilesResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsSearch);
        let result = self.search_files_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn find_files(
        &self,
        request: Request<pb::FindFilesRequest>,
    ) -> Result<Response<pb::FindFilesResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsFind);
        let result = self.find_files_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn create_directory(
        &self,
        request: Request<pb::CreateDirectoryRequest>,
    ) -> Result<Response<pb::CreateDirectoryResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsMkdir);
        let result = self.create_directory_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn stat_path(
        &self,
        request: Request<pb::StatPathRequest>,
    ) -> Result<Response<pb::StatPathResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsStat);
        let result = self.stat_path_call(&mut call, request).await;
        self.observe(call, result)
    }

    async fn delete_path(
        &self,
        request: Request<pb::DeletePathRequest>,
    ) -> Result<Response<pb::DeletePathResponse>, Status> {
        let mut call = Observed::new(ToolKind::FsDelete);
        let result = self.delete_path_call(&mut call, request).await;
        self.observe(call, result)
    }
}
