//! Run admission: run slots and the run memory budget, taken before a run is authorized, and
//! shared between principals and sessions.
//!
//! A run refused at the slot limit after its decision would have spent it: the decision
//! allowed (and a once-approval consumed) for a call that never ran. So the executor takes
//! a slot first and asks the policy only with one in hand; a parked call takes its slot when
//! the human has decided, before the Authorize that consumes the approval. The runner keeps
//! its own limit as the last word; a refusal there (a slot it has not yet given back) is
//! reported as "not started", which releases the call in the ledger.
//!
//! A slot also reserves the run's memory limit plus its tmpfs sizes against the run memory
//! budget (the cap of the runs' parent cgroup): the sum over admitted runs never exceeds it.
//!
//! Sharing (each bound a fraction of the slots and of the budget):
//! - a session that already holds a run may hold at most `session_share`, a principal
//!   (all its sessions) at most `principal_share`: one agent's flood leaves room for the
//!   others, and session ids a client makes up do not get a principal past its share;
//! - the last `reserve_share` (at least one slot and one default run's reservation) only goes
//!   to a session holding no run, so a new session starts at once while others flood;
//! - a session's or principal's first run is bound by the budget alone, so every run that
//!   fits the budget can be admitted some time.
//!
//! A run that does not fit waits in a short queue (bounded in length overall, per principal
//! and per session, and in time); whenever room frees, waiters are served round-robin across
//! principals and, within one, across sessions, each session in order. A waiter whose client
//! goes away leaves the queue (or gives back the room it was just granted). A run still
//! waiting when its time is up gets `RESOURCE_EXHAUSTED` / `BUSY` with a `RetryInfo`: nothing
//! ran, and the same call (same `call_id`) may be repeated. A run larger than the whole budget
//! is refused at once (`TOO_LARGE`): no wait would help.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::Status;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_process::{Reservation, human_bytes};
use toolgate_runtime::metrics::ExecutorMetrics;

/// How admission shares the executor (`[process.admission]`, plus what the runner knows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Runs at once (`process.max_concurrent_runs`).
    pub slots: usize,
    /// Memory all runs together may reserve ([`toolgate_process::Runner::memory_budget`]).
    pub budget_bytes: u64,
    /// What a run under the default profile reserves (the floor of the reserve).
    pub default_reservation: u64,
    /// Runs waiting at once.
    pub queue_length: usize,
    /// Longest wait in the queue.
    pub queue_wait: Duration,
    /// Fraction one session may hold once it holds a run.
    pub session_share: f64,
    /// Fraction one principal may hold once it holds a run.
    pub principal_share: f64,
    /// Fraction kept for sessions holding no run.
    pub reserve_share: f64,
}

/// The bounds derived from [`Settings`].
#[derive(Debug, Clone, Copy)]
struct Bounds {
    slots: usize,
    bytes: u64,
    session_slots: usize,
    session_bytes: u64,
    principal_slots: usize,
    principal_bytes: u64,
    reserve_slots: usize,
    reserve_bytes: u64,
    queue: usize,
    principal_queue: usize,
    session_queue: usize,
    wait: Duration,
}

impl Bounds {
    fn of(s: &Settings) -> Bounds {
        let share_of = |f: f64, n: usize| ((f * n as f64).ceil() as usize).clamp(1, n.max(1));
        let bytes_of = |f: f64| ((f * s.budget_bytes as f64) as u64).min(s.budget_bytes);
        let (reserve_slots, reserve_bytes) = if s.reserve_share > 0.0 {
            (
                share_of(s.reserve_share, s.slots),
                bytes_of(s.reserve_share)
                    .max(s.default_reservation)
                    .min(s.budget_bytes),
            )
        } else {
            (0, 0)
        };
        Bounds {
            slots: s.slots,
            bytes: s.budget_bytes,
            session_slots: share_of(s.session_share, s.slots),
            session_bytes: bytes_of(s.session_share),
            principal_slots: share_of(s.principal_share, s.slots),
            principal_bytes: bytes_of(s.principal_share),
            reserve_slots,
            reserve_bytes,
            queue: s.queue_length,
            principal_queue: share_of(s.principal_share, s.queue_length),
            session_queue: share_of(s.session_share, s.queue_length),
            wait: s.queue_wait,
        }
    }

