//! The thin seam between the ledger logic and the two sqlx drivers.
//!
//! The ledger's SQL is written once with `$N` placeholders (both drivers accept them)
//! and plain BIGINT/TEXT/BYTEA columns, so one implementation of every invariant runs
//! on both backends. Only the audit append and notifications differ per backend.

use sqlx::postgres::{PgArguments, PgPool, PgRow};
use sqlx::sqlite::{SqliteArguments, SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Decode, Postgres, Row as _, Sqlite, Transaction, Type};

use crate::canon;
use crate::error::{Error, Result};
use crate::model::Approval;
use crate::snapshot::Snapshot;

/// The channel every replica LISTENs on: ids of changed approvals, and the learned-rules topic.
pub(crate) const CHANNEL: &str = "toolgate_ledger";

/// The channel of approval snapshots ([`crate::snapshot::Snapshot`]), sent before the bare id.
pub(crate) const STATES: &str = "toolgate_ledger_states";

/// The payload on [`CHANNEL`] that says "the learned rules changed". Not an approval id (those
/// start with `apr_`), so approval waiters never match it.
pub(crate) const RULES_TOPIC: &str = "learned-rules";

/// The chain head (its newest event's seq and hash), as the SQLite append and verify read it:
/// by the names `head_seq` and `head_hash`.
pub(crate) const HEAD: &str =
    "SELECT seq AS head_seq, hash AS head_hash FROM tg_audit_head WHERE id = 1";

/// A bind argument with an explicit type, so that NULLs are typed for Postgres.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Int(Option<i64>),
    Text(Option<String>),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}
impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}
impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(Some(v.to_owned()))
    }
}
impl From<String> for Arg {
    fn from(v: String) -> Self {
        Arg::Text(Some(v))
    }
}
impl From<&String> for Arg {
    fn from(v: &String) -> Self {
        Arg::Text(Some(v.clone()))
    }
}
impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Self {
        Arg::Text(v.map(str::to_owned))
    }
}
impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Self {
        Arg::Text(v)
    }
}

/// Builds a `Vec<Arg>` from heterogeneous values.
macro_rules! args {
    ($($v:expr),* $(,)?) => { vec![$($crate::db::Arg::from($v)),*] };
}
pub(crate) use args;

fn pg_query(sql: &str, args: Vec<Arg>) -> sqlx::query::Query<'static, Postgres, PgArguments> {
    let mut q = sqlx::query(AssertSqlSafe(sql.to_owned()));
    for a in args {
        q = match a {
            Arg::Int(v) => q.bind(v),
            Arg::Text(v) => q.bind(v),
        };
    }
    q
}

fn lite_query(sql: &str, args: Vec<Arg>) -> sqlx::query::Query<'static, Sqlite, SqliteArguments> {
    let mut q = sqlx::query(AssertSqlSafe(sql.to_owned()));
    for a in args {
        q = match a {
            Arg::Int(v) => q.bind(v),
            Arg::Text(v) => q.bind(v),
        };
    }
    q
}

/// A result row from either backend.
pub(crate) enum Row {
    Pg(PgRow),
    Lite(SqliteRow),
}

impl Row {
    /// Reads one column by its name in the result row. There is deliberately no positional
    /// getter: every SELECT names its columns (`AS ...`), so they may stand in any order.
    pub(crate) fn get<T>(&self, column: &str) -> Result<T>
    where
        T: for<'r> Decode<'r, Postgres>
            + Type<Postgres>
            + for<'r> Decode<'r, Sqlite>
            + Type<Sqlite>,
    {
        Ok(match self {
            Row::Pg(r) => r.try_get(column)?,
            Row::Lite(r) => r.try_get(column)?,
        })
    }
}

/// A connection pool on either backend.
#[derive(Clone)]
pub(crate) enum Pool {
    Pg(PgPool),
    Lite(SqlitePool),
}

