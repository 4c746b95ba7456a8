//! Deciding and cancelling approvals.

use super::Core;
use super::rows::{A_SELECT, approval_from, ev_approval, ev_learned};
use crate::db::{Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Approval, ApprovalId, ApprovalState, Decide, LearnedRuleRecord, NewLearnedRule, Principal,
    Scope, Timestamp, Verdict,
};

impl Core {
    pub(crate) async fn decide(&self, id: &ApprovalId, dc: &Decide) -> Result<Approval> {
        Ok(self.decide_learning(id, dc, None).await?.0)
    }

    /// Decides, and with `learn` (an approval only) stores the rule learned from it in the
    /// same transaction: both happen or neither does.
    pub(crate) async fn decide_learning(
        &self,
        id: &ApprovalId,
        dc: &Decide,
        learn: Option<&NewLearnedRule>,
    ) -> Result<(Approval, Option<LearnedRuleRecord>)> {
        self.check_identifier("approver", dc.approver.as_str())?;
        if learn.is_some() && !matches!(dc.verdict, Verdict::Approve { .. }) {
            return Err(Error::invalid(
                "remember",
                "a rule is learned only from an approval, never from a denial",
            ));
        }
        if let Some(l) = learn {
            self.check_learned(l)?;
        }
        let reason = self.redactor.opt(dc.reason.as_deref());
        let message = self.redactor.opt(dc.message.as_deref());
        let (state, scope, action) = match dc.verdict {
            Verdict::Approve { widen_to_session } => (
                ApprovalState::Approved,
                if widen_to_session {
                    Scope::Session
                } else {
                    Scope::Once
                },
                "approved",
            ),
            Verdict::Deny => (ApprovalState::Denied, Scope::Once, "denied"),
        };
        let ttl = dc.ttl.unwrap_or(self.settings.approval_ttl);
        self.retry(|| async {
            let now = self.clock.now();
            // Approval starts the use-by clock; a denial keeps the original expiry.
            let expires = match state {
                ApprovalState::Approved => Some(now.plus(ttl).as_micros()),
                _ => None,
            };
            let mut tx = self.pool.begin().await?;
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = $2, scope = $3, decided_by = $4, decided_at = $5, \
                         reason = $6, message = $7, expires_at = coalesce($8, expires_at) \
                         WHERE id = $1 AND state = 'pending' AND expires_at > $5 AND principal <> $4 \
                         RETURNING {A_SELECT}"
                    ),
                    args![
                        id.as_str(),
                        state.as_str(),
                        scope.as_str(),
                        dc.approver.as_str(),
                        now.as_micros(),
                        reason.clone(),
                        message.clone(),
                        expires
                    ],
                )
                .await?;
            match row {
                Some(r) => {
                    let a = approval_from(&r)?;
                    tx.touch(&a);
                    let mut events = vec![ev_approval(&format!("approval.{action}"), &a)];
                    let rule = match learn {
                        Some(l) => {
                            let rule = self.insert_learned(&mut tx, l, &a, now).await?;
                            events.push(ev_learned("rule.learned", &rule));
                            Some(rule)
                        }
                        None => None,
                    };
                    self.finish(tx, events).await?;
                    Ok((a, rule))
                }
                None => Err(self.refuse(tx, id, &dc.approver, action, now).await?),
            }
        })
        .await
    }

    pub(crate) async fn cancel(
        &self,
        id: &ApprovalId,
        by: &Principal,
        reason: Option<&str>,
    ) -> Result<Approval> {
        let reason = self.redactor.opt(reason);
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'cancelled', decided_by = $2, decided_at = $3, reason = $4, \
                         closed_at = $3 WHERE id = $1 AND state = 'pending' RETURNING {A_SELECT}"
                    ),
                    args![id.as_str(), by.as_str(), now.as_micros(), reason.clone()],
                )
                .await?;
            match row {
                Some(r) => {
                    let a = approval_from(&r)?;
                    tx.touch(&a);
                    self.finish(tx, vec![ev_approval("approval.cancelled", &a)]).await?;
                    Ok(a)
                }
                None => Err(self.refuse(tx, id, by, "cancelled", now).await?),
            }
        })
        .await
    }

    /// Explains why a compare-and-set on a pending approval matched nothing.
    pub(super) async fn refuse(
        &self,
        mut tx: Tx,
        id: &ApprovalId,
        by: &Principal,
        action: &'static str,
        now: Timestamp,
    ) -> Result<Error> {
        let Some(a) = self.approval_locked(&mut tx, id).await? else {
            tx.rollback().await?;
            return Ok(Error::ApprovalNotFound {
                id: id.as_str().to_owned(),
            });
        };
        if a.state == ApprovalState::Pending && a.expires_at <= now {
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_approvals SET state = 'expired', closed_at = $2 WHERE id = $1 AND state = 'pending' \
                         RETURNING {A_SELECT}"
                    ),
                    args![id.as_str(), now.as_micros()],
                )
                .await?;
            let a = approval_from(&expect_row(row, "expiring an approval")?)?;
            tx.touch(&a);
            self.finish(tx, vec![ev_approval("approval.expired", &a)])
                .await?;
            return Ok(Error::Expired {
                id: id.as_str().to_owned(),
            });
        }
        tx.rollback().await?;
        if a.state == ApprovalState::Pending && a.principal == *by && action != "cancelled" {
            return Ok(Error::SelfDecision {
                id: id.as_str().to_owned(),
                principal: by.as_str().to_owned(),
            });
        }
        Ok(Error::NotPending {
            id: id.as_str().to_owned(),
            state: a.state,
            action,
        })
    }
}
