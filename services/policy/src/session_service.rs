//! The tonic adapter for `SessionService`: wire requests are parsed into the core's session
//! requests, answers and errors are turned back into wire messages and statuses here. The
//! `*_as` methods are what the gRPC methods do for an already authenticated caller, for the
//! executor of `toolgate up` in the same process.

use tonic::{Request, Response, Status};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::session_service_server::SessionService;
use toolgate_ledger::Timestamp;
use toolgate_runtime::auth::{self, Principal, Role};

use crate::core::{PolicyCore, readers, require};
use crate::wire;

/// Serves `SessionService` from a [`PolicyCore`]; callers are authenticated by the
/// interceptor in front of it.
#[derive(Debug, Clone)]
pub struct SessionAdapter {
    core: PolicyCore,
}

const EXECUTORS: &[Role] = &[Role::Executor];

impl SessionAdapter {
    /// An adapter answering from `core`.
    pub fn new(core: PolicyCore) -> Self {
        SessionAdapter { core }
    }

    /// `ClaimSession` for an already authenticated `caller`.
    pub async fn claim_session_as(
        &self,
        caller: &Principal,
        request: pb::ClaimSessionRequest,
    ) -> Result<pb::ClaimSessionResponse, Status> {
        // Authorize, then validate: who may not call this learns nothing about its input.
        require(caller, "ClaimSession", EXECUTORS).map_err(wire::status)?;
        let request = wire::claim_request(request).map_err(wire::status)?;
        let claimed = self
            .core
            .claim_session(caller, request)
            .await
            .map_err(wire::status)?;
        Ok(pb::ClaimSessionResponse {
            session: Some(wire::session(claimed.session, Timestamp::now())),
            resumed: claimed.resumed,
        })
    }

    /// `RenewSessions` for an already authenticated `caller`.
    pub async fn renew_sessions_as(
        &self,
        caller: &Principal,
        request: pb::RenewSessionsRequest,
    ) -> Result<pb::RenewSessionsResponse, Status> {
        require(caller, "RenewSessions", EXECUTORS).map_err(wire::status)?;
        let request = wire::renew_request(request).map_err(wire::status)?;
        let lost = self
            .core
            .renew_sessions(caller, request)
            .await
            .map_err(wire::status)?;
        Ok(pb::RenewSessionsResponse {
            lost: lost.into_iter().map(|s| s.as_str().to_owned()).collect(),
        })
    }

    /// `UpdateSession` for an already authenticated `caller`.
    pub async fn update_session_as(
        &self,
        caller: &Principal,
        request: pb::UpdateSessionRequest,
    ) -> Result<pb::UpdateSessionResponse, Status> {
        require(caller, "UpdateSession", EXECUTORS).map_err(wire::status)?;
        let request = wire::update_request(request).map_err(wire::status)?;
        let s = self
            .core
            .update_session(caller, request)
            .await
            .map_err(wire::status)?;
        Ok(pb::UpdateSessionResponse {
            session: Some(wire::session(s, Timestamp::now())),
        })
    }

    /// `EndSession` for an already authenticated `caller`.
    pub async fn end_session_as(
        &self,
        caller: &Principal,
        request: pb::EndSessionRequest,
    ) -> Result<pb::EndSessionResponse, Status> {
        require(caller, "EndSession", EXECUTORS).map_err(wire::status)?;
        let request = wire::end_request(request).map_err(wire::status)?;
        let s = self
            .core
            .end_session(caller, request)
            .await
            .map_err(wire::status)?;
        Ok(pb::EndSessionResponse {
            session: Some(wire::session(s, Timestamp::now())),
        })
    }

    /// `AbandonRuns` for an already authenticated `caller`.
    pub async fn abandon_runs_as(
        &self,
        caller: &Principal,
        request: pb::AbandonRunsRequest,
    ) -> Result<pb::AbandonRunsResponse, Status> {
        require(caller, "AbandonRuns", EXECUTORS).map_err(wire::status)?;
        let executor = wire::abandon_request(request).map_err(wire::status)?;
        let gone = self
            .core
            .abandon_runs(caller, executor)
            .await
            .map_err(wire::status)?;
        Ok(pb::AbandonRunsResponse {
            decision_ids: gone
                .decision_ids
                .into_iter()
                .map(|d| d.as_str().to_owned())
                .collect(),
            session_ids: gone
                .session_ids
                .into_iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        })
    }

    /// `GetSession` for an already authenticated `caller`.
    pub async fn get_session_as(
        &self,
        caller: &Principal,
        request: pb::GetSessionRequest,
    ) -> Result<pb::GetSessionResponse, Status> {
        require(caller, "GetSession", &readers()).map_err(wire::status)?;
        let id = crate::core::parse_id("session_id", request.session_id).map_err(wire::status)?;
        let s = self
            .core
            .get_session(caller, id)
            .await
            .map_err(wire::status)?;
        Ok(pb::GetSessionResponse {
            session: Some(wire::session(s, Timestamp::now())),
        })
    }

    /// `ListSessions` for an already authenticated `caller`.
    pub async fn list_sessions_as(
        &self,
        caller: &Principal,
        request: pb::ListSessionsRequest,
    ) -> Result<pb::ListSessionsResponse, Status> {
        require(caller, "ListSessions", &readers()).map_err(wire::status)?;
        let request = wire::list_sessions_request(request).map_err(wire::status)?;
        let sessions = self
            .core
            .list_sessions(caller, request)
            .await
            .map_err(wire::status)?;
        let now = Timestamp::now();
        Ok(pb::ListSessionsResponse {
            sessions: sessions
                .into_iter()
                .map(|s| wire::session(s, now))
                .collect(),
        })
    }
}

#[tonic::async_trait]
impl SessionService for SessionAdapter {
    async fn claim_session(
        &self,
        request: Request<pb::ClaimSessionRequest>,
    ) -> Result<Response<pb::ClaimSessionResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.claim_session_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn renew_sessions(
        &self,
        request: Request<pb::RenewSessionsRequest>,
    ) -> Result<Response<pb::RenewSessionsResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.renew_sessions_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn update_session(
        &self,
        request: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::UpdateSessionResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.update_session_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn end_session(
        &self,
        request: Request<pb::EndSessionRequest>,
    ) -> Result<Response<pb::EndSessionResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.end_session_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn abandon_runs(
        &self,
        request: Request<pb::AbandonRunsRequest>,
    ) -> Result<Response<pb::AbandonRunsResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.abandon_runs_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::GetSessionResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.get_session_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = auth::caller(&request)?;
        self.list_sessions_as(&caller, request.into_inner())
            .await
            .map(Response::new)
    }
}
