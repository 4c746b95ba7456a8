//! Executor configuration: defaults → TOML file → `TOOLGATE_` environment → flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate_runtime::auth::AuthConfig;
use toolgate_runtime::transport::{ClientTlsConfig, TransportConfig};

/// The `[egress]` section lives beside the gate it configures.
pub use crate::egress::EgressSection;

/// The whole executor configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port (the bound address is printed).
    pub listen: String,
    /// Where `GET /metrics` (Prometheus text format) is served, `ip:port`; port 0 picks a
    /// free port (printed as `metrics` on the listening line). Unset: no metrics endpoint.
    pub metrics_listen: Option<String>,
    /// Log settings.
    pub log: LogConfig,
    /// The workspace this executor confines every call to.
    pub workspace: WorkspaceSection,
    /// Filesystem limits.
    pub fs: FsLimits,
    /// Process run limits.
    pub process: ProcessSection,
    /// How long in-flight calls may take to finish after a shutdown signal, in milliseconds.
    pub shutdown_grace_ms: u64,
    /// A stable id for this executor; empty uses the host name and pid.
    pub executor_id: String,
    /// Largest request message accepted (write content, run stdin), in bytes.
    pub max_request_bytes: usize,
    /// The policy service every call is authorized by.
    pub policy: PolicySection,
    /// The agent and admin credentials this executor accepts.
    pub auth: AuthConfig,
    /// Longest a call may wait for a human when its context asks to (`approval_wait`), in
    /// milliseconds; longer requests are clamped to it.
    pub max_approval_wait_ms: u64,
    /// Workspace labels sent with every authorization (policy label selectors match them).
    pub labels: BTreeMap<String, String>,
    /// TLS, mutual TLS and the limits on connections and streams.
    pub transport: TransportConfig,
    /// The egress gate of networked runs.
    pub egress: EgressSection,
    /// Sessions: their shared sandbox, background runs and persisted state.
    pub sessions: SessionsSection,
}

/// Sessions (`[sessions]`): the sandbox a session's runs share, its background runs and the
/// state `persist_cwd` carries, and how long each is kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsSection {
    /// A session with no run in flight and no call for this long is reaped: its background
    /// runs are stopped, its sandbox released and the end recorded in the ledger (seconds).
    pub idle_timeout_s: u64,
    /// How long this executor's claim on a session lasts without renewal (seconds); it renews
    /// every live session's claim three times per period. After an executor dies, its sessions
    /// may be claimed elsewhere once this passes.
    pub claim_ttl_s: u64,
    /// Refuse a run whose session's sandbox is claimed by another live executor
    /// (FAILED_PRECONDITION / SESSION_ELSEWHERE naming it). Off: every executor serves every
    /// session with a sandbox of its own (state still comes from the ledger).
    pub pin: bool,
    /// Background runs one session may hold at once.
    pub max_background_per_session: u32,
    /// Background runs one principal may hold at once, over all its sessions.
    pub max_background_per_principal: u32,
    /// How long a background run that ended stays listed and readable (seconds).
    pub finished_retention_s: u64,
    /// Where background runs' output is spooled; unset: a private, locked directory under
    /// `<temp>/toolgate-spool-<uid>/`, removed when the executor stops (a later start removes
    /// those of executors that were killed). Cleared at start.
    pub spool_dir: Option<PathBuf>,
}

impl Default for SessionsSection {
    fn default() -> Self {
        SessionsSection {
            idle_timeout_s: 1800,
            claim_ttl_s: 30,
            pin: true,
            max_background_per_session: 8,
            max_background_per_principal: 32,
            finished_retention_s: 3600,
            spool_dir: None,
        }
    }
}

/// Longest `sessions.finished_retention_s`: a week.
const MAX_FINISHED_RETENTION_S: u64 = 7 * 24 * 3600;

