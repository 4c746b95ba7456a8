//! The one error type of the ledger: every database failure is translated here.

use toolgate_core::{Reason, ReasonedError};

use crate::model::ApprovalState;

/// Why a ledger operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input field is malformed.
    #[error("invalid {field}: {problem}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A secret pattern in the configuration does not compile.
    #[error("invalid secret pattern `{pattern}`: {problem}")]
    InvalidPattern {
        /// The pattern as configured.
        pattern: String,
        /// The compiler's complaint.
        problem: String,
    },
    /// No approval with that id.
    #[error("approval {id} not found; list approvals to see valid ids")]
    ApprovalNotFound {
        /// The id asked for.
        id: String,
    },
    /// No active learned rule with that id.
    #[error("learned rule {id} not found or already revoked; list rules to see active ids")]
    RuleNotFound {
        /// The id asked for.
        id: String,
    },
    /// No decision with that id.
    #[error("decision {id} not found")]
    DecisionNotFound {
        /// The id asked for.
        id: String,
    },
    /// The approval is not in a state that allows the transition.
    #[error("approval {id} is {state}, not pending; it cannot be {action}")]
    NotPending {
        /// The approval.
        id: String,
        /// Its current state.
        state: ApprovalState,
        /// The refused transition (`approved`, `denied`, `cancelled`).
        action: &'static str,
    },
    /// The approval expired before it was used or decided.
    #[error("approval {id} expired; repeat the call to request a new approval")]
    Expired {
        /// The approval.
        id: String,
    },
    /// An approver tried to decide a request they made themselves.
    #[error("principal {principal} requested approval {id} and cannot decide it")]
    SelfDecision {
        /// The approval.
        id: String,
        /// The principal who both asked and tried to decide.
        principal: String,
    },
    /// A call id already belongs to a different request.
    #[error(
        "call_id {call_id} was already used for a different request (digest {existing}); use a fresh call_id"
    )]
    CallIdReused {
        /// The reused call id.
        call_id: String,
        /// The digest recorded for it first.
        existing: String,
    },
    /// A second, different outcome for the same decision.
    #[error("decision {decision_id} already has a different outcome recorded")]
    OutcomeConflict {
        /// The decision.
        decision_id: String,
    },
    /// The consume lease ran out: the execution is `unknown` and its report is refused.
    #[error(
        "lease on approval {id} expired; the execution is recorded as unknown and needs a new approval"
    )]
    LeaseExpired {
        /// The approval.
        id: String,
    },
    /// The decision's lease ran out before its outcome arrived: the call is `unknown`, and
    /// stays so; the late report is refused.
    #[error(
        "the lease of decision {decision_id} ran out at {expired_at_micros} (µs since the epoch) before its outcome \
         was reported; the call is recorded as unknown and the late report is refused"
    )]
    DecisionLeaseExpired {
        /// The decision.
        decision_id: String,
        /// When its lease ran out.
        expired_at_micros: i64,
    },
    /// The lease token does not fence this consumption.
    #[error(
        "lease token does not match the consumption of approval {id}; this executor's report is stale"
    )]
    StaleLease {
        /// The approval.
        id: String,
    },
    /// The decision never allowed execution, so no outcome can exist for it.
    #[error("decision {decision_id} did not allow execution ({why}); no outcome can be recorded")]
    NotRunnable {
        /// The decision.
        decision_id: String,
        /// Why it was not runnable.
        why: String,
    },
    /// No session with that id.
    #[error("session {id} not found; the ledger never saw a call of it")]
    SessionNotFound {
        /// The id asked for.
        id: String,
    },
    /// Another executor holds a live claim on the session.
    #[error(
        "session {session_id} is held by executor {executor_id} (pod {pod}) until \
         {claim_expires_at_micros} (µs since the epoch); send its calls there, or retry after the claim lapses"
    )]
    SessionElsewhere {
        /// The session.
        session_id: String,
        /// The holder's reported id.
        executor_id: String,
        /// The holder's pod (else its id).
        pod: String,
        /// When the holder's claim lapses unless renewed.
        claim_expires_at_micros: i64,
    },
    /// The session belongs to another principal.
    #[error("session {session_id} belongs to another principal; use a session id of your own")]
    SessionOtherPrincipal {
        /// The session.
        session_id: String,
    },
    /// The database schema was written by a newer toolgate.
    #[error(
        "ledger schema version {found} is newer than this binary supports ({supported}); run a newer toolgate"
    )]
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this binary knows.
        supported: i64,
    },
    /// A row conflicts with one already stored.
    #[error("ledger already holds {what}")]
    AlreadyExists {
        /// What collided.
        what: String,
    },
    /// The database cannot be reached (after retries).
    #[error("ledger database unavailable: {0}")]
    Unavailable(String),
    /// The database cannot store anything now: its disk is full, its file is read-only, an
    /// I/O error. Not retried in place (it lasts until someone frees space or fixes the
    /// mount); health reports it until a write succeeds again.
    #[error("ledger database cannot store: {0}")]
    Storage(String),
    /// The database rejected an operation unexpectedly.
    #[error("ledger database error: {0}")]
    Database(String),
    /// A stored row cannot be decoded.
    #[error("ledger row is corrupt: {0}")]
    Corrupt(String),
}

