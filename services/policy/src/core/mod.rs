//! [`PolicyCore`]: classification plus the ledger, behind both gRPC services and the
//! in-process path of `toolgate up`.
//!
//! Every method takes the authenticated caller and applies the role rules itself, so the
//! tonic adapters and an in-process caller enforce the same thing.

mod api;
mod approvals;
mod authorize;
mod error;
mod learned;
mod sessions;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use toolgate_ledger::{self as ledger, Ledger, SqlLedger};
use toolgate_policy_api::HiddenGlobs;
use toolgate_policy_engine::{CallContext, Policy, ToolCall, Watcher, request_digest};
use toolgate_runtime::auth::{NotPermitted, Principal, Role};
use toolgate_runtime::metrics::{self, PolicyMetrics};
use tracing::Instrument;

pub use api::{
    ApprovalPage, ApprovalView, AuthorizeDecision, CancelRequest, Classification, ClassifyRequest,
    DecideRequest, Decided, ListApprovalsRequest, PolicyDescription, Remember, RulePage,
    RuleProposal, RuleScope, WaitRequest,
};
pub use error::PolicyError;
pub use sessions::{
    ClaimRequest, DEFAULT_CLAIM_TTL, EndRequest, ListSessionsRequest, MAX_CLAIM_TTL, RenewRequest,
    UpdateRequest,
};
pub(crate) use sessions::{claim_ttl, readers, session_state};

use crate::Error;
use crate::config::Config;
use crate::source::PolicySource;

/// Roles that read and decide approvals.
pub(crate) const APPROVERS: &[Role] = &[Role::Approver, Role::Admin];

/// The decision point: the policy in force, the ledger, and the rules for who may do what.
/// Cheap to clone.
#[derive(Clone)]
pub struct PolicyCore {
    inner: Arc<Inner>,
}

/// Scripts longer than this are classified one at a time, and their parse's memory given back.
const HUGE_SCRIPT: usize = 64 << 10;

struct Inner {
    source: PolicySource,
    ledger: Arc<dyn Ledger>,
    loaded_at: SystemTime,
    max_wait: Duration,
    /// How long an allowed call has to report its outcome (runs: after their own timeout).
    lease: Duration,
    metrics: PolicyMetrics,
    /// `db.system` on ledger spans: `postgresql` or `sqlite`.
    db_system: &'static str,
    /// Held while a huge script is classified (see [`PolicyCore::classify_call`]).
    huge: std::sync::Mutex<()>,
    /// The compiled learned rules.
    learned: learned::LearnedCache,
    // Keeps the policy file's reload thread alive as long as the core.
    _watcher: Option<Watcher>,
}

impl std::fmt::Debug for PolicyCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCore")
            .field("source", &self.inner.source)
            .field("max_wait", &self.inner.max_wait)
            .finish_non_exhaustive()
    }
}

impl PolicyCore {
    /// Loads the policy (file or builtin) and opens the ledger from `config.ledger`
    /// (migrating it when needed). Its metrics go to a registry nobody serves; see
    /// [`PolicyCore::open_with`].
    pub async fn open(config: &Config) -> Result<PolicyCore, Error> {
        Self::open_with(config, PolicyMetrics::register(&mut metrics::registry())).await
    }

    /// [`PolicyCore::open`], recording into `metrics` (registered in a registry the caller
    /// serves).
    pub async fn open_with(config: &Config, metrics: PolicyMetrics) -> Result<PolicyCore, Error> {
        let ledger_config = config.ledger.ledger_config().ok_or_else(|| {
            Error::Config("ledger.url: required; set `postgres://…` or `sqlite:path`".into())
        })?;
        let (source, watcher) = crate::policy_source(config)?;
        let db_system = if config
            .ledger
            .url
            .as_deref()
            .is_some_and(|u| u.trim_start().starts_with("sqlite:"))
        {
            "sqlite"
        } else {
            "postgresql"
        };
        let ledger = SqlLedger::connect(ledger_config).await?;
        Ok(PolicyCore {
            inner: Arc::new(Inner {
                source,
                ledger: Arc::new(ledger),
                loaded_at: SystemTime::now(),
                max_wait: config.max_wait(),
                lease: Duration::from_millis(config.ledger.lease_ms),
                metrics,
                db_system,
                huge: std::sync::Mutex::new(()),
                learned: learned::LearnedCache::default(),
                _watcher: watcher,
            }),
        })
    }

    /// The ledger behind this core.
    pub fn ledger(&self) -> Arc<dyn Ledger> {
        self.inner.ledger.clone()
    }