impl SessionsSection {
    /// Checks the background-run keys (bounds, retention, spool) against `workspace_root`;
    /// the error names the field.
    pub fn validate_background(&self, workspace_root: &std::path::Path) -> Result<(), String> {
        if self.max_background_per_session > self.max_background_per_principal {
            return Err(format!(
                "sessions.max_background_per_session: {} exceeds sessions.max_background_per_principal {}",
                self.max_background_per_session, self.max_background_per_principal
            ));
        }
        if self.finished_retention_s == 0 || self.finished_retention_s > MAX_FINISHED_RETENTION_S {
            return Err(format!(
                "sessions.finished_retention_s: must be between 1 and {MAX_FINISHED_RETENTION_S} (a week); a finished run must stay readable for a while"
            ));
        }
        if let Some(dir) = &self.spool_dir {
            if !dir.is_absolute() {
                return Err(format!(
                    "sessions.spool_dir: `{}` is not absolute",
                    dir.display()
                ));
            }
            // Inside the workspace, the runs' own output would be theirs to read and rewrite.
            let canonical = |p: &std::path::Path| std::fs::canonicalize(p).ok();
            let dir_real = dir.parent().and_then(canonical).map_or_else(
                || dir.clone(),
                |p| p.join(dir.file_name().unwrap_or_default()),
            );
            if let Some(root) = canonical(workspace_root)
                && (dir_real.starts_with(&root) || root.starts_with(&dir_real))
            {
                return Err(format!(
                    "sessions.spool_dir: `{}` overlaps the workspace `{}`; spool outside it",
                    dir.display(),
                    root.display()
                ));
            }
        }
        Ok(())
    }

    /// Checks the keys the session table enforces (idle reaping, claims); the error names
    /// the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.idle_timeout_s == 0 {
            return Err(
                "sessions.idle_timeout_s: must be positive (seconds a session may stay idle before it is reaped)"
                    .into(),
            );
        }
        if self.idle_timeout_s > MAX_SESSION_SECONDS {
            return Err(format!(
                "sessions.idle_timeout_s: at most {MAX_SESSION_SECONDS} (one week)"
            ));
        }
        if self.claim_ttl_s < 3 {
            return Err(
                "sessions.claim_ttl_s: at least 3 (claims are renewed three times per period)"
                    .into(),
            );
        }
        if self.claim_ttl_s > 3600 {
            return Err(
                "sessions.claim_ttl_s: at most 3600 (a dead executor's sessions wait this long for another)"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Longest `sessions.idle_timeout_s`: one week.
const MAX_SESSION_SECONDS: u64 = 7 * 24 * 3600;

/// How the executor reaches the policy service.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicySection {
    /// The policy service URL, for example `http://127.0.0.1:7071` (required); several
    /// replicas as a comma-separated list. Every address each host resolves to (a headless
    /// Service name: one per ready replica) is a backend; calls are balanced over them.
    pub endpoint: String,
    /// This executor's credential (role `executor`); prefer `token_file`.
    pub token: Option<String>,
    /// A file holding this executor's credential, for mounted secrets.
    pub token_file: Option<PathBuf>,
    /// Longest wait for a connection to the policy service, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Longest wait for one Authorize or RecordOutcome answer, in milliseconds.
    pub request_timeout_ms: u64,
    /// How often the endpoint host names are resolved again, in milliseconds.
    pub resolve_interval_ms: u64,
    /// HTTP/2 PING interval on each policy connection, idle or not, in milliseconds.
    pub keepalive_interval_ms: u64,
    /// How long a PING may go unanswered before the connection is dropped, in milliseconds.
    pub keepalive_timeout_ms: u64,
    /// TLS to the policy service (`https://` endpoints): the CA its certificate is verified
    /// against and this executor's client certificate for mutual TLS.
    pub tls: ClientTlsConfig,
}

impl Default for PolicySection {
    fn default() -> Self {
        PolicySection {
            endpoint: String::new(),
            token: None,
            token_file: None,
            connect_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            resolve_interval_ms: 5_000,
            keepalive_interval_ms: 10_000,
            keepalive_timeout_ms: 5_000,
            tls: ClientTlsConfig::default(),
        }
    }
}

impl PolicySection {
    /// The executor's credential, from `token` or `token_file`; the error names the field.
    pub fn credential(&self) -> Result<String, String> {
        let token = match (&self.token, &self.token_file) {
            (Some(t), None) => t.trim().to_owned(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("policy.token_file: {}: {e}", path.display()))?
                .trim()
                .to_owned(),
            (Some(_), Some(_)) => {
                return Err("policy.token / policy.token_file: set only one".into());
            }
            (None, None) => {
                return Err(
                    "policy.token: required (this executor's credential for the policy service; or set policy.token_file)"
                        .into(),
                );
            }
        };
        if token.is_empty() {
            return Err("policy.token: is empty".into());
        }
        toolgate_runtime::auth::bearer(&token).map_err(|e| format!("policy.token: {e}"))?;
        Ok(token)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7070".into(),
            metrics_listen: None,
            log: LogConfig::default(),
            workspace: WorkspaceSection::default(),
            fs: FsLimits::default(),
            process: ProcessSection::default(),
            shutdown_grace_ms: 10_000,
            executor_id: String::new(),
            max_request_bytes: 64 << 20,
            policy: PolicySection::default(),
            auth: AuthConfig::default(),
            max_approval_wait_ms: 15 * 60 * 1000,
            labels: BTreeMap::new(),
            transport: TransportConfig::default(),
            egress: EgressSection::default(),
            sessions: SessionsSection::default(),
        }
    }
}

