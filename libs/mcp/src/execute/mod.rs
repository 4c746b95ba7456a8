//! One MCP tool call as exactly one executor call: arguments to a request, the answer (or
//! the refusal) to what the model reads.
//!
//! `fs` holds the filesystem tools, `run` the streamed `run_command`, `runs` the tools that
//! list, read and stop background runs, `output` how runs are rendered.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tonic::{Request, Status};
use toolgate_contracts::common::v1 as common;
use toolgate_runtime::{auth, telemetry};
use tracing::Instrument;

use crate::caller::Caller;
use crate::outcome::Outcome;
use crate::shared::Shared;
use crate::tools::Tool;

mod fs;
mod output;
mod run;
mod runs;

/// Runs `tool` with `args` for `caller`.
pub(crate) async fn call(
    shared: &Shared,
    tool: Tool,
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
        Tool::ReadFile => cx.read(args).await,
        Tool::WriteFile => cx.write(args).await,
        Tool::EditFile => cx.edit(args).await,
        Tool::ListDirectory => cx.list(args).await,
        Tool::SearchFiles => cx.search(args).await,
        Tool::FindFiles => cx.find(args).await,
        Tool::CreateDirectory => cx.mkdir(args).await,
        Tool::StatPath => cx.stat(args).await,
        Tool::DeletePath => cx.delete(args).await,
        Tool::RunCommand => cx.run(args).await,
        Tool::ListRuns => cx.list_runs(args).await,
        Tool::ReadRunOutput => cx.read_run_output(args).await,
        Tool::StopRun => cx.stop_run(args).await,
    }
}

struct Cx<'a> {
    shared: &'a Shared,
    caller: &'a Caller,
    context: &'a RequestContext<RoleServer>,
    tool: Tool,
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
            let v = auth::bearer(t).map_err(|_| {
                Status::unauthenticated("the bearer token holds characters a header cannot carry")
            })?;
            r.metadata_mut().insert("authorization", v);
        }
        telemetry::inject(r.metadata_mut());
        Ok(r)
    }

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
            .map_err(|e| Box::new(Outcome::Invalid(format!("{}: {e}", self.tool))))
    }
}
