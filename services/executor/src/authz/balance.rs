//! The policy tier as a set of replicas: every address the configured endpoints resolve to
//! is a backend, kept current by re-resolving, and a backend that cannot be reached is set
//! aside while the others take its calls.
//!
//! `policy.endpoint` names one URL or several separated by commas. Each host name is
//! resolved now and every `policy.resolve_interval_ms`; a Kubernetes headless Service name
//! resolves to one address per ready replica, so replicas that come and go join and leave the
//! set. A failed resolution keeps the addresses known so far: DNS trouble never empties it.
//!
//! Each call goes to the less loaded of two healthy backends chosen at random (power of two
//! choices, by calls in flight). A call that failed before its request reached the replica
//! (connection refused, connect timeout, no route) is safe to send again, because the policy
//! service never saw it: the backend is ejected for a jittered, growing period and the call
//! goes to another one. A call that failed after it was sent (the replica died mid-call) is
//! not resent: the ledger may hold its decision, and the client's retry gets the honest
//! `CALL_IN_FLIGHT` answer. So when a replica dies, at most the calls in flight on it fail.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::Status;
use tonic::transport::Channel;
use toolgate_core::backoff::Backoff;
use toolgate_runtime::transport::Dial;

/// One configured policy URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `http` or `https`.
    pub(crate) scheme: String,
    /// The host as written (a name or an address literal, IPv6 without brackets).
    pub(crate) host: String,
    /// The port (the scheme's default when the URL has none).
    pub(crate) port: u16,
    /// The URL as configured, for messages and the `:authority` of requests.
    pub(crate) url: String,
}

/// Parses `policy.endpoint`: one URL or several separated by commas.
pub(crate) fn parse(endpoints: &str) -> Result<Vec<Target>, String> {
    let mut out = Vec::new();
    for url in endpoints
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        let uri: tonic::transport::Uri = url
            .parse()
            .map_err(|e| format!("policy.endpoint: `{url}` is not a URL ({e})"))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            _ => {
                return Err(format!(
                    "policy.endpoint: `{url}` is not an http:// or https:// URL"
                ));
            }
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("policy.endpoint: `{url}` has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(format!(
                "policy.endpoint: `{url}` has a path; give the scheme, host and port only"
            ));
        }
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "https" { 443 } else { 80 });
        out.push(Target {
            scheme,
            host,
            port,
            url: url.to_owned(),
        });
    }
    if out.is_empty() {
        return Err(
            "policy.endpoint: required (the policy service URL, for example http://127.0.0.1:7071); the executor runs nothing without it"
                .into(),
        );
    }
    Ok(out)
}

/// What a backend connection is built from: the target it came from and one of its addresses.
pub(crate) type MakeEndpoint =
    Box<dyn Fn(&Target, SocketAddr) -> Result<Dial, String> + Send + Sync>;

/// How long a backend that could not be reached is set aside at first, and at most.
const EJECT_FIRST: Duration = Duration::from_millis(500);
const EJECT_MAX: Duration = Duration::from_secs(15);

/// Approval waits one wait connection carries at most: well under the streams a policy
/// connection allows (`transport.max_concurrent_streams`, 128 by default), so a wait never
/// queues behind the limit.
pub(crate) const WAITS_PER_CONNECTION: usize = 64;

/// One policy replica's address and its connections.
pub(crate) struct Backend {
    /// The resolved address.
    pub(crate) addr: SocketAddr,
    /// Authorize and RecordOutcome: short calls, never held open.
    channel: Channel,
    /// How to open another connection to this replica.
    dial: Dial,
    /// WaitForApproval streams, which stay open until a human decides: on connections of
    /// their own, a new one whenever the open ones are full, so parked calls never take the
    /// streams the short calls need, however many are parked.
    waits: Mutex<Vec<Arc<WaitConnection>>>,
    in_flight: AtomicUsize,
    health: Mutex<Health>,
}

/// One connection carrying approval waits.
struct WaitConnection {
    channel: Channel,
    open: AtomicUsize,
}

/// One approval wait's place on a wait connection; frees it when dropped.
pub(crate) struct WaitSlot(Arc<WaitConnection>);

