//! Flow sources. Each runs until the shutdown signal, feeding a [`crate::sink::FlowSink`],
//! and never gives up on a broken input: it counts, logs, waits and tries again.

pub mod backoff;
pub mod file;
pub mod hubble;
pub mod tls;
pub mod ztunnel;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Tells a source to stop, and whether it is ready (connected / reading).
#[derive(Clone, Debug, Default)]
pub struct SourceState {
    shutdown: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
}

impl SourceState {
    /// Asks the source to stop at its next check.
    pub fn shut_down(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }

    /// Whether the source was asked to stop.
    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }

    /// Marks the source (dis)connected; `/readyz` reports it.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// The flag `/readyz` reads.
    pub fn ready_flag(&self) -> Arc<AtomicBool> {
        self.ready.clone()
    }
}
