//! The sweep: expiring what nobody decided or used in time.

use super::Core;
use super::rows::{A_SELECT, approval_from, ev_approval};
use crate::db::args;
use crate::error::Result;
use crate::model::SweepReport;

impl Core {
    pub(crate) async fn sweep(&self) -> Result<SweepReport> {
        self.retry(|| async {
            let now = self.clock.now();
            let mut tx = self.pool.begin().await?;
            let expired = tx
                .fetch_all(
                    &format!(
                        "UPDATE tg_approvals SET state = 'expired', closed_at = $1 \
                         WHERE state IN ('pending', 'approved') AND expires_at <= $1 RETURNING {A_SELECT}"
                    ),
                    args![now.as_micros()],
                )
                .await?;
            let unknown = tx
                .fetch_all(
                    &format!(
                        "UPDATE tg_approvals SET state = 'unknown', closed_at = $1 \
                         WHERE state = 'consumed' AND lease_expires_at <= $1 RETURNING {A_SELECT}"
                    ),
                    args![now.as_micros()],
                )
                .await?;
            let mut events = Vec::new();
            for (rows, kind) in [(&expired, "approval.expired"), (&unknown, "approval.unknown")] {
                for r in rows {
                    let a = approval_from(r)?;
                    tx.touch(&a);
                    events.push(ev_approval(kind, &a));
                }
            }
            self.finish(tx, events).await?;
            Ok(SweepReport {
                expired: expired.len() as u64,
                unknown: unknown.len() as u64,
            })
        })
        .await
    }
}