impl Error {
    pub(crate) fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Error::Invalid {
            field,
            problem: problem.into(),
        }
    }

    /// Whether retrying the same operation later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        match self {
            Error::Invalid { .. } | Error::NotRunnable { .. } => Reason::InvalidRequest,
            Error::InvalidPattern { .. } => Reason::InvalidPattern,
            Error::ApprovalNotFound { .. } => Reason::ApprovalNotFound,
            Error::DecisionNotFound { .. } | Error::SessionNotFound { .. } => Reason::NotFound,
            Error::SessionElsewhere { .. } => Reason::SessionElsewhere,
            Error::SessionOtherPrincipal { .. } => Reason::RoleNotPermitted,
            Error::RuleNotFound { .. } => Reason::RuleNotFound,
            Error::NotPending { .. } | Error::LeaseExpired { .. } | Error::StaleLease { .. } => {
                Reason::ApprovalNotPending
            }
            Error::Expired { .. } => Reason::ApprovalExpired,
            Error::SelfDecision { .. } => Reason::RoleNotPermitted,
            Error::CallIdReused { .. } | Error::AlreadyExists { .. } => Reason::AlreadyExists,
            Error::OutcomeConflict { .. } => Reason::OutcomeConflict,
            Error::DecisionLeaseExpired { .. } => Reason::OutcomeUnknown,
            Error::Unavailable(_) | Error::Storage(_) => Reason::LedgerUnavailable,
            Error::SchemaTooNew { .. } | Error::Database(_) | Error::Corrupt(_) => Reason::Internal,
        }
    }

    fn metadata(&self) -> Vec<(&'static str, String)> {
        match self {
            Error::Invalid { field, .. } => vec![("field", (*field).to_owned())],
            Error::ApprovalNotFound { id }
            | Error::Expired { id }
            | Error::LeaseExpired { id }
            | Error::StaleLease { id }
            | Error::SelfDecision { id, .. } => vec![("approval_id", id.clone())],
            Error::NotPending { id, state, .. } => {
                vec![
                    ("approval_id", id.clone()),
                    ("state", state.as_str().to_owned()),
                ]
            }
            Error::DecisionNotFound { id } => vec![("decision_id", id.clone())],
            Error::RuleNotFound { id } => vec![("rule_id", id.clone())],
            Error::OutcomeConflict { decision_id }
            | Error::NotRunnable { decision_id, .. }
            | Error::DecisionLeaseExpired { decision_id, .. } => {
                vec![("decision_id", decision_id.clone())]
            }
            Error::CallIdReused { call_id, .. } => vec![("call_id", call_id.clone())],
            Error::SessionNotFound { id } => vec![("session_id", id.clone())],
            Error::SessionOtherPrincipal { session_id } => {
                vec![("session_id", session_id.clone())]
            }
            Error::SessionElsewhere {
                session_id,
                executor_id,
                pod,
                claim_expires_at_micros,
            } => vec![
                ("session_id", session_id.clone()),
                ("executor_id", executor_id.clone()),
                ("pod", pod.clone()),
                ("claim_expires_at", rfc3339(*claim_expires_at_micros)),
            ],
            _ => Vec::new(),
        }
    }
}

