//! The executor's way to the policy when both run in one process: through the policy
//! service's own adapter ([`PolicyAdapter`]), without a network hop, so the request is parsed
//! and answered exactly as the gRPC method does.

use futures::future::BoxFuture;
use tonic::Status;
use toolgate_contracts::policy::v1 as pb;
use toolgate_executor::authz::Authorizer;
use toolgate_policy::{PolicyAdapter, PolicyCore};
use toolgate_runtime::auth::Principal;

/// Calls the policy core in process, as the embedded executor's principal.
pub(super) struct InProcess {
    policy: PolicyAdapter,
    executor: Principal,
}

impl InProcess {
    /// Authorizes as `executor` (role `executor`, so it may act for any agent principal).
    pub(super) fn new(core: PolicyCore, executor: Principal) -> Self {
        InProcess {
            policy: PolicyAdapter::new(core),
            executor,
        }
    }
}

impl Authorizer for InProcess {
    fn authorize(
        &self,
        request: pb::AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<pb::AuthorizeResponse, Status>> {
        Box::pin(async move {
            self.policy
                .authorize_as(&self.executor, request, traceparent.as_deref())
                .await
        })
    }

    fn record_outcome(
        &self,
        request: pb::RecordOutcomeRequest,
    ) -> BoxFuture<'_, Result<pb::RecordOutcomeResponse, Status>> {
        Box::pin(async move { self.policy.record_outcome_as(&self.executor, request).await })
    }

    fn wait_for_approval(
        &self,
        request: pb::WaitForApprovalRequest,
    ) -> BoxFuture<'_, Result<pb::WaitForApprovalResponse, Status>> {
        Box::pin(async move {
            self.policy
                .wait_for_approval_as(&self.executor, request)
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_contracts::common::v1::{CallContext, ToolKind};
    use toolgate_runtime::auth::Role;

    /// `toolgate up` runs the same `PolicyCore::authorize` as the policy service, so an
    /// allowed search carries the paths the shipped policy's `secrets` rule hides.
    #[tokio::test]
    async fn an_allowed_search_in_process_carries_the_hidden_paths_and_their_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = toolgate_policy::Config::default();
        cfg.ledger.url = Some(format!("sqlite:{}", dir.path().join("l.db").display()));
        let core = PolicyCore::open(&cfg).await.unwrap();
        let version = core.policy().version().to_owned();
        let exec = Principal {
            name: "exec".into(),
            role: Role::Executor,
        };
        let r = InProcess::new(core, exec)
            .authorize(
                pb::AuthorizeRequest {
                    context: Some(CallContext {
                        call_id: "c1".into(),
                        session_id: "s1".into(),
                        ..Default::default()
                    }),
                    call: Some(pb::ToolCall {
                        tool: ToolKind::FsSearch as i32,
                        path: Some(".".into()),
                        pattern: Some("matchme".into()),
                        ..Default::default()
                    }),
                    principal: "agent".into(),
                    ..Default::default()
                },
                None,
            )
            .await
            .unwrap();
        let Some(pb::authorize_response::Result::Allowed(a)) = r.result else {
            panic!("not allowed: {r:?}");
        };
        let hidden = a.hidden.expect("hidden paths");
        assert_eq!(hidden.policy_version, version);
        assert!(hidden.globs.iter().any(|g| g == "**/.env"), "{hidden:?}");
    }
}