impl WaitSlot {
    /// The connection to send the wait on.
    pub(crate) fn channel(&self) -> Channel {
        self.0.channel.clone()
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Health {
    /// Set aside until then after an unreachable attempt.
    ejected_until: Option<Instant>,
    /// The backoff since the last success; `None` while healthy.
    backoff: Option<Backoff>,
}

impl Backend {
    fn healthy(&self, now: Instant) -> bool {
        lock(&self.health).ejected_until.is_none_or(|t| t <= now)
    }

    fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// The backends of the policy tier.
pub(crate) struct Pool {
    backends: Mutex<Vec<Arc<Backend>>>,
    /// Bumped each time the set changes, so a first call can wait for the first resolution.
    generation: watch::Sender<u64>,
}

/// A backend taken for one attempt; counts as in flight until dropped.
pub(crate) struct Lease(Arc<Backend>);

impl Lease {
    /// The connection to send on.
    pub(crate) fn channel(&self) -> Channel {
        self.0.channel.clone()
    }

    /// The backend's address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.0.addr
    }

    /// A place for one approval wait on this replica's wait connections: the first one with
    /// room, or a new connection when all are full. Connections left empty are closed, except
    /// the first, so a lone wait does not pay for a handshake.
    pub(crate) fn wait_slot(&self) -> WaitSlot {
        let mut waits = lock(&self.0.waits);
        let mut first = true;
        waits.retain(|c| std::mem::take(&mut first) || c.open.load(Ordering::Relaxed) > 0);
        let conn = match waits
            .iter()
            .find(|c| c.open.load(Ordering::Relaxed) < WAITS_PER_CONNECTION)
        {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(WaitConnection {
                    channel: self.0.dial.clone().connect_lazy(),
                    open: AtomicUsize::new(0),
                });
                waits.push(c.clone());
                c
            }
        };
        conn.open.fetch_add(1, Ordering::Relaxed);
        WaitSlot(conn)
    }

    /// The attempt reached the replica: it is healthy again.
    pub(crate) fn reached(&self) {
        let mut h = lock(&self.0.health);
        h.ejected_until = None;
        h.backoff = None;
    }

    /// The attempt never reached the replica, or lost its connection mid-call: set it aside
    /// for a while.
    pub(crate) fn unreachable(&self) {
        let mut h = lock(&self.0.health);
        let wait = h
            .backoff
            .get_or_insert_with(|| Backoff::new(EJECT_FIRST, EJECT_MAX))
            .next_delay()
            // Never less than a tenth of the first period, so a dead replica is not retried
            // on every call when the jitter draws near zero.
            .max(EJECT_FIRST / 10);
        h.ejected_until = Some(Instant::now() + wait);
        tracing::warn!(address = %self.0.addr, wait_ms = wait.as_millis() as u64, "policy replica unreachable; set aside");
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Pool {
    /// A pool over every address of `targets`, and the task that keeps it current. Must be
    /// called inside a Tokio runtime; the task ends when the pool is dropped.
    pub(crate) fn start(
        targets: Vec<Target>,
        make: MakeEndpoint,
        resolve_every: Duration,
    ) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            backends: Mutex::new(Vec::new()),
            generation: watch::channel(0).0,
        });
        tokio::spawn(keep_resolved(
            targets,
            make,
            resolve_every,
            Arc::downgrade(&pool),
        ));
        pool
    }

    /// How many backends the set holds.
    pub(crate) fn len(&self) -> usize {
        lock(&self.backends).len()
    }

    /// Waits until the set has at least one backend, or `limit` passes.
    pub(crate) async fn ready(&self, limit: Duration) -> bool {
        let mut rx = self.generation.subscribe();
        let wait = rx.wait_for(|_| self.len() > 0);
        matches!(tokio::time::timeout(limit, wait).await, Ok(Ok(_)))
    }

