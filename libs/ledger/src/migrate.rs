//! Embedded, versioned schema migrations, applied under a lock so replicas may race.

use crate::db::{Pool, args};
use crate::error::{Error, Result};

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Arbitrary but fixed: every toolgate replica serialises its migrations on this key.
const PG_LOCK_KEY: i64 = 0x7467_6c65_6467_6572; // "tgledger"

/// Schema 1 on Postgres.
const PG_V1: &str = include_str!("../migrations/postgres/0001_ledger.sql");

/// Schema 1 on SQLite.
const LITE_V1: &str = include_str!("../migrations/sqlite/0001_ledger.sql");

/// Schema 2: an outcome records the isolation its run was given.
const V2_OUTCOME_ISOLATION: &str = include_str!("../migrations/0002_outcome_isolation.sql");

/// Schema 3: every allowed decision carries a lease, and every row names the executor by its
/// authenticated credential, with what the executor reported about itself kept beside it.
const V3_LEASES_AND_EXECUTORS: &str = include_str!("../migrations/0003_leases_and_executors.sql");

/// Schema 4: a run's outcome records what the after-run audit of the protected set found.
const V4_OUTCOME_INTEGRITY: &str = include_str!("../migrations/0004_outcome_integrity.sql");

/// Schema 5: a call refused before it started is released, and its decision says why.
const V5_RELEASED_CALLS: &str = include_str!("../migrations/0005_released_calls.sql");

/// Schema 6: rules learned from approvals, and the revision of their set.
const V6_LEARNED_RULES: &str = include_str!("../migrations/0006_learned_rules.sql");

/// Schema 7: agent sessions (claims, state, ends) and the index the abandon of an executor's
/// in-flight decisions reads.
const V7_SESSIONS: &str = include_str!("../migrations/0007_sessions.sql");

const PG: &[Migration] = &[
    Migration {
        version: 1,
        name: "ledger",
        sql: PG_V1,
    },
    Migration {
        version: 2,
        name: "outcome isolation",
        sql: V2_OUTCOME_ISOLATION,
    },
    Migration {
        version: 3,
        name: "decision leases and executor credentials",
        sql: V3_LEASES_AND_EXECUTORS,
    },
    Migration {
        version: 4,
        name: "outcome integrity audit",
        sql: V4_OUTCOME_INTEGRITY,
    },
    Migration {
        version: 5,
        name: "released calls",
        sql: V5_RELEASED_CALLS,
    },
    Migration {
        version: 6,
        name: "learned rules",
        sql: V6_LEARNED_RULES,
    },
    Migration {
        version: 7,
        name: "sessions",
        sql: V7_SESSIONS,
    },
];

const LITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "ledger",
        sql: LITE_V1,
    },
    Migration {
        version: 2,
        name: "outcome isolation",
        sql: V2_OUTCOME_ISOLATION,
    },
    Migration {
        version: 3,
        name: "decision leases and executor credentials",
        sql: V3_LEASES_AND_EXECUTORS,
    },
    Migration {
        version: 4,
        name: "outcome integrity audit",
        sql: V4_OUTCOME_INTEGRITY,
    },
    Migration {
        version: 5,
        name: "released calls",
        sql: V5_RELEASED_CALLS,
    },
    Migration {
        version: 6,
        name: "learned rules",
        sql: V6_LEARNED_RULES,
    },
    Migration {
        version: 7,
        name: "sessions",
        sql: V7_SESSIONS,
    },
];

/// The newest schema version this binary knows.
pub const SCHEMA_VERSION: i64 = 7;

const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS tg_schema (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// The recorded schema version (0 before any migration), read by its name `version`.
const CURRENT_VERSION: &str = "SELECT coalesce(max(version), 0) AS version FROM tg_schema";

/// Applies missing migrations; refuses a database newer than this binary. On SQLite a busy
/// database is simply tried again: the migration is idempotent.
pub(crate) async fn run(pool: &Pool) -> Result<i64> {
    match pool {
        Pool::Pg(_) => apply(pool, PG).await,
        Pool::Lite(_) => while_busy(|| apply(pool, LITE)).await,
    }
}

/// The one migration runner, for both backends: in one transaction that holds the schema's
/// lock (Postgres: a transaction-scoped advisory lock, released by commit or by the
/// connection dying; SQLite: the IMMEDIATE transaction's write lock), apply every migration
/// newer than the recorded version and record it.
async fn apply(pool: &Pool, migrations: &[Migration]) -> Result<i64> {
    let mut tx = pool.begin().await?;
    if matches!(pool, Pool::Pg(_)) {
        tx.exec("SELECT pg_advisory_xact_lock($1)", args![PG_LOCK_KEY])
            .await?;
    }
    tx.exec(SCHEMA_TABLE, Vec::new()).await?;
    let current = match tx.fetch_opt(CURRENT_VERSION, Vec::new()).await? {
        Some(row) => row.get::<i64>("version")?,
        None => 0,
    };
    check_not_newer(current)?;
    for m in migrations.iter().filter(|m| m.version > current) {
        tx.exec_script(m.sql).await?;
        tx.exec(
            "INSERT INTO tg_schema (version, name, applied_at) VALUES ($1, $2, $3)",
            args![
                m.version,
                m.name,
                crate::model::Timestamp::now().as_micros()
            ],
        )
        .await?;
    }
    tx.commit(Vec::new()).await?;
    Ok(SCHEMA_VERSION)
}

/// Runs `attempt` again while SQLite answers BUSY or LOCKED ([`Error::Unavailable`]), for
/// up to ten seconds. Two processes opening a new database at once can see that outside the
/// busy handler (switching it to WAL, taking the write lock).
pub(crate) async fn while_busy<T, F, Fut>(mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut backoff = toolgate_core::backoff::Backoff::new(
        std::time::Duration::from_millis(10),
        std::time::Duration::from_millis(500),
    );
    loop {
        match attempt().await {
            Err(Error::Unavailable(m)) if std::time::Instant::now() < deadline => {
                tracing::debug!(error = %m, "SQLite busy; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            r => return r,
        }
    }
}

/// Checks the schema without changing it (for services started with migrations off).
pub(crate) async fn check(pool: &Pool) -> Result<()> {
    let current = match pool.fetch_opt(CURRENT_VERSION, vec![]).await {
        Ok(Some(row)) => row.get::<i64>("version")?,
        Ok(None) => 0,
        // No schema table yet reads as version 0.
        Err(Error::Database(_)) => 0,
        Err(e) => return Err(e),
    };
    check_not_newer(current)?;
    if current < SCHEMA_VERSION {
        return Err(Error::Database(format!(
            "ledger schema version {current} is older than {SCHEMA_VERSION}; run `toolgate ledger migrate`"
        )));
    }
    Ok(())
}

fn check_not_newer(found: i64) -> Result<()> {
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}
