-- Schema 2: an outcome records the isolation its run was given. Both backends.
ALTER TABLE tg_outcomes ADD COLUMN isolation TEXT;
