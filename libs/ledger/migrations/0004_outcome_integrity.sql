-- Schema 4: a run's outcome records what the executor's after-run audit found and undid in the
-- workspace's protected set. Both backends.
ALTER TABLE tg_outcomes ADD COLUMN integrity TEXT;
