//! Who a tool call is for: the credential it carries, the session its approvals bind to,
//! and its idempotency key (`call_id`). The keys are pure functions of their inputs, so
//! the same call asked again gets the same key and nothing else does.

use sha2::{Digest, Sha256};

/// One tool call's identity as the executor sees it.
#[derive(Debug)]
pub(crate) struct Caller {
    /// The agent's bearer token (none: the executor refuses the call).
    pub(crate) token: Option<String>,
    /// The session approvals are bound to.
    pub(crate) session_id: String,
    /// The ledger's idempotency key.
    pub(crate) call_id: String,
}

/// The `call_id` of a request in `scope`, a transport session in which JSON-RPC ids are
/// unique (a stdio process, an `Mcp-Session-Id`): a digest of the scope, the request id (as
/// JSON), the tool name and the arguments (as JSON). A retried request gets the same key,
/// so the executor does not run it twice.
pub(crate) fn call_id(scope: &str, request_id: &str, tool: &str, arguments: &str) -> String {
    let digest = digest([scope, request_id, tool, arguments]);
    format!("mcp-{}", &digest[..32])
}

/// The default session of a stdio server: a digest of the executor's workspace root, the
/// agent's token and the client's declared name (`clientInfo.name`). The same agent
/// restarted on the same workspace gets the same session, so an approval granted while it
/// was away still covers its repeated call; two different clients, credentials or
/// workspaces never share one.
pub(crate) fn stdio_session(workspace: &str, token: &str, client: &str) -> String {
    let digest = digest([workspace, token, client]);
    format!("mcp-stdio-{}", &digest[..24])
}

/// The standing session of a stateless HTTP request (protocol 2026-07-28 has no sessions):
/// one per credential, so an approval granted after "ask" covers the repeated call.
pub(crate) fn credential_session(token: &str) -> String {
    format!(
        "mcp-cred-{}",
        &hex::encode(Sha256::digest(token.as_bytes()))[..16]
    )
}

/// sha256 over the parts, each prefixed with its length so that no two different lists of
/// parts hash the same bytes; hex.
fn digest<const N: usize>(parts: [&str; N]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The token of an `Authorization: Bearer <token>` header.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    toolgate_runtime::auth::parse_bearer(v)
}

#[cfg(test)]
mod tests {
    use super::{call_id, credential_session, stdio_session};

    const CALL: [&str; 4] = ["mcp-abc", "7", "read_file", r#"{"path":"a.txt"}"#];

    fn key(parts: [&str; 4]) -> String {
        call_id(parts[0], parts[1], parts[2], parts[3])
    }

    #[test]
    fn the_same_call_gets_the_same_call_id() {
        assert_eq!(key(CALL), key(CALL));
        let id = key(CALL);
        assert!(id.starts_with("mcp-") && id.len() == 4 + 32, "{id}");
        assert!(id[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    }

    #[test]
    fn each_part_of_a_call_changes_its_call_id() {
        let base = key(CALL);
        for i in 0..4 {
            let mut other = CALL;
            let changed = format!("{}x", CALL[i]);
            other[i] = &changed;
            assert_ne!(key(other), base, "changing part {i} kept the key");
        }
        // Moving bytes between neighbouring parts is a different call too.
        assert_ne!(
            key(["mcp-ab", "c7", "read_file", CALL[3]]),
            key(["mcp-abc", "7", "read_file", CALL[3]])
        );
        assert_ne!(key(["s", "1", "", "x"]), key(["s", "1", "x", ""]));
    }

    #[test]
    fn stdio_sessions_differ_by_workspace_token_and_client() {
        let base = stdio_session("/w", "tok", "claude");
        assert_eq!(base, stdio_session("/w", "tok", "claude"));
        assert!(
            base.starts_with("mcp-stdio-") && base.len() == 10 + 24,
            "{base}"
        );
        for other in [
            stdio_session("/v", "tok", "claude"),
            stdio_session("/w", "tok2", "claude"),
            stdio_session("/w", "tok", "cursor"),
            stdio_session("/wt", "ok", "claude"),
        ] {
            assert_ne!(other, base);
        }
    }

    #[test]
    fn a_stateless_session_is_one_per_credential() {
        assert_eq!(credential_session("tok"), credential_session("tok"));
        assert_ne!(credential_session("tok"), credential_session("tok2"));
        assert!(credential_session("tok").starts_with("mcp-cred-"));
    }
}
