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
    /// the pods forgotten, oldest first, each with the reason.
    pub fn record(&mut self, gone: Vec<GonePod>, now: Timestamp) -> Vec<(Eviction, GonePod)> {
        for pod in gone {
            self.bytes += Self::cost(&pod);
            self.gone.push_back(pod);
        }
        let mut evicted = Vec::new();
        let horizon = now
            .0
            .saturating_sub(i64::try_from(self.retention.as_nanos()).unwrap_or(i64::MAX));
        self.forget_while(&mut evicted, Eviction::Expired, |pod, _| {
            pod.ended().0 < horizon
        });
        let capacity = self.capacity;
        self.forget_while(&mut evicted, Eviction::Capacity, |_, len| len > capacity);
        evicted
    }

    /// Forgets the oldest entries while `forget(oldest, len)` holds, into `out`.
    fn forget_while(
        &mut self,
        out: &mut Vec<(Eviction, GonePod)>,
        why: Eviction,
        forget: impl Fn(&GonePod, usize) -> bool,
    ) {
        while let Some(oldest) = self.gone.front() {
            if !forget(oldest, self.gone.len()) {
                break;
            }
            self.bytes -= Self::cost(oldest);
            if let Some(pod) = self.gone.pop_front() {
                out.push((why, pod));
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use ne_policy::resolve::{ClusterObjects, ClusterSnapshot};

    const SECOND: i64 = 1_000_000_000;

    /// `n` pods that went away at `at` (nanoseconds).
    fn gone(names: &[&str], at: i64) -> Vec<GonePod> {
        let pods = names
            .iter()
            .map(|name| {
                std::sync::Arc::new(
                    serde_json::from_value::<Pod>(serde_json::json!({
                        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
                                     "labels": {"app": name}},
                        "status": {"podIP": "10.0.0.1"},
                    }))
                    .unwrap(),
                )
            })
            .collect();
        let objects = ClusterObjects {
            pods,
            ..ClusterObjects::default()
        };
        let (before, _) = ClusterSnapshot::from_objects(objects, []);
        let (after, _) = ClusterSnapshot::from_objects(ClusterObjects::default(), []);
        before.gone_since(&after, Timestamp(at))
    }

    #[test]
    fn pods_are_forgotten_when_expired_or_pushed_out_and_their_bytes_with_them() {
        let mut h = PodHistory::new(Duration::from_secs(60), 3);
        assert!(
            h.record(gone(&["a", "b"], 100 * SECOND), Timestamp(100 * SECOND))
                .is_empty()
        );
        assert_eq!(h.len(), 2);
        let two = h.bytes();
        assert!(two > 2 * size_of::<GonePod>(), "names and labels count too");

        let forgotten = |evicted: Vec<(Eviction, GonePod)>| -> Vec<(Eviction, String)> {
            evicted
                .into_iter()
                .map(|(why, p)| (why, p.name()))
                .collect()
        };
        // Two more: the cap of three pushes the oldest out.
        let evicted = h.record(gone(&["c", "d"], 120 * SECOND), Timestamp(120 * SECOND));
        assert_eq!(
            forgotten(evicted),
            [(Eviction::Capacity, "shop/a".to_owned())]
        );
        let names: Vec<String> = h.pods().map(GonePod::name).collect();
        assert_eq!(names, ["shop/b", "shop/c", "shop/d"]);

        // A minute after b went: b expires, c and d stay.
        let evicted = h.record(Vec::new(), Timestamp(161 * SECOND));
        assert_eq!(
            forgotten(evicted),
            [(Eviction::Expired, "shop/b".to_owned())]
        );
        assert_eq!(h.len(), 2);
        let evicted = h.record(Vec::new(), Timestamp(1000 * SECOND));
        assert_eq!(
            forgotten(evicted),
            [
                (Eviction::Expired, "shop/c".to_owned()),
                (Eviction::Expired, "shop/d".to_owned())
            ]
        );
        assert_eq!((h.len(), h.bytes()), (0, 0));
    }
}
