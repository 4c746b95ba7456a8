//! [`PolicyCore`]: classification plus the ledger, behind both gRPC services and the
//! in-process path of `toolgate up`.
//!
//! Every method takes the authenticated caller and applies the role rules itself, so the
//! tonic adapters and an in-process caller enforce the same thing.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::tier_to_wire;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::{Reason, Tier};
use toolgate_ledger::{
    self as ledger, AllowedState, ApprovalFilter, ApprovalId, ApprovalState, AskRequest,
    AskVerdict, CallId, Decide, DecisionId, Ledger, NewDecision, PageToken, PolicyVersion,
    RequestDigest, RuleId, SessionId, SqlLedger, Verdict,
};
use toolgate_policy_engine::digest::{canonical_json, digest_of_canonical};
use toolgate_policy_engine::{CallContext, Policy, Watcher, request_digest};
use toolgate_runtime::auth::{Principal, Role, role_not_permitted};
use toolgate_runtime::metrics::{self, PolicyMetrics};
use toolgate_runtime::telemetry;
use tracing::Instrument;

use crate::config::Config;
use crate::source::PolicySource;
use crate::{Error, outcome, stored, trace, wire};

/// Roles that read and decide approvals.
pub(crate) const APPROVERS: &[Role] = &[Role::Approver, Role::Admin];

