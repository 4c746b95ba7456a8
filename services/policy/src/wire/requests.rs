//! Wire requests → the core's domain requests. Every field is validated here; an invalid
//! one is an [`PolicyError::Invalid`] naming the wire field.

use std::time::Duration;

use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy_wire::{approval_state_from_wire, wait_request_from_wire};
use toolgate_ledger::{ApprovalFilter, ApprovalId, ApprovalState, PageToken, Verdict};
use toolgate_policy_engine::CallContext;

use super::tool_call;
use crate::core::{
    CancelRequest, ClassifyRequest, DecideRequest, ListApprovalsRequest, PolicyError, Remember,
    RuleScope, WaitRequest, parse_id,
};

/// `Classify`'s request; an empty principal is the caller's.
pub(crate) fn classify_request(
    req: pb::ClassifyRequest,
    caller: &str,
) -> Result<ClassifyRequest, PolicyError> {
    Ok(ClassifyRequest {
        call: tool_call(req.call)?,
        context: CallContext {
            session_id: req.session_id,
            principal: if req.principal.is_empty() {
                caller.to_owned()
            } else {
                req.principal
            },
            labels: req.labels.into_iter().collect(),
        },
    })
}

/// `WaitForApproval`'s request; no timeout (or a negative one) does not wait.
pub(crate) fn wait_request(req: pb::WaitForApprovalRequest) -> Result<WaitRequest, PolicyError> {
    let (approval_id, timeout) = wait_request_from_wire(req);
    Ok(WaitRequest {
        approval_id: parse_id("approval_id", approval_id)?,
        timeout,
    })
}

/// `ListApprovals`'s request: pages of 50 unless asked, at most 500.
pub(crate) fn list_request(
    req: pb::ListApprovalsRequest,
) -> Result<ListApprovalsRequest, PolicyError> {
    let (filter, states) = filter(&req.states, req.session_id, req.principal)?;
    let page = req.page.unwrap_or_default();
    let page_size = if page.page_size == 0 {
        50
    } else {
        page.page_size.min(500)
    } as usize;
    let page_token = if page.page_token.is_empty() {
        None
    } else {
        Some(PageToken::try_from(page.page_token).map_err(|_| {
            PolicyError::invalid(
                "page.page_token",
                "page.page_token is not a token returned by a previous ListApprovals",
            )
        })?)
    };
    Ok(ListApprovalsRequest {
        filter,
        states,
        page_size,
        page_token,
    })
}

/// An approval id field.
pub(crate) fn approval_id(value: String) -> Result<ApprovalId, PolicyError> {
    parse_id("approval_id", value)
}

/// `DecideApproval`'s request.
pub(crate) fn decide_request(req: pb::DecideApprovalRequest) -> Result<DecideRequest, PolicyError> {
    let approval_id = approval_id(req.approval_id)?;
    let scope = pb::ApprovalScope::try_from(req.scope).map_err(|_| {
        PolicyError::invalid(
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
            return Err(PolicyError::invalid(
                "verdict",
                "verdict must be VERDICT_APPROVE or VERDICT_DENY",
            ));
        }
    };
    let ttl = match req.ttl {
        None => None,
        Some(t) => match Duration::try_from(t) {
            Ok(d) if !d.is_zero() => Some(d),
            _ => {
                return Err(PolicyError::invalid(
                    "ttl",
                    "ttl must be a positive duration",
                ));
            }
        },
    };
    let remember = match req.remember {
        None => None,
        Some(r) => {
            if verdict == Verdict::Deny {
                return Err(PolicyError::invalid(
                    "remember",
                    "remember is only for VERDICT_APPROVE; a denial is never learned",
                ));
            }
            Some(Remember {
                scope: rule_scope(r.scope)?,
                ttl: match r.ttl {
                    None => None,
                    Some(t) => match Duration::try_from(t) {
                        Ok(d) if !d.is_zero() => Some(d),
                        _ => {
                            return Err(PolicyError::invalid(
                                "remember.ttl",
                                "remember.ttl must be a positive duration (unset: until revoked)",
                            ));
                        }
                    },
                },
            })
        }
    };
    Ok(DecideRequest {
        approval_id,
        verdict,
        reason: non_empty(req.reason),
        message: non_empty(req.message_to_model),
        ttl,
        remember,
    })
}

/// A wire learned-rule scope; unspecified is the narrowest, session.
pub(crate) fn rule_scope(v: i32) -> Result<RuleScope, PolicyError> {
    match pb::LearnedRuleScope::try_from(v) {
        Ok(pb::LearnedRuleScope::Unspecified | pb::LearnedRuleScope::Session) => {
            Ok(RuleScope::Session)
        }
        Ok(pb::LearnedRuleScope::Workspace) => Ok(RuleScope::Workspace),
        Ok(pb::LearnedRuleScope::All) => Ok(RuleScope::All),
        Err(_) => Err(PolicyError::invalid(
            "scope",
            format!("scope {v} is not LEARNED_RULE_SCOPE_SESSION, _WORKSPACE or _ALL"),
        )),
    }
}

/// `CancelApproval`'s request.
pub(crate) fn cancel_request(req: pb::CancelApprovalRequest) -> Result<CancelRequest, PolicyError> {
    Ok(CancelRequest {
        approval_id: approval_id(req.approval_id)?,
        reason: non_empty(req.reason),
    })
}

fn non_empty(s: String) -> Option<String> {
    (!s.trim().is_empty()).then_some(s)
}

/// The ledger filter for wire filters, plus the states to check in memory when several are
/// asked for (the ledger filters on one state at most).
pub(crate) fn filter(
    states: &[i32],
    session_id: String,
    principal: String,
) -> Result<(ApprovalFilter, Vec<ApprovalState>), PolicyError> {
    let mut parsed = Vec::new();
    for s in states {
        let unknown = || {
            PolicyError::invalid(
                "states",
                format!("states: {s} is not an approval state (PENDING ... UNKNOWN)"),
            )
        };
        let st = approval_state_from_wire(*s)
            .map_err(|_| unknown())?
            .ok_or_else(unknown)?;
        if !parsed.contains(&st) {
            parsed.push(st);
        }
    }
    let f = ApprovalFilter {
        state: (parsed.len() == 1).then(|| parsed[0]),
        session_id: if session_id.is_empty() {
            None
        } else {
            Some(parse_id("session_id", session_id)?)
        },
        principal: if principal.is_empty() {
            None
        } else {
            Some(parse_id("principal", principal)?)
        },
    };
    Ok((f, parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

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
