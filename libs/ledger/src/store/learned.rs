//! Rules learned from approvals: stored with the approval they come from, revoked (never
//! deleted), listed with the revision of the set. Every change bumps the revision and
//! notifies every replica (`RULES_TOPIC` on the ledger's channel), so each can rebuild its
//! compiled set before its next decision.

use super::Core;
use super::rows::{L_COLS, L_SELECT, ev_learned, learned_args, learned_from, placeholders};
use crate::db::{RULES_TOPIC, Tx, args, expect_row};
use crate::error::{Error, Result};
use crate::model::{
    Approval, LearnedRuleId, LearnedRuleRecord, LearnedRules, NewLearnedRule, Principal, Timestamp,
};

/// The revision row, read by its name `revision`.
const BUMP: &str = "UPDATE tg_learned_revision SET revision = revision + 1 WHERE id = 1";
const REVISION: &str = "SELECT revision AS revision FROM tg_learned_revision WHERE id = 1";

impl Core {
    pub(super) fn check_learned(&self, l: &NewLearnedRule) -> Result<()> {
        if !matches!(l.scope.as_str(), "session" | "workspace" | "all") {
            return Err(Error::invalid(
                "remember.scope",
                format!("`{}`: expected session, workspace or all", l.scope),
            ));
        }
        if l.scope == "session" && l.scope_value.is_empty() {
            return Err(Error::invalid(
                "remember.scope",
                "a session-scoped rule needs the session id",
            ));
        }
        // Patterns are learned from redacted requests; one that still holds a secret the
        // redactor knows is refused rather than stored verbatim.
        if self.redactor.contains_secret(&l.pattern) || self.redactor.contains_secret(&l.display) {
            return Err(Error::invalid(
                "remember",
                "the rule would contain a secret; approve the call once instead",
            ));
        }
        Ok(())
    }

    /// Inserts the rule learned from approval `a` (decided by its `decided_by`) and bumps the
    /// revision, inside the deciding transaction.
    pub(super) async fn insert_learned(
        &self,
        tx: &mut Tx,
        l: &NewLearnedRule,
        a: &Approval,
        now: Timestamp,
    ) -> Result<LearnedRuleRecord> {
        let created_by = a
            .decided_by
            .clone()
            .ok_or_else(|| Error::Database("a decided approval has no approver".into()))?;
        let rule = LearnedRuleRecord {
            id: LearnedRuleId::generate(),
            pattern: l.pattern.clone(),
            display: l.display.clone(),
            scope: l.scope.clone(),
            scope_value: l.scope_value.clone(),
            created_by,
            created_at: now,
            expires_at: l.ttl.map(|t| now.plus(t)),
            revoked_at: None,
            revoked_by: None,
            source_approval: a.id.clone(),
        };
        tx.exec(
            &format!(
                "INSERT INTO tg_learned_rules ({L_COLS}) VALUES ({})",
                placeholders(L_COLS)
            ),
            learned_args(&rule),
        )
        .await?;
        tx.exec(BUMP, vec![]).await?;
        tx.touch_topic(RULES_TOPIC);
        Ok(rule)
    }

    pub(crate) async fn revoke_learned(
        &self,
        id: &LearnedRuleId,
        by: &Principal,
    ) -> Result<LearnedRuleRecord> {
        self.check_identifier("principal", by.as_str())?;
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let row = tx
                .fetch_opt(
                    &format!(
                        "UPDATE tg_learned_rules SET revoked_at = $2, revoked_by = $3 \
                         WHERE id = $1 AND revoked_at IS NULL RETURNING {L_SELECT}"
                    ),
                    args![id.as_str(), now.as_micros(), by.as_str()],
                )
                .await?;
            let Some(row) = row else {
                tx.rollback().await?;
                return Err(Error::RuleNotFound {
                    id: id.as_str().to_owned(),
                });
            };
            let rule = learned_from(&row)?;
            tx.exec(BUMP, vec![]).await?;
            tx.touch_topic(RULES_TOPIC);
            self.finish(tx, vec![ev_learned("rule.revoked", &rule)])
                .await?;
            Ok(rule)
        })
        .await
    }

    /// Every learned rule (revoked and expired included), oldest first, with the revision
    /// they were read at (one snapshot).
    pub(crate) async fn learned_rules(&self) -> Result<LearnedRules> {
        self.retry(|| async {
            let mut tx = self.pool.snapshot().await?;
            let revision: i64 = expect_row(
                tx.fetch_opt(REVISION, vec![]).await?,
                "reading the learned-rules revision",
            )?
            .get("revision")?;
            let rows = tx
                .fetch_all(
                    &format!("SELECT {L_SELECT} FROM tg_learned_rules ORDER BY created_at, id"),
                    vec![],
                )
                .await?;
            tx.rollback().await?;
            Ok(LearnedRules {
                revision: u64::try_from(revision).unwrap_or_default(),
                rules: rows.iter().map(learned_from).collect::<Result<_>>()?,
            })
        })
        .await
    }
}
