//! The write budget: a token bucket over the API writes of every round.

use tokio::time::Instant;

/// A token bucket: `rate` writes per second, bursts of `burst`.
#[derive(Debug)]
pub struct Budget {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    pub fn new(rate: f64, burst: u32) -> Self {
        Budget {
            rate,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: Instant::now(),
        }
    }

    pub(super) fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}
