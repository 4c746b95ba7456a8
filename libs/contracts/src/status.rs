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
        Code::OutOfRange => tonic::Code::OutOfRange,
        Code::FailedPrecondition => tonic::Code::FailedPrecondition,
        Code::Aborted => tonic::Code::Aborted,
        Code::Unimplemented => tonic::Code::Unimplemented,
        Code::Internal => tonic::Code::Internal,
        Code::Unavailable => tonic::Code::Unavailable,
        Code::DeadlineExceeded => tonic::Code::DeadlineExceeded,
        Code::Unauthenticated => tonic::Code::Unauthenticated,
    }
}

/// Every gRPC status code, in numeric order, with its canonical name (`NOT_FOUND`, as the
/// gRPC specification, stored outcomes, MCP results and the CLI spell it) and grpc-go's
/// (`NotFound`, the `grpc_code` label grpc-ecosystem dashboards filter on). The one table of
/// code names in the workspace.
const CODE_NAMES: [(tonic::Code, &str, &str); 17] = {
    use tonic::Code;
    [
        (Code::Ok, "OK", "OK"),
        (Code::Cancelled, "CANCELLED", "Canceled"),
        (Code::Unknown, "UNKNOWN", "Unknown"),
        (Code::InvalidArgument, "INVALID_ARGUMENT", "InvalidArgument"),
        (
            Code::DeadlineExceeded,
            "DEADLINE_EXCEEDED",
            "DeadlineExceeded",
        ),
        (Code::NotFound, "NOT_FOUND", "NotFound"),
        (Code::AlreadyExists, "ALREADY_EXISTS", "AlreadyExists"),
        (
            Code::PermissionDenied,
            "PERMISSION_DENIED",
            "PermissionDenied",
        ),
        (
            Code::ResourceExhausted,
            "RESOURCE_EXHAUSTED",
            "ResourceExhausted",
        ),
        (
            Code::FailedPrecondition,
            "FAILED_PRECONDITION",
            "FailedPrecondition",
        ),
        (Code::Aborted, "ABORTED", "Aborted"),
        (Code::OutOfRange, "OUT_OF_RANGE", "OutOfRange"),
        (Code::Unimplemented, "UNIMPLEMENTED", "Unimplemented"),
        (Code::Internal, "INTERNAL", "Internal"),
        (Code::Unavailable, "UNAVAILABLE", "Unavailable"),
        (Code::DataLoss, "DATA_LOSS", "DataLoss"),
        (Code::Unauthenticated, "UNAUTHENTICATED", "Unauthenticated"),
    ]
};

/// The canonical gRPC name of a status code (`OK`, `NOT_FOUND`, ...), as stored outcomes,
/// MCP results and the CLI spell it.
pub fn code_name(code: tonic::Code) -> &'static str {
    CODE_NAMES[code as usize].1
}

/// grpc-go's name of a status code (`OK`, `NotFound`, ...), for the `grpc_code` metrics label.
pub fn code_go_name(code: tonic::Code) -> &'static str {
    CODE_NAMES[code as usize].2
}

/// The code whose canonical name is `name` (`NOT_FOUND`), if any.
pub fn code_from_name(name: &str) -> Option<tonic::Code> {
    CODE_NAMES
        .iter()
        .find(|(_, canonical, _)| *canonical == name)
        .map(|(code, _, _)| *code)
}

/// Most bytes of one `ErrorInfo` metadata value: values echo what a client sent (a path, a
/// pattern), and the status travels in HTTP/2 headers, which clients cap (grpc-core: 8 KiB by
/// default; beyond it the client reports `RESOURCE_EXHAUSTED` instead of the real status).
pub const ECHO_CAP: usize = 256;

/// Most bytes of a status message. The message is sent twice (`grpc-message`, and inside
/// `grpc-status-details-bin`), so together with the metadata a status stays far below 8 KiB.
pub const MESSAGE_CAP: usize = 1024;

/// Room for the marker a capped value ends with (`…[5000 bytes]`).
const MARKER_ROOM: usize = 32;

