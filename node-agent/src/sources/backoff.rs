//! Reconnect delays: capped exponential backoff with full jitter, reset once a stream
//! has delivered data. No random crate: a xorshift seeded from the clock and the process
//! is plenty to spread reconnects of many agents.

use std::time::Duration;

/// Delays between reconnect attempts.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    rng: u64,
}

impl Backoff {
    /// Starts at `base`, doubling up to `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        let seed = crate::sink::now_nanos() as u64 ^ (u64::from(std::process::id()) << 32);
        Backoff {
            base,
            cap,
            attempt: 0,
            rng: seed | 1,
        }
    }

    /// The default for data-plane streams: 250 ms doubling to 30 s.
    pub fn for_streams() -> Self {
        Backoff::new(Duration::from_millis(250), Duration::from_secs(30))
    }

    /// The next delay: uniform in `[ceiling / 2, ceiling]` with `ceiling = min(cap, base·2ⁿ)`,
    /// so that agents restarted together do not reconnect together.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let jitter = self.next_random() % (half.as_nanos() as u64).max(1);
        half + Duration::from_nanos(jitter)
    }

    /// A stream delivered data: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        let ceilings = [100, 200, 400, 800, 1600, 2000, 2000, 2000];
        for (d, c) in delays.iter().zip(ceilings) {
            let c = Duration::from_millis(c);
            assert!(*d >= c / 2 && *d <= c, "{d:?} outside [{:?}, {c:?}]", c / 2);
        }
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn many_attempts_never_overflow() {
        let mut b = Backoff::for_streams();
        for _ in 0..1000 {
            assert!(b.next_delay() <= Duration::from_secs(30));
        }
    }
}
