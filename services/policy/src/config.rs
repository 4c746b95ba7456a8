//! Policy service configuration: defaults → TOML file → `TOOLGATE_` environment → flags.
//!
//! ```toml
//! listen = "127.0.0.1:7071"
//! policy_file = "policy.toml"      # unset: the shipped default policy
//! max_wait_ms = 900000             # WaitForApproval timeouts are clamped to this
//!
//! [ledger]
//! url = "postgres://toolgate@db/toolgate"   # or "sqlite:/var/lib/toolgate/ledger.db"; required
//! pending_ttl_ms = 86400000        # how long a pending approval waits for a human
//! approval_ttl_ms = 3600000        # how long an approval stays usable once approved
//! lease_ms = 900000                # how long a consuming call has to report its outcome
//! max_connections = 16
//! retry_ms = 5000                  # how long an operation retries while the database is away
//! sweep_interval_ms = 1000         # expire overdue approvals, turn lapsed leases `unknown`
//! health_interval_ms = 1000        # database probe behind the gRPC health status
//! redact_patterns = ["(?i)mytoken-[a-z0-9]+"]   # added to the built-in secret shapes
//! secrets = ["an-exact-secret"]    # exact values scrubbed before anything is stored
//!
//! [[auth.tokens]]
//! principal = "exec-1"
//! role = "executor"                # agent | executor | approver | admin
//! token_file = "/run/secrets/exec-1"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate_ledger::{LedgerConfig, RedactionConfig};
use toolgate_runtime::auth::AuthConfig;
use toolgate_runtime::transport::TransportConfig;

/// The whole policy service configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// gRPC listen address; port 0 picks a free port (the bound address is printed).
    pub listen: String,
    /// Where `GET /metrics` (Prometheus text format) is served, `ip:port`; port 0 picks a
    /// free port (printed as `metrics` on the listening line). Unset: no metrics endpoint.
    pub metrics_listen: Option<String>,
    /// Log settings.
    pub log: LogConfig,
    /// The policy document; unset uses the shipped default policy.
    pub policy_file: Option<PathBuf>,
    /// How often the policy file is checked for changes, in milliseconds (SIGHUP reloads at once).
    pub reload_interval_ms: u64,
    /// How long in-flight calls may take to finish after a shutdown signal, in milliseconds.
    pub shutdown_grace_ms: u64,
    /// The longest `WaitForApproval` the service honours, in milliseconds; longer requests
    /// are clamped to it.
    pub max_wait_ms: u64,
    /// The approval ledger.
    pub ledger: LedgerSection,
    /// Bearer-token credentials and their roles.
    pub auth: AuthConfig,
    /// TLS, mutual TLS and the limits on connections and streams.
    pub transport: TransportConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:7071".into(),
            metrics_listen: None,
            log: LogConfig::default(),
            policy_file: None,
            reload_interval_ms: 2_000,
            shutdown_grace_ms: 10_000,
            max_wait_ms: 15 * 60 * 1000,
            ledger: LedgerSection::default(),
            auth: AuthConfig::default(),
            transport: TransportConfig::default(),
        }
    }
}

/// Log settings (`[log]`), shared by both services.
pub use toolgate_runtime::logging::LogConfig;

/// The `[ledger]` section: where decisions and approvals are stored and how long they last.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerSection {
    /// `postgres://…` (production, shared by replicas) or `sqlite:path` (single node). Required.
    pub url: Option<String>,
    /// How long a pending approval waits for a human, in milliseconds.
    pub pending_ttl_ms: u64,
    /// How long an approved approval stays usable, in milliseconds (an approver may shorten
    /// or lengthen it per decision).
    pub approval_ttl_ms: u64,
    /// How long an execution that consumed an approval has to report its outcome, in
    /// milliseconds; after it the execution is recorded as `unknown`.
    pub lease_ms: u64,
    /// Database connection pool size.
    pub max_connections: u32,
    /// How long one operation keeps retrying while the database is unreachable, in milliseconds.
    pub retry_ms: u64,
    /// How often overdue approvals are expired and lapsed leases closed, in milliseconds.
    pub sweep_interval_ms: u64,
    /// How often the database is probed for the health endpoint, in milliseconds.
    pub health_interval_ms: u64,
    /// Extra regular expressions whose matches are scrubbed before anything is stored (the
    /// built-in credential shapes always apply).
    pub redact_patterns: Vec<String>,
    /// Exact secret values scrubbed before anything is stored.
    pub secrets: Vec<String>,
}