/// The decision point: the policy in force, the ledger, and the rules for who may do what.
/// Cheap to clone.
#[derive(Clone)]
pub struct PolicyCore {
    inner: Arc<Inner>,
}

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
    ) -> Result<T, Status> {
        let span = self.ledger_span(name, operation);
        let started = Instant::now();
        let result = write.instrument(span).await;
        self.inner.metrics.ledger_write(started.elapsed());
        result.map_err(|e| {
            let status = ledger_status(e);
            // A refusal (a decided approval, a recorded outcome) is an answer; a database
            // that cannot be written is what the ledger-write-errors alert is about.
            if matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::Internal
            ) {
                self.inner.metrics.ledger_write_error();
            }
            status
        })
    }

    /// One ledger read, in a `ledger.read` client span with `db.system`.
    async fn read<T>(
        &self,
        operation: &'static str,
        read: impl Future<Output = Result<T, ledger::Error>>,
    ) -> Result<T, Status> {
        read.instrument(self.ledger_span("ledger.read", operation))
            .await
            .map_err(ledger_status)
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

    /// Classifies a call, records the decision, and answers allowed, denied, pending or
    /// already executed.
    ///
    /// Only executors authorize (agents get [`PolicyCore::classify`] for a dry run): a
    /// decision may consume an approval, so it must come from whoever will run the call. The
    /// executor is recorded by its credential; what it reports about itself is kept beside
    /// it. The rows carry the current trace id (the RPC span's), else the one in
    /// `traceparent`.
    pub async fn authorize(
        &self,
        caller: &Principal,
        req: pb::AuthorizeRequest,
        traceparent: Option<&str>,
    ) -> Result<pb::AuthorizeResponse, Status> {
        let started = Instant::now();
        let result = self.authorize_inner(caller, req, traceparent).await;
        self.inner.metrics.authorize_duration(started.elapsed());
        result
    }

    async fn authorize_inner(
        &self,
        caller: &Principal,
        req: pb::AuthorizeRequest,
        traceparent: Option<&str>,
    ) -> Result<pb::AuthorizeResponse, Status> {
        require(caller, "Authorize", &[Role::Executor])?;
        let principal = if req.principal.is_empty() {
            caller.name.clone()
        } else {
            req.principal.clone()
        };
        let context = req.context.ok_or_else(|| {
            status::invalid("context", "context (call_id, session_id) is required")
        })?;
        let call_id: CallId = id("context.call_id", context.call_id)?;
        let session_id: SessionId = id("context.session_id", context.session_id)?;
        let principal_id: ledger::Principal = id("principal", principal)?;
        let mut call = wire::tool_call(req.call)?;

        let policy = self.policy();
        let ctx = CallContext {
            session_id: session_id.as_str().to_owned(),
            principal: principal_id.as_str().to_owned(),
            labels: req.labels.into_iter().collect(),
        };
        let decision = policy.classify(&call, &ctx);
        // A rule that decides the sandbox profile decides the profile in force: the call is
        // digested (so approved) and answered with that one, whatever the request asked for.
        if let Some(profile) = &decision.sandbox_profile {
            call.sandbox_profile = Some(profile.clone());
        }
        let sandbox_profile = call.sandbox_profile.clone().unwrap_or_default();
        let request_json = canonical_json(&call, &ctx.session_id, &ctx.principal, policy.version());
        let digest_hex = digest_of_canonical(&request_json);
        let digest = RequestDigest::try_from(digest_hex.as_str()).map_err(|e| internal(&e))?;
        let explanation = wire::explanation(&decision);
        let new = NewDecision {
            call_id,
            session_id,
            principal: principal_id,
            tool: call.tool,
            digest,
            request_json,
            tier: decision.tier,
            rule_ids: decision
                .matches
                .iter()
                .filter_map(|m| RuleId::try_from(m.rule_id.as_str()).ok())
                .collect(),
            policy_version: PolicyVersion::try_from(policy.version()).map_err(|e| internal(&e))?,
            trace_id: telemetry::trace_id()
                .or_else(|| traceparent.and_then(trace::trace_id))
                .and_then(|t| ledger::TraceId::try_from(t).ok()),
            executor: Some(id("executor", caller.name.clone())?),
            executor_reported: req.executor.as_ref().and_then(reported_identity),
            // A run may take its whole timeout before it can report.
            lease: Some(
                call.timeout_ms
                    .map_or(Duration::ZERO, Duration::from_millis)
                    .saturating_add(self.inner.lease),
            ),
        };
        let deciding_rule = decision
            .deciding_rule()
            .map_or_else(|| "default".to_owned(), |m| m.rule_id.clone());
        let tool = call.tool;
        // From the same policy that decided and whose version the ledger records.
        let hidden = hidden_paths(&policy, tool, &ctx);

        use pb::authorize_response::Result as R;
        let result = if decision.tier == Tier::Ask {
            let asked = self
                .write(
                    "ledger.ask",
                    "ask",
                    self.inner.ledger.ask(AskRequest {
                        decision: new,
                        explanation_json: stored::explanation_json(&decision, &context.description),
                        pending_ttl: None,
                    }),
                )
                .await?;
            let decision_id = asked.decision.id.as_str().to_owned();
            let approval_id = asked.approval.id.as_str().to_owned();
            match asked.verdict {
                AskVerdict::Allowed { .. } => R::Allowed(pb::Allowed {
                    decision_id,
                    approval_id,
                    lease_expires_at: asked.decision.lease_expires_at.map(timestamp),
                    hidden,
                    sandbox_profile,
                }),
                AskVerdict::Pending => R::Pending(pb::Pending {
                    decision_id,
                    approval_id,
                    expires_at: Some(timestamp(asked.approval.expires_at)),
                }),
                AskVerdict::Denied => R::Denied(pb::Denied {
                    decision_id,
                    rule_id: deciding_rule,
                    message: human_denial(&asked.approval),
                    approval_id,
                }),
                AskVerdict::AlreadyRan => {
                    let record = self
                        .read(
                            "lookup_call",
                            self.inner
                                .ledger
                                .lookup_call(asked.decision.call_id.clone()),
                        )
                        .await?;
                    replayed(&asked.decision, record.and_then(|r| r.outcome).as_ref())
                }
            }
        } else {
            let recorded = self
                .write(
                    "ledger.write",
                    "record_decision",
                    self.inner.ledger.record_decision(new),
                )
                .await?;
            let d = &recorded.decision;
            let decision_id = d.id.as_str().to_owned();
            if recorded.replayed && d.allowed_at.is_some() {
                replayed(d, recorded.outcome.as_ref())
            } else if d.tier == Tier::Deny {
                R::Denied(pb::Denied {
                    decision_id,
                    rule_id: deciding_rule,
                    message: decision.message.clone(),
                    approval_id: String::new(),
                })
            } else {
                R::Allowed(pb::Allowed {
                    decision_id,
                    approval_id: String::new(),
                    lease_expires_at: d.lease_expires_at.map(timestamp),
                    hidden,
                    sandbox_profile,
                })
            }
        };
        // The decision is durable here and the caller has not heard of it.
        crate::fault::crash_point("authorize.after_commit");
        self.inner.metrics.decision(
            tool.as_str(),
            decision.tier.as_str(),
            decision.deciding_rule().map(|m| m.rule_id.as_str()),
        );
        Ok(pb::AuthorizeResponse {
            result: Some(result),
            explanation: Some(explanation),
            request_digest: digest_hex,
        })
    }

    /// Attaches the outcome of an allowed call to its decision (executors only).
    /// Idempotent: an identical retry answers `already_recorded`.
    pub async fn record_outcome(
        &self,
        caller: &Principal,
        req: pb::RecordOutcomeRequest,
    ) -> Result<pb::RecordOutcomeResponse, Status> {
        require(caller, "RecordOutcome", &[Role::Executor])?;
        let decision_id: DecisionId = id("decision_id", req.decision_id)?;
        let wire_outcome = req
            .outcome
            .ok_or_else(|| status::invalid("outcome", "outcome is required"))?;
        let l = &self.inner.ledger;
        let decision = self.read("decision", l.decision(decision_id)).await?;
        // The wire carries no lease token: the consumption this decision holds is its
        // fence, so a report for a lapsed or re-taken consumption is still refused.
        let lease_token = match &decision.approval_id {
            Some(a) => {
                let a = self.read("get", l.get(a.clone())).await?;
                if a.consumed_by_call.as_ref() == Some(&decision.call_id) {
                    a.lease_token
                } else {
                    None
                }
            }
            None => None,
        };
        let reporter: ledger::Principal = id("executor", caller.name.clone())?;
        let new = outcome::from_wire(decision.id.clone(), lease_token, reporter, wire_outcome)?;
        // An identical retry returns the outcome recorded earlier, before this call began.
        let before = ledger::Timestamp::now();
        let recorded = self
            .write("ledger.write", "record_outcome", l.record_outcome(new))
            .await?;
        let already = recorded.recorded_at < before;
        Ok(pb::RecordOutcomeResponse {
            already_recorded: already,
        })
    }

    /// Waits until an approval leaves `pending` or the (clamped) timeout passes.
    ///
    /// Executors (resuming a parked call), approvers and admins may wait; agents may not: they
    /// learn an approval's fate by repeating their call through an executor, which is the
    /// only path that can act on it.
    pub async fn wait_for_approval(
        &self,
        caller: &Principal,
        req: pb::WaitForApprovalRequest,
    ) -> Result<pb::WaitForApprovalResponse, Status> {
        require(
            caller,
            "WaitForApproval",
            &[Role::Executor, Role::Approver, Role::Admin],
        )?;
        let approval_id: ApprovalId = id("approval_id", req.approval_id)?;
        let timeout = match req.timeout {
            None => Duration::ZERO,
            Some(t) => Duration::try_from(t).unwrap_or(Duration::ZERO),
        }
        .min(self.inner.max_wait);
        // The time spent waiting for a human, visible in the trace.
        let span = tracing::info_span!(
            "approval.wait",
            approval_id = %approval_id,
            timeout_ms = timeout.as_millis() as u64,
            state = tracing::field::Empty,
        );
        let a = self
            .inner
            .ledger
            .wait_for_decision(approval_id, timeout)
            .instrument(span.clone())
            .await
            .map_err(ledger_status)?;
        span.record("state", tracing::field::display(&a.state));
        Ok(pb::WaitForApprovalResponse {
            approval: Some(self.approval_to_wire(a).await?),
        })
    }

    /// Approvals matching the filters, newest first (approvers and admins).
    pub async fn list_approvals(
        &self,
        caller: &Principal,
        req: pb::ListApprovalsRequest,
    ) -> Result<pb::ListApprovalsResponse, Status> {
        require(caller, "ListApprovals", APPROVERS)?;
        let (filter, states) = filter(&req.states, req.session_id, req.principal)?;
        let page = req.page.unwrap_or_default();
        let size = if page.page_size == 0 {
            50
        } else {
            page.page_size.min(500)
        } as usize;
        let mut token = if page.page_token.is_empty() {
            None
        } else {
            Some(PageToken::try_from(page.page_token).map_err(|_| {
                status::invalid(
                    "page.page_token",
                    "page.page_token is not a token returned by a previous ListApprovals",
                )
            })?)
        };
        let mut items = Vec::new();
        let next = loop {
            let got = self
                .inner
                .ledger
                .list(filter.clone(), token.take(), size as u32)
                .await
                .map_err(ledger_status)?;
            let mut rest = got.items.into_iter();
            for a in rest.by_ref() {
                if states.is_empty() || states.contains(&a.state) {
                    items.push(a);
                    if items.len() == size {
                        break;
                    }
                }
            }
            let more = rest.next().is_some() || got.next.is_some();
            if items.len() == size {
                break more.then(|| items.last().map(PageToken::after)).flatten();
            }
            match got.next {
                Some(n) => token = Some(n),
                None => break None,
            }
        };
        let mut approvals = Vec::with_capacity(items.len());
        for a in items {
            approvals.push(self.approval_to_wire(a).await?);
        }
        Ok(pb::ListApprovalsResponse {
            approvals,
            next_page_token: next.map(|t| t.as_str().to_owned()).unwrap_or_default(),
        })
    }

    /// One approval with its explanation (approvers and admins).
    pub async fn get_approval(
        &self,
        caller: &Principal,
        req: pb::GetApprovalRequest,
    ) -> Result<pb::GetApprovalResponse, Status> {
        require(caller, "GetApproval", APPROVERS)?;
        let approval_id: ApprovalId = id("approval_id", req.approval_id)?;
        let a = self
            .inner
            .ledger
            .get(approval_id)
            .await
            .map_err(ledger_status)?;
        Ok(pb::GetApprovalResponse {
            approval: Some(self.approval_to_wire(a).await?),
        })
    }

    /// Approves or denies a pending approval (approvers and admins, never the requester).
    pub async fn decide_approval(
        &self,
        caller: &Principal,
        req: pb::DecideApprovalRequest,
    ) -> Result<pb::DecideApprovalResponse, Status> {
        require(caller, "DecideApproval", APPROVERS)?;
        let approval_id: ApprovalId = id("approval_id", req.approval_id)?;
        let scope = pb::ApprovalScope::try_from(req.scope).map_err(|_| {
            status::invalid(
                "scope",
                "scope must be APPROVAL_SCOPE_ONCE or APPROVAL_SCOPE_SESSION",
            )
        })?;
        let verdict = match pb::Verdict::try_from(req.verdict) {
            Ok(pb::Verdict::Approve) => Verdict::Approve {
                // Widening is never a default: only an explicit SESSION scope widens.
                widen_to_session: scope == pb::ApprovalScope::Session,
            },
            Ok(pb::Verdict::Deny) => Verdict::Deny,
            _ => {
                return Err(status::invalid(
                    "verdict",
                    "verdict must be VERDICT_APPROVE or VERDICT_DENY",
                ));
            }
        };
        let ttl = match req.ttl {
            None => None,
            Some(t) => match Duration::try_from(t) {
                Ok(d) if !d.is_zero() => Some(d),
                _ => return Err(status::invalid("ttl", "ttl must be a positive duration")),
            },
        };
        let approver: ledger::Principal = id("principal", caller.name.clone())?;
        let a = self
            .write(
                "ledger.write",
                "decide",
                self.inner.ledger.decide(
                    approval_id,
                    Decide {
                        approver,
                        verdict,
                        reason: non_empty(req.reason),
                        message: non_empty(req.message_to_model),
                        ttl,
                    },
                ),
            )
            .await?;
        let verdict = if a.state == ApprovalState::Denied {
            "denied"
        } else {
            "approved"
        };
        let pending_for = a.decided_at.map(|at| {
            Duration::from_micros(
                u64::try_from(at.as_micros() - a.created_at.as_micros()).unwrap_or(0),
            )
        });
        self.inner.metrics.approval_decided(verdict, pending_for);
        tracing::info!(approval_id = %a.id, state = %a.state, by = %caller.name, "approval decided");
        Ok(pb::DecideApprovalResponse {
            approval: Some(self.approval_to_wire(a).await?),
        })
    }

    /// Cancels a pending approval (approvers, admins, or the agent principal that asked).
    pub async fn cancel_approval(
        &self,
        caller: &Principal,
        req: pb::CancelApprovalRequest,
    ) -> Result<pb::CancelApprovalResponse, Status> {
        let approval_id: ApprovalId = id("approval_id", req.approval_id)?;
        if caller.role == Role::Agent {
            let a = self
                .inner
                .ledger
                .get(approval_id.clone())
                .await
                .map_err(ledger_status)?;
            own_request(caller, "CancelApproval", &a)?;
        } else {
            require(caller, "CancelApproval", APPROVERS)?;
        }
        let by: ledger::Principal = id("principal", caller.name.clone())?;
        let a = self
            .write(
                "ledger.write",
                "cancel",
                self.inner
                    .ledger
                    .cancel(approval_id, by, non_empty(req.reason)),
            )
            .await?;
        self.inner.metrics.approval_decided("cancelled", None);
        Ok(pb::CancelApprovalResponse {
            approval: Some(self.approval_to_wire(a).await?),
        })
    }

    /// The wire form of a stored approval, with its explanation and redacted call decoded.
    pub async fn approval_to_wire(&self, a: ledger::Approval) -> Result<pb::Approval, Status> {
        let consumed_decision_id = match &a.consumed_by_call {
            Some(call) => self
                .inner
                .ledger
                .lookup_call(call.clone())
                .await
                .map_err(ledger_status)?
                .map(|r| r.decision.id.as_str().to_owned())
                .unwrap_or_default(),
            None => String::new(),
        };
        let (explanation, description) = match stored::explanation_from_json(&a.explanation_json) {
            Some((e, d)) => (Some(e), d),
            None => (None, String::new()),
        };
        // Expiry is enforced at use and by the sweeper; until the sweeper runs, report a
        // lapsed approval as what it effectively is.
        let state = match a.state {
            ApprovalState::Pending | ApprovalState::Approved
                if a.expires_at <= ledger::Timestamp::now() =>
            {
                ApprovalState::Expired
            }
            s => s,
        };
        Ok(pb::Approval {
            approval_id: a.id.as_str().to_owned(),
            state: state_to_wire(state) as i32,
            session_id: a.session_id.as_str().to_owned(),
            principal: a.principal.as_str().to_owned(),
            call_id: a.call_id.as_str().to_owned(),
            call: stored::tool_call_from_json(&a.request_json),
            request_digest: a.digest.to_hex(),
            policy_version: a.policy_version.as_str().to_owned(),
            explanation,
            description,
            created_at: Some(timestamp(a.created_at)),
            expires_at: Some(timestamp(a.expires_at)),
            decided_by: text(a.decided_by.as_ref()),
            decided_at: a.decided_at.map(timestamp),
            reason: a.reason.unwrap_or_default(),
            message_to_model: a.message.unwrap_or_default(),
            scope: match a.scope {
                ledger::Scope::Once => pb::ApprovalScope::Once,
                ledger::Scope::Session => pb::ApprovalScope::Session,
            } as i32,
            consumed_by: a.consumed_by_executor.unwrap_or_default(),
            consumed_at: a.consumed_at.map(timestamp),
            consumed_decision_id,
            trace_id: text(a.trace_id.as_ref()),
        })
    }

    /// Classifies without recording (a dry run); any authenticated role.
    pub fn classify(&self, req: pb::ClassifyRequest) -> Result<pb::ClassifyResponse, Status> {
        let mut call = wire::tool_call(req.call)?;
        let policy = self.policy();
        let ctx = CallContext {
            session_id: req.session_id,
            principal: req.principal,
            labels: req.labels.into_iter().collect(),
        };
        let decision = policy.classify(&call, &ctx);
        if let Some(profile) = &decision.sandbox_profile {
            call.sandbox_profile = Some(profile.clone());
        }
        let digest = request_digest(&call, &ctx.session_id, &ctx.principal, policy.version());
        Ok(pb::ClassifyResponse {
            explanation: Some(wire::into_explanation(decision)),
            request_digest: digest,
        })
    }

    /// Describes the policy in force; any authenticated role.
    pub fn get_policy(&self) -> pb::GetPolicyResponse {
        let policy = self.policy();
        pb::GetPolicyResponse {
            version: policy.version().to_owned(),
            default_tier: tier_to_wire(policy.default_tier()) as i32,
            rules: policy
                .summary()
                .into_iter()
                .map(|r| pb::RuleSummary {
                    rule_id: r.id,
                    tier: tier_to_wire(r.tier) as i32,
                    reason: r.reason,
                    source: wire::source(r.source) as i32,
                    line: r.line as u32,
                })
                .collect(),
            loaded_at: Some(prost_types::Timestamp::from(self.inner.loaded_at)),
            source: self.inner.source.describe(),
        }
    }
}

