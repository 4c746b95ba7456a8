//! The ledger on Postgres and SQLite: the conformance suite and the crash tests.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod common;

mod conformance;
mod crash;
mod fixture;
mod learned;
