//! Embedded, versioned schema migrations, applied under a lock so replicas may race.

use sqlx::{AssertSqlSafe, Row as _};

use crate::db::Pool;
use crate::error::{Error, Result};

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Arbitrary but fixed: every toolgate replica serialises its migrations on this key.
const PG_LOCK_KEY: i64 = 0x7467_6c65_6467_6572; // "tgledger"

const PG_V1: &str = r#"
CREATE TABLE tg_decisions (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    tool TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    request_json TEXT NOT NULL,
    tier TEXT NOT NULL,
    rule_ids TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    trace_id TEXT,
    approval_id TEXT,
    created_at BIGINT NOT NULL,
    allowed_at BIGINT
);
CREATE TABLE tg_approvals (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    tool TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    request_json TEXT NOT NULL,
    explanation_json TEXT NOT NULL,
    state TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    decided_by TEXT,
    decided_at BIGINT,
    reason TEXT,
    message TEXT,
    consumed_by_call TEXT,
    consumed_by_executor TEXT,
    consumed_at BIGINT,
    lease_token BIGINT,
    lease_expires_at BIGINT,
    closed_at BIGINT,
    trace_id TEXT
);
CREATE UNIQUE INDEX tg_approvals_one_pending
    ON tg_approvals (session_id, principal, request_digest, policy_version) WHERE state = 'pending';
CREATE INDEX tg_approvals_binding ON tg_approvals (session_id, request_digest, state);
CREATE INDEX tg_approvals_page ON tg_approvals (created_at, id);
CREATE INDEX tg_approvals_lease ON tg_approvals (lease_expires_at) WHERE state = 'consumed';
CREATE TABLE tg_outcomes (
    decision_id TEXT PRIMARY KEY,
    approval_id TEXT,
    executor_pod TEXT NOT NULL,
    executor_node TEXT NOT NULL,
    executor_namespace TEXT NOT NULL,
    executor_image TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    exit_kind TEXT NOT NULL,
    exit_value BIGINT NOT NULL,
    stdout_bytes BIGINT NOT NULL,
    stderr_bytes BIGINT NOT NULL,
    stdout_truncated BIGINT NOT NULL,
    stderr_truncated BIGINT NOT NULL,
    error TEXT,
    recorded_at BIGINT NOT NULL
);
CREATE TABLE tg_audit (
    seq BIGINT PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    payload BYTEA NOT NULL,
    prev_hash BYTEA NOT NULL,
    hash BYTEA NOT NULL
);
CREATE TABLE tg_audit_head (
    id INT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL,
    prev BYTEA NOT NULL,
    hash BYTEA NOT NULL
);
INSERT INTO tg_audit_head VALUES (1, 0, decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'));

CREATE FUNCTION tg_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'toolgate audit events are append-only';
END
$$;
CREATE TRIGGER tg_audit_append_only BEFORE UPDATE OR DELETE ON tg_audit
    FOR EACH ROW EXECUTE FUNCTION tg_audit_append_only();

-- Extends the hash chain by one link per payload. SELECT ... FOR UPDATE takes the
-- single head row's lock until commit; under READ COMMITTED a writer that waited for
-- it reads the committed head, so concurrent transactions (on any replica) chain
-- linearly. The head is written once per call, however many events it appends.
CREATE FUNCTION tg_append(p_kinds TEXT[], p_subjects TEXT[], p_payloads BYTEA[]) RETURNS BIGINT
LANGUAGE plpgsql AS $$
DECLARE
    n INT := coalesce(array_length(p_payloads, 1), 0);
    i INT;
    v_seq BIGINT;
    v_prev BYTEA;
    v_hash BYTEA;
    seqs BIGINT[] := '{}';
    prevs BYTEA[] := '{}';
    hashes BYTEA[] := '{}';
BEGIN
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    SELECT seq, hash INTO v_seq, v_hash FROM tg_audit_head WHERE id = 1 FOR UPDATE;
    FOR i IN 1 .. n LOOP
        v_prev := v_hash;
        v_seq := v_seq + 1;
        v_hash := sha256(v_prev || int8send(v_seq) || p_payloads[i]);
        seqs := seqs || v_seq;
        prevs := prevs || v_prev;
        hashes := hashes || v_hash;
    END LOOP;
    INSERT INTO tg_audit (seq, kind, subject, payload, prev_hash, hash)
    SELECT * FROM unnest(seqs, p_kinds, p_subjects, p_payloads, prevs, hashes);
    UPDATE tg_audit_head SET seq = v_seq, prev = v_prev, hash = v_hash WHERE id = 1;
    RETURN v_seq;
END
$$;
"#;

const LITE_V1: &str = r#"
CREATE TABLE tg_decisions (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL UNIQUE,
    session_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    tool TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    request_json TEXT NOT NULL,
    tier TEXT NOT NULL,
    rule_ids TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    trace_id TEXT,
    approval_id TEXT,
    created_at INTEGER NOT NULL,
    allowed_at INTEGER
);
CREATE TABLE tg_approvals (
    id TEXT PRIMARY KEY,
    call_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    tool TEXT NOT NULL,
    request_digest TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    request_json TEXT NOT NULL,
    explanation_json TEXT NOT NULL,
    state TEXT NOT NULL,
    scope TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    decided_by TEXT,
    decided_at INTEGER,
    reason TEXT,
    message TEXT,
    consumed_by_call TEXT,
    consumed_by_executor TEXT,
    consumed_at INTEGER,
    lease_token INTEGER,
    lease_expires_at INTEGER,
    closed_at INTEGER,
    trace_id TEXT
);
CREATE UNIQUE INDEX tg_approvals_one_pending
    ON tg_approvals (session_id, principal, request_digest, policy_version) WHERE state = 'pending';
CREATE INDEX tg_approvals_binding ON tg_approvals (session_id, request_digest, state);
CREATE INDEX tg_approvals_page ON tg_approvals (created_at, id);
CREATE INDEX tg_approvals_lease ON tg_approvals (lease_expires_at) WHERE state = 'consumed';
CREATE TABLE tg_outcomes (
    decision_id TEXT PRIMARY KEY,
    approval_id TEXT,
    executor_pod TEXT NOT NULL,
    executor_node TEXT NOT NULL,
    executor_namespace TEXT NOT NULL,
    executor_image TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    exit_kind TEXT NOT NULL,
    exit_value INTEGER NOT NULL,
    stdout_bytes INTEGER NOT NULL,
    stderr_bytes INTEGER NOT NULL,
    stdout_truncated INTEGER NOT NULL,
    stderr_truncated INTEGER NOT NULL,
    error TEXT,
    recorded_at INTEGER NOT NULL
);
CREATE TABLE tg_audit (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    payload BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE tg_audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL,
    hash BLOB NOT NULL
);
INSERT INTO tg_audit_head VALUES (1, 0, zeroblob(32));
CREATE TRIGGER tg_audit_no_update BEFORE UPDATE ON tg_audit
BEGIN
    SELECT RAISE(ABORT, 'toolgate audit events are append-only');
END;
CREATE TRIGGER tg_audit_no_delete BEFORE DELETE ON tg_audit
BEGIN
    SELECT RAISE(ABORT, 'toolgate audit events are append-only');
END;
"#;

/// Schema 2: an outcome records the isolation its run was given.
const V2_OUTCOME_ISOLATION: &str = "ALTER TABLE tg_outcomes ADD COLUMN isolation TEXT";

/// Schema 3: every allowed decision carries a lease, and every row names the executor by its
/// authenticated credential, with what the executor reported about itself kept beside it.
const V3_LEASES_AND_EXECUTORS: &str = "
ALTER TABLE tg_decisions ADD COLUMN executor TEXT;
ALTER TABLE tg_decisions ADD COLUMN executor_reported TEXT;
ALTER TABLE tg_decisions ADD COLUMN lease_expires_at BIGINT;
ALTER TABLE tg_outcomes ADD COLUMN executor_principal TEXT;
";

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
];

