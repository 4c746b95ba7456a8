//! The MCP tasks extension (SEP-2663) for calls a human must approve.
//!
//! A client that declares the extension gets, instead of the `ask` tool error, a task whose
//! id is the approval id. The call's arguments are kept in a task record on disk (one JSON
//! file per task, mode 0600 in a 0700 directory) so that any later `tasks/get` (from this
//! process or one started after it) can resume it: it sends the same executor call again,
//! under the same `call_id` and session, and the ledger answers. Pending: `working`.
//! Approved: the call runs now, and the task is `completed` with its result (kept, so it never
//! runs twice). Denied: `completed` with the denial as an error result. Expired: `failed`.
//! Cancelled (by the client, or the approval by a human): `cancelled`. Only the credential
//! that created a task can see it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::tools::Tool;

/// How long finished task records are kept before they are removed.
const KEEP_FINISHED: Duration = Duration::from_secs(7 * 24 * 3600);

/// Suggested polling interval.
const POLL_MS: u64 = 2_000;

/// One task, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    /// The approval id, which is the task id.
    pub(crate) approval_id: String,
    /// The tool and its arguments, as the client sent them.
    pub(crate) tool: Tool,
    pub(crate) arguments: JsonObject,
    /// The executor call's identity; resumed under the same.
    pub(crate) session_id: String,
    pub(crate) call_id: String,
    /// sha256 of the credential that created the task; only it may see the task.
    pub(crate) owner: String,
    pub(crate) created_at: String,
    pub(crate) updated_at: String,
    /// When the approval expires (Unix milliseconds); 0 when unknown.
    pub(crate) expires_at_ms: u64,
    pub(crate) state: State,
    /// Why the task is where it is, for `statusMessage`.
    pub(crate) message: String,
    /// The final result of a completed task.
    pub(crate) result: Option<CallToolResult>,
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    Working,
    Completed,
    Failed,
    Cancelled,
}

impl TaskRecord {
    pub(crate) fn is_terminal(&self) -> bool {
        self.state != State::Working
    }

    /// The task as `tasks/get` and `CreateTaskResult` show it.
    pub(crate) fn task(&self) -> Task {
        let status = match self.state {
            State::Working => rmcp::model::TaskStatus::Working,
            State::Completed => rmcp::model::TaskStatus::Completed,
            State::Failed => rmcp::model::TaskStatus::Failed,
            State::Cancelled => rmcp::model::TaskStatus::Cancelled,
        };
        let mut t = Task::new(
            self.approval_id.clone(),
            status,
            self.created_at.clone(),
            self.updated_at.clone(),
        )
        .with_poll_interval_ms(POLL_MS);
        let created = ms_of(&self.created_at);
        if self.expires_at_ms > created && created > 0 {
            // The task lives as long as its approval can be decided.
            t = t.with_ttl_ms(self.expires_at_ms - created);
        }
        if !self.message.is_empty() {
            t = t.with_status_message(self.message.clone());
        }
        t
    }

    /// The task with its payload.
    pub(crate) fn detailed(&self) -> DetailedTask {
        let payload = match self.state {
            State::Working => TaskPayload::Working,
            State::Completed => TaskPayload::Completed {
                result: match self
                    .result
                    .as_ref()
                    .and_then(|r| serde_json::to_value(r).ok())
                {
                    Some(Value::Object(m)) => m,
                    _ => JsonObject::new(),
                },
            },
            State::Failed => TaskPayload::Failed {
                error: match serde_json::json!({"code": -32603, "message": self.message}) {
                    Value::Object(m) => m,
                    _ => JsonObject::new(),
                },
            },
            State::Cancelled => TaskPayload::Cancelled,
        };
        DetailedTask::new(self.task(), payload)
    }

    /// Whether the approval's expiry has passed.
    pub(crate) fn expired(&self) -> bool {
        self.expires_at_ms != 0 && now_ms() > self.expires_at_ms
    }
}

/// The digest a task's owner is known by.
pub(crate) fn owner_of(token: Option<&str>) -> String {
    hex::encode(Sha256::digest(token.unwrap_or("").as_bytes()))
}

/// RFC 3339 now.
pub(crate) fn now_text() -> String {
    prost_types::Timestamp::from(SystemTime::now()).to_string()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Unix milliseconds of an RFC 3339 time, 0 when it does not parse.
pub(crate) fn ms_of(text: &str) -> u64 {
    text.parse::<prost_types::Timestamp>()
        .ok()
        .and_then(|t| SystemTime::try_from(t).ok())
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// Task records in a directory; one lock per task so one process never resumes a task twice
/// at once (across processes the ledger's `call_id` does that).
#[derive(Debug)]
pub struct TaskStore {
    dir: PathBuf,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl TaskStore {
    /// Opens (creating, mode 0700) `dir`, removing records finished more than a week ago.
    pub fn open(dir: &Path) -> std::io::Result<TaskStore> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        for entry in std::fs::read_dir(dir)?.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > KEEP_FINISHED);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(TaskStore {
            dir: dir.to_owned(),
            locks: Mutex::new(HashMap::new()),
        })
    }

    /// The path of a task's record; `None` for an id that is not an approval id.
    fn path(&self, id: &str) -> Option<PathBuf> {
        let valid = id.len() <= 64
            && id.starts_with("apr_")
            && id[4..].bytes().all(|b| b.is_ascii_hexdigit());
        valid.then(|| self.dir.join(format!("{id}.json")))
    }

    /// The lock that serializes work on one task in this process.
    pub(crate) fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if locks.len() > 4096 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(id.to_owned()).or_default().clone()
    }

    /// Reads a task; `None` when there is none by that id.
    pub(crate) fn load(&self, id: &str) -> std::io::Result<Option<TaskRecord>> {
        let Some(path) = self.path(id) else {
            return Ok(None);
        };
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes a task atomically (temp file, fsync, rename).
    pub(crate) fn save(&self, record: &TaskRecord) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self
            .path(&record.approval_id)
            .ok_or_else(|| std::io::Error::other("not an approval id"))?;
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(record).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    }
}
