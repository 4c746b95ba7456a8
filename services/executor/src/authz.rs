//! Authorization: the executor asks the policy service before every call.
//!
//! [`Authorizer`] (the policy protocol's trait, `toolgate_policy_api`) is the policy service
//! as the executor sees it; [`GrpcAuthorizer`] reaches it over gRPC with the executor's own
//! credential and fails closed, and `toolgate up` answers it in process. `Gate` turns its answers
//! into either an [`Authorized`] proof or the status the client gets (denied, approval
//! required, already executed), waiting for a human when the call context asks to.
//!
//! [`Authorized`] can only be built in this module, from an `allowed` answer, and every
//! operation the executor performs (a filesystem call, a process run) takes one as a
//! parameter, so no code path can run anything without a decision for it.

pub(crate) mod balance;
mod gate;
mod grpc;
mod report;

use std::sync::{Arc, Mutex};

use toolgate_core::{Reason, ReasonedError};
use toolgate_fs::HiddenPaths;
#[cfg(doc)]
use toolgate_policy_api::Authorizer;
use toolgate_policy_api::HiddenGlobs;

pub(crate) use gate::{Call, Checked, Gate, Refused};
pub use grpc::{GrpcAuthorizer, GrpcSessions};
pub(crate) use report::{
    Finished, Ran, Reporter, destination, fs_outcome, not_started, output_stats,
};

/// Proof that the policy service allowed one call. Only this module can make one, and only
/// from an `allowed` answer; the operations require it.
#[derive(Debug)]
pub struct Authorized {
    decision_id: String,
    approval_id: String,
    rule_id: String,
    hidden: Hidden,
    sandbox_profile: String,
    denied_hosts: Vec<String>,
}

/// The decision behind a call that ran, as the caller sees it: filesystem responses carry
/// it in their headers, a run in its `Started` event.
#[derive(Debug, Clone)]
pub(crate) struct Receipt {
    /// `auto`, or `ask` for a call a human approved.
    pub tier: &'static str,
    /// The recorded decision.
    pub decision_id: String,
    /// The approval consumed, empty for `auto`.
    pub approval_id: String,
    /// The deciding rule.
    pub rule_id: String,
}

impl Receipt {
    /// The receipt of `proof`.
    pub(crate) fn of(proof: &Authorized) -> Self {
        Receipt {
            tier: proof.tier(),
            decision_id: proof.decision_id().to_owned(),
            approval_id: proof.approval_id().to_owned(),
            rule_id: proof.rule_id().to_owned(),
        }
    }
}

/// The answer's `hidden` paths, compiled once per distinct rule set.
#[derive(Debug)]
enum Hidden {
    /// The answer carried none (a single-path tool, or a policy service older than this
    /// executor).
    Absent,
    /// The answer carried globs this executor cannot use; why.
    Unusable(String),
    /// Compiled, with the policy version they come from.
    Set(Arc<HiddenPaths>),
}

impl Authorized {
    /// Built from an `allowed` answer, nothing else. `decided_by` is the policy version of
    /// the answer's explanation, which the hidden paths must come from too.
    fn from_allowed(
        decision_id: String,
        approval_id: String,
        hidden: Option<HiddenGlobs>,
        sandbox_profile: String,
        decided_by: Option<&str>,
        rule_id: String,
        denied_hosts: Vec<String>,
    ) -> Self {
        let hidden = match hidden {
            None => Hidden::Absent,
            Some(h) => match decided_by.filter(|v| !v.is_empty()) {
                Some(v) if v != h.policy_version => Hidden::Unusable(format!(
                    "the hidden paths come from policy version {} but the decision from {v}",
                    h.policy_version
                )),
                _ => match compile_hidden(h) {
                    Ok(set) => Hidden::Set(set),
                    Err(why) => Hidden::Unusable(why),
                },
            },
        };
        Authorized {
            decision_id,
            approval_id,
            rule_id,
            hidden,
            sandbox_profile,
            denied_hosts,
        }
    }

    /// The recorded decision the outcome is reported against.
    pub fn decision_id(&self) -> &str {
        &self.decision_id
    }

    /// The approval this call consumed, empty when none was needed.
    pub fn approval_id(&self) -> &str {
        &self.approval_id
    }

    /// The rule that decided (`default` when none matched; empty from a policy service
    /// that sent no explanation).
    pub fn rule_id(&self) -> &str {
        &self.rule_id
    }

    /// `auto`, or `ask` when a human approved the call.
    pub fn tier(&self) -> &'static str {
        if self.approval_id.is_empty() {
            "auto"
        } else {
            "ask"
        }
    }

    /// For a run: the sandbox profile it was decided (and approved) under, which it must run
    /// under; empty when the answer named none (the request's profile stands).
    pub fn sandbox_profile(&self) -> &str {
        &self.sandbox_profile
    }

    /// For a run under a networked profile: the host globs (`example.com`, `*.example.com`,
    /// `*`; lowercase, no trailing dot) the policy's network rules deny on every port in
    /// this call's context, exactly as the `allowed` answer carried them. The run's egress
    /// gate answers these names as nonexistent; every connection is still decided by its
    /// own `net.connect`. Empty for other calls.
    pub fn denied_hosts(&self) -> &[String] {
        &self.denied_hosts
    }

    /// What this call must never reveal: the paths whose read the policy denies, exactly as
    /// the policy's `allowed` answer for this call carried them, compiled, with the policy
    /// version they come from ([`HiddenPaths::version`], the version the ledger recorded
    /// with the decision). Treat them like `workspace.deny` globs on top of the workspace's
    /// own: a listing, search or find passes them to `toolgate_fs` (`list_hiding`,
    /// `search_hiding`, `find_hiding`); a run hides every path [`HiddenPaths::hides`].
    ///
    /// The policy sends them for `fs.list`, `fs.search`, `fs.find` and `process.run`. When
    /// the answer carried none (an older policy service) or unusable ones, this is a
    /// `POLICY_UNAVAILABLE` status: the caller must refuse rather than act on rules it does
    /// not know.
    pub fn hidden_globs(&self) -> Result<&Arc<HiddenPaths>, HiddenUnknown> {
        match &self.hidden {
            Hidden::Set(h) => Ok(h),
            Hidden::Absent => Err(HiddenUnknown::Absent {
                decision_id: self.decision_id.clone(),
            }),
            Hidden::Unusable(why) => Err(HiddenUnknown::Unusable {
                decision_id: self.decision_id.clone(),
                why: why.clone(),
            }),
        }
    }
}