impl Default for LedgerSection {
    fn default() -> Self {
        let d = LedgerConfig::new("");
        LedgerSection {
            url: None,
            pending_ttl_ms: millis(d.pending_ttl),
            approval_ttl_ms: millis(d.approval_ttl),
            lease_ms: millis(d.lease),
            max_connections: d.max_connections,
            retry_ms: millis(d.retry_budget),
            sweep_interval_ms: 1_000,
            health_interval_ms: 1_000,
            redact_patterns: Vec::new(),
            secrets: Vec::new(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LedgerSection {
    /// The ledger's own configuration; `None` when no url is configured.
    pub fn ledger_config(&self) -> Option<LedgerConfig> {
        let url = self.url.as_deref().filter(|u| !u.trim().is_empty())?;
        let mut c = LedgerConfig::new(url);
        let mut redaction = RedactionConfig::default();
        redaction
            .patterns
            .extend(self.redact_patterns.iter().cloned());
        redaction.secrets.extend(self.secrets.iter().cloned());
        c.redaction = redaction;
        c.pending_ttl = Duration::from_millis(self.pending_ttl_ms);
        c.approval_ttl = Duration::from_millis(self.approval_ttl_ms);
        c.lease = Duration::from_millis(self.lease_ms);
        c.max_connections = self.max_connections;
        c.retry_budget = Duration::from_millis(self.retry_ms);
        Some(c)
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
        if let Some(m) = &self.metrics_listen {
            let addr = m
                .parse::<std::net::SocketAddr>()
                .map_err(|_| format!("metrics_listen: `{m}` is not an ip:port address"))?;
            if addr.port() != 0 && self.listen.parse::<std::net::SocketAddr>().ok() == Some(addr) {
                return Err(format!(
                    "metrics_listen: `{m}` is the gRPC listen address; pick another port"
                ));
            }
        }
        if self.reload_interval_ms == 0 {
            return Err("reload_interval_ms: must be positive".into());
        }
        let l = &self.ledger;
        match l.url.as_deref().map(str::trim) {
            None | Some("") => {
                return Err("ledger.url: required; set `postgres://…` or `sqlite:path` \
                     (or TOOLGATE_LEDGER__URL)"
                    .into());
            }
            Some(u)
                if !(u.starts_with("postgres://")
                    || u.starts_with("postgresql://")
                    || u.starts_with("sqlite:")) =>
            {
                return Err(format!(
                    "ledger.url: `{}` is neither postgres://… nor sqlite:path",
                    toolgate_ledger::redact_url(u)
                ));
            }
            Some(_) => {}
        }
        for (field, v) in [
            ("ledger.pending_ttl_ms", l.pending_ttl_ms),
            ("ledger.approval_ttl_ms", l.approval_ttl_ms),
            ("ledger.lease_ms", l.lease_ms),
            ("ledger.sweep_interval_ms", l.sweep_interval_ms),
            ("ledger.health_interval_ms", l.health_interval_ms),
        ] {
            if v == 0 {
                return Err(format!("{field}: must be positive"));
            }
        }
        if l.max_connections < 2 {
            return Err("ledger.max_connections: at least 2".into());
        }
        for (i, p) in l.redact_patterns.iter().enumerate() {
            if let Err(e) = regex_check(p) {
                return Err(format!("ledger.redact_patterns[{i}]: {e}"));
            }
        }
        if let Some(i) = l.secrets.iter().position(|s| s.is_empty()) {
            return Err(format!("ledger.secrets[{i}]: must not be empty"));
        }
        if self.auth.tokens.is_empty() && self.auth.tokens_file.is_none() {
            return Err(
                "auth: no credentials configured; add [[auth.tokens]] entries or set auth.tokens_file"
                    .into(),
            );
        }
        Ok(())
    }

    /// The `WaitForApproval` ceiling.
    pub fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }
}

/// Whether a redaction pattern compiles, checked through the ledger's own compiler.
fn regex_check(pattern: &str) -> Result<(), String> {
    let config = RedactionConfig {
        patterns: vec![pattern.to_owned()],
        secrets: Vec::new(),
    };
    toolgate_ledger::Redactor::new(&config)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> Config {
        let mut c = Config::default();
        c.ledger.url = Some("sqlite:/tmp/x.db".into());
        c.auth.tokens_file = Some("/tokens.toml".into());
        c
    }

    #[test]
    fn metrics_listen_is_optional_and_validated() {
        let mut c = valid();
        c.metrics_listen = Some("0.0.0.0:9464".into());
        assert!(c.validate().is_ok());
        c.metrics_listen = Some("localhost".into());
        assert!(c.validate().unwrap_err().starts_with("metrics_listen:"));
        c.listen = "127.0.0.1:7071".into();
        c.metrics_listen = Some("127.0.0.1:7071".into());
        assert!(c.validate().unwrap_err().contains("gRPC listen address"));
    }

    #[test]
    fn errors_name_the_field() {
        assert!(valid().validate().is_ok());
        let mut c = valid();
        c.ledger.url = None;
        assert!(c.validate().unwrap_err().starts_with("ledger.url"));
        let mut c = valid();
        c.ledger.url = Some("mysql://x".into());
        assert!(c.validate().unwrap_err().starts_with("ledger.url"));
        let mut c = valid();
        c.ledger.lease_ms = 0;
        assert!(c.validate().unwrap_err().starts_with("ledger.lease_ms"));
        let mut c = valid();
        c.ledger.redact_patterns = vec!["(".into()];
        assert!(
            c.validate()
                .unwrap_err()
                .starts_with("ledger.redact_patterns[0]")
        );
        let mut c = valid();
        c.auth.tokens_file = None;
        assert!(c.validate().unwrap_err().starts_with("auth"));
    }

    #[test]
    fn ledger_section_maps_onto_the_ledger_config() {
        let mut c = valid();
        c.ledger.lease_ms = 250;
        c.ledger.secrets = vec!["hunter2-exact".into()];
        c.ledger.redact_patterns = vec!["abc[0-9]+".into()];
        let l = c.ledger.ledger_config().unwrap();
        assert_eq!(l.lease, Duration::from_millis(250));
        assert_eq!(l.redaction.secrets, vec!["hunter2-exact".to_owned()]);
        // Configured patterns add to the built-in credential shapes, never replace them.
        assert!(l.redaction.patterns.len() > 1);
        assert!(l.redaction.patterns.contains(&"abc[0-9]+".to_owned()));
    }
}
