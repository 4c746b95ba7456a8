//! The durable approval ledger on Postgres and SQLite.
//!
//! [`Ledger`] is the service-facing trait; [`SqlLedger`] implements it on either
//! backend with one body of SQL, so both run the same invariants:
//!
//! - an approval binds a request digest, session, principal and policy version;
//! - a once-scope approval is consumed by exactly one call (compare-and-set);
//! - expiry and leases are checked at use, and a sweep closes what nobody used;
//! - every change appends to a sha256 hash chain that [`Ledger::verify`] recomputes;
//! - secrets are redacted before anything is stored.
//!
//! Auto/deny decisions go through a group-commit writer: concurrent calls share one
//! durable transaction instead of each paying for its own commit.

mod canon;
mod clock;
mod db;
mod error;
mod migrate;
mod model;
mod notify;
mod redact;
mod snapshot;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

pub use clock::{Clock, ManualClock};
pub use error::{Error, Result};
pub use migrate::SCHEMA_VERSION;
pub use model::*;
pub use redact::{REDACTED, RedactionConfig, Redactor};

use db::Pool;
use store::{Core, Settings};

/// The approval ledger as the policy service uses it.
///
/// Object safe: the service holds an `Arc<dyn Ledger>`.
pub trait Ledger: Send + Sync {
    /// Records an auto or deny decision (group-committed); a repeated call id is a replay.
    fn record_decision(&self, decision: NewDecision) -> BoxFuture<'_, Result<Recorded>>;

    /// Records an ask decision: consumes a covering approval or parks the call on a pending one.
    fn ask(&self, request: AskRequest) -> BoxFuture<'_, Result<AskOutcome>>;

    /// Approves or denies a pending approval; a second decide gets [`Error::NotPending`].
    fn decide(&self, id: ApprovalId, decide: Decide) -> BoxFuture<'_, Result<Approval>>;

