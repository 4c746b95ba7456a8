//! Asking: a decision that needs a human finds, takes or opens the approval covering it.

use super::rows::{
    A_COLS, A_SELECT, BINDING, D_COLS, D_SELECT, approval_args, approval_from, decision_args,
    decision_from, ev_approval, ev_decision, placeholders,
};
use super::{AskParams, Core, same_request};
use crate::db::{Event, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Approval, ApprovalId, ApprovalState, AskOutcome, AskRequest, AskVerdict, CallId,
    DecisionRecord, Lease, LeaseToken, Scope, Timestamp, random_token,
};
use toolgate_core::Tier;

impl Core {
    pub(crate) async fn ask(&self, req: AskRequest) -> Result<AskOutcome> {
        if req.decision.tier != Tier::Ask {
            return Err(Error::invalid(
                "tier",
                format!(
                    "ask records ask-tier decisions only, got {}",
                    req.decision.tier
                ),
            ));
        }
        let lease = req.decision.lease.unwrap_or(self.settings.lease);
        let d = self.prepare_decision(req.decision, self.clock.now())?;
        let p = AskParams {
            explanation: self.redactor.redact(&req.explanation_json),
            executor: d.executor.as_ref().map(|e| e.as_str().to_owned()),
            pending_ttl: req.pending_ttl.unwrap_or(self.settings.pending_ttl),
            lease,
        };
        let mut conflicts = 0;
        loop {
            match self.retry(|| self.ask_once(&d, &p)).await {
                // Lost a race on a unique key (same call id, or a pending approval created
                // concurrently): the next attempt sees the winner's row.
                Err(Error::AlreadyExists { .. }) if conflicts < 3 => conflicts += 1,
                other => return other,
            }
        }
    }