    /// A backend for one attempt, never one in `tried`: the less loaded of two healthy ones
    /// drawn at random; when none is healthy, the one whose ejection ends first (a call is
    /// better tried than refused outright). `None` when every backend was tried.
    pub(crate) fn pick(&self, tried: &[SocketAddr]) -> Option<Lease> {
        let backends = lock(&self.backends);
        let now = Instant::now();
        let open: Vec<&Arc<Backend>> = backends
            .iter()
            .filter(|b| !tried.contains(&b.addr))
            .collect();
        let healthy: Vec<&Arc<Backend>> = open.iter().copied().filter(|b| b.healthy(now)).collect();
        let chosen = match healthy.len() {
            0 => open
                .iter()
                .min_by_key(|b| lock(&b.health).ejected_until)
                .copied(),
            1 => Some(healthy[0]),
            n => {
                let i = fastrand::usize(..n);
                let mut j = fastrand::usize(..n - 1);
                if j >= i {
                    j += 1;
                }
                Some(if healthy[j].load() < healthy[i].load() {
                    healthy[j]
                } else {
                    healthy[i]
                })
            }
        }?;
        chosen.in_flight.fetch_add(1, Ordering::Relaxed);
        Some(Lease(chosen.clone()))
    }

    fn apply(&self, want: BTreeMap<SocketAddr, Dial>) {
        let mut backends = lock(&self.backends);
        let before = backends.len();
        backends.retain(|b| {
            let keep = want.contains_key(&b.addr);
            if !keep {
                tracing::info!(address = %b.addr, "policy replica left the set");
            }
            keep
        });
        let mut changed = backends.len() != before;
        for (addr, dial) in want {
            if backends.iter().any(|b| b.addr == addr) {
                continue;
            }
            tracing::info!(address = %addr, "policy replica joined the set");
            backends.push(Arc::new(Backend {
                addr,
                channel: dial.clone().connect_lazy(),
                dial,
                waits: Mutex::new(Vec::new()),
                in_flight: AtomicUsize::new(0),
                health: Mutex::new(Health::default()),
            }));
            changed = true;
        }
        drop(backends);
        if changed {
            self.generation.send_modify(|g| *g += 1);
        }
    }
}

async fn keep_resolved(
    targets: Vec<Target>,
    make: MakeEndpoint,
    every: Duration,
    pool: Weak<Pool>,
) {
    // The last addresses each target resolved to.
    let mut known: BTreeMap<usize, BTreeSet<SocketAddr>> = BTreeMap::new();
    loop {
        for (i, target) in targets.iter().enumerate() {
            match tokio::net::lookup_host((target.host.as_str(), target.port)).await {
                Ok(addrs) => {
                    let addrs: BTreeSet<SocketAddr> = addrs.collect();
                    if addrs.is_empty() {
                        tracing::warn!(endpoint = %target.url, "policy endpoint resolved to no address; keeping the last ones");
                    } else {
                        known.insert(i, addrs);
                    }
                }
                Err(e) => {
                    tracing::warn!(endpoint = %target.url, error = %e, "cannot resolve the policy endpoint; keeping the last addresses");
                }
            }
        }
        let mut want = BTreeMap::new();
        for (i, addrs) in &known {
            for addr in addrs {
                match make(&targets[*i], *addr) {
                    Ok(endpoint) => {
                        want.entry(*addr).or_insert(endpoint);
                    }
                    Err(e) => {
                        tracing::warn!(address = %addr, error = %e, "cannot build a policy endpoint");
                    }
                }
            }
        }
        match pool.upgrade() {
            Some(pool) => pool.apply(want),
            None => return,
        }
        tokio::time::sleep(every).await;
        if pool.strong_count() == 0 {
            return;
        }
    }
}

