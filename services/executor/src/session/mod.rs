//! The executor's sessions: which sessions this executor holds, their shared sandbox, the
//! state `persist_cwd` carries, and when they end.
//!
//! A session enters the table with its first call here. With `pin` on, that call first claims
//! the session in the ledger ([`SessionLedger::claim_session`]), before admission and before
//! the policy decides anything: a session another executor holds is refused
//! `SESSION_ELSEWHERE` naming that executor, and nothing is recorded. The claim answers the
//! session's stored state, so an executor that restarted (or a session moved here after its
//! claim lapsed) starts from the working directory and variables the ledger kept. The claim is
//! cached: later calls of the session make no policy round trip for it; one task renews every
//! held claim in one call every third of `claim_ttl_s`, and tears down locally the sessions the
//! ledger says another executor took over.
//!
//! A session belongs to its first principal: another principal's call with the same id is
//! refused `PERMISSION_DENIED` here (and by the ledger), and never joins its sandbox.
//!
//! The sandbox (the namespaces the session's runs share: network, IPC, `/tmp`) is made at the
//! session's first confined run and dropped when the session ends. A session with no `Run`
//! call in flight and none begun or ended for `idle_timeout_s` is reaped: its background runs
//! stopped (a dev server an agent walked away from does not outlive its session), its sandbox
//! dropped, the end recorded in the ledger (`idle`, with the runs stopped). A foreground run
//! keeps its session alive as long as its call lasts. At shutdown every live session ends (`shutdown`); at
//! start, before any session is claimed, the executor tells the ledger that nothing it held
//! before still runs ([`SessionLedger::abandon_runs`]).

mod local;
pub(crate) mod state;

pub(crate) use local::LocalLedger;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use tonic::Status;
use toolgate_contracts::common::v1 as common;
use toolgate_contracts::policy_wire::error_to_status;
use toolgate_contracts::status;
use toolgate_core::Reason;
use toolgate_fs::WorkspacePath;
use toolgate_policy_api::{EndReason, SessionLedger, SessionRefusal, SessionState};
use toolgate_process::{EnvAllow, SessionNamespaces};

use crate::confined::Confined;

/// Longest the shutdown waits for the ledger to record every session's end.
pub(crate) const SHUTDOWN_BOUND: Duration = Duration::from_secs(5);

/// `[sessions]` as the table enforces it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// A session with no call and no run in flight for this long is reaped.
    pub idle_timeout: Duration,
    /// How long a claim lasts without renewal.
    pub claim_ttl: Duration,
    /// Refuse sessions another executor holds.
    pub pin: bool,
}

impl Settings {
    /// From the configuration (validated by `Config::validate_embedded`).
    pub(crate) fn from_config(c: &crate::config::SessionsSection) -> Self {
        Settings {
            idle_timeout: Duration::from_secs(c.idle_timeout_s),
            claim_ttl: Duration::from_secs(c.claim_ttl_s),
            pin: c.pin,
        }
    }

    /// How often held claims are renewed: three times per claim period.
    fn renew_every(&self) -> Duration {
        (self.claim_ttl / 3).max(Duration::from_millis(100))
    }

    /// How often idle sessions are looked for: a quarter of the idle timeout, at most 10 s.
    fn reap_every(&self) -> Duration {
        (self.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
    }
}

/// What the table needs of the executor's runs: how many of a session's runs are in flight,
/// and stopping them all when the session ends.
pub(crate) trait SessionRuns: Send + Sync + 'static {
    /// Runs of `session_id` whose processes still run (background runs included).
    fn running_in_session(&self, session_id: &str) -> usize;
    /// Stops every run of `session_id`; answers how many were still running.
    fn stop_session(&self, session_id: &str) -> usize;
}

