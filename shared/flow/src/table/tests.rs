use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};

use proptest::prelude::*;

use super::*;
use crate::flow::{
    Direction, Endpoint, EndpointId, ObservationPoint, Protocol, Str, Verdict, WorkloadKind,
    WorkloadRef, labels,
};

/// A small key space so that random sequences hit the same keys often.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct K {
    subject: u8,
    peer: u8,
    egress: bool,
    port: u16,
    udp: bool,
    identity: bool,
}

fn workload(i: u8) -> EndpointId {
    EndpointId::Workload(WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: format!("app-{i}").into(),
    })
}

/// The edge of key `k`; its metadata is a function of the key, so that which edge is the
/// first seen does not change the result.
fn edge(k: K) -> Edge {
    let peer_id = if k.peer.is_multiple_of(3) {
        EndpointId::External(IpAddr::V4(Ipv4Addr::new(203, 0, 113, k.peer)))
    } else {
        workload(k.peer)
    };
    let identity: Option<Str> = k
        .identity
        .then(|| format!("cluster.local/ns/shop/sa/app-{}", k.peer).into());
    Edge {
        subject: Endpoint::new(workload(k.subject))
            .with_labels(labels([("app", format!("app-{}", k.subject))])),
        direction: if k.egress {
            Direction::Egress
        } else {
            Direction::Ingress
        },
        peer: Endpoint::new(peer_id).with_identity(identity),
        protocol: if k.udp { Protocol::Udp } else { Protocol::Tcp },
        port: k.port,
        peer_dns: None,
        denied_by: None,
    }
}

fn key_strategy() -> impl Strategy<Value = K> {
    (
        0u8..3,
        0u8..4,
        any::<bool>(),
        prop::sample::select(vec![53u16, 80, 443]),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(subject, peer, egress, port, udp, identity)| K {
            subject,
            peer,
            egress,
            port,
            udp,
            identity,
        })
}

/// (key, time, count)
fn records() -> impl Strategy<Value = Vec<(K, i64, u64)>> {
    prop::collection::vec((key_strategy(), 0i64..1_000, 1u64..5), 0..60)
}

/// Snapshot as a map key → (count, first, last), after checking the edge matches the key.
fn by_key(snaps: Vec<EdgeSnapshot>) -> BTreeMap<EdgeKey, (u64, i64, i64)> {
    let mut out = BTreeMap::new();
    for s in snaps {
        let previous = out.insert(s.key(), (s.count, s.first_seen.0, s.last_seen.0));
        assert!(previous.is_none(), "a key appears twice in one read-out");
    }
    out
}

fn fill(table: &FlowTable, recs: &[(K, i64, u64)]) {
    for &(k, t, c) in recs {
        table.record(&edge(k), Timestamp(t), c);
    }
}

/// The expected totals, computed independently of the table.
fn model(recs: &[(K, i64, u64)]) -> BTreeMap<EdgeKey, (u64, i64, i64)> {
    let mut out: BTreeMap<EdgeKey, (u64, i64, i64)> = BTreeMap::new();
    for &(k, t, c) in recs {
        let e = out.entry(EdgeKey::of(&edge(k))).or_insert((0, t, t));
        e.0 += c;
        e.1 = e.1.min(t);
        e.2 = e.2.max(t);
    }
    out
}