    /// The metrics this core records.
    pub fn metrics(&self) -> &PolicyMetrics {
        &self.inner.metrics
    }

    /// One ledger write (`name` is the span's: `ledger.write`, `ledger.ask`), in a client
    /// span with `db.system`, its latency observed.
    async fn write<T>(
        &self,
        name: &'static str,
        operation: &'static str,
        write: impl Future<Output = Result<T, ledger::Error>>,
    ) -> Result<T, PolicyError> {
        let span = self.ledger_span(name, operation);
        let started = Instant::now();
        let result = write.instrument(span).await;
        self.inner.metrics.ledger_write(started.elapsed());
        result.map_err(|e| {
            let e = PolicyError::Ledger(e);
            // A refusal (a decided approval, a recorded outcome) is an answer; a database
            // that cannot be written is what the ledger-write-errors alert is about.
            if e.is_failure() {
                self.inner.metrics.ledger_write_error();
            }
            e
        })
    }

    /// One ledger read, in a `ledger.read` client span with `db.system`.
    async fn read<T>(
        &self,
        operation: &'static str,
        read: impl Future<Output = Result<T, ledger::Error>>,
    ) -> Result<T, PolicyError> {
        Ok(read
            .instrument(self.ledger_span("ledger.read", operation))
            .await?)
    }

    fn ledger_span(&self, name: &'static str, operation: &'static str) -> tracing::Span {
        tracing::info_span!(
            "ledger",
            otel.name = name,
            otel.kind = "client",
            db.system = self.inner.db_system,
            db.operation = operation,
        )
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.inner.source.current()
    }

    /// Where the policy comes from.
    pub fn source(&self) -> &PolicySource {
        &self.inner.source
    }

    /// When this core loaded its policy source.
    pub fn loaded_at(&self) -> SystemTime {
        self.inner.loaded_at
    }

    /// Classifies without recording (a dry run); any authenticated role. Learned rules apply
    /// as they would in Authorize, so a dry run answers what a call would get.
    pub async fn classify(&self, req: ClassifyRequest) -> Classification {
        let mut call = req.call;
        let policy = self.policy();
        unbind_denied(&policy, &mut call, &req.context);
        let mut decision = self.classify_call(&policy, &call, &req.context);
        if let Some(profile) = &decision.sandbox_profile {
            call.sandbox_profile = Some(profile.clone());
        }
        self.apply_learned(&mut decision, &call, &req.context).await;
        let ctx = &req.context;
        let request_digest =
            request_digest(&call, &ctx.session_id, &ctx.principal, policy.version());
        Classification {
            decision,
            request_digest,
        }
    }

    /// `policy.classify`, with bounded memory for huge scripts: parsing one takes about a
    /// hundred times its size for a moment (eight parallel 500 KiB here-documents took the
    /// service from 16 to 362 MiB, and glibc kept it). Scripts over [`HUGE_SCRIPT`] are
    /// classified one at a time, and what the parse used is handed back to the OS after each.
    pub(crate) fn classify_call(
        &self,
        policy: &Policy,
        call: &ToolCall,
        ctx: &CallContext,
    ) -> toolgate_policy_engine::Decision {
        if call.script.as_ref().is_none_or(|s| s.len() <= HUGE_SCRIPT) {
            return policy.classify(call, ctx);
        }
        let _one = self
            .inner
            .huge
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let decision = policy.classify(call, ctx);
        toolgate_process::release_free_memory();
        decision
    }

    /// Describes the policy in force; any authenticated role.
    pub fn describe(&self) -> PolicyDescription {
        PolicyDescription {
            policy: self.policy(),
            loaded_at: self.inner.loaded_at,
            source: self.inner.source.describe(),
        }
    }
}

/// What an allowed call must not reveal, for the tools that show more than the one path they
/// name: the `paths` of every `deny` rule (without command selectors) that applies to reading
/// (`fs.read`) or to the call's own tool in its context, with the policy's version. `None`
/// for the single-path tools, whose decision already covered their path. `fs.delete` gets them
/// because a recursive deletion reaches every path beneath the one it names.
pub(crate) fn hidden_paths(
    policy: &Policy,
    tool: toolgate_core::ToolKind,
    ctx: &CallContext,
) -> Option<HiddenGlobs> {
    use toolgate_core::ToolKind as K;
    if !matches!(
        tool,
        K::FsList | K::FsSearch | K::FsFind | K::FsDelete | K::ProcessRun
    ) {
        return None;
    }
    let mut globs = policy.denied_path_globs(K::FsRead, ctx);
    for g in policy.denied_path_globs(tool, ctx) {
        if !globs.contains(&g) {
            globs.push(g);
        }
    }
    Some(HiddenGlobs {
        policy_version: policy.version().to_owned(),
        globs,
    })
}