/// The session table; cheap to clone.
#[derive(Clone)]
pub(crate) struct Sessions {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

struct Inner {
    settings: Settings,
    ledger: Arc<dyn SessionLedger>,
    confined: Confined,
    /// `process.allowed_env`: which exported variables a session may keep.
    allowed_env: EnvAllow,
    /// `process.env`: variables the operator sets for every run, never a session's.
    operator_env: Vec<(String, String)>,
    table: Mutex<HashMap<String, Arc<Session>>>,
    runs: OnceLock<Arc<dyn SessionRuns>>,
    /// `abandon_runs` succeeded: claims may be taken (before it, the ledger would release
    /// them again).
    abandoned: AtomicBool,
    abandoning: tokio::sync::Mutex<()>,
}

/// One session this executor serves.
struct Session {
    id: String,
    principal: String,
    /// Calls of the session in flight here (from the claim to the end of their stream).
    calls: Mutex<Activity>,
    claim: tokio::sync::Mutex<Claim>,
    state: Mutex<SessionState>,
    namespaces: Mutex<Option<SessionNamespaces>>,
    /// Torn down: a call still holding it makes no new sandbox and stores no state.
    ended: AtomicBool,
}

/// Calls in flight and when the last one began or ended.
#[derive(Debug, Clone, Copy)]
struct Activity {
    calls: usize,
    last: Instant,
}

/// Where the session's claim stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// Never claimed here yet.
    None,
    /// Held; valid (renewed) until then.
    Held { until: Instant },
    /// `pin` is off and another executor holds it: served with a sandbox of this executor's
    /// own, its state kept here only.
    Unpinned,
}

