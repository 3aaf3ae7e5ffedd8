//! A policy's violation record: pure functions from (status, observations, annotations,
//! now) to the next status and what happened, so the writer can emit exactly one log
//! event per new or changed record and per acknowledgement.
//!
//! Observations carry cumulative totals (the merged index counts every flow of a tuple
//! since its agents first saw it), so merging the same observation twice changes nothing,
//! and a record's count is the largest total seen. A record stays until acknowledged; once
//! acknowledged, only traffic seen after the acknowledged record's last sighting makes a
//! new record (with a new id).

use std::collections::BTreeMap;
use std::hash::BuildHasher as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ne_crds::{
    ACKNOWLEDGE_ANNOTATION_PREFIX, AcknowledgedViolation, MAX_VIOLATION_RECORDS, Mode,
    PolicyDirection, ViolationReason, ViolationRecord, WorkloadEndpointRef,
    WorkloadNetworkPolicyStatus,
};

/// The port of an observation whose report names none.
pub const UNKNOWN_PORT: i32 = 0;

/// Traffic of one tuple that a policy does not allow, as detected so far.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub source: WorkloadEndpointRef,
    pub destination: WorkloadEndpointRef,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// The server port, or [`UNKNOWN_PORT`] when the report does not say (ztunnel's dry-run
    /// lines): such an observation joins a record of the same tuple on any port, and a
    /// record made from it takes the port of the first report that has one.
    pub port: i32,
    pub direction: PolicyDirection,
    pub mode: Mode,
    /// Flows of the tuple seen so far (a cumulative total).
    pub count: i64,
    pub first_seen: Time,
    pub last_seen: Time,
    /// Why the traffic is a violation, and that in words for the record.
    pub reason: ViolationReason,
    pub message: String,
    /// The policy the data plane blamed for a denial, when it named one.
    pub denied_by: Option<String>,
}

/// One end of a record as it identifies the record: a workload by namespace, kind and
/// name (its pod addresses and mesh identity are details that may differ between reports
/// of the same traffic, e.g. a ztunnel dry-run line has no identity), anything else by
/// its address.
type Party<'a> = (
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

fn party(e: &WorkloadEndpointRef) -> Party<'_> {
    let named = e.name.is_some();
    (
        e.namespace.as_deref(),
        e.kind.as_deref(),
        e.name.as_deref(),
        if named { None } else { e.ip.as_deref() },
    )
}

/// What identifies a record.
type Key<'a> = (Party<'a>, Party<'a>, &'a str, i32, PolicyDirection, Mode);

fn key_of(r: &ViolationRecord) -> Key<'_> {
    (
        party(&r.source),
        party(&r.destination),
        r.protocol.as_str(),
        r.port,
        r.direction,
        r.mode,
    )
}

fn key_of_observation(o: &Observation) -> Key<'_> {
    (
        party(&o.source),
        party(&o.destination),
        o.protocol.as_str(),
        o.port,
        o.direction,
        o.mode,
    )
}

/// The key without the port: a record whose port is not known yet ([`UNKNOWN_PORT`])
/// matches any port of the same tuple, and the first known port is written into it.
fn same_but_port(a: &Key<'_>, b: &Key<'_>) -> bool {
    (a.0, a.1, a.2, a.4, a.5) == (b.0, b.1, b.2, b.4, b.5)
}

/// The result of [`merge`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    pub status: WorkloadNetworkPolicyStatus,
    /// Ids of records created by this merge.
    pub new: Vec<i64>,
    /// Ids of existing records whose count or times changed.
    pub updated: Vec<i64>,
}

fn later(a: &Time, b: &Time) -> Time {
    if b.0 > a.0 { b.clone() } else { a.clone() }
}

fn earlier(a: &Time, b: &Time) -> Time {
    if b.0 < a.0 { b.clone() } else { a.clone() }
}

/// Where the records of a status are, by the hash of their key and of their key without
/// the port (what a record of an unknown port matches by): each hash's indexes in
/// ascending order, so that the first record that matches is the one a scan would find.
/// Hashes only point at candidates; every candidate's key is compared (so a record whose
/// port was set, left under its old hash too, costs a comparison, never a wrong match).
#[derive(Default)]
struct Lookup {
    exact: foldhash::HashMap<u64, Vec<usize>>,
    loose: foldhash::HashMap<u64, Vec<usize>>,
    hasher: foldhash::fast::FixedState,
}

impl Lookup {
    fn hash(&self, key: &Key<'_>) -> u64 {
        self.hasher.hash_one(key)
    }

