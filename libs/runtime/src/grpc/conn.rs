//! The server side of every toolgate gRPC connection: a TCP stream that lets HTTP/2 put a
//! whole small answer (headers, message and trailers) into one socket write.
//!
//! Why it exists. h2 buffers frames before it writes them, but a DATA frame above a
//! threshold is not copied into that buffer: it is chained behind it and written straight
//! from the caller's bytes, and nothing more can be buffered until that chain is flushed.
//! The threshold is 256 bytes on a transport that reports vectored writes (a plain
//! `TcpStream` does) and 1 KiB on one that does not. A unary answer between the two, such as
//! a typical `Classify` explanation (~700 bytes), therefore left as two writes: headers and
//! message, then the trailers on their own. The client woke up twice per call; on the 2-core
//! VM each extra wake-up costs tens of microseconds (`--bin grpc classify`:
//! `classify_added_us_p50` 21-33 µs with the plain stream, 19-23 µs with this one, three
//! alternating runs each; `Run` and streaming unchanged).
//!
//! What it does. [`Conn`] reports no vectored writes, so h2 copies frames up to 1 KiB into
//! its own buffer, and it holds back writes up to [`COMBINE_LIMIT`] until the next flush. h2
//! flushes after every batch of frames, so nothing waits longer than before; but the frame
//! head and payload of a larger DATA frame, which h2 hands over as two writes when the
//! transport is not vectored, still leave in one `writev`. A write that does not fit goes
//! out at once, behind whatever is held, in the same system call.
//!
//! Correctness does not depend on h2's thresholds; only the number of writes does.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The most bytes [`Conn`] holds back until the next flush: far above any unary answer's
/// frames, far below one streamed output chunk (256 KiB), which is never copied.
pub const COMBINE_LIMIT: usize = 16 << 10;

/// A server-side TCP connection that combines small writes until the next flush (see the
/// module documentation).
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    /// Bytes accepted from the writer and not yet written to the socket, in order.
    held: Vec<u8>,
}

impl Conn {
    /// Wraps an accepted stream; its socket options (`TCP_NODELAY`) are left as they are.
    pub fn new(stream: TcpStream) -> Self {
        Conn {
            stream,
            held: Vec::new(),
        }
    }

    /// Writes the held bytes, then as much of `buf` as the socket takes in the same system
    /// call, and returns how many bytes of `buf` were written (possibly 0, when only held
    /// bytes were).
    fn poll_write_behind_held(
        &mut self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = Pin::new(&mut self.stream);
        let n = if buf.is_empty() {
            ready!(stream.poll_write(cx, &self.held))?
        } else {
            let bufs = [IoSlice::new(&self.held), IoSlice::new(buf)];
            ready!(stream.poll_write_vectored(cx, &bufs))?
        };
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        let from_held = n.min(self.held.len());
        self.held.drain(..from_held);
        Poll::Ready(Ok(n - from_held))
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.held.len() + buf.len() <= COMBINE_LIMIT {
            me.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        while !me.held.is_empty() {
            let n = ready!(me.poll_write_behind_held(cx, buf))?;
            if n > 0 {
                return Poll::Ready(Ok(n));
            }
        }
        Pin::new(&mut me.stream).poll_write(cx, buf)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        while !me.held.is_empty() {
            ready!(me.poll_write_behind_held(cx, &[]))?;
        }
        Pin::new(&mut me.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair over loopback: the accepted side wrapped in [`Conn`], and the client.
    async fn pair() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (accepted, client) = tokio::join!(listener.accept(), client);
        (Conn::new(accepted.unwrap().0), client.unwrap())
    }

    /// Whether `stream` has bytes to read within a short wait.
    async fn readable_soon(stream: &TcpStream) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(50), stream.readable())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn small_writes_are_held_until_the_flush() {
        let (mut conn, mut client) = pair().await;
        conn.write_all(b"head").await.unwrap();
        conn.write_all(b"er and body").await.unwrap();
        assert!(
            !readable_soon(&client).await,
            "held bytes reached the peer before the flush"
        );
        conn.flush().await.unwrap();
        let mut got = [0u8; 15];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"header and body");
    }

    #[tokio::test]
    async fn a_large_write_goes_out_at_once_behind_what_is_held() {
        let (mut conn, mut client) = pair().await;
        conn.write_all(b"frame head").await.unwrap();
        let payload = vec![7u8; COMBINE_LIMIT + 1];
        conn.write_all(&payload).await.unwrap();
        // No flush: a write over the limit is not held, and it carries the held bytes along.
        let mut got = vec![0u8; 10 + payload.len()];
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            client.read_exact(&mut got),
        )
        .await
        .expect("the large write was held")
        .unwrap();
        assert_eq!(&got[..10], b"frame head");
        assert!(got[10..].iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn bytes_arrive_in_order_through_a_full_socket() {
        // A reader slower than the writer fills the socket buffers, so writes come back
        // partial and pending, with and without held bytes in front of them.
        let (mut conn, mut client) = pair().await;
        let sizes = [
            1usize,
            9,
            300,
            5_000,
            16_384,
            9,
            200_000,
            3,
            70_000,
            1_000,
            9,
            1 << 20,
            17,
        ];
        let mut expected = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            expected.extend((0..*size).map(|j| (i * 31 + j) as u8));
        }
        let total = expected.len();
        let reader = tokio::spawn(async move {
            let mut got = Vec::with_capacity(total);
            let mut chunk = vec![0u8; 4096];
            while got.len() < total {
                let n = client.read(&mut chunk).await.unwrap();
                assert!(n > 0, "connection closed early");
                got.extend_from_slice(&chunk[..n]);
            }
            got
        });
        let mut offset = 0;
        for (i, size) in sizes.iter().enumerate() {
            conn.write_all(&expected[offset..offset + size])
                .await
                .unwrap();
            offset += size;
            if i % 3 == 2 {
                conn.flush().await.unwrap();
            }
        }
        conn.shutdown().await.unwrap();
        let got = reader.await.unwrap();
        assert!(got == expected, "bytes were lost, duplicated or reordered");
    }
}
