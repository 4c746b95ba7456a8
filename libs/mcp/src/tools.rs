//! The thirteen tools: their arguments, results, JSON Schemas and annotations, in the order
//! `tools/list` returns them.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{JsonObject, ToolAnnotations};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tool as `tools/list` describes it (rmcp's type).
pub use rmcp::model::Tool as Definition;

/// One of the tools. Its name, description, schemas and annotations are here; the
/// executor call it makes is `execute::call`'s match on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    /// `read_file`: Read a file.
    ReadFile,
    /// `write_file`: Write a file.
    WriteFile,
    /// `edit_file`: Edit a file.
    EditFile,
    /// `list_directory`: List a directory.
    ListDirectory,
    /// `search_files`: Search file contents.
    SearchFiles,
    /// `find_files`: Find files by name.
    FindFiles,
    /// `create_directory`: Create a directory.
    CreateDirectory,
    /// `stat_path`: Stat a path.
    StatPath,
    /// `delete_path`: Delete a path.
    DeletePath,
    /// `run_command`: Run a command.
    RunCommand,
    /// `list_runs`: List background runs.
    ListRuns,
    /// `read_run_output`: Read a run's output.
    ReadRunOutput,
    /// `stop_run`: Stop a run.
    StopRun,
}

impl Tool {
    /// Every tool, in `tools/list` order.
    pub const ALL: [Tool; 13] = [
        Tool::ReadFile,
        Tool::WriteFile,
        Tool::EditFile,
        Tool::ListDirectory,
        Tool::SearchFiles,
        Tool::FindFiles,
        Tool::CreateDirectory,
        Tool::StatPath,
        Tool::DeletePath,
        Tool::RunCommand,
        Tool::ListRuns,
        Tool::ReadRunOutput,
        Tool::StopRun,
    ];