impl Sessions {
    /// An empty table; its tasks start with [`Sessions::spawn_tasks`].
    pub(crate) fn new(
        settings: Settings,
        ledger: Arc<dyn SessionLedger>,
        confined: Confined,
        allowed_env: EnvAllow,
        operator_env: Vec<(String, String)>,
    ) -> Self {
        Sessions {
            inner: Arc::new(Inner {
                settings,
                ledger,
                confined,
                allowed_env,
                operator_env,
                table: Mutex::new(HashMap::new()),
                runs: OnceLock::new(),
                abandoned: AtomicBool::new(false),
                abandoning: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The registry whose runs the sessions' ends stop (set once).
    pub(crate) fn set_runs(&self, runs: Arc<dyn SessionRuns>) {
        let _ = self.inner.runs.set(runs);
    }

    /// The configured settings.
    pub(crate) fn settings(&self) -> Settings {
        self.inner.settings
    }

    /// The argv running `script` under the wrapper that reports its final state.
    pub(crate) fn wrapped_argv(&self, script: &str) -> Vec<String> {
        state::wrapped_argv(script, &self.inner.allowed_env)
    }

    /// The session's kept variables a run may get now (the allowlist may have narrowed since
    /// the ledger stored them).
    pub(crate) fn usable_env(&self, env: BTreeMap<String, String>) -> BTreeMap<String, String> {
        state::kept_env(env, &self.inner.allowed_env, &self.inner.operator_env).0
    }

    /// Enters a call of `session_id` by `principal` (refused when the session is another
    /// principal's); the entry counts the call as in flight until it is dropped. The call
    /// claims the session with [`Entry::claim`] before anything is decided.
    pub(crate) fn enter(&self, session_id: &str, principal: &str) -> Result<Entry, Status> {
        let session = {
            let mut table = lock(&self.inner.table);
            let s = table
                .entry(session_id.to_owned())
                .or_insert_with(|| Arc::new(Session::new(session_id, principal)))
                .clone();
            if s.principal != principal {
                return Err(other_principal(session_id));
            }
            let mut a = lock(&s.calls);
            a.calls += 1;
            a.last = Instant::now();
            drop(a);
            s
        };
        Ok(Entry {
            session,
            sessions: self.clone(),
        })
    }

    /// Takes (or takes again, once its renewal lapsed) the session's claim.
    async fn claim(&self, s: &Arc<Session>) -> Result<(), Status> {
        let mut claim = s.claim.lock().await;
        let now = Instant::now();
        match *claim {
            Claim::Held { until } if now < until => return Ok(()),
            Claim::Unpinned => return Ok(()),
            _ => {}
        }
        let first = *claim == Claim::None;
        self.abandoned().await?;
        let ttl = self.inner.settings.claim_ttl;
        match self
            .inner
            .ledger
            .claim_session(s.id.clone(), s.principal.clone(), ttl)
            .await
        {
            Ok(stored) => {
                *claim = Claim::Held { until: now + ttl };
                if first {
                    let restored = normalize(stored.state);
                    if restored != SessionState::default() {
                        tracing::info!(session_id = %s.id, cwd = %restored.cwd, vars = restored.env.len(), resumed = stored.resumed, "session state restored from the ledger");
                    }
                    *lock(&s.state) = restored;
                    tracing::debug!(session_id = %s.id, resumed = stored.resumed, "session claimed");
                } else if stored.resumed {
                    tracing::warn!(session_id = %s.id, "the session's claim had lapsed; it is held again");
                }
                Ok(())
            }
            Err(SessionRefusal::Elsewhere {
                executor_id,
                pod,
                claim_expires_at,
            }) => {
                if !self.inner.settings.pin && first {
                    tracing::info!(session_id = %s.id, %executor_id, "session held by another executor; served with a sandbox of this executor's own (sessions.pin is off)");
                    *claim = Claim::Unpinned;
                    return Ok(());
                }
                drop(claim);
                self.forget(s, first);
                Err(elsewhere(&s.id, &executor_id, &pod, claim_expires_at))
            }
            Err(SessionRefusal::OtherPrincipal) => {
                drop(claim);
                self.forget(s, first);
                Err(other_principal(&s.id))
            }
            Err(SessionRefusal::Unavailable(f)) => {
                drop(claim);
                if first {
                    self.forget(s, true);
                }
                Err(error_to_status(f))
            }
        }
    }

    /// Removes a session whose claim was refused: a session never held here is not cached
    /// (the next call asks again); one held before was taken over and is torn down.
    fn forget(&self, s: &Arc<Session>, never_held: bool) {
        if never_held {
            let mut table = lock(&self.inner.table);
            if table.get(&s.id).is_some_and(|t| Arc::ptr_eq(t, s)) {
                table.remove(&s.id);
            }
        } else {
            tracing::warn!(session_id = %s.id, "another executor took the session over; its sandbox here ends");
            self.detach(s);
            self.stop(s);
        }
    }

    /// `abandon_runs` once: required before the first claim.
    async fn abandoned(&self) -> Result<(), Status> {
        if self.inner.abandoned.load(Ordering::Acquire) {
            return Ok(());
        }
        let _one = self.inner.abandoning.lock().await;
        if self.inner.abandoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.inner.ledger.abandon_runs().await {
            Ok(n) => {
                self.inner.abandoned.store(true, Ordering::Release);
                if n > 0 {
                    tracing::warn!(
                        decisions = n,
                        "runs of this executor's previous life recorded as lost (their calls read OUTCOME_UNKNOWN)"
                    );
                } else {
                    tracing::info!("no run of this executor's previous life was left open");
                }
                Ok(())
            }
            Err(f) => Err(error_to_status(f)),
        }
    }

    /// Starts the background work: `abandon_runs` (retried while the policy service is
    /// unreachable), the claim renewal and the idle reaper.
    pub(crate) fn spawn_tasks(&self, tasks: &mut tokio::task::JoinSet<()>) {
        let this = self.clone();
        tasks.spawn(async move {
            let mut wait = Duration::from_millis(500);
            while let Err(e) = this.abandoned().await {
                tracing::warn!(error = %e.message(), retry_in = ?wait, "cannot tell the policy service this executor's earlier runs are gone; runs wait for it");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        });
        let this = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(this.inner.settings.renew_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                this.renew().await;
            }
        });
        let this = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(this.inner.settings.reap_every());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                this.reap_idle().await;
            }
        });
    }

    /// Renews every held claim in one call; tears down the sessions the ledger says are lost.
    async fn renew(&self) {
        let held: Vec<Arc<Session>> = lock(&self.inner.table)
            .values()
            .filter(|s| matches!(s.claim.try_lock().map(|c| *c), Ok(Claim::Held { .. })))
            .cloned()
            .collect();
        if held.is_empty() {
            return;
        }
        let ttl = self.inner.settings.claim_ttl;
        let asked = Instant::now();
        let ids = held.iter().map(|s| s.id.clone()).collect();
        match self.inner.ledger.renew_sessions(ids, ttl).await {
            Ok(lost) => {
                for s in held {
                    if lost.contains(&s.id) {
                        tracing::warn!(session_id = %s.id, "the ledger says another executor holds the session now; its sandbox here ends");
                        self.detach(&s);
                        self.stop(&s);
                    } else if let Ok(mut c) = s.claim.try_lock()
                        && matches!(*c, Claim::Held { .. })
                    {
                        *c = Claim::Held { until: asked + ttl };
                    }
                }
            }
            Err(f) => {
                tracing::warn!(error = %f, sessions = held.len(), "cannot renew the sessions' claims; a call of a session whose claim lapsed claims it again");
            }
        }
    }

