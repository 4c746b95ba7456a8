//! The gate every call passes: ask, map the answer, wait for a human when asked to.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use toolgate_contracts::executor::v1::AwaitingApproval;
use toolgate_core::{Reason, ReasonedError, ToolCall, rfc3339};
use toolgate_runtime::auth::Principal;
use toolgate_runtime::metrics::ExecutorMetrics;
use toolgate_runtime::telemetry;
use tracing::Instrument;

use toolgate_policy_api::{
    ApprovalState, Authorization, AuthorizeAnswer, AuthorizeRequest, Authorizer, Ended,
    Error as PolicyError, ExecutorIdentity, Outcome,
};

use super::{Authorized, Reporter};
use crate::tool_span;
use crate::wire::CallContext;

/// One call as the policy service is asked about it: who, in which context, what exactly.
#[derive(Debug)]
pub(crate) struct Call {
    /// The authenticated caller; the call runs for this principal.
    pub principal: Principal,
    /// The validated context (its description travels to the approver).
    pub ctx: CallContext,
    /// The canonical call, built from the resolved request.
    pub call: ToolCall,
    /// The caller's trace context as the handler saw it, for hops made where the current
    /// span carries none (telemetry off, inside a response stream).
    pub trace_parent: Option<String>,
    /// The call's `execute_tool` span, where the policy's answer is recorded.
    pub span: tracing::Span,
}

/// What a first authorization answered, when it was not a refusal.
#[derive(Debug)]
pub(crate) enum Checked {
    /// Run now.
    Allowed(Authorized),
    /// A human must decide and the caller asked to wait for it.
    Parked(Parked),
}

/// Why the gate did not let a call run: the policy refused it, a human did (or has not yet),
/// the ledger says it ran before, or the policy service gave no usable answer. The reason,
/// message and `ErrorInfo` metadata the client gets; `crate::wire` makes the status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(PolicyError);

impl Refused {
    fn new(
        reason: Reason,
        message: impl Into<String>,
        metadata: impl IntoIterator<Item = (&'static str, String)>,
    ) -> Self {
        Refused(PolicyError::new(reason, message, metadata))
    }

    /// From the closed list.
    pub(crate) fn reason(&self) -> Reason {
        self.0.reason
    }

    /// For the model.
    pub(crate) fn message(&self) -> &str {
        &self.0.message
    }

    /// The value of the metadata key `key`, if present.
    pub(crate) fn fact(&self, key: &str) -> Option<&str> {
        self.0.fact(key)
    }

    /// The reason, message and metadata, as the client gets them.
    pub(crate) fn into_parts(self) -> PolicyError {
        self.0
    }
}

impl From<PolicyError> for Refused {
    fn from(e: PolicyError) -> Self {
        Refused(e)
    }
}

impl ReasonedError for Refused {
    fn reason(&self) -> Reason {
        self.0.reason
    }
}

/// A call waiting for a human.
#[derive(Debug)]
pub(crate) struct Parked {
    approval_id: String,
    decision_id: String,
    rule_id: String,
    expires_at: Option<SystemTime>,
    message: String,
    deadline: Instant,
    wait_deadline: SystemTime,
}

impl Parked {
    /// The event a streaming call emits before it waits.
    pub(crate) fn event(&self) -> AwaitingApproval {
        AwaitingApproval {
            approval_id: self.approval_id.clone(),
            message: self.message.clone(),
            wait_deadline: Some(self.wait_deadline.into()),
            destination: String::new(),
        }
    }

    /// Ends the wait no later than the approval's expiry: waiting past it cannot succeed.
    pub(crate) fn until_expiry(mut self) -> Self {
        if let Some(expires) = self.expires_at {
            let left = expires
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            let by_expiry = Instant::now() + left;
            if by_expiry < self.deadline {
                self.deadline = by_expiry;
                self.wait_deadline = expires;
            }
        }
        self
    }
}

/// Asks the policy service about calls and reports their outcomes; cheap to clone.
#[derive(Clone)]
pub(crate) struct Gate {
    inner: Arc<Inner>,
}

struct Inner {
    authorizer: Arc<dyn Authorizer>,
    identity: ExecutorIdentity,
    labels: HashMap<String, String>,
    max_wait: Duration,
    reporter: Reporter,
    metrics: ExecutorMetrics,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("executor", &self.inner.identity.executor_id)
            .field("max_wait", &self.inner.max_wait)
            .finish_non_exhaustive()
    }
}

