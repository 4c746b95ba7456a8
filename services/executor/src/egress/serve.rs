//! Serving one run's gate: the accept loop of each of its redirected TCP listeners (every
//! connection handled by [`conn`](super::conn)) and the loop of its DNS sockets, on the
//! executor's runtime until the run's gate stops.

use std::time::Duration;

use crate::egress::conn;
use crate::egress::run::{DRAIN, RunGate, Sockets};

impl RunGate {
    /// Serves `sockets` on `runtime` until [`RunGate::finish`].
    pub(crate) fn serve(&self, sockets: Sockets, runtime: &tokio::runtime::Handle) {
        let _enter = runtime.enter();
        for listener in sockets.tcp {
            let inner = self.inner.clone();
            let live = inner.live_guard();
            let task = async move {
                let _live = live;
                let listener = match listener
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::TcpListener::from_std(listener))
                {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "the egress gate cannot serve its listener");
                        return;
                    }
                };
                loop {
                    match listener.accept().await {
                        Ok((stream, _)) => {
                            // The run's side as well as the outbound one: with Nagle on,
                            // a request written in two parts waits out the run's delayed
                            // ACK (~40 ms) before it reaches the destination.
                            let _ = stream.set_nodelay(true);
                            let inner = inner.clone();
                            // A connection may go on for a moment after the run ends, so
                            // the bytes the run sent before it ended are counted.
                            tokio::spawn(inner.clone().until_stopped(DRAIN, async move {
                                conn::handle(inner, stream).await;
                            }));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "egress accept failed");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    }
                }
            };
            tokio::spawn(self.inner.clone().until_stopped(Duration::ZERO, task));
        }
        for socket in sockets.dns {
            let inner = self.inner.clone();
            let live = inner.live_guard();
            let task = async move {
                let _live = live;
                let socket = match socket
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::UdpSocket::from_std(socket))
                {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::error!(error = %e, "the egress gate cannot serve its DNS socket");
                        return;
                    }
                };
                let mut buf = vec![0u8; 4096];
                loop {
                    let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                        continue;
                    };
                    if let Some(reply) = inner.dns(&buf[..n]) {
                        let _ = socket.send_to(&reply, from).await;
                    }
                }
            };
            tokio::spawn(self.inner.clone().until_stopped(Duration::ZERO, task));
        }
    }
}