    /// Cancels a pending approval; it can never be approved afterwards.
    fn cancel(
        &self,
        id: ApprovalId,
        by: Principal,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<Approval>>;

    /// One approval with its explanation.
    fn get(&self, id: ApprovalId) -> BoxFuture<'_, Result<Approval>>;

    /// Approvals matching `filter`, newest first, `limit` (1..=500) per page.
    fn list(
        &self,
        filter: ApprovalFilter,
        page: Option<PageToken>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Page<Approval>>>;

    /// Attaches an outcome to its decision; idempotent, a different second outcome conflicts.
    fn record_outcome(&self, outcome: NewOutcome) -> BoxFuture<'_, Result<OutcomeRecord>>;

    /// Releases an allowed call that was refused before it started: nothing ran, so its
    /// `call_id` may be allowed again and a once-approval it consumed is usable again.
    fn release(&self, not_started: NotStarted) -> BoxFuture<'_, Result<DecisionRecord>>;

    /// Everything recorded for a call id, for idempotent replay.
    fn lookup_call(&self, call_id: CallId) -> BoxFuture<'_, Result<Option<CallRecord>>>;

    /// One decision.
    fn decision(&self, id: DecisionId) -> BoxFuture<'_, Result<DecisionRecord>>;

    /// Expires overdue approvals and turns consumed-but-unreported calls into `unknown`.
    fn sweep(&self) -> BoxFuture<'_, Result<SweepReport>>;

    /// Approval changes after `after`, waiting up to `wait` when there are none yet.
    ///
    /// Returns the matching changes and the cursor to resume from (it advances past
    /// changes the filter dropped).
    fn changes(
        &self,
        after: Cursor,
        filter: ApprovalFilter,
        limit: u32,
        wait: Duration,
    ) -> BoxFuture<'_, Result<(Vec<Change>, Cursor)>>;

    /// Waits until the approval leaves `pending` (or expires, or `timeout` passes) and returns it.
    fn wait_for_decision(
        &self,
        id: ApprovalId,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Approval>>;

    /// Recomputes the audit hash chain and checks every row against its latest event.
    fn verify(&self) -> BoxFuture<'_, Result<VerifyReport>>;

    /// Whether the database answers now (the service reports NOT_SERVING when it does not).
    fn health(&self) -> BoxFuture<'_, Result<()>>;

    /// Approves a pending approval and stores the rule learned from it, in one transaction
    /// (the approver is `decide.approver`; the verdict must be an approval).
    fn decide_and_learn(
        &self,
        id: ApprovalId,
        decide: Decide,
        rule: NewLearnedRule,
    ) -> BoxFuture<'_, Result<(Approval, LearnedRuleRecord)>>;

    /// Revokes an active learned rule; [`Error::RuleNotFound`] when there is none by that id.
    fn revoke_rule(
        &self,
        id: LearnedRuleId,
        by: Principal,
    ) -> BoxFuture<'_, Result<LearnedRuleRecord>>;

    /// Every learned rule, revoked and expired included, with the set's revision.
    fn learned_rules(&self) -> BoxFuture<'_, Result<LearnedRules>>;

    /// A number that changes whenever the learned rules may have changed, on any replica:
    /// a compiled set is rebuilt when it moves. Cheap (an atomic load).
    fn learned_generation(&self) -> u64;

    /// How many approvals are stored as pending, across every replica (a dashboard gauge).
    fn count_pending(&self) -> BoxFuture<'_, Result<u64>>;

    /// Claims a session for an executor: creates it on first use, takes it over when its
    /// claim lapsed or ended or the same executor (id and credential) claims again.
    /// [`Error::SessionElsewhere`] while another executor holds a live claim,
    /// [`Error::SessionOtherPrincipal`] for another principal. Exactly one of concurrent
    /// claims by different executors succeeds.
    fn claim_session(&self, claim: ClaimSession) -> BoxFuture<'_, Result<Claimed>>;

    /// Extends `holder`'s claims on `ids` for `ttl` from now, in one statement; answers the
    /// ids it no longer holds.
    fn renew_sessions(
        &self,
        holder: SessionHolder,
        ids: Vec<SessionId>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<SessionId>>>;

    /// Stores a session's state; only its holder may ([`Error::SessionElsewhere`] otherwise).
    fn update_session(
        &self,
        holder: SessionHolder,
        id: SessionId,
        state: SessionState,
    ) -> BoxFuture<'_, Result<Session>>;

    /// Records that the holder's sandbox of the session ended (`idle` or `shutdown`) and
    /// releases the claim; a repeated end by the same holder answers the ended session.
    fn end_session(
        &self,
        holder: SessionHolder,
        id: SessionId,
        reason: String,
    ) -> BoxFuture<'_, Result<Session>>;

    /// Marks everything `holder` had running as lost, in one transaction: every allowed
    /// decision of its credential and reported executor id with no outcome and a running
    /// lease gets its lease ended now (replays read unknown; a late outcome is refused), and
    /// every claim it holds ends with reason `abandoned`.
    fn abandon_executor(&self, holder: SessionHolder) -> BoxFuture<'_, Result<Abandoned>>;

    /// One session; [`Error::SessionNotFound`] when the ledger never saw it.
    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Session>>;

    /// Sessions matching `filter`, most recently active first.
    fn list_sessions(&self, filter: SessionFilter) -> BoxFuture<'_, Result<Vec<Session>>>;

    /// The cursor of the newest change: a watch that snapshots current approvals resumes
    /// live changes from here, so nothing committed after the snapshot is missed.
    ///
    /// The default walks the change feed; backends override it with one query.
    fn head(&self) -> BoxFuture<'_, Result<Cursor>> {
        Box::pin(async move {
            let mut at = Cursor::default();
            loop {
                let (_, next) = self
                    .changes(at, ApprovalFilter::default(), 1000, Duration::ZERO)
                    .await?;
                if next == at {
                    return Ok(at);
                }
                at = next;
            }
        })
    }
}

/// How to open a ledger.
#[derive(Clone)]
pub struct LedgerConfig {
    /// `postgres://…` or `sqlite://path` (`sqlite:path` too).
    pub url: String,
    /// Secrets to scrub before storing.
    pub redaction: RedactionConfig,
    /// How long a pending approval waits for a human.
    pub pending_ttl: Duration,
    /// How long an approved approval stays usable.
    pub approval_ttl: Duration,
    /// How long a consuming execution has to report its outcome.
    pub lease: Duration,
    /// Pool size.
    pub max_connections: u32,
    /// How long an operation keeps retrying while the database is unreachable.
    pub retry_budget: Duration,
    /// Apply migrations on open (otherwise only check the schema version).
    pub migrate: bool,
    /// Decisions per group commit, at most.
    pub max_batch: usize,
    /// Group commits in flight at once, each on its own connection (Postgres; SQLite has one
    /// writer and always commits one at a time). A batch's rows go in while the previous
    /// batch's commit is being flushed; the audit chain still orders the commits.
    pub commit_pipeline: usize,
    /// The time source.
    pub clock: Clock,
}

impl LedgerConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        LedgerConfig {
            url: url.into(),
            redaction: RedactionConfig::default(),
            pending_ttl: Duration::from_secs(24 * 3600),
            approval_ttl: Duration::from_secs(3600),
            lease: Duration::from_secs(15 * 60),
            max_connections: 16,
            retry_budget: Duration::from_secs(5),
            migrate: true,
            max_batch: 512,
            commit_pipeline: 2,
            clock: Clock::system(),
        }
    }
}

// The url may carry a password; Debug output must not.
impl std::fmt::Debug for LedgerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerConfig")
            .field("url", &redact_url(&self.url))
            .field("redaction", &self.redaction)
            .field("pending_ttl", &self.pending_ttl)
            .field("approval_ttl", &self.approval_ttl)
            .field("lease", &self.lease)
            .field("max_connections", &self.max_connections)
            .field("retry_budget", &self.retry_budget)
            .field("migrate", &self.migrate)
            .field("max_batch", &self.max_batch)
            .field("commit_pipeline", &self.commit_pipeline)
            .finish_non_exhaustive()
    }
}

