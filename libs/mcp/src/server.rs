//! The MCP server: `tools/list` and `tools/call`, each call one executor call made with the
//! agent's own credential.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use toolgate_core::Tier;
use toolgate_runtime::metrics::semconv;
use toolgate_runtime::telemetry;
use tracing::Instrument;
use tracing::field::Empty;

use crate::caller::{self, Caller};
use crate::execute;
use crate::outcome::{Outcome, Refusal, Said};
use crate::shared::{McpConfig, Shared};
use crate::tasks::{self, State, TaskRecord, TaskStore};
use crate::tools::{Definition, Tool};

/// `_meta` key a client may set on `tools/call` to name the agent session its approvals are
/// bound to (default: the transport's session, see the crate docs).
pub const SESSION_META_KEY: &str = "dev.toolgate/session_id";

/// One MCP server instance (one per stdio process, or per HTTP session); cheap to clone.
#[derive(Debug, Clone)]
pub struct McpServer {
    shared: Arc<Shared>,
    /// The credential for every call (stdio); `None` over HTTP, where each request brings
    /// its own bearer token.
    token: Option<Arc<str>>,
    /// The scope of JSON-RPC ids of a stdio server (for `call_id`s): one per process.
    process: Option<Arc<str>>,
    /// The executor's workspace root, part of a stdio server's default session.
    workspace: Option<Arc<str>>,
    /// The session the operator pinned (`toolgate mcp --session-id`), for every call that
    /// names none.
    session: Option<Arc<str>>,
}

impl McpServer {
    /// A server over `channel` (the executor) for stdio: every call carries `token`. Its
    /// default session is derived from the workspace (see [`McpServer::with_workspace`]),
    /// the token and the client's declared name, so an agent restarted on the same
    /// workspace keeps its approvals.
    pub fn stdio(
        channel: tonic::transport::Channel,
        config: McpConfig,
        token: Option<String>,
    ) -> Self {
        McpServer {
            shared: Arc::new(Shared::new(channel, config)),
            token: token.map(Arc::from),
            process: Some(Arc::from(format!("mcp-{}", uuid::Uuid::new_v4().simple()))),
            workspace: None,
            session: None,
        }
    }

    /// Names the executor's workspace root, which the default stdio session is derived from.
    pub fn with_workspace(mut self, root: &str) -> Self {
        self.workspace = Some(Arc::from(root));
        self
    }

    /// Binds every call that names no session of its own to `session` (an agent restarted
    /// with the same id keeps its approvals).
    pub fn with_session(mut self, session: Option<String>) -> Self {
        self.session = session.map(Arc::from);
        self
    }

    /// A server for the streamable HTTP transport: the token and session come with each
    /// request (see [`crate::http`]).
    pub fn http(channel: tonic::transport::Channel, config: McpConfig) -> Self {
        McpServer {
            shared: Arc::new(Shared::new(channel, config)),
            token: None,
            process: None,
            workspace: None,
            session: None,
        }
    }

