//! One run's gate: its sockets, its placeholder names, its destinations and their
//! decisions, served on the executor's runtime until the run ends.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{OnceCell, mpsc, watch};
use toolgate_contracts::executor::v1::AwaitingApproval;
use toolgate_runtime::auth::Principal;
use toolgate_runtime::metrics::ExecutorMetrics;

use crate::authz::Finished;
use crate::authz::{Authorized, Gate, Ran};
use crate::egress::dns::{self, Placeholders};
use crate::egress::{Destination, HostGlobs, Settings};

/// Names one run may have placeholders for.
const MAX_NAMES: usize = 4096;
/// DNS refusals one run's report keeps.
const MAX_DNS_REFUSALS: usize = 64;
/// How long the end of a run waits for its connections to wind down (their last bytes
/// counted) before they are dropped.
pub(super) const DRAIN: Duration = Duration::from_millis(250);

/// The listening sockets of a run's gated namespace, made by the process runner.
#[derive(Debug)]
pub(crate) struct Sockets {
    /// Where the run's redirected TCP connections arrive (v4, and v6 when available).
    pub tcp: Vec<std::net::TcpListener>,
    /// Where its DNS queries arrive.
    pub dns: Vec<std::net::UdpSocket>,
}

impl From<toolgate_process::GateSockets> for Sockets {
    fn from(g: toolgate_process::GateSockets) -> Self {
        Sockets {
            tcp: std::iter::once(g.tcp4)
                .chain(g.tcp6)
                .map(std::net::TcpListener::from)
                .collect(),
            dns: std::iter::once(g.dns4)
                .chain(g.dns6)
                .map(std::net::UdpSocket::from)
                .collect(),
        }
    }
}

/// Who a run's connections are decided for.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    /// The run's principal.
    pub principal: Principal,
    /// The run's session.
    pub session_id: String,
    /// The run's call id; each destination's call id derives from it.
    pub call_id: String,
    /// The run's command, for the approver.
    pub command: String,
    /// The profile the run runs under.
    pub sandbox_profile: String,
    /// The host globs the policy's answer for the run denies (`Allowed.denied_hosts`).
    pub denied_hosts: Vec<String>,
}

/// A run's gate; cheap to clone.
#[derive(Clone)]
pub(crate) struct RunGate {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub settings: Arc<Settings>,
    pub gate: Gate,
    pub info: RunInfo,
    pub denied: HostGlobs,
    pub metrics: ExecutorMetrics,
    pub state: Mutex<State>,
    /// Connections open now.
    pub open: AtomicU32,
    /// `AwaitingApproval` events for the run's response stream.
    pub events: mpsc::Sender<AwaitingApproval>,
    /// Set when the run ended: every task stops.
    pub stop: watch::Sender<bool>,
    /// Serving loops and connections still reading what the run sent: the report is final
    /// once none is left.
    pub live: watch::Sender<usize>,
    report: OnceLock<Vec<Destination>>,
}

#[derive(Default)]
pub(super) struct State {
    pub names: Option<Placeholders>,
    pub destinations: HashMap<(String, u16), Arc<Dest>>,
    pub dns_refusals: Vec<Destination>,
    /// Connections refused because the run reached too many destinations.
    pub overflow: u32,
}

/// One destination of the run and what crossed the gate to it.
pub(super) struct Dest {
    pub host: String,
    pub port: u16,
    /// An IP literal: refused without asking.
    pub literal: bool,
    pub decision: OnceCell<Decision>,
    pub addresses: OnceCell<Vec<IpAddr>>,
    pub connections: AtomicU32,
    pub refused: AtomicU32,
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub first_seen: SystemTime,
    pub last: Mutex<Last>,
}

/// What the report says of the destination beyond counts.
#[derive(Default)]
pub(super) struct Last {
    pub address: String,
    pub refusal: &'static str,
    pub message: String,
}

/// The policy's lasting answer for one destination.
pub(super) enum Decision {
    /// Connections may go.
    Allowed(Authorized),
    /// Every connection is refused.
    Refused(Refusal),
}

/// Why a connection was refused.
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    /// The report's reason.
    pub reason: &'static str,
    /// For the model: the destination, the reason and the rule or approval.
    pub message: String,
    /// The deciding tier, when the policy decided.
    pub tier: &'static str,
    /// The deciding rule.
    pub rule_id: String,
    /// The approval behind it.
    pub approval_id: String,
}

