//! Wake-ups: one listener per process, fanned out in memory to per-approval waiters.
//!
//! Every change to an approval is announced twice in its transaction: first its
//! [`Snapshot`] on [`STATES`] (what a waiter returns, so a decision wakes exactly the
//! waiters of that id with no read after it), then its bare id on [`CHANNEL`] (change feeds,
//! the learned-rules topic, and replicas of earlier versions, which hear only that).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use toolgate_core::backoff::Backoff;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::db::{CHANNEL, RULES_TOPIC, STATES};
use crate::error::Result;
use crate::model::ApprovalState;
use crate::snapshot::Snapshot;

/// What woke the waiters of one approval.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// Nothing since the waiter registered (the value a fresh slot starts with).
    Nothing,
    /// The approval as a transaction committed it.
    Now(Arc<Snapshot>),
    /// It changed, or may have (a bare id, a reconnect): read the row.
    Read,
}

impl Wake {
    /// A decided snapshot is a committed answer every waiter of that id can return, so a
    /// later "read the row" must not replace it before they have seen it.
    fn keeps_against_read(&self) -> bool {
        matches!(self, Wake::Now(s) if s.state() != ApprovalState::Pending)
    }
}

/// In-memory fan-out of "approval X changed".
#[derive(Debug)]
pub(crate) struct Hub {
    waiters: Mutex<HashMap<String, (usize, watch::Sender<Wake>)>>,
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