/// What an allowed call must not reveal, for the tools that show more than the one path they
/// name: the `paths` of every `deny` rule (without command selectors) that applies to reading
/// (`fs.read`) or to the call's own tool in its context, with the policy's version. `None`
/// for the single-path tools, whose decision already covered their path.
pub(crate) fn hidden_paths(
    policy: &Policy,
    tool: toolgate_core::ToolKind,
    ctx: &CallContext,
) -> Option<pb::HiddenPaths> {
    use toolgate_core::ToolKind as K;
    if !matches!(tool, K::FsList | K::FsSearch | K::FsFind | K::ProcessRun) {
        return None;
    }
    let mut globs = policy.denied_path_globs(K::FsRead, ctx);
    for g in policy.denied_path_globs(tool, ctx) {
        if !globs.contains(&g) {
            globs.push(g);
        }
    }
    Some(pb::HiddenPaths {
        policy_version: policy.version().to_owned(),
        globs,
    })
}

/// What a replayed `call_id` of an allowed call answers: it ran (with its outcome), it may
/// still be running (its lease runs), or nobody knows (its lease ran out without an outcome).
/// Never "already executed" without a recorded outcome.
fn replayed(
    d: &ledger::Decision,
    outcome: Option<&ledger::Outcome>,
) -> pb::authorize_response::Result {
    use pb::authorize_response::Result as R;
    let decision_id = d.id.as_str().to_owned();
    let approval_id = d
        .approval_id
        .as_ref()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    match (
        outcome,
        d.allowed_state(outcome.is_some(), ledger::Timestamp::now()),
    ) {
        (Some(o), _) => R::AlreadyExecuted(pb::AlreadyExecuted {
            decision_id,
            approval_id,
            outcome: Some(outcome::to_wire(o)),
        }),
        (None, Some(AllowedState::InFlight(until))) => R::InFlight(pb::InFlight {
            decision_id,
            approval_id,
            lease_expires_at: Some(timestamp(until)),
        }),
        (None, _) => R::OutcomeUnknown(pb::OutcomeUnknown {
            decision_id,
            approval_id,
            lease_expired_at: d.lease_expires_at.map(timestamp),
        }),
    }
}

