//! The policy service end to end: real gRPC on port 0, real Postgres and SQLite ledgers, real restarts.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

#[macro_use]
mod support;

mod approvals;
mod health;
mod learned;
mod memory;
mod metrics;
mod network;
mod policy;
mod restart;
mod sessions;
