//! The tonic adapter for `PolicyService`.

use tonic::{Request, Response, Status};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_runtime::auth;

use crate::core::PolicyCore;

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
}

/// The W3C `traceparent` of an incoming request, if any.
pub(crate) fn traceparent<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tonic::async_trait]
impl PolicyService for PolicyAdapter {
    async fn classify(
        &self,
        request: Request<pb::ClassifyRequest>,
    ) -> Result<Response<pb::ClassifyResponse>, Status> {
        let caller = auth::caller(&request)?;
        let mut r = request.into_inner();
        if r.principal.is_empty() {
            r.principal = caller.name;
        }
        self.core.classify(r).map(Response::new)
    }

    async fn authorize(
        &self,
        request: Request<pb::AuthorizeRequest>,
    ) -> Result<Response<pb::AuthorizeResponse>, Status> {
        let caller = auth::caller(&request)?;
        let tp = traceparent(&request);
        self.core
            .authorize(&caller, request.into_inner(), tp.as_deref())
            .await
            .map(Response::new)
    }

    async fn record_outcome(
        &self,
        request: Request<pb::RecordOutcomeRequest>,
    ) -> Result<Response<pb::RecordOutcomeResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.core
            .record_outcome(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        auth::caller(&request)?;
        Ok(Response::new(self.core.get_policy()))
    }
}
