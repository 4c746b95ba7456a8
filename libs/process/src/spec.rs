//! What to run: the caller's request and its validated form.

use std::os::fd::OwnedFd;
use std::time::Duration;

use bytes::Bytes;
use toolgate_core::{AuditReport, Reason, ReasonedError};

use crate::config::is_env_name;
use crate::egress::EgressHook;

/// Request validation errors; all are the caller's to fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// argv has no program.
    #[error("argv is empty; give the program as argv[0]")]
    EmptyArgv,
    /// The script is empty or only whitespace.
    #[error("script is empty")]
    EmptyScript,
    /// An argv element contains a NUL byte, which exec cannot pass.
    #[error("argv[{index}] contains a NUL byte")]
    NulInArgv {
        /// Which element.
        index: usize,
    },
    /// The script contains a NUL byte, which bash cannot receive through argv.
    #[error("script contains a NUL byte at offset {offset}")]
    NulInScript {
        /// Byte offset of the first NUL.
        offset: usize,
    },
    /// An environment name does not match `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("environment name `{name}` is invalid; names must match [A-Za-z_][A-Za-z0-9_]*")]
    InvalidEnvName {
        /// The rejected name.
        name: String,
    },
    /// An environment value contains a NUL byte.
    #[error("environment value of `{name}` contains a NUL byte")]
    NulInEnvValue {
        /// The variable.
        name: String,
    },
    /// The same name appears twice.
    #[error("environment name `{name}` is given more than once")]
    DuplicateEnv {
        /// The repeated name.
        name: String,
    },
    /// A zero timeout can never run anything.
    #[error("timeout must be positive; omit it for the executor default")]
    ZeroTimeout,
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        Reason::InvalidRequest
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::NulInArgv { index } => vec![("field", format!("argv[{index}]"))],
            Error::NulInScript { .. } | Error::EmptyScript => vec![("field", "script".to_owned())],
            Error::EmptyArgv => vec![("field", "argv".to_owned())],
            Error::InvalidEnvName { name }
            | Error::NulInEnvValue { name }
            | Error::DuplicateEnv { name } => {
                vec![("field", "env".to_owned()), ("name", name.clone())]
            }
            Error::ZeroTimeout => vec![("field", "timeout".to_owned())],
        }
    }
}

/// The two command forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A program and its arguments, executed directly (no shell); argv\[0\] is looked up on the fixed PATH.
    Argv(Vec<String>),
    /// A script run by exactly `bash --noprofile --norc -c <script>`.
    Script(String),
}

/// An unvalidated run request, as the adapter builds it from the wire.
#[derive(Debug)]
pub struct RunRequest {
    /// What to run.
    pub command: Command,
    /// The working directory, already resolved and confined by the caller; the child `fchdir`s into it.
    pub cwd: OwnedFd,
    /// Environment additions (validated names; the runner's allowlist decides which are accepted).
    pub env: Vec<(String, String)>,
    /// Bytes written to the child's stdin through a pipe; `None` is `/dev/null`.
    pub stdin: Option<Bytes>,
    /// Wall-clock limit; `None` is the configured default.
    pub timeout: Option<Duration>,
    /// Bytes of stdout streamed live; `None` is the configured default.
    pub stdout_cap: Option<u64>,
    /// Bytes of stderr streamed live; `None` is the configured default.
    pub stderr_cap: Option<u64>,
    /// Bytes of each stream's end kept after its cap; `None` is the configured default.
    pub tail_bytes: Option<usize>,
    /// Kill the run as soon as a stream exceeds its cap.
    pub kill_on_cap: bool,
    /// The sandbox profile by name; empty is the executor's default. An unknown name, or one
    /// this kernel cannot enforce, refuses the run.
    pub profile: String,
    /// What the run's view hides or binds read-only in the workspace (the policy's path rules).
    pub masks: crate::sandbox::Masks,
}