/// Microseconds since the epoch as RFC 3339 UTC (`2026-01-02T03:04:05.678901Z`), for metadata
/// a client reads.
fn rfc3339(micros: i64) -> String {
    let magnitude = std::time::Duration::from_micros(micros.unsigned_abs());
    let t = if micros >= 0 {
        std::time::UNIX_EPOCH + magnitude
    } else {
        std::time::UNIX_EPOCH - magnitude
    };
    toolgate_core::rfc3339(t)
}

/// Translates a driver error; `sqlx::Error` never leaves this crate.
impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind;
        match &e {
            sqlx::Error::Database(db) => match db.kind() {
                ErrorKind::UniqueViolation => Error::AlreadyExists {
                    what: db.constraint().map_or_else(
                        || db.message().to_owned(),
                        |c| format!("a row violating {c}"),
                    ),
                },
                _ if storage_fault(db.as_ref()).is_some() => {
                    Error::Storage(storage_fault(db.as_ref()).unwrap_or_default())
                }
                _ => {
                    // Postgres class 57 (operator intervention: shutdown) and 08
                    // (connection exception) mean the server went away, and class 40
                    // (serialization failure, deadlock) means a retry will succeed;
                    // none of them means the statement was wrong.
                    // SQLite's BUSY (5) and LOCKED (6), with their extended codes, mean
                    // another connection holds the lock past the busy timeout, or the busy
                    // handler was skipped to avoid a deadlock: a retry will succeed too.
                    let code = db.code().unwrap_or_default();
                    let sqlite_busy = db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
                        && code.parse::<u32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6));
                    if sqlite_busy
                        || code.starts_with("57")
                        || code.starts_with("08")
                        || code.starts_with("40")
                    {
                        Error::Unavailable(db.message().to_owned())
                    } else {
                        Error::Database(db.message().to_owned())
                    }
                }
            },
            sqlx::Error::Io(io) if io.raw_os_error() == Some(28) => {
                Error::Storage(format!("the disk holding the database is full ({io})"))
            }
            // A connection that a failed COMMIT left inside its transaction (SQLite rolls back
            // by itself on a full disk, sqlx still counts the transaction open): it is closed
            // when given back to the pool, so the next attempt gets a fresh one.
            sqlx::Error::InvalidSavePointStatement | sqlx::Error::BeginFailed => {
                Error::Unavailable(format!(
                    "a database connection was left inside a failed transaction ({e}); it is being replaced"
                ))
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => Error::Unavailable(e.to_string()),
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::Decode(_) => Error::Corrupt(e.to_string()),
            _ => Error::Database(e.to_string()),
        }
    }
}

/// What a database error says about the storage under it, when it says the database cannot
/// write: SQLite's FULL, IOERR, READONLY and CANTOPEN (with their extended codes), Postgres
/// classes 53 (insufficient resources, `53100` disk full) and 58 (system error, I/O).
fn storage_fault(db: &dyn sqlx::error::DatabaseError) -> Option<String> {
    let code = db.code().unwrap_or_default();
    let msg = db.message();
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        let primary = code.parse::<u32>().ok()? & 0xff;
        return match primary {
            13 => Some(format!("the disk holding the database is full ({msg})")),
            10 => Some(format!("an I/O error on the database file ({msg})")),
            8 => Some(format!("the database file is read-only ({msg})")),
            14 => Some(format!("the database file cannot be opened ({msg})")),
            _ => None,
        };
    }
    match code.get(..2) {
        _ if code == "53100" => Some(format!("the database server's disk is full ({msg})")),
        Some("53") => Some(format!("the database server is out of resources ({msg})")),
        Some("58") => Some(format!("the database server had a system error ({msg})")),
        _ => None,
    }
}

/// Shorthand for ledger results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn metadata_times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
        // A leap day, and the end of a leap year.
        assert_eq!(rfc3339(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_603_199_000_000), "2024-12-30T23:59:59Z");
    }
}
