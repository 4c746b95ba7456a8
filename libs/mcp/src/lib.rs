//! toolgate as a Model Context Protocol server, built on `rmcp`.
//!
//! The server is a client of the executor's gRPC API and nothing else: it never touches the
//! workspace, and every `tools/call` becomes exactly one executor call (a filesystem RPC or
//! `ProcessService/Run`) made with the agent's own bearer token. The policy decides it on
//! its arguments, the ledger records it, the executor confines it: there is no second
//! enforcement path.
//!
//! # Sessions and idempotency
//!
//! Approvals are bound to a `session_id`. A tool call's session is, in order:
//! `params._meta["dev.toolgate/session_id"]` when the client names one; the one the server
//! was started with (`toolgate mcp --session-id`); over stdio, a digest of the executor's
//! workspace, the token and the client's declared name (stable across restarts of the
//! agent); over HTTP, `Mcp-Session-Id` with protocol versions that have sessions; else, for
//! stateless HTTP (protocol 2026-07-28), one standing session per credential. The `call_id` is a digest of the session, the JSON-RPC request id, the
//! tool and its arguments, so a retried request does not run twice.
//!
//! # Decisions
//!
//! Refusals are tool results, never protocol errors, so the model can read them:
//! `structuredContent` carries `decision` (`deny` or `ask`), `rule_id`, `reason`, `guidance`
//! (what to do next, as the text says it), `session_id`, and for `ask` the `approval_id`,
//! `state` and `expires_at`. Every output schema admits them (an `anyOf` of the result, a
//! refusal and a failure). A deny is `isError: true`; a pending `ask` is not an error. Every result's `_meta` carries
//! `dev.toolgate/decision`, `dev.toolgate/rule_id`, `dev.toolgate/approval_id` and
//! `dev.toolgate/decision_id` where known.
//!
//! # Telemetry
//!
//! Each call runs in a SERVER span `tools/call {tool}` (parent: `params._meta.traceparent`
//! when sent, else none: a trace of its own) and is timed in
//! `mcp_server_operation_duration_seconds`; the executor's `execute_tool {tool}` span, with
//! the same tool name, becomes its grandchild, under the gRPC client span.

mod caller;
mod execute;
pub mod http;
mod outcome;
mod server;
mod shared;
mod tasks;
pub mod tools;

pub use server::{McpServer, SESSION_META_KEY};
pub use shared::McpConfig;
pub use tasks::TaskStore;

/// Serves `server` over stdin/stdout until the client closes them.
pub async fn serve_stdio(server: McpServer) -> Result<(), std::io::Error> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::io::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
