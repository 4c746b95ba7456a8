-- Schema 5: a call refused before it started (no run slot, sandbox unavailable, a limit) is
-- released, not executed: its decision records when and why, its call_id may run on a retry,
-- and a once-approval it had consumed is usable again. Both backends.
ALTER TABLE tg_decisions ADD COLUMN released_at BIGINT;
ALTER TABLE tg_decisions ADD COLUMN release_reason TEXT;
