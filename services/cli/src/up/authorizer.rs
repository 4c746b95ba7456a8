//! The executor's way to the policy when both run in one process: through the policy
//! service's own adapter ([`PolicyAdapter`]) and the executor's own contract mapping
//! ([`contract`]), without a network hop, so every request and answer is read exactly as
//! over gRPC.

use std::time::Duration;

use futures::future::BoxFuture;
use toolgate_executor::authz::Authorizer;
use toolgate_executor::authz::api::{
    ApprovalStatus, AuthorizeRequest, OutcomeReport, PolicyAnswer, PolicyFailure,
};
use toolgate_executor::authz::contract;
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
        request: AuthorizeRequest,
        traceparent: Option<String>,
    ) -> BoxFuture<'_, Result<PolicyAnswer, PolicyFailure>> {
        Box::pin(async move {
            let answer = self
                .policy
                .authorize_as(
                    &self.executor,
                    contract::authorize_request(request),
                    traceparent.as_deref(),
                )
                .await
                .map_err(|s| contract::failure(&s))?;
            contract::policy_answer(answer)
        })
    }

    fn record_outcome(&self, report: OutcomeReport) -> BoxFuture<'_, Result<(), PolicyFailure>> {
        Box::pin(async move {
            self.policy
                .record_outcome_as(&self.executor, contract::outcome_request(report))
                .await
                .map(|_| ())
                .map_err(|s| contract::failure(&s))
        })
    }

    fn wait_for_approval(
        &self,
        approval_id: String,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ApprovalStatus, PolicyFailure>> {
        Box::pin(async move {
            let answer = self
                .policy
                .wait_for_approval_as(
                    &self.executor,
                    contract::wait_request(&approval_id, timeout),
                )
                .await
                .map_err(|s| contract::failure(&s))?;
            contract::approval_status(answer)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::{ToolCall, ToolKind};
    use toolgate_executor::authz::api::Verdict;
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
                AuthorizeRequest {
                    call_id: "c1".into(),
                    session_id: "s1".into(),
                    description: String::new(),
                    principal: "agent".into(),
                    call: ToolCall {
                        pattern: Some("matchme".into()),
                        ..ToolCall::fs(ToolKind::FsSearch, ".")
                    },
                    labels: Default::default(),
                    executor: Default::default(),
                },
                None,
            )
            .await
            .unwrap();
        let Verdict::Allowed { hidden, .. } = r.verdict else {
            panic!("not allowed: {r:?}");
        };
        let hidden = hidden.expect("hidden paths");
        assert_eq!(hidden.policy_version, version);
        assert!(hidden.globs.iter().any(|g| g == "**/.env"), "{hidden:?}");
    }
}