/// What an executor reported about itself, as stored beside its credential: the non-empty
/// fields of its identity as a JSON object, or `None` when it reported nothing.
fn reported_identity(e: &common::ExecutorIdentity) -> Option<String> {
    let fields = [
        ("executor_id", &e.executor_id),
        ("pod", &e.pod),
        ("namespace", &e.namespace),
        ("node", &e.node),
        ("image", &e.image),
        ("version", &e.version),
    ];
    let map: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.clone())))
        .collect();
    (!map.is_empty()).then(|| serde_json::Value::Object(map).to_string())
}

/// `PERMISSION_DENIED` unless the caller's role is one of `roles`.
pub(crate) fn require(caller: &Principal, method: &str, roles: &[Role]) -> Result<(), Status> {
    if roles.contains(&caller.role) {
        Ok(())
    } else {
        Err(role_not_permitted(caller, method, roles))
    }
}

/// An agent may act on an approval only when it asked for it.
fn own_request(caller: &Principal, method: &str, a: &ledger::Approval) -> Result<(), Status> {
    if a.principal.as_str() == caller.name {
        return Ok(());
    }
    Err(status::status(
        Reason::RoleNotPermitted,
        format!(
            "{} is an agent; {method} on approval {} is allowed only to the principal that asked, \
             an executor, or an approver",
            caller.name, a.id
        ),
        [
            ("principal", caller.name.clone()),
            ("approval_id", a.id.as_str().to_owned()),
        ],
    ))
}