proptest! {
    #[test]
    fn order_does_not_matter(
        (recs, shuffled) in records().prop_flat_map(|r| (Just(r.clone()), Just(r).prop_shuffle()))
    ) {
        let a = FlowTable::new(1_000);
        let b = FlowTable::new(1_000);
        fill(&a, &recs);
        fill(&b, &shuffled);
        let mut sa = a.snapshot();
        let mut sb = b.snapshot();
        sa.sort_by_key(EdgeSnapshot::key);
        sb.sort_by_key(EdgeSnapshot::key);
        // The same entries, but for the serials, which follow the insertion order.
        let without_serial = |s: &[EdgeSnapshot]| {
            s.iter().map(|s| EdgeSnapshot { serial: 0, ..s.clone() }).collect::<Vec<_>>()
        };
        prop_assert_eq!(without_serial(&sa), without_serial(&sb));
        // Serials are distinct and start at 1.
        let mut serials: Vec<u64> = sa.iter().map(|s| s.serial).collect();
        serials.sort_unstable();
        prop_assert_eq!(serials, (1..=sa.len() as u64).collect::<Vec<_>>());
        prop_assert_eq!(by_key(sa), model(&recs));
    }

    #[test]
    fn recording_twice_doubles_counts_only(recs in records()) {
        let once = FlowTable::new(1_000);
        let twice = FlowTable::new(1_000);
        fill(&once, &recs);
        fill(&twice, &recs);
        fill(&twice, &recs);
        let once = by_key(once.snapshot());
        let twice = by_key(twice.snapshot());
        prop_assert_eq!(once.len(), twice.len());
        for (k, (count, first, last)) in once {
            prop_assert_eq!(twice.get(&k), Some(&(count * 2, first, last)));
        }
    }

    #[test]
    fn a_drain_in_chunks_gives_every_changed_entry_once_in_pieces_of_at_least_chunk(
        recs in records(),
        chunk in 1usize..8,
    ) {
        let table = FlowTable::new(1_000);
        fill(&table, &recs);
        let mut pieces = Vec::new();
        table.drain_dirty_chunks(chunk, |piece| pieces.push(piece));
        prop_assert!(pieces.iter().all(|p| !p.is_empty()));
        if let Some((_, full)) = pieces.split_last() {
            prop_assert!(full.iter().all(|p| p.len() >= chunk), "only the last piece is short");
        }
        let entries: Vec<EdgeSnapshot> = pieces.into_iter().flatten().collect();
        let n = entries.len();
        let drained = by_key(entries);
        prop_assert_eq!(drained.len(), n, "each entry once");
        prop_assert_eq!(&drained, &model(&recs));
        let mut again = 0;
        table.drain_dirty_chunks(chunk, |_| again += 1);
        prop_assert_eq!(again, 0, "the flags were cleared");
    }

    #[test]
    fn drain_returns_nothing_until_new_records(recs in records(), more in records()) {
        let table = FlowTable::new(1_000);
        fill(&table, &recs);
        let first = by_key(table.drain_dirty());
        prop_assert_eq!(&first, &model(&recs));
        prop_assert!(table.drain_dirty().is_empty());
        // A snapshot neither clears nor sets dirty flags.
        prop_assert_eq!(table.snapshot().len(), first.len());
        prop_assert!(table.drain_dirty().is_empty());
        fill(&table, &more);
        let touched: BTreeSet<EdgeKey> = more.iter().map(|&(k, _, _)| EdgeKey::of(&edge(k))).collect();
        let second = by_key(table.drain_dirty());
        prop_assert_eq!(second.keys().cloned().collect::<BTreeSet<_>>(), touched);
        let all: Vec<_> = recs.iter().chain(&more).copied().collect();
        let expected = model(&all);
        for (k, v) in &second {
            prop_assert_eq!(expected.get(k), Some(v));
        }
    }

    #[test]
    fn successive_drains_cover_every_key(
        ops in prop::collection::vec(prop::option::weighted(0.85, (key_strategy(), 0i64..1_000, 1u64..5)), 0..80)
    ) {
        // `None` is a drain between records.
        let table = FlowTable::new(1_000);
        let mut latest: BTreeMap<EdgeKey, (u64, i64, i64)> = BTreeMap::new();
        let mut recorded = Vec::new();
        for op in ops {
            match op {
                Some(rec) => {
                    fill(&table, &[rec]);
                    recorded.push(rec);
                }
                None => latest.extend(by_key(table.drain_dirty())),
            }
        }
        latest.extend(by_key(table.drain_dirty()));
        // The union of the drains holds every key, with its final totals.
        prop_assert_eq!(latest, model(&recorded));
    }

    #[test]
    fn capacity_is_a_hard_bound(capacity in 0usize..12, recs in records()) {
        let table = FlowTable::new(capacity);
        let mut stored = BTreeSet::new();
        let (mut dropped, mut latest_dropped) = (0u64, None);
        for &(k, t, c) in &recs {
            let key = EdgeKey::of(&edge(k));
            let expected = if stored.contains(&key) {
                RecordOutcome::Updated
            } else if stored.len() < capacity {
                stored.insert(key);
                RecordOutcome::Inserted
            } else {
                dropped += 1;
                latest_dropped = latest_dropped.max(Some(Timestamp(t)));
                RecordOutcome::Dropped
            };
            prop_assert_eq!(table.record(&edge(k), Timestamp(t), c), expected);
        }
        prop_assert!(table.len() <= capacity);
        prop_assert_eq!(table.len(), stored.len());
        prop_assert_eq!(table.dropped(), dropped);
        prop_assert_eq!(table.latest_dropped(), latest_dropped);
        prop_assert_eq!(by_key(table.snapshot()).keys().cloned().collect::<BTreeSet<_>>(), stored);
    }
}

