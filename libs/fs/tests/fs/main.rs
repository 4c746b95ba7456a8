//! The workspace and its operations against a real filesystem: attacks, operations, races.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod common;

mod attacks;
mod bind;
mod delete;
mod masks;
mod ops;
mod race;
mod redaction;