    pub(super) async fn ask_once(&self, d: &DecisionRecord, p: &AskParams) -> Result<AskOutcome> {
        let now = self.clock.now();
        let mut tx = self.pool.begin().await?;
        let mut events = Vec::new();
        let existing = tx
            .fetch_opt(
                &format!(
                    "SELECT {D_SELECT} FROM tg_decisions WHERE call_id = $1{}",
                    self.for_update()
                ),
                args![d.call_id.as_str()],
            )
            .await?;
        let Some(row) = existing else {
            let (approval, verdict) = self.resolve(&mut tx, d, p, now, &mut events).await?;
            let mut d = d.clone();
            d.approval_id = Some(approval.id.clone());
            d.allowed_at = matches!(verdict, AskVerdict::Allowed { .. }).then_some(now);
            d.lease_expires_at = d.allowed_at.map(|t| t.plus(p.lease));
            tx.exec(
                &format!(
                    "INSERT INTO tg_decisions ({D_COLS}) VALUES ({})",
                    placeholders(D_COLS)
                ),
                decision_args(&d),
            )
            .await?;
            events.push(ev_decision("decision.recorded", &d));
            self.finish(tx, events).await?;
            return Ok(AskOutcome {
                decision: d,
                approval,
                verdict,
            });
        };

        // A repeated call id: the orchestrator resuming, or a retry.
        let ed = decision_from(&row)?;
        same_request(&ed, d)?;
        if ed.tier != Tier::Ask {
            return Err(Error::AlreadyExists {
                what: format!("a {} decision for call_id {}", ed.tier, ed.call_id),
            });
        }
        let current = match &ed.approval_id {
            Some(id) => self.approval_locked(&mut tx, id).await?,
            None => None,
        };
        if ed.allowed_at.is_some() {
            tx.rollback().await?;
            let approval = current
                .ok_or_else(|| Error::Corrupt(format!("decision {} lost its approval", ed.id)))?;
            return Ok(AskOutcome {
                decision: ed,
                approval,
                verdict: AskVerdict::AlreadyRan,
            });
        }
        let mut resolved = None;
        if let Some(a) = current {
            let live = a.expires_at > now;
            match a.state {
                ApprovalState::Pending if live => resolved = Some((a, AskVerdict::Pending)),
                ApprovalState::Denied => resolved = Some((a, AskVerdict::Denied)),
                ApprovalState::Approved if live => {
                    resolved = self
                        .take(&mut tx, &a, &ed.call_id, p, now, &mut events)
                        .await?;
                }
                // Expired, cancelled, or used by another call: look for another approval.
                _ => {}
            }
        }
        let (approval, verdict) = match resolved {
            Some((a, AskVerdict::Pending | AskVerdict::Denied)) if events.is_empty() => {
                tx.rollback().await?;
                let v = if a.state == ApprovalState::Denied {
                    AskVerdict::Denied
                } else {
                    AskVerdict::Pending
                };
                return Ok(AskOutcome {
                    decision: ed,
                    approval: a,
                    verdict: v,
                });
            }
            Some(r) => r,
            None => self.resolve(&mut tx, &ed, p, now, &mut events).await?,
        };
        let allowed = matches!(verdict, AskVerdict::Allowed { .. }).then_some(now);
        // The resuming executor's credential is the one that will run it; its lease starts now.
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_decisions SET approval_id = $2, allowed_at = $3, lease_expires_at = $4, \
                     executor = coalesce($5, executor), executor_reported = coalesce($6, executor_reported) \
                     WHERE id = $1 RETURNING {D_SELECT}"
                ),
                args![
                    ed.id.as_str(),
                    approval.id.as_str(),
                    allowed.map(Timestamp::as_micros),
                    allowed.map(|t| t.plus(p.lease).as_micros()),
                    d.executor.as_ref().map(|e| e.as_str()),
                    d.executor_reported.clone()
                ],
            )
            .await?;
        let ed = decision_from(&expect_row(row, "relinking a decision")?)?;
        events.push(ev_decision("decision.relinked", &ed));
        self.finish(tx, events).await?;
        Ok(AskOutcome {
            decision: ed,
            approval,
            verdict,
        })
    }

    pub(super) async fn approval_locked(
        &self,
        tx: &mut Tx,
        id: &ApprovalId,
    ) -> Result<Option<Approval>> {
        tx.fetch_opt(
            &format!(
                "SELECT {A_SELECT} FROM tg_approvals WHERE id = $1{}",
                self.for_update()
            ),
            args![id.as_str()],
        )
        .await?
        .map(|r| approval_from(&r))
        .transpose()
    }

    /// Uses an approved approval for `call`: consume it (once) or note its use (session).
    pub(super) async fn take(
        &self,
        tx: &mut Tx,
        a: &Approval,
        call: &CallId,
        p: &AskParams,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Option<(Approval, AskVerdict)>> {
        if a.scope == Scope::Session {
            events.push(ev_approval("approval.used", a));
            return Ok(Some((a.clone(), AskVerdict::Allowed { lease: None })));
        }
        let lease = Lease {
            token: LeaseToken(random_token()),
            expires_at: now.plus(p.lease),
        };
        // Compare-and-set: of any number of concurrent consumers exactly one sees the row
        // still `approved`; the others update nothing.
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_approvals SET state = 'consumed', consumed_by_call = $2, consumed_by_executor = $3, \
                     consumed_at = $4, lease_token = $5, lease_expires_at = $6 \
                     WHERE id = $1 AND state = 'approved' AND scope = 'once' AND expires_at > $4 RETURNING {A_SELECT}"
                ),
                args![
                    a.id.as_str(),
                    call.as_str(),
                    p.executor.as_deref(),
                    now.as_micros(),
                    lease.token.get(),
                    lease.expires_at.as_micros()
                ],
            )
            .await?;
        let Some(row) = row else { return Ok(None) };
        let a = approval_from(&row)?;
        tx.touch(&a);
        events.push(ev_approval("approval.consumed", &a));
        Ok(Some((a, AskVerdict::Allowed { lease: Some(lease) })))
    }

    /// Finds or creates the approval covering `d`'s binding.
    pub(super) async fn resolve(
        &self,
        tx: &mut Tx,
        d: &DecisionRecord,
        p: &AskParams,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<(Approval, AskVerdict)> {
        let binding = || {
            args![
                d.session_id.as_str(),
                d.principal.as_str(),
                d.digest.to_hex(),
                d.policy_version.as_str()
            ]
        };
        // Expiry is enforced at use: stale matches are closed before anything can use them.
        let mut a5 = binding();
        a5.push(now.as_micros().into());
        let expired = tx
            .fetch_all(
                &format!(
                    "UPDATE tg_approvals SET state = 'expired', closed_at = $5 \
                     WHERE {BINDING} AND state IN ('pending', 'approved') AND expires_at <= $5 RETURNING {A_SELECT}"
                ),
                a5.clone(),
            )
            .await?;
        for r in &expired {
            let a = approval_from(r)?;
            tx.touch(&a);
            events.push(ev_approval("approval.expired", &a));
        }

        let session = tx
            .fetch_opt(
                &format!(
                    "SELECT {A_SELECT} FROM tg_approvals WHERE {BINDING} AND state = 'approved' \
                     AND scope = 'session' AND expires_at > $5 ORDER BY created_at, id LIMIT 1"
                ),
                a5.clone(),
            )
            .await?;
        if let Some(r) = session {
            let a = approval_from(&r)?;
            events.push(ev_approval("approval.used", &a));
            return Ok((a, AskVerdict::Allowed { lease: None }));
        }

        let candidates = tx
            .fetch_all(
                &format!(
                    "SELECT {A_SELECT} FROM tg_approvals WHERE {BINDING} AND state = 'approved' \
                     AND scope = 'once' AND expires_at > $5 ORDER BY created_at, id LIMIT 4"
                ),
                a5.clone(),
            )
            .await?;
        for r in &candidates {
            let a = approval_from(r)?;
            if let Some(taken) = self.take(tx, &a, &d.call_id, p, now, events).await? {
                return Ok(taken);
            }
        }

        // A human's denial stands for its binding until the approval would have expired:
        // repeating the same request, under any call id, gets the approver's answer again
        // instead of putting the same question to a human a second time.
        let denied = tx
            .fetch_opt(
                &format!(
                    "SELECT {A_SELECT} FROM tg_approvals WHERE {BINDING} AND state = 'denied' \
                     AND expires_at > $5 ORDER BY decided_at DESC, id LIMIT 1"
                ),
                a5.clone(),
            )
            .await?;
        if let Some(r) = denied {
            return Ok((approval_from(&r)?, AskVerdict::Denied));
        }

        let pending_sql = format!(
            "SELECT {A_SELECT} FROM tg_approvals WHERE {BINDING} AND state = 'pending' AND expires_at > $5 LIMIT 1"
        );
        if let Some(r) = tx.fetch_opt(&pending_sql, a5.clone()).await? {
            return Ok((approval_from(&r)?, AskVerdict::Pending));
        }

        let a = Approval {
            id: ApprovalId::generate(),
            call_id: d.call_id.clone(),
            session_id: d.session_id.clone(),
            principal: d.principal.clone(),
            tool: d.tool,
            digest: d.digest,
            policy_version: d.policy_version.clone(),
            request_json: d.request_json.clone(),
            explanation_json: p.explanation.clone(),
            state: ApprovalState::Pending,
            scope: Scope::Once,
            created_at: now,
            expires_at: now.plus(p.pending_ttl),
            decided_by: None,
            decided_at: None,
            reason: None,
            message: None,
            consumed_by_call: None,
            consumed_by_executor: None,
            consumed_at: None,
            lease_token: None,
            lease_expires_at: None,
            closed_at: None,
            trace_id: d.trace_id.clone(),
        };
        // The partial unique index makes identical pending requests share one approval,
        // across replicas too; losing that race means adopting the winner's row.
        let inserted = tx
            .fetch_opt(
                &format!(
                    "INSERT INTO tg_approvals ({A_COLS}) VALUES ({}) \
                     ON CONFLICT (session_id, principal, request_digest, policy_version) WHERE state = 'pending' \
                     DO NOTHING RETURNING {A_SELECT}",
                    placeholders(A_COLS)
                ),
                approval_args(&a),
            )
            .await?;
        if let Some(r) = inserted {
            let a = approval_from(&r)?;
            tx.touch(&a);
            events.push(ev_approval("approval.created", &a));
            return Ok((a, AskVerdict::Pending));
        }
        match tx.fetch_opt(&pending_sql, a5).await? {
            Some(r) => Ok((approval_from(&r)?, AskVerdict::Pending)),
            None => Err(Error::AlreadyExists {
                what: "a concurrently changed pending approval".to_owned(),
            }),
        }
    }
}