    /// The name clients call it by.
    pub const fn name(self) -> &'static str {
        match self {
            Tool::ReadFile => "read_file",
            Tool::WriteFile => "write_file",
            Tool::EditFile => "edit_file",
            Tool::ListDirectory => "list_directory",
            Tool::SearchFiles => "search_files",
            Tool::FindFiles => "find_files",
            Tool::CreateDirectory => "create_directory",
            Tool::StatPath => "stat_path",
            Tool::DeletePath => "delete_path",
            Tool::RunCommand => "run_command",
            Tool::ListRuns => "list_runs",
            Tool::ReadRunOutput => "read_run_output",
            Tool::StopRun => "stop_run",
        }
    }

    /// The tool a client names; `None` for a name that is not one of ours.
    pub fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its `tools/list` entry. `network` says whether the sandbox profile runs get by
    /// default reaches the network (then `run_command` is open-world).
    pub fn definition(self, network: bool) -> Definition {
        let read_only = || {
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false)
        };
        match self {
            Tool::ReadFile => define::<ReadFileArgs, ReadFileOutput>(
                self,
                "Read a file",
                "Read a file in the workspace, whole or a byte or line range. Returns the text (invalid UTF-8 replaced) and `file_sha256`: pass it as `expected_sha256` to write_file or edit_file so they fail instead of overwriting a change you have not seen. Paths are relative to the workspace root.",
                read_only(),
            ),
            Tool::WriteFile => define::<WriteFileArgs, WriteFileOutput>(
                self,
                "Write a file",
                "Create or replace a file in the workspace with the given text. Set `expected_sha256` (from read_file) to refuse the write when the file changed since you read it, `create_new` to refuse when it exists.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(false),
            ),
            Tool::EditFile => define::<EditFileArgs, EditFileOutput>(
                self,
                "Edit a file",
                "Replace `old_text` with `new_text` in a file. `old_text` must occur exactly once (or `expected_occurrences` times, or set `replace_all`); otherwise nothing changes and the error says how many were found. Returns a unified diff of the change.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(false)
                    .open_world(false),
            ),
            Tool::ListDirectory => define::<ListDirectoryArgs, ListDirectoryOutput>(
                self,
                "List a directory",
                "List the entries of a directory in the workspace (the root when `path` is empty), optionally recursively. Hidden files are left out unless `include_hidden`.",
                read_only(),
            ),
            Tool::SearchFiles => define::<SearchFilesArgs, SearchFilesOutput>(
                self,
                "Search file contents",
                "Search file contents under a directory for a regular expression (or literal text with `literal`). Returns matching lines with line numbers and optional context lines.",
                read_only(),
            ),
            Tool::FindFiles => define::<FindFilesArgs, FindFilesOutput>(
                self,
                "Find files by name",
                "Find paths under a directory whose workspace-relative path matches any of the glob `patterns` (for example `**/*.rs`).",
                read_only(),
            ),
            Tool::CreateDirectory => define::<CreateDirectoryArgs, CreateDirectoryOutput>(
                self,
                "Create a directory",
                "Create a directory in the workspace; with `parents`, also its missing parents, and an existing directory is not an error.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(false)
                    .idempotent(true)
                    .open_world(false),
            ),
            Tool::StatPath => define::<StatPathArgs, StatPathOutput>(
                self,
                "Stat a path",
                "Describe a path in the workspace: type, size, mode, modification time, and its sha256 with `compute_sha256`.",
                read_only(),
            ),
            Tool::DeletePath => define::<DeletePathArgs, DeletePathOutput>(
                self,
                "Delete a path",
                "Delete a file, a symlink (the link itself, never its target) or an empty directory in the workspace; with `recursive`, a directory and everything beneath it (the policy usually asks a human for that). Protected paths (`.git`, tool configs) are never deleted. Set `missing_ok` to succeed when nothing is there, `expected_sha256` (from read_file) to refuse when the file changed since you read it.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(false),
            ),
            Tool::RunCommand => define::<RunCommandArgs, RunCommandOutput>(
                self,
                "Run a command",
                "Run a bash script in the workspace, sandboxed, and return its exit status, stdout and stderr. Each stream returns its first 48 KiB and last 16 KiB, with a marker naming how many bytes were dropped between them: redirect long output to a file and search it. Commands the policy asks about wait for a human; denied ones do not run. With `background`, the call returns as soon as the command started, with its `run_id`: it goes on (a dev server, a long build) and later calls of this session reach it (for example `curl localhost:3000`); read its output with read_run_output, see it with list_runs, end it with stop_run. With `persist_cwd`, the script starts in this session's working directory and a `cd` (and `export` of allowed variables) carries over to the next `persist_cwd` call.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(false)
                    .open_world(network),
            ),
            Tool::ListRuns => define::<ListRunsArgs, ListRunsOutput>(
                self,
                "List background runs",
                "List the runs of this session that the executor holds (with `all_sessions`, of every session of yours): run id, state (`running`, `exited`, `lost`), pid, command, start and exit, and how many bytes each stream wrote. Runs that ended are included with `include_finished`.",
                read_only(),
            ),
            Tool::ReadRunOutput => define::<ReadRunOutputArgs, ReadRunOutputOutput>(
                self,
                "Read a run's output",
                "Read a background run's stdout or stderr from a byte `offset` (0: the start), whether it still runs or ended. Returns the text, `next_offset` to read on from, and `eof` once the run ended and everything was read. The executor keeps each stream's first bytes up to its cap and its last bytes; a read that reaches a part it did not keep skips to the next kept byte and says how many were skipped.",
                read_only(),
            ),
            Tool::StopRun => define::<StopRunArgs, StopRunOutput>(
                self,
                "Stop a run",
                "Stop a background run: SIGTERM to every process of it, then SIGKILL after the executor's grace period (or SIGKILL at once with `kill`). Stopping a run that already ended returns how it ended.",
                ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .idempotent(true)
                    .open_world(false),
            ),
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every tool's definition, in `tools/list` order (see [`Tool::definition`]).
pub fn definitions(network: bool) -> Vec<Definition> {
    Tool::ALL.map(|t| t.definition(network)).into()
}

fn define<A: JsonSchema + 'static, O: JsonSchema + 'static>(
    tool: Tool,
    title: &str,
    description: &'static str,
    annotations: ToolAnnotations,
) -> Definition {
    let mut t = Definition::new(tool.name(), description, Arc::new(JsonObject::new()))
        .with_title(title)
        .with_input_schema::<A>()
        .with_annotations(annotations.with_title_of(title));
    t.input_schema = Arc::new(portable(&t.input_schema, true));
    t.output_schema = Some(Arc::new(portable(&output_schema::<O>(), false)));
    t
}

/// A tool's output schema: what it returns when it ran, or a [`RefusalOutput`], or a [`FailureOutput`]
/// (`anyOf`, each branch an object). Clients that check `structuredContent` against the
/// schema (the TypeScript SDK does, `isError` or not) then accept every answer, and the
/// refusal's fields reach the agent. The branches' `$defs` move to the root, where their
/// `$ref`s point.
fn output_schema<O: JsonSchema + 'static>() -> JsonObject {
    use rmcp::handler::server::tool::schema_for_output;
    use serde_json::{Value, json};
    let mut defs = serde_json::Map::new();
    let mut branch = |schema: Arc<JsonObject>, title: &str, description: &str| {
        let mut b = schema.as_ref().clone();
        b.remove("$schema");
        if let Some(Value::Object(d)) = b.remove("$defs") {
            defs.extend(d);
        }
        b.insert("title".into(), title.into());
        b.insert("description".into(), description.into());
        Value::Object(b)
    };
    let branches = vec![
        branch(
            schema_for_output::<O>(),
            "Ran",
            "The call ran; what it returned.",
        ),
        branch(
            schema_for_output::<RefusalOutput>(),
            "Refusal",
            "The call did not run: the policy denied it, a human denied it, or it waits for a human's approval. `guidance` says what to do next.",
        ),
        branch(
            schema_for_output::<FailureOutput>(),
            "Failure",
            "The call failed or was refused before any decision: invalid arguments, a path outside the workspace, a missing file, a credential the executor refused, an executor out of reach.",
        ),
    ];
    let mut root = JsonObject::new();
    root.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    root.insert("type".into(), json!("object"));
    root.insert("anyOf".into(), Value::Array(branches));
    if !defs.is_empty() {
        root.insert("$defs".into(), Value::Object(defs));
    }
    root
}

