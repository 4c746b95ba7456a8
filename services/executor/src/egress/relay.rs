//! The gate's data path: one direction of an allowed connection, copied from socket to socket
//! through a buffer that grows while the transfer is bulk.
//!
//! The buffer starts at [`MIN_BUF`], so an interactive connection (ssh, a database client) holds
//! little, and doubles whenever a read fills it, up to [`MAX_BUF`]: a download then moves in
//! large reads and writes, few wake-ups per mebibyte. A direction that has had nothing to read
//! for [`IDLE`] gives the grown part back, so a kept-alive connection after a download holds
//! `MIN_BUF` again. At most `MAX_BUF` per direction, as much as the 256 KiB pipe of the spliced
//! relay this replaced could hold.
//!
//! Why a copy and not splice(2): spliced (the relay before this one), the run's client spent
//! more CPU receiving what the gate forwarded than the copy costs the executor; forwarded
//! segments then reference the pages the destination's segments arrived in, where a copy
//! writes them anew. Measured with the egress benchmark (64 MiB over HTTPS, curl in the
//! run, 4 alternated pairs): CPU per download for curl, server and executor together 143-150 ms
//! spliced against 123-140 ms copied (curl alone 76-79 ms against 59-61 ms; the executor 23-24
//! ms against 25-29 ms), and throughput 0.74-0.78 of a direct connection against 0.81-0.85.
//!
//! The bytes are counted as they cross (the run's report reads the counters when it ends);
//! the metric is fed per read, not per packet.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use toolgate_runtime::metrics::ExecutorMetrics;

/// The buffer a direction starts with.
const MIN_BUF: usize = 16 * 1024;
/// The most a direction's buffer grows to.
const MAX_BUF: usize = 256 * 1024;
/// How long a direction with a grown buffer waits for bytes before it shrinks the buffer back.
const IDLE: Duration = Duration::from_secs(1);

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
    let mut buf = Buffer::new();
    loop {
        if buf.is_grown() && tokio::time::timeout(IDLE, from.readable()).await.is_err() {
            buf.shrink();
        }
        let n = from.read(buf.space()).await?;
        if n == 0 {
            break;
        }
        to.write_all(&buf.space()[..n]).await?;
        count.add(n);
        buf.filled(n);
    }
    to.shutdown().await
}

/// One direction's buffer: [`MIN_BUF`], doubled after each read that fills it up to
/// [`MAX_BUF`], back to `MIN_BUF` when told the direction is idle.
struct Buffer(Vec<u8>);

impl Buffer {
    fn new() -> Self {
        Buffer(vec![0; MIN_BUF])
    }

    /// Where the next read goes.
    fn space(&mut self) -> &mut [u8] {
        &mut self.0
    }

    /// A read put `n` bytes in.
    fn filled(&mut self, n: usize) {
        if n == self.0.len() && self.0.len() < MAX_BUF {
            self.0.resize(self.0.len() * 2, 0);
        }
    }

    fn is_grown(&self) -> bool {
        self.0.len() > MIN_BUF
    }

    /// Gives the grown part back to the allocator.
    fn shrink(&mut self) {
        self.0.truncate(MIN_BUF);
        self.0.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpStream;

    use super::*;

    #[test]
    fn the_buffer_grows_only_on_full_reads_and_shrinks_when_idle() {
        let mut b = Buffer::new();
        assert_eq!(b.space().len(), MIN_BUF);
        b.filled(MIN_BUF - 1);
        assert_eq!(b.space().len(), MIN_BUF, "a short read does not grow it");
        let mut sizes = Vec::new();
        for _ in 0..10 {
            let full = b.space().len();
            b.filled(full);
            sizes.push(b.space().len());
        }
        assert_eq!(
            sizes[..5],
            [32 << 10, 64 << 10, 128 << 10, 256 << 10, 256 << 10],
            "doubling up to the most"
        );
        assert!(sizes.iter().all(|s| *s <= MAX_BUF));
        assert!(b.is_grown());
        b.shrink();
        assert!(!b.is_grown());
        assert_eq!(b.space().len(), MIN_BUF);
        assert!(b.0.capacity() < MAX_BUF, "the memory went back");
    }

    /// A connected pair of sockets on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
        (a.unwrap(), b.unwrap().0)
    }

    /// A trickle of small writes, each answered before the next is sent (the buffer must not
    /// wait to fill), a bulk transfer (the buffer grows to its largest), an idle spell past
    /// [`IDLE`] (it shrinks back), a last write, and the end.
    #[tokio::test]
    async fn every_byte_crosses_in_order_and_the_end_is_passed_on() {
        let metrics = ExecutorMetrics::register(&mut toolgate_runtime::metrics::registry());
        let (mut client, gate_in) = pair().await;
        let (gate_out, mut server) = pair().await;
        let bytes = AtomicU64::new(0);
        let (from, _) = gate_in.into_split();
        let (_, to) = gate_out.into_split();
        let relay = pump(
            from,
            to,
            Count {
                bytes: &bytes,
                metrics: &metrics,
                direction: "sent",
            },
        );
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let talk = async {
            for i in 0..20u8 {
                client.write_all(&[i; 3]).await.unwrap();
                let mut echo = [0u8; 3];
                server.read_exact(&mut echo).await.unwrap();
                assert_eq!(echo, [i; 3], "small write {i}");
            }
            let mut got = vec![0u8; data.len()];
            let (w, r) = tokio::join!(client.write_all(&data), server.read_exact(&mut got));
            w.unwrap();
            r.unwrap();
            assert!(got == data, "the bytes differ");
            tokio::time::sleep(IDLE + Duration::from_millis(200)).await;
            client.write_all(b"after").await.unwrap();
            let mut after = [0u8; 5];
            server.read_exact(&mut after).await.unwrap();
            assert_eq!(&after, b"after");
            client.shutdown().await.unwrap();
            // The end reached the server: read_to_end returns, with nothing more.
            let mut rest = Vec::new();
            let mut bounded = (&mut server).take(1);
            #[allow(clippy::disallowed_methods)]
            let n = bounded.read_to_end(&mut rest).await.unwrap();
            assert_eq!(n, 0);
        };
        let (r, ()) = tokio::join!(relay, talk);
        r.unwrap();
        assert_eq!(bytes.load(Ordering::Relaxed), data.len() as u64 + 65);
    }
}
