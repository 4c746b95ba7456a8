//! Authorization: the executor asks the policy service before every call.
//!
//! [`Authorizer`] is the policy service as the executor sees it; [`GrpcAuthorizer`] reaches it
//! over gRPC with the executor's own credential and fails closed. [`Gate`] turns its answers
//! into either an [`Authorized`] proof or the status the client gets (denied, approval
//! required, already executed), waiting for a human when the call context asks to.
//!
//! [`Authorized`] can only be built in this module, from an `allowed` answer, and every
//! operation the executor performs (a filesystem call, a process run) takes one as a
//! parameter, so no code path can run anything without a decision for it.

mod gate;
mod grpc;
mod report;

use futures::future::BoxFuture;
use tonic::Status;
use toolgate_contracts::policy::v1 as pb;

pub(crate) use gate::{Call, Gate, Verdict};
pub use grpc::GrpcAuthorizer;
pub(crate) use report::{Reporter, fs_outcome};

/// The policy service, as the executor uses it. Implemented over gRPC by [`GrpcAuthorizer`]
/// and in-process by `toolgate up`.
pub trait Authorizer: Send + Sync + 'static {
    /// Classifies and records a decision for one call.
    fn authorize(
        &self,
        request: pb::AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<pb::AuthorizeResponse, Status>>;

    /// Attaches the outcome of an allowed call to its decision.
    fn record_outcome(
        &self,
        request: pb::RecordOutcomeRequest,
    ) -> BoxFuture<'_, Result<pb::RecordOutcomeResponse, Status>>;

    /// Waits until an approval leaves `pending` or the request's timeout passes.
    fn wait_for_approval(
        &self,
        request: pb::WaitForApprovalRequest,
    ) -> BoxFuture<'_, Result<pb::WaitForApprovalResponse, Status>>;
}

/// Proof that the policy service allowed one call. Only this module can make one, and only
/// from an `allowed` answer; the operations require it.
#[derive(Debug)]
pub struct Authorized {
    decision_id: String,
    approval_id: String,
}

impl Authorized {
    /// Built from an `allowed` answer, nothing else.
    fn from_allowed(allowed: pb::Allowed) -> Self {
        Authorized {
            decision_id: allowed.decision_id,
            approval_id: allowed.approval_id,
        }
    }

    /// The recorded decision the outcome is reported against.
    pub fn decision_id(&self) -> &str {
        &self.decision_id
    }

    /// The approval this call consumed, empty when none was needed.
    pub fn approval_id(&self) -> &str {
        &self.approval_id
    }
}