/// The newest schema version this binary knows.
pub const SCHEMA_VERSION: i64 = 3;

const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS tg_schema (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)";

/// Applies missing migrations; refuses a database newer than this binary.
pub(crate) async fn run(pool: &Pool) -> Result<i64> {
    match pool {
        Pool::Pg(p) => {
            let mut tx = p.begin().await?;
            // Transaction-scoped: released by commit or by the connection dying.
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_LOCK_KEY)
                .execute(&mut *tx)
                .await?;
            sqlx::query(SCHEMA_TABLE).execute(&mut *tx).await?;
            let current: i64 = sqlx::query("SELECT coalesce(max(version), 0) FROM tg_schema")
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            check_not_newer(current)?;
            for m in PG.iter().filter(|m| m.version > current) {
                sqlx::raw_sql(AssertSqlSafe(m.sql))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO tg_schema (version, name, applied_at) VALUES ($1, $2, $3)",
                )
                .bind(m.version)
                .bind(m.name)
                .bind(crate::model::Timestamp::now().as_micros())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(SCHEMA_VERSION)
        }
        Pool::Lite(p) => {
            // The migration is idempotent: a busy database is simply tried again.
            while_busy(|| run_lite(p)).await
        }
    }
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

async fn run_lite(p: &sqlx::SqlitePool) -> Result<i64> {
    {
        {
            // IMMEDIATE takes the database write lock: the SQLite equivalent of the advisory lock.
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query(SCHEMA_TABLE).execute(&mut *tx).await?;
            let current: i64 = sqlx::query("SELECT coalesce(max(version), 0) FROM tg_schema")
                .fetch_one(&mut *tx)
                .await?
                .try_get(0)?;
            check_not_newer(current)?;
            for m in LITE.iter().filter(|m| m.version > current) {
                sqlx::raw_sql(AssertSqlSafe(m.sql))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO tg_schema (version, name, applied_at) VALUES ($1, $2, $3)",
                )
                .bind(m.version)
                .bind(m.name)
                .bind(crate::model::Timestamp::now().as_micros())
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(SCHEMA_VERSION)
        }
    }
}

/// Checks the schema without changing it (for services started with migrations off).
pub(crate) async fn check(pool: &Pool) -> Result<()> {
    let current = match pool
        .fetch_opt("SELECT coalesce(max(version), 0) FROM tg_schema", vec![])
        .await
    {
        Ok(Some(row)) => row.get::<i64>(0)?,
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
