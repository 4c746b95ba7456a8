//! One accepted connection ([`ServerConn`]): plain or TLS, holding its connection slot,
//! closing itself once it has had no open stream for the idle timeout, or sooner when it has
//! not begun a first request within the first-request timeout. [`ActivityLayer`]
//! counts the open streams it sees through [`ConnInfo`], which tonic hands every request.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::Connected;

use super::{Slot, Timeouts};
use crate::grpc::Conn;

/// What every request learns about its connection (from its extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// The address the connection was accepted on.
    pub local: Option<SocketAddr>,
    /// The client certificate chain, when the peer presented one the client CA verified.
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    /// The connection's open streams.
    pub activity: Arc<Activity>,
}

/// A connection's open streams and when the last one closed.
#[derive(Debug)]
pub struct Activity {
    open: AtomicUsize,
    /// Whether a stream was ever opened.
    began: AtomicBool,
    /// Milliseconds since `epoch` when the count last went to zero.
    last_idle_ms: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn new() -> Self {
        Activity {
            open: AtomicUsize::new(0),
            began: AtomicBool::new(false),
            last_idle_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Streams open on the connection now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    fn opened(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.began.store(true, Ordering::Release);
        StreamGuard(self.clone())
    }

    /// When the connection became idle (no open stream), or `None` while it has one.
    fn idle_since(&self) -> Option<Instant> {
        if self.open() > 0 {
            return None;
        }
        Some(self.epoch + Duration::from_millis(self.last_idle_ms.load(Ordering::Acquire)))
    }
}

/// One open stream; closing it (dropping the response body, or the call before it
/// answered) may make the connection idle.
struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = u64::try_from(a.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.last_idle_ms.store(ms, Ordering::Release);
        a.open.fetch_sub(1, Ordering::AcqRel);
    }
}

enum Io {
    Plain(Conn),
    Tls(Box<tokio_rustls::server::TlsStream<Conn>>),
}

/// An accepted connection (see the module documentation).
pub struct ServerConn {
    io: Io,
    info: ConnInfo,
    timeouts: Timeouts,
    timer: Pin<Box<Sleep>>,
    /// Its place in the connection limits (see `Transport::incoming`).
    _slot: Slot,
}

impl std::fmt::Debug for ServerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConn")
            .field("remote", &self.info.remote)
            .field("tls", &matches!(self.io, Io::Tls(_)))
            .finish_non_exhaustive()
    }
}

impl ServerConn {
    pub(super) fn plain(
        conn: Conn,
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
        timeouts: Timeouts,
        slot: Slot,
    ) -> Self {
        Self::new(Io::Plain(conn), remote, local, None, timeouts, slot)
    }

    pub(super) fn tls(
        stream: tokio_rustls::server::TlsStream<Conn>,
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
        timeouts: Timeouts,
        slot: Slot,
    ) -> Self {
        let certs = stream
            .get_ref()
            .1
            .peer_certificates()
            .filter(|c| !c.is_empty())
            .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect()));
        Self::new(
            Io::Tls(Box::new(stream)),
            remote,
            local,
            certs,
            timeouts,
            slot,
        )
    }

    fn new(
        io: Io,
        remote: Option<SocketAddr>,
        local: Option<SocketAddr>,
        peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
        timeouts: Timeouts,
        slot: Slot,
    ) -> Self {
        ServerConn {
            io,
            info: ConnInfo {
                remote,
                local,
                peer_certs,
                activity: Arc::new(Activity::new()),
            },
            timeouts,
            timer: Box::pin(tokio::time::sleep(
                timeouts.idle.min(timeouts.first_request),
            )),
            _slot: slot,
        }
    }

    /// Whether the idle timeout (or, before any stream, the first-request timeout) has
    /// passed; re-arms the timer otherwise.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            let now = Instant::now();
            let Timeouts {
                idle,
                first_request,
            } = self.timeouts;
            let activity = &self.info.activity;
            let due = match activity.idle_since() {
                // Never used: `idle_since` is when it was accepted.
                Some(since) if !activity.began.load(Ordering::Acquire) => {
                    since + idle.min(first_request)
                }
                Some(since) => since + idle,
                None => now + idle,
            };
            if due <= now {
                return true;
            }
            self.timer.as_mut().reset(due);
        }
    }
}

impl Connected for ServerConn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for ServerConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let r = match &mut me.io {
            Io::Plain(c) => Pin::new(c).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        if r.is_ready() {
            return r;
        }
        if me.poll_idle(cx) {
            // End of stream: the HTTP/2 connection closes, with no stream to lose.
            tracing::debug!(remote = ?me.info.remote, "closing an idle connection (or one that never began a request)");
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl AsyncWrite for ServerConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(c) => Pin::new(c).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(c) => Pin::new(c).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(c) => c.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(c) => Pin::new(c).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(c) => Pin::new(c).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// See [`super::Transport::layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivityLayer;

impl<S> tower::Layer<S> for ActivityLayer {
    type Service = ActivityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ActivityService { inner }
    }
}

/// The service [`ActivityLayer`] wraps.
#[derive(Debug, Clone)]
pub struct ActivityService<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for ActivityService<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<ActivityBody<ResBody>>;
    type Error = S::Error;
    type Future = ActivityFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<ConnInfo>()
            .map(|c| c.activity.opened());
        ActivityFuture {
            future: self.inner.call(request),
            guard,
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`ActivityService`]: the stream stays counted until the body ends.
    pub struct ActivityFuture<F> {
        #[pin]
        future: F,
        guard: Option<StreamGuard>,
    }
}

impl<F, B, E> Future for ActivityFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<ActivityBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.project();
        let response = ready!(me.future.poll(cx))?;
        let guard = me.guard.take();
        Poll::Ready(Ok(response.map(|body| ActivityBody { body, guard })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its stream counted as open until it is dropped.
    pub struct ActivityBody<B> {
        #[pin]
        body: B,
        guard: Option<StreamGuard>,
    }
}

impl<B: http_body::Body> http_body::Body for ActivityBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl<B: Default> Default for ActivityBody<B> {
    fn default() -> Self {
        ActivityBody {
            body: B::default(),
            guard: None,
        }
    }
}
