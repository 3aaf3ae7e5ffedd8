//! Unit tests of the batch codec: round trips, splitting, table resets, steady-state size,
//! and every kind of malformed batch.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ne_proto::ingest as pb;
use ne_proto::prost::Message;

use super::*;
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Reserved, Str, Timestamp, WorkloadKind, WorkloadRef,
    labels,
};
use std::sync::Arc;

/// xorshift64: deterministic pseudo-random numbers without a dependency.
pub(super) struct XorShift(pub(super) u64);

impl XorShift {
    pub(super) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub(super) fn workload(namespace: &str, kind: WorkloadKind, name: &str) -> Endpoint {
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: namespace.into(),
        kind,
        name: name.into(),
    }))
    .with_labels(labels([
        ("app", name.to_string()),
        ("pod-template-hash", format!("{:x}", name.len() * 7919)),
    ]))
}

fn external(ip: IpAddr) -> Endpoint {
    Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip))
}

pub(super) fn snap(edge: Edge, serial: u64, count: u64, first: i64, last: i64) -> EdgeSnapshot {
    EdgeSnapshot {
        edge,
        count,
        first_seen: Timestamp(first),
        last_seen: Timestamp(last),
        serial,
    }
}

/// One edge of each shape: every endpoint kind, both IP versions, labels, identities, a
/// DNS name, every protocol and direction.
fn variety() -> Vec<EdgeSnapshot> {
    let web = workload("shop", WorkloadKind::Deployment, "web");
    let v6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
    let peers = [
        workload("db", WorkloadKind::StatefulSet, "pg")
            .with_ip(Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))))
            .with_identity(Some("cluster.local/ns/db/sa/pg".into())),
        Endpoint::new(EndpointId::Pod {
            namespace: "jobs".into(),
            name: "backup-xyz".into(),
        })
        .with_ip(Some(v6)),
        Endpoint::new(EndpointId::PodGroup {
            namespace: "calico".into(),
            prefix: "batch-".into(),
        }),
        external(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9))),
        external(v6),
        // An external endpoint whose record address is not its identity's.
        Endpoint::new(EndpointId::External(mapped))
            .with_ip(Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)))),
        Endpoint::new(EndpointId::External(v6)),
        Endpoint::new(EndpointId::Reserved(Reserved::KubeApiserver))
            .with_ip(Some(IpAddr::V4(Ipv4Addr::new(172, 18, 0, 2)))),
        Endpoint::new(EndpointId::Reserved(Reserved::World)),
        workload("ops", WorkloadKind::CronJob, "report").with_labels(labels([("", "")])),
    ];
    let protocols = [
        Protocol::Tcp,
        Protocol::Udp,
        Protocol::Sctp,
        Protocol::Icmp,
        Protocol::Other,
    ];
    peers
        .into_iter()
        .enumerate()
        .map(|(i, peer)| {
            let edge = Edge {
                subject: web.clone(),
                direction: if i % 2 == 0 {
                    Direction::Egress
                } else {
                    Direction::Ingress
                },
                peer,
                protocol: protocols[i % protocols.len()],
                port: [0, 1, 53, 443, 65535][i % 5],
                peer_dns: (i % 3 == 0).then(|| "api.example.com".into()),
                denied_by: None,
            };
            let t = 1_780_000_000_000_000_000 + i as i64 * 1_234_567;
            snap(edge, 100 + i as u64, 1 + i as u64 * 1000, t - 5_000, t)
        })
        .collect()
}

/// Decodes `batches` in order and returns every entry.
pub(super) fn decode_all(decoder: &mut Decoder, batches: &[pb::Batch]) -> Vec<EdgeSnapshot> {
    batches
        .iter()
        .flat_map(|b| {
            decoder
                .decode(b)
                .expect("a batch the encoder made decodes")
                .edges
        })
        .collect()
}

/// Decodes `batches` in order and returns every entry, by class (learned, denied, audit).
pub(super) fn decode_classes(
    decoder: &mut Decoder,
    batches: &[pb::Batch],
) -> Vec<Vec<EdgeSnapshot>> {
    let mut out = vec![Vec::new(); 3];
    for b in batches {
        let d = decoder.decode(b).expect("a batch the encoder made decodes");
        assert_eq!(d.len(), d.edges.len() + d.denials.len() + d.audits.len());
        for (i, class) in EdgeClass::ALL.into_iter().enumerate() {
            out[i].extend_from_slice(d.class(class));
        }
    }
    out
}