fn k(subject: u8, peer: u8, port: u16) -> K {
    K {
        subject,
        peer,
        egress: true,
        port,
        udp: false,
        identity: false,
    }
}

#[test]
fn a_new_edge_reports_its_first_metadata_and_later_ones_keep_it() {
    let table = FlowTable::new(10);
    let mut first = edge(k(0, 1, 80));
    first.peer_dns = Some("first.example".into());
    let mut second = first.clone();
    second.peer_dns = Some("second.example".into());
    assert_eq!(
        table.record(&first, Timestamp(20), 1),
        RecordOutcome::Inserted
    );
    assert_eq!(
        table.record(&second, Timestamp(10), 2),
        RecordOutcome::Updated
    );
    let snap = table.snapshot();
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].edge.peer_dns.as_deref(), Some("first.example"));
    assert_eq!(
        (snap[0].count, snap[0].first_seen, snap[0].last_seen),
        (3, Timestamp(10), Timestamp(20))
    );
}

#[test]
fn peer_identity_is_part_of_the_key() {
    let table = FlowTable::new(10);
    let plain = edge(k(0, 1, 80));
    let with_identity = edge(K {
        identity: true,
        ..k(0, 1, 80)
    });
    assert_eq!(
        table.record(&plain, Timestamp(1), 1),
        RecordOutcome::Inserted
    );
    assert_eq!(
        table.record(&with_identity, Timestamp(1), 1),
        RecordOutcome::Inserted
    );
    assert_eq!(table.len(), 2);
}

#[test]
fn huge_counts_saturate_instead_of_wrapping() {
    let table = FlowTable::new(1);
    let e = edge(k(0, 1, 80));
    table.record(&e, Timestamp(1), u64::MAX - 1);
    table.record(&e, Timestamp(1), u64::MAX);
    assert_eq!(table.snapshot()[0].count, u64::MAX);
}

#[test]
fn expire_idle_removes_only_shipped_quiet_entries_and_frees_capacity() {
    let table = FlowTable::new(3);
    let (old, recent, unshipped) = (edge(k(0, 1, 80)), edge(k(0, 2, 80)), edge(k(1, 1, 80)));
    table.record(&old, Timestamp(100), 1);
    table.record(&recent, Timestamp(900), 1);
    assert_eq!(table.drain_dirty().len(), 2);
    table.record(&unshipped, Timestamp(100), 1);
    assert_eq!(
        table.record(&edge(k(2, 2, 80)), Timestamp(1), 1),
        RecordOutcome::Dropped
    );

    assert_eq!(table.expire_idle(Timestamp(500)), 1);
    assert_eq!(table.len(), 2);
    let left: BTreeSet<EdgeKey> = table.snapshot().iter().map(EdgeSnapshot::key).collect();
    assert_eq!(
        left,
        BTreeSet::from([EdgeKey::of(&recent), EdgeKey::of(&unshipped)])
    );
    // The freed slot takes a new key; the expired edge comes back as new, from zero.
    assert_eq!(
        table.record(&old, Timestamp(1_000), 5),
        RecordOutcome::Inserted
    );
    let back = table
        .snapshot()
        .into_iter()
        .find(|s| s.key() == EdgeKey::of(&old))
        .map(|s| (s.count, s.serial));
    // A new incarnation: serials 1 and 2 were `old` and `recent`, 3 `unshipped`.
    assert_eq!(back, Some((5, 4)));
    assert_eq!(table.dropped(), 1);
}