impl Pool {
    /// Starts a write transaction; SQLite takes its write lock up front so that
    /// read-then-write sequences cannot deadlock or see stale data.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        Ok(match self {
            Pool::Pg(p) => Tx {
                inner: TxInner::Pg(p.begin().await?),
                touched: Vec::new(),
            },
            Pool::Lite(p) => Tx {
                inner: TxInner::Lite(p.begin_with("BEGIN IMMEDIATE").await?),
                touched: Vec::new(),
            },
        })
    }

    /// Starts a read-only transaction over one consistent snapshot: Postgres REPEATABLE READ,
    /// SQLite a deferred transaction (in WAL mode its first read fixes the snapshot, and it
    /// takes no write lock). For reads that must agree with each other, like `verify`.
    pub(crate) async fn snapshot(&self) -> Result<Tx> {
        Ok(match self {
            Pool::Pg(p) => Tx {
                inner: TxInner::Pg(
                    p.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                        .await?,
                ),
                touched: Vec::new(),
            },
            Pool::Lite(p) => Tx {
                inner: TxInner::Lite(p.begin_with("BEGIN DEFERRED").await?),
                touched: Vec::new(),
            },
        })
    }

    pub(crate) async fn fetch_all(&self, sql: &str, args: Vec<Arg>) -> Result<Vec<Row>> {
        Ok(match self {
            Pool::Pg(p) => pg_query(sql, args)
                .fetch_all(p)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
            Pool::Lite(p) => lite_query(sql, args)
                .fetch_all(p)
                .await?
                .into_iter()
                .map(Row::Lite)
                .collect(),
        })
    }

    pub(crate) async fn fetch_opt(&self, sql: &str, args: Vec<Arg>) -> Result<Option<Row>> {
        Ok(match self {
            Pool::Pg(p) => pg_query(sql, args).fetch_optional(p).await?.map(Row::Pg),
            Pool::Lite(p) => lite_query(sql, args)
                .fetch_optional(p)
                .await?
                .map(Row::Lite),
        })
    }

    /// One committed write that touches no ledger row: SQLite rewrites its header's
    /// `user_version` (unused by the ledger) with the value it has, Postgres commits a
    /// transaction that took a transaction id. Both need the storage to take a write.
    pub(crate) async fn probe_write(&self) -> Result<()> {
        match self {
            Pool::Pg(p) => {
                let mut t = p.begin().await?;
                sqlx::query("SELECT txid_current()")
                    .execute(&mut *t)
                    .await?;
                t.commit().await?;
            }
            Pool::Lite(p) => {
                let mut t = p.begin_with("BEGIN IMMEDIATE").await?;
                let v: i64 = sqlx::query_scalar("PRAGMA user_version")
                    .fetch_one(&mut *t)
                    .await?;
                sqlx::raw_sql(AssertSqlSafe(format!("PRAGMA user_version = {v}")))
                    .execute(&mut *t)
                    .await?;
                t.commit().await?;
            }
        }
        Ok(())
    }

    pub(crate) async fn close(&self) {
        match self {
            Pool::Pg(p) => p.close().await,
            Pool::Lite(p) => p.close().await,
        }
    }
}

