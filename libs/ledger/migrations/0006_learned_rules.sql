-- Schema 6: rules learned from approvals ("always allow"). A rule is written in the same
-- transaction as the approval it comes from, revoked (never deleted), and audited like every
-- other row. The revision row counts changes, so every replica can tell its compiled set is
-- stale. Both backends.
CREATE TABLE tg_learned_rules (
    id TEXT PRIMARY KEY,
    pattern TEXT NOT NULL,
    display TEXT NOT NULL,
    scope TEXT NOT NULL,
    scope_value TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT,
    revoked_by TEXT,
    source_approval TEXT NOT NULL
);
CREATE INDEX tg_learned_rules_created ON tg_learned_rules (created_at, id);
CREATE TABLE tg_learned_revision (
    id BIGINT PRIMARY KEY,
    revision BIGINT NOT NULL
);
INSERT INTO tg_learned_revision (id, revision) VALUES (1, 0);
