//! The tonic adapter for `ApprovalService`: how humans see and decide parked calls.
//!
//! Unary methods delegate to [`PolicyCore`]; `WatchApprovals` is a long-poll loop over the
//! ledger's change feed that ends when the client goes away or the service shuts down.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use toolgate_contracts::policy::v1 as pb;
use toolgate_contracts::policy::v1::approval_service_server::ApprovalService;
use toolgate_contracts::status;
use toolgate_ledger::{ApprovalFilter, ApprovalState, Cursor, PageToken};
use toolgate_runtime::auth;
use toolgate_runtime::shutdown::Shutdown;

use crate::core::{APPROVERS, PolicyCore, PolicyError, require};
use crate::policy_service::wait_for_approval;
use crate::wire;

/// How long one long-poll of the change feed waits before polling again.
const POLL: Duration = Duration::from_secs(25);

/// Serves `ApprovalService` from a [`PolicyCore`].
#[derive(Debug, Clone)]
pub struct ApprovalAdapter {
    core: PolicyCore,
    shutdown: Shutdown,
}

impl ApprovalAdapter {
    /// An adapter answering from `core`; open watches end when `shutdown` fires.
    pub fn new(core: PolicyCore, shutdown: Shutdown) -> Self {
        ApprovalAdapter { core, shutdown }
    }
}