    /// What a `BUSY` refusal suggests: after the queue's wait, at least a second.
    fn retry_after(&self) -> Duration {
        self.wait.max(Duration::from_secs(1))
    }
}

/// Who a run is for: fairness is per principal and per session of that principal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Who {
    /// The authenticated principal.
    pub principal: String,
    /// The call context's session id.
    pub session: String,
}

/// What held a run back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    Slots,
    Memory,
    SessionShare,
    PrincipalShare,
    Reserve,
}

impl Limit {
    const fn as_str(self) -> &'static str {
        match self {
            Limit::Slots => "slots",
            Limit::Memory => "memory",
            Limit::SessionShare => "session_share",
            Limit::PrincipalShare => "principal_share",
            Limit::Reserve => "reserve",
        }
    }
}

/// Slots and bytes held.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    slots: usize,
    bytes: u64,
}

impl Held {
    fn add(&mut self, bytes: u64) {
        self.slots += 1;
        self.bytes += bytes;
    }

    fn remove(&mut self, bytes: u64) {
        self.slots = self.slots.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(bytes);
    }
}

/// What the admitted runs hold.
#[derive(Debug, Default)]
struct Accounts {
    used: Held,
    principals: HashMap<String, Held>,
    sessions: HashMap<Who, Held>,
}

impl Accounts {
    /// Why a run of `who` reserving `bytes` cannot be admitted now; `None`: it can.
    fn blocked(&self, b: &Bounds, who: &Who, bytes: u64) -> Option<Limit> {
        if self.used.slots + 1 > b.slots {
            return Some(Limit::Slots);
        }
        if self.used.bytes + bytes > b.bytes {
            return Some(Limit::Memory);
        }
        let session = self.sessions.get(who);
        if let Some(s) = session
            && (s.slots + 1 > b.session_slots || s.bytes + bytes > b.session_bytes)
        {
            return Some(Limit::SessionShare);
        }
        if let Some(p) = self.principals.get(&who.principal)
            && (p.slots + 1 > b.principal_slots || p.bytes + bytes > b.principal_bytes)
        {
            return Some(Limit::PrincipalShare);
        }
        if session.is_some()
            && (self.used.slots + 1 > b.slots - b.reserve_slots
                || self.used.bytes + bytes > b.bytes - b.reserve_bytes)
        {
            return Some(Limit::Reserve);
        }
        None
    }

    fn take(&mut self, who: &Who, bytes: u64) {
        self.used.add(bytes);
        self.principals
            .entry(who.principal.clone())
            .or_default()
            .add(bytes);
        self.sessions.entry(who.clone()).or_default().add(bytes);
    }

    fn give_back(&mut self, who: &Who, bytes: u64) {
        self.used.remove(bytes);
        if let Some(p) = self.principals.get_mut(&who.principal) {
            p.remove(bytes);
            if p.slots == 0 {
                self.principals.remove(&who.principal);
            }
        }
        if let Some(s) = self.sessions.get_mut(who) {
            s.remove(bytes);
            if s.slots == 0 {
                self.sessions.remove(who);
            }
        }
    }

