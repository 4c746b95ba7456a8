//! Executor-side configuration of process runs: limits, defaults and the environment allowlist.

use std::path::PathBuf;
use std::time::Duration;

use toolgate_core::{Reason, ReasonedError};

/// The `PATH` every child gets unless configured otherwise.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The smallest per-namespace `pid_max` the kernel accepts (`RESERVED_PIDS + 1`).
pub const MIN_PID_LIMIT: u32 = 301;

/// Names a caller can never set: the fixed allowlist itself and variables that change how the
/// loader or bash behave before the command runs.
const RESERVED_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "PAGER",
    "GIT_PAGER",
    "GIT_TERMINAL_PROMPT",
    "EDITOR",
    "CI",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    // git's discovery and global configuration are pinned for every run.
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_EXEC_PATH",
];

/// Prefixes a caller can never set (dynamic loader injection, git configuration injection).
const RESERVED_PREFIXES: &[&str] = &["LD_", "GIT_CONFIG_"];

/// Configuration errors, reported once at startup.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A field is out of range or inconsistent with another.
    #[error("invalid process config field `{field}`: {problem}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        Reason::InvalidRequest
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::Invalid { field, .. } => vec![("field", (*field).to_owned())],
        }
    }
}

fn invalid(field: &'static str, problem: impl Into<String>) -> Error {
    Error::Invalid {
        field,
        problem: problem.into(),
    }
}

/// Resource limits applied to every child with `setrlimit` (soft = hard). `RLIMIT_CORE` is always 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rlimits {
    /// Open files (`RLIMIT_NOFILE`).
    pub nofile: Option<u64>,
    /// Largest file the child may write, in bytes (`RLIMIT_FSIZE`).
    pub fsize: Option<u64>,
    /// CPU seconds (`RLIMIT_CPU`).
    pub cpu_seconds: Option<u64>,
    /// Address space in bytes (`RLIMIT_AS`); off by default because runtimes reserve large ranges.
    pub address_space: Option<u64>,
    /// Processes of the child's user (`RLIMIT_NPROC`); the kernel ignores it for root, which is why
    /// the PID namespace also caps `pid_max`.
    pub nproc: Option<u64>,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            nofile: Some(4096),
            fsize: Some(4 << 30),
            cpu_seconds: None,
            address_space: None,
            nproc: Some(4096),
        }
    }
}

impl Rlimits {
    /// The limits by name as `GetCapabilities` reports them (`nofile`, `fsize`, `cpu`, `as`, `core`, `nproc`).
    pub fn view(&self) -> Vec<(&'static str, u64)> {
        let mut out = Vec::new();
        let named = [
            ("nofile", self.nofile),
            ("fsize", self.fsize),
            ("cpu", self.cpu_seconds),
            ("as", self.address_space),
            ("core", Some(0)),
            ("nproc", self.nproc),
        ];
        for (name, value) in named {
            if let Some(v) = value {
                out.push((name, v));
            }
        }
        out
    }
}

/// One allowed environment name: exact, or a prefix when written with a trailing `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name starting with this prefix.
    Prefix(String),
}

