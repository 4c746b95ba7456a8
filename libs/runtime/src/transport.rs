//! How a toolgate server meets the network, and how its clients dial it: TLS (reloaded
//! when the files change), mutual TLS, and limits that keep what a peer can make the server
//! hold bounded.
//!
//! - [`TransportConfig`] is the `[transport]` section both services share.
//! - [`Transport::incoming`] accepts connections: a counted slot each (beyond
//!   `max_connections`, or beyond `max_connections_per_peer` from one peer address, a
//!   connection is closed at accept), the TLS handshake in its own task under a deadline (a
//!   slow or silent handshake never blocks the accept loop), and a [`ServerConn`] that
//!   closes itself after `idle_timeout_ms` without an open stream, or after
//!   `first_request_timeout_ms` when it has not begun a first request by then.
//! - [`Transport::server`] is [`crate::grpc::server`] with the HTTP/2 limits: streams per
//!   connection, header list size, keepalive PINGs with a timeout.
//! - [`Transport::layer`] counts each connection's open streams, which is what "idle" means.
//! - [`tls`] loads certificates and keys (server and client side) and dials TLS.
//!
//! A listen address other than loopback without TLS refuses to start unless the operator
//! says `insecure_plaintext`: bearer tokens would cross the network in the clear.

pub mod tls;

mod io;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Server;

pub use io::{Activity, ActivityLayer, ConnInfo, ServerConn};
pub use tls::{ClientTls, ClientTlsConfig, Dial, ServerTlsConfig};

/// The `[transport]` section: TLS and the limits on connections and streams.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TransportConfig {
    /// Serve without TLS on an address other than loopback (behind a mesh that terminates
    /// mutual TLS, for example). Loopback addresses never need it.
    pub insecure_plaintext: bool,
    /// Certificate, key and client CA; TLS is on when `tls.cert_file` is set.
    pub tls: ServerTlsConfig,
    /// Most connections open at once; beyond it a new connection is closed at accept.
    pub max_connections: usize,
    /// Most connections open at once from one peer address (an IPv6 peer's /64); beyond it
    /// that peer's new connections are closed at accept, so one peer cannot take every slot.
    pub max_connections_per_peer: usize,
    /// Most concurrent streams (calls) per connection, advertised in HTTP/2 SETTINGS;
    /// streams beyond it are refused by the protocol.
    pub max_concurrent_streams: u32,
    /// Largest request header list (names, values and 32 bytes each), in bytes.
    pub max_header_list_bytes: u32,
    /// HTTP/2 PING interval on every connection, in milliseconds.
    pub keepalive_interval_ms: u64,
    /// How long a PING may go unanswered before the connection is closed, in milliseconds.
    pub keepalive_timeout_ms: u64,
    /// A connection with no open stream for this long is closed, in milliseconds.
    pub idle_timeout_ms: u64,
    /// Longest TLS handshake, in milliseconds.
    pub handshake_timeout_ms: u64,
    /// A connection that has not begun its first request (HTTP/2 preface, SETTINGS and the
    /// request's headers) this long after it was accepted is closed, in milliseconds.
    pub first_request_timeout_ms: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            insecure_plaintext: false,
            tls: ServerTlsConfig::default(),
            max_connections: 4096,
            max_connections_per_peer: 512,
            max_concurrent_streams: 128,
            max_header_list_bytes: 16 << 10,
            keepalive_interval_ms: 30_000,
            keepalive_timeout_ms: 10_000,
            idle_timeout_ms: 300_000,
            handshake_timeout_ms: 10_000,
            first_request_timeout_ms: 10_000,
        }
    }
}

/// Why a server cannot serve as configured. The message names the field.
#[derive(Debug, thiserror::Error)]
#[error("transport: {0}")]
pub struct TransportError(pub String);

