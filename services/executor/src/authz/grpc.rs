//! The policy service over gRPC, failing closed.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use std::sync::Arc;
use tonic::metadata::{Ascii, MetadataValue};

use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use toolgate_contracts::policy::v1::approval_service_client::ApprovalServiceClient;
use toolgate_contracts::policy::v1::policy_service_client::PolicyServiceClient;
use toolgate_contracts::policy::v1::session_service_client::SessionServiceClient;
use toolgate_contracts::policy_wire as wire;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_policy_api::{
    ApprovalStatus, AuthorizeAnswer, AuthorizeRequest, Authorizer, EndReason, Error,
    ExecutorIdentity, OutcomeReport, SessionLedger, SessionRefusal, SessionState, StoredSession,
};
use toolgate_runtime::telemetry;
use tracing::Instrument;

use super::balance::{self, Pool};
use crate::config::PolicySection;
use toolgate_runtime::transport::{ClientTls, Dial};

/// The RPCs this client makes, as their client spans are named.
const AUTHORIZE: &str = "toolgate.policy.v1.PolicyService/Authorize";
const RECORD_OUTCOME: &str = "toolgate.policy.v1.PolicyService/RecordOutcome";
const WAIT_FOR_APPROVAL: &str = "toolgate.policy.v1.ApprovalService/WaitForApproval";
const CLAIM_SESSION: &str = "toolgate.policy.v1.SessionService/ClaimSession";
const RENEW_SESSIONS: &str = "toolgate.policy.v1.SessionService/RenewSessions";
const UPDATE_SESSION: &str = "toolgate.policy.v1.SessionService/UpdateSession";
const END_SESSION: &str = "toolgate.policy.v1.SessionService/EndSession";
const ABANDON_RUNS: &str = "toolgate.policy.v1.SessionService/AbandonRuns";

/// Which connections a call goes out on.
#[derive(Clone, Copy)]
enum Lane {
    /// The replica's shared connection: calls answered within the request timeout.
    Calls,
    /// The replica's wait connections: `WaitForApproval`, held until a human decides.
    Waits,
}

/// A tonic client of `PolicyService` and `ApprovalService` with this executor's credential.
///
/// The channel connects lazily and reconnects by itself. Every transport failure, timeout,
/// `UNAVAILABLE` answer or refused executor credential becomes `UNAVAILABLE` /
/// `POLICY_UNAVAILABLE` naming the endpoint: the executor never runs a call it could not
/// get a decision for.
#[derive(Clone)]
pub struct GrpcAuthorizer {
    endpoint: String,
    pool: Arc<Pool>,
    bearer: MetadataValue<Ascii>,
    request_timeout: Duration,
}

