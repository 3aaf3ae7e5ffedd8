//! Each agent's budget of ingest work: a token bucket of batch bytes per agent id, kept
//! across its streams, so that no authenticated agent takes more than its share of the
//! leader's decoding however fast it sends or reconnects.
//!
//! A batch is charged its encoded size before it is decoded. An agent within its budget
//! waits for nothing; one over it has its next batch held until the bucket has refilled
//! at `rate`: the leader stops reading that stream, HTTP/2 flow control holds the agent's
//! sender, and the agent's table keeps aggregating meanwhile, so nothing is lost. A full
//! bucket holds `burst` bytes, enough for a large node's snapshot after a reconnect.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use ne_policy::index::AgentId;
use tokio::time::Instant;

/// The buckets of every agent that sent a batch recently.
#[derive(Debug)]
pub struct AgentBudgets {
    /// Bytes per second each bucket refills by.
    rate: f64,
    /// Bytes a full bucket holds.
    burst: f64,
    /// Most buckets kept before full ones are forgotten (a forgotten bucket is a full one).
    capacity: usize,
    buckets: Mutex<HashMap<AgentId, Bucket>>,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Bytes left; below zero, the debt the agent waits off.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, now: Instant, rate: f64, burst: f64) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(burst);
        self.at = now;
    }
}

impl AgentBudgets {
    /// Buckets of `burst` bytes refilled at `rate` bytes per second (at least one byte
    /// each); at most `capacity` are kept before full ones are forgotten.
    pub fn new(rate: u64, burst: u64, capacity: usize) -> Self {
        AgentBudgets {
            rate: rate.max(1) as f64,
            burst: burst.max(1) as f64,
            capacity: capacity.max(1),
            buckets: Mutex::default(),
        }
    }

    /// Charges `bytes` to `agent` at `now`; the answer is how long the agent waits before
    /// the work is done (zero within its budget). The debt is the agent's until it is
    /// paid: a sender that keeps going only adds to its own wait.
    pub fn charge(&self, agent: &AgentId, bytes: usize, now: Instant) -> Duration {
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= self.capacity && !buckets.contains_key(agent) {
            self.forget_full(&mut buckets, now);
        }
        let bucket = buckets.entry(agent.clone()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        bucket.refill(now, self.rate, self.burst);
        bucket.tokens -= bytes as f64;
        if bucket.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / self.rate)
        }
    }

    /// Drops the buckets that have refilled: a new one starts full, the same.
    fn forget_full(&self, buckets: &mut HashMap<AgentId, Bucket>, now: Instant) {
        buckets.retain(|_, b| {
            b.refill(now, self.rate, self.burst);
            b.tokens < self.burst
        });
    }

    /// Buckets kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(name: &str) -> AgentId {
        AgentId::from(name)
    }

    #[test]
    fn an_agent_within_its_burst_never_waits() {
        let budgets = AgentBudgets::new(1_000, 10_000, 16);
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(budgets.charge(&agent("a"), 1_000, now), Duration::ZERO);
        }
    }

    #[test]
    fn past_its_burst_an_agent_waits_off_its_debt_at_the_rate() {
        let budgets = AgentBudgets::new(1_000, 10_000, 16);
        let now = Instant::now();
        assert_eq!(budgets.charge(&agent("a"), 10_000, now), Duration::ZERO);
        // 500 bytes over: half a second at 1 000 bytes per second.
        assert_eq!(
            budgets.charge(&agent("a"), 500, now),
            Duration::from_millis(500)
        );
        // Sending on adds to the debt instead of slipping through.
        assert_eq!(
            budgets.charge(&agent("a"), 1_000, now),
            Duration::from_millis(1_500)
        );
        // Once the wait is over the debt is paid, and the rate is what refills.
        let later = now + Duration::from_millis(1_500);
        assert_eq!(budgets.charge(&agent("a"), 0, later), Duration::ZERO);
        assert_eq!(
            budgets.charge(&agent("a"), 100, later),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn agents_have_buckets_of_their_own() {
        let budgets = AgentBudgets::new(1_000, 10_000, 16);
        let now = Instant::now();
        assert!(budgets.charge(&agent("flood"), 50_000, now) > Duration::ZERO);
        assert_eq!(budgets.charge(&agent("quiet"), 5_000, now), Duration::ZERO);
    }

    #[test]
    fn an_idle_bucket_refills_to_its_burst_and_no_further() {
        let budgets = AgentBudgets::new(1_000, 10_000, 16);
        let now = Instant::now();
        budgets.charge(&agent("a"), 10_000, now);
        let much_later = now + Duration::from_secs(3_600);
        assert_eq!(
            budgets.charge(&agent("a"), 10_000, much_later),
            Duration::ZERO
        );
        assert_eq!(
            budgets.charge(&agent("a"), 1_000, much_later),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn at_capacity_full_buckets_are_forgotten_and_debts_kept() {
        let budgets = AgentBudgets::new(1_000, 10_000, 2);
        let now = Instant::now();
        budgets.charge(&agent("debtor"), 20_000, now);
        budgets.charge(&agent("idle"), 1_000, now);
        // A second later "idle" has refilled; "debtor" still owes 9 s.
        let later = now + Duration::from_secs(1);
        budgets.charge(&agent("new"), 0, later);
        assert_eq!(budgets.len(), 2);
        assert_eq!(
            budgets.charge(&agent("debtor"), 0, later),
            Duration::from_secs(9)
        );
    }
}