    /// What the `limit` a run ran into means, for the model.
    fn describe(&self, b: &Bounds, limit: Limit, who: &Who, need: Reservation) -> String {
        match limit {
            Limit::Slots => format!("all {} run slots of this executor are taken", b.slots),
            Limit::Memory => format!(
                "the runs in progress reserve {} of this executor's {} run memory budget and this run needs {need}",
                human_bytes(self.used.bytes),
                human_bytes(b.bytes)
            ),
            Limit::SessionShare => {
                let s = self.sessions.get(who).copied().unwrap_or_default();
                format!(
                    "session `{}` already has {} runs in progress reserving {}, its share of this executor ({} runs, {}); wait for one of them to end",
                    who.session,
                    s.slots,
                    human_bytes(s.bytes),
                    b.session_slots,
                    human_bytes(b.session_bytes)
                )
            }
            Limit::PrincipalShare => {
                let p = self
                    .principals
                    .get(&who.principal)
                    .copied()
                    .unwrap_or_default();
                format!(
                    "principal `{}` already has {} runs in progress reserving {}, its share of this executor ({} runs, {}); wait for one of them to end",
                    who.principal,
                    p.slots,
                    human_bytes(p.bytes),
                    b.principal_slots,
                    human_bytes(b.principal_bytes)
                )
            }
            Limit::Reserve => format!(
                "only the reserve is left ({} slots, {}), kept for sessions that have no run in progress",
                b.reserve_slots,
                human_bytes(b.reserve_bytes)
            ),
        }
    }
}

/// One waiting run.
#[derive(Debug)]
struct Waiter {
    id: u64,
    bytes: u64,
    granted: oneshot::Sender<()>,
}

/// The waiting runs of one session, in arrival order.
#[derive(Debug)]
struct SessionQueue {
    who: Who,
    waiters: VecDeque<Waiter>,
}

/// The waiting runs of one principal, its sessions in round-robin order.
#[derive(Debug)]
struct PrincipalQueue {
    principal: String,
    sessions: VecDeque<SessionQueue>,
    len: usize,
}

/// Waiting runs, principals in round-robin order.
#[derive(Debug, Default)]
struct Queue {
    principals: VecDeque<PrincipalQueue>,
    len: usize,
}

impl Queue {
    fn principal_len(&self, principal: &str) -> usize {
        self.principals
            .iter()
            .find(|p| p.principal == principal)
            .map_or(0, |p| p.len)
    }

    fn session_len(&self, who: &Who) -> usize {
        self.principals
            .iter()
            .find(|p| p.principal == who.principal)
            .and_then(|p| p.sessions.iter().find(|s| s.who == *who))
            .map_or(0, |s| s.waiters.len())
    }

    fn push(&mut self, who: &Who, waiter: Waiter) {
        let p = match self
            .principals
            .iter()
            .position(|p| p.principal == who.principal)
        {
            Some(i) => &mut self.principals[i],
            None => {
                self.principals.push_back(PrincipalQueue {
                    principal: who.principal.clone(),
                    sessions: VecDeque::new(),
                    len: 0,
                });
                self.principals.back_mut().expect("just pushed")
            }
        };
        match p.sessions.iter_mut().find(|s| s.who == *who) {
            Some(s) => s.waiters.push_back(waiter),
            None => p.sessions.push_back(SessionQueue {
                who: who.clone(),
                waiters: VecDeque::from([waiter]),
            }),
        }
        p.len += 1;
        self.len += 1;
    }

    /// Takes the waiter `id` out; whether it was there.
    fn remove(&mut self, who: &Who, id: u64) -> bool {
        let Some(pi) = self
            .principals
            .iter()
            .position(|p| p.principal == who.principal)
        else {
            return false;
        };
        let p = &mut self.principals[pi];
        let Some(si) = p.sessions.iter().position(|s| s.who == *who) else {
            return false;
        };
        let s = &mut p.sessions[si];
        let Some(wi) = s.waiters.iter().position(|w| w.id == id) else {
            return false;
        };
        s.waiters.remove(wi);
        if s.waiters.is_empty() {
            p.sessions.remove(si);
        }
        p.len -= 1;
        if p.len == 0 {
            self.principals.remove(pi);
        }
        self.len -= 1;
        true
    }