pub use toolgate_core::redact_url;

enum Target {
    Pg(PgConnectOptions),
    Lite(SqliteConnectOptions),
}

fn target(url: &str) -> Result<Target> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let opts = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("url", format!("bad postgres url: {e}")))?;
        Ok(Target::Pg(opts))
    } else if url.starts_with("sqlite:") {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("url", format!("bad sqlite url: {e}")))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: with WAL, NORMAL may lose the last commits on power loss.
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30));
        Ok(Target::Lite(opts))
    } else {
        Err(Error::invalid(
            "url",
            "expected postgres://… or sqlite:path",
        ))
    }
}

/// A Postgres connection idle for this long is pinged before it is used again.
const PING_IDLE_AFTER: Duration = Duration::from_millis(500);

async fn open_pool(target: &Target, max: u32) -> Result<Pool> {
    Ok(match target {
        Target::Pg(o) => Pool::Pg(
            PgPoolOptions::new()
                .max_connections(max)
                .acquire_timeout(Duration::from_secs(3))
                // sqlx pings every connection going back to the pool, and by default pings
                // it again when it is taken: one more round trip on every ledger operation.
                // A connection taken soon after its release was alive then, so only one idle
                // for longer is pinged first. One that died in that window (Postgres
                // restarted) fails that attempt as a query in flight would: the operation
                // retries, and the failed connection is closed, not reused.
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for >= PING_IDLE_AFTER {
                            use sqlx::Connection;
                            conn.ping().await?;
                        }
                        Ok(true)
                    })
                })
                .connect_lazy_with(o.clone()),
        ),
        Target::Lite(o) => Pool::Lite(
            SqlitePoolOptions::new()
                .max_connections(max)
                // A COMMIT that failed (a full disk) leaves SQLite rolled back but sqlx
                // counting the transaction open, and every later BEGIN on that connection
                // fails: such a connection is closed instead of going back to the pool. The
                // ping first lets the rollback a dropped transaction queued run.
                .after_release(|conn, _| {
                    Box::pin(async move {
                        use sqlx::Connection;
                        conn.ping().await?;
                        Ok(!conn.is_in_transaction())
                    })
                })
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(o.clone())
                .await?,
        ),
    })
}