/// Log settings (`[log]`), shared by both services.
pub use toolgate_runtime::logging::LogConfig;

/// The workspace.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceSection {
    /// The workspace root directory (required).
    pub root: PathBuf,
    /// Absolute prefixes an orchestrator uses for the same root.
    pub aliases: Vec<PathBuf>,
    /// Globs with no access at all.
    pub deny: Vec<String>,
    /// Globs that are readable but not writable.
    pub protected: Vec<String>,
    /// Accept `\` as a plain byte of a name in request paths. Off by default: a backslash is
    /// refused with `INVALID_PATH` (the workspace is a POSIX tree); Windows drive-letter, UNC
    /// and `\\?\` spellings stay refused either way.
    pub allow_backslash_names: bool,
}

impl Default for WorkspaceSection {
    fn default() -> Self {
        WorkspaceSection {
            root: PathBuf::new(),
            aliases: Vec::new(),
            deny: Vec::new(),
            protected: toolgate_fs::DEFAULT_PROTECTED
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            allow_backslash_names: false,
        }
    }
}

/// Filesystem limits (see `toolgate_fs::Limits`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FsLimits {
    /// Largest read cap.
    pub max_read_bytes: u64,
    /// Largest content a write or edit may produce.
    pub max_write_bytes: u64,
    /// Files up to this size get a whole-file sha256.
    pub hash_limit_bytes: u64,
    /// Largest listing entry cap.
    pub max_list_entries: usize,
    /// Largest search result cap.
    pub max_search_results: usize,
    /// Largest search time budget in milliseconds.
    pub max_search_time_ms: u64,
    /// Default search time budget in milliseconds.
    pub default_search_time_ms: u64,
    /// Most entries one recursive `DeletePath` removes; a larger tree is refused whole.
    pub max_delete_entries: usize,
}

impl Default for FsLimits {
    fn default() -> Self {
        let l = toolgate_fs::Limits::default();
        FsLimits {
            max_read_bytes: l.max_read_bytes,
            max_write_bytes: l.max_write_bytes,
            hash_limit_bytes: l.hash_limit,
            max_list_entries: l.max_list_entries,
            max_search_results: l.max_search_results,
            max_search_time_ms: l.max_search_time.as_millis() as u64,
            default_search_time_ms: l.default_search_time.as_millis() as u64,
            max_delete_entries: l.max_delete_entries,
        }
    }
}