    /// Admits every waiter that fits now, round-robin: the principal and the session served
    /// go to the back of their rotations.
    fn serve(&mut self, accounts: &mut Accounts, b: &Bounds) {
        'again: loop {
            for pi in 0..self.principals.len() {
                for si in 0..self.principals[pi].sessions.len() {
                    let s = &self.principals[pi].sessions[si];
                    let head = s.waiters.front().expect("no empty session queue");
                    if accounts.blocked(b, &s.who, head.bytes).is_some() {
                        continue;
                    }
                    let p = &mut self.principals[pi];
                    let mut s = p.sessions.remove(si).expect("indexed");
                    let w = s.waiters.pop_front().expect("has a head");
                    p.len -= 1;
                    self.len -= 1;
                    accounts.take(&s.who, w.bytes);
                    if w.granted.send(()).is_err() {
                        // Its receiver is gone without leaving the queue (cannot happen:
                        // a waiter leaves under the lock); never keep what nobody holds.
                        accounts.give_back(&s.who, w.bytes);
                    }
                    if !s.waiters.is_empty() {
                        p.sessions.push_back(s);
                    }
                    let p = self.principals.remove(pi).expect("indexed");
                    if p.len > 0 {
                        self.principals.push_back(p);
                    }
                    continue 'again;
                }
            }
            return;
        }
    }
}

#[derive(Debug, Default)]
struct State {
    accounts: Accounts,
    queue: Queue,
    next_id: u64,
}

#[derive(Debug)]
struct Shared {
    settings: Settings,
    bounds: Bounds,
    state: Mutex<State>,
    metrics: ExecutorMetrics,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves the queue after room was freed and publishes the gauges.
    fn settle(&self, state: &mut State) {
        let State {
            accounts, queue, ..
        } = state;
        queue.serve(accounts, &self.bounds);
        self.metrics.admission_queue(queue.len);
        self.metrics.admission_reserved(accounts.used.bytes);
    }

    fn release(&self, who: &Who, bytes: u64) {
        let mut state = self.lock();
        state.accounts.give_back(who, bytes);
        self.settle(&mut state);
    }

    /// `BUSY`, with what held the run back and when to repeat it.
    fn busy(
        &self,
        state: &State,
        limit: Limit,
        why: &'static str,
        who: &Who,
        need: Reservation,
        waited: Option<Duration>,
    ) -> Status {
        let b = &self.bounds;
        self.metrics.admission_refusal(why, limit.as_str());
        let retry = b.retry_after();
        let queue = match waited {
            Some(w) => format!("it waited {} ms in the admission queue", w.as_millis()),
            None if b.wait.is_zero() => "this executor does not queue runs".to_owned(),
            None => format!(
                "the admission queue is full ({} waiting, {} of them from this principal, {} from this session)",
                state.queue.len,
                state.queue.principal_len(&who.principal),
                state.queue.session_len(who)
            ),
        };
        status::status_with_retry(
            Reason::Busy,
            format!(
                "the executor is busy: {}; {queue}. Nothing ran: repeat the same call (same call_id) in {} s",
                state.accounts.describe(b, limit, who, need),
                retry.as_secs()
            ),
            [
                ("limit", limit.as_str().to_owned()),
                ("why", why.to_owned()),
                ("slots", b.slots.to_string()),
                ("budget_bytes", b.bytes.to_string()),
                ("reserved_bytes", state.accounts.used.bytes.to_string()),
                ("needs_bytes", need.total().to_string()),
                ("retry_after_ms", retry.as_millis().to_string()),
            ],
            retry,
        )
    }

    fn too_large(&self, need: Reservation, why: &'static str) -> Status {
        self.metrics.admission_refusal(why, Limit::Memory.as_str());
        status::status(
            Reason::TooLarge,
            format!(
                "this run would reserve {need}, more than this executor's whole run memory budget of {}: it can never start here. Run it under a sandbox profile with a smaller memory limit, or on an executor with a larger process.runs_memory_bytes",
                human_bytes(self.bounds.bytes)
            ),
            [
                ("budget_bytes", self.bounds.bytes.to_string()),
                ("needs_bytes", need.total().to_string()),
            ],
        )
    }
}