impl RunRequest {
    /// A request for `argv` in `cwd` with every option at its default.
    pub fn argv<I, S>(argv: I, cwd: OwnedFd) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(
            Command::Argv(argv.into_iter().map(Into::into).collect()),
            cwd,
        )
    }

    /// A request for a bash script in `cwd` with every option at its default.
    pub fn script(script: impl Into<String>, cwd: OwnedFd) -> Self {
        Self::new(Command::Script(script.into()), cwd)
    }

    fn new(command: Command, cwd: OwnedFd) -> Self {
        RunRequest {
            command,
            cwd,
            env: Vec::new(),
            stdin: None,
            timeout: None,
            stdout_cap: None,
            stderr_cap: None,
            tail_bytes: None,
            kill_on_cap: false,
            profile: String::new(),
            masks: crate::sandbox::Masks::default(),
        }
    }
}

/// A request whose shape is valid; the runner still checks it against its configuration.
#[derive(Debug)]
pub struct RunSpec {
    pub(crate) request: RunRequest,
    /// The W3C trace context the child gets as `TRACEPARENT`.
    pub(crate) trace_parent: Option<String>,
    /// Checked once every process of the run is gone, before `Exited` is sent.
    pub(crate) audit: Option<Audit>,
    /// Directories whose masked, bound or pinned names the host must not replace.
    pub(crate) tripwire: Vec<crate::tripwire::Watch>,
    /// Dropped when the run's supervisor is done, right after the runner's own slot.
    pub(crate) hold: Option<Hold>,
    /// Sampled while the run lives and once after it: a limit it reports stops the run.
    pub(crate) disk_watch: Option<DiskWatch>,
    /// Given the run's gate sockets when its profile is networked.
    pub(crate) egress: Option<Egress>,
    /// The session whose namespaces a confined run shares.
    pub(crate) session: Option<crate::session::SessionNamespaces>,
    /// Whether the run's first process gets fd 3, whose bytes end up in `Exited.state`.
    pub(crate) capture_state: bool,
}

/// A run's egress hook, kept until the runner has the run's gated namespace.
pub(crate) struct Egress(pub(crate) EgressHook);

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Egress")
    }
}

/// What a caller keeps alive exactly as long as the runner holds the run's slot.
pub(crate) struct Hold {
    _guard: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hold")
    }
}

/// A budget check sampled while a run lives (every `interval`, on the blocking pool) and once
/// more after every process of the run is gone: the first limit it reports stops the run at
/// once (`Cancelled(disk_limit)`), and a limit found only after the end is still reported in
/// `Exited.limit`. The executor's check measures what the run added to the workspace.
#[derive(Clone)]
pub struct DiskWatch {
    interval: std::time::Duration,
    check: std::sync::Arc<dyn Fn(bool) -> Option<crate::limits::LimitExceeded> + Send + Sync>,
}

impl DiskWatch {
    /// A watch calling `check` every `interval`; its argument says whether every process of
    /// the run is gone (the last sample, taken only when no limit ended the run before).
    pub fn new(
        interval: std::time::Duration,
        check: impl Fn(bool) -> Option<crate::limits::LimitExceeded> + Send + Sync + 'static,
    ) -> Self {
        DiskWatch {
            interval,
            check: std::sync::Arc::new(check),
        }
    }

    /// How often it samples.
    pub fn interval(&self) -> std::time::Duration {
        self.interval
    }

    /// Samples once on the blocking pool (`ended`: after the run); `None` when under budget
    /// (or the check panicked).
    pub(crate) async fn sample(&self, ended: bool) -> Option<crate::limits::LimitExceeded> {
        let check = self.check.clone();
        tokio::task::spawn_blocking(move || check(ended))
            .await
            .ok()
            .flatten()
    }
}

impl std::fmt::Debug for DiskWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskWatch")
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// The after-run audit of the workspace's protected set: runs on the blocking pool once every
/// process of the run is gone, before its `Exited` event; what it returns is reported there.
pub struct Audit(Box<dyn FnOnce() -> Result<AuditReport, String> + Send>);

