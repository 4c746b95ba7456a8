-- Schema 1 on Postgres: decisions, approvals, outcomes and the hash-chained audit trail
-- (appended by tg_append under the single head row's lock).
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
