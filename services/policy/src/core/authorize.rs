//! Authorize and RecordOutcome: how an executor asks about a call and reports how it ended.

use std::time::{Duration, Instant};

use toolgate_core::Tier;
use toolgate_ledger::{
    self as ledger, AllowedState, AskRequest, AskVerdict, NewDecision, PolicyVersion,
    RequestDigest, RuleId,
};
use toolgate_policy_api::{Authorization, AuthorizeRequest, OutcomeReport};
use toolgate_policy_engine::CallContext;
use toolgate_policy_engine::digest::{canonical_json, digest_of_canonical};
use toolgate_runtime::auth::{Principal, Role};
use toolgate_runtime::telemetry;

use super::api::{AuthorizeDecision, reported_json};
use super::{
    PolicyCore, PolicyError, hidden_paths, internal, parse_id, require, text, unbind_denied,
};
use crate::outcome::{self, system_time};
use crate::stored;

impl PolicyCore {
    /// Classifies a call, records the decision, and answers allowed, denied, pending or
    /// already executed. The caller's role is checked first, then the request's identifiers.
    ///
    /// Only executors authorize (agents get [`PolicyCore::classify`] for a dry run): a
    /// decision may consume an approval, so it must come from whoever will run the call. The
    /// executor is recorded by its credential; what it reports about itself is kept beside
    /// it. The rows carry the current trace id (the RPC span's), else the one in
    /// `traceparent`.
    pub async fn authorize(
        &self,
        caller: &Principal,
        req: AuthorizeRequest,
        traceparent: Option<&str>,
    ) -> Result<AuthorizeDecision, PolicyError> {
        let started = Instant::now();
        let result = self.authorize_inner(caller, req, traceparent).await;
        self.inner.metrics.authorize_duration(started.elapsed());
        result
    }