impl Refusal {
    /// A refusal the policy had no part in.
    pub(super) fn gate(reason: &'static str, message: String) -> Self {
        Refusal {
            reason,
            message,
            tier: "",
            rule_id: String::new(),
            approval_id: String::new(),
        }
    }
}

/// Counts a task as live until dropped.
pub(super) struct Live(watch::Sender<usize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl RunGate {
    /// A gate for one run; `AwaitingApproval` events for its held connections go to `events`.
    pub(crate) fn new(
        settings: Arc<Settings>,
        gate: Gate,
        info: RunInfo,
        events: mpsc::Sender<AwaitingApproval>,
    ) -> Self {
        let metrics = gate.metrics().clone();
        RunGate {
            inner: Arc::new(Inner {
                denied: HostGlobs::new(&info.denied_hosts),
                settings,
                gate,
                info,
                metrics,
                state: Mutex::new(State {
                    names: Some(Placeholders::new(MAX_NAMES)),
                    ..State::default()
                }),
                open: AtomicU32::new(0),
                events,
                stop: watch::Sender::new(false),
                live: watch::Sender::new(0),
                report: OnceLock::new(),
            }),
        }
    }

    /// Stops serving (listeners closed, connections dropped once their last bytes are
    /// counted), records the outcome of every allowed destination, and returns the run's
    /// report. Later calls return the same report.
    pub(crate) async fn finish(&self) -> Vec<Destination> {
        if let Some(r) = self.inner.report.get() {
            return r.clone();
        }
        self.inner.stop.send_replace(true);
        let mut live = self.inner.live.subscribe();
        let _ = tokio::time::timeout(DRAIN, live.wait_for(|n| *n == 0)).await;
        let (report, recorded) = self.inner.report();
        futures::future::join_all(recorded).await;
        self.inner.report.get_or_init(|| report).clone()
    }

    /// Stops serving at once (the run's client went away); outcomes are still recorded.
    pub(crate) fn abandon(&self) {
        self.inner.stop.send_replace(true);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let this = self.clone();
            rt.spawn(async move {
                this.finish().await;
            });
        }
    }
}

impl Inner {
    pub(super) fn live_guard(&self) -> Live {
        self.live.send_modify(|n| *n += 1);
        Live(self.live.clone())
    }

    /// `work`, cut short `grace` after the run ends.
    pub(super) fn until_stopped(
        self: Arc<Self>,
        grace: Duration,
        work: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stop = self.stop.subscribe();
        async move {
            tokio::select! {
                () = work => {}
                _ = async {
                    let _ = stop.wait_for(|s| *s).await;
                    tokio::time::sleep(grace).await;
                } => {}
            }
        }
    }

