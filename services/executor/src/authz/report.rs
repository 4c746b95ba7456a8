//! Outcome reporting: with retries, never failing the user's call.
//!
//! A call that ran is answered only once its outcome is recorded ([`Reporter::record`]), or
//! after [`RECORD_WAIT`] when the policy service cannot take it: an answer the client saw
//! then has its outcome in the ledger even if the executor dies the next instant. The
//! delivery itself runs in a background task, so it goes on (with its retries) past that wait
//! and past a client that went away.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{oneshot, watch};
use tonic::{Code, Status};
use toolgate_core::backoff::Backoff;

use super::api::{ExecutorIdentity, Finished, OutcomeReport};
use super::{Authorized, Authorizer};

/// Attempts per outcome before it is given up (and logged).
const ATTEMPTS: u32 = 8;
/// Ceiling of the first retry delay; doubled after each failure up to [`MAX_BACKOFF`]
/// (toolgate's one backoff policy, fully jittered).
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Ceiling of the delay between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a call's answer waits for its outcome to be recorded before it leaves anyway
/// (marked not recorded where the protocol can say so); the report is still retried.
pub(crate) const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Reports outcomes to the policy service from background tasks.
#[derive(Clone)]
pub(crate) struct Reporter {
    authorizer: Arc<dyn Authorizer>,
    identity: ExecutorIdentity,
    in_flight: Arc<watch::Sender<usize>>,
}

impl Reporter {
    /// A reporter naming this executor as the one that ran the calls.
    pub(crate) fn new(authorizer: Arc<dyn Authorizer>, identity: ExecutorIdentity) -> Self {
        Reporter {
            authorizer,
            identity,
            in_flight: Arc::new(watch::Sender::new(0)),
        }
    }

    /// Reports `outcome` for the call `proof` allowed, in the background. Safe to call from
    /// `Drop`: without a runtime the outcome is logged as lost.
    pub(crate) fn report(&self, proof: &Authorized, outcome: Ran) {
        self.spawn(proof.decision_id(), outcome);
    }

    /// Reports `outcome` and waits until it is recorded, at most [`RECORD_WAIT`]: true when
    /// it was. Call it before answering, so that what the client sees is durable.
    pub(crate) fn record(
        &self,
        proof: &Authorized,
        outcome: Ran,
    ) -> impl Future<Output = bool> + Send + 'static {
        self.record_for(proof.decision_id(), outcome)
    }

    /// [`Reporter::record`] for the decision `decision_id`.
    pub(crate) fn record_for(
        &self,
        decision_id: &str,
        outcome: Ran,
    ) -> impl Future<Output = bool> + Send + 'static {
        let recorded = self.spawn(decision_id, outcome);
        async move {
            let Some(recorded) = recorded else {
                return false;
            };
            matches!(
                tokio::time::timeout(RECORD_WAIT, recorded).await,
                Ok(Ok(true))
            )
        }
    }

    /// Starts the delivery; the receiver says whether it succeeded.
    fn spawn(&self, decision_id: &str, outcome: Ran) -> Option<oneshot::Receiver<bool>> {
        let request = OutcomeReport {
            decision_id: decision_id.to_owned(),
            started_at: outcome.started_at,
            finished_at: outcome.finished_at,
            finished: outcome.finished,
            executor: self.identity.clone(),
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::error!(decision_id = %request.decision_id, "outcome not recorded: no runtime");
            return None;
        };
        self.in_flight.send_modify(|n| *n += 1);
        let this = self.clone();
        let (done, recorded) = oneshot::channel();
        // The report belongs to the call's trace, though it outlives the call.
        let traced = toolgate_runtime::telemetry::in_current_trace(async move {
            let _ = done.send(this.deliver(request).await);
        });
        let in_flight = Arc::clone(&self.in_flight);
        handle.spawn(async move {
            traced.await;
            // Only now, with the traced future dropped: it held the call's span, which cannot
            // end while it does. Counted down earlier, `flush` let the executor flush its spans
            // at exit before that span had ended, and the span was lost.
            in_flight.send_modify(|n| *n -= 1);
        });
        Some(recorded)
    }

    /// Delivers `request`, retrying; true when it was recorded.
    async fn deliver(&self, request: OutcomeReport) -> bool {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        for attempt in 1..=ATTEMPTS {
            match self.authorizer.record_outcome(request.clone()).await {
                Ok(()) => return true,
                Err(f) if f.is_retriable() && attempt < ATTEMPTS => {
                    tracing::warn!(decision_id = %request.decision_id, attempt, error = %f.message, "outcome report failed; retrying");
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Err(f) => {
                    tracing::error!(decision_id = %request.decision_id, attempt, reason = %f.reason, error = %f.message, "outcome not recorded");
                    return false;
                }
            }
        }
        false
    }

    /// Waits (at most `limit`) until every outcome reported so far was delivered or given up.
    pub(crate) async fn flush(&self, limit: Duration) {
        let mut rx = self.in_flight.subscribe();
        if tokio::time::timeout(limit, rx.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                pending = *rx.borrow(),
                "outcome reports still pending at shutdown"
            );
        }
    }
}

/// How an allowed call ended, before it is reported.
#[derive(Debug)]
pub(crate) struct Ran {
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended.
    pub finished_at: SystemTime,
    /// What happened.
    pub finished: Finished,
}

/// A call refused after its decision but before it started: not an execution.
pub(crate) fn not_started(refusal: &Status) -> Ran {
    let now = SystemTime::now();
    Ran {
        started_at: now,
        finished_at: now,
        finished: Finished::NotStarted {
            code: toolgate_contracts::status::code_name(refusal.code()),
            reason: toolgate_contracts::status::error_info(refusal)
                .map(|(r, _)| r)
                .unwrap_or_default(),
        },
    }
}

/// The outcome of a filesystem call: its times and the status code and reason it ended with.
pub(crate) fn fs_outcome(started_at: SystemTime, result: Result<(), &Status>) -> Ran {
    let (code, reason) = match result {
        Ok(()) => (Code::Ok, String::new()),
        Err(s) => (
            s.code(),
            toolgate_contracts::status::error_info(s)
                .map(|(r, _)| r)
                .unwrap_or_default(),
        ),
    };
    Ran {
        started_at,
        finished_at: SystemTime::now(),
        finished: Finished::Fs {
            code: toolgate_contracts::status::code_name(code),
            reason,
        },
    }
}
