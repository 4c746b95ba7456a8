//! Releasing: an allowed call refused before it started was not executed. Its decision goes
//! back to "not allowed" (saying when and why), so the same `call_id` may be allowed again,
//! and a once-approval it consumed is approved again instead of spent.

use super::Core;
use super::rows::{A_SELECT, D_SELECT, approval_from, decision_from, ev_approval, ev_decision};
use crate::db::{Event, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Approval, ApprovalState, DecisionRecord, LeaseToken, NotStarted, Scope, Timestamp,
};

impl Core {
    pub(crate) async fn release(&self, ns: &NotStarted) -> Result<DecisionRecord> {
        let reason = self.redactor.redact(&ns.reason);
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let d = tx
                .fetch_opt(
                    &format!(
                        "SELECT {D_SELECT} FROM tg_decisions WHERE id = $1{}",
                        self.for_update()
                    ),
                    args![ns.decision_id.as_str()],
                )
                .await?
                .map(|r| decision_from(&r))
                .transpose()?
                .ok_or_else(|| Error::DecisionNotFound {
                    id: ns.decision_id.as_str().to_owned(),
                })?;
            let ran = tx
                .fetch_opt(
                    "SELECT decision_id AS outcome_decision_id FROM tg_outcomes WHERE decision_id = $1",
                    args![d.id.as_str()],
                )
                .await?
                .is_some();
            if ran {
                tx.rollback().await?;
                return Err(Error::OutcomeConflict {
                    decision_id: d.id.as_str().to_owned(),
                });
            }
            if d.allowed_at.is_none() {
                tx.rollback().await?;
                // A retried report finds its own release.
                if d.released_at.is_some() && d.release_reason.as_deref() == Some(reason.as_str())
                {
                    return Ok(d);
                }
                return Err(Error::NotRunnable {
                    decision_id: d.id.as_str().to_owned(),
                    why: "it is not allowed now".to_owned(),
                });
            }
            // Past its lease the call is unknown for good: someone may already have been told.
            if let Some(expired) = d.lease_expires_at.filter(|t| *t <= now) {
                tx.rollback().await?;
                return Err(Error::DecisionLeaseExpired {
                    decision_id: d.id.as_str().to_owned(),
                    expired_at_micros: expired.as_micros(),
                });
            }
            let mut events = Vec::new();
            if let Some(aid) = &d.approval_id {
                let a = self.approval_locked(&mut tx, aid).await?.ok_or_else(|| {
                    Error::Corrupt(format!("approval {aid} of decision {} is missing", d.id))
                })?;
                let held = a.scope == Scope::Once && a.consumed_by_call.as_ref() == Some(&d.call_id);
                if held
                    && let Some(err) = self
                        .restore(
                            &mut tx,
                            &a,
                            super::outcomes::held_or(ns.lease_held, &a, ns.lease_token),
                            now,
                            &mut events,
                        )
                        .await?
                {
                    tx.rollback().await?;
                    return Err(err);
                }
            }
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_decisions SET allowed_at = NULL, lease_expires_at = NULL, \
                         released_at = $2, release_reason = $3 \
                         WHERE id = $1 AND allowed_at IS NOT NULL RETURNING {D_SELECT}"
                    ),
                    args![d.id.as_str(), now.as_micros(), reason.as_str()],
                )
                .await?;
            let released = decision_from(&expect_row(row, "releasing a decision")?)?;
            events.push(ev_decision("decision.released", &released));
            self.finish(tx, events).await?;
            Ok(released)
        })
        .await
    }

    /// Gives a once-approval back: `consumed` by this call's lease → `approved`, usable by
    /// the retry (or an identical call). `Some(error)` when the lease no longer fences it.
    async fn restore(
        &self,
        tx: &mut Tx,
        a: &Approval,
        token: Option<LeaseToken>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Option<Error>> {
        let id = a.id.as_str().to_owned();
        match a.state {
            ApprovalState::Consumed => {}
            ApprovalState::Unknown => return Ok(Some(Error::LeaseExpired { id })),
            _ => return Ok(Some(Error::StaleLease { id })),
        }
        if a.lease_expires_at.is_some_and(|t| t <= now) {
            return Ok(Some(Error::LeaseExpired { id }));
        }
        if token != a.lease_token {
            return Ok(Some(Error::StaleLease { id }));
        }
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_approvals SET state = 'approved', consumed_by_call = NULL, \
                     consumed_by_executor = NULL, consumed_at = NULL, lease_token = NULL, lease_expires_at = NULL \
                     WHERE id = $1 AND state = 'consumed' AND lease_token = $2 RETURNING {A_SELECT}"
                ),
                args![id.as_str(), a.lease_token.map(LeaseToken::get)],
            )
            .await?;
        let a = approval_from(&expect_row(row, "restoring an approval")?)?;
        // Wakes waiters on it: an identical parked call may take it now.
        tx.touch(&a);
        events.push(ev_approval("approval.restored", &a));
        Ok(None)
    }

    /// Allows a released auto-tier call again for its retry (compare-and-set: of concurrent
    /// retries exactly one is allowed; the others see it allowed and in flight).
    pub(super) async fn reallow(
        &self,
        tx: &mut Tx,
        existing: &DecisionRecord,
        retry: &DecisionRecord,
    ) -> Result<Option<DecisionRecord>> {
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_decisions SET allowed_at = $2, lease_expires_at = $3, \
                     executor = coalesce($4, executor), executor_reported = coalesce($5, executor_reported) \
                     WHERE id = $1 AND allowed_at IS NULL AND released_at IS NOT NULL RETURNING {D_SELECT}"
                ),
                args![
                    existing.id.as_str(),
                    retry.allowed_at.map(Timestamp::as_micros),
                    retry.lease_expires_at.map(Timestamp::as_micros),
                    retry.executor.as_ref().map(|e| e.as_str()),
                    retry.executor_reported.clone()
                ],
            )
            .await?;
        row.map(|r| decision_from(&r)).transpose()
    }
}