    /// Reaps the sessions with no call in flight and none for `idle_timeout_s`; their
    /// background runs are stopped.
    async fn reap_idle(&self) {
        let idle = self.inner.settings.idle_timeout;
        let reaped: Vec<Arc<Session>> = {
            let mut table = lock(&self.inner.table);
            let ids: Vec<String> = table
                .values()
                .filter(|s| {
                    let a = *lock(&s.calls);
                    a.calls == 0 && a.last.elapsed() >= idle
                })
                .map(|s| s.id.clone())
                .collect();
            ids.iter().filter_map(|id| table.remove(id)).collect()
        };
        for s in reaped {
            let stopped = self.stop(&s);
            if s.held_before()
                && let Err(f) = self
                    .inner
                    .ledger
                    .end_session(
                        s.id.clone(),
                        EndReason::Idle,
                        u32::try_from(stopped).unwrap_or(u32::MAX),
                    )
                    .await
            {
                tracing::warn!(session_id = %s.id, error = %f, "cannot record the idle session's end; its claim lapses by itself");
            }
            tracing::info!(session_id = %s.id, idle_s = idle.as_secs(), runs_stopped = stopped, "idle session reaped");
        }
    }

    /// Takes every session out of the table at shutdown; answers each with the runs it still
    /// holds (which the runner's shutdown stops: a background run stopped so keeps no
    /// outcome, and the ledger reads it as lost).
    pub(crate) fn close(&self) -> Vec<Ending> {
        let all: Vec<Arc<Session>> = lock(&self.inner.table).drain().map(|(_, s)| s).collect();
        all.into_iter()
            .map(|s| {
                let runs = self.runs().map_or(0, |r| r.running_in_session(&s.id));
                s.ended.store(true, Ordering::Release);
                lock(&s.namespaces).take();
                Ending {
                    held: s.held_before(),
                    session_id: s.id.clone(),
                    runs,
                }
            })
            .collect()
    }

    /// Records the sessions' ends (`shutdown`), within `bound`.
    pub(crate) async fn record_ends(&self, ending: Vec<Ending>, bound: Duration) {
        let ending: Vec<Ending> = ending.into_iter().filter(|e| e.held).collect();
        if ending.is_empty() {
            return;
        }
        let ledger = &self.inner.ledger;
        let ends = ending.iter().map(|e| async move {
            if let Err(f) = ledger
                .end_session(
                    e.session_id.clone(),
                    EndReason::Shutdown,
                    u32::try_from(e.runs).unwrap_or(u32::MAX),
                )
                .await
            {
                tracing::warn!(session_id = %e.session_id, error = %f, "cannot record the session's end at shutdown; its claim lapses by itself");
            }
        });
        if tokio::time::timeout(bound, futures::future::join_all(ends))
            .await
            .is_err()
        {
            tracing::warn!(
                sessions = ending.len(),
                "the ledger did not record every session's end in time; their claims lapse by themselves"
            );
        } else {
            tracing::info!(sessions = ending.len(), "sessions ended at shutdown");
        }
    }

    fn runs(&self) -> Option<&Arc<dyn SessionRuns>> {
        self.inner.runs.get()
    }

    /// Takes `s` out of the table if it is still there.
    fn detach(&self, s: &Arc<Session>) {
        let mut table = lock(&self.inner.table);
        if table.get(&s.id).is_some_and(|t| Arc::ptr_eq(t, s)) {
            table.remove(&s.id);
        }
    }