    /// Hands a committed snapshot to the waiters of its approval, and only to them.
    pub(crate) fn deliver_state(&self, approval_id: &str, snapshot: Snapshot) {
        let map = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, tx)) = map.get(approval_id) {
            tx.send_replace(Wake::Now(Arc::new(snapshot)));
        }
    }

    /// A bare id: wakes the waiters of one approval to read it, and every change-feed watcher.
    pub(crate) fn deliver(&self, approval_id: &str) {
        if approval_id == RULES_TOPIC {
            self.rules.fetch_add(1, Ordering::SeqCst);
            return;
        }
        {
            let map = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, tx)) = map.get(approval_id) {
                wake_to_read(tx);
            }
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Wakes everyone to read: used when notifications may have been lost (listener reconnect).
    pub(crate) fn wake_all(&self) {
        self.rules.fetch_add(1, Ordering::SeqCst);
        {
            let map = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
            for (_, tx) in map.values() {
                wake_to_read(tx);
            }
        }
        self.generation.send_modify(|g| *g += 1);
    }

    /// Registers interest in one approval; the guard unregisters on drop. Only what is
    /// delivered after this call wakes the guard's receiver.
    pub(crate) fn register(self: &Arc<Self>, approval_id: &str) -> WaitGuard {
        let mut map = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = map
            .entry(approval_id.to_owned())
            .or_insert_with(|| (0, watch::Sender::new(Wake::Nothing)));
        entry.0 += 1;
        let mut wakes = entry.1.subscribe();
        wakes.mark_unchanged();
        WaitGuard {
            hub: self.clone(),
            id: approval_id.to_owned(),
            wakes,
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

fn wake_to_read(tx: &watch::Sender<Wake>) {
    tx.send_if_modified(|w| {
        if w.keeps_against_read() {
            // Every waiter has either returned it or will: nobody needs waking.
            return false;
        }
        *w = Wake::Read;
        true
    });
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
    /// What woke it last; `changed()` resolves at the next delivery.
    pub(crate) wakes: watch::Receiver<Wake>,
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
    listener.listen_all([STATES, CHANNEL]).await?;
    tasks.spawn(async move {
        let fresh = || Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
        let mut backoff = fresh();
        loop {
            match listener.try_recv().await {
                Ok(Some(n)) => {
                    backoff = fresh();
                    if n.channel() == STATES {
                        if let Some((id, snapshot)) = Snapshot::decode(n.payload()) {
                            hub.deliver_state(&id, snapshot);
                        }
                        // Undecodable: the same change's bare id follows and makes them read.
                    } else {
                        hub.deliver(n.payload());
                    }
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
    use crate::model::{Approval, ApprovalId, CallId, LeaseToken, Principal, Scope, Timestamp};
    use crate::snapshot::MAX_PAYLOAD;

    #[test]
    fn a_rules_notification_moves_the_rules_generation_and_nothing_else() {
        let hub = Hub::new();
        let changes = hub.changes();
        let before = hub.rules_generation();
        hub.deliver(RULES_TOPIC);
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

    fn pending() -> Approval {
        Approval {
            id: ApprovalId::try_from("apr_1").unwrap(),
            call_id: CallId::try_from("call-1").unwrap(),
            session_id: crate::model::SessionId::try_from("s").unwrap(),
            principal: Principal::try_from("agent:a").unwrap(),
            tool: toolgate_core::ToolKind::ProcessRun,
            digest: crate::model::RequestDigest::from_bytes([7; 32]),
            policy_version: crate::model::PolicyVersion::try_from("v1").unwrap(),
            request_json: "{}".into(),
            explanation_json: "{}".into(),
            state: ApprovalState::Pending,
            scope: Scope::Once,
            created_at: Timestamp::from_micros(1),
            expires_at: Timestamp::from_micros(2),
            decided_by: None,
            decided_at: None,
            reason: None,
            message: None,
            consumed_by_call: None,
            consumed_by_executor: None,
            consumed_at: None,
            lease_token: None,
            lease_expires_at: None,
            closed_at: None,
            trace_id: None,
        }
    }

    #[test]
    fn a_snapshot_carries_every_column_a_decision_or_use_changes() {
        let before = pending();
        let mut after = before.clone();
        after.state = ApprovalState::Consumed;
        after.scope = Scope::Session;
        after.expires_at = Timestamp::from_micros(9);
        after.decided_by = Some(Principal::try_from("approver:h").unwrap());
        after.decided_at = Some(Timestamp::from_micros(3));
        after.reason = Some("line one\nand \"quotes\" \u{1b}".into());
        after.message = Some(String::new());
        after.consumed_by_call = Some(CallId::try_from("call-2").unwrap());
        after.consumed_by_executor = Some("exe".into());
        after.consumed_at = Some(Timestamp::from_micros(4));
        after.lease_token = Some(LeaseToken(-5));
        after.lease_expires_at = Some(Timestamp::from_micros(6));
        after.closed_at = Some(Timestamp::from_micros(7));
        let payload = Snapshot::of(&after).encode(after.id.as_str()).unwrap();
        let (id, snapshot) = Snapshot::decode(&payload).unwrap();
        assert_eq!(id, "apr_1");
        let mut got = before;
        snapshot.apply(&mut got);
        assert_eq!(format!("{got:?}"), format!("{after:?}"));
        // A bare id (what earlier versions send) or garbage is not a snapshot.
        assert!(Snapshot::decode("apr_1").is_none());
        assert!(Snapshot::decode(r#"["apr_1","weird"]"#).is_none());
    }

    #[test]
    fn a_snapshot_too_long_for_notify_is_not_sent() {
        let mut a = pending();
        a.reason = Some("x".repeat(MAX_PAYLOAD));
        assert!(Snapshot::of(&a).encode(a.id.as_str()).is_none());
    }

    #[tokio::test]
    async fn a_snapshot_reaches_only_the_waiters_of_its_id_and_a_later_bare_id_keeps_it() {
        let hub = Hub::new();
        let mut a1 = hub.register("a");
        let mut a2 = hub.register("a");
        let mut b = hub.register("b");
        let mut decided = pending();
        decided.state = ApprovalState::Approved;
        hub.deliver_state("a", Snapshot::of(&decided));
        // The bare id of the same change arrives before the waiters ran.
        hub.deliver("a");
        for w in [&mut a1, &mut a2] {
            assert!(w.wakes.has_changed().unwrap());
            match &*w.wakes.borrow_and_update() {
                Wake::Now(s) => assert_eq!(s.state(), ApprovalState::Approved),
                other => panic!("expected the snapshot, got {other:?}"),
            }
        }
        assert!(!b.wakes.has_changed().unwrap());
        // A pending snapshot (say, a shared request joined it) gives way to a read.
        hub.deliver_state("b", Snapshot::of(&pending()));
        hub.deliver("b");
        assert!(matches!(&*b.wakes.borrow_and_update(), Wake::Read));
        // A reconnect makes everyone read, except where a decision awaits its waiters.
        let mut c = hub.register("c");
        hub.wake_all();
        assert!(matches!(&*c.wakes.borrow_and_update(), Wake::Read));
    }

    #[tokio::test]
    async fn a_waiter_registered_after_a_delivery_is_not_woken_by_it() {
        let hub = Hub::new();
        let _first = hub.register("a");
        hub.deliver("a");
        let late = hub.register("a");
        assert!(!late.wakes.has_changed().unwrap());
    }

    #[tokio::test]
    async fn deliver_wakes_only_registered_waiters_of_that_id() {
        let hub = Hub::new();
        let a = hub.register("a");
        let b = hub.register("b");
        hub.deliver("a");
        assert!(a.wakes.has_changed().unwrap());
        assert!(!b.wakes.has_changed().unwrap());
        drop(a);
        assert_eq!(hub.waiting(), 1);
        drop(b);
        assert_eq!(hub.waiting(), 0);
    }
}