impl Audit {
    /// An audit that calls `check`.
    pub fn new(check: impl FnOnce() -> Result<AuditReport, String> + Send + 'static) -> Self {
        Audit(Box::new(check))
    }

    pub(crate) fn run(self) -> Result<AuditReport, String> {
        (self.0)()
    }
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Audit")
    }
}

impl RunSpec {
    /// The command.
    pub fn command(&self) -> &Command {
        &self.request.command
    }

    /// The environment additions.
    pub fn env(&self) -> &[(String, String)] {
        &self.request.env
    }

    /// Keeps `guard` until the run's supervisor is done: its processes reaped, its cgroup
    /// removed, the runner's own slot given back (then `guard` is dropped). A caller's
    /// admission slot held this way is never free while the run still holds resources; a
    /// run that is refused drops it at once.
    pub fn hold_until_done(&mut self, guard: impl Send + 'static) {
        self.hold = Some(Hold {
            _guard: Box::new(guard),
        });
    }

    /// Sets the sandbox profile the run gets (the one its decision names).
    pub fn set_profile(&mut self, profile: &str) {
        profile.clone_into(&mut self.request.profile);
    }

    /// Sets what the run's view hides or binds read-only in the workspace.
    pub fn set_masks(&mut self, masks: crate::sandbox::Masks) {
        self.request.masks = masks;
    }

    /// Has `audit` check the workspace after the run, before its outcome is reported.
    pub fn set_audit(&mut self, audit: Audit) {
        self.audit = Some(audit);
    }

    /// Stops the run when something outside it replaces one of these masked, bound or
    /// pinned names (see [`crate::tripwire`]).
    pub fn set_tripwire(&mut self, watches: Vec<crate::tripwire::Watch>) {
        self.tripwire = watches;
    }

    /// Samples `watch` while the run lives and once after it (see [`DiskWatch`]).
    pub fn set_disk_watch(&mut self, watch: DiskWatch) {
        self.disk_watch = Some(watch);
    }

    /// Runs this run in `session`'s shared namespaces (see [`crate::session`]): a confined run
    /// shares the session's IPC namespace and `/tmp`, and (non-networked profiles) its network
    /// namespace; an unconfined run ignores the session. The session must come from the
    /// runner that runs this spec, or the run is refused.
    pub fn set_session(&mut self, session: crate::session::SessionNamespaces) {
        self.session = Some(session);
    }

    /// Gives the run's first process file descriptor 3, the write end of a pipe no one else
    /// holds: what the run writes there (at most 64 KiB; the rest is read and discarded) is
    /// reported in [`crate::Exited::state`]. A shell wrapper writes its final state there in
    /// an `EXIT` trap. The pipe is read until every writer has closed it, but never past the
    /// run's end: once the run has been reaped (and its output drain period is over), what
    /// is buffered is taken and the rest ignored, so a descendant holding the descriptor
    /// cannot delay the end of the run.
    pub fn capture_state(&mut self) {
        self.capture_state = true;
    }

    /// The sandbox profile asked for; empty is the executor's default.
    pub fn profile(&self) -> &str {
        &self.request.profile
    }

    /// Has the runner call `hook` with the run's [`crate::GateSockets`] when its profile is
    /// networked ([`crate::Runner::networked`]), before the run's program starts; the hook
    /// must serve them (the run's only way out). A networked run without a hook is refused.
    /// Under any other profile the hook is dropped uncalled.
    #[must_use]
    pub fn with_egress(mut self, hook: EgressHook) -> Self {
        self.egress = Some(Egress(hook));
        self
    }

    /// Hands the child a W3C trace context as `TRACEPARENT`, so its own telemetry joins the
    /// call's trace. It is set after the caller's additions and wins over them. A value that
    /// is not `version-traceid-spanid-flags` in lowercase hex is ignored.
    #[must_use]
    pub fn with_trace_parent(mut self, value: &str) -> Self {
        if is_trace_parent(value) {
            self.trace_parent = Some(value.to_owned());
        }
        self
    }
}

