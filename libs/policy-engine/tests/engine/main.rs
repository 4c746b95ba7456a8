//! The policy engine: the attack corpus, sandbox-aware decisions and the corpora figures, argument tables checked against real programs, differential and property tests, reload.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod argv_opens;
mod corpus;
mod delete;
mod differential;
mod fuzz;
mod network;
mod properties;
mod reload;
mod sandbox;
