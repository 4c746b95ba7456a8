//! The authorizer's domain types ↔ the policy service's v1 messages and statuses. The gRPC
//! authorizer and `toolgate up`'s in-process one both go through these functions, so the two
//! paths read every answer the same way.

use std::time::{Duration, SystemTime};

use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::convert::{audit_to_wire, identity_to_wire, tool_call_to_wire};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::status;
use toolgate_core::Reason;

use super::api::ExecutorIdentity;
use super::api::{
    ApprovalState, ApprovalStatus, AuthorizeRequest, Ended, Explanation, Finished, HiddenGlobs,
    OutcomeReport, PolicyAnswer, PolicyFailure, RecordedOutcome, Verdict,
};
use super::sessions::{EndReason, SessionRefusal, SessionState, StoredSession};
use crate::wire::run::{exit_status, usage};

/// `Authorize`'s request.
pub fn authorize_request(r: AuthorizeRequest) -> pb::AuthorizeRequest {
    pb::AuthorizeRequest {
        context: Some(common::CallContext {
            call_id: r.call_id,
            session_id: r.session_id,
            description: r.description,
            approval_wait: None,
        }),
        call: Some(tool_call_to_wire(r.call)),
        principal: r.principal,
        labels: r.labels,
        executor: Some(identity_to_wire(r.executor)),
    }
}

fn time(t: Option<prost_types::Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(t).ok())
}

/// `Authorize`'s answer; one without a result is a failure (nothing may run on it).
pub fn policy_answer(r: pb::AuthorizeResponse) -> Result<PolicyAnswer, PolicyFailure> {
    use pb::authorize_response::Result as R;
    let verdict = match r.result {
        Some(R::Allowed(a)) => Verdict::Allowed {
            decision_id: a.decision_id,
            approval_id: a.approval_id,
            hidden: a.hidden.map(|h| HiddenGlobs {
                policy_version: h.policy_version,
                globs: h.globs,
            }),
            sandbox_profile: a.sandbox_profile,
            denied_hosts: a.denied_hosts,
        },
        Some(R::Pending(p)) => Verdict::Pending {
            decision_id: p.decision_id,
            approval_id: p.approval_id,
            expires_at: time(p.expires_at),
        },
        Some(R::Denied(d)) => Verdict::Denied {
            decision_id: d.decision_id,
            rule_id: d.rule_id,
            message: d.message,
            approval_id: d.approval_id,
        },
        Some(R::AlreadyExecuted(x)) => Verdict::AlreadyExecuted {
            decision_id: x.decision_id,
            approval_id: x.approval_id,
            outcome: x.outcome.map(recorded_outcome),
        },
        Some(R::InFlight(f)) => Verdict::InFlight {
            decision_id: f.decision_id,
            approval_id: f.approval_id,
            lease_expires_at: time(f.lease_expires_at),
        },
        Some(R::OutcomeUnknown(u)) => Verdict::OutcomeUnknown {
            decision_id: u.decision_id,
            approval_id: u.approval_id,
            lease_expired_at: time(u.lease_expired_at),
        },
        None => {
            return Err(PolicyFailure::new(
                Reason::Internal,
                "the policy service answered Authorize without a result; nothing was run",
                [],
            ));
        }
    };
    Ok(PolicyAnswer {
        verdict,
        explanation: r.explanation.map(|e| Explanation {
            rule_id: deciding_rule(&e),
            message: e.message,
            policy_version: e.policy_version,
        }),
    })
}

/// The deciding rule of an explanation: the first match at the final tier; `default` when
/// no rule matched.
fn deciding_rule(e: &pb::Explanation) -> String {
    e.matches
        .iter()
        .find(|m| m.tier == e.tier)
        .map_or_else(|| "default".to_owned(), |m| m.rule_id.clone())
}

fn recorded_outcome(o: pb::Outcome) -> RecordedOutcome {
    use common::exit_status::Status as S;
    RecordedOutcome {
        ended: o.status.and_then(|s| s.status).map(|s| match s {
            S::Exited(code) => Ended::Exited(code),
            S::Signaled(s) => Ended::Signaled(s.name),
            S::TimedOut(_) => Ended::TimedOut,
            S::Cancelled(c) => Ended::Cancelled(c.cause),
            S::SpawnFailed(f) => Ended::SpawnFailed(f.reason),
            S::Completed(_) => Ended::Completed,
        }),
        sandbox_profile: o.isolation.map(|i| i.sandbox_profile),
        stdout_bytes: o.stdout.map(|s| s.total_bytes),
        stderr_bytes: o.stderr.map(|s| s.total_bytes),
        result_code: o.result_code,
        result_reason: o.result_reason,
    }
}

