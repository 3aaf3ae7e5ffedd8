//! Who held an address when: every pod given an address, as a timeline per address, so
//! that an endpoint known only by its address resolves to the pod that held it while the
//! edge was seen, never to a later holder.

use std::net::IpAddr;

use super::index::held;
use super::{ClusterSnapshot, PodEntry, Slot};
use crate::resolve::{Seen, Unresolved};

/// One pod's hold on an address: from `start` (inclusive) to `end` (exclusive), in
/// nanoseconds; `i64::MIN` / `i64::MAX` when not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    start: i64,
    end: i64,
    slot: Slot,
}

/// The holders of one address: the pods given it (slots), and their holds ordered by
/// start, none overlapping another.
#[derive(Clone, Debug, Default)]
pub(super) struct Holders {
    held: Vec<Held>,
    members: Vec<usize>,
}

impl Holders {
    pub(super) fn add(&mut self, i: usize) {
        self.members.push(i);
    }

    pub(super) fn drop_member(&mut self, i: usize) {
        super::index::drop_one(&mut self.members, &i);
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The holds again from the members' lives.
    pub(super) fn settle(&mut self, pods: &[Option<PodEntry>]) {
        self.held.clear();
        self.held.extend(self.members.iter().map(|&i| {
            let pod = held(pods, i);
            Held {
                start: pod.life.start.unwrap_or(i64::MIN),
                end: pod.life.end.unwrap_or(i64::MAX),
                slot: Slot::Pod(i),
            }
        }));
        order(&mut self.held);
    }
}

/// Orders the holds and ends each at the next one's start: an address belongs to one pod
/// at a time. Holds that start together cannot be told apart.
fn order(held: &mut Vec<Held>) {
    held.sort_by_key(|h| h.start);
    held.dedup_by(|later, kept| {
        let same = later.start == kept.start;
        if same {
            kept.end = kept.end.max(later.end);
            kept.slot = Slot::Ambiguous;
        }
        same
    });
    for i in 1..held.len() {
        let next = held[i].start;
        held[i - 1].end = held[i - 1].end.min(next);
    }
}

impl Holders {
    /// The holds, in order (for tests comparing two snapshots).
    #[cfg(test)]
    pub(super) fn holds(&self) -> impl Iterator<Item = (i64, i64, Slot)> + '_ {
        self.held.iter().map(|h| (h.start, h.end, h.slot))
    }

    /// The holder during `seen`: `Ok` when one pod held the address the whole window,
    /// `AddressNotHeld` when none did at any moment of it, `AddressReused` otherwise. With
    /// no time known, the only holder there ever was.
    fn during(&self, seen: Seen) -> Result<Slot, Unresolved> {
        let Some((first, last)) = seen.window() else {
            return match self.held.as_slice() {
                [only] => Ok(only.slot),
                _ => Err(Unresolved::Ambiguous),
            };
        };
        let mut overlapping = self
            .held
            .iter()
            .filter(|h| h.start <= last && h.end > first);
        match (overlapping.next(), overlapping.next()) {
            (None, _) => Err(Unresolved::AddressNotHeld),
            (Some(h), None) if h.start <= first && h.end > last => Ok(h.slot),
            _ => Err(Unresolved::AddressReused),
        }
    }
}

impl ClusterSnapshot {
    /// Who held `ip` while `seen`; `None` when no known pod ever held it (an address
    /// outside the cluster's pods).
    pub(super) fn holder(&self, ip: &IpAddr, seen: Seen) -> Option<Result<Slot, Unresolved>> {
        Some(self.by_ip.get(ip)?.during(seen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ne_flow::flow::Timestamp;

    fn held(start: i64, end: i64, pod: usize) -> Held {
        Held {
            start,
            end,
            slot: Slot::Pod(pod),
        }
    }

    fn settled(mut holds: Vec<Held>) -> Holders {
        order(&mut holds);
        Holders {
            held: holds,
            members: Vec::new(),
        }
    }

    fn seen(first: i64, last: i64) -> Seen {
        Seen::between(Timestamp(first), Timestamp(last))
    }

    #[test]
    fn each_hold_ends_at_the_next_start() {
        let h = settled(vec![held(50, i64::MAX, 1), held(10, i64::MAX, 0)]);
        assert_eq!(h.held, vec![held(10, 50, 0), held(50, i64::MAX, 1)]);
        assert_eq!(h.during(seen(10, 49)), Ok(Slot::Pod(0)));
        assert_eq!(h.during(seen(50, 90)), Ok(Slot::Pod(1)));
        assert_eq!(h.during(seen(40, 60)), Err(Unresolved::AddressReused));
        assert_eq!(h.during(seen(5, 9)), Err(Unresolved::AddressNotHeld));
        // Part of the window before the only holder started: not all of it is that pod's.
        assert_eq!(h.during(seen(5, 20)), Err(Unresolved::AddressReused));
        assert_eq!(h.during(Seen::UNKNOWN), Err(Unresolved::Ambiguous));
    }

    #[test]
    fn a_gap_between_holders_is_held_by_none() {
        let h = settled(vec![held(10, 20, 0), held(30, i64::MAX, 1)]);
        assert_eq!(h.during(seen(22, 28)), Err(Unresolved::AddressNotHeld));
        assert_eq!(h.during(seen(22, 31)), Err(Unresolved::AddressReused));
        assert_eq!(h.during(seen(1, 35)), Err(Unresolved::AddressReused));
    }

    #[test]
    fn holders_starting_together_are_ambiguous() {
        let h = settled(vec![held(10, 20, 0), held(10, 40, 1)]);
        assert_eq!(
            h.held,
            vec![Held {
                start: 10,
                end: 40,
                slot: Slot::Ambiguous
            }]
        );
        assert_eq!(h.during(seen(12, 13)), Ok(Slot::Ambiguous));
    }

    #[test]
    fn one_holder_of_unknown_times_covers_every_window() {
        let h = settled(vec![held(i64::MIN, i64::MAX, 3)]);
        assert_eq!(h.during(Seen::UNKNOWN), Ok(Slot::Pod(3)));
        assert_eq!(h.during(seen(1, 2)), Ok(Slot::Pod(3)));
        // A window with only its end known is taken at its end.
        assert_eq!(h.during(seen(0, 7)), Ok(Slot::Pod(3)));
    }
}