impl std::fmt::Debug for GrpcAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcAuthorizer")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl GrpcAuthorizer {
    /// A client for the `[policy]` section; nothing connects until the first call. The
    /// error names the offending field.
    ///
    /// The channel is balanced over every address the endpoints resolve to (see
    /// `balance`), so it must be built inside a Tokio runtime.
    pub fn new(section: &PolicySection) -> Result<Self, String> {
        let targets = balance::parse(&section.endpoint)?;
        let token = section.credential()?;
        let bearer =
            toolgate_runtime::auth::bearer(&token).map_err(|e| format!("policy.token: {e}"))?;
        let connect_timeout = Duration::from_millis(section.connect_timeout_ms);
        let keepalive = Duration::from_millis(section.keepalive_interval_ms);
        let keepalive_timeout = Duration::from_millis(section.keepalive_timeout_ms);
        let tls = if targets.iter().any(|t| t.scheme == "https") {
            Some(ClientTls::load(&section.tls).map_err(|e| format!("policy.{}", e.0))?)
        } else {
            None
        };
        let make: balance::MakeEndpoint = Box::new(move |target, addr| {
            Ok(Dial::new(&target.url, Some(addr), tls.as_ref())
                .map_err(|e| format!("policy.endpoint: {}", e.0))?
                .map(|e| {
                    e.connect_timeout(connect_timeout)
                        .http2_keep_alive_interval(keepalive)
                        .keep_alive_timeout(keepalive_timeout)
                        .keep_alive_while_idle(true)
                }))
        });
        let pool = Pool::start(
            targets,
            make,
            Duration::from_millis(section.resolve_interval_ms),
        );
        Ok(GrpcAuthorizer {
            endpoint: section.endpoint.clone(),
            pool,
            bearer,
            request_timeout: Duration::from_millis(section.request_timeout_ms),
        })
    }

    /// A request with this executor's credential and the current trace context. Call it
    /// inside the call's client span, so the policy service's span becomes its child. Without
    /// a current context (telemetry off, outside the RPC's task) `fallback` is forwarded.
    fn request<T>(&self, message: T, fallback: Option<&str>) -> Request<T> {
        let mut r = Request::new(message);
        r.metadata_mut()
            .insert("authorization", self.bearer.clone());
        telemetry::inject(r.metadata_mut());
        if !r.metadata().contains_key("traceparent")
            && let Some(tp) = fallback.and_then(|tp| MetadataValue::try_from(tp).ok())
        {
            r.metadata_mut().insert("traceparent", tp);
        }
        r
    }

    /// Runs one call with a client-side deadline inside a client span for `rpc`, mapping
    /// failures to fail-closed statuses. `send` builds the request (inside the span) and
    /// sends it on the channel it is given; it is called again on another replica when an
    /// attempt certainly never reached the one it went to (see [`balance`]).
    async fn call<T, F, Fut>(
        &self,
        rpc: &'static str,
        lane: Lane,
        limit: Duration,
        mut send: F,
    ) -> Result<T, Status>
    where
        F: FnMut(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let method = rpc.rsplit('/').next().unwrap_or(rpc);
        let span = telemetry::client_span(rpc);
        let attempts = async {
            if !self.pool.ready(limit).await {
                return Err(self.unavailable(method, "no policy replica address could be resolved"));
            }
            let mut tried = Vec::new();
            loop {
                let Some(backend) = self.pool.pick(&tried) else {
                    return Err(self.unavailable(method, "no policy replica could be reached"));
                };
                let slot = match lane {
                    Lane::Calls => None,
                    Lane::Waits => Some(backend.wait_slot()),
                };
                let channel = slot
                    .as_ref()
                    .map_or_else(|| backend.channel(), |s| s.channel());
                match send(channel).await {
                    Ok(r) => {
                        backend.reached();
                        return Ok(r.into_inner());
                    }
                    Err(s) if balance::unreached(&s) => {
                        backend.unreachable();
                        tried.push(backend.addr());
                        if tried.len() >= self.pool.len() {
                            return Err(self.fail(method, s));
                        }
                    }
                    Err(s) => {
                        // An answer from the replica proves it reachable. A connection lost
                        // mid-call is not resent (the call may have been decided), but the
                        // replica is set aside like an unreachable one: a caller's next call
                        // would otherwise go out on the same dead connection and fail too.
                        if s.code() == Code::Unavailable {
                            backend.unreachable();
                        } else {
                            backend.reached();
                        }
                        return Err(self.fail(method, s));
                    }
                }
            }
        };
        let result = async {
            match tokio::time::timeout(limit, attempts).await {
                Ok(r) => r,
                Err(_) => Err(self.unavailable(
                    method,
                    &format!("no answer within {} ms", limit.as_millis()),
                )),
            }
        }
        .instrument(span.clone())
        .await;
        telemetry::record_client_status(
            &span,
            result.as_ref().map_or_else(Status::code, |_| Code::Ok),
        );
        result
    }

    fn fail(&self, method: &'static str, s: Status) -> Status {
        match s.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                self.unavailable(method, s.message())
            }
            // A session of another principal is an answer about the session, not the
            // credential.
            Code::PermissionDenied if is_session_answer(&s) => s,
            Code::Unauthenticated | Code::PermissionDenied => self.unavailable(
                method,
                &format!(
                    "it refused this executor's credential ({}); check policy.token",
                    s.message()
                ),
            ),
            _ => s,
        }
    }

    fn unavailable(&self, method: &'static str, detail: &str) -> Status {
        tracing::warn!(endpoint = %self.endpoint, method, %detail, "policy service unavailable");
        // Only Authorize and WaitForApproval gate a call; RecordOutcome is retried in the
        // background after the call ran.
        let advice = if method == "RecordOutcome" {
            "the outcome report is retried"
        } else if matches!(
            method,
            "ClaimSession" | "RenewSessions" | "UpdateSession" | "EndSession" | "AbandonRuns"
        ) {
            "the session's record in the ledger was not read or written; nothing was run, retry later"
        } else {
            "nothing was run, retry the same call later (a retry answered CALL_IN_FLIGHT means the decision \
             was recorded before the failure: it turns into OUTCOME_UNKNOWN when the lease runs out, and then \
             the call needs a new call_id)"
        };
        status::status(
            Reason::PolicyUnavailable,
            format!(
                "the policy service at {} is unavailable ({method}: {detail}); {advice}",
                self.endpoint
            ),
            [("endpoint", self.endpoint.clone())],
        )
    }
}

/// Whether a status is the policy service's answer about a session (its `ErrorInfo` names
/// the session) rather than about the call or the credential.
fn is_session_answer(s: &Status) -> bool {
    status::error_info(s).is_some_and(|(_, md)| md.contains_key("session_id"))
}

impl Authorizer for GrpcAuthorizer {
    fn authorize(
        &self,
        request: AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<AuthorizeAnswer, Error>> {
        let request = wire::authorize_request_to_wire(request);
        async move {
            let answer = self
                .call(AUTHORIZE, Lane::Calls, self.request_timeout, |channel| {
                    let request = self.request(request.clone(), traceparent.as_deref());
                    async move { PolicyServiceClient::new(channel).authorize(request).await }
                })
                .await
                .map_err(|s| wire::error_from_status(&s))?;
            wire::authorize_answer_from_wire(answer)
        }
        .boxed()
    }

    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), Error>> {
        let request = wire::outcome_report_to_wire(report);
        async move {
            self.call(
                RECORD_OUTCOME,
                Lane::Calls,
                self.request_timeout,
                |channel| {
                    let request = self.request(request.clone(), None);
                    async move {
                        PolicyServiceClient::new(channel)
                            .record_outcome(request)
                            .await
                    }
                },
            )
            .await
            .map(|_| ())
            .map_err(|s| wire::error_from_status(&s))
        }
        .boxed()
    }

