//! The tonic adapter for `PolicyService`.

use std::sync::Arc;
use std::time::SystemTime;

use tonic::{Request, Response, Status};
use toolgate_contracts::convert::tier_to_wire;
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::policy_service_server::PolicyService;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_policy_engine::{CallContext, Policy, request_digest};

use crate::wire;

/// Where the policy in force comes from: a watched file or the shipped default.
#[derive(Debug, Clone)]
pub enum PolicySource {
    /// A document on disk, reloaded on change and on SIGHUP.
    File(Arc<toolgate_policy_engine::PolicyFile>),
    /// The shipped default policy.
    Builtin(Arc<Policy>),
}

impl PolicySource {
    /// The policy in force now.
    pub fn current(&self) -> Arc<Policy> {
        match self {
            PolicySource::File(f) => f.current(),
            PolicySource::Builtin(p) => p.clone(),
        }
    }

    fn describe(&self) -> String {
        match self {
            PolicySource::File(f) => f.path().display().to_string(),
            PolicySource::Builtin(_) => "builtin".into(),
        }
    }
}

/// Serves `PolicyService`.
#[derive(Debug, Clone)]
pub struct PolicyAdapter {
    source: PolicySource,
    loaded_at: SystemTime,
}

impl PolicyAdapter {
    /// An adapter answering from `source`.
    pub fn new(source: PolicySource) -> Self {
        PolicyAdapter {
            source,
            loaded_at: SystemTime::now(),
        }
    }
}

fn unsupported(rpc: &str) -> Status {
    status::status(
        Reason::Unsupported,
        format!(
            "{rpc} needs the approval ledger, which this policy service does not run yet; \
             use Classify for a dry-run decision"
        ),
        [],
    )
}

#[tonic::async_trait]
impl PolicyService for PolicyAdapter {
    async fn classify(
        &self,
        request: Request<pb::ClassifyRequest>,
    ) -> Result<Response<pb::ClassifyResponse>, Status> {
        let r = request.into_inner();
        let call = wire::tool_call(r.call)?;
        let policy = self.source.current();
        let ctx = CallContext {
            session_id: r.session_id,
            principal: r.principal,
            labels: r.labels.into_iter().collect(),
        };
        let decision = policy.classify(&call, &ctx);
        let digest = request_digest(&call, &ctx.session_id, &ctx.principal, policy.version());
        Ok(Response::new(pb::ClassifyResponse {
            explanation: Some(wire::explanation(&decision)),
            request_digest: digest,
        }))
    }

    async fn authorize(
        &self,
        _request: Request<pb::AuthorizeRequest>,
    ) -> Result<Response<pb::AuthorizeResponse>, Status> {
        Err(unsupported("Authorize"))
    }

    async fn record_outcome(
        &self,
        _request: Request<pb::RecordOutcomeRequest>,
    ) -> Result<Response<pb::RecordOutcomeResponse>, Status> {
        Err(unsupported("RecordOutcome"))
    }

    async fn get_policy(
        &self,
        _request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::GetPolicyResponse>, Status> {
        let policy = self.source.current();
        Ok(Response::new(pb::GetPolicyResponse {
            version: policy.version().to_owned(),
            default_tier: tier_to_wire(policy.default_tier()) as i32,
            rules: policy
                .summary()
                .into_iter()
                .map(|r| pb::RuleSummary {
                    rule_id: r.id,
                    tier: tier_to_wire(r.tier) as i32,
                    reason: r.reason,
                    source: wire::source(r.source) as i32,
                    line: r.line as u32,
                })
                .collect(),
            loaded_at: Some(prost_types::Timestamp::from(self.loaded_at)),
            source: self.source.describe(),
        }))
    }
}
