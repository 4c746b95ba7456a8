//! Domain vocabulary shared by every toolgate crate.
//!
//! Nothing here knows about gRPC: the contracts crate maps [`Reason`] onto a
//! `tonic::Status` with a `google.rpc.ErrorInfo` detail in exactly one place.

use std::fmt;

mod approval;
pub mod backoff;
mod call;
pub mod display;
mod integrity;
mod rfc3339;
pub mod traceparent;

pub use approval::{ApprovalState, UnknownApprovalState};
pub use call::{ExecutorIdentity, SessionState, ToolCall};
pub use integrity::{AuditReport, GitChange, GitChangeKind, IntegrityChange, IntegrityViolation};
pub use rfc3339::rfc3339;

/// What replaces a secret wherever toolgate shows or stores text: stored ledger rows,
/// `--print-config`, URLs in messages and logs, credentials in debug output.
pub const REDACTED: &str = "[REDACTED]";

/// `scheme://user:password@host/db` with the password replaced by [`REDACTED`]; anything
/// else as given.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:{REDACTED}@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// The `google.rpc.ErrorInfo.domain` every toolgate error carries.
pub const ERROR_DOMAIN: &str = "toolgate.dev";

/// The gRPC status codes toolgate uses, without depending on tonic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A request field is malformed.
    InvalidArgument,
    /// Nothing exists where the request points.
    NotFound,
    /// Something exists where the request wanted to create, or the call already ran.
    AlreadyExists,
    /// Refused: by the workspace, the policy or a human.
    PermissionDenied,
    /// A limit is reached (space, concurrency).
    ResourceExhausted,
    /// An offset or range lies outside what exists or is kept.
    OutOfRange,
    /// The system is not in the state the call needs (a pending approval, a mismatch).
    FailedPrecondition,
    /// A concurrent change won (a stale sha256, a call in flight).
    Aborted,
    /// A feature this executor cannot provide.
    Unimplemented,
    /// A failure inside toolgate.
    Internal,
    /// A dependency (the policy service, the ledger) cannot be reached; retryable.
    Unavailable,
    /// The time budget ran out.
    DeadlineExceeded,
    /// No credential, or an unknown one.
    Unauthenticated,
}

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal => $code:ident ),+ $(,)?) => {
        /// The closed list of `ErrorInfo.reason` values.
        ///
        /// Mirrors `toolgate.common.v1.ErrorReason` in `proto/`: the wire string is the
        /// enum value name without its `ERROR_REASON_` prefix.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $( $(#[$doc])* $variant, )+
        }

        impl Reason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant),+];

            /// The string carried in `ErrorInfo.reason`.
            pub const fn as_str(self) -> &'static str {
                match self { $( Reason::$variant => $name, )+ }
            }

            /// The gRPC code this reason is always reported with.
            pub const fn code(self) -> Code {
                match self { $( Reason::$variant => Code::$code, )+ }
            }
        }
    };
}

