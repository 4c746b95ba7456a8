//! Reads: approvals, calls and decisions by id; listings.

use super::Core;
use super::rows::{A_SELECT, D_SELECT, approval_from, decision_from};
use crate::db::args;
use crate::error::{Error, Result};
use crate::model::{
    Approval, ApprovalFilter, ApprovalId, ApprovalState, CallId, CallRecord, DecisionId,
    DecisionRecord, Page, PageToken,
};

impl Core {
    pub(crate) async fn get(&self, id: &ApprovalId) -> Result<Approval> {
        self.retry(|| async {
            self.pool
                .fetch_opt(
                    &format!("SELECT {A_SELECT} FROM tg_approvals WHERE id = $1"),
                    args![id.as_str()],
                )
                .await?
                .map(|r| approval_from(&r))
                .transpose()?
                .ok_or_else(|| Error::ApprovalNotFound {
                    id: id.as_str().to_owned(),
                })
        })
        .await
    }

    pub(crate) async fn list(
        &self,
        filter: &ApprovalFilter,
        page: Option<&PageToken>,
        limit: u32,
    ) -> Result<Page<Approval>> {
        let limit = limit.clamp(1, 500) as usize;
        let (after_t, after_id) = match page {
            Some(p) => {
                let (t, id) = p.parts()?;
                (Some(t), Some(id.to_owned()))
            }
            None => (None, None),
        };
        let sql = format!(
            "SELECT {A_SELECT} FROM tg_approvals WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR session_id = $2) \
             AND ($3 IS NULL OR principal = $3) AND ($4 IS NULL OR created_at < $4 OR (created_at = $4 AND id < $5)) \
             ORDER BY created_at DESC, id DESC LIMIT $6"
        );
        let rows = self
            .retry(|| {
                self.pool.fetch_all(
                    &sql,
                    args![
                        filter.state.map(ApprovalState::as_str),
                        filter.session_id.as_ref().map(|s| s.as_str()),
                        filter.principal.as_ref().map(|p| p.as_str()),
                        after_t,
                        after_id.clone(),
                        (limit + 1) as i64
                    ],
                )
            })
            .await?;
        let mut items = rows.iter().map(approval_from).collect::<Result<Vec<_>>>()?;
        let next = if items.len() > limit {
            items.truncate(limit);
            items.last().map(|a| PageToken::new(a.created_at, &a.id))
        } else {
            None
        };
        Ok(Page { items, next })
    }

    pub(crate) async fn lookup_call(&self, call_id: &CallId) -> Result<Option<CallRecord>> {
        self.retry(|| async {
            let Some(row) = self
                .pool
                .fetch_opt(
                    &format!("SELECT {D_SELECT} FROM tg_decisions WHERE call_id = $1"),
                    args![call_id.as_str()],
                )
                .await?
            else {
                return Ok(None);
            };
            let decision = decision_from(&row)?;
            let approval = match &decision.approval_id {
                Some(id) => Some(self.get(id).await?),
                None => None,
            };
            let outcome = self.outcome_of(&decision.id).await?;
            Ok(Some(CallRecord {
                decision,
                approval,
                outcome,
            }))
        })
        .await
    }

    pub(crate) async fn decision(&self, id: &DecisionId) -> Result<DecisionRecord> {
        self.retry(|| async {
            self.pool
                .fetch_opt(
                    &format!("SELECT {D_SELECT} FROM tg_decisions WHERE id = $1"),
                    args![id.as_str()],
                )
                .await?
                .map(|r| decision_from(&r))
                .transpose()?
                .ok_or_else(|| Error::DecisionNotFound {
                    id: id.as_str().to_owned(),
                })
        })
        .await
    }
}