enum TxInner {
    Pg(Transaction<'static, Postgres>),
    Lite(Transaction<'static, Sqlite>),
}

/// One audit event waiting to be appended.
pub(crate) struct Event {
    pub(crate) kind: String,
    pub(crate) subject: String,
    pub(crate) payload: Vec<u8>,
}

/// The channels and payloads announcing `touched`: every snapshot that fits a payload on
/// [`STATES`], then every id on [`CHANNEL`].
fn notifications(touched: &[Touched]) -> (Vec<&'static str>, Vec<String>) {
    let states = touched.iter().filter_map(|t| {
        let payload = t.snapshot.as_ref()?.encode(&t.id)?;
        Some((STATES, payload))
    });
    let ids = touched.iter().map(|t| (CHANNEL, t.id.clone()));
    states.chain(ids).unzip()
}

/// A write transaction that also collects audit events and touched approvals.
pub(crate) struct Tx {
    inner: TxInner,
    touched: Vec<Touched>,
}

/// Something a transaction changed, announced once it commits.
#[derive(Debug)]
pub(crate) struct Touched {
    /// An approval id, or a topic like the learned rules.
    pub(crate) id: String,
    /// The approval as this transaction leaves it (none for a topic).
    pub(crate) snapshot: Option<Snapshot>,
}

impl Tx {
    pub(crate) async fn exec(&mut self, sql: &str, args: Vec<Arg>) -> Result<u64> {
        Ok(match &mut self.inner {
            TxInner::Pg(t) => pg_query(sql, args).execute(&mut **t).await?.rows_affected(),
            TxInner::Lite(t) => lite_query(sql, args)
                .execute(&mut **t)
                .await?
                .rows_affected(),
        })
    }

    /// Runs `insert`, one `INSERT` without a `RETURNING` clause, and appends `events` to the
    /// audit chain, in this transaction. On Postgres the two are one statement (the `INSERT`
    /// as a data-modifying CTE beside `tg_append`): one round trip instead of two.
    pub(crate) async fn insert_appending(
        &mut self,
        insert: &str,
        args: Vec<Arg>,
        events: Vec<Event>,
    ) -> Result<()> {
        match &mut self.inner {
            TxInner::Pg(t) => {
                let n = args.len();
                let sql = format!(
                    "WITH ins AS ({insert} RETURNING 1) \
                     SELECT (SELECT count(*) FROM ins), tg_append(${}::text[], ${}::text[], ${}::bytea[])",
                    n + 1,
                    n + 2,
                    n + 3
                );
                let (kinds, subjects, payloads) = split(events);
                pg_query(&sql, args)
                    .bind(kinds)
                    .bind(subjects)
                    .bind(payloads)
                    .execute(&mut **t)
                    .await?;
            }
            TxInner::Lite(t) => {
                lite_query(insert, args).execute(&mut **t).await?;
                if !events.is_empty() {
                    lite_append(t, events).await?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn fetch_all(&mut self, sql: &str, args: Vec<Arg>) -> Result<Vec<Row>> {
        Ok(match &mut self.inner {
            TxInner::Pg(t) => pg_query(sql, args)
                .fetch_all(&mut **t)
                .await?
                .into_iter()
                .map(Row::Pg)
                .collect(),
            TxInner::Lite(t) => lite_query(sql, args)
                .fetch_all(&mut **t)
                .await?
                .into_iter()
                .map(Row::Lite)
                .collect(),
        })
    }

    pub(crate) async fn fetch_opt(&mut self, sql: &str, args: Vec<Arg>) -> Result<Option<Row>> {
        Ok(match &mut self.inner {
            TxInner::Pg(t) => pg_query(sql, args)
                .fetch_optional(&mut **t)
                .await?
                .map(Row::Pg),
            TxInner::Lite(t) => lite_query(sql, args)
                .fetch_optional(&mut **t)
                .await?
                .map(Row::Lite),
        })
    }

    /// Runs a script of several statements (a migration), without arguments.
    pub(crate) async fn exec_script(&mut self, sql: &'static str) -> Result<()> {
        match &mut self.inner {
            TxInner::Pg(t) => {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut **t).await?;
            }
            TxInner::Lite(t) => {
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut **t).await?;
            }
        }
        Ok(())
    }

    /// Remembers that an approval changed (to `a`), so its waiters are handed it after commit.
    pub(crate) fn touch(&mut self, a: &Approval) {
        self.note(a.id.as_str(), Some(Snapshot::of(a)));
    }

    /// Remembers that a topic (not an approval) changed, so listeners hear it after commit.
    pub(crate) fn touch_topic(&mut self, topic: &str) {
        self.note(topic, None);
    }

    fn note(&mut self, id: &str, snapshot: Option<Snapshot>) {
        // The last change of an approval in a transaction is the one it commits.
        match self.touched.iter_mut().find(|t| t.id == id) {
            Some(t) => t.snapshot = snapshot,
            None => self.touched.push(Touched {
                id: id.to_owned(),
                snapshot,
            }),
        }
    }

    /// Appends events to the hash chain, then commits; returns the approvals touched.
    ///
    /// The append is always the last write of a transaction: it locks the single
    /// chain head row, and taking that lock last keeps the time other writers wait
    /// on it short and rules out lock-order deadlocks with the business rows.
    pub(crate) async fn commit(mut self, events: Vec<Event>) -> Result<Vec<Touched>> {
        match &mut self.inner {
            TxInner::Pg(t) => {
                if !events.is_empty() {
                    let (kinds, subjects, payloads) = split(events);
                    sqlx::query("SELECT tg_append($1::text[], $2::text[], $3::bytea[])")
                        .bind(kinds)
                        .bind(subjects)
                        .bind(payloads)
                        .execute(&mut **t)
                        .await?;
                }
                if !self.touched.is_empty() {
                    // Delivered by Postgres only if and when the transaction commits, in the
                    // order sent: each snapshot reaches a listener before its bare id.
                    let (channels, payloads) = notifications(&self.touched);
                    sqlx::query(
                        "SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)",
                    )
                    .bind(channels)
                    .bind(payloads)
                    .execute(&mut **t)
                    .await?;
                }
            }
            TxInner::Lite(t) => {
                if !events.is_empty() {
                    lite_append(t, events).await?;
                }
            }
        }
        match self.inner {
            TxInner::Pg(t) => t.commit().await?,
            TxInner::Lite(t) => t.commit().await?,
        }
        Ok(self.touched)
    }

    /// Abandons the transaction (it only read, or must not change anything).
    pub(crate) async fn rollback(self) -> Result<()> {
        match self.inner {
            TxInner::Pg(t) => t.rollback().await?,
            TxInner::Lite(t) => t.rollback().await?,
        }
        Ok(())
    }
}

pub(crate) fn split(events: Vec<Event>) -> (Vec<String>, Vec<String>, Vec<Vec<u8>>) {
    let mut kinds = Vec::with_capacity(events.len());
    let mut subjects = Vec::with_capacity(events.len());
    let mut payloads = Vec::with_capacity(events.len());
    for e in events {
        kinds.push(e.kind);
        subjects.push(e.subject);
        payloads.push(e.payload);
    }
    (kinds, subjects, payloads)
}

/// SQLite has one writer (the transaction began IMMEDIATE), so the chain is extended in Rust.
async fn lite_append(t: &mut Transaction<'static, Sqlite>, events: Vec<Event>) -> Result<()> {
    let row = sqlx::query(HEAD).fetch_one(&mut **t).await?;
    let mut seq: i64 = row.try_get("head_seq")?;
    let mut prev: Vec<u8> = row.try_get("head_hash")?;
    for e in events {
        seq += 1;
        let hash = canon::link(&prev, seq as u64, &e.payload);
        sqlx::query(
            "INSERT INTO tg_audit (seq, kind, subject, payload, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(seq)
        .bind(e.kind)
        .bind(e.subject)
        .bind(e.payload)
        .bind(prev)
        .bind(hash.to_vec())
        .execute(&mut **t)
        .await?;
        prev = hash.to_vec();
    }
    sqlx::query("UPDATE tg_audit_head SET seq = $1, hash = $2 WHERE id = 1")
        .bind(seq)
        .bind(prev)
        .execute(&mut **t)
        .await?;
    Ok(())
}

/// Lets `Error` mention an unexpected row count.
pub(crate) fn expect_row(row: Option<Row>, what: &str) -> Result<Row> {
    row.ok_or_else(|| Error::Database(format!("{what} returned no row")))
}