    async fn authorize_inner(
        &self,
        caller: &Principal,
        req: AuthorizeRequest,
        traceparent: Option<&str>,
    ) -> Result<AuthorizeDecision, PolicyError> {
        // Authorize, then validate: who may not call this learns nothing about its input.
        require(caller, "Authorize", &[Role::Executor])?;
        let call_id: ledger::CallId = parse_id("context.call_id", req.call_id)?;
        let session_id: ledger::SessionId = parse_id("context.session_id", req.session_id)?;
        let principal_id: ledger::Principal = if req.principal.is_empty() {
            parse_id("principal", caller.name.clone())?
        } else {
            parse_id("principal", req.principal)?
        };
        let mut call = req.call;
        let policy = self.policy();
        let ctx = CallContext {
            session_id: session_id.as_str().to_owned(),
            principal: principal_id.as_str().to_owned(),
            labels: req.labels.into_iter().collect(),
        };
        unbind_denied(&policy, &mut call, &ctx);
        let mut decision = self.classify_call(&policy, &call, &ctx);
        // A rule that decides the sandbox profile decides the profile in force: the call is
        // digested (so approved) and answered with that one, whatever the request asked for.
        if let Some(profile) = &decision.sandbox_profile {
            call.sandbox_profile = Some(profile.clone());
        }
        // A rule learned from an approval may lift an ask of its shape to auto. The digest
        // stays bound to the document's version (approvals are not orphaned by a rule being
        // learned or revoked); the decision records `<document>+learned.r<revision>`.
        let lifted = self.apply_learned(&mut decision, &call, &ctx).await;
        let sandbox_profile = call.sandbox_profile.clone().unwrap_or_default();
        let request_json = canonical_json(&call, &ctx.session_id, &ctx.principal, policy.version());
        let request_digest = digest_of_canonical(&request_json);
        let digest = RequestDigest::try_from(request_digest.as_str()).map_err(|e| internal(&e))?;
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
            policy_version: PolicyVersion::try_from(decision.policy_version.as_str())
                .map_err(|e| internal(&e))?,
            trace_id: telemetry::trace_id()
                .or_else(|| traceparent.and_then(telemetry::trace_id_of))
                .and_then(|t| ledger::TraceId::try_from(t).ok()),
            executor: Some(parse_id("executor", caller.name.clone())?),
            executor_reported: reported_json(&req.executor),
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
        let mut hidden = hidden_paths(&policy, tool, &ctx);
        if lifted.is_some()
            && let Some(h) = &mut hidden
        {
            // The executor checks the hidden paths come from the version that decided.
            h.policy_version.clone_from(&decision.policy_version);
        }
        let denied_hosts = denied_hosts(&policy, &call, &ctx);

        let explanation_json = stored::explanation_json(&decision, &req.description, &ctx.labels);
        let ask = async |new: NewDecision| -> Result<Authorization, PolicyError> {
            let asked = self
                .write(
                    "ledger.ask",
                    "ask",
                    self.inner.ledger.ask(AskRequest {
                        decision: new,
                        explanation_json: explanation_json.clone(),
                        pending_ttl: None,
                    }),
                )
                .await?;
            let decision_id = asked.decision.id.as_str().to_owned();
            let approval_id = asked.approval.id.as_str().to_owned();
            Ok(match asked.verdict {
                AskVerdict::Allowed { .. } => Authorization::Allowed {
                    decision_id,
                    approval_id,
                    lease_expires_at: asked.decision.lease_expires_at.map(system_time),
                    hidden: hidden.clone(),
                    sandbox_profile: sandbox_profile.clone(),
                    denied_hosts: denied_hosts.clone(),
                },
                AskVerdict::Pending => Authorization::Pending {
                    decision_id,
                    approval_id,
                    expires_at: Some(system_time(asked.approval.expires_at)),
                },
                AskVerdict::Denied => Authorization::Denied {
                    decision_id,
                    rule_id: deciding_rule.clone(),
                    message: human_denial(&asked.approval),
                    approval_id,
                },
                AskVerdict::AlreadyRan => {
                    let record = self
                        .read(
                            "lookup_call",
                            self.inner
                                .ledger
                                .lookup_call(asked.decision.call_id.clone()),
                        )
                        .await?;
                    replayed(&asked.decision, record.and_then(|r| r.outcome))
                }
            })
        };
        let authorization = if decision.tier == Tier::Ask {
            ask(new).await?
        } else {
            // Only a lifted call can have been asked before under its call id.
            let retry = lifted.is_some().then(|| new.clone());
            let recorded = self
                .write(
                    "ledger.write",
                    "record_decision",
                    self.inner.ledger.record_decision(new),
                )
                .await?;
            let d = recorded.decision;
            if let Some(new) = retry
                && recorded.replayed
                && d.tier == Tier::Ask
                && d.allowed_at.is_none()
            {
                // The call asked before a rule lifting it was learned, and waits on its
                // approval (the one the rule was learned from, or another): that approval
                // decides it, as it would have without the rule.
                ask(NewDecision {
                    tier: Tier::Ask,
                    ..new
                })
                .await?
            } else if recorded.replayed && d.allowed_at.is_some() {
                replayed(&d, recorded.outcome)
            } else if d.tier == Tier::Deny || (recorded.replayed && d.allowed_at.is_none()) {
                // (A released call whose retry the policy no longer allows is refused with the
                // answer it gets now.)
                Authorization::Denied {
                    decision_id: d.id.as_str().to_owned(),
                    rule_id: deciding_rule,
                    message: decision.message.clone(),
                    approval_id: String::new(),
                }
            } else {
                Authorization::Allowed {
                    decision_id: d.id.as_str().to_owned(),
                    approval_id: String::new(),
                    lease_expires_at: d.lease_expires_at.map(system_time),
                    hidden,
                    sandbox_profile,
                    denied_hosts,
                }
            }
        };
        // The decision is durable here and the caller has not heard of it.
        crate::fault::crash_point("authorize.after_commit");
        // Learned rules are made at runtime, each with its own id: one `learned` label keeps
        // the metric's cardinality bounded (the ledger names the rule).
        self.inner.metrics.decision(
            tool.as_str(),
            decision.tier.as_str(),
            if lifted.is_some() {
                Some("learned")
            } else {
                decision.deciding_rule().map(|m| m.rule_id.as_str())
            },
        );
        Ok(AuthorizeDecision {
            authorization,
            decision,
            request_digest,
        })
    }