impl TransportConfig {
    /// Checks the limits and, for `listen`, that plaintext is allowed. Does not read the
    /// TLS files ([`Transport::new`] does).
    pub fn validate(&self, listen: SocketAddr) -> Result<(), TransportError> {
        for (name, v) in [
            ("transport.max_connections", self.max_connections as u64),
            (
                "transport.max_connections_per_peer",
                self.max_connections_per_peer as u64,
            ),
            (
                "transport.max_concurrent_streams",
                u64::from(self.max_concurrent_streams),
            ),
            (
                "transport.max_header_list_bytes",
                u64::from(self.max_header_list_bytes),
            ),
            (
                "transport.keepalive_interval_ms",
                self.keepalive_interval_ms,
            ),
            ("transport.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("transport.idle_timeout_ms", self.idle_timeout_ms),
            ("transport.handshake_timeout_ms", self.handshake_timeout_ms),
            (
                "transport.first_request_timeout_ms",
                self.first_request_timeout_ms,
            ),
        ] {
            if v == 0 {
                return Err(TransportError(format!("{name}: must be positive")));
            }
        }
        if self.max_header_list_bytes < 4096 {
            return Err(TransportError(
                "transport.max_header_list_bytes: at least 4096 (gRPC metadata needs room)".into(),
            ));
        }
        self.tls.validate()?;
        if !self.tls.enabled() && !self.insecure_plaintext && !listen.ip().is_loopback() {
            return Err(TransportError(format!(
                "{listen} is not a loopback address and TLS is off: bearer tokens would cross the \
                 network in the clear. Set transport.tls.cert_file and transport.tls.key_file, or \
                 say --insecure-plaintext (transport.insecure_plaintext = true) when something \
                 else (a service mesh) encrypts the traffic"
            )));
        }
        Ok(())
    }
}

/// A server's transport, built from [`TransportConfig`].
#[derive(Clone)]
pub struct Transport {
    config: TransportConfig,
    tls: Option<Arc<tls::ServerTls>>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .field("max_connections", &self.config.max_connections)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// Validates `config` for `listen` and loads the TLS material, if any.
    pub fn new(config: &TransportConfig, listen: SocketAddr) -> Result<Transport, TransportError> {
        config.validate(listen)?;
        let tls = if config.tls.enabled() {
            Some(Arc::new(tls::ServerTls::load(&config.tls)?))
        } else {
            None
        };
        Ok(Transport {
            config: config.clone(),
            tls,
        })
    }

    /// `https` with TLS, `http` without: what clients put in front of the address.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// [`crate::grpc::server`] with this transport's HTTP/2 limits.
    pub fn server(&self) -> Server {
        let c = &self.config;
        crate::grpc::server()
            .max_concurrent_streams(c.max_concurrent_streams)
            .http2_max_header_list_size(c.max_header_list_bytes)
            .http2_keepalive_interval(Some(Duration::from_millis(c.keepalive_interval_ms)))
            .http2_keepalive_timeout(Some(Duration::from_millis(c.keepalive_timeout_ms)))
            // A peer that opens and resets streams without end costs a bounded amount.
            .http2_max_pending_accept_reset_streams(Some(c.max_concurrent_streams as usize))
    }

    /// The layer that counts each connection's open streams (for the idle timeout). Add it
    /// to the server with `.layer(..)`.
    pub fn layer(&self) -> ActivityLayer {
        ActivityLayer
    }

    /// The connections accepted on `listener`, each holding one of `max_connections` slots
    /// until it closes. The accept loop ends when the returned stream is dropped.
    pub fn incoming(
        &self,
        listener: TcpListener,
    ) -> impl Stream<Item = std::io::Result<ServerConn>> + Send + 'static {
        let (tx, rx) = mpsc::channel(64);
        let closed = Arc::new(AtomicU64::new(0));
        tokio::spawn(trim_after_closes(closed.clone(), tx.clone()));
        let c = &self.config;
        tokio::spawn(accept_loop(
            listener,
            self.tls.clone(),
            Limits {
                slots: Arc::new(Semaphore::new(c.max_connections)),
                peers: Arc::default(),
                per_peer: c.max_connections_per_peer,
                closed,
            },
            Timeouts {
                idle: Duration::from_millis(c.idle_timeout_ms),
                first_request: Duration::from_millis(c.first_request_timeout_ms),
            },
            Duration::from_millis(c.handshake_timeout_ms),
            tx,
        ));
        ReceiverStream::new(rx)
    }
}