#[tonic::async_trait]
impl ApprovalService for ApprovalAdapter {
    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = wire::list_request(request.into_inner()).map_err(wire::status)?;
        self.core
            .list_approvals(&caller, request)
            .await
            .map(|page| Response::new(wire::list_response(page)))
            .map_err(wire::status)
    }

    async fn get_approval(
        &self,
        request: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::GetApprovalResponse>, Status> {
        let caller = auth::caller(&request)?;
        let id = wire::approval_id(request.into_inner().approval_id).map_err(wire::status)?;
        self.core
            .get_approval(&caller, id)
            .await
            .map(|v| {
                Response::new(pb::GetApprovalResponse {
                    approval: Some(wire::approval(v)),
                })
            })
            .map_err(wire::status)
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = wire::decide_request(request.into_inner()).map_err(wire::status)?;
        self.core
            .decide(&caller, request)
            .await
            .map(|d| {
                Response::new(pb::DecideApprovalResponse {
                    approval: Some(wire::approval(d.view)),
                    rule: d
                        .rule
                        .map(|r| wire::learned_rule(r, toolgate_ledger::Timestamp::now())),
                })
            })
            .map_err(wire::status)
    }

    async fn propose_rule(
        &self,
        request: Request<pb::ProposeRuleRequest>,
    ) -> Result<Response<pb::ProposeRuleResponse>, Status> {
        let caller = auth::caller(&request)?;
        let r = request.into_inner();
        let id = wire::approval_id(r.approval_id).map_err(wire::status)?;
        let scope = wire::rule_scope(r.scope).map_err(wire::status)?;
        self.core
            .propose_rule(&caller, id, scope)
            .await
            .map(|p| Response::new(wire::rule_proposal(&p)))
            .map_err(wire::status)
    }

    async fn list_rules(
        &self,
        request: Request<pb::ListRulesRequest>,
    ) -> Result<Response<pb::ListRulesResponse>, Status> {
        let caller = auth::caller(&request)?;
        let r = request.into_inner();
        self.core
            .list_rules(&caller, r.include_inactive)
            .await
            .map(|page| Response::new(wire::rules_response(page)))
            .map_err(wire::status)
    }

    async fn revoke_rule(
        &self,
        request: Request<pb::RevokeRuleRequest>,
    ) -> Result<Response<pb::RevokeRuleResponse>, Status> {
        let caller = auth::caller(&request)?;
        let r = request.into_inner();
        self.core
            .revoke_rule(&caller, r.rule_id)
            .await
            .map(|rule| {
                Response::new(pb::RevokeRuleResponse {
                    rule: Some(wire::learned_rule(rule, toolgate_ledger::Timestamp::now())),
                })
            })
            .map_err(wire::status)
    }

    async fn cancel_approval(
        &self,
        request: Request<pb::CancelApprovalRequest>,
    ) -> Result<Response<pb::CancelApprovalResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = wire::cancel_request(request.into_inner()).map_err(wire::status)?;
        self.core
            .cancel_approval(&caller, request)
            .await
            .map(|v| {
                Response::new(pb::CancelApprovalResponse {
                    approval: Some(wire::approval(v)),
                })
            })
            .map_err(wire::status)
    }

    type WatchApprovalsStream = ReceiverStream<Result<pb::WatchApprovalsResponse, Status>>;

    async fn watch_approvals(
        &self,
        request: Request<pb::WatchApprovalsRequest>,
    ) -> Result<Response<Self::WatchApprovalsStream>, Status> {
        let caller = auth::caller(&request)?;
        require(&caller, "WatchApprovals", APPROVERS).map_err(wire::status)?;
        let r = request.into_inner();
        let (filter, states) =
            wire::filter(&r.states, r.session_id, r.principal).map_err(wire::status)?;
        let cursor = if r.cursor.is_empty() {
            None
        } else {
            Some(parse_cursor(&r.cursor)?)
        };
        let (tx, rx) = mpsc::channel(64);
        let watch = Watch {
            core: self.core.clone(),
            filter,
            states,
            tx,
        };
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let tx = watch.tx.clone();
            tokio::select! {
                r = watch.run(cursor) => {
                    if let Err(s) = r {
                        let _ = tx.send(Err(s)).await;
                    }
                }
                () = shutdown.wait() => {}
                () = tx.closed() => {}
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn wait_for_approval(
        &self,
        request: Request<pb::WaitForApprovalRequest>,
    ) -> Result<Response<pb::WaitForApprovalResponse>, Status> {
        let caller = auth::caller(&request)?;
        wait_for_approval(&self.core, &caller, request.into_inner())
            .await
            .map(Response::new)
    }
}

fn parse_cursor(s: &str) -> Result<Cursor, Status> {
    s.parse::<u64>().map(Cursor).map_err(|_| {
        status::invalid(
            "cursor",
            "cursor is not a value from a previous WatchApprovals event; omit it to start over",
        )
    })
}

/// One open watch.
struct Watch {
    core: PolicyCore,
    filter: ApprovalFilter,
    /// Several states, checked here (the ledger filters on one at most); empty: all.
    states: Vec<ApprovalState>,
    tx: mpsc::Sender<Result<pb::WatchApprovalsResponse, Status>>,
}

/// The client went away; stop quietly.
struct Gone;

impl Watch {
    fn wanted(&self, s: ApprovalState) -> bool {
        self.states.is_empty() || self.states.contains(&s)
    }

    async fn send(
        &self,
        cursor: Cursor,
        kind: pb::ApprovalEventKind,
        a: toolgate_ledger::Approval,
    ) -> Result<Result<(), Gone>, Status> {
        let event = pb::WatchApprovalsResponse {
            cursor: cursor.0.to_string(),
            kind: kind as i32,
            approval: Some(wire::approval(
                self.core.view(a).await.map_err(wire::status)?,
            )),
        };
        Ok(self.tx.send(Ok(event)).await.map_err(|_| Gone))
    }

    async fn run(&self, cursor: Option<Cursor>) -> Result<(), Status> {
        let ledger = self.core.ledger();
        let mut at = match cursor {
            Some(c) => c,
            None => {
                // Read the head before the snapshot: whatever changes after it arrives as
                // a live event, so the snapshot can be stale but never leaves a gap.
                let head = ledger
                    .head()
                    .await
                    .map_err(|e| wire::status(PolicyError::Ledger(e)))?;
                if self.snapshot(head).await?.is_err() {
                    return Ok(());
                }
                head
            }
        };
        loop {
            let (changes, next) = ledger
                .changes(at, self.filter.clone(), 256, POLL)
                .await
                .map_err(|e| wire::status(PolicyError::Ledger(e)))?;
            for c in changes {
                if !self.wanted(c.approval.state) {
                    continue;
                }
                let kind = if c.kind == "approval.created" {
                    pb::ApprovalEventKind::Created
                } else {
                    pb::ApprovalEventKind::Updated
                };
                if self.send(c.cursor, kind, c.approval).await?.is_err() {
                    return Ok(());
                }
            }
            at = next;
        }
    }

    /// Sends every current approval the watch selects: without a state filter, the
    /// pending ones (what an approver has to act on).
    async fn snapshot(&self, head: Cursor) -> Result<Result<(), Gone>, Status> {
        let states = if self.states.is_empty() {
            vec![ApprovalState::Pending]
        } else {
            self.states.clone()
        };
        let filter = ApprovalFilter {
            state: (states.len() == 1).then(|| states[0]),
            ..self.filter.clone()
        };
        let ledger = self.core.ledger();
        let mut token: Option<PageToken> = None;
        loop {
            let page = ledger
                .list(filter.clone(), token.take(), 500)
                .await
                .map_err(|e| wire::status(PolicyError::Ledger(e)))?;
            for a in page.items {
                if states.contains(&a.state)
                    && self
                        .send(head, pb::ApprovalEventKind::Snapshot, a)
                        .await?
                        .is_err()
                {
                    return Ok(Err(Gone));
                }
            }
            match page.next {
                Some(n) => token = Some(n),
                None => return Ok(Ok(())),
            }
        }
    }
}
