//! The approval methods: wait for, list, get, decide and cancel.

use std::time::Duration;

use toolgate_ledger::{self as ledger, ApprovalId, ApprovalState, Decide, PageToken};
use toolgate_runtime::auth::{Principal, Role};
use tracing::Instrument;

use super::api::{
    ApprovalPage, ApprovalView, CancelRequest, DecideRequest, Decided, ListApprovalsRequest,
    WaitRequest,
};
use super::{APPROVERS, PolicyCore, PolicyError, parse_id, require};

impl PolicyCore {
    /// Waits until an approval leaves `pending` or the (clamped) timeout passes.
    ///
    /// Executors (resuming a parked call), approvers and admins may wait; agents may not: they
    /// learn an approval's fate by repeating their call through an executor, which is the
    /// only path that can act on it.
    pub async fn wait_for_approval(
        &self,
        caller: &Principal,
        req: WaitRequest,
    ) -> Result<ApprovalView, PolicyError> {
        require(
            caller,
            "WaitForApproval",
            &[Role::Executor, Role::Approver, Role::Admin],
        )?;
        let timeout = req.timeout.min(self.inner.max_wait);
        // The time spent waiting for a human, visible in the trace.
        let span = tracing::info_span!(
            "approval.wait",
            approval_id = %req.approval_id,
            timeout_ms = timeout.as_millis() as u64,
            state = tracing::field::Empty,
        );
        let a = self
            .inner
            .ledger
            .wait_for_decision(req.approval_id, timeout)
            .instrument(span.clone())
            .await?;
        span.record("state", tracing::field::display(&a.state));
        self.view(a).await
    }

    /// Approvals matching the filters, newest first (approvers and admins).
    pub async fn list_approvals(
        &self,
        caller: &Principal,
        req: ListApprovalsRequest,
    ) -> Result<ApprovalPage, PolicyError> {
        require(caller, "ListApprovals", APPROVERS)?;
        let size = req.page_size;
        let mut token = req.page_token;
        let mut items = Vec::new();
        let next = loop {
            let got = self
                .inner
                .ledger
                .list(req.filter.clone(), token.take(), size as u32)
                .await?;
            let mut rest = got.items.into_iter();
            for a in rest.by_ref() {
                if req.states.is_empty() || req.states.contains(&a.state) {
                    items.push(a);
                    if items.len() == size {
                        break;
                    }
                }
            }
            let more = rest.next().is_some() || got.next.is_some();
            if items.len() == size {
                break more.then(|| items.last().map(PageToken::after)).flatten();
            }
            match got.next {
                Some(n) => token = Some(n),
                None => break None,
            }
        };
        let mut approvals = Vec::with_capacity(items.len());
        for a in items {
            approvals.push(self.view(a).await?);
        }
        Ok(ApprovalPage {
            approvals,
            next_page_token: next,
        })
    }

    /// One approval with its explanation (approvers and admins).
    pub async fn get_approval(
        &self,
        caller: &Principal,
        approval_id: ApprovalId,
    ) -> Result<ApprovalView, PolicyError> {
        require(caller, "GetApproval", APPROVERS)?;
        let a = self.inner.ledger.get(approval_id).await?;
        self.view(a).await
    }

    /// Approves or denies a pending approval (approvers and admins, never the requester).
    pub async fn decide_approval(
        &self,
        caller: &Principal,
        req: DecideRequest,
    ) -> Result<ApprovalView, PolicyError> {
        Ok(self.decide(caller, req).await?.view)
    }

    /// [`PolicyCore::decide_approval`], with the rule learned when `remember` asks for one.
    pub async fn decide(
        &self,
        caller: &Principal,
        req: DecideRequest,
    ) -> Result<Decided, PolicyError> {
        require(caller, "DecideApproval", APPROVERS)?;
        let approver: ledger::Principal = parse_id("principal", caller.name.clone())?;
        if req.remember.is_some() {
            let d = self.decide_remembering(caller, approver, req).await?;
            self.decided_metrics(&d.view.approval);
            return Ok(d);
        }
        let a = self
            .write(
                "ledger.write",
                "decide",
                self.inner.ledger.decide(
                    req.approval_id,
                    Decide {
                        approver,
                        verdict: req.verdict,
                        reason: req.reason,
                        message: req.message,
                        ttl: req.ttl,
                    },
                ),
            )
            .await?;
        self.decided_metrics(&a);
        tracing::info!(approval_id = %a.id, state = %a.state, by = %caller.name, "approval decided");
        Ok(Decided {
            view: self.view(a).await?,
            rule: None,
        })
    }

    fn decided_metrics(&self, a: &ledger::Approval) {
        let verdict = if a.state == ApprovalState::Denied {
            "denied"
        } else {
            "approved"
        };
        let pending_for = a.decided_at.map(|at| {
            Duration::from_micros(
                u64::try_from(at.as_micros() - a.created_at.as_micros()).unwrap_or(0),
            )
        });
        self.inner.metrics.approval_decided(verdict, pending_for);
    }

    /// Cancels a pending approval (approvers, admins, or the agent principal that asked).
    pub async fn cancel_approval(
        &self,
        caller: &Principal,
        req: CancelRequest,
    ) -> Result<ApprovalView, PolicyError> {
        if caller.role == Role::Agent {
            let a = self.inner.ledger.get(req.approval_id.clone()).await?;
            own_request(caller, "CancelApproval", &a)?;
        } else {
            require(caller, "CancelApproval", APPROVERS)?;
        }
        let by: ledger::Principal = parse_id("principal", caller.name.clone())?;
        let a = self
            .write(
                "ledger.write",
                "cancel",
                self.inner.ledger.cancel(req.approval_id, by, req.reason),
            )
            .await?;
        self.inner.metrics.approval_decided("cancelled", None);
        self.view(a).await
    }

    /// A stored approval as callers see it: its effective state and the decision that
    /// consumed it.
    pub async fn view(&self, a: ledger::Approval) -> Result<ApprovalView, PolicyError> {
        let consumed_decision_id = match &a.consumed_by_call {
            Some(call) => self
                .inner
                .ledger
                .lookup_call(call.clone())
                .await?
                .map(|r| r.decision.id),
            None => None,
        };
        // Expiry is enforced at use and by the sweeper; until the sweeper runs, report a
        // lapsed approval as what it effectively is.
        let state = match a.state {
            ApprovalState::Pending | ApprovalState::Approved
                if a.expires_at <= ledger::Timestamp::now() =>
            {
                ApprovalState::Expired
            }
            s => s,
        };
        Ok(ApprovalView {
            approval: a,
            state,
            consumed_decision_id,
        })
    }
}

/// An agent may act on an approval only when it asked for it.
fn own_request(
    caller: &Principal,
    method: &'static str,
    a: &ledger::Approval,
) -> Result<(), PolicyError> {
    if a.principal.as_str() == caller.name {
        return Ok(());
    }
    Err(PolicyError::NotRequester {
        principal: caller.name.clone(),
        method,
        approval_id: a.id.clone(),
    })
}