    /// Ends `s` here: its runs stopped, its sandbox dropped. Answers how many runs were
    /// stopped.
    fn stop(&self, s: &Session) -> usize {
        s.ended.store(true, Ordering::Release);
        let stopped = self.runs().map_or(0, |r| r.stop_session(&s.id));
        lock(&s.namespaces).take();
        stopped
    }
}

impl Session {
    fn new(id: &str, principal: &str) -> Self {
        Session {
            id: id.to_owned(),
            principal: principal.to_owned(),
            calls: Mutex::new(Activity {
                calls: 0,
                last: Instant::now(),
            }),
            claim: tokio::sync::Mutex::new(Claim::None),
            state: Mutex::new(normalize(SessionState::default())),
            namespaces: Mutex::new(None),
            ended: AtomicBool::new(false),
        }
    }

    /// Whether this executor held the session's claim (its end is the ledger's business).
    fn held_before(&self) -> bool {
        match self.claim.try_lock() {
            Ok(c) => matches!(*c, Claim::Held { .. }),
            // A claim in flight at the end: record the end, the claim may have been taken.
            Err(_) => true,
        }
    }
}

/// A session taken out of the table at shutdown.
#[derive(Debug)]
pub(crate) struct Ending {
    session_id: String,
    /// This executor held its claim.
    held: bool,
    /// Its runs still running when the executor stopped.
    runs: usize,
}

impl SessionRuns for crate::runs::Runs {
    fn running_in_session(&self, session_id: &str) -> usize {
        crate::runs::Runs::running_in_session(self, session_id)
    }

    fn stop_session(&self, session_id: &str) -> usize {
        crate::runs::Runs::stop_session(self, session_id)
    }
}

/// A call inside its session: counts as in flight until dropped.
pub(crate) struct Entry {
    session: Arc<Session>,
    sessions: Sessions,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("session_id", &self.session.id)
            .finish_non_exhaustive()
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut a = lock(&self.session.calls);
        a.calls = a.calls.saturating_sub(1);
        a.last = Instant::now();
    }
}

impl Entry {
    /// Claims the session for this executor when it does not hold it yet (one ledger round
    /// trip at the session's first call here, none after): `SESSION_ELSEWHERE` when another
    /// executor holds it and `pin` is on, `POLICY_UNAVAILABLE` when the ledger cannot answer.
    /// Its stored state (working directory, variables) comes with the first claim.
    pub(crate) async fn claim(&self) -> Result<(), Status> {
        self.sessions.claim(&self.session).await
    }

    /// The session's state now.
    pub(crate) fn state(&self) -> SessionState {
        lock(&self.session.state).clone()
    }

    /// The session's sandbox, made at its first confined run.
    pub(crate) fn namespaces(&self) -> Result<SessionNamespaces, Status> {
        if self.session.ended.load(Ordering::Acquire) {
            return Err(status::status(
                Reason::Conflict,
                format!(
                    "session `{}` ended on this executor while the call was in flight; call again",
                    self.session.id
                ),
                [("session_id", self.session.id.clone())],
            ));
        }
        let mut ns = lock(&self.session.namespaces);
        if let Some(ns) = ns.as_ref() {
            return Ok(ns.clone());
        }
        let made = self.sessions.inner.confined.session_namespaces()?;
        tracing::debug!(session_id = %self.session.id, "session sandbox made");
        *ns = Some(made.clone());
        Ok(made)
    }

    /// What a `persist_cwd` run needs to fold its report into the session's state.
    /// `capture`: the run reports its final state (a script); else the session's state is
    /// only read.
    pub(crate) fn persist(&self, request_env: BTreeMap<String, String>, capture: bool) -> Persist {
        Persist {
            session: self.session.clone(),
            sessions: self.sessions.clone(),
            before: self.state(),
            request_env,
            capture,
        }
    }
}

/// Folds one `persist_cwd` run's state report into its session.
pub(crate) struct Persist {
    session: Arc<Session>,
    sessions: Sessions,
    /// The session's state the run started with.
    before: SessionState,
    /// The call's own `env` entries: they win for this call and are not kept unless the
    /// script changes them.
    request_env: BTreeMap<String, String>,
    /// The run reports its state (a script under the wrapper).
    capture: bool,
}

impl std::fmt::Debug for Persist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persist")
            .field("session_id", &self.session.id)
            .finish_non_exhaustive()
    }
}