/// The schema in the spelling every client maps: without the Rust integer `format`s
/// (`uint64`, `int32`, ...) schemars adds, which are not JSON Schema formats (`minimum: 0`
/// already says what `uint*` meant), and with one `type` per schema. An optional argument
/// (`type: [X, "null"]`, never `required`) becomes plain `X`: leave it out instead of sending
/// null. A nullable result field becomes `anyOf` X or null.
fn portable(schema: &JsonObject, input: bool) -> JsonObject {
    use serde_json::Value;
    fn strip(v: &mut Value, input: bool) {
        match v {
            Value::Object(m) => {
                if m.get("format")
                    .and_then(Value::as_str)
                    .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"))
                {
                    m.remove("format");
                }
                if let Some(Value::Array(types)) = m.get("type").cloned() {
                    let rest: Vec<Value> = types
                        .into_iter()
                        .filter(|t| t.as_str() != Some("null"))
                        .collect();
                    if let [one] = rest.as_slice() {
                        if input {
                            m.insert("type".into(), one.clone());
                        } else {
                            m.remove("type");
                            m.insert(
                                "anyOf".into(),
                                serde_json::json!([{ "type": one }, { "type": "null" }]),
                            );
                        }
                    }
                }
                m.values_mut().for_each(|v| strip(v, input));
            }
            Value::Array(a) => a.iter_mut().for_each(|v| strip(v, input)),
            _ => {}
        }
    }
    let mut v = Value::Object(schema.clone());
    strip(&mut v, input);
    match v {
        Value::Object(m) => m,
        _ => schema.clone(),
    }
}

trait WithTitle {
    fn with_title_of(self, title: &str) -> Self;
}

impl WithTitle for ToolAnnotations {
    fn with_title_of(mut self, title: &str) -> Self {
        self.title = Some(title.to_owned());
        self
    }
}

// ---------------------------------------------------------------- arguments

/// Arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file, relative to the workspace root.
    pub path: String,
    /// First line to return (1-based); reads lines instead of bytes.
    pub start_line: Option<u64>,
    /// How many lines to return from `start_line` (default: to the end).
    pub line_count: Option<u64>,
    /// Byte offset to start at; ignored when `start_line` is set.
    pub offset: Option<u64>,
    /// How many bytes to return from `offset` (default: to the end).
    pub length: Option<u64>,
    /// Cap on the bytes returned (default 256 KiB; the executor's maximum applies).
    pub max_bytes: Option<u64>,
}

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The complete new content.
    pub content: String,
    /// Write only if the file's current sha256 is this (from read_file's `file_sha256`).
    pub expected_sha256: Option<String>,
    /// Create missing parent directories.
    #[serde(default)]
    pub create_parents: bool,
    /// Fail if the file already exists.
    #[serde(default)]
    pub create_new: bool,
}

/// Arguments of `edit_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The exact text to replace.
    pub old_text: String,
    /// The replacement.
    pub new_text: String,
    /// How many occurrences must be found (default 1, or any number with `replace_all`).
    pub expected_occurrences: Option<u32>,
    /// Edit only if the file's current sha256 is this (from read_file's `file_sha256`).
    pub expected_sha256: Option<String>,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `list_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirectoryArgs {
    /// The directory, relative to the workspace root; empty for the root.
    #[serde(default)]
    pub path: String,
    /// Descend into subdirectories.
    #[serde(default)]
    pub recursive: bool,
    /// With `recursive`: how deep (default: the executor's limit).
    pub max_depth: Option<u32>,
    /// Most entries to return (default: the executor's).
    pub max_entries: Option<u32>,
    /// Include names starting with a dot.
    #[serde(default)]
    pub include_hidden: bool,
}

/// Arguments of `search_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// A regular expression (Rust syntax), or literal text with `literal`.
    pub pattern: String,
    /// Treat `pattern` as literal text.
    #[serde(default)]
    pub literal: bool,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
    /// The directory to search, relative to the workspace root; empty for the root.
    #[serde(default)]
    pub path: String,
    /// Only files whose path matches one of these globs.
    #[serde(default)]
    pub include_globs: Vec<String>,
    /// Skip files whose path matches one of these globs.
    #[serde(default)]
    pub exclude_globs: Vec<String>,
    /// Lines of context before and after each match.
    pub context_lines: Option<u32>,
    /// Skip what `.gitignore` files ignore.
    #[serde(default)]
    pub respect_gitignore: bool,
    /// Search names starting with a dot too.
    #[serde(default)]
    pub include_hidden: bool,
    /// Most matches to return (default: the executor's).
    pub max_results: Option<u32>,
}

/// Arguments of `find_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindFilesArgs {
    /// Globs matched against workspace-relative paths, for example `**/*.rs`.
    pub patterns: Vec<String>,
    /// The directory to search, relative to the workspace root; empty for the root.
    #[serde(default)]
    pub path: String,
    /// Only entries of this type.
    #[serde(rename = "type")]
    pub entry_type: Option<EntryType>,
    /// Include names starting with a dot.
    #[serde(default)]
    pub include_hidden: bool,
    /// Skip what `.gitignore` files ignore.
    #[serde(default)]
    pub respect_gitignore: bool,
    /// Most paths to return (default: the executor's).
    pub max_results: Option<u32>,
}

/// Arguments of `create_directory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDirectoryArgs {
    /// The directory, relative to the workspace root.
    pub path: String,
    /// Create missing parents; an existing directory is then not an error.
    #[serde(default)]
    pub parents: bool,
}

/// Arguments of `stat_path`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatPathArgs {
    /// The path, relative to the workspace root.
    pub path: String,
    /// Also compute the sha256 of a regular file.
    #[serde(default)]
    pub compute_sha256: bool,
}

/// Arguments of `delete_path`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeletePathArgs {
    /// The file, symlink or directory, relative to the workspace root.
    pub path: String,
    /// Delete a directory with everything beneath it; without it a directory must be empty.
    #[serde(default)]
    pub recursive: bool,
    /// Succeed (with `deleted` false) when nothing exists at the path.
    #[serde(default)]
    pub missing_ok: bool,
    /// Refuse unless the file's sha256 (from read_file) is this.
    pub expected_sha256: Option<String>,
}