/// `RecordOutcome`'s request.
pub fn outcome_request(r: OutcomeReport) -> pb::RecordOutcomeRequest {
    let times = Some(common::Timestamps {
        started_at: Some(r.started_at.into()),
        finished_at: Some(r.finished_at.into()),
    });
    let mut outcome = match r.finished {
        Finished::Fs { code, reason } => pb::Outcome {
            status: (code == "OK").then(|| common::ExitStatus {
                status: Some(common::exit_status::Status::Completed(common::Completed {
                    summary: "ok".to_owned(),
                })),
            }),
            result_code: code.to_owned(),
            result_reason: reason,
            ..Default::default()
        },
        Finished::Run {
            status,
            usage: used,
            stdout,
            stderr,
            isolation,
            audit,
            limit,
            network,
        } => {
            let stats = |s: &super::api::OutputStats| common::OutputStats {
                total_bytes: s.total_bytes,
                dropped_bytes: s.dropped_bytes,
                truncated: s.truncated,
            };
            pb::Outcome {
                status: Some(exit_status(&status)),
                usage: Some(usage(&used)),
                stdout: Some(stats(&stdout)),
                stderr: Some(stats(&stderr)),
                isolation: isolation.map(|i| pb::RunIsolation {
                    sandbox_profile: i.sandbox_profile,
                    sandboxed: i.sandboxed,
                    namespaces: i.namespaces.iter().map(|n| (*n).to_owned()).collect(),
                    landlock_abi: i.landlock_abi,
                    seccomp: i.seccomp,
                    network: i.network,
                    pid_limit: i.pid_limit.unwrap_or(0),
                    limits: Some(crate::wire::run::limits_to_wire(&i.limits)),
                }),
                audit: audit.as_deref().map(audit_to_wire),
                limit_exceeded: limit.map(crate::wire::run::limit_to_wire),
                network: network.iter().map(destination_to_wire).collect(),
                ..Default::default()
            }
        }
        Finished::Connection(d) => pb::Outcome {
            status: Some(common::ExitStatus {
                status: Some(common::exit_status::Status::Completed(common::Completed {
                    summary: "ok".to_owned(),
                })),
            }),
            result_code: "OK".to_owned(),
            network: vec![destination_to_wire(&d)],
            ..Default::default()
        },
        Finished::NotStarted { code, reason } => pb::Outcome {
            not_started: true,
            result_code: code.to_owned(),
            result_reason: reason,
            ..Default::default()
        },
        Finished::Disconnected => pb::Outcome {
            status: Some(common::ExitStatus {
                status: Some(common::exit_status::Status::Cancelled(common::Cancelled {
                    cause: toolgate_process::CancelCause::ClientDisconnected
                        .as_str()
                        .to_owned(),
                })),
            }),
            ..Default::default()
        },
    };
    outcome.times = times;
    outcome.executor = Some(identity_to_wire(r.executor));
    pb::RecordOutcomeRequest {
        decision_id: r.decision_id,
        outcome: Some(outcome),
    }
}

/// A destination of a run's report on the wire.
pub fn destination_to_wire(d: &crate::egress::Destination) -> common::NetworkDestination {
    common::NetworkDestination {
        host: d.host.clone(),
        port: u32::from(d.port),
        protocol: "tcp".to_owned(),
        address: d.address.clone(),
        tier: match d.tier {
            "auto" => common::Tier::Auto,
            "ask" => common::Tier::Ask,
            "deny" => common::Tier::Deny,
            _ => common::Tier::Unspecified,
        } as i32,
        rule_id: d.rule_id.clone(),
        approval_id: d.approval_id.clone(),
        connections: d.connections,
        refused: d.refused,
        bytes_sent: d.bytes_sent,
        bytes_received: d.bytes_received,
        refusal: d.refusal.to_owned(),
        message: d.message.clone(),
    }
}

/// `WaitForApproval`'s request.
pub fn wait_request(approval_id: &str, timeout: Duration) -> pb::WaitForApprovalRequest {
    pb::WaitForApprovalRequest {
        approval_id: approval_id.to_owned(),
        timeout: prost_types::Duration::try_from(timeout).ok(),
    }
}

