//! `Authorize`: the request and the answer.

use toolgate_core::Reason;
use toolgate_policy_api::{
    Authorization, AuthorizeAnswer, AuthorizeRequest, Error, Explanation, HiddenGlobs,
};

use super::outcome::{outcome_from_wire, outcome_to_wire};
use super::{Invalid, time_from_wire, time_to_wire};
use crate::common::v1 as common;
use crate::convert::{
    identity_from_wire, identity_to_wire, tool_call_from_wire, tool_call_to_wire,
};
use crate::policy::v1 as pb;

/// `Authorize`'s request on the wire.
pub fn authorize_request_to_wire(r: AuthorizeRequest) -> pb::AuthorizeRequest {
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

/// `Authorize`'s request in protocol terms: the context and a valid call are required (the
/// identifiers are checked by the policy, which knows their rules).
pub fn authorize_request_from_wire(r: pb::AuthorizeRequest) -> Result<AuthorizeRequest, Invalid> {
    let context = r
        .context
        .ok_or_else(|| Invalid::new("context", "context (call_id, session_id) is required"))?;
    let call = r
        .call
        .ok_or_else(|| Invalid::new("call", "call is required"))?;
    let call =
        tool_call_from_wire(call).map_err(|(field, message)| Invalid::new(field, message))?;
    Ok(AuthorizeRequest {
        call_id: context.call_id,
        session_id: context.session_id,
        description: context.description,
        principal: r.principal,
        call,
        labels: r.labels,
        executor: r.executor.map(identity_from_wire).unwrap_or_default(),
    })
}

/// An [`Authorization`] as `AuthorizeResponse.result`. (The response's explanation is the
/// policy's whole decision, which the policy service maps itself.)
pub fn authorization_to_wire(a: Authorization) -> pb::authorize_response::Result {
    use pb::authorize_response::Result as R;
    match a {
        Authorization::Allowed {
            decision_id,
            approval_id,
            lease_expires_at,
            hidden,
            sandbox_profile,
            denied_hosts,
        } => R::Allowed(pb::Allowed {
            decision_id,
            approval_id,
            lease_expires_at: lease_expires_at.map(time_to_wire),
            hidden: hidden.map(|h| pb::HiddenPaths {
                policy_version: h.policy_version,
                globs: h.globs,
            }),
            sandbox_profile,
            denied_hosts,
        }),
        Authorization::Pending {
            decision_id,
            approval_id,
            expires_at,
        } => R::Pending(pb::Pending {
            decision_id,
            approval_id,
            expires_at: expires_at.map(time_to_wire),
        }),
        Authorization::Denied {
            decision_id,
            rule_id,
            message,
            approval_id,
        } => R::Denied(pb::Denied {
            decision_id,
            rule_id,
            message,
            approval_id,
        }),
        Authorization::AlreadyExecuted {
            decision_id,
            approval_id,
            outcome,
        } => R::AlreadyExecuted(pb::AlreadyExecuted {
            decision_id,
            approval_id,
            outcome: outcome.map(|o| outcome_to_wire(*o)),
        }),
        Authorization::InFlight {
            decision_id,
            approval_id,
            lease_expires_at,
        } => R::InFlight(pb::InFlight {
            decision_id,
            approval_id,
            lease_expires_at: lease_expires_at.map(time_to_wire),
        }),
        Authorization::OutcomeUnknown {
            decision_id,
            approval_id,
            lease_expired_at,
        } => R::OutcomeUnknown(pb::OutcomeUnknown {
            decision_id,
            approval_id,
            lease_expired_at: lease_expired_at.map(time_to_wire),
        }),
    }
}

/// `Authorize`'s answer as the executor reads it; one without a result is an error (nothing
/// may run on it).
pub fn authorize_answer_from_wire(r: pb::AuthorizeResponse) -> Result<AuthorizeAnswer, Error> {
    use pb::authorize_response::Result as R;
    let authorization = match r.result {
        Some(R::Allowed(a)) => Authorization::Allowed {
            decision_id: a.decision_id,
            approval_id: a.approval_id,
            lease_expires_at: time_from_wire(a.lease_expires_at),
            hidden: a.hidden.map(|h| HiddenGlobs {
                policy_version: h.policy_version,
                globs: h.globs,
            }),
            sandbox_profile: a.sandbox_profile,
            denied_hosts: a.denied_hosts,
        },
        Some(R::Pending(p)) => Authorization::Pending {
            decision_id: p.decision_id,
            approval_id: p.approval_id,
            expires_at: time_from_wire(p.expires_at),
        },
        Some(R::Denied(d)) => Authorization::Denied {
            decision_id: d.decision_id,
            rule_id: d.rule_id,
            message: d.message,
            approval_id: d.approval_id,
        },
        Some(R::AlreadyExecuted(x)) => Authorization::AlreadyExecuted {
            decision_id: x.decision_id,
            approval_id: x.approval_id,
            outcome: x.outcome.map(|o| Box::new(outcome_from_wire(o))),
        },
        Some(R::InFlight(f)) => Authorization::InFlight {
            decision_id: f.decision_id,
            approval_id: f.approval_id,
            lease_expires_at: time_from_wire(f.lease_expires_at),
        },
        Some(R::OutcomeUnknown(u)) => Authorization::OutcomeUnknown {
            decision_id: u.decision_id,
            approval_id: u.approval_id,
            lease_expired_at: time_from_wire(u.lease_expired_at),
        },
        None => {
            return Err(Error::new(
                Reason::Internal,
                "the policy service answered Authorize without a result; nothing was run",
                [],
            ));
        }
    };
    Ok(AuthorizeAnswer {
        authorization,
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

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{ToolCall, ToolKind};

    #[test]
    fn answers_without_a_result_are_errors() {
        let e = authorize_answer_from_wire(pb::AuthorizeResponse::default()).unwrap_err();
        assert_eq!(e.reason, Reason::Internal);
    }

    #[test]
    fn the_deciding_rule_is_the_first_match_at_the_final_tier() {
        let m = |id: &str, tier: common::Tier| pb::RuleMatch {
            rule_id: id.into(),
            tier: tier as i32,
            ..Default::default()
        };
        let answer = authorize_answer_from_wire(pb::AuthorizeResponse {
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
        let none = authorize_answer_from_wire(pb::AuthorizeResponse {
            result: Some(pb::authorize_response::Result::Denied(pb::Denied::default())),
            explanation: Some(pb::Explanation::default()),
            request_digest: String::new(),
        })
        .unwrap();
        assert_eq!(none.explanation.unwrap().rule_id, "default");
    }

    #[test]
    fn requests_and_authorizations_round_trip() {
        let request = AuthorizeRequest {
            call_id: "c1".into(),
            session_id: "s1".into(),
            description: "why".into(),
            principal: "agent".into(),
            call: ToolCall::fs(ToolKind::FsRead, "a.txt"),
            labels: [("team".to_owned(), "x".to_owned())].into(),
            executor: toolgate_core::ExecutorIdentity {
                executor_id: "e1".into(),
                ..Default::default()
            },
        };
        let back = authorize_request_from_wire(authorize_request_to_wire(request.clone())).unwrap();
        assert_eq!(
            (
                back.call_id,
                back.session_id,
                back.description,
                back.principal
            ),
            (
                request.call_id,
                request.session_id,
                request.description,
                request.principal
            )
        );
        assert_eq!(back.call, request.call);
        assert_eq!(back.labels, request.labels);
        assert_eq!(back.executor, request.executor);
        let missing = authorize_request_from_wire(pb::AuthorizeRequest::default()).unwrap_err();
        assert_eq!(missing.field, "context");

        let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(7);
        for a in [
            Authorization::Allowed {
                decision_id: "d".into(),
                approval_id: String::new(),
                lease_expires_at: Some(t),
                hidden: Some(HiddenGlobs {
                    policy_version: "v1".into(),
                    globs: vec!["**/.env".into()],
                }),
                sandbox_profile: "workspace".into(),
                denied_hosts: vec!["evil.example".into()],
            },
            Authorization::Pending {
                decision_id: "d".into(),
                approval_id: "a".into(),
                expires_at: Some(t),
            },
            Authorization::Denied {
                decision_id: "d".into(),
                rule_id: "r".into(),
                message: "no".into(),
                approval_id: "a".into(),
            },
            Authorization::InFlight {
                decision_id: "d".into(),
                approval_id: String::new(),
                lease_expires_at: Some(t),
            },
            Authorization::OutcomeUnknown {
                decision_id: "d".into(),
                approval_id: String::new(),
                lease_expired_at: None,
            },
        ] {
            let wire = pb::AuthorizeResponse {
                result: Some(authorization_to_wire(a.clone())),
                ..Default::default()
            };
            assert_eq!(authorize_answer_from_wire(wire).unwrap().authorization, a);
        }
    }
}