/// Arguments of `run_command`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCommandArgs {
    /// A bash script, run as `bash --noprofile --norc -c <script>`.
    pub script: String,
    /// Working directory, relative to the workspace root (default: the root).
    #[serde(default)]
    pub cwd: String,
    /// Wall-clock limit in milliseconds (default: the executor's).
    pub timeout_ms: Option<u64>,
    /// Environment variables to add (names the executor allows).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Text fed to the command's standard input (default: none).
    pub stdin: Option<String>,
    /// Start the command in the background and return at once with its `run_id`; read it with
    /// read_run_output, stop it with stop_run.
    #[serde(default)]
    pub background: bool,
    /// Start in this session's working directory (when `cwd` is empty; a relative `cwd` is
    /// resolved from it) and keep the script's final directory and allowed exported variables
    /// for the session's next `persist_cwd` calls.
    #[serde(default)]
    pub persist_cwd: bool,
}

/// Arguments of `list_runs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRunsArgs {
    /// Also runs that ended and are still kept.
    #[serde(default)]
    pub include_finished: bool,
    /// Runs of every session of this credential, not only this session's.
    #[serde(default)]
    pub all_sessions: bool,
}

/// An output stream of a run.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StreamName {
    /// Standard output.
    #[default]
    Stdout,
    /// Standard error.
    Stderr,
}

/// Arguments of `read_run_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadRunOutputArgs {
    /// The run (from run_command's `run_id` or list_runs).
    pub run_id: String,
    /// Which stream (default `stdout`).
    #[serde(default)]
    pub stream: StreamName,
    /// Byte offset to read from (default 0; use the previous read's `next_offset`).
    #[serde(default)]
    pub offset: u64,
    /// Most bytes to return (default 48 KiB, at most 1 MiB).
    pub max_bytes: Option<u64>,
}

/// Arguments of `stop_run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StopRunArgs {
    /// The run.
    pub run_id: String,
    /// SIGKILL at once instead of SIGTERM and a grace period.
    #[serde(default)]
    pub kill: bool,
}

/// A directory entry's type.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryType {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// Anything else (FIFO, socket, device).
    Other,
}

// ---------------------------------------------------------------- results

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadFileOutput {
    /// The path as given.
    pub path: String,
    /// The content read, as UTF-8 (invalid sequences replaced with U+FFFD).
    pub content: String,
    /// Whether the content is exactly the bytes read (false when something was replaced).
    pub exact: bool,
    /// Whether the selected range was cut at `max_bytes`.
    pub truncated: bool,
    /// Size of the whole file in bytes.
    pub total_size: u64,
    /// sha256 of the bytes returned.
    pub content_sha256: String,
    /// sha256 of the whole file (empty above the executor's hash limit); use it as `expected_sha256`.
    pub file_sha256: String,
    /// For a line range: the first line returned, else 0.
    pub start_line: u64,
    /// For a line range: how many lines were returned, else 0.
    pub line_count: u64,
}

/// Result of `write_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteFileOutput {
    /// The path as given.
    pub path: String,
    /// sha256 of the new content.
    pub sha256: String,
    /// Bytes written.
    pub size: u64,
    /// Whether the file was created (false: replaced).
    pub created: bool,
}

/// Result of `edit_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct EditFileOutput {
    /// The path as given.
    pub path: String,
    /// sha256 of the file after the edit.
    pub sha256: String,
    /// How many occurrences were replaced.
    pub occurrences: u32,
    /// The change as a unified diff.
    pub unified_diff: String,
}

/// One directory entry.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Entry {
    /// Path relative to the listed directory.
    pub path: String,
    /// The entry's name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    /// Size in bytes (files).
    pub size: u64,
    /// For symlinks, the target as stored.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub symlink_target: String,
    /// Depth below the listed directory (0 = direct child).
    pub depth: u32,
}