    fn wait_for_approval(
        &self,
        approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, Error>> {
        let request = wire::wait_request_to_wire(approval_id, timeout);
        async move {
            let answer = self
                .call(
                    WAIT_FOR_APPROVAL,
                    Lane::Waits,
                    timeout + self.request_timeout,
                    |channel| {
                        let request = self.request(request.clone(), None);
                        async move {
                            ApprovalServiceClient::new(channel)
                                .wait_for_approval(request)
                                .await
                        }
                    },
                )
                .await
                .map_err(|s| wire::error_from_status(&s))?;
            wire::approval_status_from_wire(answer)
        }
        .boxed()
    }
}

impl GrpcAuthorizer {
    /// The ledger's side of sessions over this client's connections (the same replicas,
    /// failover and credential), acting as `executor`.
    pub fn sessions(&self, executor: ExecutorIdentity) -> GrpcSessions {
        GrpcSessions {
            client: self.clone(),
            executor,
        }
    }
}

/// [`SessionLedger`] over gRPC: `SessionService` on the policy replicas, as one executor.
/// Failures fail closed like the authorizer's (`POLICY_UNAVAILABLE` naming the endpoint).
#[derive(Clone)]
pub struct GrpcSessions {
    client: GrpcAuthorizer,
    executor: ExecutorIdentity,
}

impl std::fmt::Debug for GrpcSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcSessions")
            .field("endpoint", &self.client.endpoint)
            .field("executor_id", &self.executor.executor_id)
            .finish_non_exhaustive()
    }
}

impl GrpcSessions {
    /// One `SessionService` call on the calls lane, with the request timeout.
    async fn session_call<Req, T, F, Fut>(
        &self,
        rpc: &'static str,
        message: Req,
        send: F,
    ) -> Result<T, Status>
    where
        Req: Clone,
        F: Fn(SessionServiceClient<Channel>, Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let c = &self.client;
        c.call(rpc, Lane::Calls, c.request_timeout, |channel| {
            send(
                SessionServiceClient::new(channel),
                c.request(message.clone(), None),
            )
        })
        .await
    }
}

impl SessionLedger for GrpcSessions {
    fn claim_session(
        &self,
        session_id: String,
        principal: String,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<StoredSession, SessionRefusal>> {
        let request =
            wire::claim_session_request_to_wire(&self.executor, session_id, principal, ttl);
        async move {
            let answer = self
                .session_call(CLAIM_SESSION, request, |mut c, r| async move {
                    c.claim_session(r).await
                })
                .await
                .map_err(|s| wire::session_refusal(&s))?;
            wire::claimed_session_from_wire(answer)
        }
        .boxed()
    }

    fn renew_sessions(
        &self,
        session_ids: Vec<String>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<String>, Error>> {
        let request = wire::renew_sessions_request_to_wire(&self.executor, session_ids, ttl);
        async move {
            self.session_call(RENEW_SESSIONS, request, |mut c, r| async move {
                c.renew_sessions(r).await
            })
            .await
            .map(|r| r.lost)
            .map_err(|s| wire::error_from_status(&s))
        }
        .boxed()
    }

    fn update_session(
        &self,
        session_id: String,
        state: SessionState,
    ) -> BoxFuture<'_, Result<(), SessionRefusal>> {
        let request = wire::update_session_request_to_wire(&self.executor, session_id, state);
        async move {
            self.session_call(UPDATE_SESSION, request, |mut c, r| async move {
                c.update_session(r).await
            })
            .await
            .map(|_| ())
            .map_err(|s| wire::session_refusal(&s))
        }
        .boxed()
    }

    fn end_session(
        &self,
        session_id: String,
        reason: EndReason,
        runs_stopped: u32,
    ) -> BoxFuture<'_, Result<(), Error>> {
        let request =
            wire::end_session_request_to_wire(&self.executor, session_id, reason, runs_stopped);
        async move {
            self.session_call(END_SESSION, request, |mut c, r| async move {
                c.end_session(r).await
            })
            .await
            .map(|_| ())
            .map_err(|s| wire::error_from_status(&s))
        }
        .boxed()
    }

    fn abandon_runs(&self) -> BoxFuture<'_, Result<usize, Error>> {
        let request = wire::abandon_runs_request_to_wire(&self.executor);
        async move {
            self.session_call(ABANDON_RUNS, request, |mut c, r| async move {
                c.abandon_runs(r).await
            })
            .await
            .map(|r| r.decision_ids.len())
            .map_err(|s| wire::error_from_status(&s))
        }
        .boxed()
    }
}