impl Persist {
    /// Reads the run's report, stores the new state here and in the ledger (before the
    /// run's `Exited` leaves), and answers the session's state for `Exited.session`.
    pub(crate) async fn settle(self, report: Option<Vec<u8>>) -> common::SessionState {
        let id = self.session.id.clone();
        if !self.capture {
            return state::to_wire(&lock(&self.session.state).clone());
        }
        let report = match state::parse(report.as_deref().unwrap_or_default()) {
            Ok(r) => r,
            Err(why) => {
                tracing::info!(session_id = %id, why, "the run reported no usable session state; the session's state is unchanged");
                return state::to_wire(&lock(&self.session.state).clone());
            }
        };
        let inner = &self.sessions.inner;
        let cwd = match WorkspacePath::try_from(report.cwd.clone()) {
            Ok(p) => match inner.confined.open_directory(p).await {
                Ok(d) => Some(d.canonical),
                Err(e) => {
                    tracing::info!(session_id = %id, cwd = %report.cwd, error = %e, "the run ended outside the workspace (or in a directory it may not use); the session's working directory is unchanged");
                    None
                }
            },
            Err(_) => None,
        };
        let (reported, dropped) =
            state::kept_env(report.env, &inner.allowed_env, &inner.operator_env);
        if !dropped.is_empty() {
            tracing::info!(session_id = %id, ?dropped, "exported variables not kept for the session (not allowed, credential-like or too many)");
        }
        let mut env = BTreeMap::new();
        for (name, value) in reported {
            match self.request_env.get(&name) {
                // The call's own value, unchanged by the script: this call's only.
                Some(given) if *given == value => {
                    if let Some(old) = self.before.env.get(&name) {
                        env.insert(name, old.clone());
                    }
                }
                _ => {
                    env.insert(name, value);
                }
            }
        }
        let new = {
            let mut current = lock(&self.session.state);
            let new = SessionState {
                cwd: cwd.unwrap_or_else(|| current.cwd.clone()),
                env,
            };
            if self.session.ended.load(Ordering::Acquire) {
                return state::to_wire(&current);
            }
            *current = new.clone();
            new
        };
        if new != self.before {
            match inner.ledger.update_session(id.clone(), new.clone()).await {
                Ok(()) => {}
                Err(SessionRefusal::Unavailable(f)) => {
                    tracing::warn!(session_id = %id, error = %f, "cannot store the session's state in the ledger; it is kept on this executor only");
                }
                Err(why) => {
                    tracing::warn!(session_id = %id, refusal = ?why, "the ledger refused the session's state; it is kept on this executor only");
                }
            }
        }
        state::to_wire(&new)
    }
}

/// A stored state with the root spelled `.`.
fn normalize(mut s: SessionState) -> SessionState {
    if s.cwd.is_empty() {
        s.cwd = ".".to_owned();
    }
    s
}

/// `PERMISSION_DENIED`: the session belongs to another principal.
fn other_principal(session_id: &str) -> Status {
    status::status(
        Reason::RoleNotPermitted,
        format!(
            "session `{session_id}` belongs to another principal; use a session id of your own"
        ),
        [("session_id", session_id.to_owned())],
    )
}

/// `FAILED_PRECONDITION` / `SESSION_ELSEWHERE`: route the session to the executor holding it.
fn elsewhere(session_id: &str, executor_id: &str, pod: &str, expires: SystemTime) -> Status {
    let expires_at = prost_types::Timestamp::from(expires).to_string();
    let at = if pod.is_empty() { executor_id } else { pod };
    status::status(
        Reason::SessionElsewhere,
        format!(
            "session `{session_id}` is held by executor `{executor_id}` (pod `{at}`): send the session's calls to that executor, or wait until its claim expires at {expires_at} if it is gone"
        ),
        [
            ("session_id", session_id.to_owned()),
            ("executor_id", executor_id.to_owned()),
            ("pod", pod.to_owned()),
            ("claim_expires_at", expires_at),
        ],
    )
}

/// Locks a std mutex, recovering from a panicked holder (the data stays consistent: every
/// critical section is a plain read or write).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