/// Result of `list_directory`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListDirectoryOutput {
    /// The entries.
    pub entries: Vec<Entry>,
    /// Whether more entries exist than were returned.
    pub truncated: bool,
    /// Why it was cut (`max_results`, `max_bytes`, `timeout`), empty when not.
    pub truncation_reason: String,
}

/// One matching line.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Match {
    /// The file, workspace-relative.
    pub path: String,
    /// 1-based line number.
    pub line_number: u64,
    /// The line (cut when very long).
    pub line: String,
    /// Context lines before, as `number: text`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    /// Context lines after, as `number: text`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// Result of `search_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchFilesOutput {
    /// The matches.
    pub matches: Vec<Match>,
    /// Whether the search stopped early.
    pub truncated: bool,
    /// Why it stopped early, empty when it did not.
    pub truncation_reason: String,
    /// Files searched.
    pub files_searched: u64,
    /// Files with at least one match.
    pub files_matched: u64,
}

/// Result of `find_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FindFilesOutput {
    /// Matching paths, workspace-relative.
    pub paths: Vec<String>,
    /// Whether more paths exist than were returned.
    pub truncated: bool,
    /// Why it stopped early, empty when it did not.
    pub truncation_reason: String,
}

/// Result of `create_directory`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateDirectoryOutput {
    /// The path as given.
    pub path: String,
    /// Whether it was created (false: it existed).
    pub created: bool,
}

/// Result of `delete_path`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct DeletePathOutput {
    /// The path as given.
    pub path: String,
    /// Whether something was deleted (false: nothing was there and `missing_ok` was set).
    pub deleted: bool,
    /// What it was, when it existed.
    #[serde(rename = "type")]
    pub entry_type: Option<EntryType>,
    /// Files and symlinks removed.
    pub files_removed: u64,
    /// Directories removed, the deleted one included.
    pub directories_removed: u64,
    /// Bytes of the regular files removed.
    pub bytes_removed: u64,
}

/// Result of `stat_path`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatPathOutput {
    /// The path as given.
    pub path: String,
    /// Its type.
    #[serde(rename = "type")]
    pub entry_type: EntryType,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits, in octal (`644`).
    pub mode: String,
    /// Last modification, RFC 3339.
    pub mtime: String,
    /// Hard links.
    pub nlink: u64,
    /// sha256 when requested for a regular file, else empty.
    pub sha256: String,
    /// For symlinks, the target as stored.
    pub symlink_target: String,
}

/// One output stream of a run.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct StreamOutput {
    /// What the command wrote, as UTF-8 (invalid sequences replaced): everything, or the head,
    /// a marker naming the dropped byte count, and the tail.
    pub text: String,
    /// Bytes the command wrote in total.
    pub total_bytes: u64,
    /// Bytes dropped between head and tail.
    pub dropped_bytes: u64,
    /// Whether the stream exceeded its cap.
    pub truncated: bool,
}

/// Result of `run_command`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct RunCommandOutput {
    /// How it ended: `exited`, `signaled`, `timed_out`, `cancelled` or `spawn_failed`; or
    /// `running` for a command started in the background.
    pub status: String,
    /// The run's id on its executor: read_run_output and stop_run take it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Whether the command goes on in the background after this call.
    pub background: bool,
    /// Its first process's pid, for a command started in the background (0 otherwise).
    #[serde(skip_serializing_if = "is_zero")]
    pub pid: i32,
    /// The working directory it started in, workspace-relative (`.` for the root).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cwd: String,
    /// With `persist_cwd`: the session's working directory and kept variables after the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionStateOutput>,
    /// The exit code when it exited.
    pub exit_code: Option<i32>,
    /// The signal name when it was killed by one, or why it could not start.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Standard output.
    pub stdout: StreamOutput,
    /// Standard error.
    pub stderr: StreamOutput,
    /// Wall-clock time in milliseconds.
    pub wall_time_ms: u64,
    /// The sandbox profile it ran under.
    pub sandbox_profile: String,
    /// CPU time it used (user and system, every process), in milliseconds.
    pub cpu_time_ms: u64,
    /// Peak memory of the whole run in bytes (from its cgroup; else its largest process's
    /// resident set).
    pub peak_memory_bytes: u64,
    /// Whether the kernel's OOM killer killed a process of the run at its memory limit.
    pub oom_killed: bool,
    /// The resource limit the run ran into, when one ended it or made it fail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit_exceeded: Option<LimitExceededOutput>,
    /// The resource limits the run got and what enforced them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<RunLimitsOutput>,
    /// Where a networked run connected through the executor's egress gate, and what was
    /// refused (and why).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<NetworkDestinationOutput>,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// What a session carries from one `persist_cwd` call to the next.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct SessionStateOutput {
    /// The working directory, workspace-relative (`.` for the root).
    pub cwd: String,
    /// Exported variables kept for the session (names the executor allows).
    pub env: BTreeMap<String, String>,
}