/// Process run limits (see `toolgate_process::Config`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessSection {
    /// Timeout when a request sets none, in milliseconds.
    pub default_timeout_ms: u64,
    /// Largest timeout a request may ask for, in milliseconds.
    pub max_timeout_ms: u64,
    /// Grace between SIGTERM and SIGKILL, in milliseconds.
    pub kill_grace_ms: u64,
    /// Per-stream cap when a request sets none.
    pub default_cap_bytes: u64,
    /// Largest per-stream cap.
    pub max_cap_bytes: u64,
    /// Tail kept after a cap when a request sets none.
    pub default_tail_bytes: usize,
    /// Runs admitted at once; beyond it calls fail with RESOURCE_EXHAUSTED / BUSY.
    pub max_concurrent_runs: usize,
    /// Environment names callers may add (`PREFIX_*` allows a prefix, `*` allows any).
    pub allowed_env: Vec<String>,
    /// Use a PID namespace per run when the kernel allows.
    pub pid_namespace: bool,
    /// The sandbox profile a run gets when its request names none. The profile in force is
    /// part of the request digest, so an approval covers exactly one confinement.
    pub sandbox_profile: String,
    /// Refuse every run when the default profile cannot be enforced on this kernel. Off is an
    /// explicit operator choice (runs then go unconfined, as `Started.isolation` reports).
    pub require_sandbox: bool,
    /// Refuse every run when its memory, process and CPU limits cannot be enforced by a
    /// per-run cgroup (no delegated cgroup). Off is an explicit operator choice: runs then get
    /// only the kernel's fallbacks, as `Started.isolation.limits` reports.
    pub require_limits: bool,
    /// Every run's resource limits (a profile may replace each).
    pub limits: LimitsSection,
    /// Memory all runs together may use: the cap of their parent cgroup and the admission
    /// budget for the sum of concurrent runs' memory limits and tmpfs sizes. Unset: the
    /// executor's own memory limit (or the host's memory) minus `executor_reserve_bytes`;
    /// set, it is capped by that too.
    pub runs_memory_bytes: Option<u64>,
    /// Memory kept for the executor itself below its own limit.
    pub executor_reserve_bytes: u64,
    /// Processes all runs together may have.
    pub runs_pids: u32,
    /// Variables every run gets (for example `CARGO_HOME`); callers cannot replace them.
    pub env: std::collections::BTreeMap<String, String>,
    /// Directories prepended to the runs' `PATH` (toolchain `bin` directories).
    pub path_prepend: Vec<PathBuf>,
    /// The run sandbox.
    pub sandbox: SandboxSection,
    /// How run slots and the run memory budget are shared and waited for.
    pub admission: AdmissionSection,
    /// The workspace disk budget of each run.
    pub disk: DiskSection,
}

/// `[process.admission]`: fair shares of run slots and of the run memory budget, and the
/// short queue a run waits in before `BUSY`. Shares are fractions of `max_concurrent_runs`
/// and of the run memory budget alike.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionSection {
    /// Runs that may wait for room at once; a principal may have `principal_share` of them
    /// waiting, a session `session_share`. Beyond it: `BUSY` at once.
    pub queue_length: usize,
    /// Longest a run waits for room before `BUSY`, in milliseconds; 0 refuses at once.
    pub queue_wait_ms: u64,
    /// Most one session may hold once it has a run in progress (its first run is bound by
    /// the budget alone).
    pub session_share: f64,
    /// Most one principal (all its sessions) may hold once it has a run in progress.
    pub principal_share: f64,
    /// Kept for sessions with no run in progress, so a new session starts while others
    /// flood: at least one slot and one default-profile run's reservation; 0 keeps none.
    pub reserve_share: f64,
}

impl Default for AdmissionSection {
    fn default() -> Self {
        AdmissionSection {
            queue_length: 64,
            queue_wait_ms: 2_000,
            session_share: 0.5,
            principal_share: 0.75,
            reserve_share: 0.0625,
        }
    }
}

/// `[process.disk]`: what one run may add to the workspace. The executor measures the
/// workspace (allocated bytes, entries) when the run starts, samples it every
/// `sample_interval_ms` while the run lives and once after it: a run over either budget is
/// stopped (`Cancelled(disk_limit)`, `limit_exceeded` `disk_bytes` / `disk_files`) and the
/// outcome records it. `max_written_bytes` is also every run's `RLIMIT_FSIZE` (when lower than
/// the process default), so one file cannot grow past it between samples. 0 turns a budget off.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskSection {
    /// Bytes (allocated on disk) one run may add to the workspace.
    pub max_written_bytes: u64,
    /// Entries (files, directories, symlinks) one run may add to the workspace.
    pub max_created_files: u64,
    /// How often the workspace is measured while a run lives, in milliseconds.
    pub sample_interval_ms: u64,
}

impl Default for DiskSection {
    fn default() -> Self {
        DiskSection {
            max_written_bytes: 4 << 30,
            max_created_files: 200_000,
            sample_interval_ms: 1_000,
        }
    }
}