/// The executor's run slots and run memory budget; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    shared: Arc<Shared>,
}

/// One admitted run's slot and reservation, held until the runner is done with the run (see
/// `RunSpec::hold_until_done`), or dropped with a call refused before it started.
#[derive(Debug)]
pub(crate) struct Slot {
    shared: Arc<Shared>,
    who: Who,
    bytes: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.release(&self.who, self.bytes);
    }
}

impl Slot {
    /// Holds `need` instead of what was admitted: the policy decided the run under another
    /// profile than the request named. Growing never waits and never overcommits: `BUSY`
    /// (or `TOO_LARGE`) when the budget has no room for the difference.
    pub(crate) fn resize(&mut self, need: Reservation) -> Result<(), Status> {
        let bytes = need.total();
        if bytes > self.shared.bounds.bytes {
            return Err(self.shared.too_large(need, "profile_grew"));
        }
        let mut state = self.shared.lock();
        let a = &mut state.accounts;
        if bytes > self.bytes && a.used.bytes - self.bytes + bytes > self.shared.bounds.bytes {
            return Err(self.shared.busy(
                &state,
                Limit::Memory,
                "profile_grew",
                &self.who,
                need,
                None,
            ));
        }
        a.give_back(&self.who, self.bytes);
        a.take(&self.who, bytes);
        self.bytes = bytes;
        self.shared.settle(&mut state);
        Ok(())
    }
}

/// A run in the queue. Dropped before it was admitted (its client went away), it leaves the
/// queue; dropped just after, it gives the room back.
struct Waiting {
    shared: Arc<Shared>,
    who: Who,
    bytes: u64,
    id: u64,
    granted: oneshot::Receiver<()>,
    done: bool,
}

impl Waiting {
    /// After the wait: admitted (granted meanwhile), or out of the queue.
    fn finish(mut self, need: Reservation, waited: Duration) -> Result<Slot, Status> {
        self.done = true;
        let mut state = self.shared.lock();
        if state.queue.remove(&self.who, self.id) {
            let limit = state
                .accounts
                .blocked(&self.shared.bounds, &self.who, self.bytes)
                .unwrap_or(Limit::Slots);
            self.shared.settle(&mut state);
            return Err(self.shared.busy(
                &state,
                limit,
                "wait_expired",
                &self.who,
                need,
                Some(waited),
            ));
        }
        drop(state);
        // Not in the queue: it was granted (under the lock), so the grant is there.
        let _ = self.granted.try_recv();
        Ok(Slot {
            shared: self.shared.clone(),
            who: self.who.clone(),
            bytes: self.bytes,
        })
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.shared.lock();
        if state.queue.remove(&self.who, self.id) {
            self.shared.settle(&mut state);
            return;
        }
        if self.granted.try_recv().is_ok() {
            state.accounts.give_back(&self.who, self.bytes);
            self.shared.settle(&mut state);
        }
    }
}

impl Admission {
    /// Admission under `settings`, counting into `metrics`.
    pub(crate) fn new(settings: &Settings, metrics: ExecutorMetrics) -> Self {
        metrics.admission_queue(0);
        metrics.admission_reserved(0);
        Admission {
            shared: Arc::new(Shared {
                settings: *settings,
                bounds: Bounds::of(settings),
                state: Mutex::default(),
                metrics,
            }),
        }
    }

