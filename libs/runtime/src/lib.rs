//! Plumbing every toolgate service shares: layered configuration, logging and traces, Prometheus
//! metrics, shutdown signals, bearer-token authentication and the standard gRPC services (health, reflection).

pub mod auth;
pub mod config;
pub mod edge;
pub mod grpc;
pub mod logging;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
pub mod transport;
