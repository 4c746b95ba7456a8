//! Outcomes: what ran, recorded once per decision, fenced by its lease.

use super::Core;
use super::rows::{
    A_SELECT, D_SELECT, O_COLS, O_SELECT, approval_from, decision_from, ev_approval, ev_outcome,
    outcome_args, outcome_from, placeholders,
};
use crate::db::{Event, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Approval, ApprovalState, ExecutorRecord, LeaseToken, NewOutcome, OutcomeRecord, Scope,
    Timestamp,
};
use toolgate_core::Tier;

impl Core {
    pub(crate) async fn record_outcome(&self, no: &NewOutcome) -> Result<OutcomeRecord> {
        let error = self.redactor.opt(no.error.as_deref());
        let integrity = self.redactor.opt(no.integrity.as_deref());
        let executor = ExecutorRecord {
            pod: self.redactor.redact(&no.executor.pod),
            node: self.redactor.redact(&no.executor.node),
            namespace: self.redactor.redact(&no.executor.namespace),
            image: self.redactor.redact(&no.executor.image),
        };
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let d = tx
                .fetch_opt(
                    &format!(
                        "SELECT {D_SELECT} FROM tg_decisions WHERE id = $1{}",
                        self.for_update()
                    ),
                    args![no.decision_id.as_str()],
                )
                .await?
                .map(|r| decision_from(&r))
                .transpose()?
                .ok_or_else(|| Error::DecisionNotFound {
                    id: no.decision_id.as_str().to_owned(),
                })?;
            let o = OutcomeRecord {
                decision_id: d.id.clone(),
                approval_id: d.approval_id.clone(),
                executor_principal: no.executor_principal.clone(),
                executor: executor.clone(),
                started_at: no.started_at,
                finished_at: no.finished_at,
                exit: no.exit,
                stdout_bytes: no.stdout_bytes,
                stderr_bytes: no.stderr_bytes,
                stdout_truncated: no.stdout_truncated,
                stderr_truncated: no.stderr_truncated,
                error: error.clone(),
                recorded_at: now,
                isolation: no.isolation.clone(),
                integrity: integrity.clone(),
            };
            // A statement of its own, after the lock: in READ COMMITTED it sees an outcome a
            // concurrent report committed while this one waited for the lock (a join in the
            // locking statement would read with the snapshot taken before the wait).
            let prior = tx
                .fetch_opt(
                    &format!("SELECT {O_SELECT} FROM tg_outcomes WHERE decision_id = $1"),
                    args![d.id.as_str()],
                )
                .await?;
            if let Some(r) = prior {
                tx.rollback().await?;
                let prior = outcome_from(&r)?;
                let same = OutcomeRecord {
                    recorded_at: prior.recorded_at,
                    ..o.clone()
                };
                return if same == prior {
                    Ok(prior)
                } else {
                    Err(Error::OutcomeConflict {
                        decision_id: d.id.as_str().to_owned(),
                    })
                };
            }
            if d.allowed_at.is_none() {
                tx.rollback().await?;
                return Err(Error::NotRunnable {
                    decision_id: d.id.as_str().to_owned(),
                    why: match d.tier {
                        Tier::Deny => "it was denied".to_owned(),
                        _ => "no approval covered it".to_owned(),
                    },
                });
            }
            let mut events = Vec::new();
            if let Some(aid) = &d.approval_id {
                let a = self.approval_locked(&mut tx, aid).await?.ok_or_else(|| {
                    Error::Corrupt(format!("approval {aid} of decision {} is missing", d.id))
                })?;
                let fenced =
                    a.scope == Scope::Once && a.consumed_by_call.as_ref() == Some(&d.call_id);
                if fenced
                    && let Some(err) = self
                        .fence(
                            &mut tx,
                            &a,
                            held_or(no.lease_held, &a, no.lease_token),
                            now,
                            &mut events,
                        )
                        .await?
                {
                    if events.is_empty() {
                        tx.rollback().await?;
                    } else {
                        self.finish(tx, events).await?;
                    }
                    return Err(err);
                }
            }
            // Every allowed call since schema 3 carries a lease: past it, the call is unknown
            // for good, so a replay that was told "unknown" is never contradicted.
            if let Some(expired) = d.lease_expires_at.filter(|t| *t <= now) {
                if events.is_empty() {
                    tx.rollback().await?;
                } else {
                    self.finish(tx, events).await?;
                }
                return Err(Error::DecisionLeaseExpired {
                    decision_id: d.id.as_str().to_owned(),
                    expired_at_micros: expired.as_micros(),
                });
            }
            events.push(ev_outcome("outcome.recorded", &o));
            tx.insert_appending(
                &format!(
                    "INSERT INTO tg_outcomes ({O_COLS}) VALUES ({})",
                    placeholders(O_COLS)
                ),
                outcome_args(&o),
                events,
            )
            .await?;
            self.finish(tx, Vec::new()).await?;
            Ok(o)
        })
        .await
    }

    /// Checks the consumption lease; completes the approval when the holder reports in time.
    /// `token` is the reporter's (see [`held_or`]).
    pub(super) async fn fence(
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
            // Checked at use, not only by the sweeper: a late report turns the run unknown.
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'unknown', closed_at = $2 WHERE id = $1 AND state = 'consumed' \
                         RETURNING {A_SELECT}"
                    ),
                    args![id.as_str(), now.as_micros()],
                )
                .await?;
            let a = approval_from(&expect_row(row, "closing an expired lease")?)?;
            tx.touch(&a);
            events.push(ev_approval("approval.unknown", &a));
            return Ok(Some(Error::LeaseExpired { id }));
        }
        if token != a.lease_token {
            return Ok(Some(Error::StaleLease { id }));
        }
        let row = tx
            .fetch_opt(
                &format!(
                    "UPDATE tg_approvals SET state = 'completed', closed_at = $2 \
                     WHERE id = $1 AND state = 'consumed' AND lease_token = $3 RETURNING {A_SELECT}"
                ),
                args![
                    id.as_str(),
                    now.as_micros(),
                    a.lease_token.map(LeaseToken::get)
                ],
            )
            .await?;
        let a = approval_from(&expect_row(row, "completing an approval")?)?;
        tx.touch(&a);
        events.push(ev_approval("approval.completed", &a));
        Ok(None)
    }
}

/// The token a report is fenced with: the one its decision's consumption `a` holds when the
/// report asks for that (`held`), else the reporter's own.
pub(super) fn held_or(held: bool, a: &Approval, token: Option<LeaseToken>) -> Option<LeaseToken> {
    if held { a.lease_token } else { token }
}