impl EnvPattern {
    fn matches(&self, name: &str) -> bool {
        match self {
            EnvPattern::Exact(n) => n == name,
            EnvPattern::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

impl std::fmt::Display for EnvPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EnvPattern::Exact(n) => f.write_str(n),
            EnvPattern::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

impl TryFrom<&str> for EnvPattern {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self, Error> {
        let (body, prefix) = match s.strip_suffix('*') {
            Some(body) => (body, true),
            None => (s, false),
        };
        let valid_body = if prefix {
            !body.is_empty() && is_env_name(&format!("{body}X"))
        } else {
            is_env_name(body)
        };
        if !valid_body {
            return Err(invalid(
                "allowed_env",
                format!("`{s}` is not an environment name or a `PREFIX*` pattern"),
            ));
        }
        Ok(if prefix {
            EnvPattern::Prefix(body.to_owned())
        } else {
            EnvPattern::Exact(body.to_owned())
        })
    }
}

/// Which environment additions callers may make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvAllow {
    /// Any valid name except the reserved ones.
    Any,
    /// Only names matching one of these patterns (and never the reserved ones).
    Only(Vec<EnvPattern>),
}

impl Default for EnvAllow {
    fn default() -> Self {
        let names = [
            "RUST_BACKTRACE",
            "RUST_LOG",
            "CARGO_TERM_COLOR",
            "NO_COLOR",
            "FORCE_COLOR",
            "TZ",
            "LC_ALL",
            "PYTHONUNBUFFERED",
            "PYTHONDONTWRITEBYTECODE",
            "NODE_ENV",
            "DEBUG",
            "VERBOSE",
            "TOOLGATE_*",
        ];
        EnvAllow::Only(
            names
                .iter()
                .map(|n| EnvPattern::try_from(*n).expect("built-in env patterns are valid"))
                .collect(),
        )
    }
}

impl EnvAllow {
    /// Builds an allowlist from `NAME` / `PREFIX*` strings; a lone `*` means any name.
    pub fn from_patterns<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Result<Self, Error> {
        let mut out = Vec::new();
        for p in patterns {
            if p == "*" {
                return Ok(EnvAllow::Any);
            }
            out.push(EnvPattern::try_from(p)?);
        }
        Ok(EnvAllow::Only(out))
    }

    /// Whether a caller may set `name` (already known to be a syntactically valid name).
    pub fn allows(&self, name: &str) -> bool {
        if is_reserved_env(name) {
            return false;
        }
        match self {
            EnvAllow::Any => true,
            EnvAllow::Only(patterns) => patterns.iter().any(|p| p.matches(name)),
        }
    }

    /// The patterns as `GetCapabilities` reports them.
    pub fn patterns(&self) -> Vec<String> {
        match self {
            EnvAllow::Any => vec!["*".to_owned()],
            EnvAllow::Only(p) => p.iter().map(ToString::to_string).collect(),
        }
    }
}

/// Whether `name` is one the executor always controls itself.
pub fn is_reserved_env(name: &str) -> bool {
    RESERVED_NAMES.contains(&name) || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether `name` matches `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || b == b'_' => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// How process runs are limited and isolated.
#[derive(Debug, Clone)]
pub struct Config {
    /// The fixed `PATH` of every child; `bash` and argv programs are looked up on it.
    pub path: String,
    /// Timeout when a request sets none.
    pub default_timeout: Duration,
    /// Largest timeout a request may ask for.
    pub max_timeout: Duration,
    /// Time between SIGTERM and SIGKILL on timeout, cancel or shutdown.
    pub kill_grace: Duration,
    /// After the main child exits, how long output pipes may stay open before the run ends anyway
    /// (only matters when escaped descendants hold them, i.e. without a PID namespace).
    pub drain_after_exit: Duration,
    /// How long the final event may wait for a stalled consumer before it is given up.
    pub final_send_timeout: Duration,
    /// Per-stream cap when a request sets none.
    pub default_cap_bytes: u64,
    /// Largest per-stream cap a request may ask for.
    pub max_cap_bytes: u64,
    /// Tail size when a request sets none.
    pub default_tail_bytes: usize,
    /// Largest tail a request may ask for.
    pub max_tail_bytes: usize,
    /// Runs admitted at once; beyond it `try_run` fails with `Busy`.
    pub max_concurrent_runs: usize,
    /// Events buffered per run before the output reader stops reading (backpressure). With
    /// chunks of at most 256 KiB this bounds what a stalled consumer can pin per run.
    pub event_buffer: usize,
    /// Kernel buffer of each output pipe (`F_SETPIPE_SZ`, best effort); 0 keeps the default 64 KiB.
    pub pipe_buffer_bytes: usize,
    /// Resource limits of every child.
    pub rlimits: Rlimits,
    /// `pid_max` of each run's PID namespace (caps fork bombs even for root); at least 301.
    pub pid_limit: u32,
    /// Environment additions callers may make.
    pub allowed_env: EnvAllow,
    /// Where private `HOME` directories (or, with a tmpfs HOME, the one shared mount point) are
    /// created; `None` is the system temp dir.
    pub home_parent: Option<PathBuf>,
    /// With a PID namespace, each run's `HOME` is a fresh tmpfs of this size mounted in the run's
    /// private mount namespace: nothing to create or delete on disk, invisible to other runs,
    /// gone with the run. 0 (or no mount namespace) uses a per-run directory on disk instead.
    pub home_tmpfs_bytes: u64,
    /// Use a PID namespace (plus a private `/proc`) when the kernel allows; off forces the
    /// process-group fallback.
    pub use_pid_namespace: bool,
    /// Without a PID namespace, put each run in its own cgroup v2 (killed with `cgroup.kill`) when
    /// the executor may create cgroups; off leaves only the process group.
    pub use_cgroup: bool,
    /// Every run's memory, process and CPU limits (a profile may replace each). Enforced by a
    /// per-run cgroup where the host delegates one (and `use_cgroup`); otherwise only the
    /// kernel's fallbacks apply, and `Started.isolation.limits` says which.
    pub limits: crate::limits::ResourceLimits,
    /// Refuse every run when its memory, process and CPU limits cannot be enforced by a cgroup
    /// (fail closed, like `sandbox.require`). Off is an explicit operator choice.
    pub require_limits: bool,
    /// Memory all runs together may use (their parent cgroup's limit, and the admission budget
    /// for the sum of concurrent runs' memory limits and tmpfs sizes). `None`: the executor's
    /// own limit (or the host's memory) minus `executor_reserve_bytes`.
    pub runs_memory_bytes: Option<u64>,
    /// Memory kept for the executor itself below its own limit.
    pub executor_reserve_bytes: u64,
    /// Processes all runs together may have (their parent cgroup's `pids.max`).
    pub runs_pids: u32,
    /// Variables every run gets from the operator (for example `CARGO_HOME`, `RUSTUP_HOME`);
    /// a caller's addition may not replace them.
    pub env: Vec<(String, String)>,
    /// The run sandbox and its profiles.
    pub sandbox: crate::sandbox::SandboxConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            path: DEFAULT_PATH.to_owned(),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(3600),
            kill_grace: Duration::from_secs(2),
            drain_after_exit: Duration::from_millis(500),
            final_send_timeout: Duration::from_secs(30),
            default_cap_bytes: 1 << 20,
            max_cap_bytes: 64 << 20,
            default_tail_bytes: 16 << 10,
            max_tail_bytes: 1 << 20,
            max_concurrent_runs: 64,
            event_buffer: 4,
            pipe_buffer_bytes: 1 << 20,
            rlimits: Rlimits::default(),
            pid_limit: 1024,
            allowed_env: EnvAllow::default(),
            home_parent: None,
            home_tmpfs_bytes: 128 << 20,
            use_pid_namespace: true,
            use_cgroup: true,
            limits: crate::limits::ResourceLimits::default(),
            require_limits: true,
            runs_memory_bytes: None,
            executor_reserve_bytes: 512 << 20,
            runs_pids: 16384,
            env: Vec::new(),
            sandbox: crate::sandbox::SandboxConfig::default(),
        }
    }
}

impl Config {
    /// Checks ranges and consistency; the runner refuses an invalid config.
    pub fn validate(&self) -> Result<(), Error> {
        if self.path.is_empty() || self.path.contains('\0') {
            return Err(invalid("path", "must be a non-empty PATH without NUL"));
        }
        if self.default_timeout.is_zero() {
            return Err(invalid("default_timeout", "must be positive"));
        }
        if self.default_timeout > self.max_timeout {
            return Err(invalid(
                "default_timeout",
                format!(
                    "{:?} exceeds max_timeout {:?}",
                    self.default_timeout, self.max_timeout
                ),
            ));
        }
        if self.default_cap_bytes > self.max_cap_bytes {
            return Err(invalid(
                "default_cap_bytes",
                format!(
                    "{} exceeds max_cap_bytes {}",
                    self.default_cap_bytes, self.max_cap_bytes
                ),
            ));
        }
        if self.default_tail_bytes > self.max_tail_bytes {
            return Err(invalid(
                "default_tail_bytes",
                format!(
                    "{} exceeds max_tail_bytes {}",
                    self.default_tail_bytes, self.max_tail_bytes
                ),
            ));
        }
        let l = &self.limits;
        if l.memory_bytes < 16 << 20 {
            return Err(invalid("limits.memory_bytes", "must be at least 16 MiB"));
        }
        if l.pids < 8 {
            return Err(invalid("limits.pids", "must be at least 8"));
        }
        if l.cpu_millicores < 10 {
            return Err(invalid("limits.cpu_millicores", "must be at least 10"));
        }
        if self.runs_pids < l.pids {
            return Err(invalid(
                "runs_pids",
                format!("{} is below limits.pids {}", self.runs_pids, l.pids),
            ));
        }
        if self.max_concurrent_runs == 0 {
            return Err(invalid("max_concurrent_runs", "must be at least 1"));
        }
        if self.event_buffer == 0 {
            return Err(invalid("event_buffer", "must be at least 1"));
        }
        if let Err(problem) = self.sandbox.validate() {
            return Err(Error::Invalid {
                field: "sandbox",
                problem,
            });
        }
        for (name, value) in &self.env {
            if !is_env_name(name) || value.contains('\0') {
                return Err(invalid(
                    "env",
                    format!("`{name}` is not a valid environment entry"),
                ));
            }
        }
        if self.pid_limit < MIN_PID_LIMIT {
            return Err(invalid(
                "pid_limit",
                format!("must be at least {MIN_PID_LIMIT}, the kernel's minimum pid_max"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_the_shell_grammar() {
        for ok in ["A", "_", "a_1", "PYTHONPATH", "_X9"] {
            assert!(is_env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "É", "A\0"] {
            assert!(!is_env_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn allowlist_matches_exact_and_prefix_but_never_reserved() {
        let allow = EnvAllow::from_patterns(["FOO", "APP_*"]).unwrap();
        assert!(allow.allows("FOO"));
        assert!(allow.allows("APP_MODE"));
        assert!(!allow.allows("FOOBAR"));
        assert!(!allow.allows("BAR"));
        let any = EnvAllow::from_patterns(["*"]).unwrap();
        assert!(any.allows("WHATEVER"));
        for reserved in ["PATH", "HOME", "LD_PRELOAD", "BASH_ENV", "PAGER"] {
            assert!(!any.allows(reserved), "{reserved}");
        }
        assert_eq!(allow.patterns(), vec!["FOO", "APP_*"]);
    }

    #[test]
    fn bad_patterns_and_ranges_are_rejected() {
        assert!(EnvAllow::from_patterns(["1X"]).is_err());
        assert!(EnvAllow::from_patterns(["A-*"]).is_err());
        let cfg = Config {
            pid_limit: 10,
            ..Config::default()
        };
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .contains("pid_limit")
        );
        let cfg = Config {
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(5),
            ..Config::default()
        };
        assert!(cfg.validate().is_err());
        Config::default().validate().unwrap();
    }

    #[test]
    fn rlimit_view_always_reports_core_zero() {
        let view = Rlimits::default().view();
        assert!(view.contains(&("core", 0)));
        assert!(view.contains(&("nofile", 4096)));
    }
}