/// Parses an identifier field; the error names the wire field.
fn id<T>(field: &'static str, value: String) -> Result<T, Status>
where
    T: TryFrom<String, Error = ledger::Error>,
{
    T::try_from(value).map_err(|e| match e {
        ledger::Error::Invalid { problem, .. } => {
            status::invalid(field, format!("{field} {problem}"))
        }
        other => status::invalid(field, format!("{field}: {other}")),
    })
}

/// The one place ledger errors become statuses; unexpected ones are logged.
// By value so it reads as `.map_err(ledger_status)`.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn ledger_status(e: ledger::Error) -> Status {
    use toolgate_core::ReasonedError;
    if e.reason() == Reason::Internal || e.is_transient() {
        tracing::error!(error = %e, "ledger operation failed");
    }
    status::from_error(&e)
}

fn internal(e: &dyn std::fmt::Display) -> Status {
    tracing::error!(error = %e, "policy produced a value the ledger refuses");
    status::status(Reason::Internal, format!("internal: {e}"), [])
}

fn non_empty(s: String) -> Option<String> {
    (!s.trim().is_empty()).then_some(s)
}

fn text<T: std::fmt::Display>(v: Option<&T>) -> String {
    v.map(ToString::to_string).unwrap_or_default()
}

/// The message a model gets when a human denied its call.
fn human_denial(a: &ledger::Approval) -> String {
    match a.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => m.to_owned(),
        None => format!(
            "an approver ({}) denied this call (approval {}); do not retry it unchanged",
            text(a.decided_by.as_ref()),
            a.id
        ),
    }
}

