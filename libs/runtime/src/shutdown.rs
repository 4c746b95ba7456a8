//! Shutdown signals: the first SIGTERM/SIGINT starts a graceful drain, a second exits at once.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// A cloneable handle that resolves once shutdown begins.
#[derive(Clone, Debug)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

/// The sending side: trigger it to begin shutdown (tests do this instead of a signal).
#[derive(Debug)]
pub struct Trigger {
    tx: watch::Sender<bool>,
}

/// A pair of trigger and handle.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger { tx }, Shutdown { rx })
}

impl Trigger {
    /// Begins shutdown.
    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }
}

impl Shutdown {
    /// A handle that never fires.
    pub fn never() -> Self {
        let (tx, rx) = watch::channel(false);
        std::mem::forget(tx);
        Shutdown { rx }
    }

    /// Resolves once shutdown has begun.
    pub async fn wait(mut self) {
        let _ = self.rx.wait_for(|v| *v).await;
    }

    /// Whether shutdown has begun.
    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }
}

/// Installs SIGTERM/SIGINT handling: the first signal triggers the returned handle, a
/// second one exits the process immediately with status 130.
pub fn on_signals() -> std::io::Result<Shutdown> {
    let (trigger, handle) = channel();
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("shutdown signal received; draining (send again to exit at once)");
        trigger.trigger();
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!("second shutdown signal; exiting now");
        std::process::exit(130);
    });
    Ok(handle)
}

/// Runs `fut` to completion or gives up after `grace`, returning whether it finished.
pub async fn drain_within<F: std::future::Future<Output = ()>>(grace: Duration, fut: F) -> bool {
    tokio::time::timeout(grace, fut).await.is_ok()
}

/// Drives `server` until it ends or `shutdown` fires; then runs `on_drain` (mark health
/// NOT_SERVING) and lets in-flight calls finish for at most `grace`.
///
/// Returns whether the drain completed within the grace period.
pub async fn serve_until<F, E>(
    server: F,
    shutdown: Shutdown,
    grace: Duration,
    on_drain: impl std::future::Future<Output = ()>,
) -> Result<bool, E>
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result.map(|()| true),
        () = shutdown.wait() => {}
    }
    on_drain.await;
    let drained = drain_within(grace, async {
        if let Err(e) = (&mut server).await {
            tracing::warn!(error = %e, "server stopped with an error while draining");
        }
    })
    .await;
    if drained {
        tracing::info!("drained and stopped");
    } else {
        tracing::warn!(?grace, "grace period over; abandoning in-flight calls");
    }
    Ok(drained)
}
