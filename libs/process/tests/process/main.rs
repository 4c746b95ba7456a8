//! Runs of real child processes: the environment and OS corpus, resource limits, supervision.
//!
//! One test binary for the crate (each links the world; fewer binaries build faster): the
//! modules below were separate binaries before.

mod common;

mod corpus_env_os;
mod corpus_res;
mod egress;
mod limits;
mod runs;
mod sessions;
mod stop_state;
mod template;
