//! Unit tests: one per merge rule of the module docs.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use super::*;
use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, WorkloadKind, WorkloadRef, labels};

/// The edge `app-<key>` → `db:5432`; `meta` changes only what is not part of the key (the
/// subject's labels and the peer's address).
fn edge(key: u8, meta: u8) -> Edge {
    let workload = |name: String| {
        EndpointId::Workload(WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: name.into(),
        })
    };
    Edge {
        subject: Endpoint::new(workload(format!("app-{key}")))
            .with_labels(labels([("version", format!("v{meta}"))])),
        direction: Direction::Egress,
        peer: Endpoint::new(workload("db".into()))
            .with_ip(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, meta)))),
        protocol: Protocol::Tcp,
        port: 5432,
        peer_dns: None,
        denied_by: None,
    }
}

fn snap(key: u8, serial: u64, count: u64, first: i64, last: i64) -> EdgeSnapshot {
    snap_meta(key, 0, serial, count, first, last)
}

fn snap_meta(key: u8, meta: u8, serial: u64, count: u64, first: i64, last: i64) -> EdgeSnapshot {
    EdgeSnapshot {
        edge: edge(key, meta),
        count,
        first_seen: Timestamp(first),
        last_seen: Timestamp(last),
        serial,
    }
}

fn totals(index: &EdgeIndex, key: u8) -> (u64, i64, i64) {
    let m = index
        .get(&EdgeKey::of(&edge(key, 0)))
        .expect("key is in the index");
    (m.count, m.first_seen.0, m.last_seen.0)
}

fn a() -> AgentId {
    AgentId::from("node-a")
}

fn b() -> AgentId {
    AgentId::from("node-b")
}

#[test]
fn same_serial_merges_by_max_min_max_and_duplicates_change_nothing() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 7, 5, 100, 200)]);
    // A later value of the same incarnation: cumulative, so the count is replaced, not
    // added; an out-of-order record moved first_seen back.
    let s = index.apply(&a(), 1, &[snap(1, 7, 9, 90, 300)]);
    assert_eq!((s.updated, s.unchanged), (1, 0));
    assert_eq!(totals(&index, 1), (9, 90, 300));
    // An older value of it re-delivered, then the same value again: no effect.
    let s = index.apply(&a(), 1, &[snap(1, 7, 5, 100, 200), snap(1, 7, 9, 90, 300)]);
    assert_eq!((s.updated, s.unchanged), (0, 2));
    assert_eq!(totals(&index, 1), (9, 90, 300));
}

#[test]
fn a_larger_serial_retires_the_old_count_and_a_smaller_one_is_stale() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 3, 10, 100, 200)]);
    // Expired by the agent and inserted again: a new incarnation counting from zero.
    let s = index.apply(&a(), 1, &[snap(1, 8, 2, 500, 600)]);
    assert_eq!(s.updated, 1);
    assert_eq!(totals(&index, 1), (12, 100, 600));
    let s = index.apply(&a(), 1, &[snap(1, 8, 4, 500, 700)]);
    assert_eq!(s.updated, 1);
    assert_eq!(totals(&index, 1), (14, 100, 700));
    // The retired incarnation re-delivered (even with a larger count): stale.
    let s = index.apply(&a(), 1, &[snap(1, 3, 50, 0, 900)]);
    assert_eq!(
        s,
        ApplyStats {
            stale_serial: 1,
            ..ApplyStats::default()
        }
    );
    assert_eq!(totals(&index, 1), (14, 100, 700));
    assert!(index.drain_changed().all(|(_, m)| m.count == 14));
    assert_eq!(
        index.drain_changed().count(),
        0,
        "a stale entry changes nothing"
    );
}

#[test]
fn a_newer_epoch_retires_the_old_one_and_old_batches_are_stale() {
    let mut index = EdgeIndex::new(10);
    assert_eq!(index.hello(&a(), 1), Hello::New);
    index.apply(
        &a(),
        1,
        &[snap(1, 5, 10, 100, 200), snap(2, 6, 3, 100, 100)],
    );
    assert_eq!(index.hello(&a(), 1), Hello::Resumed);
    assert_eq!(index.hello(&a(), 2), Hello::Restarted);
    assert_eq!(index.agent_epoch(&a()), Some(2));
    // The restarted process starts its table, and its serials, from zero.
    let s = index.apply(&a(), 2, &[snap(1, 1, 4, 300, 400)]);
    assert_eq!(s.updated, 1);
    assert_eq!(totals(&index, 1), (14, 100, 400));
    // Key 2 was not sent again: its old count stays.
    assert_eq!(totals(&index, 2), (3, 100, 100));
    // A late batch of the dead process: ignored, even for a key it never sent.
    let s = index.apply(&a(), 1, &[snap(1, 5, 99, 0, 999), snap(3, 9, 1, 1, 1)]);
    assert_eq!(
        s,
        ApplyStats {
            stale_epoch: 2,
            ..ApplyStats::default()
        }
    );
    assert_eq!(totals(&index, 1), (14, 100, 400));
    assert_eq!(index.len(), 2);
    assert_eq!(index.hello(&a(), 1), Hello::Stale);
    assert_eq!(index.totals().stale_epoch, 2);
}

