-- Schema 3: every allowed decision carries a lease, and every row names the executor by its
-- authenticated credential, with what the executor reported about itself kept beside it.
-- Both backends.
ALTER TABLE tg_decisions ADD COLUMN executor TEXT;
ALTER TABLE tg_decisions ADD COLUMN executor_reported TEXT;
ALTER TABLE tg_decisions ADD COLUMN lease_expires_at BIGINT;
ALTER TABLE tg_outcomes ADD COLUMN executor_principal TEXT;
