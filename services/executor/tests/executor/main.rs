//! The executor binary end to end: real policy service, real children, real filesystem, real OTLP receiver.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod support;
mod transport;

mod admission;
mod background;
mod disk;
mod egress;
mod enforcement;
mod filesystem;
mod harm;
mod integrity;
mod metrics;
mod parked;
mod process;
mod refusals;
mod session_table;
mod sessions;
mod trace;