/// Forgets the bound files of `call` that the policy denies reading: the digest of a secret's
/// content must not reach the ledger or an approver. Nothing is lost: a run cannot see such a
/// file (it is hidden in its view), so its content cannot be what runs.
pub(crate) fn unbind_denied(policy: &Policy, call: &mut ToolCall, ctx: &CallContext) {
    if call.bound_files.is_empty() {
        return;
    }
    call.bound_files.retain(|path, _| {
        let read = ToolCall::fs(toolgate_core::ToolKind::FsRead, path.clone());
        policy.classify(&read, ctx).tier != toolgate_core::Tier::Deny
    });
}

/// `ROLE_NOT_PERMITTED` unless the caller's role is one of `roles`.
pub(crate) fn require(caller: &Principal, method: &str, roles: &[Role]) -> Result<(), PolicyError> {
    Ok(NotPermitted::check(caller, method, roles)?)
}

/// Parses an identifier; the error names `field`, as the wire spells it.
pub(crate) fn parse_id<T>(field: &'static str, value: String) -> Result<T, PolicyError>
where
    T: TryFrom<String, Error = ledger::Error>,
{
    T::try_from(value).map_err(|e| match e {
        ledger::Error::Invalid { problem, .. } => {
            PolicyError::invalid(field, format!("{field} {problem}"))
        }
        other => PolicyError::invalid(field, format!("{field}: {other}")),
    })
}

fn internal(e: &dyn std::fmt::Display) -> PolicyError {
    tracing::error!(error = %e, "policy produced a value the ledger refuses");
    PolicyError::Internal(e.to_string())
}

fn text<T: std::fmt::Display>(v: Option<&T>) -> String {
    v.map(ToString::to_string).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_paths_are_the_read_denials_for_tools_that_reveal_more_than_one_path() {
        use toolgate_core::ToolKind as K;
        let policy = Policy::from_toml(
            r#"
default = "ask"

[[rule]]
id = "secrets"
decision = "deny"
reason = "secrets"
paths = ["**/.env", "**/*.pem"]

[[rule]]
id = "no-search-vendor"
decision = "deny"
reason = "too big"
tools = ["fs.search"]
paths = ["vendor/**"]

[[rule]]
id = "no-write-docs"
decision = "deny"
reason = "generated"
tools = ["fs.write"]
paths = ["docs/**"]

[[rule]]
id = "ask-private"
decision = "ask"
reason = "private"
paths = ["private/**"]

[[rule]]
id = "no-curl-in-data"
decision = "deny"
reason = "no downloads here"
commands = ["curl *"]
paths = ["data/**"]

[[rule]]
id = "s9-only"
decision = "deny"
reason = "session s9 may not read audit"
sessions = ["s9"]
paths = ["audit/**"]
"#,
        )
        .unwrap();
        let ctx = |session: &str| CallContext {
            session_id: session.into(),
            principal: "agent-1".into(),
            labels: Default::default(),
        };
        let globs = |tool, session| hidden_paths(&policy, tool, &ctx(session)).map(|h| h.globs);
        let reads = vec!["**/.env".to_owned(), "**/*.pem".to_owned()];
        assert_eq!(globs(K::FsList, "s1"), Some(reads.clone()));
        assert_eq!(globs(K::FsFind, "s1"), Some(reads.clone()));
        assert_eq!(globs(K::ProcessRun, "s1"), Some(reads.clone()));
        assert_eq!(globs(K::FsDelete, "s1"), Some(reads.clone()));
        let mut search = reads.clone();
        search.push("vendor/**".into());
        assert_eq!(globs(K::FsSearch, "s1"), Some(search));
        let mut s9 = reads;
        s9.push("audit/**".into());
        assert_eq!(globs(K::FsList, "s9"), Some(s9));
        for single in [K::FsRead, K::FsWrite, K::FsEdit, K::FsStat, K::FsMkdir] {
            assert_eq!(globs(single, "s1"), None, "{single:?}");
        }
        let h = hidden_paths(&policy, K::FsSearch, &ctx("s1")).unwrap();
        assert_eq!(h.policy_version, policy.version());
    }
}