reasons! {
    /// A request field is malformed or out of its allowed range.
    InvalidRequest = "INVALID_REQUEST" => InvalidArgument,
    /// A path is empty, contains NUL, or is otherwise not a usable path.
    InvalidPath = "INVALID_PATH" => InvalidArgument,
    /// A regex or glob pattern does not compile.
    InvalidPattern = "INVALID_PATTERN" => InvalidArgument,
    /// A policy document is invalid.
    InvalidPolicy = "INVALID_POLICY" => InvalidArgument,
    /// The path resolves outside the workspace root (`..`, absolute, symlink escape).
    PathOutsideWorkspace = "PATH_OUTSIDE_WORKSPACE" => PermissionDenied,
    /// The path matches a configured deny pattern: no access at all.
    PathDenied = "PATH_DENIED" => PermissionDenied,
    /// The path matches a protected pattern: readable, not writable.
    PathProtected = "PATH_PROTECTED" => PermissionDenied,
    /// The operating system refused access to a path inside the workspace.
    AccessDenied = "ACCESS_DENIED" => PermissionDenied,
    /// Nothing exists at the path.
    NotFound = "NOT_FOUND" => NotFound,
    /// Something already exists where the request wanted to create.
    AlreadyExists = "ALREADY_EXISTS" => AlreadyExists,
    /// The path exists but is not a regular file (directory, FIFO, device, socket).
    NotAFile = "NOT_A_FILE" => FailedPrecondition,
    /// The path (or one of its parents) exists but is not a directory.
    NotADirectory = "NOT_A_DIRECTORY" => FailedPrecondition,
    /// Resolving the path met a symlink loop or too many links.
    SymlinkLoop = "SYMLINK_LOOP" => FailedPrecondition,
    /// The file changed: its sha256 differs from `expected_sha256`.
    Conflict = "CONFLICT" => Aborted,
    /// An edit found a different number of occurrences than expected.
    EditMismatch = "EDIT_MISMATCH" => FailedPrecondition,
    /// The content or file exceeds a configured size limit.
    TooLarge = "TOO_LARGE" => FailedPrecondition,
    /// The workspace file system is out of space or quota.
    NoSpace = "NO_SPACE" => ResourceExhausted,
    /// The executor is at its concurrency limit; retry later.
    Busy = "BUSY" => ResourceExhausted,
    /// The policy denied the call; never approvable.
    PolicyDenied = "POLICY_DENIED" => PermissionDenied,
    /// The call needs a human approval; `approval_id` is in the metadata.
    ApprovalRequired = "APPROVAL_REQUIRED" => FailedPrecondition,
    /// A human denied the approval; their message is in the status message.
    ApprovalDenied = "APPROVAL_DENIED" => PermissionDenied,
    /// No approval with that id exists.
    ApprovalNotFound = "APPROVAL_NOT_FOUND" => NotFound,
    /// The approval is not in a state that allows this transition.
    ApprovalNotPending = "APPROVAL_NOT_PENDING" => FailedPrecondition,
    /// The approval expired before it was used.
    ApprovalExpired = "APPROVAL_EXPIRED" => FailedPrecondition,
    /// A call with this `call_id` already ran; its outcome is attached.
    AlreadyExecuted = "ALREADY_EXECUTED" => AlreadyExists,
    /// The outcome for this decision was already recorded differently.
    OutcomeConflict = "OUTCOME_CONFLICT" => AlreadyExists,
    /// No credential, or an unknown one.
    Unauthenticated = "UNAUTHENTICATED" => Unauthenticated,
    /// The credential's role may not call this method or act for that principal.
    RoleNotPermitted = "ROLE_NOT_PERMITTED" => PermissionDenied,
    /// The policy service cannot be reached; the executor fails closed.
    PolicyUnavailable = "POLICY_UNAVAILABLE" => Unavailable,
    /// The ledger database cannot be reached.
    LedgerUnavailable = "LEDGER_UNAVAILABLE" => Unavailable,
    /// The executor cannot provide a requested feature (for example a sandbox profile).
    Unsupported = "UNSUPPORTED" => Unimplemented,
    /// An operation ran out of its time budget.
    Timeout = "TIMEOUT" => DeadlineExceeded,
    /// The run's sandbox profile is unknown to this executor or cannot be enforced on its
    /// kernel; nothing ran, and nothing ever runs under a weaker sandbox instead.
    SandboxUnavailable = "SANDBOX_UNAVAILABLE" => Unimplemented,
    /// The `call_id` was allowed and its lease still runs: the call may be running. Nothing
    /// started again; replaying after the lease tells how it ended.
    CallInFlight = "CALL_IN_FLIGHT" => Aborted,
    /// The `call_id` was allowed but its lease ran out without an outcome: it never runs under
    /// this `call_id` again; retrying needs a new `call_id`.
    OutcomeUnknown = "OUTCOME_UNKNOWN" => AlreadyExists,
    /// A rule learned from this approval would cover more than the call's own verb.
    RuleTooBroad = "RULE_TOO_BROAD" => FailedPrecondition,
    /// A rule learned from this approval would start with a program that runs code given to
    /// it (a shell, an interpreter with inline code, `env`, `xargs`, `sudo`, `find -exec`...).
    RuleBannedPrefix = "RULE_BANNED_PREFIX" => FailedPrecondition,
    /// A rule learned from this approval would turn a policy example or an adversarial case
    /// from ask or deny into auto; the case is in the message and the metadata.
    RuleFlipsCase = "RULE_FLIPS_CASE" => FailedPrecondition,
    /// A part of the call was not fully analysed, so no rule can cover it.
    RuleNotAnalyzed = "RULE_NOT_ANALYZED" => FailedPrecondition,
    /// Nothing can be learned from this call (denied, not a run, already allowed, or what
    /// asks is not something a learned rule may lift); approve it once instead.
    RuleNotLearnable = "RULE_NOT_LEARNABLE" => FailedPrecondition,
    /// No learned rule with that id, or it is already revoked.
    RuleNotFound = "RULE_NOT_FOUND" => NotFound,
    /// An unexpected failure inside toolgate; the message says what failed.
    Internal = "INTERNAL" => Internal,
    /// A directory to remove still has entries and the request was not recursive.
    DirectoryNotEmpty = "DIRECTORY_NOT_EMPTY" => FailedPrecondition,
    /// No run with that id on this executor for this caller (unknown, another principal's, or
    /// past its retention).
    RunNotFound = "RUN_NOT_FOUND" => NotFound,
    /// The run's output at that offset is not retained (between the head cap and the tail
    /// window, or not written yet).
    OutputNotRetained = "OUTPUT_NOT_RETAINED" => OutOfRange,
    /// The session's sandbox lives on another executor, named in the metadata.
    SessionElsewhere = "SESSION_ELSEWHERE" => FailedPrecondition,
    /// The session or principal holds as many background runs as allowed.
    TooManyRuns = "TOO_MANY_RUNS" => ResourceExhausted,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error that knows its place in the closed reason list.
///
/// Domain errors implement this; the gRPC adapter turns it into a status with an
/// `ErrorInfo` whose metadata is [`ReasonedError::metadata`].
pub trait ReasonedError: std::error::Error {
    /// The reason reported to clients.
    fn reason(&self) -> Reason;

    /// Extra machine-readable facts (`path`, `approval_id`, `found`, ...).
    fn metadata(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// The kind of tool call, as policies and the ledger name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolKind {
    /// `fs.read`: read a file.
    FsRead,
    /// `fs.write`: create or replace a file.
    FsWrite,
    /// `fs.edit`: replace text in a file.
    FsEdit,
    /// `fs.list`: list a directory.
    FsList,
    /// `fs.search`: search file contents.
    FsSearch,
    /// `fs.find`: find paths by glob.
    FsFind,
    /// `fs.mkdir`: create a directory.
    FsMkdir,
    /// `fs.stat`: describe a path.
    FsStat,
    /// `fs.delete`: delete a file, a symlink or a directory (a tree when recursive).
    FsDelete,
    /// `process.run`: run a command.
    ProcessRun,
    /// `net.connect`: a TCP connection a running process opens, decided by the egress gate.
    NetConnect,
}

impl ToolKind {
    /// Every tool kind.
    pub const ALL: &'static [ToolKind] = &[
        ToolKind::FsRead,
        ToolKind::FsWrite,
        ToolKind::FsEdit,
        ToolKind::FsList,
        ToolKind::FsSearch,
        ToolKind::FsFind,
        ToolKind::FsMkdir,
        ToolKind::FsStat,
        ToolKind::FsDelete,
        ToolKind::ProcessRun,
        ToolKind::NetConnect,
    ];

    /// The dotted name used in policy documents (`fs.read`, `process.run`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolKind::FsRead => "fs.read",
            ToolKind::FsWrite => "fs.write",
            ToolKind::FsEdit => "fs.edit",
            ToolKind::FsList => "fs.list",
            ToolKind::FsSearch => "fs.search",
            ToolKind::FsFind => "fs.find",
            ToolKind::FsMkdir => "fs.mkdir",
            ToolKind::FsStat => "fs.stat",
            ToolKind::FsDelete => "fs.delete",
            ToolKind::ProcessRun => "process.run",
            ToolKind::NetConnect => "net.connect",
        }
    }

    /// Whether the call can change the workspace.
    pub const fn writes(self) -> bool {
        matches!(
            self,
            ToolKind::FsWrite
                | ToolKind::FsEdit
                | ToolKind::FsMkdir
                | ToolKind::FsDelete
                | ToolKind::ProcessRun
        )
    }
}

