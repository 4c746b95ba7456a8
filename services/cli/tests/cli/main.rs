//! `toolgate` as people use it: the real binary against `toolgate up`, Postgres and SQLite.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod support;

mod approvals;
mod check;
mod durability;
mod egress;
mod ledger;
mod run;
mod runs;
mod up;
