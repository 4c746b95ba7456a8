//! [`ToolCall`]: one call in domain terms, the same value on both sides of the policy seam;
//! [`ExecutorIdentity`]: who runs it.

use std::collections::BTreeMap;

use crate::ToolKind;

/// One tool call, as the executor resolved it and the policy classifies it. The adapters build
/// it from and into the wire `ToolCall`.
///
/// Paths are canonical workspace-relative paths (`.` is the root) as the executor resolved
/// them; the policy never touches the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// What kind of call this is.
    pub tool: ToolKind,
    /// Canonical workspace-relative path of fs calls.
    pub path: Option<String>,
    /// sha256 (hex) of the content an `fs.write` stores; for `fs.delete`, the sha256 the
    /// deleted file must have, when the request sets one.
    pub content_sha256: Option<String>,
    /// Size of the content an `fs.write` stores.
    pub content_size: Option<u64>,
    /// sha256 (hex) of the text an `fs.edit` replaces.
    pub edit_old_sha256: Option<String>,
    /// sha256 (hex) of the replacement text of an `fs.edit`.
    pub edit_new_sha256: Option<String>,
    /// How many occurrences an `fs.edit` expects.
    pub expected_occurrences: Option<u32>,
    /// Whether a list, search or find descends into directories.
    pub recursive: bool,
    /// Search pattern of `fs.search` / name pattern of `fs.find`.
    pub pattern: Option<String>,
    /// Include globs of list, search and find.
    pub globs: Vec<String>,
    /// A `process.run` argv executed without a shell.
    pub argv: Option<Vec<String>>,
    /// A `process.run` bash script.
    pub script: Option<String>,
    /// Working directory of `process.run`, workspace-relative.
    pub cwd: Option<String>,
    /// Environment additions for `process.run`.
    pub env: BTreeMap<String, String>,
    /// sha256 (hex) of the stdin given to the process.
    pub stdin_sha256: Option<String>,
    /// Time limit of the process.
    pub timeout_ms: Option<u64>,
    /// stdout byte cap.
    pub stdout_cap_bytes: Option<u64>,
    /// stderr byte cap.
    pub stderr_cap_bytes: Option<u64>,
    /// Whether hitting a cap kills the process.
    pub kill_on_cap: bool,
    /// Whether the run goes on in the background after its call returns.
    pub background: bool,
    /// Requested sandbox profile.
    pub sandbox_profile: Option<String>,
    /// Workspace files a `process.run` names: canonical workspace-relative path to the
    /// digest of the content the executor read (the wire `ToolCall.bound_files` documents
    /// the form). An approval covers these contents, not only the names.
    pub bound_files: BTreeMap<String, String>,
    /// `net.connect`: the destination host (a resolved name, lowercase, or an IP literal).
    pub host: Option<String>,
    /// `net.connect`: the destination port.
    pub port: Option<u32>,
    /// `net.connect`: the transport protocol (`tcp`).
    pub protocol: Option<String>,
}

impl ToolCall {
    /// A call of `tool` with every optional field empty.
    pub fn new(tool: ToolKind) -> Self {
        ToolCall {
            tool,
            path: None,
            content_sha256: None,
            content_size: None,
            edit_old_sha256: None,
            edit_new_sha256: None,
            expected_occurrences: None,
            recursive: false,
            pattern: None,
            globs: Vec::new(),
            argv: None,
            script: None,
            cwd: None,
            env: BTreeMap::new(),
            stdin_sha256: None,
            timeout_ms: None,
            stdout_cap_bytes: None,
            stderr_cap_bytes: None,
            kill_on_cap: false,
            background: false,
            sandbox_profile: None,
            bound_files: BTreeMap::new(),
            host: None,
            port: None,
            protocol: None,
        }
    }

    /// A filesystem call on `path`.
    pub fn fs(tool: ToolKind, path: impl Into<String>) -> Self {
        ToolCall {
            path: Some(path.into()),
            ..ToolCall::new(tool)
        }
    }

    /// A `process.run` of a bash script.
    pub fn script(script: impl Into<String>) -> Self {
        ToolCall {
            script: Some(script.into()),
            ..ToolCall::new(ToolKind::ProcessRun)
        }
    }

    /// A `process.run` of an argv (no shell).
    pub fn argv<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        ToolCall {
            argv: Some(argv.into_iter().map(Into::into).collect()),
            ..ToolCall::new(ToolKind::ProcessRun)
        }
    }
}

/// What an agent session carries from one `persist_cwd` call to the next: the executor
/// keeps it while it holds the session's sandbox, the ledger stores it between holders.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionState {
    /// The working directory, workspace-relative (`.` for the root).
    pub cwd: String,
    /// The allowlisted variables the session's runs exported.
    pub env: std::collections::BTreeMap<String, String>,
}

/// Who an executor is, as it reports itself to the policy service beside its credential.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutorIdentity {
    /// The configured id, else `host:pid`.
    pub executor_id: String,
    /// Kubernetes pod name, when set.
    pub pod: String,
    /// Kubernetes namespace, when set.
    pub namespace: String,
    /// Kubernetes node, when set.
    pub node: String,
    /// Container image, when set.
    pub image: String,
    /// This build's version.
    pub version: String,
}