    fn hash_loose(&self, key: &Key<'_>) -> u64 {
        self.hasher.hash_one((key.0, key.1, key.2, key.4, key.5))
    }
}

/// How a merge finds the record an observation belongs to, told of every record that
/// joins the status or changes its key.
trait Find {
    fn of(records: &[ViolationRecord]) -> Self;
    /// The first record of `key`, else (one side's port unknown) the first of the same
    /// tuple on any port.
    fn find(&self, records: &[ViolationRecord], key: &Key<'_>, port: i32) -> Option<usize>;
    /// Record `i` is made, after every record there is.
    fn made(&mut self, i: usize, r: &ViolationRecord);
    /// Record `i`'s port is set.
    fn rekeyed(&mut self, i: usize, r: &ViolationRecord);
}

impl Find for Lookup {
    fn of(records: &[ViolationRecord]) -> Self {
        let mut lookup = Lookup::default();
        for (i, r) in records.iter().enumerate() {
            lookup.made(i, r);
        }
        lookup
    }

    fn find(&self, records: &[ViolationRecord], key: &Key<'_>, port: i32) -> Option<usize> {
        fn candidates(
            map: &foldhash::HashMap<u64, Vec<usize>>,
            hash: u64,
        ) -> impl Iterator<Item = usize> + '_ {
            map.get(&hash)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .copied()
        }
        candidates(&self.exact, self.hash(key))
            .find(|&i| key_of(&records[i]) == *key)
            .or_else(|| {
                candidates(&self.loose, self.hash_loose(key)).find(|&i| {
                    let r = &records[i];
                    (r.port == UNKNOWN_PORT || port == UNKNOWN_PORT)
                        && same_but_port(&key_of(r), key)
                })
            })
    }

    fn made(&mut self, i: usize, r: &ViolationRecord) {
        let key = key_of(r);
        let (exact, loose) = (self.hash(&key), self.hash_loose(&key));
        self.exact.entry(exact).or_default().push(i);
        self.loose.entry(loose).or_default().push(i);
    }

    fn rekeyed(&mut self, i: usize, r: &ViolationRecord) {
        // Its key without the port stays; its indexes stay ascending.
        let new = self.hash(&key_of(r));
        let at = self.exact.entry(new).or_default();
        if let Err(pos) = at.binary_search(&i) {
            at.insert(pos, i);
        }
    }
}

/// Merges `observations` into `status`: updates the records they match, creates records
/// for new tuples, keeps the [`MAX_VIOLATION_RECORDS`] most recent (by last seen), and
/// recounts. Everything else of the status is kept. A record is found by a hash of its
/// tuple, so the cost follows the observations, not observations × records.
pub fn merge(status: &WorkloadNetworkPolicyStatus, observations: &[Observation]) -> Merged {
    merge_with::<Lookup>(status, observations)
}

