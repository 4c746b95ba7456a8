//! The policy protocol (`toolgate_policy_api`) ↔ the v1 messages and statuses, written once
//! for both ends: the executor's gRPC client maps its requests to the wire and the answers
//! back (`*_to_wire` requests, `*_from_wire` answers), the policy's gRPC adapters the other
//! way round. A status ↔ [`Error`] mapping is here too, so a refusal relayed through an
//! executor keeps its code, reason, message and metadata.

mod approval;
mod authorize;
mod outcome;
mod session;

use std::time::SystemTime;

use toolgate_core::{Reason, ReasonedError};
use toolgate_policy_api::Error;

use crate::status;

pub use approval::{
    approval_state_from_wire, approval_state_to_wire, approval_status_from_wire,
    wait_request_from_wire, wait_request_to_wire,
};
pub use authorize::{
    authorization_to_wire, authorize_answer_from_wire, authorize_request_from_wire,
    authorize_request_to_wire,
};
pub use outcome::{
    destination_to_wire, outcome_from_wire, outcome_report_from_wire, outcome_report_to_wire,
    outcome_to_wire,
};
pub use session::{
    abandon_runs_request_to_wire, claim_session_request_to_wire, claimed_session_from_wire,
    end_session_request_to_wire, renew_sessions_request_to_wire, session_refusal,
    session_state_from_wire, session_state_to_wire, update_session_request_to_wire,
};

/// A wire request field the protocol cannot take: `INVALID_ARGUMENT` / `INVALID_REQUEST`
/// naming the field, as a client spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The wire field (`context.call_id`).
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl Invalid {
    /// An invalid `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Invalid {
            field,
            message: message.into(),
        }
    }
}

impl ReasonedError for Invalid {
    fn reason(&self) -> Reason {
        Reason::InvalidRequest
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        vec![("field", self.field.to_owned())]
    }
}

/// The protocol error a status from (or about) the policy service is: its reason (by its
/// code when it carries none), message and `ErrorInfo` metadata.
pub fn error_from_status(s: &tonic::Status) -> Error {
    let (reason, message, metadata) = status::parts(s);
    Error {
        reason,
        message,
        metadata,
    }
}

/// The status a client gets for a protocol error: the same code, reason, message and
/// metadata.
pub fn error_to_status(e: Error) -> tonic::Status {
    status::relayed(e.reason, &e.message, e.metadata)
}

/// A wire time in domain terms; a value `SystemTime` cannot hold reads as absent.
pub(crate) fn time_from_wire(t: Option<prost_types::Timestamp>) -> Option<SystemTime> {
    t.and_then(|t| SystemTime::try_from(t).ok())
}

/// A domain time on the wire.
pub(crate) fn time_to_wire(t: SystemTime) -> prost_types::Timestamp {
    t.into()
}

/// A domain duration on the wire; one too long for it reads as absent.
pub(crate) fn duration_to_wire(d: std::time::Duration) -> Option<prost_types::Duration> {
    prost_types::Duration::try_from(d).ok()
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
        let back = error_to_status(error_from_status(&s));
        assert_eq!(back.code(), s.code());
        assert_eq!(back.message(), s.message());
        assert_eq!(status::error_info(&back), status::error_info(&s));
        // A status without ErrorInfo gets a reason by its code, never a silent OK.
        let bare = error_from_status(&tonic::Status::invalid_argument("bad"));
        assert_eq!(bare.reason, Reason::InvalidRequest);
        assert!(!bare.is_retriable());
        assert!(error_from_status(&s).is_retriable());
    }
}