#[test]
fn shedding_removes_shipped_entries_least_recently_seen_first_and_spares_the_rest() {
    let table = FlowTable::new(10);
    let edges: Vec<Edge> = (1..=10).map(|i| edge(k(i, 1, 80))).collect();
    for (t, e) in (1..).zip(&edges) {
        table.record(e, Timestamp(t), 1);
    }
    assert_eq!(table.drain_dirty().len(), 10);
    // Seen again, not shipped since: spared although its time is old.
    table.record(&edges[1], Timestamp(2), 1);
    let left = |table: &FlowTable| -> BTreeSet<i64> {
        table.snapshot().iter().map(|s| s.last_seen.0).collect()
    };

    // Four to go, among the shipped ones before time 9: times 1, 3, 4 and 5.
    assert_eq!(table.shed_least_recent(6, Timestamp(9)), 4);
    assert_eq!(left(&table), BTreeSet::from([2, 6, 7, 8, 9, 10]));
    // Fewer candidates than the excess: every shipped entry before the bound goes, no more.
    assert_eq!(table.shed_least_recent(0, Timestamp(8)), 2);
    assert_eq!(left(&table), BTreeSet::from([2, 8, 9, 10]));
    // Within the bound already: nothing.
    assert_eq!(table.shed_least_recent(4, Timestamp(100)), 0);
    // The freed room takes new keys.
    assert_eq!(
        table.record(&edge(k(20, 1, 80)), Timestamp(11), 1),
        RecordOutcome::Inserted
    );
}

#[test]
fn record_flow_derives_the_edge_and_uses_connections_and_time() {
    let table = FlowTable::new(10);
    let flow = FlowRecord {
        time: Some(Timestamp::from_secs(7)),
        node: None,
        source: Endpoint::new(workload(0)),
        destination: Endpoint::new(workload(1)),
        protocol: Protocol::Tcp,
        source_port: 41_000,
        destination_port: 8080,
        observation: ObservationPoint::Egress,
        verdict: Verdict::Forwarded,
        reply: Some(false),
        destination_dns: None,
        policy: None,
        connections: 4,
    };
    assert_eq!(
        table.record_flow(&flow, Provider::Cilium),
        Ok(RecordOutcome::Inserted)
    );
    let untimed = FlowRecord {
        time: None,
        connections: 1,
        ..flow.clone()
    };
    assert_eq!(
        table.record_flow(&untimed, Provider::Cilium),
        Ok(RecordOutcome::Updated)
    );
    let reply = FlowRecord {
        reply: Some(true),
        ..flow.clone()
    };
    assert_eq!(
        table.record_flow(&reply, Provider::Cilium),
        Err(EdgeSkip::Reply)
    );
    assert_eq!(
        table.record_flow(&flow, Provider::Istio),
        Err(EdgeSkip::DirectionNotLearned)
    );

    let snap = table.snapshot();
    assert_eq!(snap.len(), 1);
    let s = &snap[0];
    assert_eq!(
        (s.edge.subject.id.clone(), s.edge.direction, s.edge.port),
        (workload(0), Direction::Egress, 8080)
    );
    assert_eq!(
        (s.count, s.first_seen, s.last_seen),
        (5, Timestamp(0), Timestamp::from_secs(7))
    );
}