#[test]
fn every_shape_round_trips_and_a_second_send_needs_no_additions() {
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let edges = variety();
    let first = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(first.len(), 1);
    assert!(first[0].snapshot && first[0].snapshot_end);
    assert_eq!(decode_all(&mut dec, &first), edges);
    assert_eq!(enc.table_sizes(), dec.table_sizes());

    // Later: counts and times move on, first_seen goes back for one entry.
    let mut later = edges.clone();
    for (i, s) in later.iter_mut().enumerate() {
        s.count += 7;
        s.last_seen.0 += 1_000_000_000;
        if i == 3 {
            s.first_seen.0 -= 42;
        }
    }
    let second = enc.encode(2, false, &later, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(second.len(), 1);
    let b = &second[0];
    assert!(!b.snapshot && !b.snapshot_end && !b.reset);
    assert!(b.strings.is_empty() && b.endpoints.is_none() && b.edges.is_none());
    assert_eq!(decode_all(&mut dec, &second), later);
}

#[test]
fn an_entry_that_restarted_is_a_new_edge_with_the_same_endpoints() {
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let s = variety().remove(0);
    let sent = enc.encode(1, false, std::slice::from_ref(&s), 4096);
    assert_eq!(decode_all(&mut dec, &sent), std::slice::from_ref(&s));
    // Expired and created again: new serial, count from 1.
    let again = snap(s.edge.clone(), 999, 1, 5, 5);
    let sent = enc.encode(2, false, std::slice::from_ref(&again), 4096);
    let edges = sent[0].edges.as_ref().expect("a new edge is defined");
    assert_eq!(edges.serial, [999]);
    assert!(sent[0].endpoints.is_none(), "its endpoints are known");
    assert_eq!(decode_all(&mut dec, &sent), [again]);
}

#[test]
fn one_serial_with_two_different_edges_stays_two_edges() {
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let mut edges = variety();
    for s in &mut edges {
        s.serial = 1;
    }
    let sent = enc.encode(1, false, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(decode_all(&mut dec, &sent), edges);
    assert_eq!(enc.table_sizes().edges, edges.len());
}

#[test]
fn an_empty_snapshot_is_one_batch_and_an_empty_delta_none() {
    let mut enc = Encoder::new();
    let batches = enc.encode(5, true, &[], DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    assert_eq!(
        (b.sequence, b.snapshot, b.snapshot_end, b.rows.is_none()),
        (5, true, true, true)
    );
    let decoded = Decoder::new().decode(b).expect("empty snapshot decodes");
    assert!(decoded.snapshot_end && decoded.edges.is_empty());
    assert!(enc.encode(6, false, &[], 100).is_empty());
}

/// `n` edges shaped like a busy node: 40 local workloads in 8 namespaces talking to
/// in-cluster peers and to external addresses, some with DNS names.
pub(super) fn node_like(n: usize, rng: &mut XorShift) -> Vec<EdgeSnapshot> {
    (0..n)
        .map(|i| {
            let subject = workload(
                &format!("team-{}", i % 8),
                WorkloadKind::Deployment,
                &format!("service-{}", i % 40),
            );
            let external_peer = i % 5 == 0;
            let peer = if external_peer {
                external(IpAddr::V4(Ipv4Addr::from(0xcb00_7100 + i as u32)))
            } else {
                workload(
                    &format!("team-{}", (i / 8) % 8),
                    WorkloadKind::StatefulSet,
                    &format!("backend-{}", i % 97),
                )
            };
            let edge = Edge {
                subject,
                direction: if i % 2 == 0 {
                    Direction::Egress
                } else {
                    Direction::Ingress
                },
                peer,
                protocol: if i % 7 == 0 {
                    Protocol::Udp
                } else {
                    Protocol::Tcp
                },
                port: [80, 443, 5432, 6379, 8080, 9090][i % 6],
                peer_dns: external_peer.then(|| format!("api-{}.example.com", i % 13).into()),
                denied_by: None,
            };
            let first = 1_780_000_000_000_000_000 + rng.below(3_600_000_000_000) as i64;
            snap(edge, i as u64 + 1, 1 + rng.below(100_000), first, first)
        })
        .collect()
}

/// The next flush interval of a steady state: every entry got new connections and a new
/// last_seen (nanosecond precision) within `interval_ns` of `now`.
pub(super) fn advance(edges: &mut [EdgeSnapshot], now: i64, interval_ns: u64, rng: &mut XorShift) {
    for s in edges {
        s.count += 1 + rng.below(500);
        s.last_seen = Timestamp(now - rng.below(interval_ns) as i64);
    }
}

/// Wire bytes per row of `batches`, counting the whole `AgentMessage`s.
fn bytes_per_row(batches: &[pb::Batch]) -> f64 {
    let bytes: usize = batches.iter().map(agent_message_len).sum();
    let rows: usize = batches
        .iter()
        .map(|b| b.rows.as_ref().map_or(0, |r| r.edge.len()))
        .sum();
    bytes as f64 / rows as f64
}

#[test]
fn a_known_edge_with_new_counts_and_times_costs_at_most_16_bytes() {
    let mut rng = XorShift(0x5eed);
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let mut edges = node_like(1000, &mut rng);
    let snapshot = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    let snapshot_cost = bytes_per_row(&snapshot);
    decode_all(&mut dec, &snapshot);

    let mut now = 1_780_003_600_000_000_000;
    let mut sequence = 2;
    for (interval_ns, limit) in [(1_000_000_000u64, 12.0), (10_000_000_000, 12.0)] {
        now += interval_ns as i64;
        advance(&mut edges, now, interval_ns, &mut rng);
        let batches = enc.encode(sequence, false, &edges, DEFAULT_MAX_MESSAGE_BYTES);
        sequence += batches.len() as u64;
        let cost = bytes_per_row(&batches);
        eprintln!(
            "1000 known edges, {} s interval: {cost:.2} B/edge (snapshot {snapshot_cost:.1} B/edge)",
            interval_ns / 1_000_000_000
        );
        assert!(cost <= limit, "{cost} B per changed edge");
        assert_eq!(decode_all(&mut dec, &batches), edges);
    }

    // The drain order need not follow the table order: shuffled, still under 16 B.
    let mut shuffled = edges.clone();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i as u64 + 1) as usize);
    }
    advance(&mut shuffled, now + 1_000_000_000, 1_000_000_000, &mut rng);
    let batches = enc.encode(sequence, false, &shuffled, DEFAULT_MAX_MESSAGE_BYTES);
    let cost = bytes_per_row(&batches);
    eprintln!("1000 known edges, shuffled: {cost:.2} B/edge");
    assert!(cost <= 16.0, "{cost} B per changed edge");
    assert_eq!(decode_all(&mut dec, &batches), shuffled);
}