/// One answer that is not a refusal.
enum Answer {
    Allowed(Authorized),
    Pending {
        approval_id: String,
        decision_id: String,
        why: String,
        rule_id: String,
        expires_at: Option<SystemTime>,
    },
}

impl Gate {
    /// A gate over `authorizer`; waits for humans are clamped to `max_wait`. Round trips,
    /// human waits and refusals are recorded in `metrics`.
    pub(crate) fn new(
        authorizer: Arc<dyn Authorizer>,
        identity: ExecutorIdentity,
        labels: HashMap<String, String>,
        max_wait: Duration,
        metrics: ExecutorMetrics,
    ) -> Self {
        let reporter = Reporter::new(authorizer.clone(), identity.clone());
        Gate {
            inner: Arc::new(Inner {
                authorizer,
                identity,
                labels,
                max_wait,
                reporter,
                metrics,
            }),
        }
    }

    /// Where outcomes go.
    pub(crate) fn reporter(&self) -> &Reporter {
        &self.inner.reporter
    }

    /// Where the executor's metrics go.
    pub(crate) fn metrics(&self) -> &ExecutorMetrics {
        &self.inner.metrics
    }

    /// Authorizes `call`, waiting for a human when its context asks to.
    pub(crate) async fn authorize(&self, call: &Call) -> Result<Authorized, Refused> {
        match self.check(call).await? {
            Checked::Allowed(proof) => Ok(proof),
            Checked::Parked(parked) => self.wait(call, parked).await,
        }
    }

    /// The first answer: allowed, parked (only when the context asks to wait), or the
    /// refusal the client gets.
    pub(crate) async fn check(&self, call: &Call) -> Result<Checked, Refused> {
        match self.ask(call).await? {
            Answer::Allowed(proof) => Ok(Checked::Allowed(proof)),
            Answer::Pending {
                approval_id,
                decision_id,
                why,
                rule_id,
                expires_at,
            } => {
                let wait = call.ctx.approval_wait.min(self.inner.max_wait);
                if wait.is_zero() {
                    return Err(approval_required(
                        &Pending {
                            approval_id: &approval_id,
                            decision_id: &decision_id,
                            rule_id: &rule_id,
                            expires_at,
                        },
                        &why,
                        false,
                    ));
                }
                Ok(Checked::Parked(Parked {
                    message: format!(
                        "{why}; waiting up to {} ms for a human to decide approval {approval_id}",
                        wait.as_millis()
                    ),
                    approval_id,
                    decision_id,
                    rule_id,
                    expires_at,
                    deadline: Instant::now() + wait,
                    wait_deadline: SystemTime::now() + wait,
                }))
            }
        }
    }

    /// Waits for the human decision on `parked`, then authorizes the same call again (which
    /// consumes the approval).
    pub(crate) async fn wait(&self, call: &Call, parked: Parked) -> Result<Authorized, Refused> {
        self.wait_admitted(call, parked, || std::future::ready(Ok::<(), Refused>(())))
            .await
            .map(|(proof, ())| proof)
    }

    /// [`Gate::wait`], taking what the call needs to start (`admit`: a run slot) once the
    /// human has decided and before the Authorize that consumes the approval: a call that
    /// cannot start is refused with the approval still unspent. `admit`'s refusal is passed
    /// through as it is; the gate's own become `E`.
    pub(crate) async fn wait_admitted<G, E, A>(
        &self,
        call: &Call,
        parked: Parked,
        admit: impl Fn() -> A,
    ) -> Result<(Authorized, G), E>
    where
        A: std::future::Future<Output = Result<G, E>>,
        E: From<Refused>,
    {
        let span = tracing::info_span!(
            "approval_wait",
            approval_id = %parked.approval_id,
            call_id = %call.ctx.call_id,
            wait_ms = parked.deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
        );
        let started = Instant::now();
        let result = self.wait_inner(call, parked, admit).instrument(span).await;
        self.inner.metrics.approval_wait(started.elapsed());
        result
    }

