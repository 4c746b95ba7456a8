//! The executor's domain errors as statuses: the one place they become `tonic::Status`,
//! through the workspace's central mapping (`toolgate_contracts::status`).

use tonic::Status;
use toolgate_contracts::policy_wire::error_to_status;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_runtime::metrics::ExecutorMetrics;

use crate::authz::{HiddenUnknown, Refused};
use crate::confined;

impl From<confined::Error> for Status {
    fn from(e: confined::Error) -> Status {
        status::from_error(&e)
    }
}

impl From<HiddenUnknown> for Status {
    fn from(e: HiddenUnknown) -> Status {
        status::from_error(&e)
    }
}

impl From<Refused> for Status {
    fn from(r: Refused) -> Status {
        error_to_status(r.into_parts())
    }
}

/// Counts `result`'s error, if any, as a call refused before running when someone refused it
/// (policy, human, admission, confinement, request validation). A path that does not exist
/// is the operation's answer, not a refusal.
pub(crate) fn count_refusal<T>(
    metrics: &ExecutorMetrics,
    result: Result<T, Status>,
) -> Result<T, Status> {
    if let Err(s) = &result
        && let Some(reason) = refusal(s)
    {
        metrics.rejection(reason.as_str());
    }
    result
}

/// The reason of `s` when it is a refusal, from the closed set of reasons.
fn refusal(s: &Status) -> Option<Reason> {
    let (name, _) = status::error_info(s)?;
    let reason = *Reason::ALL.iter().find(|r| r.as_str() == name)?;
    use Reason as R;
    matches!(
        reason,
        R::PolicyDenied
            | R::PolicyUnavailable
            | R::ApprovalRequired
            | R::ApprovalDenied
            | R::ApprovalExpired
            | R::ApprovalNotPending
            | R::ApprovalNotFound
            | R::AlreadyExecuted
            | R::CallInFlight
            | R::OutcomeUnknown
            | R::Busy
            | R::Unauthenticated
            | R::RoleNotPermitted
            | R::PathDenied
            | R::PathOutsideWorkspace
            | R::PathProtected
            | R::InvalidRequest
            | R::InvalidPath
            | R::InvalidPattern
            | R::TooLarge
            | R::Unsupported
    )
    .then_some(reason)
}