impl std::str::FromStr for ToolKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = ToolKind::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown tool kind `{s}`; expected one of {}",
                    known.join(", ")
                )
            })
    }
}

impl fmt::Display for ToolKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy decision tier, ordered so that `max` is "the worst of".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// Runs without a human.
    Auto,
    /// Waits for a human approval.
    Ask,
    /// Refused; never approvable.
    Deny,
}

impl Tier {
    /// The lowercase name used in documents and JSON.
    pub const fn as_str(self) -> &'static str {
        match self {
            Tier::Auto => "auto",
            Tier::Ask => "ask",
            Tier::Deny => "deny",
        }
    }
}

impl std::str::FromStr for Tier {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Tier::Auto),
            "ask" => Ok(Tier::Ask),
            "deny" => Ok(Tier::Deny),
            other => Err(format!(
                "unknown decision `{other}`; expected auto, ask or deny"
            )),
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_strings_are_unique_and_screaming_snake() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.as_str()), "duplicate {r}");
            assert!(
                r.as_str()
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_')
            );
        }
    }

    #[test]
    fn tiers_order_worst_last() {
        assert_eq!(Tier::Auto.max(Tier::Deny).max(Tier::Ask), Tier::Deny);
        assert_eq!(Tier::Auto.max(Tier::Ask), Tier::Ask);
    }

    #[test]
    fn tool_kinds_round_trip() {
        for k in ToolKind::ALL {
            assert_eq!(k.as_str().parse::<ToolKind>().unwrap(), *k);
        }
        assert!("fs.chmod".parse::<ToolKind>().is_err());
    }
}