/// Once a second, when connections closed since the last look, gives the memory they held
/// back to the OS: without it a burst of 2 000 connections left ~32 MiB resident in glibc's
/// arenas after they all closed. Ends with the accept loop.
async fn trim_after_closes(closed: Arc<AtomicU64>, tx: mpsc::Sender<std::io::Result<ServerConn>>) {
    let mut seen = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = tx.closed() => return,
        }
        let now = closed.load(Ordering::Relaxed);
        if now != seen {
            seen = now;
            toolgate_process::release_free_memory();
        }
    }
}

/// How often a full table or a failing accept is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// What bounds the connections of one listener.
struct Limits {
    /// `max_connections`.
    slots: Arc<Semaphore>,
    /// Connections open per peer.
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// `max_connections_per_peer`.
    per_peer: usize,
    /// Counts closed connections, for the memory trim.
    closed: Arc<AtomicU64>,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy)]
enum Full {
    /// `max_connections` are open.
    Table,
    /// The peer has `max_connections_per_peer` open.
    Peer,
}

/// The address a peer's connections are counted under: its IP, or for IPv6 its /64 (one
/// host commonly holds a whole /64).
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl Limits {
    /// A slot for a connection from `remote`, or why there is none.
    fn admit(&self, remote: SocketAddr) -> Result<Slot, Full> {
        let key = peer_key(remote.ip());
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let open = peers.entry(key).or_insert(0);
        if *open >= self.per_peer {
            return Err(Full::Peer);
        }
        let permit = self
            .slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| Full::Table)?;
        *open += 1;
        Ok(Slot {
            _permit: permit,
            peers: self.peers.clone(),
            peer: key,
            closed: self.closed.clone(),
        })
    }
}

/// One connection's place in the limits, given back when the connection is dropped.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
    peer: IpAddr,
    closed: Arc<AtomicU64>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = peers.get_mut(&self.peer) {
            *open -= 1;
            if *open == 0 {
                peers.remove(&self.peer);
            }
        }
        self.closed.fetch_add(1, Ordering::Relaxed);
    }
}

/// How long an accepted connection may stay without a stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Since its last stream ended.
    pub(crate) idle: Duration,
    /// Since it was accepted, before its first stream began.
    pub(crate) first_request: Duration,
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<Arc<tls::ServerTls>>,
    limits: Limits,
    timeouts: Timeouts,
    handshake: Duration,
    tx: mpsc::Sender<std::io::Result<ServerConn>>,
) {
    let mut refused: u64 = 0;
    let mut last_log: Option<tokio::time::Instant> = None;
    let mut should_log = move || {
        let now = tokio::time::Instant::now();
        let due = last_log.is_none_or(|t| now.duration_since(t) >= LOG_EVERY);
        if due {
            last_log = Some(now);
        }
        due
    };
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = tx.closed() => return,
        };
        let (stream, remote) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors or memory: back off instead of spinning.
                if should_log() {
                    tracing::warn!(error = %e, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match limits.admit(remote) {
            Ok(slot) => slot,
            Err(full) => {
                refused += 1;
                if should_log() {
                    match full {
                        Full::Table => {
                            tracing::warn!(%remote, refused, "connection limit reached (transport.max_connections); closing new connections at accept");
                        }
                        Full::Peer => {
                            tracing::warn!(%remote, refused, "connection limit of one peer reached (transport.max_connections_per_peer); closing its new connections at accept");
                        }
                    }
                }
                drop(stream);
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().ok();
        let conn = crate::grpc::Conn::new(stream);
        match &tls {
            None => {
                let c = ServerConn::plain(conn, Some(remote), local, timeouts, slot);
                if tx.send(Ok(c)).await.is_err() {
                    return;
                }
            }
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(handshake, acceptor.accept(conn)).await {
                        Ok(Ok(s)) => {
                            let c = ServerConn::tls(s, Some(remote), local, timeouts, slot);
                            let _ = tx.send(Ok(c)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
}
