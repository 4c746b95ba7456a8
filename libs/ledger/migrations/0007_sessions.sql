-- Schema 7: agent sessions. Which executor holds a session's sandbox (its claim, bound to the
-- executor's reported id and its authenticated credential), the working directory and
-- variables the session carries, and how its sandbox last ended. Sessions are not part of the
-- audit chain: a session row is routing and convenience state, every call a session makes is
-- still its own audited decision. The lease index serves the abandon of an executor's
-- in-flight decisions (those whose lease still runs). Both backends.
CREATE TABLE tg_sessions (
    session_id TEXT PRIMARY KEY,
    principal TEXT NOT NULL,
    executor_id TEXT NOT NULL,
    executor_reported TEXT,
    executor_principal TEXT NOT NULL,
    cwd TEXT NOT NULL,
    env TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    claim_expires_at BIGINT NOT NULL,
    ended_at BIGINT,
    end_reason TEXT
);
CREATE INDEX tg_sessions_executor ON tg_sessions (executor_id);
CREATE INDEX tg_sessions_updated ON tg_sessions (updated_at, session_id);
CREATE INDEX tg_decisions_lease ON tg_decisions (lease_expires_at);