    /// What admission was configured with (for `GetCapabilities`).
    pub(crate) fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// A slot holding `need` for a run of `who`: at once when it fits, else after a wait in
    /// the queue; `BUSY` (with a retry hint) when it still does not, `TOO_LARGE` when it
    /// never can. Dropping the future leaves the queue.
    pub(crate) async fn admit(&self, who: Who, need: Reservation) -> Result<Slot, Status> {
        let shared = &self.shared;
        let b = &shared.bounds;
        let bytes = need.total();
        if bytes > b.bytes {
            return Err(shared.too_large(need, "too_large"));
        }
        let waiting = {
            let mut state = shared.lock();
            let Some(limit) = state.accounts.blocked(b, &who, bytes) else {
                state.accounts.take(&who, bytes);
                shared.metrics.admission_reserved(state.accounts.used.bytes);
                return Ok(Slot {
                    shared: shared.clone(),
                    who,
                    bytes,
                });
            };
            if b.wait.is_zero()
                || state.queue.len >= b.queue
                || state.queue.principal_len(&who.principal) >= b.principal_queue
                || state.queue.session_len(&who) >= b.session_queue
            {
                return Err(shared.busy(&state, limit, "queue_full", &who, need, None));
            }
            let id = state.next_id;
            state.next_id += 1;
            let (tx, rx) = oneshot::channel();
            state.queue.push(
                &who,
                Waiter {
                    id,
                    bytes,
                    granted: tx,
                },
            );
            shared.metrics.admission_queue(state.queue.len);
            Waiting {
                shared: shared.clone(),
                who,
                bytes,
                id,
                granted: rx,
                done: false,
            }
        };
        let started = Instant::now();
        let mut waiting = waiting;
        let _ = tokio::time::timeout(b.wait, &mut waiting.granted).await;
        let waited = started.elapsed();
        shared.metrics.admission_wait(waited);
        waiting.finish(need, waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(slots: usize, budget: u64) -> Settings {
        Settings {
            slots,
            budget_bytes: budget,
            default_reservation: 100,
            queue_length: 8,
            queue_wait: Duration::from_millis(200),
            session_share: 0.5,
            principal_share: 0.75,
            reserve_share: 0.125,
        }
    }

    fn who(p: &str, s: &str) -> Who {
        Who {
            principal: p.into(),
            session: s.into(),
        }
    }

    fn need(bytes: u64) -> Reservation {
        Reservation {
            memory_bytes: bytes,
            tmpfs_bytes: 0,
        }
    }

    fn admission(s: &Settings) -> Admission {
        let mut registry = toolgate_runtime::metrics::registry();
        Admission::new(s, ExecutorMetrics::register(&mut registry))
    }

    fn limit_of(s: &Status) -> String {
        status::error_info(s).unwrap().1["limit"].clone()
    }

    #[test]
    fn bounds_are_fractions_with_floors() {
        let b = Bounds::of(&settings(64, 6400));
        assert_eq!(
            (b.session_slots, b.principal_slots, b.reserve_slots),
            (32, 48, 8)
        );
        assert_eq!(
            (b.session_bytes, b.principal_bytes, b.reserve_bytes),
            (3200, 4800, 800)
        );
        // One slot: every share is that slot; the reserve is at least a default run.
        let b = Bounds::of(&settings(1, 50));
        assert_eq!(
            (b.session_slots, b.reserve_slots, b.reserve_bytes),
            (1, 1, 50)
        );
    }

    #[tokio::test]
    async fn a_flooding_session_leaves_room_for_another() {
        let a = admission(&settings(8, 8000));
        let mut held = Vec::new();
        // Session s1 takes its share (4 of 8 slots), then waits and is refused.
        for _ in 0..4 {
            held.push(a.admit(who("p", "s1"), need(10)).await.unwrap());
        }
        let refused = a.admit(who("p", "s1"), need(10)).await.unwrap_err();
        assert_eq!(limit_of(&refused), "session_share");
        assert!(status::retry_after(&refused).is_some());
        // Sessions of the same principal up to its share (6), then another principal.
        held.push(a.admit(who("p", "s2"), need(10)).await.unwrap());
        held.push(a.admit(who("p", "s3"), need(10)).await.unwrap());
        let refused = a.admit(who("p", "s4"), need(10)).await.unwrap_err();
        assert_eq!(limit_of(&refused), "principal_share");
        held.push(a.admit(who("q", "t1"), need(10)).await.unwrap());
        // The last slot is the reserve: not for t1, which holds one, but for a new session.
        let refused = a.admit(who("q", "t1"), need(10)).await.unwrap_err();
        assert_eq!(limit_of(&refused), "reserve");
        held.push(a.admit(who("r", "u1"), need(10)).await.unwrap());
        let refused = a.admit(who("z", "z1"), need(10)).await.unwrap_err();
        assert_eq!(limit_of(&refused), "slots");
    }

    #[tokio::test]
    async fn the_budget_is_never_overcommitted_and_a_too_large_run_is_refused_at_once() {
        let a = admission(&settings(8, 1000));
        let started = std::time::Instant::now();
        let err = a.admit(who("p", "s"), need(1001)).await.unwrap_err();
        assert_eq!(status::error_info(&err).unwrap().0, "TOO_LARGE");
        assert!(started.elapsed() < Duration::from_millis(100));
        let _big = a.admit(who("p", "s1"), need(700)).await.unwrap();
        let err = a.admit(who("q", "t"), need(301)).await.unwrap_err();
        assert_eq!(limit_of(&err), "memory");
        let _fits = a.admit(who("q", "t"), need(300)).await.unwrap();
    }

    #[tokio::test]
    async fn a_slot_grows_only_into_free_budget_and_shrinking_serves_waiters() {
        let mut s = settings(8, 1000);
        s.queue_wait = Duration::from_secs(30);
        let a = admission(&s);
        let mut slot = a.admit(who("p", "s1"), need(300)).await.unwrap();
        let _other = a.admit(who("q", "t1"), need(500)).await.unwrap();
        // The policy picked a larger profile: 300 -> 600 would pass the budget of 1000.
        let err = slot.resize(need(600)).unwrap_err();
        assert_eq!(limit_of(&err), "memory");
        assert_eq!(status::error_info(&err).unwrap().1["why"], "profile_grew");
        let err = slot.resize(need(1001)).unwrap_err();
        assert_eq!(status::error_info(&err).unwrap().0, "TOO_LARGE");
        slot.resize(need(500)).unwrap();
        assert_eq!(a.shared.lock().accounts.used.bytes, 1000);
        // A waiter that needs 200 gets in as soon as the slot shrinks back.
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move { a.admit(who("r", "u1"), need(200)).await.map(drop) })
        };
        while a.shared.lock().queue.len < 1 {
            tokio::task::yield_now().await;
        }
        slot.resize(need(100)).unwrap();
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn waiters_are_served_round_robin_and_a_dropped_waiter_leaves_the_queue() {
        let mut s = settings(1, 1000);
        s.queue_wait = Duration::from_secs(30);
        s.reserve_share = 0.0;
        let a = admission(&s);
        let holder = a.admit(who("p", "s"), need(10)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Three waiters of the flooder first, then one of another principal.
        for (p, name) in [("p", "p1"), ("p", "p2"), ("p", "p3"), ("q", "q1")] {
            let (admission, order) = (a.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let slot = admission.admit(who(p, "s"), need(10)).await.unwrap();
                order.lock().unwrap().push(name);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(slot);
            }));
            tokio::task::yield_now().await;
            while a.shared.lock().queue.len < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        // A waiter whose client goes away leaves no trace.
        let gone = {
            let a = a.clone();
            tokio::spawn(async move { a.admit(who("r", "s"), need(10)).await.map(drop) })
        };
        while a.shared.lock().queue.len < 5 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        assert_eq!(a.shared.lock().queue.len, 4);
        drop(holder);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["p1", "q1", "p2", "p3"]);
        let state = a.shared.lock();
        assert_eq!(state.accounts.used.slots, 0);
        assert!(state.accounts.sessions.is_empty());
    }
}
