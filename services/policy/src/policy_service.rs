//! The tonic adapter for `PolicyService`: wire requests are parsed into the core's domain
//! requests, answers and errors are turned back into wire messages and statuses here.

use tonic::{Request, Response, Status};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_contracts::{policy_wire, status};
use toolgate_core::traceparent::TraceParent;
use toolgate_runtime::auth::{self, Principal, Role};

use crate::core::{PolicyCore, require};
use crate::wire;

/// Serves `PolicyService` from a [`PolicyCore`]; callers are authenticated by the
/// interceptor in front of it.
#[derive(Debug, Clone)]
pub struct PolicyAdapter {
    core: PolicyCore,
}

impl PolicyAdapter {
    /// An adapter answering from `core`.
    pub fn new(core: PolicyCore) -> Self {
        PolicyAdapter { core }
    }

    /// `Authorize` for an already authenticated `caller`: what the gRPC method does, for an
    /// executor in the same process.
    pub async fn authorize_as(
        &self,
        caller: &Principal,
        request: pb::AuthorizeRequest,
        traceparent: Option<&str>,
    ) -> Result<pb::AuthorizeResponse, Status> {
        // Authorize, then validate: who may not call this learns nothing about its input.
        require(caller, "Authorize", &[Role::Executor]).map_err(wire::status)?;
        let request = policy_wire::authorize_request_from_wire(request)
            .map_err(|e| status::from_error(&e))?;
        self.core
            .authorize(caller, request, traceparent)
            .await
            .map(wire::authorize_response)
            .map_err(wire::status)
    }

    /// `RecordOutcome` for an already authenticated `caller`.
    pub async fn record_outcome_as(
        &self,
        caller: &Principal,
        request: pb::RecordOutcomeRequest,
    ) -> Result<pb::RecordOutcomeResponse, Status> {
        require(caller, "RecordOutcome", &[Role::Executor]).map_err(wire::status)?;
        let request =
            policy_wire::outcome_report_from_wire(request).map_err(|e| status::from_error(&e))?;
        let already_recorded = self
            .core
            .record_outcome(caller, request)
            .await
            .map_err(wire::status)?;
        Ok(pb::RecordOutcomeResponse { already_recorded })
    }

    /// `ApprovalService.WaitForApproval` for an already authenticated `caller`.
    pub async fn wait_for_approval_as(
        &self,
        caller: &Principal,
        request: pb::WaitForApprovalRequest,
    ) -> Result<pb::WaitForApprovalResponse, Status> {
        wait_for_approval(&self.core, caller, request).await
    }
}

/// `WaitForApproval`, shared by both adapters.
pub(crate) async fn wait_for_approval(
    core: &PolicyCore,
    caller: &Principal,
    request: pb::WaitForApprovalRequest,
) -> Result<pb::WaitForApprovalResponse, Status> {
    let request = wire::wait_request(request).map_err(wire::status)?;
    let view = core
        .wait_for_approval(caller, request)
        .await
        .map_err(wire::status)?;
    Ok(pb::WaitForApprovalResponse {
        approval: Some(wire::approval(view)),
    })
}

/// The W3C `traceparent` of an incoming request, if it has a valid one.
pub(crate) fn traceparent<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .filter(|v| TraceParent::parse(v).is_ok())
        .map(str::to_owned)
}

#[tonic::async_trait]
impl PolicyService for PolicyAdapter {
    async fn classify(
        &self,
        request: Request<pb::ClassifyRequest>,
    ) -> Result<Response<pb::ClassifyResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request =
            wire::classify_request(request.into_inner(), &caller.name).map_err(wire::status)?;
        Ok(Response::new(wire::classify_response(
            self.core.classify(request).await,
        )))
    }

    async fn authorize(
        &self,
        request: Request<pb::AuthorizeRequest>,
    ) -> Result<Response<pb::AuthorizeResponse>, Status> {
        let caller = auth::caller(&request)?;
        let tp = traceparent(&request);
        self.authorize_as(&caller, request.into_inner(), tp.as_deref())
            .await
            .map(Response::new)
    }

    async fn record_outcome(
        &self,
        request: Request<pb::RecordOutcomeRequest>,
    ) -> Result<Response<pb::RecordOutcomeResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.record_outcome_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        auth::caller(&request)?;
        Ok(Response::new(wire::policy_response(self.core.describe())))
    }
}