/// Applies the embedded migrations to the database at `url` and returns the schema version.
///
/// Safe to run from several replicas at once; a database newer than this binary is refused.
pub async fn migrate(url: &str) -> Result<i64> {
    let t = target(url)?;
    let pool = match &t {
        Target::Lite(_) => migrate::while_busy(|| open_pool(&t, 2)).await?,
        Target::Pg(_) => open_pool(&t, 2).await?,
    };
    let r = migrate::run(&pool).await;
    pool.close().await;
    r
}

struct Job {
    decision: store::Pending,
    reply: oneshot::Sender<Result<Recorded>>,
}

/// The SQL ledger (Postgres or SQLite). Cheap to clone.
#[derive(Clone)]
pub struct SqlLedger {
    core: Arc<Core>,
    writer: mpsc::Sender<Job>,
    /// The writer and the LISTEN connection; dropping the last handle aborts them.
    _tasks: Arc<JoinSet<()>>,
}

impl std::fmt::Debug for SqlLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqlLedger")
    }
}

impl SqlLedger {
    /// Opens the ledger: connects, migrates (or checks the schema), starts the
    /// group-commit writer and, on Postgres, the process's single LISTEN connection.
    pub async fn connect(config: LedgerConfig) -> Result<Self> {
        let redactor = Redactor::new(&config.redaction)?;
        let t = target(&config.url)?;
        let pool = open_pool(&t, config.max_connections.max(2)).await?;
        let hub = notify::Hub::new();
        let core = Arc::new(Core {
            pool,
            redactor,
            settings: Settings {
                pending_ttl: config.pending_ttl,
                approval_ttl: config.approval_ttl,
                lease: config.lease,
                retry_budget: config.retry_budget,
            },
            clock: config.clock.clone(),
            hub: hub.clone(),
            storage_fault: std::sync::Mutex::new(None),
        });
        if config.migrate {
            core.retry(|| migrate::run(&core.pool)).await?;
        } else {
            core.retry(|| migrate::check(&core.pool)).await?;
        }
        let mut tasks = JoinSet::new();
        if let Target::Pg(o) = &t {
            notify::listen(o.clone(), hub, &mut tasks).await?;
        }
        let (tx, rx) = mpsc::channel(config.max_batch.max(1) * 8);
        let pipeline = match t {
            Target::Pg(_) => config.commit_pipeline.max(1),
            Target::Lite(_) => 1,
        };
        tasks.spawn(run_writer(
            core.clone(),
            rx,
            config.max_batch.max(1),
            pipeline,
        ));
        Ok(SqlLedger {
            core,
            writer: tx,
            _tasks: Arc::new(tasks),
        })
    }

    /// How many callers of [`Ledger::wait_for_decision`] are parked on a pending approval
    /// in this process right now (a gauge for dashboards).
    pub fn waiting(&self) -> usize {
        self.core.hub.parked()
    }

    /// Closes the pool; in-flight operations fail with [`Error::Unavailable`].
    pub async fn close(&self) {
        self.core.pool.close().await;
    }

    async fn record(&self, nd: NewDecision) -> Result<Recorded> {
        if nd.tier == toolgate_core::Tier::Ask {
            return Err(Error::invalid(
                "tier",
                "ask-tier decisions are recorded by ask, which also binds the approval",
            ));
        }
        let decision = store::Pending::new(self.core.prepare_decision(nd, self.core.clock.now())?);
        let (reply, rx) = oneshot::channel();
        self.writer
            .send(Job { decision, reply })
            .await
            .map_err(|_| Error::Unavailable("ledger writer stopped".into()))?;
        rx.await
            .map_err(|_| Error::Unavailable("ledger writer stopped".into()))?
    }
}