/// [`merge`], records found by `F`.
fn merge_with<F: Find>(
    status: &WorkloadNetworkPolicyStatus,
    observations: &[Observation],
) -> Merged {
    let mut next = status.clone();
    let mut lookup = F::of(&next.violations);
    let mut new = Vec::new();
    let mut updated = Vec::new();
    let mut noted = foldhash::HashSet::default();
    let mut note = |id: i64, updated: &mut Vec<i64>| {
        if noted.insert(id) {
            updated.push(id);
        }
    };
    for o in observations {
        let key = key_of_observation(o);
        if let Some(i) = lookup.find(&next.violations, &key, o.port) {
            let r = &mut next.violations[i];
            if r.port == UNKNOWN_PORT && o.port != UNKNOWN_PORT {
                // The port is known now: the record gets it (and the richer endpoints, and
                // the reason the rules give, which names the port).
                r.port = o.port;
                r.source = o.source.clone();
                r.destination = o.destination.clone();
                r.reason = Some(o.reason);
                r.message = Some(o.message.clone());
                note(r.id, &mut updated);
                lookup.rekeyed(i, r);
            }
            let r = &mut next.violations[i];
            if r.reason.is_none() {
                // A record written before reasons were recorded gets one.
                r.reason = Some(o.reason);
                r.message = Some(o.message.clone());
            }
            if o.denied_by.is_some() && r.denied_by != o.denied_by {
                // The data plane names the policy (or another one now): the record says
                // who denies it today.
                r.denied_by = o.denied_by.clone();
                r.message = Some(o.message.clone());
            }
            let count = r.count.max(o.count);
            let (first, last) = (
                earlier(&r.first_seen, &o.first_seen),
                later(&r.last_seen, &o.last_seen),
            );
            if (count, &first, &last) != (r.count, &r.first_seen, &r.last_seen) {
                next.violation_count += count - r.count;
                (r.count, r.first_seen, r.last_seen) = (count, first, last);
                note(r.id, &mut updated);
            }
            continue;
        }
        // Acknowledged before: only traffic seen since counts, as a new record.
        let acknowledged = next
            .acknowledged_violations
            .iter()
            .filter(|a| {
                let k = key_of(&a.violation);
                k == key
                    || ((a.violation.port == UNKNOWN_PORT || o.port == UNKNOWN_PORT)
                        && same_but_port(&k, &key))
            })
            .map(|a| &a.violation)
            .max_by_key(|v| v.last_seen.0);
        let count = match acknowledged {
            Some(a) if o.last_seen.0 <= a.last_seen.0 => continue,
            Some(a) => (o.count - a.count).max(1),
            None => o.count.max(1),
        };
        next.last_violation_id += 1;
        let id = next.last_violation_id;
        next.violation_count += count;
        next.violations.push(ViolationRecord {
            id,
            first_seen: match acknowledged {
                Some(a) => later(&o.first_seen, &a.last_seen),
                None => o.first_seen.clone(),
            },
            last_seen: o.last_seen.clone(),
            count,
            source: o.source.clone(),
            destination: o.destination.clone(),
            protocol: o.protocol.clone(),
            port: o.port,
            direction: o.direction,
            mode: o.mode,
            reason: Some(o.reason),
            message: Some(o.message.clone()),
            denied_by: o.denied_by.clone(),
        });
        let at = next.violations.len() - 1;
        lookup.made(at, &next.violations[at]);
        new.push(id);
    }
    // Newest first; the oldest beyond the cap are dropped (their ids are never reused).
    next.violations
        .sort_by(|a, b| b.last_seen.0.cmp(&a.last_seen.0).then(b.id.cmp(&a.id)));
    next.violations.truncate(MAX_VIOLATION_RECORDS);
    let kept: foldhash::HashSet<i64> = next.violations.iter().map(|r| r.id).collect();
    new.retain(|id| kept.contains(id));
    // One report per record: a record made by this merge is new, not also updated.
    let made: foldhash::HashSet<i64> = new.iter().copied().collect();
    updated.retain(|id| !made.contains(id) && kept.contains(id));
    next.active_violation_count = next.violations.len() as i64;
    next.last_violation_time = next
        .violations
        .iter()
        .map(|r| &r.last_seen)
        .chain(status.last_violation_time.as_ref())
        .max_by_key(|t| t.0)
        .cloned();
    Merged {
        status: next,
        new,
        updated,
    }
}

/// One acknowledgement annotation, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acknowledgement {
    /// `acknowledge-<id>: <reason>`.
    Id { id: i64, reason: String },
    /// The suffix is not a number: the annotation is answered with a Warning and removed.
    Malformed { suffix: String },
}

/// The acknowledgement annotations of a policy, with their keys (to remove them).
pub fn acknowledgements<'a>(
    annotations: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<(String, Acknowledgement)> {
    annotations
        .into_iter()
        .filter_map(|(key, value)| {
            let suffix = key.strip_prefix(ACKNOWLEDGE_ANNOTATION_PREFIX)?;
            let ack = match suffix.parse::<i64>() {
                Ok(id) if id > 0 => Acknowledgement::Id {
                    id,
                    reason: value.trim().to_owned(),
                },
                _ => Acknowledgement::Malformed {
                    suffix: suffix.to_owned(),
                },
            };
            Some((key.clone(), ack))
        })
        .collect()
}

/// The result of [`acknowledge`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Acknowledged {
    pub status: WorkloadNetworkPolicyStatus,
    /// Records moved to `acknowledgedViolations`, with their reasons (one log event each,
    /// once the status is written).
    pub moved: Vec<AcknowledgedViolation>,
    /// Annotations that named no record (never assigned, malformed, or trimmed): a Warning
    /// Event each; they acknowledge nothing. An id acknowledged already is not one of them.
    pub unknown: Vec<String>,
    /// Every acknowledgement annotation seen: all are removed once the status is written.
    pub annotations: Vec<String>,
}

