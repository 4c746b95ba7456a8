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
