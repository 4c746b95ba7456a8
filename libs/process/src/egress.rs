//! The seam between a networked run and the executor's egress gate.
//!
//! A run whose profile is networked gets a network namespace of its own whose only way out is
//! the gate: its nftables ruleset redirects every TCP connection to a non-loopback address to
//! the gate's listener at `127.0.0.1:`[`GATE_PORT`] (`[::1]` for IPv6) and every UDP datagram
//! to port 53 to the DNS stub at `127.0.0.1:53` (`[::1]:53`), and drops every other packet
//! leaving for a non-loopback address. The sockets those addresses name are made inside the
//! namespace before the run starts and handed to the executor as [`GateSockets`] through the
//! run's [`EgressHook`].

use std::io;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};

/// The port the gate's TCP listener has inside each gated namespace; every redirected TCP
/// connection arrives there. Chosen outside the usual service ports so a program in the run
/// that listens on its own loopback rarely collides with it.
pub const GATE_PORT: u16 = 17700;

/// The listening and bound sockets of one run's gated network namespace (non-blocking,
/// close-on-exec). The run's redirected TCP connections queue on `tcp4`/`tcp6` and its DNS
/// queries on `dns4`/`dns6` from its first instruction, whenever the gate starts serving them.
#[derive(Debug)]
pub struct GateSockets {
    /// TCP listening on `127.0.0.1:GATE_PORT`: IPv4 connections to any non-loopback address.
    pub tcp4: OwnedFd,
    /// TCP listening on `[::1]:GATE_PORT`, when IPv6 works in the namespace.
    pub tcp6: Option<OwnedFd>,
    /// UDP bound to `127.0.0.1:53`: IPv4 DNS queries to any address.
    pub dns4: OwnedFd,
    /// UDP bound to `[::1]:53`, when IPv6 works in the namespace.
    pub dns6: Option<OwnedFd>,
}

/// Called by the runner with a networked run's [`GateSockets`] once its namespace is taken
/// for it, before the run's program starts.
pub type EgressHook = Box<dyn FnOnce(GateSockets) + Send>;

/// The destination a redirected TCP connection was addressed to, read from the accepted socket
/// `fd` (`SO_ORIGINAL_DST`, or `IP6T_SO_ORIGINAL_DST` for IPv6).
pub fn original_destination(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    crate::sys::original_destination(fd)
}
