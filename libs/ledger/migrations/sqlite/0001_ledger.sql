-- Schema 1 on SQLite: the same tables; the audit chain is extended in Rust under the
-- IMMEDIATE transaction's write lock, and triggers keep the events append-only.
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
