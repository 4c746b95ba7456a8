//! `WaitForApproval` and approval states.

use std::time::Duration;

use toolgate_core::Reason;
use toolgate_policy_api::{ApprovalState, ApprovalStatus, Error};

use super::{Invalid, duration_to_wire};
use crate::policy::v1 as pb;

/// `WaitForApproval`'s request.
pub fn wait_request_to_wire(approval_id: String, timeout: Duration) -> pb::WaitForApprovalRequest {
    pb::WaitForApprovalRequest {
        approval_id,
        timeout: duration_to_wire(timeout),
    }
}

/// `WaitForApproval`'s request in domain terms: the approval id and how long to wait; no
/// timeout (or a negative one) does not wait.
pub fn wait_request_from_wire(r: pb::WaitForApprovalRequest) -> (String, Duration) {
    let timeout = r
        .timeout
        .and_then(|t| Duration::try_from(t).ok())
        .unwrap_or(Duration::ZERO);
    (r.approval_id, timeout)
}

/// `WaitForApproval`'s answer as the waiting executor reads it; one without the approval is
/// an error.
pub fn approval_status_from_wire(r: pb::WaitForApprovalResponse) -> Result<ApprovalStatus, Error> {
    let a = r.approval.ok_or_else(|| {
        Error::new(
            Reason::Internal,
            "the policy service answered WaitForApproval without the approval",
            [],
        )
    })?;
    Ok(ApprovalStatus {
        approval_id: a.approval_id,
        // An unspecified state is not a decision: keep waiting.
        state: approval_state_from_wire(a.state)
            .ok()
            .flatten()
            .unwrap_or(ApprovalState::Pending),
        decided_by: a.decided_by,
        message_to_model: a.message_to_model,
        reason: a.reason,
    })
}

/// An approval state on the wire.
pub fn approval_state_to_wire(s: ApprovalState) -> pb::ApprovalState {
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

/// A wire approval state: `None` for unspecified, an error for a number that is no state.
pub fn approval_state_from_wire(v: i32) -> Result<Option<ApprovalState>, Invalid> {
    let s = pb::ApprovalState::try_from(v).map_err(|_| {
        Invalid::new(
            "states",
            format!("states: {v} is not an approval state (PENDING ... UNKNOWN)"),
        )
    })?;
    Ok(Some(match s {
        pb::ApprovalState::Unspecified => return Ok(None),
        pb::ApprovalState::Pending => ApprovalState::Pending,
        pb::ApprovalState::Approved => ApprovalState::Approved,
        pb::ApprovalState::Denied => ApprovalState::Denied,
        pb::ApprovalState::Expired => ApprovalState::Expired,
        pb::ApprovalState::Cancelled => ApprovalState::Cancelled,
        pb::ApprovalState::Consumed => ApprovalState::Consumed,
        pb::ApprovalState::Completed => ApprovalState::Completed,
        pb::ApprovalState::Unknown => ApprovalState::Unknown,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_without_the_approval_are_errors_and_unspecified_states_keep_waiting() {
        let e = approval_status_from_wire(pb::WaitForApprovalResponse::default()).unwrap_err();
        assert_eq!(e.reason, Reason::Internal);
        let a = approval_status_from_wire(pb::WaitForApprovalResponse {
            approval: Some(pb::Approval::default()),
        })
        .unwrap();
        assert_eq!(a.state, ApprovalState::Pending);
        for s in ApprovalState::ALL {
            let v = approval_state_to_wire(*s) as i32;
            assert_eq!(approval_state_from_wire(v), Ok(Some(*s)));
        }
        assert!(approval_state_from_wire(99).is_err());
    }
}