#[test]
fn two_threads_lose_no_update_and_concurrent_drains_miss_nothing() {
    const ROUNDS: u64 = 2_000;
    // Thread A: peers 1..=20 alone; thread B: peers 21..=40 alone; both: peers 41..=50.
    let keys_a: Vec<Edge> = (1..=20).chain(41..=50).map(|p| edge(k(0, p, 80))).collect();
    let keys_b: Vec<Edge> = (21..=40)
        .chain(41..=50)
        .map(|p| edge(k(0, p, 80)))
        .collect();
    let table = FlowTable::new(1_000);
    let writers_done = AtomicBool::new(false);
    let mut drained: BTreeMap<EdgeKey, u64> = BTreeMap::new();
    std::thread::scope(|s| {
        let a = s.spawn(|| {
            for round in 0..ROUNDS {
                for e in &keys_a {
                    table.record(e, Timestamp(round as i64), 1);
                }
            }
        });
        let b = s.spawn(|| {
            for round in 0..ROUNDS {
                for e in &keys_b {
                    table.record(e, Timestamp(round as i64), 2);
                }
            }
        });
        // This thread drains while the writers run; it stops once both have finished.
        s.spawn(|| {
            a.join().ok();
            b.join().ok();
            writers_done.store(true, Ordering::Release);
        });
        while !writers_done.load(Ordering::Acquire) {
            for snap in table.drain_dirty() {
                drained.insert(snap.key(), snap.count);
            }
        }
    });
    for snap in table.drain_dirty() {
        drained.insert(snap.key(), snap.count);
    }
    assert_eq!(drained.len(), 50);
    for p in 1..=50u8 {
        let expected = match p {
            1..=20 => ROUNDS,
            21..=40 => 2 * ROUNDS,
            _ => 3 * ROUNDS,
        };
        assert_eq!(
            drained.get(&EdgeKey::of(&edge(k(0, p, 80)))),
            Some(&expected),
            "peer {p}"
        );
    }
    let snap = table.snapshot();
    assert_eq!(
        snap.iter().map(|s| s.count).sum::<u64>(),
        ROUNDS * (20 + 40 + 30)
    );
    assert!(
        snap.iter()
            .all(|s| s.first_seen == Timestamp(0) && s.last_seen == Timestamp(ROUNDS as i64 - 1))
    );
    assert_eq!(table.dropped(), 0);
}

/// A borrowed key (as the Hubble fast path builds it) hashes and compares like the owned
/// one: it finds the entry, and the edge is not built again.
#[test]
fn a_borrowed_key_finds_the_owned_entry_without_building_the_edge() {
    let table = FlowTable::new(16);
    let keys = [(1, 2, true, false), (1, 3, false, true), (4, 5, true, true)];
    for (subject, peer, egress, identity) in keys {
        let e = edge(K {
            subject,
            peer,
            egress,
            port: 443,
            udp: false,
            identity,
        });
        assert_eq!(table.record(&e, Timestamp(5), 1), RecordOutcome::Inserted);
        let key = EdgeKey::of(&e);
        let view = EdgeKeyRef {
            subject: key.subject.view(),
            direction: key.direction,
            peer: key.peer.view(),
            peer_identity: key.peer_identity.as_deref(),
            protocol: key.protocol,
            port: key.port,
        };
        let got = table.record_by_key(&view, Timestamp(9), 2, || Err::<Edge, ()>(()));
        assert_eq!(got, Ok(RecordOutcome::Updated));
    }
    let snap = table.snapshot();
    assert_eq!(snap.len(), 3);
    assert!(
        snap.iter()
            .all(|s| s.count == 3 && s.last_seen == Timestamp(9))
    );
}

/// The metadata an edge of key `k` may carry beside its key: the subject's labels, address
/// and identity, the peer's address and labels, the DNS name and the blamed policy.
/// Variant 0 is [`edge`]'s own.
fn with_metadata(k: K, variant: u8) -> Edge {
    let mut e = edge(k);
    if variant & 1 != 0 {
        e.subject.labels = labels([("app", "relabelled")]);
        e.subject.ip = Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, variant)));
    }
    if variant & 2 != 0 {
        e.subject.identity = Some("cluster.local/ns/shop/sa/subject".into());
    }
    if variant & 4 != 0 {
        e.peer.ip = Some(IpAddr::V4(Ipv4Addr::new(10, 1, 0, k.peer)));
        e.peer.labels = labels([("tier", "db")]);
    }
    if variant & 8 != 0 {
        e.peer_dns = Some(format!("peer-{}.example", k.peer).into());
    }
    if variant & 16 != 0 {
        e.denied_by = Some("shop/deny".into());
    }
    e
}