    /// Attaches the outcome of an allowed call to its decision (executors only; the role is
    /// checked before the report). Idempotent: an identical retry answers `true` (already
    /// recorded).
    pub async fn record_outcome(
        &self,
        caller: &Principal,
        req: OutcomeReport,
    ) -> Result<bool, PolicyError> {
        require(caller, "RecordOutcome", &[Role::Executor])?;
        let decision_id: ledger::DecisionId = parse_id("decision_id", req.decision_id)?;
        let report = if req.outcome.not_started {
            Reported::NotStarted(outcome::not_started_from_api(decision_id, &req.outcome)?)
        } else {
            Reported::Outcome(outcome::from_api(decision_id, req.outcome)?)
        };
        let l = &self.inner.ledger;
        // The wire carries no lease token: the consumption this decision holds is its fence,
        // read in the ledger's transaction under its lock, so a report for a lapsed
        // consumption is still refused (and no read before the write is needed).
        let executor_principal = Some(parse_id("executor", caller.name.clone())?);
        let mut new = match report {
            Reported::Outcome(o) => o,
            Reported::NotStarted(mut n) => {
                // Nothing ran: the call is released, and its retry may run.
                n.lease_held = true;
                n.executor_principal = executor_principal;
                let released = self.write("ledger.write", "release", l.release(n)).await?;
                tracing::info!(decision_id = %released.id, reason = ?released.release_reason, "call released: refused before it started");
                return Ok(false);
            }
        };
        new.lease_held = true;
        new.executor_principal = executor_principal;
        // An identical retry returns the outcome recorded earlier, before this call began.
        let before = ledger::Timestamp::now();
        let recorded = self
            .write("ledger.write", "record_outcome", l.record_outcome(new))
            .await?;
        Ok(recorded.recorded_at < before)
    }
}

/// How an allowed call ended, in the ledger's terms.
enum Reported {
    /// It ran: the outcome.
    Outcome(toolgate_ledger::NewOutcome),
    /// It was refused before it started: nothing ran, the call is released.
    NotStarted(toolgate_ledger::NotStarted),
}

/// `Allowed.denied_hosts`: for a run whose profile in force reaches the network, the names
/// its egress gate's DNS answers as nonexistent (from the same policy that decided).
fn denied_hosts(
    policy: &toolgate_policy_engine::Policy,
    call: &toolgate_policy_engine::ToolCall,
    ctx: &CallContext,
) -> Vec<String> {
    let profile = call.sandbox_profile.as_deref();
    if call.tool != toolgate_core::ToolKind::ProcessRun
        || !policy.decided_profile(profile).guarantees.network
    {
        return Vec::new();
    }
    policy.denied_hosts(profile, ctx)
}

/// What a replayed `call_id` of an allowed call answers: it ran (with its outcome), it may
/// still be running (its lease runs), or nobody knows (its lease ran out without an outcome).
/// Never "already executed" without a recorded outcome.
fn replayed(d: &ledger::DecisionRecord, outcome: Option<ledger::OutcomeRecord>) -> Authorization {
    let decision_id = d.id.as_str().to_owned();
    let approval_id = d
        .approval_id
        .as_ref()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let state = d.allowed_state(outcome.is_some(), ledger::Timestamp::now());
    match (outcome, state) {
        (Some(o), _) => Authorization::AlreadyExecuted {
            decision_id,
            approval_id,
            outcome: Some(Box::new(outcome::to_api(&o))),
        },
        (None, Some(AllowedState::InFlight(until))) => Authorization::InFlight {
            decision_id,
            approval_id,
            lease_expires_at: Some(system_time(until)),
        },
        (None, _) => Authorization::OutcomeUnknown {
            decision_id,
            approval_id,
            lease_expired_at: d.lease_expires_at.map(system_time),
        },
    }
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
