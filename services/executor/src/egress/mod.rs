//! The egress gate: a networked run's only way out of its network namespace.
//!
//! The kernel side (`toolgate_process`) redirects the run's DNS queries to [`dns`]'s stub and
//! its TCP connections to the gate's listener; this module serves both for the run. A name
//! gets a placeholder address; a connection to it is a `net.connect` call the policy decides
//! (once per run and destination, held open while a human decides), then the gate resolves
//! the name itself, refuses the executor's own neighbourhood ([`addr`]), checks the TLS
//! server name or HTTP `Host` ([`sniff`]) and copies the bytes ([`relay`]), counting them.
//! What each destination saw is the run's report ([`Destination`]), in `Exited.network` and
//! the recorded outcome.

pub(crate) mod addr;
mod conn;
pub(crate) mod dns;
mod relay;
mod resolve;
mod run;
mod serve;
pub(crate) mod sniff;

use std::net::SocketAddr;
use std::time::Duration;

pub(crate) use run::{RunGate, RunInfo};

use serde::{Deserialize, Serialize};

/// The egress gate (`[egress]`): how a networked run's connections are resolved, held and
/// bounded.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressSection {
    /// The upstream DNS servers (`ip:port`) the gate resolves allowed names through; unset:
    /// the `nameserver` lines of /etc/resolv.conf. None at all: every connection is refused
    /// (`resolve_failed`).
    pub resolvers: Option<Vec<String>>,
    /// How long a connection waits for a human to decide its approval, in milliseconds
    /// (never past the approval's expiry nor `max_approval_wait_ms`).
    pub hold_ms: u64,
    /// Longest wait for resolving a name and connecting to it, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Address ranges (`a.b.c.d/n`, `x::y/n`) a connection may reach after resolution
    /// although they are private, loopback or link-local (an internal registry).
    pub allow_ranges: Vec<String>,
    /// Connections one run may have open through the gate at once; more are refused.
    pub max_connections_per_run: u32,
    /// Distinct destinations (host and port) one run may reach; connections to more are
    /// refused.
    pub max_destinations_per_run: u32,
}

impl Default for EgressSection {
    fn default() -> Self {
        EgressSection {
            resolvers: None,
            hold_ms: 120_000,
            connect_timeout_ms: 10_000,
            allow_ranges: Vec::new(),
            max_connections_per_run: 256,
            max_destinations_per_run: 64,
        }
    }
}

/// One destination a run's gate saw, as the run's report has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destination {
    /// The name the run resolved through the gate (lowercase), or the IP literal it used.
    pub host: String,
    /// The port; 0 for a DNS refusal.
    pub port: u16,
    /// The address the gate connected to (`ip:port`), empty when none.
    pub address: String,
    /// `auto`, `ask` or `deny`; empty when the policy never decided.
    pub tier: &'static str,
    /// The deciding rule.
    pub rule_id: String,
    /// The approval behind the decision, when a human decided.
    pub approval_id: String,
    /// Connections opened (allowed and refused).
    pub connections: u32,
    /// Connections refused.
    pub refused: u32,
    /// Bytes the run sent.
    pub bytes_sent: u64,
    /// Bytes the destination sent back.
    pub bytes_received: u64,
    /// Why the last refused connection was refused; empty when none was.
    pub refusal: &'static str,
    /// The refusal's message, naming the rule or approval.
    pub message: String,
}

/// `[egress]`, validated.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Upstream DNS servers.
    pub resolvers: Vec<SocketAddr>,
    /// How long a connection is held for a human.
    pub hold: Duration,
    /// Resolution and connect deadline.
    pub connect_timeout: Duration,
    /// Ranges reachable although private.
    pub allow: Vec<addr::Cidr>,
    /// Connections open at once per run.
    pub max_connections: u32,
    /// Destinations per run.
    pub max_destinations: usize,
}

impl Settings {
    /// Checks `[egress]`; the error names the field.
    pub(crate) fn from_config(c: &EgressSection) -> Result<Settings, String> {
        let resolvers = match &c.resolvers {
            Some(list) => list
                .iter()
                .map(|r| {
                    r.parse::<SocketAddr>()
                        .map_err(|_| format!("egress.resolvers: `{r}` is not an ip:port address"))
                })
                .collect::<Result<_, _>>()?,
            None => resolve::nameservers(
                &std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
            ),
        };
        let allow = c
            .allow_ranges
            .iter()
            .map(|r| addr::Cidr::parse(r).map_err(|e| format!("egress.allow_ranges: {e}")))
            .collect::<Result<_, _>>()?;
        for (name, v) in [
            ("egress.hold_ms", c.hold_ms),
            ("egress.connect_timeout_ms", c.connect_timeout_ms),
            (
                "egress.max_connections_per_run",
                u64::from(c.max_connections_per_run),
            ),
            (
                "egress.max_destinations_per_run",
                u64::from(c.max_destinations_per_run),
            ),
        ] {
            if v == 0 {
                return Err(format!("{name}: must be positive"));
            }
        }
        Ok(Settings {
            resolvers,
            hold: Duration::from_millis(c.hold_ms),
            connect_timeout: Duration::from_millis(c.connect_timeout_ms),
            allow,
            max_connections: c.max_connections_per_run,
            max_destinations: c.max_destinations_per_run as usize,
        })
    }
}

/// Host globs (`*.example.com`, `*`): `*` stands for any run of characters, dots included;
/// matching ignores case.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostGlobs(Vec<String>);

impl HostGlobs {
    /// The globs of `Allowed.denied_hosts`.
    pub(crate) fn new(globs: &[String]) -> Self {
        HostGlobs(globs.iter().map(|g| g.to_ascii_lowercase()).collect())
    }

    /// Whether `host` (normalized) matches one of them.
    pub(crate) fn matches(&self, host: &str) -> bool {
        self.0.iter().any(|g| glob(g.as_bytes(), host.as_bytes()))
    }
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    // Iterative with one backtrack point: linear enough for host names.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|b| *b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_globs_match_whole_names_ignoring_case() {
        let g = HostGlobs::new(&["*.Evil.example".into(), "exact.example".into()]);
        assert!(g.matches("a.evil.example"));
        assert!(g.matches("a.b.evil.example"));
        assert!(!g.matches("evil.example"));
        assert!(!g.matches("notevil.example"));
        assert!(g.matches("exact.example"));
        assert!(!g.matches("exact.example.org"));
        assert!(HostGlobs::new(&["*".into()]).matches("anything.example"));
        assert!(!HostGlobs::default().matches("a.example"));
    }

    #[test]
    fn settings_name_the_field_they_reject() {
        let bad = |f: fn(&mut EgressSection)| {
            let mut c = EgressSection::default();
            f(&mut c);
            Settings::from_config(&c).unwrap_err()
        };
        assert!(
            bad(|c| c.resolvers = Some(vec!["8.8.8.8".into()])).starts_with("egress.resolvers")
        );
        assert!(bad(|c| c.allow_ranges = vec!["10/8".into()]).starts_with("egress.allow_ranges"));
        assert!(bad(|c| c.hold_ms = 0).starts_with("egress.hold_ms"));
        let ok = Settings::from_config(&EgressSection {
            resolvers: Some(vec!["127.0.0.1:5353".into()]),
            allow_ranges: vec!["127.77.0.0/16".into()],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ok.resolvers, vec!["127.0.0.1:5353".parse().unwrap()]);
        assert_eq!(ok.max_destinations, 64);
    }
}