impl AdmissionSection {
    /// Checks ranges; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.queue_length > 65_536 {
            return Err("process.admission.queue_length: at most 65536".into());
        }
        if self.queue_wait_ms > 60_000 {
            return Err(
                "process.admission.queue_wait_ms: at most 60000 (a waiting run holds its client's call)"
                    .into(),
            );
        }
        for (name, v) in [
            ("process.admission.session_share", self.session_share),
            ("process.admission.principal_share", self.principal_share),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!("{name}: must be above 0 and at most 1, got {v}"));
            }
        }
        if !(0.0..=0.5).contains(&self.reserve_share) {
            return Err(format!(
                "process.admission.reserve_share: must be between 0 and 0.5, got {}",
                self.reserve_share
            ));
        }
        Ok(())
    }
}

impl DiskSection {
    /// Whether any budget is on.
    pub fn enabled(&self) -> bool {
        self.max_written_bytes > 0 || self.max_created_files > 0
    }
}

/// `[process.limits]`: one run's resources (see `toolgate_process::ResourceLimits`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Memory of all the run's processes together, no swap, in bytes.
    pub memory_bytes: u64,
    /// Processes and threads at once.
    pub pids: u32,
    /// CPU bandwidth in thousandths of a core.
    pub cpu_millicores: u32,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let d = toolgate_process::ResourceLimits::default();
        LimitsSection {
            memory_bytes: d.memory_bytes,
            pids: d.pids,
            cpu_millicores: d.cpu_millicores,
        }
    }
}

/// `[process.sandbox]`: what a run can see (see `toolgate_process::SandboxConfig`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSection {
    /// Profiles by name, added to (or replacing) the shipped `workspace`, `readonly` and
    /// `network`. A profile `none` (unconfined) exists only if defined here.
    pub profiles: std::collections::BTreeMap<String, ProfileSection>,
    /// Toolchain and cache directories visible read-only inside runs (missing ones skipped).
    pub read_only_paths: Vec<PathBuf>,
    /// Host system directories visible read-only.
    pub system_paths: Vec<PathBuf>,
    /// Host files hidden inside the system directories (secrets such as `/etc/shadow`).
    pub hidden_system_paths: Vec<PathBuf>,
    /// Size of each run's private `/tmp`, in bytes.
    pub tmp_bytes: u64,
    /// Files each private tmpfs of a run (`/tmp`, `/dev/shm`, HOME) may hold.
    pub tmpfs_inodes: u64,
    /// The run's `HOME` inside its view (a private tmpfs).
    pub home: PathBuf,
}

impl Default for SandboxSection {
    fn default() -> Self {
        let d = toolgate_process::SandboxConfig::default();
        SandboxSection {
            profiles: std::collections::BTreeMap::new(),
            read_only_paths: d.read_only_paths,
            system_paths: d.system_paths,
            hidden_system_paths: d.hidden_system_paths,
            tmp_bytes: d.tmp_bytes,
            tmpfs_inodes: d.tmpfs_inodes,
            home: d.home,
        }
    }
}

/// One sandbox profile (see `toolgate_process::Profile`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileSection {
    /// No sandbox at all (an explicit operator choice).
    pub unconfined: bool,
    /// Share the host network (egress).
    pub network: bool,
    /// With `network`: the only TCP ports runs may connect to (empty: any).
    pub tcp_connect_ports: Vec<u16>,
    /// The workspace is read-only too.
    pub read_only_workspace: bool,
    /// Replaces `process.limits.memory_bytes` for runs under this profile.
    pub memory_bytes: Option<u64>,
    /// Replaces `process.limits.pids`.
    pub pids: Option<u32>,
    /// Replaces `process.limits.cpu_millicores`.
    pub cpu_millicores: Option<u32>,
    /// A lower timeout ceiling than `process.max_timeout_ms` for runs under this profile.
    pub max_timeout_ms: Option<u64>,
}

