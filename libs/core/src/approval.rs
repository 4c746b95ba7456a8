//! [`ApprovalState`]: where an approval is in its life, one enum for the ledger that stores
//! it, the policy that reports it and the executor that waits on it.

use std::fmt;

/// Where an approval is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalState {
    /// Waiting for a human.
    Pending,
    /// Approved and not (yet) used up.
    Approved,
    /// Denied by a human; final.
    Denied,
    /// Ran out of time before being decided or used; final.
    Expired,
    /// Withdrawn before a decision; final.
    Cancelled,
    /// A once-scope approval taken by exactly one execution, outcome not yet reported.
    Consumed,
    /// The consuming execution reported its outcome; final.
    Completed,
    /// The consuming execution's lease ran out without an outcome; final, never re-runnable.
    Unknown,
}

impl ApprovalState {
    /// Every state.
    pub const ALL: &'static [ApprovalState] = &[
        ApprovalState::Pending,
        ApprovalState::Approved,
        ApprovalState::Denied,
        ApprovalState::Expired,
        ApprovalState::Cancelled,
        ApprovalState::Consumed,
        ApprovalState::Completed,
        ApprovalState::Unknown,
    ];

    /// The stored lowercase name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Pending => "pending",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
            ApprovalState::Cancelled => "cancelled",
            ApprovalState::Consumed => "consumed",
            ApprovalState::Completed => "completed",
            ApprovalState::Unknown => "unknown",
        }
    }
}

/// A name that is no [`ApprovalState`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownApprovalState(pub String);

impl fmt::Display for UnknownApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown approval state `{}`", self.0)
    }
}

impl std::error::Error for UnknownApprovalState {}

impl std::str::FromStr for ApprovalState {
    type Err = UnknownApprovalState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ApprovalState::ALL
            .iter()
            .copied()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownApprovalState(s.to_owned()))
    }
}

impl fmt::Display for ApprovalState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
