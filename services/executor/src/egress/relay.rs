//! The gate's data path: one direction of an allowed connection, moved from socket to socket
//! through a pipe with splice(2), so the bytes never enter the executor's memory and each
//! crossing costs two system calls per pipe-full instead of a read, a copy and a write per
//! buffer. Where a pipe cannot be had (the descriptor limit), a buffered copy does the same.
//!
//! The bytes are counted as they cross (the run's report reads the counters when it ends);
//! the metric is fed per pipe-full, not per packet.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use toolgate_runtime::metrics::ExecutorMetrics;

/// What a pipe of the relay holds: the most one splice moves. Asked of the kernel; a host
/// whose per-user pipe budget is spent gets smaller pipes, which only cost more calls.
const PIPE_BYTES: usize = 256 * 1024;
/// The buffer of the copying fallback.
const COPY_BUF: usize = 64 * 1024;

/// Where one direction's bytes are counted.
pub(super) struct Count<'a> {
    /// The destination's counter in the run's report.
    pub bytes: &'a AtomicU64,
    /// The executor's metrics.
    pub metrics: &'a ExecutorMetrics,
    /// `sent` or `received`.
    pub direction: &'static str,
}

impl Count<'_> {
    fn add(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        self.metrics.egress_bytes(self.direction, n as u64);
    }
}

/// Moves everything `from` sends to `to`, then shuts down `to`'s sending side.
pub(super) async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    count: Count<'_>,
) -> io::Result<()> {
    match pipe() {
        Ok((r, w)) => splice_all(from.as_ref(), to.as_ref(), &r, &w, &count).await?,
        Err(e) => {
            tracing::debug!(error = %e, "no pipe for the egress relay; copying");
            copy_all(&mut from, &mut to, &count).await?;
        }
    }
    to.shutdown().await
}

/// A non-blocking pipe, enlarged when the kernel allows.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    let _ = rustix::pipe::fcntl_setpipe_size(&w, PIPE_BYTES);
    Ok((r, w))
}

/// Socket to pipe, pipe to socket, until `from` ends. The pipe is emptied before the next
/// fill, so a fill never waits on the pipe and a drain never on the source.
async fn splice_all(
    from: &TcpStream,
    to: &TcpStream,
    pipe_r: &OwnedFd,
    pipe_w: &OwnedFd,
    count: &Count<'_>,
) -> io::Result<()> {
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    loop {
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                Ok(rustix::pipe::splice(
                    from, None, pipe_w, None, PIPE_BYTES, flags,
                )?)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                Ok(rustix::pipe::splice(pipe_r, None, to, None, left, flags)?)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        count.add(n);
    }
}

/// The same through a buffer.
async fn copy_all(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    count: &Count<'_>,
) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
        count.add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair of sockets on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
        (a.unwrap(), b.unwrap().0)
    }

    #[tokio::test]
    async fn both_paths_move_every_byte_in_order_and_pass_the_end_on() {
        let metrics = ExecutorMetrics::register(&mut toolgate_runtime::metrics::registry());
        for spliced in [true, false] {
            let (mut client, gate_in) = pair().await;
            let (gate_out, mut server) = pair().await;
            let bytes = AtomicU64::new(0);
            let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
            let (from, _) = gate_in.into_split();
            let (_, to) = gate_out.into_split();
            let relay = async {
                let count = Count {
                    bytes: &bytes,
                    metrics: &metrics,
                    direction: "sent",
                };
                if spliced {
                    pump(from, to, count).await
                } else {
                    let (mut from, mut to) = (from, to);
                    copy_all(&mut from, &mut to, &count).await?;
                    to.shutdown().await
                }
            };
            let write = async {
                client.write_all(&data).await.unwrap();
                client.shutdown().await.unwrap();
            };
            let mut got = Vec::new();
            // Bounded by what the test wrote, plus one byte to see any extra.
            let mut bounded = (&mut server).take(data.len() as u64 + 1);
            #[allow(clippy::disallowed_methods)]
            let read = bounded.read_to_end(&mut got);
            let (r, (), n) = tokio::join!(relay, write, read);
            r.unwrap();
            // The end reached the server: read_to_end returned.
            assert_eq!(n.unwrap(), data.len(), "spliced: {spliced}");
            assert!(got == data, "spliced: {spliced}: the bytes differ");
            assert_eq!(bytes.load(Ordering::Relaxed), data.len() as u64);
        }
    }
}
