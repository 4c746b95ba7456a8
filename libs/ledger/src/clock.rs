//! The ledger's notion of "now", injectable so expiry and leases are testable without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::model::Timestamp;

/// A source of the current time.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl Clock {
    /// Wall-clock time.
    pub fn system() -> Self {
        Clock(Arc::new(Timestamp::now))
    }

    /// A clock that only moves when told to, starting at `start`.
    pub fn manual(start: Timestamp) -> (Self, ManualClock) {
        let t = Arc::new(AtomicI64::new(start.as_micros()));
        let handle = ManualClock(t.clone());
        (
            Clock(Arc::new(move || {
                Timestamp::from_micros(t.load(Ordering::SeqCst))
            })),
            handle,
        )
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

/// The handle that moves a [`Clock::manual`] clock.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// Moves time forward by `d`.
    pub fn advance(&self, d: Duration) {
        let us = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        self.0.fetch_add(us, Ordering::SeqCst);
    }

    /// The time the clock shows.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.0.load(Ordering::SeqCst))
    }
}