impl Default for ProcessSection {
    fn default() -> Self {
        let p = toolgate_process::Config::default();
        ProcessSection {
            default_timeout_ms: p.default_timeout.as_millis() as u64,
            max_timeout_ms: p.max_timeout.as_millis() as u64,
            kill_grace_ms: p.kill_grace.as_millis() as u64,
            default_cap_bytes: p.default_cap_bytes,
            max_cap_bytes: p.max_cap_bytes,
            default_tail_bytes: p.default_tail_bytes,
            max_concurrent_runs: p.max_concurrent_runs,
            allowed_env: p.allowed_env.patterns(),
            pid_namespace: p.use_pid_namespace,
            sandbox_profile: toolgate_process::DEFAULT_PROFILE.into(),
            require_sandbox: true,
            require_limits: p.require_limits,
            limits: LimitsSection::default(),
            runs_memory_bytes: p.runs_memory_bytes,
            executor_reserve_bytes: p.executor_reserve_bytes,
            runs_pids: p.runs_pids,
            env: std::collections::BTreeMap::new(),
            path_prepend: Vec::new(),
            sandbox: SandboxSection::default(),
            admission: AdmissionSection::default(),
            disk: DiskSection::default(),
        }
    }
}

impl Config {
    /// The process crate's view of this configuration.
    pub fn process_config(&self) -> Result<toolgate_process::Config, String> {
        let s = &self.process;
        let mut c = toolgate_process::Config {
            default_timeout: Duration::from_millis(s.default_timeout_ms),
            max_timeout: Duration::from_millis(s.max_timeout_ms),
            kill_grace: Duration::from_millis(s.kill_grace_ms),
            default_cap_bytes: s.default_cap_bytes,
            max_cap_bytes: s.max_cap_bytes,
            default_tail_bytes: s.default_tail_bytes,
            max_concurrent_runs: s.max_concurrent_runs,
            use_pid_namespace: s.pid_namespace,
            require_limits: s.require_limits,
            limits: toolgate_process::ResourceLimits {
                memory_bytes: s.limits.memory_bytes,
                pids: s.limits.pids,
                cpu_millicores: s.limits.cpu_millicores,
            },
            runs_memory_bytes: s.runs_memory_bytes,
            executor_reserve_bytes: s.executor_reserve_bytes,
            runs_pids: s.runs_pids,
            env: s.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            ..toolgate_process::Config::default()
        };
        if !s.path_prepend.is_empty() {
            let mut path: Vec<String> = s
                .path_prepend
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            path.push(c.path.clone());
            c.path = path.join(":");
        }
        let mut profiles = c.sandbox.profiles.clone();
        for (name, p) in &s.sandbox.profiles {
            profiles.insert(
                name.clone(),
                toolgate_process::Profile {
                    unconfined: p.unconfined,
                    network: p.network,
                    tcp_connect_ports: p.tcp_connect_ports.clone(),
                    read_only_workspace: p.read_only_workspace,
                    limits: toolgate_process::ProfileLimits {
                        memory_bytes: p.memory_bytes,
                        pids: p.pids,
                        cpu_millicores: p.cpu_millicores,
                        max_timeout: p.max_timeout_ms.map(Duration::from_millis),
                    },
                },
            );
        }
        c.sandbox = toolgate_process::SandboxConfig {
            require: s.require_sandbox,
            default_profile: s.sandbox_profile.clone(),
            profiles,
            workspace: std::fs::canonicalize(&self.workspace.root).ok(),
            system_paths: s.sandbox.system_paths.clone(),
            hidden_system_paths: s.sandbox.hidden_system_paths.clone(),
            read_only_paths: s.sandbox.read_only_paths.clone(),
            home: s.sandbox.home.clone(),
            tmp_bytes: s.sandbox.tmp_bytes,
            tmpfs_inodes: s.sandbox.tmpfs_inodes,
            ..c.sandbox
        };
        if s.disk.max_written_bytes > 0 {
            // No single file may outgrow the whole budget between two samples.
            c.rlimits.fsize = Some(c.rlimits.fsize.map_or(s.disk.max_written_bytes, |f| {
                f.min(s.disk.max_written_bytes)
            }));
        }
        if s.disk.enabled() && s.disk.sample_interval_ms == 0 {
            return Err("process.disk.sample_interval_ms: must be positive".into());
        }
        c.allowed_env =
            toolgate_process::EnvAllow::from_patterns(s.allowed_env.iter().map(String::as_str))
                .map_err(|e| format!("process.allowed_env: {e}"))?;
        c.validate().map_err(|e| format!("process: {e}"))?;
        if let Some(budget) = s.runs_memory_bytes {
            // The default profile's runs must fit, or no run could ever start.
            let default_run = c.limits.memory_bytes
                + c.sandbox.tmp_bytes
                + c.sandbox.shm_bytes
                + c.home_tmpfs_bytes;
            if budget < default_run {
                return Err(format!(
                    "process.runs_memory_bytes: {budget} is below what one run reserves ({default_run}: process.limits.memory_bytes plus its tmpfs sizes); no run could start"
                ));
            }
        }
        s.admission.validate()?;
        Ok(c)
    }