/// `WaitForApproval`'s answer; one without the approval is a failure.
pub fn approval_status(r: pb::WaitForApprovalResponse) -> Result<ApprovalStatus, PolicyFailure> {
    let a = r.approval.ok_or_else(|| {
        PolicyFailure::new(
            Reason::Internal,
            "the policy service answered WaitForApproval without the approval",
            [],
        )
    })?;
    use pb::ApprovalState as S;
    let state = match S::try_from(a.state).unwrap_or(S::Unspecified) {
        // An unspecified state is not a decision: keep waiting.
        S::Pending | S::Unspecified => ApprovalState::Pending,
        S::Approved => ApprovalState::Approved,
        S::Denied => ApprovalState::Denied,
        S::Expired => ApprovalState::Expired,
        S::Cancelled => ApprovalState::Cancelled,
        S::Consumed => ApprovalState::Consumed,
        S::Completed => ApprovalState::Completed,
        S::Unknown => ApprovalState::Unknown,
    };
    Ok(ApprovalStatus {
        approval_id: a.approval_id,
        state,
        decided_by: a.decided_by,
        message_to_model: a.message_to_model,
        reason: a.reason,
    })
}

/// The failure a status from (or about) the policy service is.
pub fn failure(s: &Status) -> PolicyFailure {
    let (reason, message, metadata) = status::parts(s);
    PolicyFailure {
        reason,
        message,
        metadata,
    }
}

/// A session's ttl on the wire.
fn ttl(d: Duration) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(d).ok()
}

/// `ClaimSession`'s request, for the executor `executor`.
pub fn claim_session_request(
    executor: &ExecutorIdentity,
    session_id: String,
    principal: String,
    claim_ttl: Duration,
) -> pb::ClaimSessionRequest {
    pb::ClaimSessionRequest {
        session_id,
        principal,
        executor: Some(identity_to_wire(executor.clone())),
        ttl: ttl(claim_ttl),
    }
}

/// `ClaimSession`'s answer; one without a session is a failure (no sandbox may start on it).
pub fn claimed_session(r: pb::ClaimSessionResponse) -> Result<StoredSession, SessionRefusal> {
    let s = r.session.ok_or_else(|| {
        SessionRefusal::Unavailable(PolicyFailure::new(
            Reason::PolicyUnavailable,
            "the policy service answered ClaimSession without the session; no sandbox was started",
            [],
        ))
    })?;
    let state = s.state.unwrap_or_default();
    Ok(StoredSession {
        session_id: s.session_id,
        principal: s.principal,
        state: SessionState {
            cwd: state.cwd,
            env: state.env.into_iter().collect(),
        },
        claim_expires_at: time(s.claim_expires_at).unwrap_or(SystemTime::UNIX_EPOCH),
        resumed: r.resumed,
    })
}

/// `RenewSessions`' request.
pub fn renew_sessions_request(
    executor: &ExecutorIdentity,
    session_ids: Vec<String>,
    claim_ttl: Duration,
) -> pb::RenewSessionsRequest {
    pb::RenewSessionsRequest {
        executor: Some(identity_to_wire(executor.clone())),
        session_ids,
        ttl: ttl(claim_ttl),
    }
}

/// `UpdateSession`'s request.
pub fn update_session_request(
    executor: &ExecutorIdentity,
    session_id: String,
    state: SessionState,
) -> pb::UpdateSessionRequest {
    pb::UpdateSessionRequest {
        session_id,
        executor: Some(identity_to_wire(executor.clone())),
        state: Some(common::SessionState {
            cwd: state.cwd,
            env: state.env.into_iter().collect(),
        }),
    }
}

/// `EndSession`'s request.
pub fn end_session_request(
    executor: &ExecutorIdentity,
    session_id: String,
    reason: EndReason,
    runs_stopped: u32,
) -> pb::EndSessionRequest {
    pb::EndSessionRequest {
        session_id,
        executor: Some(identity_to_wire(executor.clone())),
        reason: reason.as_str().to_owned(),
        runs_stopped,
    }
}

/// `AbandonRuns`' request.
pub fn abandon_runs_request(executor: &ExecutorIdentity) -> pb::AbandonRunsRequest {
    pb::AbandonRunsRequest {
        executor: Some(identity_to_wire(executor.clone())),
    }
}

/// Whether a status is the policy service's answer about a session (its `ErrorInfo` names
/// the session) rather than about the call or the credential.
pub fn is_session_answer(s: &Status) -> bool {
    status::error_info(s).is_some_and(|(_, md)| md.contains_key("session_id"))
}

