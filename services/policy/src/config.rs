//! Policy service configuration: defaults → TOML file → `TOOLGATE_` environment → flags.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use toolgate_runtime::logging;

/// The whole policy service configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port (the bound address is printed).
    pub listen: String,
    /// Log settings.
    pub log: LogConfig,
    /// The policy document; unset uses the shipped default policy.
    pub policy_file: Option<PathBuf>,
    /// How often the policy file is checked for changes, in milliseconds (SIGHUP reloads at once).
    pub reload_interval_ms: u64,
    /// How long in-flight calls may take to finish after a shutdown signal, in milliseconds.
    pub shutdown_grace_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7071".into(),
            log: LogConfig::default(),
            policy_file: None,
            reload_interval_ms: 2_000,
            shutdown_grace_ms: 10_000,
        }
    }
}

/// Log settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: logging::Format,
    /// A `RUST_LOG`-style filter.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: logging::Format::Text,
            filter: "info".into(),
        }
    }
}

impl Config {
    /// Checks cross-field rules once at startup; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!(
                "listen: `{}` is not an ip:port address",
                self.listen
            ));
        }
        if self.reload_interval_ms == 0 {
            return Err("reload_interval_ms: must be positive".into());
        }
        Ok(())
    }
}