/// One run the executor holds.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct RunInfoOutput {
    /// The run's id.
    pub run_id: String,
    /// The session it belongs to.
    pub session_id: String,
    /// `running`, `exited`, or `lost` (its executor stopped before it ended: how it ended is
    /// unknown).
    pub state: String,
    /// Its first process's pid while it runs, 0 after.
    pub pid: i32,
    /// The command, as the policy saw it.
    pub command: String,
    /// The working directory it started in, workspace-relative.
    pub cwd: String,
    /// Whether it was started in the background.
    pub background: bool,
    /// When it started, RFC 3339.
    pub started_at: String,
    /// When it ended, RFC 3339 (empty while it runs).
    pub finished_at: String,
    /// How it ended (`exited`, `signaled`, `timed_out`, `cancelled`, `spawn_failed`), empty
    /// while it runs.
    pub status: String,
    /// The exit code when it exited.
    pub exit_code: Option<i32>,
    /// The signal name when one killed it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Bytes written to stdout so far.
    pub stdout_bytes: u64,
    /// Bytes written to stderr so far.
    pub stderr_bytes: u64,
}

/// Result of `list_runs`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct ListRunsOutput {
    /// The runs, oldest first.
    pub runs: Vec<RunInfoOutput>,
}

/// Result of `read_run_output`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct ReadRunOutputOutput {
    /// The run.
    pub run_id: String,
    /// `stdout` or `stderr`.
    pub stream: StreamName,
    /// The bytes read, as UTF-8 (invalid sequences replaced; a character cut by the read's
    /// end is left for the next read).
    pub text: String,
    /// Whether `text` is exactly the bytes read (false when something was replaced).
    pub exact: bool,
    /// Offset of `text` in the stream.
    pub offset: u64,
    /// Where to read on (pass it as `offset`).
    pub next_offset: u64,
    /// Bytes between the end of `text` and `next_offset` that the executor did not keep.
    pub skipped_bytes: u64,
    /// Bytes the run wrote to the stream so far.
    pub total_bytes: u64,
    /// The run ended and everything was read: nothing more will come.
    pub eof: bool,
    /// The run as it is now.
    pub run: RunInfoOutput,
}

/// Result of `stop_run`.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct StopRunOutput {
    /// The run after the signal was sent: still `running` while SIGTERM's grace period lasts.
    pub run: RunInfoOutput,
}

/// One destination a networked run reached or was refused.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct NetworkDestinationOutput {
    /// The host name the run looked up, or the IP literal it used.
    pub host: String,
    /// The port; 0 for a refused DNS lookup.
    pub port: u32,
    /// `auto`, `ask` or `deny`: how the policy decided it (empty when it did not).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub decision: String,
    /// Connections opened (allowed and refused).
    pub connections: u32,
    /// Connections refused.
    pub refused: u32,
    /// Bytes the run sent.
    pub bytes_sent: u64,
    /// Bytes it received.
    pub bytes_received: u64,
    /// Why connections were refused: `denied`, `approval_denied`, `approval_expired`,
    /// `ip_literal`, `forbidden_address`, `sni_mismatch`, `host_mismatch`, `resolve_failed`,
    /// `connect_failed`, `policy_unavailable`, `query_type`, ...
    #[serde(skip_serializing_if = "String::is_empty")]
    pub refusal: String,
    /// What to do about the refusal, naming the rule or approval.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// The resource limit a run ran into.
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct LimitExceededOutput {
    /// `memory`, `pids` or `cpu_time`.
    pub resource: String,
    /// The limit: bytes, processes or seconds.
    pub limit: u64,
    /// What happened, for the model ("the run exceeded its 256 MiB memory limit and was
    /// killed by the kernel").
    pub message: String,
}