#[test]
fn agents_beyond_the_limit_are_refused_and_their_batches_dropped() {
    let mut index = EdgeIndex::new(10).with_max_agents(2);
    let c = AgentId::from("node-c");
    assert_eq!(index.hello(&a(), 1), Hello::New);
    index.apply(&b(), 1, &[snap(1, 5, 10, 100, 200)]);
    assert_eq!(index.agents(), 2);
    assert_eq!(index.hello(&c, 1), Hello::Full);
    let s = index.apply(&c, 1, &[snap(2, 6, 3, 100, 100)]);
    assert_eq!(
        s,
        ApplyStats {
            dropped: 1,
            ..ApplyStats::default()
        }
    );
    assert_eq!((index.agents(), index.len()), (2, 1));
    // Known agents come and go as before.
    assert_eq!(index.hello(&a(), 1), Hello::Resumed);
    assert_eq!(index.hello(&b(), 2), Hello::Restarted);
}

#[test]
fn a_batch_of_a_newer_epoch_is_an_implicit_hello() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 4, &[snap(1, 5, 10, 100, 200)]);
    assert_eq!(index.agent_epoch(&a()), Some(4));
    index.apply(&a(), 5, &[snap(1, 1, 1, 300, 300)]);
    assert_eq!(index.agent_epoch(&a()), Some(5));
    assert_eq!(totals(&index, 1), (11, 100, 300));
    assert_eq!(
        index
            .apply(&a(), 4, &[snap(1, 5, 10, 100, 200)])
            .stale_epoch,
        1
    );
}

#[test]
fn agents_add_up_and_their_serials_are_independent() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 5, 10, 100, 200)]);
    // The same serial from another agent is another incarnation.
    index.apply(&b(), 1, &[snap(1, 5, 7, 50, 150)]);
    index.apply(&b(), 1, &[snap(1, 2, 7, 50, 150)]);
    assert_eq!(totals(&index, 1), (17, 50, 200));
    assert_eq!(index.agents_of(&EdgeKey::of(&edge(1, 0))), 2);
    assert_eq!(index.totals().stale_serial, 1);
}

#[test]
fn capacity_drops_new_keys_only_and_counts_them() {
    let mut index = EdgeIndex::new(2);
    let s = index.apply(
        &a(),
        1,
        &[
            snap(1, 1, 1, 0, 0),
            snap(2, 2, 1, 0, 0),
            snap(3, 3, 1, 0, 0),
        ],
    );
    assert_eq!((s.inserted, s.dropped), (2, 1));
    // Known keys keep merging when full; every further new key is dropped.
    let s = index.apply(&b(), 1, &[snap(1, 1, 5, 0, 9), snap(3, 3, 1, 0, 0)]);
    assert_eq!((s.updated, s.dropped), (1, 1));
    assert_eq!(totals(&index, 1), (6, 0, 9));
    assert_eq!((index.len(), index.dropped()), (2, 2));
    assert!(index.get(&EdgeKey::of(&edge(3, 0))).is_none());

    let mut none = EdgeIndex::new(0);
    assert_eq!(none.apply(&a(), 1, &[snap(1, 1, 1, 0, 0)]).dropped, 1);
    assert!(none.is_empty());
}

#[test]
fn counts_saturate_instead_of_wrapping() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 1, u64::MAX - 1, 0, 0)]);
    index.apply(&b(), 1, &[snap(1, 1, 5, 0, 0)]);
    assert_eq!(totals(&index, 1).0, u64::MAX);
}

#[test]
fn metadata_comes_from_the_earliest_incarnation_whatever_the_order() {
    // Agent b saw the key first (time 50); a's edge has other labels and address.
    let from_a = (a(), snap_meta(1, 1, 5, 1, 100, 200));
    let from_b = (b(), snap_meta(1, 2, 9, 1, 50, 60));
    for order in [[&from_a, &from_b], [&from_b, &from_a]] {
        let mut index = EdgeIndex::new(10);
        for (agent, s) in order {
            index.apply(agent, 1, std::slice::from_ref(s));
        }
        let m = index.merged().next().expect("one key");
        assert_eq!(m.edge, from_b.1.edge);
        assert_eq!((m.count, m.first_seen.0, m.last_seen.0), (2, 50, 200));
    }
    // A tie on first_seen: the smaller agent id wins, in both arrival orders.
    let tie_a = snap_meta(1, 1, 5, 1, 50, 200);
    for a_first in [true, false] {
        let mut index = EdgeIndex::new(10);
        if a_first {
            index.apply(&a(), 1, std::slice::from_ref(&tie_a));
        }
        index.apply(&b(), 1, std::slice::from_ref(&from_b.1));
        if !a_first {
            index.apply(&a(), 1, std::slice::from_ref(&tie_a));
        }
        let m = index.merged().next().expect("one key");
        assert_eq!(m.edge, tie_a.edge, "node-a < node-b");
        assert_eq!((m.count, m.first_seen.0, m.last_seen.0), (2, 50, 200));
    }
}

