//! The policy protocol: what an executor asks the policy service and what it is told, in
//! domain types, and the two service traits both sides implement.
//!
//! One vocabulary for the exchange. The executor's gate speaks it; the policy service's core
//! answers it in process (`toolgate up`) through `toolgate_policy::Local`; over the network
//! the executor's gRPC client and the policy's gRPC adapters map it to and from the v1
//! messages in one place, `toolgate_contracts::policy_wire`. Nothing here knows prost or
//! tonic.
//!
//! - [`Authorizer`]: `Authorize`, `RecordOutcome`, `WaitForApproval`.
//! - [`SessionLedger`]: the session calls (claim, renew, update, end, abandon).
//!
//! Identifiers travel as the strings the wire carries; the policy validates them at its
//! edge (its in-process and gRPC entry points alike) into the ledger's typed ids.

mod approval;
mod authorize;
mod error;
mod outcome;
mod session;

use std::time::Duration;

use futures::future::BoxFuture;

pub use approval::{ApprovalState, ApprovalStatus};
pub use authorize::{Authorization, AuthorizeAnswer, AuthorizeRequest, Explanation, HiddenGlobs};
pub use error::Error;
pub use outcome::{
    Ended, ExceededLimit, NetworkDestination, Outcome, OutcomeReport, OutputStats, ResourceUsage,
    RunIsolation, RunLimits,
};
pub use session::{EndReason, SessionRefusal, SessionState, StoredSession};
pub use toolgate_core::ExecutorIdentity;

/// The policy service as an executor uses it: Authorize, RecordOutcome and WaitForApproval.
/// Implemented remotely by the executor's gRPC client and in process by the policy crate's
/// `Local`, which acts as one authenticated executor.
pub trait Authorizer: Send + Sync + 'static {
    /// Classifies and records a decision for one call. `traceparent` is the caller's W3C
    /// trace context, for the ledger rows when the current span carries none.
    fn authorize(
        &self,
        request: AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<AuthorizeAnswer, Error>>;

    /// Attaches the outcome of an allowed call to its decision.
    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), Error>>;

    /// Waits until the approval leaves `pending` or `timeout` passes, and reports it.
    fn wait_for_approval(
        &self,
        approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, Error>>;
}

/// The ledger's side of sessions, as one executor sees it: a session's sandbox lives on one
/// executor at a time, which claims it before building the sandbox, renews the claim while
/// it lives, stores its state after a `persist_cwd` run and ends it when it reaps the
/// sandbox. The executor's own identity is implied: the implementation carries it.
pub trait SessionLedger: Send + Sync + 'static {
    /// Claims `session_id` for this executor for `ttl`, creating it for `principal` on first use.
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>>;

    /// Extends this executor's claims; answers the sessions it no longer holds.
    fn renew_sessions(
        &self,
        session_ids: Vec<String>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, Error>>;

    /// Stores the session's state after a `persist_cwd` run changed it.
    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>>;

    /// Records that the session's sandbox ended and releases the claim.
    fn end_session(
        &self,
        session_id: String,
        reason: EndReason,
        runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), Error>>;

    /// Marks every allowed decision of this executor without an outcome as lost (its lease
    /// ends now: replays read OUTCOME_UNKNOWN) and releases its claims; answers how many
    /// decisions.
    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, Error>>;
}