    async fn wait_inner<G, E, A>(
        &self,
        call: &Call,
        mut parked: Parked,
        admit: impl Fn() -> A,
    ) -> Result<(Authorized, G), E>
    where
        A: std::future::Future<Output = Result<G, E>>,
        E: From<Refused>,
    {
        loop {
            let remaining = parked.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                tracing::info!("still pending when the wait ended");
                return Err(approval_required(
                    &Pending {
                        approval_id: &parked.approval_id,
                        decision_id: &parked.decision_id,
                        rule_id: &parked.rule_id,
                        expires_at: parked.expires_at,
                    },
                    "nobody decided within the requested approval_wait",
                    true,
                )
                .into());
            }
            let approval = self
                .inner
                .authorizer
                .wait_for_approval(parked.approval_id.clone(), remaining)
                .await
                .map_err(Refused::from)?;
            use ApprovalState as S;
            match approval.state {
                S::Pending => continue,
                S::Denied => {
                    tracing::info!(decided_by = %approval.decided_by, "approval denied");
                    return Err(approval_denied(
                        &approval.approval_id,
                        "",
                        "",
                        &approval.message_to_model,
                        &approval.reason,
                    )
                    .into());
                }
                S::Expired => {
                    return Err(Refused::new(
                        Reason::ApprovalExpired,
                        format!(
                            "approval {} expired before anyone decided; repeat the same call to ask again",
                            approval.approval_id
                        ),
                        [("approval_id", approval.approval_id)],
                    )
                    .into());
                }
                S::Cancelled => {
                    return Err(Refused::new(
                        Reason::ApprovalNotPending,
                        format!(
                            "approval {} was cancelled; it can never be approved, so this call will not run",
                            approval.approval_id
                        ),
                        [("approval_id", approval.approval_id)],
                    )
                    .into());
                }
                // Approved (or already used by an identical call): asking again consumes it,
                // or parks the call on a fresh approval within the same deadline.
                S::Approved | S::Consumed | S::Completed | S::Unknown => {
                    tracing::info!(state = ?approval.state, "approval decided; authorizing again");
                    let admitted = admit().await?;
                    match self.ask(call).await.map_err(E::from)? {
                        Answer::Allowed(proof) => return Ok((proof, admitted)),
                        Answer::Pending {
                            approval_id,
                            decision_id,
                            why,
                            rule_id,
                            expires_at,
                        } => {
                            parked.approval_id = approval_id;
                            parked.decision_id = decision_id;
                            parked.message = why;
                            parked.rule_id = rule_id;
                            parked.expires_at = expires_at;
                        }
                    }
                }
            }
        }
    }

    /// One Authorize round trip, refusals already turned into [`Refused`].
    async fn ask(&self, call: &Call) -> Result<Answer, Refused> {
        let request = AuthorizeRequest {
            call_id: call.ctx.call_id.clone(),
            session_id: call.ctx.session_id.clone(),
            description: call.ctx.description.clone(),
            principal: call.principal.name.clone(),
            call: call.call.clone(),
            labels: self.inner.labels.clone(),
            executor: self.inner.identity.clone(),
        };
        // The current span's context (this call's span when exporting), else what the handler
        // saw: an in-process authorizer stores its trace id on the ledger rows.
        let traceparent = telemetry::traceparent().or_else(|| call.trace_parent.clone());
        let started = Instant::now();
        let response = self.inner.authorizer.authorize(request, traceparent).await;
        self.inner.metrics.authorize(started.elapsed());
        let AuthorizeAnswer {
            authorization,
            explanation,
        } = response?;
        let why = explanation
            .as_ref()
            .map(|e| e.message.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "the policy asks a human to approve this call".to_owned());
        let rule_id = explanation
            .as_ref()
            .map(|e| e.rule_id.clone())
            .unwrap_or_default();
        let span = &call.span;
        match authorization {
            Authorization::Allowed {
                decision_id,
                approval_id,
                lease_expires_at: _,
                hidden,
                sandbox_profile,
                denied_hosts,
            } => {
                tracing::debug!(decision_id = %decision_id, "allowed");
                let decided_by = explanation.as_ref().map(|e| e.policy_version.as_str());
                let proof = Authorized::from_allowed(
                    decision_id,
                    approval_id,
                    hidden,
                    sandbox_profile,
                    decided_by,
                    rule_id,
                    denied_hosts,
                );
                tool_span::record_decision(
                    span,
                    proof.tier(),
                    proof.rule_id(),
                    proof.decision_id(),
                    proof.approval_id(),
                );
                tool_span::record_profile(span, proof.sandbox_profile());
                Ok(Answer::Allowed(proof))
            }
            Authorization::Denied {
                decision_id,
                rule_id,
                message,
                approval_id,
            } if !approval_id.is_empty() => {
                tool_span::record_decision(span, "ask", &rule_id, &decision_id, &approval_id);
                Err(approval_denied(
                    &approval_id,
                    &decision_id,
                    &rule_id,
                    &message,
                    "",
                ))
            }
            Authorization::Denied {
                decision_id,
                rule_id,
                message,
                ..
            } => {
                tool_span::record_decision(span, "deny", &rule_id, &decision_id, "");
                tracing::info!(rule_id = %rule_id, decision_id = %decision_id, "denied by policy");
                let message = if message.is_empty() {
                    format!("the policy denies this call (rule {rule_id})")
                } else {
                    message
                };
                Err(Refused::new(
                    Reason::PolicyDenied,
                    message,
                    [("rule_id", rule_id), ("decision_id", decision_id)],
                ))
            }
            Authorization::Pending {
                decision_id,
                approval_id,
                expires_at,
            } => {
                tool_span::record_decision(span, "ask", &rule_id, &decision_id, &approval_id);
                Ok(Answer::Pending {
                    approval_id,
                    decision_id,
                    why,
                    rule_id,
                    expires_at,
                })
            }
            // Only a recorded outcome proves the call ran; an older policy service also said
            // AlreadyExecuted for calls that never reported one.
            Authorization::AlreadyExecuted {
                decision_id,
                approval_id,
                outcome,
            } => Err(match outcome.as_deref() {
                Some(o) => already_executed(&call.ctx.call_id, &decision_id, &approval_id, o),
                None => outcome_unknown(&call.ctx.call_id, &decision_id, &approval_id, None),
            }),
            Authorization::InFlight {
                decision_id,
                approval_id,
                lease_expires_at,
            } => Err(in_flight(
                &call.ctx.call_id,
                &decision_id,
                &approval_id,
                lease_expires_at,
            )),
            Authorization::OutcomeUnknown {
                decision_id,
                approval_id,
                lease_expired_at,
            } => Err(outcome_unknown(
                &call.ctx.call_id,
                &decision_id,
                &approval_id,
                lease_expired_at,
            )),
        }
    }
}

