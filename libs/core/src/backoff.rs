//! toolgate's one retry policy: exponential growth with full jitter.
//!
//! The ledger (database unreachable), the ledger's change listener (reconnecting) and the
//! executor's outcome reports (policy service unreachable) all wait with it. The schedule is
//! backon's exponential one (doubling from `first`, capped at `max`); each wait is drawn
//! uniformly from zero to the schedule's value ("full jitter"), so replicas that failed
//! together do not retry together, and the expected wait is half the schedule's.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// An unbounded sequence of waits between retries.
#[derive(Debug)]
pub struct Backoff {
    schedule: ExponentialBackoff,
    max: Duration,
    rng: fastrand::Rng,
}

impl Backoff {
    /// Waits that grow from about `first` by doubling, up to `max`, each fully jittered.
    pub fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            schedule: ExponentialBuilder::new()
                .with_min_delay(first)
                .with_max_delay(max)
                .with_factor(2.0)
                .without_max_times()
                .build(),
            max,
            rng: fastrand::Rng::new(),
        }
    }

    /// The schedule's next ceiling, without jitter (for messages and tests).
    fn ceiling(&mut self) -> Duration {
        self.schedule.next().unwrap_or(self.max)
    }

    /// How long to wait before the next attempt: uniform in `[0, ceiling]`.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.rng.u64(0..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let ceilings: Vec<_> = (0..6).map(|_| b.ceiling().as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn waits_are_fully_jittered_below_the_ceiling() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(100));
        let waits: Vec<_> = (0..2000).map(|_| b.next_delay()).collect();
        assert!(waits.iter().all(|w| *w <= Duration::from_millis(100)));
        // Spread over the whole range, not bunched at the ceiling.
        let low = waits
            .iter()
            .filter(|w| **w < Duration::from_millis(25))
            .count();
        let high = waits
            .iter()
            .filter(|w| **w > Duration::from_millis(75))
            .count();
        assert!(low > 300 && high > 300, "low {low} high {high}");
    }
}
