//! Flow sources. Each runs until the shutdown signal, feeding a [`crate::sink::FlowSink`],
//! and never gives up on a broken input: it counts, logs, waits and tries again.

pub mod backoff;
pub mod file;
pub mod goldmane;
pub mod hubble;
/// Client TLS files (shared with the OTLP exporter).
pub mod tls {
    pub use ne_telemetry::tls::TlsFiles;
}
pub mod ztunnel;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

/// Tells a source to stop, and whether it is ready (connected / reading).
///
/// Blocking sources poll [`SourceState::stopping`]; async sources also await
/// [`SourceState::stopped`] beside their stream in a `select!`.
#[derive(Clone, Debug)]
pub struct SourceState {
    shutdown: Arc<AtomicBool>,
    shutdown_tx: Arc<watch::Sender<bool>>,
    ready: Arc<AtomicBool>,
}

impl Default for SourceState {
    fn default() -> Self {
        SourceState {
            shutdown: Arc::default(),
            shutdown_tx: Arc::new(watch::Sender::new(false)),
            ready: Arc::default(),
        }
    }
}

impl SourceState {
    /// Asks the source to stop at its next check, and wakes every [`SourceState::stopped`].
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
        self.shutdown_tx.send_replace(true);
    }

    /// Whether the source was asked to stop.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Completes once the source is asked to stop (at once if it already was).
    pub async fn stopped(&self) {
        let mut rx = self.shutdown_tx.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Marks the source (dis)connected; `/readyz` reports it.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the source is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The flag `/readyz` reads.
    pub fn ready_flag(&self) -> Arc<AtomicBool> {
        self.ready.clone()
    }
}

/// Waits for a condition in a test without sleeping: yields until it holds, or fails
/// after 10 s.
#[cfg(test)]
pub(crate) fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_wakes_waiters_and_completes_after_the_fact() {
        let state = SourceState::default();
        let waiter = tokio::spawn({
            let state = state.clone();
            async move { state.stopped().await }
        });
        assert!(!state.stopping());
        state.shut_down();
        waiter.await.unwrap();
        assert!(state.stopping());
        // A late waiter does not hang.
        state.stopped().await;
    }
}