/// A pending approval, as an `APPROVAL_REQUIRED` status names it.
struct Pending<'a> {
    approval_id: &'a str,
    decision_id: &'a str,
    rule_id: &'a str,
    expires_at: Option<SystemTime>,
}

fn approval_required(p: &Pending<'_>, why: &str, waited: bool) -> Refused {
    let approval_id = p.approval_id;
    let hint = if waited {
        "it is still pending: ask a human to approve it, then repeat the same call"
    } else {
        "ask a human to approve it, then repeat the same call (same arguments and session_id; the call_id may be the same or new), or set context.approval_wait to wait for the decision"
    };
    let mut md = vec![
        ("approval_id", approval_id.to_owned()),
        ("decision_id", p.decision_id.to_owned()),
        ("message", why.to_owned()),
    ];
    if !p.rule_id.is_empty() {
        md.push(("rule_id", p.rule_id.to_owned()));
    }
    if let Some(t) = p.expires_at {
        md.push(("expires_at", rfc3339(t)));
    }
    Refused::new(
        Reason::ApprovalRequired,
        format!("{why}; this call needs approval {approval_id}: {hint}"),
        md,
    )
}

/// `PERMISSION_DENIED` / `APPROVAL_DENIED` for a human's denial (fresh, or remembered for
/// this request in this session).
fn approval_denied(
    approval_id: &str,
    decision_id: &str,
    rule_id: &str,
    message: &str,
    reason: &str,
) -> Refused {
    let said = [message, reason]
        .into_iter()
        .find(|m| !m.trim().is_empty())
        .unwrap_or("no reason given");
    let mut md = vec![
        ("approval_id", approval_id.to_owned()),
        ("message", said.to_owned()),
    ];
    for (k, v) in [("decision_id", decision_id), ("rule_id", rule_id)] {
        if !v.is_empty() {
            md.push((k, v.to_owned()));
        }
    }
    Refused::new(
        Reason::ApprovalDenied,
        format!(
            "a human denied this call (approval {approval_id}): {said}. Repeating it unchanged in this session gets the same answer; change course or ask the human"
        ),
        md,
    )
}