    /// Checks every rule, `[policy]` included, once at startup; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_embedded()?;
        self.validate_policy()
    }

    /// Checks every rule except the `[policy]` section, for an executor whose authorizer
    /// runs in the same process (`toolgate up`).
    pub fn validate_embedded(&self) -> Result<(), String> {
        if self.workspace.root.as_os_str().is_empty() {
            return Err("workspace.root: required (pass --workspace DIR)".into());
        }
        if !self.workspace.root.is_dir() {
            return Err(format!(
                "workspace.root: {} is not a directory",
                self.workspace.root.display()
            ));
        }
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!(
                "listen: `{}` is not an ip:port address",
                self.listen
            ));
        }
        if let Some(m) = &self.metrics_listen {
            let addr = m
                .parse::<std::net::SocketAddr>()
                .map_err(|_| format!("metrics_listen: `{m}` is not an ip:port address"))?;
            if addr.port() != 0 && self.listen.parse::<std::net::SocketAddr>().ok() == Some(addr) {
                return Err(format!(
                    "metrics_listen: `{m}` is the gRPC listen address; pick another port"
                ));
            }
        }
        for a in &self.workspace.aliases {
            if !a.is_absolute() {
                return Err(format!(
                    "workspace.aliases: `{}` is not absolute",
                    a.display()
                ));
            }
        }
        if self.fs.max_read_bytes == 0 || self.fs.max_write_bytes == 0 {
            return Err("fs.max_read_bytes / fs.max_write_bytes: must be positive".into());
        }
        if self.fs.max_delete_entries == 0 {
            return Err("fs.max_delete_entries: must be positive".into());
        }
        if self.fs.default_search_time_ms > self.fs.max_search_time_ms {
            return Err("fs.default_search_time_ms: exceeds fs.max_search_time_ms".into());
        }
        self.process_config()?;
        if self.process.sandbox_profile.is_empty() {
            return Err("process.sandbox_profile: must not be empty".into());
        }
        toolgate_runtime::auth::Authenticator::from_config(&self.auth)
            .map_err(|e| e.to_string())?;
        crate::egress::Settings::from_config(&self.egress)?;
        self.sessions.validate()?;
        self.sessions.validate_background(&self.workspace.root)?;
        Ok(())
    }

    /// Checks the `[policy]` section: endpoint, credential and timeouts.
    pub fn validate_policy(&self) -> Result<(), String> {
        let p = &self.policy;
        crate::authz::balance::parse(&p.endpoint)?;
        for (name, v) in [
            ("policy.connect_timeout_ms", p.connect_timeout_ms),
            ("policy.request_timeout_ms", p.request_timeout_ms),
            ("policy.resolve_interval_ms", p.resolve_interval_ms),
            ("policy.keepalive_interval_ms", p.keepalive_interval_ms),
            ("policy.keepalive_timeout_ms", p.keepalive_timeout_ms),
        ] {
            if v == 0 {
                return Err(format!("{name}: must be positive"));
            }
        }
        p.credential()?;
        Ok(())
    }

    /// The filesystem crate's view of this configuration.
    pub fn workspace_config(&self) -> toolgate_fs::WorkspaceConfig {
        let mut c = toolgate_fs::WorkspaceConfig::new(self.workspace.root.clone());
        c.aliases.clone_from(&self.workspace.aliases);
        c.deny.clone_from(&self.workspace.deny);
        c.protected.clone_from(&self.workspace.protected);
        c.allow_backslash_names = self.workspace.allow_backslash_names;
        let l = &mut c.limits;
        l.max_read_bytes = self.fs.max_read_bytes;
        l.max_write_bytes = self.fs.max_write_bytes;
        l.hash_limit = self.fs.hash_limit_bytes;
        l.max_delete_entries = self.fs.max_delete_entries;
        l.max_list_entries = self.fs.max_list_entries;
        l.default_list_entries = l.default_list_entries.min(l.max_list_entries);
        l.max_search_results = self.fs.max_search_results;
        l.default_search_results = l.default_search_results.min(l.max_search_results);
        l.max_search_time = Duration::from_millis(self.fs.max_search_time_ms);
        l.default_search_time = Duration::from_millis(self.fs.default_search_time_ms);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(metrics_listen: Option<&str>) -> Config {
        let mut c = Config::default();
        c.workspace.root = PathBuf::from("/");
        c.listen = "127.0.0.1:7070".into();
        c.metrics_listen = metrics_listen.map(str::to_owned);
        c.auth.tokens.push(toolgate_runtime::auth::TokenEntry {
            principal: "agent-1".into(),
            role: toolgate_runtime::auth::Role::Agent,
            token: Some(toolgate_runtime::auth::generate_token()),
            token_file: None,
        });
        c
    }

    #[test]
    fn admission_settings_are_validated_with_the_field_named() {
        let mut c = config(None);
        c.process.admission.session_share = 0.0;
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("process.admission.session_share"), "{err}");
        let mut c = config(None);
        c.process.admission.principal_share = 1.5;
        assert!(c.validate_embedded().is_err());
        let mut c = config(None);
        c.process.admission.reserve_share = 0.6;
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("process.admission.reserve_share"), "{err}");
        let mut c = config(None);
        c.process.admission.queue_wait_ms = 600_000;
        assert!(c.validate_embedded().is_err());
        // A budget below one default run: no run could ever start.
        let mut c = config(None);
        c.process.runs_memory_bytes = Some(1 << 30);
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("process.runs_memory_bytes"), "{err}");
        c.process.limits.memory_bytes = 128 << 20;
        assert_eq!(c.validate_embedded(), Ok(()));
    }

    #[test]
    fn session_keys_are_validated_with_the_field_named() {
        assert_eq!(config(None).validate_embedded(), Ok(()));
        let mut c = config(None);
        c.sessions.idle_timeout_s = 0;
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("sessions.idle_timeout_s"), "{err}");
        let mut c = config(None);
        c.sessions.claim_ttl_s = 1;
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("sessions.claim_ttl_s"), "{err}");
        c.sessions.claim_ttl_s = 86_400;
        assert!(c.validate_embedded().is_err());
    }

    #[test]
    fn background_run_keys_are_validated_with_the_field_named() {
        let mut c = config(None);
        c.sessions.max_background_per_session = 40;
        let err = c.validate_embedded().unwrap_err();
        assert!(
            err.starts_with("sessions.max_background_per_session"),
            "{err}"
        );
        let mut c = config(None);
        c.sessions.finished_retention_s = 0;
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("sessions.finished_retention_s"), "{err}");
        let mut c = config(None);
        c.sessions.spool_dir = Some(PathBuf::from("relative/spool"));
        let err = c.validate_embedded().unwrap_err();
        assert!(err.starts_with("sessions.spool_dir"), "{err}");
        // The test workspace is `/`: every directory overlaps it.
        let mut c = config(None);
        c.sessions.spool_dir = Some(PathBuf::from("/var/spool/toolgate"));
        let err = c.validate_embedded().unwrap_err();
        assert!(err.contains("overlaps the workspace"), "{err}");
    }

    #[test]
    fn metrics_listen_is_optional_and_validated() {
        assert_eq!(config(None).validate_embedded(), Ok(()));
        assert_eq!(config(Some("0.0.0.0:9464")).validate_embedded(), Ok(()));
        assert_eq!(config(Some("127.0.0.1:0")).validate_embedded(), Ok(()));
        let err = config(Some("localhost")).validate_embedded().unwrap_err();
        assert!(err.starts_with("metrics_listen:"), "{err}");
        let err = config(Some("127.0.0.1:7070"))
            .validate_embedded()
            .unwrap_err();
        assert!(err.contains("gRPC listen address"), "{err}");
    }
}