#[test]
fn an_earlier_record_of_another_incarnation_takes_the_metadata_over() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap_meta(1, 1, 5, 1, 100, 100)]);
    index.drain_changed().for_each(drop);
    // Agent b's entry first had a later first_seen, then an out-of-order record moved it
    // before a's.
    index.apply(&b(), 1, &[snap_meta(1, 2, 3, 1, 150, 150)]);
    assert_eq!(
        index.merged().next().map(|m| m.edge.clone()),
        Some(edge(1, 1))
    );
    index.apply(&b(), 1, &[snap_meta(1, 2, 3, 2, 80, 150)]);
    let changed: Vec<MergedEdge> = index.drain_changed().map(|(_, m)| m.clone()).collect();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].edge, edge(1, 2));
    assert_eq!(changed[0].first_seen, Timestamp(80));
}

#[test]
fn drain_changed_returns_each_changed_key_once_then_nothing() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 1, 1, 0, 0), snap(2, 2, 1, 0, 0)]);
    index.apply(&a(), 1, &[snap(1, 1, 2, 0, 5)]);
    let keys = |index: &mut EdgeIndex| -> BTreeSet<EdgeKey> {
        index.drain_changed().map(|(_, m)| m.key()).collect()
    };
    assert_eq!(
        keys(&mut index),
        BTreeSet::from([EdgeKey::of(&edge(1, 0)), EdgeKey::of(&edge(2, 0))])
    );
    assert!(keys(&mut index).is_empty());
    // A duplicate is not a change; a new count is, and so is a key seen by a new agent.
    index.apply(&a(), 1, &[snap(1, 1, 2, 0, 5), snap(2, 2, 3, 0, 0)]);
    assert_eq!(keys(&mut index), BTreeSet::from([EdgeKey::of(&edge(2, 0))]));
    index.apply(&b(), 1, &[snap(1, 1, 1, 0, 5)]);
    assert_eq!(keys(&mut index), BTreeSet::from([EdgeKey::of(&edge(1, 0))]));
    // Times alone are a change too.
    index.apply(&a(), 1, &[snap(2, 2, 3, 0, 7)]);
    assert_eq!(keys(&mut index), BTreeSet::from([EdgeKey::of(&edge(2, 0))]));
    index.apply(&a(), 1, &[snap(2, 2, 3, -1, 7)]);
    assert_eq!(keys(&mut index), BTreeSet::from([EdgeKey::of(&edge(2, 0))]));
    // Dropping the iterator unconsumed still clears the flags.
    index.apply(&a(), 1, &[snap(1, 1, 9, 0, 5)]);
    drop(index.drain_changed());
    assert!(keys(&mut index).is_empty());
}

#[test]
fn slots_follow_insertion_and_merged_from_gives_the_keys_inserted_since() {
    let mut index = EdgeIndex::new(10);
    index.apply(&a(), 1, &[snap(1, 1, 1, 0, 0), snap(2, 2, 1, 0, 0)]);
    let first: Vec<(u32, EdgeKey)> = index.drain_changed().map(|(s, m)| (s, m.key())).collect();
    assert_eq!(
        BTreeSet::from_iter(first),
        BTreeSet::from([(0, EdgeKey::of(&edge(1, 0))), (1, EdgeKey::of(&edge(2, 0)))])
    );
    let held = index.len();
    // A known key keeps its slot; a new one takes the next.
    index.apply(&a(), 1, &[snap(1, 1, 5, 0, 0), snap(3, 3, 1, 0, 0)]);
    let slots: BTreeSet<u32> = index.drain_changed().map(|(s, _)| s).collect();
    assert_eq!(slots, BTreeSet::from([0, 2]));
    let new: Vec<EdgeKey> = index.merged_from(held).map(MergedEdge::key).collect();
    assert_eq!(new, [EdgeKey::of(&edge(3, 0))]);
    assert_eq!(index.merged_from(index.len() + 5).count(), 0);
}

/// Memory per distinct edge, fixed part (what the index adds on top of the strings and
/// label sets, which the stored edge shares with its key through `Arc`s): one map bucket
/// (key + slot + control byte, at a load factor between 7/16 and 7/8) and one entry. On
/// x86_64 (Rust 1.95) the bucket is 113 bytes and the entry 328, so 457-586 bytes per edge
/// seen by one agent, plus 32 per further agent; the strings of a typical in-cluster edge
/// (two namespaces and names, a few labels) add 150-300 bytes, allocated once by the
/// decoder of the batch that first carried the edge.
#[test]
fn bytes_per_distinct_edge() {
    use std::mem::size_of;
    let bucket = size_of::<(EdgeKey, u32)>() + 1;
    let entry = size_of::<entry::Entry>();
    let per_edge_dense = bucket * 8 / 7 + entry;
    let per_edge_sparse = bucket * 16 / 7 + entry;
    println!(
        "index: bucket {bucket} B, entry {entry} B, per distinct edge {per_edge_dense}-{per_edge_sparse} B + strings"
    );
    assert!(per_edge_sparse <= 640, "{per_edge_sparse} bytes per edge");
}
