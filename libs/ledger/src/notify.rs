//! Wake-ups: one listener per process, fanned out in memory to per-approval waiters.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use toolgate_core::backoff::Backoff;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use crate::db::CHANNEL;
use crate::error::Result;

/// In-memory fan-out of "approval X changed".
#[derive(Debug)]
pub(crate) struct Hub {
    waiters: Mutex<HashMap<String, (usize, Arc<Notify>)>>,
    generation: watch::Sender<u64>,
    parked: AtomicUsize,
    /// Bumped whenever the learned rules may have changed (a notification about them, or a
    /// listener reconnect that may have lost one).
    rules: AtomicU64,
}

impl Hub {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Hub {
            waiters: Mutex::new(HashMap::new()),
            generation: watch::Sender::new(0),
            parked: AtomicUsize::new(0),
            rules: AtomicU64::new(0),
        })
    }

    /// Wakes the waiters of one approval and every change-feed watcher.
    pub(crate) fn deliver(&self, approval_id: &str) {
        if approval_id == crate::store::RULES_TOPIC {
            self.rules.fetch_add(1, Ordering::SeqCst);
            return;
        }
        let notify = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(approval_id)
            .map(|(_, n)| n.clone());
        if let Some(n) = notify {
            n.notify_waiters();
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Wakes everyone: used when notifications may have been lost (listener reconnect).
    pub(crate) fn wake_all(&self) {
        self.rules.fetch_add(1, Ordering::SeqCst);
        let all: Vec<_> = self
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|(_, n)| n.clone())
            .collect();
        for n in all {
            n.notify_waiters();
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Registers interest in one approval; the guard unregisters on drop.
    pub(crate) fn register(self: &Arc<Self>, approval_id: &str) -> WaitGuard {
        let mut map = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(approval_id.to_owned())
            .or_insert_with(|| (0, Arc::new(Notify::new())));
        entry.0 += 1;
        WaitGuard {
            hub: self.clone(),
            id: approval_id.to_owned(),
            notify: entry.1.clone(),
        }
    }

    /// Counts a waiter as parked (it has read `pending` and sleeps) until the guard drops.
    pub(crate) fn park(self: &Arc<Self>) -> Parked {
        self.parked.fetch_add(1, Ordering::SeqCst);
        Parked(self.clone())
    }

    /// Waiters currently parked on a decision.
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Changes whenever the learned rules may have changed.
    pub(crate) fn rules_generation(&self) -> u64 {
        self.rules.load(Ordering::SeqCst)
    }

    /// A receiver that changes whenever any approval changes.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Keeps a waiter counted as parked.
pub(crate) struct Parked(Arc<Hub>);

impl Drop for Parked {
    fn drop(&mut self) {
        self.0.parked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Keeps a waiter registered.
pub(crate) struct WaitGuard {
    hub: Arc<Hub>,
    id: String,
    pub(crate) notify: Arc<Notify>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        let mut map = self
            .hub
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = map.get_mut(&self.id) {
            entry.0 -= 1;
            if entry.0 == 0 {
                map.remove(&self.id);
            }
        }
    }
}

/// Starts the process's single LISTEN connection as a task of `tasks`; returns once LISTEN is
/// active, so a waiter registered afterwards cannot miss a later commit.
pub(crate) async fn listen(
    options: PgConnectOptions,
    hub: Arc<Hub>,
    tasks: &mut JoinSet<()>,
) -> Result<()> {
    // A dedicated one-connection pool: the listener holds its connection forever and
    // must not shrink the query pool; the pool only serves to reconnect.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_with(options)
        .await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen(CHANNEL).await?;
    tasks.spawn(async move {
        let fresh = || Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let mut backoff = fresh();
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    backoff = fresh();
                    hub.deliver(n.payload());
                }
                // Reconnected: anything sent meanwhile is gone, so everyone re-reads.
                Ok(None) => hub.wake_all(),
                Err(e) => {
                    tracing::warn!(error = %e, "ledger listener lost its connection; retrying");
                    hub.wake_all();
                    // Backoff between reconnect attempts, not synchronisation.
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rules_notification_moves_the_rules_generation_and_nothing_else() {
        let hub = Hub::new();
        let changes = hub.changes();
        let before = hub.rules_generation();
        hub.deliver(crate::store::RULES_TOPIC);
        assert_eq!(hub.rules_generation(), before + 1);
        // Approval watchers are not woken for it.
        assert!(!changes.has_changed().unwrap());
        hub.deliver("apr_x");
        assert_eq!(hub.rules_generation(), before + 1);
        assert!(changes.has_changed().unwrap());
        // A reconnect may have lost a rules notification: the set is rebuilt.
        hub.wake_all();
        assert_eq!(hub.rules_generation(), before + 2);
    }

    #[tokio::test]
    async fn deliver_wakes_only_registered_waiters_of_that_id() {
        let hub = Hub::new();
        let a = hub.register("a");
        let b = hub.register("b");
        {
            let fa = a.notify.notified();
            let fb = b.notify.notified();
            tokio::pin!(fa, fb);
            fa.as_mut().enable();
            fb.as_mut().enable();
            hub.deliver("a");
            assert!(futures::poll!(fa.as_mut()).is_ready());
            assert!(futures::poll!(fb.as_mut()).is_pending());
        }
        drop(a);
        assert_eq!(hub.waiting(), 1);
        drop(b);
        assert_eq!(hub.waiting(), 0);
    }
}