#[test]
fn small_limits_split_into_consecutive_batches_that_each_decode() {
    let mut rng = XorShift(7);
    let edges = node_like(300, &mut rng);
    for limit in [64usize, 150, 200, 333, 1000, 4096] {
        let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
        let batches = enc.encode(10, true, &edges, limit);
        let mut decoded = Vec::new();
        for (i, b) in batches.iter().enumerate() {
            let len = agent_message_len(b);
            assert!(len <= limit, "limit {limit}: batch {i} is {len} bytes");
            assert_eq!(b.sequence, 10 + i as u64);
            assert!(b.snapshot);
            assert_eq!(b.snapshot_end, i + 1 == batches.len());
            // Each batch decodes with only the ones before it.
            decoded.extend(dec.decode(b).expect("decodes").edges);
        }
        let skipped = enc.oversized() as usize;
        assert_eq!(decoded.len() + skipped, edges.len(), "limit {limit}");
        if limit >= 1000 {
            assert_eq!((skipped, decoded), (0, edges.clone()), "limit {limit}");
            // Batches are well filled: all but the last carry most of the limit.
            for b in &batches[..batches.len() - 1] {
                assert!(agent_message_len(b) * 10 >= limit * 6, "limit {limit}");
            }
        } else {
            // Nothing fits in 64 bytes; what is sent is what was not skipped, in order.
            let kept: Vec<_> = edges
                .iter()
                .filter(|e| decoded.contains(e))
                .cloned()
                .collect();
            assert_eq!(decoded, kept, "limit {limit}");
        }
    }
}

#[test]
fn the_encoder_starts_its_tables_over_at_its_limits_and_the_decoder_follows() {
    let mut rng = XorShift(11);
    let mut edges = node_like(200, &mut rng);
    let limits = Limits {
        strings: 1000,
        endpoints: 1000,
        edges: 64,
        ..Limits::default()
    };
    let (mut enc, mut dec) = (Encoder::with_limits(limits), Decoder::with_limits(limits));
    let mut sequence = 1;
    for round in 0..3 {
        advance(
            &mut edges,
            1_790_000_000_000_000_000 + round,
            1_000,
            &mut rng,
        );
        let batches = enc.encode(sequence, round == 0, &edges, 2048);
        sequence += batches.len() as u64;
        assert!(batches.iter().any(|b| b.reset), "round {round}");
        assert_eq!(decode_all(&mut dec, &batches), edges, "round {round}");
        assert!(enc.table_sizes().edges <= 64);
        assert_eq!(enc.table_sizes(), dec.table_sizes());
    }
    assert!(enc.resets() >= 6, "{} resets", enc.resets());
    assert_eq!(enc.oversized(), 0);
}

#[test]
fn an_entry_too_large_for_any_message_is_skipped_and_counted() {
    let mut edges = variety();
    let huge: Vec<(String, String)> = (0..400)
        .map(|i| (format!("k{i}"), format!("{i}{}", "v".repeat(50))))
        .collect();
    edges[2].edge.subject = edges[2].edge.subject.clone().with_labels(labels(huge));
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let batches = enc.encode(1, true, &edges, 8192);
    assert_eq!(enc.oversized(), 1);
    assert!(batches.iter().all(|b| agent_message_len(b) <= 8192));
    let mut expected = edges.clone();
    expected.remove(2);
    assert_eq!(decode_all(&mut dec, &batches), expected);
    assert!(batches.last().is_some_and(|b| b.snapshot_end));
}

