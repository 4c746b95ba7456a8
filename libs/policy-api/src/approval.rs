//! What `WaitForApproval` reports.

pub use toolgate_core::ApprovalState;

/// An approval as `WaitForApproval` reports it to the executor waiting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalStatus {
    /// The approval.
    pub approval_id: String,
    /// Its state now.
    pub state: ApprovalState,
    /// Who decided; empty while nobody has.
    pub decided_by: String,
    /// What the approver told the model.
    pub message_to_model: String,
    /// The approver's reason.
    pub reason: String,
}