/// Why an `allowed` answer does not say which paths its rules hide: the call must be
/// refused rather than act on rules the executor does not know (`POLICY_UNAVAILABLE`).
#[derive(Debug, thiserror::Error)]
pub enum HiddenUnknown {
    /// The answer carried none.
    #[error(
        "the policy service's answer did not say which paths its rules hide (a policy service older than this executor?); nothing was run"
    )]
    Absent {
        /// The decision the answer recorded.
        decision_id: String,
    },
    /// The answer carried globs that do not compile.
    #[error("the policy service's hidden paths are unusable: {why}; nothing was run")]
    Unusable {
        /// The decision the answer recorded.
        decision_id: String,
        /// Why they do not compile.
        why: String,
    },
}

impl ReasonedError for HiddenUnknown {
    fn reason(&self) -> Reason {
        Reason::PolicyUnavailable
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            HiddenUnknown::Absent { decision_id } | HiddenUnknown::Unusable { decision_id, .. } => {
                vec![("decision_id", decision_id.clone())]
            }
        }
    }
}

/// Recently compiled rule sets, newest first: a policy's globs change only with its version,
/// so compiling them once per version is enough. Entries match on version and globs both.
static COMPILED: Mutex<Vec<Arc<HiddenPaths>>> = Mutex::new(Vec::new());
/// Distinct rule sets kept compiled.
const COMPILED_KEEP: usize = 8;

fn compile_hidden(h: HiddenGlobs) -> Result<Arc<HiddenPaths>, String> {
    let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = cache
        .iter()
        .position(|c| c.version() == h.policy_version && c.patterns() == h.globs.as_slice())
    {
        let hit = cache.remove(i);
        cache.insert(0, hit.clone());
        return Ok(hit);
    }
    let compiled =
        Arc::new(HiddenPaths::new(h.policy_version, h.globs).map_err(|e| e.to_string())?);
    cache.insert(0, compiled.clone());
    cache.truncate(COMPILED_KEEP);
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_contracts::status;

    fn allowed(hidden: Option<(&str, &[&str])>) -> Option<HiddenGlobs> {
        hidden.map(|(v, g)| HiddenGlobs {
            policy_version: v.into(),
            globs: g.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    impl Authorized {
        fn from_allowed_hidden(
            hidden: Option<HiddenGlobs>,
            decided_by: Option<&str>,
            rule_id: String,
        ) -> Self {
            Authorized::from_allowed(
                "dec_1".into(),
                String::new(),
                hidden,
                String::new(),
                decided_by,
                rule_id,
                Vec::new(),
            )
        }
    }

    fn refusal(a: &Authorized) -> (String, String) {
        let s = status::from_error(&a.hidden_globs().unwrap_err());
        let (reason, _) = status::error_info(&s).unwrap();
        (reason, s.message().to_owned())
    }

    #[test]
    fn hidden_globs_come_compiled_with_their_version() {
        let a = Authorized::from_allowed_hidden(
            allowed(Some(("v1", &["**/.env"]))),
            Some("v1"),
            String::new(),
        );
        let h = a.hidden_globs().unwrap();
        assert_eq!(h.version(), "v1");
        assert!(h.hides(std::path::Path::new("a/.env")));
        // The same rule set is compiled once.
        let b = Authorized::from_allowed_hidden(
            allowed(Some(("v1", &["**/.env"]))),
            None,
            String::new(),
        );
        assert!(Arc::ptr_eq(h, b.hidden_globs().unwrap()));
        // Another version is another entry, even with the same globs.
        let c = Authorized::from_allowed_hidden(
            allowed(Some(("v2", &["**/.env"]))),
            Some("v2"),
            String::new(),
        );
        assert!(!Arc::ptr_eq(h, c.hidden_globs().unwrap()));
        // No deny rules is an empty set, not a refusal.
        let none =
            Authorized::from_allowed_hidden(allowed(Some(("v3", &[]))), Some("v3"), String::new());
        assert!(none.hidden_globs().unwrap().is_empty());
    }

    #[test]
    fn an_answer_without_usable_hidden_globs_is_refused_not_ignored() {
        let absent = Authorized::from_allowed_hidden(allowed(None), Some("v1"), String::new());
        let (reason, message) = refusal(&absent);
        assert_eq!(reason, "POLICY_UNAVAILABLE");
        assert!(message.contains("nothing was run"), "{message}");

        let stale = Authorized::from_allowed_hidden(
            allowed(Some(("v0", &["**/.env"]))),
            Some("v1"),
            String::new(),
        );
        let (reason, message) = refusal(&stale);
        assert_eq!(reason, "POLICY_UNAVAILABLE");
        assert!(
            message.contains("v0") && message.contains("v1"),
            "{message}"
        );

        let broken = Authorized::from_allowed_hidden(
            allowed(Some(("v1", &["a/["]))),
            Some("v1"),
            String::new(),
        );
        assert_eq!(refusal(&broken).0, "POLICY_UNAVAILABLE");
    }
}
