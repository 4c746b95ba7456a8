//! Blocking work called from async code whose cost follows an input that changes slowly: a
//! walk of the workspace before a run, the audit of its protected set after it, hashing the
//! files a command names.
//!
//! Moving such work off the runtime's worker (`block_in_place` on a multi-thread runtime,
//! `spawn_blocking`) costs every call a thread wake-up and a switch: about 20 µs of CPU per
//! call on the project's 2-core bench machine, more than walking a small workspace takes.
//! Doing it in place costs a large workspace's walk a worker held for as long, while the
//! worker's other tasks wait. [`BlockingCost`] remembers how long the recent calls took and
//! runs the next one in place only while they were short.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, RuntimeFlavor};

/// Calls whose recent cost is below this run in place on the calling worker: the upper end of
/// what a task may run between two `.await`s without holding up the others.
pub const IN_PLACE_BELOW: Duration = Duration::from_micros(50);

/// No call measured yet.
const UNKNOWN: u64 = u64::MAX;

/// The recent cost of one kind of blocking work, deciding where its next call runs.
///
/// The cost kept is the last call's, or half the cost kept before it when that is more: one
/// short call after a long one does not bring the work back in place at once, so work whose
/// size alternates (a command naming a large file, then one naming none) stays off the worker
/// until its calls have been short for a while (about 11 calls after one of 100 ms). Until a
/// first call is measured, calls run off the worker. A call that grows from short to long at
/// once (the workspace gained a large tree since the last run) holds its worker once.
#[derive(Debug)]
pub struct BlockingCost {
    /// Nanoseconds; [`UNKNOWN`] before the first call.
    kept: AtomicU64,
}

impl Default for BlockingCost {
    fn default() -> Self {
        BlockingCost {
            kept: AtomicU64::new(UNKNOWN),
        }
    }
}

impl BlockingCost {
    /// Whether the next call runs in place.
    pub fn in_place(&self) -> bool {
        self.kept.load(Ordering::Relaxed) < IN_PLACE_BELOW.as_nanos() as u64
    }

    /// Runs `f` on this thread: in place while recent calls were short, else telling a
    /// multi-thread runtime that this worker blocks (`block_in_place`), so its other tasks
    /// move to another thread. Outside a multi-thread runtime, always in place.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let multi_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        let out = if multi_thread && !self.in_place() {
            tokio::task::block_in_place(f)
        } else {
            f()
        };
        self.note(start.elapsed());
        out
    }

    /// Runs `f` in place while recent calls were short, else on the blocking pool. `Err`: it
    /// panicked, with what the panic said (in place too: the caller carries on).
    pub async fn run_off<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let start = Instant::now();
        let out = if self.in_place() {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| panic_text(&*p))
        } else {
            tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| match e.try_into_panic() {
                    Ok(p) => panic_text(&*p),
                    Err(e) => e.to_string(),
                })
        };
        self.note(start.elapsed());
        out
    }

    /// Keeps `took`, or half the kept cost when that is more.
    fn note(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(UNKNOWN - 1);
        let _ = self
            .kept
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |kept| {
                Some(match kept {
                    UNKNOWN => took,
                    kept => took.max(kept / 2),
                })
            });
    }
}

/// What a panic's payload says.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_call_runs_off_the_worker_and_short_calls_then_run_in_place() {
        let cost = BlockingCost::default();
        assert!(!cost.in_place(), "nothing measured yet");
        cost.note(Duration::from_micros(5));
        assert!(cost.in_place());
    }

    #[test]
    fn one_short_call_after_a_long_one_stays_off_the_worker() {
        let cost = BlockingCost::default();
        cost.note(Duration::from_millis(100));
        let mut short_calls = 0;
        while !cost.in_place() {
            cost.note(Duration::from_micros(1));
            short_calls += 1;
            assert!(short_calls < 64, "never back in place");
        }
        // 100 ms halved until below 50 µs.
        assert_eq!(short_calls, 11);
        cost.note(Duration::from_millis(1));
        assert!(!cost.in_place(), "a long call moves it off again");
    }

    #[test]
    fn where_a_call_runs_follows_the_kept_cost() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let task = rt.spawn(async {
            let worker = std::thread::current().id();
            let cost = BlockingCost::default();
            let ran = cost.run_off(|| std::thread::current().id()).await.unwrap();
            assert_ne!(ran, worker, "unknown: on the blocking pool");
            cost.kept.store(1_000, Ordering::Relaxed);
            let ran = cost.run_off(|| std::thread::current().id()).await.unwrap();
            assert_eq!(ran, worker, "short: in place");
            cost.kept.store(1_000_000_000, Ordering::Relaxed);
            let ran = cost.run_off(|| std::thread::current().id()).await.unwrap();
            assert_ne!(ran, worker, "long: on the blocking pool");
            cost.kept.store(1_000, Ordering::Relaxed);
            let panicked = cost.run_off(|| -> () { panic!("in place") }).await;
            assert_eq!(panicked, Err("in place".to_owned()));
            cost.kept.store(1_000_000_000, Ordering::Relaxed);
            let panicked = cost.run_off(|| -> () { panic!("off") }).await;
            assert_eq!(panicked, Err("off".to_owned()));
            // `run` stays on this thread either way: off the worker, the runtime moves its
            // other tasks instead.
            assert_eq!(cost.run(|| std::thread::current().id()), worker);
        });
        rt.block_on(task).unwrap();
    }
}