/// Whether a failed call certainly never reached the replica: the connection could not be
/// made (refused, timed out, no route, name not resolved). Only such calls are sent again.
pub(crate) fn unreached(status: &Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            if matches!(
                io.kind(),
                K::ConnectionRefused
                    | K::HostUnreachable
                    | K::NetworkUnreachable
                    | K::AddrNotAvailable
            ) {
                return true;
            }
        }
        // hyper-util's connector and tonic's connect timeout say so in their type's name
        // only; both wrap failures of the connection attempt, before any request byte.
        let name = format!("{e:?}");
        if name.starts_with("ConnectError") || name.starts_with("TimeoutExpired") {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::transport::Endpoint;

    #[test]
    fn endpoints_parse_as_a_comma_separated_list() {
        let t = parse("http://policy-0:7071, https://[::1]:9443,http://policy.ns.svc").unwrap();
        assert_eq!(
            t.iter()
                .map(|t| (t.scheme.as_str(), t.host.as_str(), t.port))
                .collect::<Vec<_>>(),
            [
                ("http", "policy-0", 7071),
                ("https", "::1", 9443),
                ("http", "policy.ns.svc", 80)
            ]
        );
        for bad in [
            "",
            " , ",
            "policy:7071",
            "ftp://x:1",
            "http://x:1/api",
            "http://:1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    fn endpoint(t: &Target, a: SocketAddr) -> Result<Dial, String> {
        Ok(Dial::new(&t.url, Some(a), None)
            .map_err(|e| e.0)?
            .map(|e| e.connect_timeout(Duration::from_millis(500))))
    }

    #[tokio::test]
    async fn every_resolved_address_joins_and_the_task_ends_with_the_pool() {
        let targets = parse("http://127.0.0.1:1,http://localhost:2").unwrap();
        let pool = Pool::start(targets, Box::new(endpoint), Duration::from_millis(20));
        assert!(pool.ready(Duration::from_secs(5)).await);
        let addrs: BTreeSet<SocketAddr> = lock(&pool.backends).iter().map(|b| b.addr).collect();
        assert!(addrs.contains(&"127.0.0.1:1".parse().unwrap()), "{addrs:?}");
        assert!(
            addrs.iter().any(|a| a.port() == 2),
            "localhost resolves: {addrs:?}"
        );
        let weak = Arc::downgrade(&pool);
        drop(pool);
        // The resolver holds no strong reference: the pool is gone with its last user.
        assert_eq!(weak.strong_count(), 0);
    }

    #[tokio::test]
    async fn an_unreachable_backend_is_set_aside_and_a_reached_one_is_healthy_again() {
        let pool = Pool::start(
            parse("http://127.0.0.1:1,http://127.0.0.2:1").unwrap(),
            Box::new(endpoint),
            Duration::from_secs(3600),
        );
        assert!(pool.ready(Duration::from_secs(5)).await);
        while pool.len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let first = pool.pick(&[]).unwrap();
        let dead = first.addr();
        first.unreachable();
        drop(first);
        // The other one takes every call while the first is set aside.
        for _ in 0..50 {
            assert_ne!(pool.pick(&[]).unwrap().addr(), dead);
        }
        // Once every backend was tried, there is nothing more to pick.
        let other = pool.pick(&[dead]).unwrap().addr();
        assert!(pool.pick(&[dead, other]).is_none());
        // When all are set aside, the one back soonest is still tried rather than refusing.
        pool.pick(&[dead]).unwrap().unreachable();
        assert!(pool.pick(&[]).is_some());
        // A success restores it.
        let l = pool.pick(&[other]).unwrap();
        l.reached();
        assert!(l.0.healthy(Instant::now()));
    }

    #[tokio::test]
    async fn approval_waits_open_connections_of_their_own_as_they_need_them() {
        let pool = Pool::start(
            parse("http://127.0.0.1:1").unwrap(),
            Box::new(endpoint),
            Duration::from_secs(3600),
        );
        assert!(pool.ready(Duration::from_secs(5)).await);
        let lease = pool.pick(&[]).unwrap();
        let conns = || lock(&lease.0.waits).len();
        let slots: Vec<WaitSlot> = (0..2 * WAITS_PER_CONNECTION + 1)
            .map(|_| lease.wait_slot())
            .collect();
        assert_eq!(conns(), 3);
        drop(slots);
        // Empty connections close at the next wait, except the first.
        let one = lease.wait_slot();
        assert_eq!(conns(), 1);
        assert_eq!(one.0.open.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_refused_connection_counts_as_unreached_and_a_reset_mid_call_does_not() {
        // A port nobody listens on.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
        let err = client
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap_err();
        assert!(unreached(&err), "{err:?}");

        // A peer that accepts, reads the request, and hangs up without answering.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            drop(s);
        });
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let mut client = tonic_health::pb::health_client::HealthClient::new(channel);
        let err = client
            .check(tonic_health::pb::HealthCheckRequest::default())
            .await
            .unwrap_err();
        assert!(!unreached(&err), "{err:?}");
    }
}