    /// Answers one DNS datagram.
    pub(super) fn dns(&self, msg: &[u8]) -> Option<Vec<u8>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut names = state.names.take()?;
        let answer = dns::answer(msg, &mut names, |n| self.denied.matches(n));
        state.names = Some(names);
        if let Some(r) = answer.refused {
            self.metrics.egress_connection(match r.refusal {
                "denied" => "dns_denied",
                _ => "dns_query_type",
            });
            let kept = state.dns_refusals.len();
            let known = state
                .dns_refusals
                .iter_mut()
                .find(|d| d.host == r.name && d.refusal == r.refusal);
            match known {
                Some(d) => d.refused += 1,
                None if kept < MAX_DNS_REFUSALS => {
                    state.dns_refusals.push(Destination {
                        message: match r.refusal {
                            "denied" => format!(
                                "the policy denies the host {}: its DNS lookup got NXDOMAIN",
                                r.name
                            ),
                            _ => format!(
                                "the egress gate answers only A and AAAA lookups; a lookup of {} was refused",
                                r.name
                            ),
                        },
                        host: r.name,
                        refusal: r.refusal,
                        refused: 1,
                        ..Destination::default()
                    });
                }
                None => {}
            }
        }
        answer.reply
    }

    /// The name a placeholder address stands for.
    pub(super) fn name_of(&self, ip: IpAddr) -> Option<String> {
        let IpAddr::V4(v4) = ip else { return None };
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.names.as_ref()?.name(v4).map(str::to_owned)
    }

    /// The run's record of `host:port`, new on first sight; `None` when the run reached
    /// its limit of destinations.
    pub(super) fn destination(&self, host: String, port: u16, literal: bool) -> Option<Arc<Dest>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let key = (host, port);
        if let Some(d) = state.destinations.get(&key) {
            return Some(d.clone());
        }
        if state.destinations.len() >= self.settings.max_destinations {
            state.overflow += 1;
            return None;
        }
        let d = Arc::new(Dest {
            host: key.0.clone(),
            port,
            literal,
            decision: OnceCell::new(),
            addresses: OnceCell::new(),
            connections: AtomicU32::new(0),
            refused: AtomicU32::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            first_seen: SystemTime::now(),
            last: Mutex::new(Last::default()),
        });
        state.destinations.insert(key, d.clone());
        Some(d)
    }

    /// The report, and the outcome recordings of the allowed destinations.
    fn report(
        &self,
    ) -> (
        Vec<Destination>,
        Vec<futures::future::BoxFuture<'static, bool>>,
    ) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut dests: Vec<&Arc<Dest>> = state.destinations.values().collect();
        dests.sort_by(|a, b| a.first_seen.cmp(&b.first_seen).then(a.host.cmp(&b.host)));
        let mut report = Vec::with_capacity(dests.len() + state.dns_refusals.len());
        let mut recorded = Vec::new();
        for d in dests {
            let last = d.last.lock().unwrap_or_else(|p| p.into_inner());
            let mut entry = Destination {
                host: d.host.clone(),
                port: d.port,
                address: last.address.clone(),
                connections: d.connections.load(Ordering::Relaxed),
                refused: d.refused.load(Ordering::Relaxed),
                bytes_sent: d.sent.load(Ordering::Relaxed),
                bytes_received: d.received.load(Ordering::Relaxed),
                refusal: last.refusal,
                message: last.message.clone(),
                ..Destination::default()
            };
            match d.decision.get() {
                Some(Decision::Allowed(proof)) => {
                    entry.tier = proof.tier();
                    entry.rule_id = proof.rule_id().to_owned();
                    entry.approval_id = proof.approval_id().to_owned();
                    recorded.push(Box::pin(self.gate.reporter().record(
                        proof,
                        Ran {
                            started_at: d.first_seen,
                            finished_at: SystemTime::now(),
                            finished: Finished::Connection(Box::new(entry.clone())),
                        },
                    ))
                        as futures::future::BoxFuture<'static, bool>);
                }
                Some(Decision::Refused(r)) => {
                    entry.tier = r.tier;
                    entry.rule_id = r.rule_id.clone();
                    entry.approval_id = r.approval_id.clone();
                }
                None => {}
            }
            report.push(entry);
        }
        report.extend(state.dns_refusals.iter().cloned());
        if state.overflow > 0 {
            report.push(Destination {
                host: "*".into(),
                refused: state.overflow,
                refusal: "destination_limit",
                message: format!(
                    "the run reached more than {} destinations; connections to the others were refused",
                    self.settings.max_destinations
                ),
                ..Destination::default()
            });
        }
        (report, recorded)
    }
}

/// A destination's call id: the run's, the destination appended; hashed when the result
/// would pass the ledger's 128 bytes.
pub(super) fn call_id(run: &str, host: &str, port: u16) -> String {
    let plain = format!("{run}/net/{host}:{port}");
    if plain.len() <= 128 {
        return plain;
    }
    let digest = crate::fs_service::sha256_hex(plain.as_bytes());
    let mut prefix: String = run.chars().take(64).collect();
    while prefix.len() > 64 {
        prefix.pop();
    }
    format!("{prefix}/net/{}", &digest[..40])
}

/// Where the run's report names a destination's address.
pub(super) fn set_address(d: &Dest, to: SocketAddr) {
    d.last.lock().unwrap_or_else(|p| p.into_inner()).address = to.to_string();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_call_ids_stay_within_the_ledgers_bound() {
        assert_eq!(call_id("c-1", "pypi.org", 443), "c-1/net/pypi.org:443");
        let long_run = "r".repeat(120);
        let long = call_id(&long_run, "files.pythonhosted.org", 443);
        assert!(long.len() <= 128, "{}", long.len());
        assert_ne!(long, call_id(&long_run, "files.pythonhosted.org", 80));
        let wide = "é".repeat(60);
        assert!(call_id(&wide, &"a".repeat(200), 1).len() <= 128);
    }
}
