//! The ledger's logic, written once against the backend seam in `db`: one `Core` whose
//! operations live in one file per concern (decisions, ask, decide, outcomes, reads, sweep,
//! watch, verify), over the rows and events of `rows`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use toolgate_core::Tier;
use toolgate_core::backoff::Backoff;

use crate::clock::Clock;
use crate::db::{Event, Pool, Tx};
use crate::error::{Error, Result};
use crate::model::{DecisionId, DecisionRecord, NewDecision, Timestamp};
use crate::notify::Hub;
use crate::redact::Redactor;

mod ask;
mod decide;
mod decisions;
mod learned;
mod outcomes;
mod reads;
mod release;
mod rows;
mod sessions;
mod sweep;
mod verify;
mod watch;

pub(crate) use decisions::Pending;

/// Ledger-wide durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub(crate) pending_ttl: Duration,
    pub(crate) approval_ttl: Duration,
    pub(crate) lease: Duration,
    pub(crate) retry_budget: Duration,
}

/// Everything the operations need; shared by the API handle and the writer task.
pub(crate) struct Core {
    pub(crate) pool: Pool,
    pub(crate) redactor: Redactor,
    pub(crate) settings: Settings,
    pub(crate) clock: Clock,
    pub(crate) hub: Arc<Hub>,
    /// Why the database could not store the last write that failed for want of storage,
    /// until a probe write succeeds (see `health`).
    pub(crate) storage_fault: std::sync::Mutex<Option<String>>,
}

impl Core {
    fn is_pg(&self) -> bool {
        matches!(self.pool, Pool::Pg(_))
    }

    /// Row locks exist only on Postgres; SQLite's IMMEDIATE transaction already excludes writers.
    fn for_update(&self) -> &'static str {
        if self.is_pg() { " FOR UPDATE" } else { "" }
    }

    /// Retries an operation while the database is unreachable, with exponential backoff.
    ///
    /// Every operation is safe to repeat: writes are keyed by call id or guarded by
    /// compare-and-set, so a retry after an unacknowledged commit finds its own work.
    pub(crate) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(1));
        loop {
            match op().await {
                Err(Error::Storage(why)) => {
                    let mut fault = self
                        .storage_fault
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if fault.is_none() {
                        tracing::error!(error = %why, "the ledger database cannot store; not serving until a write succeeds");
                    }
                    *fault = Some(why.clone());
                    return Err(Error::Storage(why));
                }
                Err(e) if e.is_transient() => {
                    let delay = backoff.next_delay();
                    if start.elapsed() + delay >= self.settings.retry_budget {
                        return Err(e);
                    }
                    tracing::debug!(error = %e, ?delay, "ledger operation failed transiently; retrying");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    async fn finish(&self, tx: Tx, events: Vec<Event>) -> Result<()> {
        let touched = tx.commit(events).await?;
        // Postgres waiters hear about it through LISTEN (on every replica, this one
        // included); SQLite lives in this process only.
        if !self.is_pg() {
            for t in touched {
                if let Some(s) = t.snapshot {
                    self.hub.deliver_state(&t.id, s);
                }
                self.hub.deliver(&t.id);
            }
        }
        Ok(())
    }

    fn check_identifier(&self, field: &'static str, value: &str) -> Result<()> {
        // Identifiers are lookup keys and cannot be rewritten, so a secret in one is refused.
        if self.redactor.contains_secret(value) {
            return Err(Error::invalid(
                field,
                "contains a secret; identifiers are stored verbatim, use an opaque id",
            ));
        }
        Ok(())
    }

    pub(crate) fn prepare_decision(
        &self,
        nd: NewDecision,
        now: Timestamp,
    ) -> Result<DecisionRecord> {
        self.check_identifier("call_id", nd.call_id.as_str())?;
        self.check_identifier("session_id", nd.session_id.as_str())?;
        self.check_identifier("principal", nd.principal.as_str())?;
        self.check_identifier("policy_version", nd.policy_version.as_str())?;
        if let Some(t) = &nd.trace_id {
            self.check_identifier("trace_id", t.as_str())?;
        }
        for r in &nd.rule_ids {
            self.check_identifier("rule_id", r.as_str())?;
        }
        Ok(DecisionRecord {
            id: DecisionId::generate(),
            call_id: nd.call_id,
            session_id: nd.session_id,
            principal: nd.principal,
            tool: nd.tool,
            digest: nd.digest,
            request_json: self.redactor.redact(&nd.request_json),
            tier: nd.tier,
            rule_ids: nd.rule_ids,
            policy_version: nd.policy_version,
            trace_id: nd.trace_id,
            approval_id: None,
            created_at: now,
            allowed_at: (nd.tier == Tier::Auto).then_some(now),
            executor: nd.executor,
            executor_reported: nd.executor_reported.map(|r| self.redactor.redact(&r)),
            // An ask-tier call gets its lease when an approval covers it.
            lease_expires_at: (nd.tier == Tier::Auto)
                .then(|| now.plus(nd.lease.unwrap_or(self.settings.lease))),
            released_at: None,
            release_reason: None,
        })
    }
}

fn same_request(existing: &DecisionRecord, new: &DecisionRecord) -> Result<()> {
    if existing.digest != new.digest
        || existing.session_id != new.session_id
        || existing.principal != new.principal
    {
        return Err(Error::CallIdReused {
            call_id: existing.call_id.as_str().to_owned(),
            existing: existing.digest.to_hex(),
        });
    }
    Ok(())
}

/// Per-ask values computed once, outside the retry loop.
pub(crate) struct AskParams {
    explanation: String,
    /// The asking executor's credential name, recorded as the consumer.
    executor: Option<String>,
    pending_ttl: Duration,
    lease: Duration,
}
