//! Watching and waiting: changes after a cursor, and waits for a decision.

use super::Core;
use super::rows::{A_SELECT, approval_from};
use crate::db::args;
use crate::error::Result;
use crate::model::{Approval, ApprovalFilter, ApprovalId, ApprovalState, Change, Cursor};
use crate::notify::Wake;
use std::time::Duration;

impl Core {
    pub(crate) async fn changes(
        &self,
        after: Cursor,
        filter: &ApprovalFilter,
        limit: u32,
        wait: Duration,
    ) -> Result<(Vec<Change>, Cursor)> {
        let deadline = tokio::time::Instant::now() + wait;
        let limit = limit.clamp(1, 1000);
        // The approval side is A_SELECT itself, so approval_from reads it as in any other
        // query; the event's own columns take the `event_` prefix.
        let sql = format!(
            "SELECT e.seq AS event_seq, e.kind AS event_kind, a.* FROM tg_audit e \
             JOIN (SELECT {A_SELECT} FROM tg_approvals) a ON a.approval_id = e.subject \
             WHERE e.seq > $1 AND e.kind LIKE 'approval.%' ORDER BY e.seq LIMIT $2"
        );
        loop {
            // Subscribe before reading so a change committed in between still wakes us.
            let mut rx = self.hub.changes();
            rx.borrow_and_update();
            let rows = self
                .retry(|| {
                    self.pool.fetch_all(
                        &sql,
                        args![i64::try_from(after.0).unwrap_or(i64::MAX), i64::from(limit)],
                    )
                })
                .await?;
            let mut cursor = after;
            let mut out = Vec::new();
            for r in &rows {
                let seq: i64 = r.get("event_seq")?;
                cursor = Cursor(seq as u64);
                let approval = approval_from(r)?;
                if filter.matches(&approval) {
                    out.push(Change {
                        cursor,
                        kind: r.get("event_kind")?,
                        approval,
                    });
                }
            }
            if !rows.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok((out, cursor));
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return Ok((out, cursor));
            }
        }
    }

    /// Waits for `id` to leave `pending`. The waiter registers, then reads the row once;
    /// after that a decision hands it the committed snapshot (no read per waiter), and only a
    /// bare id or a listener reconnect (a notification may be lost) makes it read again.
    pub(crate) async fn wait_for_decision(
        &self,
        id: &ApprovalId,
        timeout: Duration,
    ) -> Result<Approval> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Registered before the read: a decision committed after it wakes this waiter.
        let mut guard = self.hub.register(id.as_str());
        let mut a = self.get(id).await?;
        loop {
            if a.state != ApprovalState::Pending || a.expires_at <= self.clock.now() {
                return Ok(a);
            }
            let parked = self.hub.park();
            let woke = tokio::time::timeout_at(deadline, guard.wakes.changed()).await;
            drop(parked);
            if !matches!(woke, Ok(Ok(()))) {
                return Ok(a);
            }
            let wake = guard.wakes.borrow_and_update().clone();
            match wake {
                Wake::Now(snapshot) => snapshot.apply(&mut a),
                Wake::Read | Wake::Nothing => a = self.get(id).await?,
            }
        }
    }
}