/// The longest prefix of `s` of at most `n` bytes that ends on a character boundary.
fn head(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest suffix of `s` of at most `n` bytes that starts on a character boundary.
fn tail(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `s` cut to [`ECHO_CAP`] bytes plus a marker with its full length, when longer.
pub fn cap_echo(s: &str) -> String {
    if s.len() <= ECHO_CAP {
        s.to_owned()
    } else {
        format!("{}…[{} bytes]", head(s, ECHO_CAP), s.len())
    }
}

/// `s` cut to about [`MESSAGE_CAP`] bytes, when longer: its start and its end (where the
/// advice usually is) survive, with the number of bytes left out between them.
pub fn cap_message(s: &str) -> String {
    if s.len() <= MESSAGE_CAP {
        return s.to_owned();
    }
    let start = head(s, MESSAGE_CAP * 5 / 8);
    let end = tail(s, MESSAGE_CAP / 4);
    format!(
        "{start}…[{} of {} bytes left out]…{end}",
        s.len() - start.len() - end.len(),
        s.len()
    )
}

/// A status with an `ErrorInfo` for `reason` (a name from the closed list), every value
/// capped so that it fits in the client's metadata.
fn capped_status(
    code: tonic::Code,
    reason: &str,
    message: &str,
    metadata: impl IntoIterator<Item = (String, String)>,
) -> tonic::Status {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (head(&k, ECHO_CAP).to_owned(), cap_echo(&v)))
        .collect();
    tonic::Status::with_error_details(
        code,
        cap_message(message),
        ErrorDetails::with_error_info(reason, ERROR_DOMAIN, metadata),
    )
}

/// Builds a status with an `ErrorInfo` detail for `reason`. The message and every metadata
/// value are capped ([`MESSAGE_CAP`], [`ECHO_CAP`]).
pub fn status(
    reason: Reason,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
) -> tonic::Status {
    capped_status(
        tonic_code(reason.code()),
        reason.as_str(),
        &message.into(),
        metadata.into_iter().map(|(k, v)| (k.to_owned(), v)),
    )
}

/// [`status`] with a `RetryInfo` detail: the same call is worth repeating after
/// `retry_after` (a refusal for lack of capacity, where nothing ran).
pub fn status_with_retry(
    reason: Reason,
    message: impl Into<String>,
    metadata: impl IntoIterator<Item = (&'static str, String)>,
    retry_after: std::time::Duration,
) -> tonic::Status {
    let metadata: HashMap<String, String> = metadata
        .into_iter()
        .map(|(k, v)| (k.to_owned(), cap_echo(&v)))
        .collect();
    let mut details = ErrorDetails::with_error_info(reason.as_str(), ERROR_DOMAIN, metadata);
    details.set_retry_info(Some(retry_after));
    tonic::Status::with_error_details(
        tonic_code(reason.code()),
        cap_message(&message.into()),
        details,
    )
}

/// The `RetryInfo` delay a status carries, if any: when repeating the call may succeed.
pub fn retry_after(status: &tonic::Status) -> Option<std::time::Duration> {
    status.get_error_details().retry_info()?.retry_delay
}

/// What a status must become before it leaves a server, or `None` when it is fine as it is:
/// every error carries an `ErrorInfo` from the closed list and fits in a client's metadata.
///
/// Statuses built by toolgate ([`status`]) pass unchanged. The others come from the gRPC
/// stack itself and get a reason: a request that does not decode (tonic says `INTERNAL`; it
/// is the client's: `INVALID_ARGUMENT` / `INVALID_REQUEST`), one above the size limit
/// (`TOO_LARGE`), an unknown service or method (`UNIMPLEMENTED` / `UNSUPPORTED`), an expired
/// deadline (`DEADLINE_EXCEEDED` / `TIMEOUT`), and the rest by code. `method` is the request
/// path (`/package.Service/Method`).
pub fn at_edge(status: &tonic::Status, method: &str) -> Option<tonic::Status> {
    use tonic::Code as C;
    if status.code() == C::Ok {
        return None;
    }
    let message = status.message();
    if let Some(info) = status.get_error_details().error_info() {
        let fits = message.len() <= MESSAGE_CAP + 2 * MARKER_ROOM
            && info
                .metadata
                .iter()
                .all(|(k, v)| k.len() <= ECHO_CAP && v.len() <= ECHO_CAP + MARKER_ROOM);
        return (!fits)
            .then(|| capped_status(status.code(), &info.reason, message, info.metadata.clone()));
    }
    let method = method.trim_start_matches('/');
    let (code, reason, text) = match status.code() {
        C::Internal if message.starts_with("failed to decode Protobuf message") => (
            C::InvalidArgument,
            Reason::InvalidRequest,
            format!(
                "the request is not a valid {method} request message ({message}); \
                 string fields must be valid UTF-8 and the message must match toolgate's v1 protos"
            ),
        ),
        C::OutOfRange if message.contains("decoded message length too large") => (
            tonic_code(Reason::TooLarge.code()),
            Reason::TooLarge,
            format!(
                "the request message is larger than this server accepts ({message}); \
                 send large content in smaller pieces"
            ),
        ),
        C::Unimplemented => (
            C::Unimplemented,
            Reason::Unsupported,
            format!(
                "`{method}` is not a method this server implements{}; \
                 check the service and method names (server reflection lists them)",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            ),
        ),
        C::DeadlineExceeded => (
            C::DeadlineExceeded,
            Reason::Timeout,
            format!("the call's deadline passed before it finished ({message})"),
        ),
        C::Cancelled if message == "Timeout expired" => (
            C::DeadlineExceeded,
            Reason::Timeout,
            "the call's deadline (grpc-timeout) passed before it finished".to_owned(),
        ),
        code => (code, reason_for_code(code), message.to_owned()),
    };
    Some(capped_status(
        code,
        reason.as_str(),
        &text,
        [("method".to_owned(), method.to_owned())],
    ))
}

/// The reason for a status that carries none, by its code.
fn reason_for_code(code: tonic::Code) -> Reason {
    use tonic::Code as C;
    match code {
        C::InvalidArgument | C::FailedPrecondition | C::OutOfRange => Reason::InvalidRequest,
        C::NotFound => Reason::NotFound,
        C::AlreadyExists => Reason::AlreadyExists,
        C::PermissionDenied => Reason::RoleNotPermitted,
        C::Unauthenticated => Reason::Unauthenticated,
        C::ResourceExhausted => Reason::Busy,
        C::Aborted => Reason::Conflict,
        _ => Reason::Internal,
    }
}

/// A status another toolgate service answered, taken apart for relaying: its reason from
/// the closed list (by its code when it carries none, or one this build does not know),
/// its message and its `ErrorInfo` metadata, sorted by key. [`relayed`] puts it back.
pub fn parts(status: &tonic::Status) -> (Reason, String, Vec<(String, String)>) {
    let (reason, mut metadata) = match error_info(status) {
        Some((name, md)) => (
            Reason::ALL
                .iter()
                .copied()
                .find(|r| r.as_str() == name)
                .unwrap_or_else(|| reason_for_code(status.code())),
            md.into_iter().collect::<Vec<_>>(),
        ),
        None => (reason_for_code(status.code()), Vec::new()),
    };
    metadata.sort();
    (reason, status.message().to_owned(), metadata)
}

/// The status for a refusal relayed from another service ([`parts`]): [`status`] with
/// owned metadata keys.
pub fn relayed(
    reason: Reason,
    message: &str,
    metadata: impl IntoIterator<Item = (String, String)>,
) -> tonic::Status {
    capped_status(
        tonic_code(reason.code()),
        reason.as_str(),
        message,
        metadata,
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

/// The OpenTelemetry `error.type` of a failed call: its `ErrorInfo` reason in lower case
/// (`policy_denied`, `approval_required`, `timeout`, ...), else its gRPC code in lower case
/// (`deadline_exceeded`, `cancelled`, ...). A closed set, fit for span attributes and metric
/// labels.
pub fn error_type(status: &tonic::Status) -> &'static str {
    static LOWER: std::sync::OnceLock<HashMap<&'static str, &'static str>> =
        std::sync::OnceLock::new();
    let lower = LOWER.get_or_init(|| {
        let codes = (0..=16).map(|c| code_name(tonic::Code::from_i32(c)));
        Reason::ALL
            .iter()
            .map(|r| r.as_str())
            .chain(codes)
            .map(|n| {
                let l: &'static str = Box::leak(n.to_ascii_lowercase().into_boxed_str());
                (n, l)
            })
            .collect()
    });
    let name = error_info(status)
        .and_then(|(r, _)| Reason::ALL.iter().find(|x| x.as_str() == r).copied())
        .map_or_else(|| code_name(status.code()), Reason::as_str);
    lower.get(name).copied().unwrap_or("_OTHER")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_table_is_in_numeric_order_and_its_names_read_back() {
        for (i, (code, canonical, go)) in CODE_NAMES.iter().enumerate() {
            assert_eq!(*code as usize, i, "{canonical}");
            assert_eq!(tonic::Code::from_i32(i as i32), *code);
            assert_eq!(code_name(*code), *canonical);
            assert_eq!(code_go_name(*code), *go);
            assert_eq!(code_from_name(canonical), Some(*code));
            // grpc-go's name is the canonical one in camel case (but for its "Canceled").
            let camel: String = canonical
                .split('_')
                .map(|w| w[..1].to_owned() + &w[1..].to_lowercase())
                .collect();
            let camel = if camel == "Ok" {
                "OK".to_owned()
            } else {
                camel
            };
            assert_eq!(camel.replace("Cancelled", "Canceled"), *go);
        }
        assert_eq!(code_from_name("NotFound"), None);
        assert_eq!(code_from_name(""), None);
    }

    #[test]
    fn error_types_are_the_reason_or_the_code_in_lower_case() {
        let denied = status(Reason::PolicyDenied, "no", []);
        assert_eq!(error_type(&denied), "policy_denied");
        assert_eq!(error_type(&status(Reason::Timeout, "slow", [])), "timeout");
        assert_eq!(error_type(&tonic::Status::cancelled("gone")), "cancelled");
        assert_eq!(
            error_type(&tonic::Status::deadline_exceeded("late")),
            "deadline_exceeded"
        );
    }

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
    fn echoed_values_and_messages_are_capped_with_their_length() {
        let long = "a/".repeat(2500);
        let s = status(
            Reason::PathOutsideWorkspace,
            format!("{long} is outside the workspace; use a relative path"),
            [("path", long)],
        );
        let (_, md) = error_info(&s).unwrap();
        assert!(
            md["path"].len() <= ECHO_CAP + MARKER_ROOM,
            "{}",
            md["path"].len()
        );
        assert!(md["path"].ends_with("…[5000 bytes]"), "{}", md["path"]);
        assert!(s.message().len() <= MESSAGE_CAP + 2 * MARKER_ROOM);
        assert!(
            s.message().ends_with("use a relative path"),
            "{}",
            s.message()
        );
        assert!(s.message().contains("bytes left out"));
        // Multi-byte characters are never split.
        let wide = "é".repeat(600);
        assert_eq!(cap_echo(&wide).len(), 256 + "…[1200 bytes]".len());
        assert!(at_edge(&s, "/x/Y").is_none(), "already fits");
    }

    #[test]
    fn statuses_from_the_grpc_stack_get_a_reason_at_the_edge() {
        let cases = [
            (
                tonic::Status::internal(
                    "failed to decode Protobuf message: ReadFileRequest.path: invalid string value: data is not UTF-8 encoded",
                ),
                tonic::Code::InvalidArgument,
                "INVALID_REQUEST",
            ),
            (
                tonic::Status::out_of_range(
                    "Error, decoded message length too large: found 104857605 bytes, the limit is: 4194304 bytes",
                ),
                tonic::Code::FailedPrecondition,
                "TOO_LARGE",
            ),
            (
                tonic::Status::unimplemented(""),
                tonic::Code::Unimplemented,
                "UNSUPPORTED",
            ),
            (
                tonic::Status::cancelled("Timeout expired"),
                tonic::Code::DeadlineExceeded,
                "TIMEOUT",
            ),
            (
                tonic::Status::unavailable("shutting down"),
                tonic::Code::Unavailable,
                "INTERNAL",
            ),
        ];
        for (raw, code, reason) in cases {
            let s = at_edge(&raw, "/toolgate.executor.v1.FilesystemService/ReadFile")
                .expect("needs an ErrorInfo");
            assert_eq!(s.code(), code, "{raw:?}");
            let (r, md) = error_info(&s).unwrap();
            assert_eq!(r, reason);
            assert_eq!(
                md["method"],
                "toolgate.executor.v1.FilesystemService/ReadFile"
            );
        }
        // A toolgate status whose metadata does not fit is refitted, reason kept.
        let huge = tonic::Status::with_error_details(
            tonic::Code::NotFound,
            "x".repeat(5000),
            ErrorDetails::with_error_info(
                "NOT_FOUND",
                ERROR_DOMAIN,
                [("path".to_owned(), "p".repeat(5000))]
                    .into_iter()
                    .collect::<HashMap<_, _>>(),
            ),
        );
        let s = at_edge(&huge, "/m").expect("refitted");
        assert_eq!(s.code(), tonic::Code::NotFound);
        let (r, md) = error_info(&s).unwrap();
        assert_eq!(r, "NOT_FOUND");
        assert!(md["path"].len() < 300);
        assert!(s.message().len() < 1100);
        assert!(at_edge(&tonic::Status::ok(""), "/m").is_none());
    }

    #[test]
    fn proto_enum_and_reason_list_are_the_same_set() {
        use crate::common::v1::ErrorReason;
        for reason in Reason::ALL {
            let name = format!("ERROR_REASON_{}", reason.as_str());
            assert!(
                ErrorReason::from_str_name(&name).is_some(),
                "{name} missing from common.proto"
            );
        }
        // And back: every value the proto declares (but the unused zero) is a Reason.
        let mut declared = 0;
        for n in 1..=i32::from(u8::MAX) {
            let Ok(value) = ErrorReason::try_from(n) else {
                continue;
            };
            declared += 1;
            let name = value.as_str_name();
            let bare = name.strip_prefix("ERROR_REASON_").unwrap_or(name);
            assert!(
                Reason::ALL.iter().any(|r| r.as_str() == bare),
                "{name} is in common.proto but not in toolgate_core::Reason"
            );
        }
        assert_eq!(declared, Reason::ALL.len());
    }
}
