//! The durable approval ledger on Postgres and SQLite.