/// A refused claim or update: `SESSION_ELSEWHERE` names the holder, a `ROLE_NOT_PERMITTED`
/// about the session is another principal's session; anything else is a failure.
pub fn session_refusal(s: &Status) -> SessionRefusal {
    let f = failure(s);
    let md = |k: &str| {
        f.metadata
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    match f.reason {
        Reason::SessionElsewhere => SessionRefusal::Elsewhere {
            executor_id: md("executor_id").unwrap_or_default(),
            pod: md("pod").unwrap_or_default(),
            claim_expires_at: md("claim_expires_at")
                .and_then(|t| t.parse::<prost_types::Timestamp>().ok())
                .and_then(|t| SystemTime::try_from(t).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH),
        },
        Reason::RoleNotPermitted if md("session_id").is_some() => SessionRefusal::OtherPrincipal,
        _ => SessionRefusal::Unavailable(f),
    }
}

/// The status a client gets for a failure.
pub fn failure_status(f: PolicyFailure) -> Status {
    status::relayed(f.reason, &f.message, f.metadata)
}

impl From<PolicyFailure> for Status {
    fn from(f: PolicyFailure) -> Status {
        failure_status(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_refusal_keeps_its_code_reason_message_and_metadata() {
        let s = status::status(
            Reason::PolicyUnavailable,
            "the policy service at http://p is unavailable",
            [("endpoint", "http://p".to_owned())],
        );
        let back = failure_status(failure(&s));
        assert_eq!(back.code(), s.code());
        assert_eq!(back.message(), s.message());
        assert_eq!(status::error_info(&back), status::error_info(&s));
        // A status without ErrorInfo gets a reason by its code, never a silent OK.
        let bare = failure(&Status::invalid_argument("bad"));
        assert_eq!(bare.reason, Reason::InvalidRequest);
        assert!(!bare.is_retriable());
        assert!(failure(&s).is_retriable());
    }

    #[test]
    fn answers_without_their_payload_are_failures_and_unspecified_states_keep_waiting() {
        let e = policy_answer(pb::AuthorizeResponse::default()).unwrap_err();
        assert_eq!(e.reason, Reason::Internal);
        let e = approval_status(pb::WaitForApprovalResponse::default()).unwrap_err();
        assert_eq!(e.reason, Reason::Internal);
        let a = approval_status(pb::WaitForApprovalResponse {
            approval: Some(pb::Approval::default()),
        })
        .unwrap();
        assert_eq!(a.state, ApprovalState::Pending);
    }

    #[test]
    fn the_deciding_rule_is_the_first_match_at_the_final_tier() {
        let m = |id: &str, tier: common::Tier| pb::RuleMatch {
            rule_id: id.into(),
            tier: tier as i32,
            ..Default::default()
        };
        let answer = policy_answer(pb::AuthorizeResponse {
            result: Some(pb::authorize_response::Result::Denied(pb::Denied::default())),
            explanation: Some(pb::Explanation {
                tier: common::Tier::Deny as i32,
                matches: vec![
                    m("read-ok", common::Tier::Auto),
                    m("no-rm", common::Tier::Deny),
                ],
                policy_version: "v1".into(),
                ..Default::default()
            }),
            request_digest: String::new(),
        })
        .unwrap();
        let e = answer.explanation.unwrap();
        assert_eq!(
            (e.rule_id.as_str(), e.policy_version.as_str()),
            ("no-rm", "v1")
        );
        let none = policy_answer(pb::AuthorizeResponse {
            result: Some(pb::authorize_response::Result::Denied(pb::Denied::default())),
            explanation: Some(pb::Explanation::default()),
            request_digest: String::new(),
        })
        .unwrap();
        assert_eq!(none.explanation.unwrap().rule_id, "default");
    }

    #[test]
    fn outcomes_carry_times_executor_and_how_the_call_ended() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let t1 = t0 + Duration::from_secs(1);
        let report = |finished| OutcomeReport {
            decision_id: "d-1".into(),
            started_at: t0,
            finished_at: t1,
            finished,
            executor: ExecutorIdentity {
                executor_id: "e-1".into(),
                ..Default::default()
            },
        };
        let ok = outcome_request(report(Finished::Fs {
            code: "OK",
            reason: String::new(),
        }));
        let o = ok.outcome.unwrap();
        assert_eq!(ok.decision_id, "d-1");
        assert_eq!(o.result_code, "OK");
        assert!(matches!(
            o.status.and_then(|s| s.status),
            Some(common::exit_status::Status::Completed(_))
        ));
        assert_eq!(o.executor.unwrap().executor_id, "e-1");
        let times = o.times.unwrap();
        assert_eq!(time(times.started_at), Some(t0));
        assert_eq!(time(times.finished_at), Some(t1));

        let failed = outcome_request(report(Finished::Fs {
            code: "NOT_FOUND",
            reason: "NOT_FOUND".into(),
        }))
        .outcome
        .unwrap();
        assert!(failed.status.is_none());
        assert_eq!(failed.result_reason, "NOT_FOUND");

        let gone = outcome_request(report(Finished::Disconnected))
            .outcome
            .unwrap();
        assert!(matches!(
            gone.status.and_then(|s| s.status),
            Some(common::exit_status::Status::Cancelled(c)) if c.cause == "client_disconnected"
        ));
    }
}