/// Moves the records the annotations name to `acknowledgedViolations` (newest first, the
/// [`MAX_VIOLATION_RECORDS`] most recent kept). An id that names no current record
/// acknowledges nothing, now or later.
pub fn acknowledge(
    status: &WorkloadNetworkPolicyStatus,
    annotations: &[(String, Acknowledgement)],
    now: &Time,
) -> Acknowledged {
    let mut next = status.clone();
    let mut moved = Vec::new();
    let mut unknown = Vec::new();
    // In id order, so the result does not depend on the annotations' order.
    let by_id: BTreeMap<i64, (&String, &String)> = annotations
        .iter()
        .filter_map(|(key, a)| match a {
            Acknowledgement::Id { id, reason } => Some((*id, (key, reason))),
            Acknowledgement::Malformed { .. } => None,
        })
        .collect();
    for (key, a) in annotations {
        if let Acknowledgement::Malformed { .. } = a {
            unknown.push(key.clone());
        }
    }
    for (id, (key, reason)) in by_id {
        match next.violations.iter().position(|r| r.id == id) {
            Some(i) => {
                let violation = next.violations.remove(i);
                moved.push(AcknowledgedViolation {
                    violation,
                    reason: (!reason.is_empty()).then(|| reason.clone()),
                    acknowledged_at: Some(now.clone()),
                });
            }
            // Acknowledged already (the write before this one succeeded but the
            // annotation's removal did not, or a user repeated it): nothing to do and
            // nothing to warn about; the annotation is removed.
            None if next
                .acknowledged_violations
                .iter()
                .any(|a| a.violation.id == id) => {}
            None => unknown.push(key.clone()),
        }
    }
    for a in moved.iter().rev() {
        next.acknowledged_violations.insert(0, a.clone());
    }
    next.acknowledged_violations.truncate(MAX_VIOLATION_RECORDS);
    next.active_violation_count = next.violations.len() as i64;
    Acknowledged {
        status: next,
        moved,
        unknown,
        annotations: annotations.iter().map(|(k, _)| k.clone()).collect(),
    }
}

/// [`merge`]'s lookup held to the scan it replaced (every observation compared with every
/// record, in order), on statuses made by earlier merges and acknowledgements.
#[cfg(test)]
mod scan_tests {
    use proptest::prelude::*;

    use super::*;
    use crate::violations::tests::{seen, time};

    /// The search before records were found by hash: every record in order, for each
    /// observation. What [`Lookup`] must still find.
    struct Scan;

    impl Find for Scan {
        fn of(_: &[ViolationRecord]) -> Self {
            Scan
        }

        fn find(&self, records: &[ViolationRecord], key: &Key<'_>, port: i32) -> Option<usize> {
            records.iter().position(|r| key_of(r) == *key).or_else(|| {
                records.iter().position(|r| {
                    (r.port == UNKNOWN_PORT || port == UNKNOWN_PORT)
                        && same_but_port(&key_of(r), key)
                })
            })
        }

        fn made(&mut self, _: usize, _: &ViolationRecord) {}

        fn rekeyed(&mut self, _: usize, _: &ViolationRecord) {}
    }

    fn merge_by_scan(status: &WorkloadNetworkPolicyStatus, observations: &[Observation]) -> Merged {
        merge_with::<Scan>(status, observations)
    }

    fn arb_observation() -> impl Strategy<Value = Observation> {
        (
            0..30usize,
            prop::sample::select(vec![UNKNOWN_PORT, 80, 443]),
            any::<bool>(),
            any::<bool>(),
            1..20i64,
            0..50i64,
            0..50i64,
            prop::option::of(0..2usize),
        )
            .prop_map(|(src, port, udp, protect, count, a, b, denied)| {
                let mut o = seen(&format!("w{src}"), port, count, a.min(b), a.max(b));
                if udp {
                    o.protocol = "UDP".to_owned();
                }
                if protect {
                    o.mode = Mode::Protect;
                }
                if src % 7 == 0 {
                    // An address, not a workload.
                    o.source.name = None;
                    o.source.ip = Some(format!("10.0.0.{port}"));
                }
                o.denied_by = denied.map(|d| format!("shop/deny-{d}"));
                o
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn a_merge_by_hash_is_the_merge_by_scan(
            earlier in prop::collection::vec(prop::collection::vec(arb_observation(), 0..60), 0..4),
            acknowledged in prop::collection::vec(0..8usize, 0..3),
            observations in prop::collection::vec(arb_observation(), 0..150),
        ) {
            let mut status = WorkloadNetworkPolicyStatus::default();
            for batch in &earlier {
                status = merge_by_scan(&status, batch).status;
            }
            for at in acknowledged {
                if at < status.violations.len() {
                    let violation = status.violations.remove(at);
                    status.acknowledged_violations.push(AcknowledgedViolation {
                        violation,
                        reason: None,
                        acknowledged_at: Some(time(60)),
                    });
                }
            }
            prop_assert_eq!(merge(&status, &observations), merge_by_scan(&status, &observations));
        }
    }
}