/// Group commit: one transaction (one flush) for the decisions that queued up while the
/// previous batch was committing, with up to `pipeline` batches in flight.
///
/// A batch starts at once when none is in flight. While one is, the next starts early only
/// once it is as large as the last one started (so a second connection is worth its commit);
/// otherwise it keeps gathering until a commit finishes. Each caller is answered only after
/// the transaction holding its decision committed, so a crash loses only decisions nobody
/// was told about.
async fn run_writer(
    core: Arc<Core>,
    mut rx: mpsc::Receiver<Job>,
    max_batch: usize,
    pipeline: usize,
) {
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<usize>();
    let mut batches = JoinSet::new();
    let mut jobs: Vec<Job> = Vec::with_capacity(max_batch);
    let (mut in_flight, mut last, mut answered) = (0usize, 0usize, 0usize);
    let mut open = true;
    loop {
        let start = !jobs.is_empty()
            && in_flight < pipeline
            && (in_flight == 0 || jobs.len() >= last.max(1) || jobs.len() >= max_batch);
        if start {
            // Callers just answered are usually about to send their next decision: let them,
            // so that they join this batch instead of waiting a whole commit for the next.
            // Bounded, and nearly free when nobody else is ready to run.
            let rejoining = std::mem::take(&mut answered).min(max_batch);
            for _ in 0..REJOIN_YIELDS {
                if jobs.len() + rx.len() >= rejoining {
                    break;
                }
                tokio::task::yield_now().await;
            }
            while jobs.len() < max_batch {
                match rx.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            let batch = std::mem::replace(&mut jobs, Vec::with_capacity(max_batch));
            last = batch.len();
            in_flight += 1;
            let core = Arc::clone(&core);
            let done = done_tx.clone();
            batches.spawn(async move {
                let (decisions, replies): (Vec<_>, Vec<_>) =
                    batch.into_iter().map(|j| (j.decision, j.reply)).unzip();
                let results = core.write_decisions(decisions).await;
                let n = results.len();
                for (reply, r) in replies.into_iter().zip(results) {
                    // The caller may have gone away; its decision is durable regardless.
                    let _ = reply.send(r);
                }
                let _ = done.send(n);
            });
            continue;
        }
        if !open && jobs.is_empty() && in_flight == 0 {
            break;
        }
        let room = max_batch - jobs.len();
        tokio::select! {
            n = rx.recv_many(&mut jobs, room), if open && room > 0 => {
                if n == 0 {
                    open = false;
                }
            }
            Some(n) = done_rx.recv(), if in_flight > 0 => {
                in_flight -= 1;
                answered += n;
                // Reap the finished batch's task.
                while batches.try_join_next().is_some() {}
            }
            // Not reached (one branch is always enabled); callers then hear the writer stopped.
            else => break,
        }
    }
}

/// How many times the writer yields, at most, for callers it just answered to send again.
const REJOIN_YIELDS: usize = 8;

impl Ledger for SqlLedger {
    fn record_decision(&self, decision: NewDecision) -> BoxFuture<'_, Result<Recorded>> {
        Box::pin(self.record(decision))
    }

    fn ask(&self, request: AskRequest) -> BoxFuture<'_, Result<AskOutcome>> {
        Box::pin(self.core.ask(request))
    }

    fn decide(&self, id: ApprovalId, decide: Decide) -> BoxFuture<'_, Result<Approval>> {
        Box::pin(async move { self.core.decide(&id, &decide).await })
    }

    fn cancel(
        &self,
        id: ApprovalId,
        by: Principal,
        reason: Option<String>,
    ) -> BoxFuture<'_, Result<Approval>> {
        Box::pin(async move { self.core.cancel(&id, &by, reason.as_deref()).await })
    }

    fn get(&self, id: ApprovalId) -> BoxFuture<'_, Result<Approval>> {
        Box::pin(async move { self.core.get(&id).await })
    }

    fn list(
        &self,
        filter: ApprovalFilter,
        page: Option<PageToken>,
        limit: u32,
    ) -> BoxFuture<'_, Result<Page<Approval>>> {
        Box::pin(async move { self.core.list(&filter, page.as_ref(), limit).await })
    }

    fn record_outcome(&self, outcome: NewOutcome) -> BoxFuture<'_, Result<OutcomeRecord>> {
        Box::pin(async move { self.core.record_outcome(&outcome).await })
    }

    fn release(&self, not_started: NotStarted) -> BoxFuture<'_, Result<DecisionRecord>> {
        Box::pin(async move { self.core.release(&not_started).await })
    }

    fn lookup_call(&self, call_id: CallId) -> BoxFuture<'_, Result<Option<CallRecord>>> {
        Box::pin(async move { self.core.lookup_call(&call_id).await })
    }

    fn decision(&self, id: DecisionId) -> BoxFuture<'_, Result<DecisionRecord>> {
        Box::pin(async move { self.core.decision(&id).await })
    }

    fn sweep(&self) -> BoxFuture<'_, Result<SweepReport>> {
        Box::pin(self.core.sweep())
    }

    fn changes(
        &self,
        after: Cursor,
        filter: ApprovalFilter,
        limit: u32,
        wait: Duration,
    ) -> BoxFuture<'_, Result<(Vec<Change>, Cursor)>> {
        Box::pin(async move { self.core.changes(after, &filter, limit, wait).await })
    }

    fn wait_for_decision(
        &self,
        id: ApprovalId,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Approval>> {
        Box::pin(async move { self.core.wait_for_decision(&id, timeout).await })
    }

    fn verify(&self) -> BoxFuture<'_, Result<VerifyReport>> {
        Box::pin(self.core.verify())
    }

    fn health(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.core.health())
    }

    fn head(&self) -> BoxFuture<'_, Result<Cursor>> {
        Box::pin(self.core.head())
    }

    fn count_pending(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.core.count_pending())
    }

    fn decide_and_learn(
        &self,
        id: ApprovalId,
        decide: Decide,
        rule: NewLearnedRule,
    ) -> BoxFuture<'_, Result<(Approval, LearnedRuleRecord)>> {
        Box::pin(async move {
            let (a, r) = self.core.decide_learning(&id, &decide, Some(&rule)).await?;
            let r = r.ok_or_else(|| Error::Database("the learned rule was not stored".into()))?;
            Ok((a, r))
        })
    }

    fn revoke_rule(
        &self,
        id: LearnedRuleId,
        by: Principal,
    ) -> BoxFuture<'_, Result<LearnedRuleRecord>> {
        Box::pin(async move { self.core.revoke_learned(&id, &by).await })
    }

    fn learned_rules(&self) -> BoxFuture<'_, Result<LearnedRules>> {
        Box::pin(self.core.learned_rules())
    }

    fn learned_generation(&self) -> u64 {
        self.core.hub.rules_generation()
    }

    fn claim_session(&self, claim: ClaimSession) -> BoxFuture<'_, Result<Claimed>> {
        Box::pin(async move { self.core.claim_session(&claim).await })
    }

    fn renew_sessions(
        &self,
        holder: SessionHolder,
        ids: Vec<SessionId>,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<Vec<SessionId>>> {
        Box::pin(async move { self.core.renew_sessions(&holder, &ids, ttl).await })
    }

    fn update_session(
        &self,
        holder: SessionHolder,
        id: SessionId,
        state: SessionState,
    ) -> BoxFuture<'_, Result<Session>> {
        Box::pin(async move { self.core.update_session(&holder, &id, &state).await })
    }

    fn end_session(
        &self,
        holder: SessionHolder,
        id: SessionId,
        reason: String,
    ) -> BoxFuture<'_, Result<Session>> {
        Box::pin(async move { self.core.end_session(&holder, &id, &reason).await })
    }

    fn abandon_executor(&self, holder: SessionHolder) -> BoxFuture<'_, Result<Abandoned>> {
        Box::pin(async move { self.core.abandon(&holder).await })
    }

    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<Session>> {
        Box::pin(async move { self.core.session(&id).await })
    }

    fn list_sessions(&self, filter: SessionFilter) -> BoxFuture<'_, Result<Vec<Session>>> {
        Box::pin(async move { self.core.list_sessions(&filter).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_debug_hides_the_password() {
        let c = LedgerConfig::new("postgres://tg:s3cretpw@db:5432/ledger");
        let d = format!("{c:?}");
        assert!(!d.contains("s3cretpw"), "{d}");
        assert!(d.contains("postgres://tg:[REDACTED]@db:5432/ledger"), "{d}");
        assert_eq!(
            redact_url("sqlite://data/ledger.db"),
            "sqlite://data/ledger.db"
        );
    }

    #[test]
    fn unknown_url_schemes_are_refused() {
        assert!(matches!(
            target("mysql://x"),
            Err(Error::Invalid { field: "url", .. })
        ));
    }
}
