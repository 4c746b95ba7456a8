//! The audit trail as maintenance reads it: the change feed, the chain check and the sweep.

use super::Approval;

/// A position in the change feed: the audit event sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Cursor(pub u64);

/// One change to an approval, as the watch feed reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Resume after this cursor to see later changes only.
    pub cursor: Cursor,
    /// The event (`approval.created`, `approval.approved`, ...).
    pub kind: String,
    /// The approval as it is now.
    pub approval: Approval,
}

/// What a lease sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Pending or approved approvals past their expiry, now `expired`.
    pub expired: u64,
    /// Consumed approvals past their lease, now `unknown`.
    pub unknown: u64,
}

/// The result of recomputing the audit hash chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Events checked.
    pub events: u64,
    /// The hash of the last event, hex.
    pub head: Option<String>,
    /// The first inconsistency, if any.
    pub broken: Option<BrokenLink>,
}

/// The first place the audit trail does not hold together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokenLink {
    /// The event sequence number involved, if the problem is tied to one.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: String,
}