#[derive(Clone, Debug)]
enum Op {
    Record(K, u8, i64, u64),
    Drain,
    /// Expire idle entries last seen before this time.
    Expire(i64),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => (key_strategy(), 0u8..32, 0i64..1_000, 1u64..5)
            .prop_map(|(k, v, t, c)| Op::Record(k, v, t, c)),
        1 => Just(Op::Drain),
        1 => (0i64..1_200).prop_map(Op::Expire),
    ];
    prop::collection::vec(op, 0..120)
}

/// What an entry should read as: its first edge, count, first and last seen, dirty.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    edge: Edge,
    count: u64,
    first: i64,
    last: i64,
    dirty: bool,
}

proptest! {
    /// Entries share interned endpoints and keep their own first metadata whatever their
    /// neighbours carry, expiry frees what no entry uses any more (slots reused after it
    /// read as their new edge), and an emptied table holds nothing interned.
    #[test]
    fn interned_entries_read_as_their_first_edges_through_expiry_and_reuse(ops in ops()) {
        // Room for every key the strategy makes: nothing is dropped.
        let table = FlowTable::new(1_000);
        let mut model: BTreeMap<EdgeKey, Model> = BTreeMap::new();
        for op in &ops {
            match *op {
                Op::Record(k, variant, t, c) => {
                    let e = with_metadata(k, variant);
                    table.record(&e, Timestamp(t), c);
                    let m = model.entry(EdgeKey::of(&e)).or_insert(Model {
                        edge: e, count: 0, first: t, last: t, dirty: true,
                    });
                    m.count += c;
                    m.first = m.first.min(t);
                    m.last = m.last.max(t);
                    m.dirty = true;
                }
                Op::Drain => {
                    let drained: BTreeSet<EdgeKey> =
                        table.drain_dirty().iter().map(EdgeSnapshot::key).collect();
                    let dirty: BTreeSet<EdgeKey> =
                        model.iter().filter(|(_, m)| m.dirty).map(|(k, _)| k.clone()).collect();
                    prop_assert_eq!(drained, dirty);
                    model.values_mut().for_each(|m| m.dirty = false);
                }
                Op::Expire(before) => {
                    let expected = model.len();
                    model.retain(|_, m| m.dirty || m.last >= before);
                    prop_assert_eq!(table.expire_idle(Timestamp(before)), expected - model.len());
                }
            }
        }
        let read: BTreeMap<EdgeKey, Model> = table
            .snapshot()
            .into_iter()
            .map(|s| {
                let dirty = model.get(&s.key()).is_some_and(|m| m.dirty);
                (s.key(), Model {
                    edge: s.edge, count: s.count, first: s.first_seen.0,
                    last: s.last_seen.0, dirty,
                })
            })
            .collect();
        prop_assert_eq!(&read, &model);
        prop_assert_eq!(table.len(), model.len());

        table.drain_dirty();
        table.expire_idle(Timestamp(i64::MAX));
        prop_assert_eq!(table.len(), 0);
        prop_assert_eq!(table.interned(), 0, "nothing interned outlives its entries");
    }
}

#[test]
fn an_endpoint_is_interned_once_for_all_its_edges() {
    let table = FlowTable::new(1_000);
    // One subject, 100 peers, 5 ports: 500 entries over 101 endpoints.
    for peer in 0..100 {
        for port in [80, 443, 5432, 6379, 9090] {
            table.record(&edge(k(0, peer, port)), Timestamp(1), 1);
        }
    }
    assert_eq!(table.len(), 500);
    assert_eq!(table.interned(), 101);
}