/// A valid three-batch stream to break: batch 1 defines everything, batch 2 has rows only.
fn stream() -> (Vec<pb::Batch>, Vec<pb::Batch>) {
    let mut enc = Encoder::new();
    let edges = variety();
    let first = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    let second = enc.encode(2, false, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    (first, second)
}

/// Applies `mutate` to batch 1 and expects `expected` from the decoder, then checks the
/// decoder is unchanged: the intact batches still decode.
fn rejects(mutate: impl FnOnce(&mut pb::Batch), expected: DeltaError) {
    let (first, second) = stream();
    let mut dec = Decoder::new();
    let mut broken = first[0].clone();
    mutate(&mut broken);
    assert_eq!(dec.decode(&broken), Err(expected.clone()));
    assert_eq!(dec.table_sizes(), TableSizes::default(), "{expected}");
    assert_eq!(decode_all(&mut dec, &first), variety(), "{expected}");
    assert_eq!(decode_all(&mut dec, &second), variety(), "{expected}");
}

fn endpoints(b: &mut pb::Batch) -> &mut pb::Endpoints {
    b.endpoints.as_mut().expect("batch 1 has endpoints")
}

fn edge_columns(b: &mut pb::Batch) -> &mut pb::Edges {
    b.edges.as_mut().expect("batch 1 has edges")
}

fn rows(b: &mut pb::Batch) -> &mut pb::Rows {
    b.rows.as_mut().expect("batch 1 has rows")
}

#[test]
fn malformed_batches_are_typed_errors_that_change_nothing() {
    use DeltaError as E;
    rejects(
        |b| b.sequence = 0,
        E::Sequence {
            expected: 1,
            got: 0,
        },
    );
    rejects(|b| b.snapshot = false, E::SnapshotFlags);
    rejects(
        |b| b.strings_base = 3,
        E::OutOfStep {
            table: Table::Strings,
            expected: 0,
            got: 3,
        },
    );
    rejects(
        |b| b.edges_base = 1,
        E::OutOfStep {
            table: Table::Edges,
            expected: 0,
            got: 1,
        },
    );
    rejects(
        |b| endpoints(b).namespace[0] = 10_000,
        E::IndexOutOfRange {
            table: Table::Strings,
            index: 10_000,
            len: stream().0[0].strings.len(),
        },
    );
    rejects(
        |b| endpoints(b).kind[1] = 0,
        E::BadValue {
            column: "kind",
            value: 0,
        },
    );
    rejects(
        |b| endpoints(b).workload_kind[0] = 77,
        E::BadValue {
            column: "workload_kind",
            value: 77,
        },
    );
    rejects(
        |b| {
            endpoints(b).identity.pop();
        },
        E::ColumnLength {
            column: "identity",
            expected: 11,
            got: 10,
        },
    );
    rejects(
        |b| endpoints(b).name.push(0),
        E::ColumnLeftOver {
            column: "name",
            left: 1,
        },
    );
    rejects(
        |b| {
            endpoints(b).label_key.pop();
        },
        E::ColumnShort {
            column: "label_key",
        },
    );
    rejects(
        |b| endpoints(b).label_count[0] = u32::MAX,
        E::ColumnShort {
            column: "label_key",
        },
    );
    rejects(
        |b| {
            endpoints(b).addresses.pop();
        },
        E::ColumnShort {
            column: "addresses",
        },
    );
    rejects(
        |b| endpoints(b).addresses.push(1),
        E::ColumnLeftOver {
            column: "addresses",
            left: 1,
        },
    );
    rejects(
        // The subject (a workload) claims its address is its own external one.
        |b| endpoints(b).address[0] = pb::AddressForm::SameAsExternal as i32,
        E::BadValue {
            column: "address",
            value: 3,
        },
    );
    rejects(
        |b| endpoints(b).external_address[0] = pb::AddressForm::None as i32,
        E::BadValue {
            column: "external_address",
            value: 0,
        },
    );
    rejects(
        |b| edge_columns(b).port[0] = 65_536,
        E::BadValue {
            column: "port",
            value: 65_536,
        },
    );
    rejects(
        |b| edge_columns(b).direction[0] = 9,
        E::BadValue {
            column: "direction",
            value: 9,
        },
    );
    rejects(
        |b| edge_columns(b).peer[2] = 11,
        E::IndexOutOfRange {
            table: Table::Endpoints,
            index: 11,
            len: 11,
        },
    );
    rejects(
        |b| edge_columns(b).peer_dns[0] = 5_000,
        E::IndexOutOfRange {
            table: Table::Strings,
            index: 4_999,
            len: stream().0[0].strings.len(),
        },
    );
    rejects(
        |b| {
            edge_columns(b).serial.push(1);
        },
        E::ColumnLength {
            column: "serial",
            expected: 10,
            got: 11,
        },
    );
    rejects(
        |b| rows(b).edge[4] = i64::MAX,
        E::IndexOutOfRange {
            table: Table::Edges,
            index: 3 + i128::from(i64::MAX),
            len: 10,
        },
    );
    rejects(
        |b| rows(b).edge[0] = 0,
        E::IndexOutOfRange {
            table: Table::Edges,
            index: -1,
            len: 10,
        },
    );
    rejects(
        |b| {
            rows(b).count.pop();
        },
        E::ColumnLength {
            column: "count",
            expected: 10,
            got: 9,
        },
    );
}

#[test]
fn a_failed_batch_restores_first_seen_references_and_tables_after_a_reset() {
    let (first, second) = stream();
    let mut dec = Decoder::new();
    decode_all(&mut dec, &first);
    // Rows of batch 2 that update first_seen, then an invalid row: nothing may stick.
    let mut broken = second[0].clone();
    rows(&mut broken).first_seen[0] = 1_000;
    rows(&mut broken).edge.push(50);
    rows(&mut broken).count.push(1);
    rows(&mut broken).last_seen.push(0);
    rows(&mut broken).first_seen.push(0);
    assert!(matches!(
        dec.decode(&broken),
        Err(DeltaError::IndexOutOfRange { .. })
    ));
    // A reset batch that fails must bring the old tables back.
    let mut reset = second[0].clone();
    reset.reset = true;
    (reset.strings_base, reset.endpoints_base, reset.edges_base) = (0, 0, 0);
    assert!(matches!(
        dec.decode(&reset),
        Err(DeltaError::IndexOutOfRange { .. })
    ));
    assert_eq!(dec.table_sizes().edges, 10);
    assert_eq!(decode_all(&mut dec, &second), variety());
}

#[test]
fn lost_or_repeated_batches_are_detected() {
    let mut rng = XorShift(3);
    let edges = node_like(50, &mut rng);
    let mut enc = Encoder::new();
    let batches = enc.encode(1, true, &edges, 400);
    assert!(batches.len() >= 3);
    let mut dec = Decoder::new();
    dec.decode(&batches[0]).expect("first batch");
    assert_eq!(
        dec.decode(&batches[2]),
        Err(DeltaError::Sequence {
            expected: 2,
            got: 3
        })
    );
    assert_eq!(
        dec.decode(&batches[0]),
        Err(DeltaError::Sequence {
            expected: 2,
            got: 1
        })
    );
    // Renumbered to hide the gap, the table offsets still give it away.
    let mut renumbered = batches[2].clone();
    renumbered.sequence = 2;
    assert!(matches!(
        dec.decode(&renumbered),
        Err(DeltaError::OutOfStep { .. })
    ));
}

#[test]
fn the_decoder_refuses_to_grow_past_its_limits() {
    let (first, _) = stream();
    let mut dec = Decoder::with_limits(Limits {
        strings: 1 << 10,
        endpoints: 1 << 10,
        edges: 5,
        ..Limits::default()
    });
    assert_eq!(
        dec.decode(&first[0]),
        Err(DeltaError::TableFull {
            table: Table::Edges,
            limit: 5
        })
    );
    assert_eq!(dec.table_sizes(), TableSizes::default());
}

/// A batch of `n` new strings of `len` bytes each (no rows), at table offset `base`.
fn strings_batch(sequence: u64, base: usize, n: usize, len: usize) -> pb::Batch {
    pb::Batch {
        sequence,
        strings_base: base as u32,
        strings: (0..n).map(|i| format!("{i:0len$}")).collect(),
        ..pb::Batch::default()
    }
}

#[test]
fn the_decoder_refuses_tables_past_their_bytes_and_stays_as_it_was() {
    let limits = Limits {
        bytes: 100 * cost::string(10),
        ..Limits::default()
    };
    let mut dec = Decoder::with_limits(limits);
    dec.decode(&strings_batch(1, 0, 60, 10)).unwrap();
    assert_eq!(dec.table_bytes(), 60 * cost::string(10));
    let refused = strings_batch(2, 60, 41, 10);
    assert_eq!(
        dec.decode(&refused),
        Err(DeltaError::TableBytes {
            limit: limits.bytes
        })
    );
    assert_eq!(dec.table_sizes().strings, 60);
    assert_eq!(dec.table_bytes(), 60 * cost::string(10));
    dec.decode(&strings_batch(2, 60, 40, 10)).unwrap();
    assert_eq!(dec.table_bytes(), limits.bytes);
}

#[test]
fn labels_count_in_the_bytes_before_they_are_allocated() {
    // One endpoint claiming a million labels, all the same string: two bytes each on the
    // wire, 32 each in memory. The count is checked before the labels are built.
    let (first, _) = stream();
    let mut batch = first[0].clone();
    let n = 1_000_000;
    let e = endpoints(&mut batch);
    e.label_count[0] = n;
    e.label_key = vec![0; n as usize];
    e.label_value = vec![0; n as usize];
    let limits = Limits {
        bytes: 1 << 20,
        ..Limits::default()
    };
    let mut dec = Decoder::with_limits(limits);
    assert_eq!(
        dec.decode(&batch),
        Err(DeltaError::TableBytes { limit: 1 << 20 })
    );
    assert_eq!(
        (dec.table_sizes(), dec.table_bytes()),
        (TableSizes::default(), 0)
    );
    assert_eq!(decode_all(&mut dec, &first), variety());
}

#[test]
fn a_shared_budget_bounds_every_stream_together_and_is_given_back() {
    let budget = Arc::new(TableBudget::new(100 * cost::string(10)));
    let mut a = Decoder::with_budget(Limits::default(), budget.clone());
    let mut b = Decoder::with_budget(Limits::default(), budget.clone());
    a.decode(&strings_batch(1, 0, 70, 10)).unwrap();
    assert_eq!(budget.used(), 70 * cost::string(10));
    assert_eq!(
        b.decode(&strings_batch(1, 0, 31, 10)),
        Err(DeltaError::Budget {
            limit: budget.limit()
        })
    );
    assert_eq!((b.table_bytes(), budget.used()), (0, 70 * cost::string(10)));
    b.decode(&strings_batch(1, 0, 30, 10)).unwrap();
    assert_eq!(budget.used(), budget.limit());
    // A reset gives back what the old tables held.
    let mut reset = strings_batch(2, 0, 10, 10);
    reset.reset = true;
    a.decode(&reset).unwrap();
    assert_eq!(budget.used(), 40 * cost::string(10));
    drop(a);
    drop(b);
    assert_eq!(budget.used(), 0);
}

#[test]
fn rows_per_batch_are_limited_at_both_ends() {
    let mut rng = XorShift(5);
    let edges = node_like(25, &mut rng);
    let limits = Limits {
        rows: 10,
        ..Limits::default()
    };
    let mut enc = Encoder::with_limits(limits);
    let batches = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    let rows: Vec<usize> = batches
        .iter()
        .map(|b| b.rows.as_ref().map_or(0, |r| r.edge.len()))
        .collect();
    assert_eq!(rows, [10, 10, 5]);
    assert_eq!(
        decode_all(&mut Decoder::with_limits(limits), &batches),
        edges
    );
    let mut strict = Decoder::with_limits(Limits { rows: 9, ..limits });
    assert_eq!(
        strict.decode(&batches[0]),
        Err(DeltaError::TooManyRows { rows: 10, limit: 9 })
    );
    assert_eq!(strict.table_sizes(), TableSizes::default());
}

#[test]
fn the_encoder_starts_over_before_the_decoder_would_refuse_the_bytes() {
    let mut rng = XorShift(17);
    let edges = node_like(200, &mut rng);
    let limits = Limits {
        bytes: 40 * (cost::EDGE + 2 * cost::endpoint(3)),
        ..Limits::default()
    };
    let (mut enc, mut dec) = (Encoder::with_limits(limits), Decoder::with_limits(limits));
    let batches = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    assert!(enc.resets() > 0);
    assert_eq!(decode_all(&mut dec, &batches), edges);
    assert_eq!(enc.table_bytes(), dec.table_bytes());
    assert!(dec.table_bytes() <= limits.bytes);
}

#[test]
fn messages_survive_the_wire_and_errors_read_well() {
    let (first, _) = stream();
    let message = pb::AgentMessage {
        message: Some(pb::agent_message::Message::Batch(first[0].clone())),
    };
    let bytes = message.encode_to_vec();
    assert_eq!(bytes.len(), agent_message_len(&first[0]));
    let back = pb::AgentMessage::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(back, message);
    let error = DeltaError::IndexOutOfRange {
        table: Table::Endpoints,
        index: 12,
        len: 3,
    };
    assert_eq!(
        error.to_string(),
        "endpoint index 12 out of range (table holds 3)"
    );
}

/// Total `AgentMessage` bytes of a fixed learned-only stream: the snapshot of `variety()`
/// and of 1000 node-like edges, then two steady-state deltas. Pinned to the figures of the
/// codec before the verdict dimension existed: a stream without denials costs exactly
/// what it did.
fn learned_only_stream_bytes() -> Vec<usize> {
    let mut rng = XorShift(0x5eed);
    let mut enc = Encoder::new();
    let mut sizes = Vec::new();
    let mut sequence = 1;
    let mut edges = variety();
    edges.extend(node_like(1000, &mut rng));
    let mut send = |enc: &mut Encoder, snapshot: bool, edges: &[EdgeSnapshot]| {
        let batches = enc.encode(sequence, snapshot, edges, DEFAULT_MAX_MESSAGE_BYTES);
        sequence += batches.len() as u64;
        batches.iter().map(agent_message_len).sum::<usize>()
    };
    sizes.push(send(&mut enc, true, &edges));
    let mut now = 1_780_003_600_000_000_000;
    for interval_ns in [1_000_000_000u64, 10_000_000_000] {
        now += interval_ns as i64;
        advance(&mut edges, now, interval_ns, &mut rng);
        sizes.push(send(&mut enc, false, &edges));
    }
    sizes
}

#[test]
fn a_stream_without_denials_costs_the_bytes_it_always_did() {
    // Measured on the codec of commit 1dfc93d (learned edges only).
    assert_eq!(learned_only_stream_bytes(), [30048, 9676, 9944]);
}

/// The same entries in all three classes: three edges each (a denial and a learned edge
/// with equal endpoints, port and serial are never confused), in one call and in one
/// batch; a later delta of known edges of every class needs no addition.
#[test]
fn classes_round_trip_apart_even_with_equal_edges_and_serials() {
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let edges = variety();
    let mut denied = edges.clone();
    for s in &mut denied {
        s.count += 1;
    }
    let audit: Vec<EdgeSnapshot> = edges[..3].to_vec();
    let classes = [
        (EdgeClass::Denied, denied.as_slice()),
        (EdgeClass::Learned, edges.as_slice()),
        (EdgeClass::Audit, audit.as_slice()),
    ];
    let first = enc.encode_classes(1, true, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(first.len(), 1);
    let columns = first[0].edges.as_ref().unwrap();
    // Denials first (positions 0..10), then the learned edges (unlisted), then 3 audits.
    let positions: Vec<u32> = (0..10).chain(20..23).collect();
    assert_eq!(columns.verdict_position, positions);
    assert_eq!(columns.verdict[0], pb::EdgeVerdict::PolicyDenied as i32);
    assert_eq!(columns.verdict[12], pb::EdgeVerdict::AuditDenied as i32);
    assert_eq!(enc.table_sizes().edges, 23);
    let got = decode_classes(&mut dec, &first);
    assert_eq!(got, [edges.clone(), denied.clone(), audit.clone()]);
    assert_eq!(enc.table_sizes(), dec.table_sizes());

    let mut later = denied.clone();
    later[4].count += 100;
    let classes = [
        (EdgeClass::Audit, &audit[1..2]),
        (EdgeClass::Denied, &later[4..5]),
        (EdgeClass::Learned, &edges[4..5]),
    ];
    let second = enc.encode_classes(2, false, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    assert!(second[0].edges.is_none() && second[0].endpoints.is_none());
    let got = decode_classes(&mut dec, &second);
    assert_eq!(
        got,
        [
            edges[4..5].to_vec(),
            later[4..5].to_vec(),
            audit[1..2].to_vec()
        ]
    );
}

/// A small message limit splits a mixed stream anywhere; positions are per batch, and
/// every entry still arrives in its class.
#[test]
fn small_limits_split_mixed_classes_with_positions_per_batch() {
    let mut rng = XorShift(11);
    let edges = node_like(200, &mut rng);
    let (learned, rest) = edges.split_at(100);
    let (denied, audit) = rest.split_at(60);
    for limit in [300usize, 1000, 5000] {
        let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
        let classes = [
            (EdgeClass::Audit, audit),
            (EdgeClass::Learned, learned),
            (EdgeClass::Denied, denied),
        ];
        let batches = enc.encode_classes(1, true, &classes, limit);
        assert!(batches.len() > 1, "limit {limit}");
        for b in &batches {
            assert!(agent_message_len(b) <= limit, "limit {limit}");
            if let Some(e) = &b.edges {
                assert!(
                    e.verdict_position
                        .iter()
                        .all(|&p| (p as usize) < e.subject.len())
                );
                assert!(e.verdict_position.windows(2).all(|w| w[0] < w[1]));
            }
        }
        assert_eq!(enc.oversized(), 0);
        let got = decode_classes(&mut dec, &batches);
        assert_eq!(got, [learned.to_vec(), denied.to_vec(), audit.to_vec()]);
    }
}

/// A mixed batch whose verdict columns are damaged: each is a typed error, and the
/// decoder is unchanged afterwards.
#[test]
fn malformed_verdict_columns_are_typed_errors_that_change_nothing() {
    use DeltaError as E;
    let edges = variety();
    let classes = [
        (EdgeClass::Learned, &edges[..4]),
        (EdgeClass::Denied, &edges[4..7]),
        (EdgeClass::Audit, &edges[7..]),
    ];
    let batch = Encoder::new().encode_classes(1, true, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    let intact = &batch[0];
    assert_eq!(
        intact.edges.as_ref().unwrap().verdict_position,
        [4, 5, 6, 7, 8, 9]
    );
    type Mutation = fn(&mut pb::Edges);
    let cases: Vec<(Mutation, DeltaError)> = vec![
        (
            |e| e.verdict[1] = 7,
            E::BadValue {
                column: "verdict",
                value: 7,
            },
        ),
        (
            |e| e.verdict[0] = pb::EdgeVerdict::Forwarded as i32,
            E::BadValue {
                column: "verdict",
                value: 0,
            },
        ),
        (
            |e| e.verdict[2] = -1,
            E::BadValue {
                column: "verdict",
                value: -1,
            },
        ),
        (
            |e| {
                e.verdict.pop();
            },
            E::ColumnLength {
                column: "verdict",
                expected: 6,
                got: 5,
            },
        ),
        (
            |e| e.verdict_position[5] = 10,
            E::ColumnLeftOver {
                column: "verdict_position",
                left: 1,
            },
        ),
        (
            |e| e.verdict_position[1] = 4,
            E::BadValue {
                column: "verdict_position",
                value: 4,
            },
        ),
        (
            |e| e.verdict_position.swap(2, 3),
            E::BadValue {
                column: "verdict_position",
                value: 6,
            },
        ),
        (
            |e| {
                e.verdict_position.push(u32::MAX);
                e.verdict.push(1);
            },
            E::ColumnLeftOver {
                column: "verdict_position",
                left: 1,
            },
        ),
    ];
    for (mutate, expected) in cases {
        let mut broken = intact.clone();
        mutate(broken.edges.as_mut().unwrap());
        let mut dec = Decoder::new();
        assert_eq!(dec.decode(&broken), Err(expected.clone()));
        assert_eq!(dec.table_sizes(), TableSizes::default(), "{expected}");
        let got = decode_classes(&mut dec, &batch);
        assert_eq!(
            got,
            [
                edges[..4].to_vec(),
                edges[4..7].to_vec(),
                edges[7..].to_vec()
            ],
            "{expected}"
        );
    }
}

/// Denials carry the policy the data plane blamed, as a string shared by every edge it
/// denied (sent once); denials naming none and learned edges carry none.
#[test]
fn denials_carry_the_policy_that_denied_them() {
    let edges = variety();
    let blamed = |s: &EdgeSnapshot, policy: Option<&str>| EdgeSnapshot {
        edge: Edge {
            denied_by: policy.map(Str::from),
            ..s.edge.clone()
        },
        ..s.clone()
    };
    let denied: Vec<EdgeSnapshot> = edges
        .iter()
        .enumerate()
        .map(|(i, s)| blamed(s, (i % 3 != 2).then_some("shop/deny-web")))
        .collect();
    let audit = vec![blamed(&edges[0], Some("default-deny"))];
    let classes = [
        (EdgeClass::Learned, edges.as_slice()),
        (EdgeClass::Denied, denied.as_slice()),
        (EdgeClass::Audit, audit.as_slice()),
    ];
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let batches = enc.encode_classes(1, true, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    assert_eq!(batches.len(), 1);
    let sent = &batches[0];
    let named = |name: &str| sent.strings.iter().filter(|s| *s == name).count();
    assert_eq!((named("shop/deny-web"), named("default-deny")), (1, 1));
    let columns = sent.edges.as_ref().unwrap();
    assert_eq!(columns.denied_by.len(), columns.verdict_position.len());
    let got = decode_classes(&mut dec, &batches);
    assert_eq!(got, [edges.clone(), denied, audit]);

    // Without a named policy the column is left out, and the denials decode as before.
    let (mut enc, mut dec) = (Encoder::new(), Decoder::new());
    let classes = [(EdgeClass::Denied, edges.as_slice())];
    let batches = enc.encode_classes(1, true, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    assert!(batches[0].edges.as_ref().unwrap().denied_by.is_empty());
    assert_eq!(decode_classes(&mut dec, &batches)[1], edges);
}

/// A damaged `denied_by` column is a typed error that changes nothing; an empty one (an
/// agent that predates it) means no denial names a policy.
#[test]
fn malformed_denied_by_columns_are_typed_errors_that_change_nothing() {
    use DeltaError as E;
    let edges: Vec<EdgeSnapshot> = variety()
        .into_iter()
        .map(|s| EdgeSnapshot {
            edge: Edge {
                denied_by: Some("shop/deny".into()),
                ..s.edge
            },
            ..s
        })
        .collect();
    let classes = [(EdgeClass::Denied, edges.as_slice())];
    let batch = Encoder::new().encode_classes(1, true, &classes, DEFAULT_MAX_MESSAGE_BYTES);
    let intact = &batch[0];
    let strings = intact.strings.len() as u32;
    type Mutation = fn(&mut pb::Edges);
    let cases: Vec<(Mutation, DeltaError)> = vec![
        (
            |e| {
                e.denied_by.pop();
            },
            E::ColumnLength {
                column: "denied_by",
                expected: 10,
                got: 9,
            },
        ),
        (
            |e| e.denied_by.push(1),
            E::ColumnLength {
                column: "denied_by",
                expected: 10,
                got: 11,
            },
        ),
        (
            |e| e.denied_by[3] = 10_001,
            E::IndexOutOfRange {
                table: Table::Strings,
                index: 10_000,
                len: strings as usize,
            },
        ),
    ];
    for (mutate, expected) in cases {
        let mut broken = intact.clone();
        mutate(broken.edges.as_mut().unwrap());
        let mut dec = Decoder::new();
        assert_eq!(dec.decode(&broken), Err(expected.clone()));
        assert_eq!(dec.table_sizes(), TableSizes::default(), "{expected}");
        assert_eq!(decode_classes(&mut dec, &batch)[1], edges, "{expected}");
    }
    let mut older = intact.clone();
    older.edges.as_mut().unwrap().denied_by.clear();
    let got = decode_classes(&mut Decoder::new(), &[older]);
    assert!(got[1].iter().all(|s| s.edge.denied_by.is_none()));
    assert_eq!(got[1].len(), edges.len());
}

/// Denials cost what learned edges cost, plus about two bytes per new denied edge (its
/// position and verdict) and a few bytes per batch for the two columns.
#[test]
fn a_denial_costs_its_position_and_verdict_once() {
    let mut rng = XorShift(0x5eed);
    let edges = node_like(1000, &mut rng);
    let learned = Encoder::new().encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    let denied = Encoder::new().encode_classes(
        1,
        true,
        &[(EdgeClass::Denied, &edges)],
        DEFAULT_MAX_MESSAGE_BYTES,
    );
    let bytes = |b: &[pb::Batch]| b.iter().map(agent_message_len).sum::<usize>();
    let extra = bytes(&denied) - bytes(&learned);
    // Positions 0..1000: 128 one-byte and 872 two-byte varints; 1000 one-byte codes; two
    // tags and two length prefixes.
    assert_eq!(extra, 128 + 872 * 2 + 1000 + 2 * (1 + 2));
}

/// The `delta` fuzz target's seeds (written where `NE_FUZZ_SEEDS` points, by `fuzz/run`):
/// a stream's first two batches, each behind its 2-byte length, as the target reads them.
#[test]
fn a_stream_encodes_as_fuzz_seeds() {
    let mut enc = Encoder::new();
    let edges = variety();
    let mut later = edges.clone();
    for s in &mut later {
        s.count += 1;
    }
    let mut stream = enc.encode(1, true, &edges, DEFAULT_MAX_MESSAGE_BYTES);
    stream.extend(enc.encode(2, false, &later, DEFAULT_MAX_MESSAGE_BYTES));
    let mut seed = Vec::new();
    for batch in &stream {
        let bytes = batch.encode_to_vec();
        let len = u16::try_from(bytes.len()).expect("a seed batch under 64 KiB");
        seed.extend_from_slice(&len.to_le_bytes());
        seed.extend_from_slice(&bytes);
    }
    let mut dec = Decoder::new();
    for batch in &stream {
        dec.decode(batch).expect("the seed stream decodes");
    }
    if let Some(dir) = std::env::var_os("NE_FUZZ_SEEDS") {
        let dir = std::path::Path::new(&dir).join("delta");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stream"), &seed).unwrap();
    }
}

#[test]
fn limits_for_a_senders_tables_scale_with_them_and_never_pass_the_defaults() {
    let d = Limits::default();
    // An agent at the default --max-edges (1 M learned, a tenth each for denials and
    // audits) keeps the defaults.
    assert_eq!(Limits::for_entries(1_200_000), d);
    let small = Limits::for_entries(120_000);
    assert_eq!(
        (small.edges, small.endpoints, small.strings),
        (240_000, 240_000, 240_000)
    );
    assert_eq!(small.bytes, 120_000 * Limits::BYTES_PER_ENTRY);
    assert_eq!(small.rows, d.rows);
    assert_eq!(Limits::for_entries(0), Limits::for_entries(4096), "a floor");
    assert_eq!(Limits::for_entries(usize::MAX), d);
}

#[test]
fn an_encoder_with_scaled_limits_stays_within_them_through_a_flood_of_new_edges() {
    let limits = Limits::for_entries(1);
    let mut enc = Encoder::with_limits(limits);
    let subject = workload("shop", WorkloadKind::Deployment, "api");
    let mut sequence = 1;
    for round in 0..10u32 {
        // 1 000 edges to addresses never seen before, each round.
        let changed: Vec<EdgeSnapshot> = (0..1_000u32)
            .map(|i| {
                let ip = IpAddr::from(Ipv4Addr::from(0x0a00_0000 + round * 1_000 + i));
                let edge = Edge {
                    subject: subject.clone(),
                    direction: Direction::Egress,
                    peer: external(ip),
                    protocol: Protocol::Tcp,
                    port: 443,
                    peer_dns: None,
                    denied_by: None,
                };
                snap(edge, u64::from(round * 1_000 + i + 1), 1, 1, 1)
            })
            .collect();
        let batches = enc.encode(sequence, round == 0, &changed, 1 << 20);
        sequence += batches.len() as u64;
        let sizes = enc.table_sizes();
        assert!(enc.table_bytes() <= limits.bytes, "round {round}");
        assert!(sizes.edges <= limits.edges && sizes.endpoints <= limits.endpoints);
    }
    assert!(
        enc.resets() > 0,
        "10 000 new edges do not fit 8 192: the tables started over"
    );
    assert_eq!(enc.oversized(), 0, "nothing was lost");
}