/// A ledger timestamp on the wire.
pub(crate) fn timestamp(t: ledger::Timestamp) -> prost_types::Timestamp {
    let us = t.as_micros();
    prost_types::Timestamp {
        seconds: us.div_euclid(1_000_000),
        nanos: (us.rem_euclid(1_000_000) * 1_000) as i32,
    }
}

/// A ledger approval state on the wire.
pub(crate) fn state_to_wire(s: ApprovalState) -> pb::ApprovalState {
    match s {
        ApprovalState::Pending => pb::ApprovalState::Pending,
        ApprovalState::Approved => pb::ApprovalState::Approved,
        ApprovalState::Denied => pb::ApprovalState::Denied,
        ApprovalState::Expired => pb::ApprovalState::Expired,
        ApprovalState::Cancelled => pb::ApprovalState::Cancelled,
        ApprovalState::Consumed => pb::ApprovalState::Consumed,
        ApprovalState::Completed => pb::ApprovalState::Completed,
        ApprovalState::Unknown => pb::ApprovalState::Unknown,
    }
}

fn state_from_wire(v: i32) -> Option<ApprovalState> {
    Some(match pb::ApprovalState::try_from(v).ok()? {
        pb::ApprovalState::Unspecified => return None,
        pb::ApprovalState::Pending => ApprovalState::Pending,
        pb::ApprovalState::Approved => ApprovalState::Approved,
        pb::ApprovalState::Denied => ApprovalState::Denied,
        pb::ApprovalState::Expired => ApprovalState::Expired,
        pb::ApprovalState::Cancelled => ApprovalState::Cancelled,
        pb::ApprovalState::Consumed => ApprovalState::Consumed,
        pb::ApprovalState::Completed => ApprovalState::Completed,
        pb::ApprovalState::Unknown => ApprovalState::Unknown,
    })
}

