//! The executor's way to the policy when both run in one process: straight into [`PolicyCore`].

use futures::future::BoxFuture;
use tonic::Status;
use toolgate_contracts::policy::v1 as pb;
use toolgate_executor::authz::Authorizer;
use toolgate_policy::PolicyCore;
use toolgate_runtime::auth::Principal;

/// Calls the policy core in process, as the embedded executor's principal.
pub struct InProcess {
    core: PolicyCore,
    executor: Principal,
}

impl InProcess {
    /// Authorizes as `executor` (role `executor`, so it may act for any agent principal).
    pub fn new(core: PolicyCore, executor: Principal) -> Self {
        InProcess { core, executor }
    }
}

impl Authorizer for InProcess {
    fn authorize(
        &self,
        request: pb::AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<pb::AuthorizeResponse, Status>> {
        Box::pin(async move {
            self.core
                .authorize(&self.executor, request, traceparent.as_deref())
                .await
        })
    }

    fn record_outcome(
        &self,
        request: pb::RecordOutcomeRequest,
    ) -> BoxFuture<'_, Result<pb::RecordOutcomeResponse, Status>> {
        Box::pin(async move { self.core.record_outcome(&self.executor, request).await })
    }

    fn wait_for_approval(
        &self,
        request: pb::WaitForApprovalRequest,
    ) -> BoxFuture<'_, Result<pb::WaitForApprovalResponse, Status>> {
        Box::pin(async move { self.core.wait_for_approval(&self.executor, request).await })
    }
}