/// Whether `v` is a valid W3C `traceparent`.
fn is_trace_parent(v: &str) -> bool {
    toolgate_core::traceparent::TraceParent::parse(v).is_ok()
}

impl TryFrom<RunRequest> for RunSpec {
    type Error = Error;

    fn try_from(request: RunRequest) -> Result<Self, Error> {
        match &request.command {
            Command::Argv(argv) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(Error::EmptyArgv);
                }
                if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
                    return Err(Error::NulInArgv { index });
                }
            }
            Command::Script(script) => {
                if let Some(offset) = script.find('\0') {
                    return Err(Error::NulInScript { offset });
                }
                if script.trim().is_empty() {
                    return Err(Error::EmptyScript);
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (name, value) in &request.env {
            if !is_env_name(name) {
                return Err(Error::InvalidEnvName { name: name.clone() });
            }
            if value.contains('\0') {
                return Err(Error::NulInEnvValue { name: name.clone() });
            }
            if !seen.insert(name.as_str()) {
                return Err(Error::DuplicateEnv { name: name.clone() });
            }
        }
        if request.timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::ZeroTimeout);
        }
        Ok(RunSpec {
            request,
            trace_parent: None,
            audit: None,
            tripwire: Vec::new(),
            hold: None,
            disk_watch: None,
            egress: None,
            session: None,
            capture_state: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cwd() -> OwnedFd {
        std::fs::File::open("/").unwrap().into()
    }

    #[test]
    fn only_well_formed_trace_parents_are_kept() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let spec = RunSpec::try_from(RunRequest::argv(["true"], cwd())).unwrap();
        assert_eq!(spec.with_trace_parent(tp).trace_parent.as_deref(), Some(tp));
        for bad in [
            "",
            "00-abc-def-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "x\n",
        ] {
            let spec = RunSpec::try_from(RunRequest::argv(["true"], cwd())).unwrap();
            assert_eq!(spec.with_trace_parent(bad).trace_parent, None, "{bad:?}");
        }
    }

    #[test]
    fn nul_in_argv_is_invalid_request() {
        let err = RunSpec::try_from(RunRequest::argv(["echo", "a\0b"], cwd())).unwrap_err();
        assert!(matches!(err, Error::NulInArgv { index: 1 }));
        assert_eq!(err.reason(), Reason::InvalidRequest);
        assert_eq!(err.to_string(), "argv[1] contains a NUL byte");
    }

    #[test]
    fn nul_in_script_and_empty_commands_are_rejected() {
        assert!(matches!(
            RunSpec::try_from(RunRequest::script("echo \0", cwd())),
            Err(Error::NulInScript { offset: 5 })
        ));
        assert!(matches!(
            RunSpec::try_from(RunRequest::script("  ", cwd())),
            Err(Error::EmptyScript)
        ));
        assert!(matches!(
            RunSpec::try_from(RunRequest::argv(Vec::<String>::new(), cwd())),
            Err(Error::EmptyArgv)
        ));
    }

    #[test]
    fn env_names_values_and_duplicates_are_checked() {
        let mut req = RunRequest::argv(["env"], cwd());
        req.env = vec![("A-B".into(), "x".into())];
        assert!(matches!(
            RunSpec::try_from(req),
            Err(Error::InvalidEnvName { .. })
        ));
        let mut req = RunRequest::argv(["env"], cwd());
        req.env = vec![("A".into(), "x\0".into())];
        assert!(matches!(
            RunSpec::try_from(req),
            Err(Error::NulInEnvValue { .. })
        ));
        let mut req = RunRequest::argv(["env"], cwd());
        req.env = vec![("A".into(), "1".into()), ("A".into(), "2".into())];
        assert!(matches!(
            RunSpec::try_from(req),
            Err(Error::DuplicateEnv { .. })
        ));
        let mut req = RunRequest::argv(["env"], cwd());
        req.timeout = Some(Duration::ZERO);
        assert!(matches!(RunSpec::try_from(req), Err(Error::ZeroTimeout)));
    }
}