    /// The tools, in `tools/list` order.
    pub fn tools(&self) -> &[Definition] {
        &self.shared.tools
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Who is calling, in which session, under which idempotency key.
    ///
    /// Two scopes are at play. Approvals bind to the *session*: the one the client names in
    /// `_meta`, else the one this server was started with (`toolgate mcp --session-id`),
    /// else over stdio one derived from the workspace, the credential and the client's
    /// declared name (stable across restarts), else the HTTP transport's, else (stateless
    /// HTTP) one per credential. Idempotency needs a
    /// scope in which JSON-RPC ids are unique: the transport's session (the stdio process, an
    /// `Mcp-Session-Id`). There the `call_id` is a digest of that scope, the request id, the
    /// tool and its arguments, so a retried request does not run twice; a stateless request
    /// has no such scope (clients restart their ids) and gets a fresh `call_id`.
    fn caller(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Caller, String> {
        let parts = context.extensions.get::<http::request::Parts>();
        let token = self.token_of(context);
        let transport = match parts {
            Some(p) => p
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(|s| format!("mcp-{s}")),
            None => self.process.as_deref().map(str::to_owned),
        };
        let named = meta_str(request, context, SESSION_META_KEY)
            .or_else(|| self.session.as_deref().map(str::to_owned));
        let session_id = match (named, &transport) {
            (Some(s), _) => s,
            (None, Some(_)) if parts.is_none() => {
                let client = context.client_info().map(|c| c.name).unwrap_or_default();
                caller::stdio_session(
                    self.workspace.as_deref().unwrap_or(""),
                    token.as_deref().unwrap_or(""),
                    &client,
                )
            }
            (None, Some(s)) => s.clone(),
            // Stateless HTTP (protocol 2026-07-28 has no sessions): one standing session per
            // credential, so an approval granted after "ask" covers the repeated call.
            (None, None) => caller::credential_session(token.as_deref().unwrap_or("")),
        };
        if session_id.is_empty() || session_id.len() > 128 {
            return Err(format!(
                "the session id (`_meta.{SESSION_META_KEY}`) must be 1 to 128 bytes, got {}",
                session_id.len()
            ));
        }
        let call_id = match &transport {
            Some(scope) => caller::call_id(
                scope,
                &serde_json::to_string(&context.id).unwrap_or_default(),
                &request.name,
                &serde_json::to_string(&request.arguments).unwrap_or_default(),
            ),
            None => format!("mcp-{}", uuid::Uuid::new_v4().simple()),
        };
        Ok(Caller {
            token,
            call_id,
            session_id,
        })
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if self.shared.config.tasks.is_some() {
            capabilities.extensions.get_or_insert_default().insert(
                rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                rmcp::model::JsonObject::new(),
            );
        }
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("toolgate", env!("CARGO_PKG_VERSION"))
                    .with_title("toolgate"),
            )
            .with_instructions(
                "Every tool call is decided by toolgate's policy on its arguments: allowed calls run \
                 confined to the workspace, denied ones return an error naming the rule, and calls a \
                 human must approve return the approval id; repeat the same call with the same \
                 arguments once it is approved. Approvals are bound to this agent's session.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let started = Instant::now();
        let result = ListToolsResult::with_all_items(self.shared.tools.clone());
        semconv::mcp_operation("tools/list", "", None, started.elapsed());
        Ok(result)
    }

    fn get_tool(&self, name: &str) -> Option<Definition> {
        self.shared.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let Some(tool) = Tool::from_name(&request.name) else {
            // Metric labels stay a closed set.
            semconv::mcp_operation(
                "tools/call",
                "_OTHER",
                Some("unknown_tool"),
                started.elapsed(),
            );
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`; the tools are {}",
                    request.name,
                    Tool::ALL.map(Tool::name).join(", ")
                ),
                None,
            ));
        };
        // Each call is a trace of its own (rmcp runs handlers inside a session-long span),
        // continued from the client's `traceparent` when it sent one.
        let span = tracing::info_span!(
            parent: None,
            "mcp.server",
            otel.name = format!("tools/call {tool}"),
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = "tools/call",
            mcp.session.id = Empty,
            mcp.protocol.version = Empty,
            jsonrpc.request.id = %id_text(&context.id),
            gen_ai.tool.name = tool.name(),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.call.id = Empty,
            error.type = Empty,
            toolgate.decision = Empty,
        );
        if let Some(tp) = meta_str(&request, &context, "traceparent") {
            telemetry::set_remote_parent(&span, &tp);
        }
        if let Some(v) = context.protocol_version() {
            span.record("mcp.protocol.version", v.as_str());
        }
        let (outcome, caller) = match self.caller(&request, &context) {
            Err(why) => (Outcome::Invalid(why), None),
            Ok(caller) => {
                span.record("mcp.session.id", caller.session_id.as_str());
                span.record("gen_ai.tool.call.id", caller.call_id.as_str());
                let args = Value::Object(request.arguments.clone().unwrap_or_default());
                let outcome = execute::call(&self.shared, tool, args, &caller, &context)
                    .instrument(span.clone())
                    .await;
                (outcome, Some(caller))
            }
        };
        let error_type = outcome.error_type();
        span.record("toolgate.decision", outcome.tier().map_or("", Tier::as_str));
        if let Some(e) = error_type {
            span.record("error.type", e);
            span.record("otel.status_code", "ERROR");
        }
        semconv::mcp_operation("tools/call", tool.name(), error_type, started.elapsed());
        let task = caller
            .as_ref()
            .and_then(|c| self.park(tool, &request, &context, c, &outcome));
        match task {
            Some(t) => Ok(CallToolResponse::Task(CreateTaskResult::new(t))),
            None => {
                let session = caller.as_ref().map_or("", |c| c.session_id.as_str());
                let said = self.said(tool, session, &context);
                Ok(CallToolResponse::Complete(outcome.into_result(&said)))
            }
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let started = Instant::now();
        let span = tracing::info_span!(
            parent: None,
            "mcp.server",
            otel.name = "tasks/get",
            otel.kind = "server",
            mcp.method.name = "tasks/get",
            toolgate.approval.id = %request.task_id,
        );
        let result = self
            .resume(&request.task_id, &context)
            .instrument(span)
            .await;
        let error = result.as_ref().err().map(|_| "invalid_params");
        semconv::mcp_operation("tasks/get", "", error, started.elapsed());
        result.map(|r| GetTaskResult::new(r.detailed()))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let (store, mut record) = self.owned_task(&request.task_id, &context)?;
        let lock = store.lock(&record.approval_id);
        let _held = lock.lock().await;
        record = store
            .load(&record.approval_id)
            .map_err(internal)?
            .unwrap_or(record);
        if record.is_terminal() {
            return Err(McpError::invalid_params(
                format!("task {} has already finished", record.approval_id),
                None,
            ));
        }
        record.state = State::Cancelled;
        record.message = "cancelled by the client; the call will not run".to_owned();
        record.updated_at = tasks::now_text();
        store.save(&record).map_err(internal)
    }
}

/// A string in the request's `_meta` (rmcp hands it over in the context; the params keep
/// it when a caller built them by hand).
fn meta_str(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    key: &str,
) -> Option<String> {
    [
        context.meta.0.0.get(key),
        request.meta.as_ref().and_then(|m| m.0.0.get(key)),
    ]
    .into_iter()
    .flatten()
    .find_map(Value::as_str)
    .map(str::to_owned)
}

impl McpServer {
    /// For an `ask` still pending, from a client that declared the tasks extension: the
    /// task to return instead of the tool error, its record saved first (so `tasks/get`
    /// resolves before the client sees the id).
    fn park(
        &self,
        tool: Tool,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        caller: &Caller,
        outcome: &Outcome,
    ) -> Option<rmcp::model::Task> {
        let store = self.shared.config.tasks.as_ref()?;
        let (approval_id, expires_at) = outcome.pending_approval()?;
        let wants = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        if !wants {
            return None;
        }
        let now = tasks::now_text();
        let record = TaskRecord {
            approval_id: approval_id.to_owned(),
            tool,
            arguments: request.arguments.clone().unwrap_or_default(),
            session_id: caller.session_id.clone(),
            call_id: caller.call_id.clone(),
            owner: tasks::owner_of(caller.token.as_deref()),
            created_at: now.clone(),
            updated_at: now,
            expires_at_ms: tasks::ms_of(expires_at),
            state: State::Working,
            message: format!("waiting for a human to decide approval {approval_id}"),
            result: None,
        };
        match store.save(&record) {
            Ok(()) => Some(record.task()),
            Err(e) => {
                // Without a record the task could not be resumed: answer the plain `ask`.
                tracing::warn!(error = %e, "cannot save an MCP task record");
                None
            }
        }
    }

    /// Who a result is worded for.
    fn said<'a>(
        &'a self,
        tool: Tool,
        session_id: &'a str,
        context: &RequestContext<RoleServer>,
    ) -> Said<'a> {
        Said {
            tool,
            session_id,
            executor: &self.shared.config.executor,
            http: context.extensions.get::<http::request::Parts>().is_some(),
        }
    }

    /// The caller's task by id; an unknown id and somebody else's task look the same.
    fn owned_task(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Arc<TaskStore>, TaskRecord), McpError> {
        let unknown = || McpError::invalid_params(format!("no task {id}"), None);
        let store = self.shared.config.tasks.clone().ok_or_else(unknown)?;
        let record = store.load(id).map_err(internal)?.ok_or_else(unknown)?;
        if record.owner != tasks::owner_of(self.token_of(context).as_deref()) {
            return Err(unknown());
        }
        Ok((store, record))
    }

    fn token_of(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        match context.extensions.get::<http::request::Parts>() {
            Some(p) => caller::bearer(&p.headers).map(str::to_owned),
            None => self.token.as_deref().map(str::to_owned),
        }
    }

    /// `tasks/get`: a finished task as it ended; a working one asks the executor again with
    /// the same call, which runs it once the approval is granted.
    async fn resume(
        &self,
        id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<TaskRecord, McpError> {
        let (store, record) = self.owned_task(id, context)?;
        if record.is_terminal() {
            return Ok(record);
        }
        let lock = store.lock(id);
        let _held = lock.lock().await;
        let Some(mut record) = store.load(id).map_err(internal)? else {
            return Err(McpError::invalid_params(format!("no task {id}"), None));
        };
        if record.is_terminal() {
            return Ok(record);
        }
        if record.expired() {
            record.state = State::Failed;
            record.message =
                format!("approval {id} expired before anyone decided; the call did not run");
        } else {
            let caller = Caller {
                token: self.token_of(context),
                session_id: record.session_id.clone(),
                call_id: record.call_id.clone(),
            };
            let args = Value::Object(record.arguments.clone());
            let outcome = execute::call(&self.shared, record.tool, args, &caller, context).await;
            let said = self.said(record.tool, &caller.session_id, context);
            match &outcome {
                Outcome::Refused(Refusal::ApprovalPending { decided, .. })
                    if decided.approval_id == record.approval_id =>
                {
                    return Ok(record);
                }
                Outcome::Refused(
                    Refusal::ApprovalPending { .. } | Refusal::ApprovalCancelled(_),
                ) => {
                    record.state = State::Cancelled;
                    record.message = format!(
                        "approval {id} was cancelled before it was used; the call did not run"
                    );
                }
                Outcome::Refused(Refusal::ApprovalExpired(_)) => {
                    record.state = State::Failed;
                    record.message =
                        format!("approval {id} expired before it was used; the call did not run");
                }
                // Running elsewhere right now, or a passing outage: still working.
                Outcome::Refused(Refusal::Failed(f)) if f.kind.is_transient() => {
                    record.message = format!("approval {id}: {}", outcome.text(&said));
                    record.updated_at = tasks::now_text();
                    return Ok(record);
                }
                _ => {
                    record.state = State::Completed;
                    record.message = match outcome.tier() {
                        Some(Tier::Deny) => format!("approval {id} was denied"),
                        _ => format!("approval {id} was granted and the call ran"),
                    };
                    record.result = Some(outcome.into_result(&said));
                }
            }
        }
        record.updated_at = tasks::now_text();
        store.save(&record).map_err(internal)?;
        Ok(record)
    }
}

fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(format!("task store: {e}"), None)
}

fn id_text(id: &rmcp::model::RequestId) -> String {
    match id {
        rmcp::model::NumberOrString::Number(n) => n.to_string(),
        rmcp::model::NumberOrString::String(s) => s.to_string(),
    }
}