/// `ABORTED` / `CALL_IN_FLIGHT`: the call was allowed and may still be running.
fn in_flight(
    call_id: &str,
    decision_id: &str,
    approval_id: &str,
    lease_expires_at: Option<SystemTime>,
) -> Refused {
    let mut md = vec![("decision_id", decision_id.to_owned())];
    if !approval_id.is_empty() {
        md.push(("approval_id", approval_id.to_owned()));
    }
    let until = lease_expires_at.map(rfc3339);
    if let Some(u) = &until {
        md.push(("lease_expires_at", u.clone()));
    }
    Refused::new(
        Reason::CallInFlight,
        format!(
            "call_id {call_id} was allowed (decision {}) and may still be running: it was not started again; \
             repeat the same call_id after {} to learn how it ended",
            decision_id,
            until.as_deref().unwrap_or("its lease runs out")
        ),
        md,
    )
}

/// `ALREADY_EXISTS` / `OUTCOME_UNKNOWN`: allowed, lease lapsed, nothing reported.
fn outcome_unknown(
    call_id: &str,
    decision_id: &str,
    approval_id: &str,
    lapsed: Option<SystemTime>,
) -> Refused {
    let mut md = vec![("decision_id", decision_id.to_owned())];
    if !approval_id.is_empty() {
        md.push(("approval_id", approval_id.to_owned()));
    }
    if let Some(t) = lapsed {
        md.push(("lease_expired_at", rfc3339(t)));
    }
    Refused::new(
        Reason::OutcomeUnknown,
        format!(
            "call_id {call_id} was allowed (decision {decision_id}) but no outcome was reported before its lease ran out, \
             so whether it ran is unknown; it never runs under this call_id: to try again, send the call with a new call_id"
        ),
        md,
    )
}

/// `ALREADY_EXISTS` / `ALREADY_EXECUTED` with a compact summary of the recorded outcome.
fn already_executed(call_id: &str, decision_id: &str, approval_id: &str, o: &Outcome) -> Refused {
    let mut md = vec![("decision_id", decision_id.to_owned())];
    if !approval_id.is_empty() {
        md.push(("approval_id", approval_id.to_owned()));
    }
    let mut parts = Vec::new();
    if let Some(ended) = &o.ended {
        let (k, v) = match ended {
            Ended::Exited(code) => ("exit_code", code.to_string()),
            Ended::Signaled { name, .. } => ("signal", name.clone()),
            Ended::TimedOut { .. } => ("ended", "timed_out".to_owned()),
            Ended::Cancelled(cause) => ("ended", format!("cancelled:{cause}")),
            Ended::SpawnFailed { reason, .. } => ("ended", format!("spawn_failed:{reason}")),
            Ended::Completed(_) => ("ended", "completed".to_owned()),
        };
        parts.push(format!("{k}={v}"));
        md.push((k, v));
    }
    if let Some(i) = &o.isolation {
        md.push(("sandbox_profile", i.sandbox_profile.clone()));
    }
    for (k, bytes) in [
        ("stdout_bytes", o.stdout.map(|s| s.total_bytes)),
        ("stderr_bytes", o.stderr.map(|s| s.total_bytes)),
    ] {
        if let Some(n) = bytes {
            parts.push(format!("{k}={n}"));
            md.push((k, n.to_string()));
        }
    }
    for (k, v) in [
        ("result_code", &o.result_code),
        ("result_reason", &o.result_reason),
    ] {
        if !v.is_empty() {
            parts.push(format!("{k}={v}"));
            md.push((k, v.clone()));
        }
    }
    let summary = format!("outcome: {}", parts.join(" "));
    Refused::new(
        Reason::AlreadyExecuted,
        format!(
            "call_id {call_id} already ran (decision {decision_id}; {summary}); it is not run again: use a new call_id to run it again"
        ),
        md,
    )
}

#[cfg(test)]
mod tests;
