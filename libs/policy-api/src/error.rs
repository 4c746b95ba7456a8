//! [`Error`]: why an executor got no usable answer from the policy service.

use toolgate_core::{Code, Reason, ReasonedError};

/// Why the policy service gave no answer the executor can act on: unreachable (the executor
/// fails closed), or it refused the request. Carries the reason, message and `ErrorInfo`
/// metadata the executor's client gets, so a refusal is relayed as the policy said it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// From the closed list.
    pub reason: Reason,
    /// For the model.
    pub message: String,
    /// Machine-readable facts (`ErrorInfo.metadata`).
    pub metadata: Vec<(String, String)>,
}

impl Error {
    /// An error with `reason`, `message` and `metadata`.
    pub fn new(
        reason: Reason,
        message: impl Into<String>,
        metadata: impl IntoIterator<Item = (&'static str, String)>,
    ) -> Self {
        Error {
            reason,
            message: message.into(),
            metadata: metadata
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }

    /// The same facts as a domain error of the policy carries them.
    pub fn from_reasoned<E: ReasonedError + ?Sized>(e: &E) -> Self {
        Error {
            reason: e.reason(),
            message: e.to_string(),
            metadata: e
                .metadata()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        }
    }

    /// The value of the metadata key `key`, if present.
    pub fn fact(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether asking again later may succeed (an outcome report is retried then).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self.reason.code(),
            Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Internal
                | Code::ResourceExhausted
                | Code::Aborted
        )
    }
}

impl ReasonedError for Error {
    fn reason(&self) -> Reason {
        self.reason
    }
}
