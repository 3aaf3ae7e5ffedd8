//! The pods the cluster no longer lists, kept for a while so that the edges of their
//! lifetime keep resolving to them (and an address they held never moves those edges to
//! its next holder). Agents keep an edge for up to an hour after its last flow, so the
//! default retention is longer than that; a cap bounds memory whatever the churn.

use std::collections::VecDeque;
use std::time::Duration;

use ne_flow::flow::Timestamp;
use ne_policy::resolve::GonePod;

/// Why a gone pod was forgotten. Bounded, for a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Older than the retention.
    Expired,
    /// Pushed out by newer ones at the cap.
    Capacity,
}

impl Eviction {
    pub fn as_str(self) -> &'static str {
        match self {
            Eviction::Expired => "expired",
            Eviction::Capacity => "capacity",
        }
    }
}

/// Gone pods, oldest first, bounded by age and count.
#[derive(Debug)]
pub struct PodHistory {
    gone: VecDeque<GonePod>,
    retention: Duration,
    capacity: usize,
    /// Sum of the entries' heap bytes plus their own size.
    bytes: usize,
}

impl PodHistory {
    pub fn new(retention: Duration, capacity: usize) -> Self {
        PodHistory {
            gone: VecDeque::new(),
            retention,
            capacity,
            bytes: 0,
        }
    }

    fn cost(pod: &GonePod) -> usize {
        size_of::<GonePod>() + pod.heap_bytes()
    }

    /// Adds the pods that went away; forgets the expired and those past the cap. Returns
    /// how many were forgotten, by reason.
    pub fn record(&mut self, gone: Vec<GonePod>, now: Timestamp) -> Vec<(Eviction, u64)> {
        for pod in gone {
            self.bytes += Self::cost(&pod);
            self.gone.push_back(pod);
        }
        let mut evicted = Vec::new();
        let horizon = now
            .0
            .saturating_sub(i64::try_from(self.retention.as_nanos()).unwrap_or(i64::MAX));
        let expired = self.forget_while(|pod, _| pod.ended().0 < horizon);
        let capacity = self.capacity;
        let full = self.forget_while(|_, len| len > capacity);
        for (why, n) in [(Eviction::Expired, expired), (Eviction::Capacity, full)] {
            if n > 0 {
                evicted.push((why, n));
            }
        }
        evicted
    }

    /// Forgets the oldest entries while `forget(oldest, len)` holds.
    fn forget_while(&mut self, forget: impl Fn(&GonePod, usize) -> bool) -> u64 {
        let mut n = 0;
        while let Some(oldest) = self.gone.front() {
            if !forget(oldest, self.gone.len()) {
                break;
            }
            self.bytes -= Self::cost(oldest);
            self.gone.pop_front();
            n += 1;
        }
        n
    }

    /// The gone pods, oldest first.
    pub fn pods(&self) -> impl Iterator<Item = &GonePod> {
        self.gone.iter()
    }

    pub fn len(&self) -> usize {
        self.gone.len()
    }

    /// An estimate of the memory held (entries and what they point to).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
