//! Run slots, taken before a run is authorized.
//!
//! A run refused at the slot limit after its decision would have spent it: the decision
//! allowed (and a once-approval consumed) for a call that never ran. So the executor takes
//! a slot first and asks the policy only with one in hand; a parked call takes its slot when
//! the human has decided, before the Authorize that consumes the approval. The runner keeps
//! its own limit as the last word; a refusal there (a slot it has not yet given back) is
//! reported as "not started", which releases the call in the ledger.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use toolgate_contracts::status;

/// The executor's run slots; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    limit: usize,
}

/// One run slot, held until the run's stream ends.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    /// `limit` slots, the runner's `max_concurrent_runs`.
    pub(crate) fn new(limit: usize) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// A slot now, or the runner's own `BUSY` refusal.
    pub(crate) fn admit(&self) -> Result<Slot, Status> {
        Arc::clone(&self.slots)
            .try_acquire_owned()
            .map(|p| Slot { _permit: p })
            .map_err(|_| {
                status::from_error(&toolgate_process::runner::Error::Busy { limit: self.limit })
            })
    }
}