/// The ledger filter for wire filters, plus the states to check in memory when several are
/// asked for (the ledger filters on one state at most).
pub(crate) fn filter(
    states: &[i32],
    session_id: String,
    principal: String,
) -> Result<(ApprovalFilter, Vec<ApprovalState>), Status> {
    let mut parsed = Vec::new();
    for s in states {
        let st = state_from_wire(*s).ok_or_else(|| {
            status::invalid(
                "states",
                format!("states: {s} is not an approval state (PENDING ... UNKNOWN)"),
            )
        })?;
        if !parsed.contains(&st) {
            parsed.push(st);
        }
    }
    let f = ApprovalFilter {
        state: (parsed.len() == 1).then(|| parsed[0]),
        session_id: if session_id.is_empty() {
            None
        } else {
            Some(id("session_id", session_id)?)
        },
        principal: if principal.is_empty() {
            None
        } else {
            Some(id("principal", principal)?)
        },
    };
    Ok((f, parsed))
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

    #[test]
    fn timestamps_keep_microseconds() {
        let t = timestamp(ledger::Timestamp::from_micros(1_700_000_000_123_456));
        assert_eq!((t.seconds, t.nanos), (1_700_000_000, 123_456_000));
    }

    #[test]
    fn several_states_filter_in_memory() {
        let (f, s) = filter(&[1, 1], String::new(), String::new()).unwrap();
        assert_eq!(f.state, Some(ApprovalState::Pending));
        assert_eq!(s, vec![ApprovalState::Pending]);
        let (f, s) = filter(&[1, 2], "s".into(), String::new()).unwrap();
        assert_eq!(f.state, None);
        assert_eq!(s.len(), 2);
        assert!(filter(&[0], String::new(), String::new()).is_err());
        assert!(filter(&[], "bad session".into(), String::new()).is_err());
    }
}