/// The resource limits a run got (0 where nothing bounded a resource).
#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct RunLimitsOutput {
    /// `cgroup-v2`, `cgroup-v1`, `rlimit` (memory not bounded) or `none`.
    pub enforced: String,
    /// Memory of all its processes together, in bytes.
    pub memory_bytes: u64,
    /// Processes at once.
    pub pids: u32,
    /// CPU bandwidth in thousandths of a core.
    pub cpu_millicores: u32,
    /// CPU seconds (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Bytes its private tmpfs mounts may hold together.
    pub tmpfs_bytes: u64,
}

// ---------------------------------------------------------------- refusals and failures

/// What decided a call that did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Decision")]
pub enum RefusalDecision {
    /// The policy (or a human, with `state: denied`) refused it.
    Deny,
    /// A human must approve it (`state` says where the approval stands).
    Ask,
}

/// Where the approval behind a refusal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "ApprovalState")]
pub enum RefusalApproval {
    /// Waiting for a human; the same call runs once it is approved.
    Pending,
    /// A human denied it.
    Denied,
    /// Nobody decided in time.
    Expired,
    /// Withdrawn before it was used.
    Cancelled,
}

/// A call that did not run because of a decision.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RefusalOutput {
    /// `deny` or `ask`.
    pub decision: RefusalDecision,
    /// For a call with an approval: where it stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RefusalApproval>,
    /// Why, as the policy rule or the human put it.
    pub reason: String,
    /// What to do next.
    pub guidance: String,
    /// The policy rule that decided (empty when none is known).
    pub rule_id: String,
    /// The approval to wait for or that was decided (empty for a plain deny).
    pub approval_id: String,
    /// When a pending approval expires, RFC 3339 (empty when none).
    pub expires_at: String,
    /// The ledger's id of this decision (empty when none is known).
    pub decision_id: String,
    /// The agent session approvals are bound to.
    pub session_id: String,
}

/// A call that failed, or was refused before any decision.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FailureOutput {
    /// What went wrong.
    pub error: FailureDetail,
}

/// The error of a call that failed or was refused before any decision.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FailureDetail {
    /// The gRPC status code name (`NOT_FOUND`, `INVALID_ARGUMENT`, `UNAVAILABLE`, ...).
    pub code: String,
    /// toolgate's reason (`PATH_OUTSIDE_WORKSPACE`, `CONFLICT`, ...), empty when none.
    pub reason: String,
    /// What happened and what to do about it.
    pub message: String,
    /// Details that came with it.
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::{Tool, definitions};

    #[test]
    fn every_tool_has_one_name_that_parses_back() {
        let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), Tool::ALL.len(), "{names:?}");
        for tool in Tool::ALL {
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            // Task records store a tool by the same name.
            assert_eq!(serde_json::to_value(tool).unwrap(), tool.name());
            let back: Tool = serde_json::from_value(tool.name().into()).unwrap();
            assert_eq!(back, tool);
        }
        for other in ["", "READ_FILE", "read_file ", "_OTHER", "shell"] {
            assert_eq!(Tool::from_name(other), None, "{other}");
        }
    }

    #[test]
    fn tools_list_follows_the_enum() {
        for network in [false, true] {
            let listed: Vec<String> = definitions(network)
                .into_iter()
                .map(|d| d.name.to_string())
                .collect();
            let names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
            assert_eq!(listed, names);
        }
        let open_world = |network| {
            Tool::RunCommand
                .definition(network)
                .annotations
                .and_then(|a| a.open_world_hint)
        };
        assert_eq!(
            (open_world(false), open_world(true)),
            (Some(false), Some(true))
        );
    }
}
