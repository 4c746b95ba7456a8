//! The one place where domain errors become gRPC statuses, and back.

use std::collections::HashMap;

use tonic_types::{ErrorDetails, StatusExt};
use toolgate_core::{Code, ERROR_DOMAIN, Reason, ReasonedError};

/// Maps the domain code onto tonic's.
pub fn tonic_code(code: Code) -> tonic::Code {
    match code {
        Code::InvalidArgument => tonic::Code::InvalidArgument,
        Code::NotFound => tonic::Code::NotFound,
        Code::AlreadyExists => tonic::Code::AlreadyExists,
        Code::PermissionDenied => tonic::Code::PermissionDenied,
        Code::ResourceExhausted => tonic::Code::ResourceExhausted,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::Aborted => tonic::Code::Aborted,
        Code::Unimplemented => tonic::Code::Unimplemented,
        Code::Internal => tonic::Code::Internal,
        Code::Unavailable => tonic::Code::Unavailable,
        Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        Code::Unauthenticated => tonic::Code::Unauthenticated,
    }
}

/// The canonical gRPC name of a status code (`OK`, `NOT_FOUND`, ...), as metrics labels and
/// stored outcomes spell it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// Builds a status with an `ErrorInfo` detail for `reason`.
pub fn status(
    reason: Reason,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> tonic::Status {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    tonic::Status::with_error_details(
        tonic_code(reason.code()),
        message,
        ErrorDetails::with_error_info(reason.as_str(), ERROR_DOMAIN, metadata),
    )
}

/// Converts any domain error into its status: code, message and `ErrorInfo`.
pub fn from_error<E: ReasonedError + ?Sized>(err: &E) -> tonic::Status {
    status(err.reason(), err.to_string(), err.metadata())
}

/// A shorthand for `INVALID_ARGUMENT` / `INVALID_REQUEST` naming the offending field.
pub fn invalid(field: &'static str, message: impl Into<String>) -> tonic::Status {
    status(
        Reason::InvalidRequest,
        message,
        [("field", field.to_owned())],
    )
}

/// The `ErrorInfo` a status carries, as `(reason, metadata)`, if any.
pub fn error_info(status: &tonic::Status) -> Option<(String, HashMap<String, String>)> {
    let details = status.get_error_details();
    let info = details.error_info()?;
    Some((info.reason.clone(), info.metadata.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_a_status() {
        for reason in Reason::ALL {
            let s = status(*reason, "boom", [("path", "a/b".to_owned())]);
            assert_eq!(s.code(), tonic_code(reason.code()));
            let (r, md) = error_info(&s).expect("error info present");
            assert_eq!(r, reason.as_str());
            assert_eq!(md.get("path").map(String::as_str), Some("a/b"));
        }
    }

    #[test]
    fn proto_enum_lists_every_reason() {
        use crate::common::v1::ErrorReason;
        for reason in Reason::ALL {
            let name = format!("ERROR_REASON_{}", reason.as_str());
            assert!(
                ErrorReason::from_str_name(&name).is_some(),
                "{name} missing from common.proto"
            );
        }
    }
}
