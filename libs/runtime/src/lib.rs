//! Plumbing every toolgate service shares: layered configuration, logging, shutdown
//! signals and the standard gRPC services (health, reflection).

pub mod config;
pub mod grpc;
pub mod logging;
pub mod shutdown;
