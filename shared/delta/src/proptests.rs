//! Property tests: arbitrary entries of every class (learned, denied, audit; serials
//! colliding across classes) round-trip over many batches of one stream at random
//! message limits and table limits; arbitrary bytes and mutated batches never panic the
//! decoder, and a rejected batch leaves it unchanged.

use std::net::IpAddr;

use ne_proto::ingest as pb;
use ne_proto::prost::Message;
use proptest::prelude::*;

use super::tests::decode_classes;
use super::*;
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Reserved, Str, Timestamp, WorkloadKind, WorkloadRef,
    labels,
};

/// Strings from a small pool (so they repeat) or arbitrary text.
fn text() -> impl Strategy<Value = Str> {
    prop_oneof![
        3 => prop::sample::select(vec!["", "a", "shop", "web", "kube-system", "app"])
            .prop_map(String::from),
        1 => "\\PC{0,6}",
    ]
    .prop_map(Str::from)
}

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        prop::sample::select(vec![
            IpAddr::from([10, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ]),
        any::<std::net::Ipv4Addr>().prop_map(IpAddr::V4),
        any::<std::net::Ipv6Addr>().prop_map(IpAddr::V6),
    ]
}

fn workload_kind() -> impl Strategy<Value = WorkloadKind> {
    prop::sample::select(vec![
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
        WorkloadKind::ReplicaSet,
        WorkloadKind::Job,
        WorkloadKind::CronJob,
        WorkloadKind::Pod,
    ])
}

fn reserved() -> impl Strategy<Value = Reserved> {
    prop::sample::select(vec![
        Reserved::Host,
        Reserved::RemoteNode,
        Reserved::KubeApiserver,
        Reserved::Health,
        Reserved::Init,
        Reserved::Ingress,
        Reserved::Unmanaged,
        Reserved::World,
        Reserved::Unknown,
    ])
}

fn endpoint_id() -> impl Strategy<Value = EndpointId> {
    prop_oneof![
        (text(), workload_kind(), text()).prop_map(|(namespace, kind, name)| {
            EndpointId::Workload(WorkloadRef {
                namespace,
                kind,
                name,
            })
        }),
        (text(), text()).prop_map(|(namespace, name)| EndpointId::Pod { namespace, name }),
        (text(), text()).prop_map(|(namespace, prefix)| EndpointId::PodGroup { namespace, prefix }),
        ip().prop_map(EndpointId::External),
        reserved().prop_map(EndpointId::Reserved),
    ]
}

fn endpoint() -> impl Strategy<Value = Endpoint> {
    (
        endpoint_id(),
        prop_oneof![
            Just(None),
            Just(Some(None)),
            ip().prop_map(|ip| Some(Some(ip)))
        ],
        prop::collection::vec((text(), text()), 0..4),
        prop::option::of(text()),
    )
        .prop_map(|(id, address, pairs, identity)| {
            // `Some(None)`: the record's address is the external identity's own.
            let ip = match (address, &id) {
                (Some(None), EndpointId::External(own)) => Some(*own),
                (Some(ip), _) => ip,
                (None, _) => None,
            };
            Endpoint::new(id)
                .with_ip(ip)
                .with_labels(labels(pairs))
                .with_identity(identity)
        })
}

fn edge() -> impl Strategy<Value = Edge> {
    (
        endpoint(),
        any::<bool>(),
        endpoint(),
        prop::sample::select(vec![
            Protocol::Tcp,
            Protocol::Udp,
            Protocol::Sctp,
            Protocol::Icmp,
            Protocol::Other,
        ]),
        any::<u16>(),
        prop::option::of(text()),
        prop::option::of(text()),
    )
        .prop_map(
            |(subject, egress, peer, protocol, port, peer_dns, denied_by)| Edge {
                subject,
                direction: if egress {
                    Direction::Egress
                } else {
                    Direction::Ingress
                },
                peer,
                protocol,
                port,
                peer_dns,
                denied_by,
            },
        )
}

/// Table entries; serials from a small range, so that some collide.
fn entries() -> impl Strategy<Value = Vec<(Edge, u64)>> {
    prop::collection::vec((edge(), prop_oneof![0u64..8, any::<u64>()]), 1..12)
}

/// Table entries of any class; often the same edge and serial in two classes (the agent's
/// tables number their entries independently). Learned edges blame no policy, as
/// `derive` makes them.
fn class_entries() -> impl Strategy<Value = Vec<(EdgeClass, Edge, u64)>> {
    (entries(), prop::collection::vec(any::<u8>(), 12)).prop_map(|(entries, picks)| {
        let mut out = Vec::new();
        let of = |class: EdgeClass, edge: &Edge| match class {
            EdgeClass::Learned => Edge {
                denied_by: None,
                ..edge.clone()
            },
            EdgeClass::Denied | EdgeClass::Audit => edge.clone(),
        };
        for ((edge, serial), pick) in entries.into_iter().zip(picks) {
            let class = EdgeClass::ALL[usize::from(pick % 3)];
            if pick & 0x80 != 0 {
                let twin = EdgeClass::ALL[usize::from(pick % 3 + 1) % 3];
                out.push((twin, of(twin, &edge), serial));
            }
            out.push((class, of(class, &edge), serial));
        }
        out
    })
}

/// `sent` as `encode_classes` takes it: runs of one class.
fn runs(sent: &[(EdgeClass, EdgeSnapshot)]) -> Vec<(EdgeClass, Vec<EdgeSnapshot>)> {
    let mut out: Vec<(EdgeClass, Vec<EdgeSnapshot>)> = Vec::new();
    for (class, snap) in sent {
        match out.last_mut() {
            Some((c, run)) if c == class => run.push(snap.clone()),
            _ => out.push((*class, vec![snap.clone()])),
        }
    }
    out
}

/// The entries of `class` in `sent`, in order.
fn of_class(sent: &[(EdgeClass, EdgeSnapshot)], class: EdgeClass) -> Vec<EdgeSnapshot> {
    sent.iter()
        .filter(|(c, _)| *c == class)
        .map(|(_, s)| s.clone())
        .collect()
}

/// A round: which entries are sent, with their (count, first_seen, last_seen).
fn rounds() -> impl Strategy<Value = Vec<Vec<(usize, u64, i64, i64)>>> {
    prop::collection::vec(
        prop::collection::vec(
            (
                any::<usize>(),
                prop_oneof![0u64..1000, any::<u64>()],
                prop_oneof![-5i64..5, any::<i64>()],
                prop_oneof![-5i64..5, any::<i64>()],
            ),
            0..16,
        ),
        1..5,
    )
}

fn small_limits() -> impl Strategy<Value = Option<Limits>> {
    // Table bytes from just above the largest entry `class_entries` makes (about 1 600
    // bytes: so no entry is too large alone); rows from 1.
    prop::option::of(
        (
            32usize..200,
            2usize..40,
            1usize..20,
            1600usize..8000,
            1usize..20,
        )
            .prop_map(|(strings, endpoints, edges, bytes, rows)| Limits {
                strings,
                endpoints,
                edges,
                bytes,
                rows,
            }),
    )
}

/// Whether `sub` is `all` with some elements left out, in order.
fn is_subsequence(sub: &[EdgeSnapshot], all: &[EdgeSnapshot]) -> bool {
    let mut rest = all.iter();
    sub.iter().all(|s| rest.any(|a| a == s))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn entries_round_trip_over_many_batches(
        entries in class_entries(),
        rounds in rounds(),
        max_bytes in prop::collection::vec(64usize..3000, 5),
        limits in small_limits(),
    ) {
        let limits = limits.unwrap_or_default();
        let (mut enc, mut dec) = (Encoder::with_limits(limits), Decoder::with_limits(limits));
        let mut sequence = 1;
        for (r, round) in rounds.iter().enumerate() {
            let sent: Vec<(EdgeClass, EdgeSnapshot)> = round
                .iter()
                .map(|&(pick, count, first, last)| {
                    let (class, edge, serial) = &entries[pick % entries.len()];
                    (*class, EdgeSnapshot {
                        edge: edge.clone(),
                        count,
                        first_seen: Timestamp(first),
                        last_seen: Timestamp(last),
                        serial: *serial,
                    })
                })
                .collect();
            let runs = runs(&sent);
            let classes: Vec<(EdgeClass, &[EdgeSnapshot])> =
                runs.iter().map(|(c, run)| (*c, run.as_slice())).collect();
            let max = max_bytes[r % max_bytes.len()];
            let skipped_before = enc.oversized();
            let batches = enc.encode_classes(sequence, r == 0, &classes, max);
            for (i, b) in batches.iter().enumerate() {
                prop_assert!(agent_message_len(b) <= max);
                prop_assert_eq!(b.sequence, sequence + i as u64);
                prop_assert_eq!(b.snapshot_end, r == 0 && i + 1 == batches.len());
            }
            sequence += batches.len() as u64;
            let decoded = decode_classes(&mut dec, &batches);
            let skipped = (enc.oversized() - skipped_before) as usize;
            prop_assert_eq!(decoded.iter().map(Vec::len).sum::<usize>() + skipped, sent.len());
            for (class, decoded) in EdgeClass::ALL.into_iter().zip(&decoded) {
                let sent = of_class(&sent, class);
                if max >= 2000 {
                    prop_assert_eq!(decoded, &sent);
                } else {
                    prop_assert!(is_subsequence(decoded, &sent));
                }
            }
            prop_assert_eq!(enc.table_sizes(), dec.table_sizes());
            prop_assert_eq!(enc.table_bytes(), dec.table_bytes());
            prop_assert!(dec.table_bytes() <= limits.bytes);
            for b in &batches {
                prop_assert!(b.rows.as_ref().map_or(0, |r| r.edge.len()) <= limits.rows);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(
        bytes in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        if let Ok(batch) = pb::Batch::decode(bytes.as_slice()) {
            let mut dec = Decoder::new();
            let _ = dec.decode(&batch);
        }
    }

    #[test]
    fn mutated_batches_are_rejected_cleanly_or_decoded(
        entries in class_entries(),
        mutations in prop::collection::vec((0usize..27, 0u8..3, any::<u64>()), 1..4),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
    ) {
        let snaps: Vec<(EdgeClass, EdgeSnapshot)> = entries
            .iter()
            .enumerate()
            .map(|(i, (class, edge, serial))| (*class, EdgeSnapshot {
                edge: edge.clone(),
                count: i as u64,
                first_seen: Timestamp(i as i64),
                last_seen: Timestamp(10 + i as i64),
                serial: *serial,
            }))
            .collect();
        let runs = runs(&snaps);
        let classes: Vec<(EdgeClass, &[EdgeSnapshot])> =
            runs.iter().map(|(c, run)| (*c, run.as_slice())).collect();
        let mut enc = Encoder::new();
        let batches = enc.encode_classes(1, true, &classes, 300);
        // What the intact stream decodes to (entries too large for 300 bytes are skipped).
        let expected = decode_classes(&mut Decoder::new(), &batches);
        let target = mutations[0].2 as usize % batches.len();
        let mut dec = Decoder::new();
        let before = decode_classes(&mut dec, &batches[..target]);

        let mut broken = batches[target].clone();
        for &(column, op, value) in &mutations {
            mutate(&mut broken, column, op, value);
        }
        // Byte-level damage too, read back through prost.
        let mut bytes = broken.encode_to_vec();
        for &(at, xor) in &flips {
            if !bytes.is_empty() {
                let at = at % bytes.len();
                bytes[at] ^= xor;
            }
        }
        let Ok(broken) = pb::Batch::decode(bytes.as_slice()) else {
            return Ok(());
        };
        let sizes = dec.table_sizes();
        if dec.decode(&broken).is_err() {
            prop_assert_eq!(dec.table_sizes(), sizes);
            // Unchanged: the intact batches still decode to what was sent.
            let rest = decode_classes(&mut dec, &batches[target..]);
            let all: Vec<Vec<EdgeSnapshot>> = before
                .into_iter()
                .zip(rest)
                .map(|(before, rest)| before.into_iter().chain(rest).collect())
                .collect();
            prop_assert_eq!(all, expected);
        }
    }
}

/// Sets (op 0), appends (op 1) or removes (op 2) an element of one of the batch's columns.
fn mutate(b: &mut pb::Batch, column: usize, op: u8, value: u64) {
    fn apply<T: Copy>(column: &mut Vec<T>, op: u8, value: T, at: u64) {
        match op {
            0 if !column.is_empty() => {
                let at = at as usize % column.len();
                column[at] = value;
            }
            1 => column.push(value),
            _ => {
                column.pop();
            }
        }
    }
    let (v32, vi32, vi64) = (value as u32, (value % 12) as i32 - 1, value as i64);
    let ep = b.endpoints.get_or_insert_with(Default::default);
    let ed = b.edges.get_or_insert_with(Default::default);
    let rows = b.rows.get_or_insert_with(Default::default);
    match column {
        0 => b.sequence = value % 4,
        1 => b.strings_base = v32 % 4,
        2 => b.reset = !b.reset,
        3 => apply(&mut ep.kind, op, vi32, value),
        4 => apply(&mut ep.namespace, op, v32 % 64, value),
        5 => apply(&mut ep.name, op, v32, value),
        6 => apply(&mut ep.workload_kind, op, vi32, value),
        7 => apply(&mut ep.reserved, op, vi32, value),
        8 => apply(&mut ep.external_address, op, vi32 % 4, value),
        9 => apply(&mut ep.address, op, vi32 % 5, value),
        10 => apply(&mut ep.addresses, op, value as u8, value),
        11 => apply(&mut ep.label_count, op, v32, value),
        12 => apply(&mut ep.label_key, op, v32 % 64, value),
        13 => apply(&mut ep.identity, op, v32 % 64, value),
        14 => apply(&mut ed.subject, op, v32 % 16, value),
        15 => apply(&mut ed.peer, op, v32, value),
        16 => apply(&mut ed.direction, op, vi32 % 4, value),
        17 => apply(&mut ed.protocol, op, vi32, value),
        18 => apply(&mut ed.port, op, v32 % 70_000, value),
        19 => apply(&mut ed.peer_dns, op, v32 % 64, value),
        20 => apply(&mut rows.edge, op, vi64 % 8, value),
        21 => apply(&mut rows.count, op, value, value),
        22 => apply(&mut rows.first_seen, op, vi64, value),
        23 => apply(&mut ed.verdict_position, op, v32 % 16, value),
        24 => apply(&mut ed.verdict, op, vi32 % 4, value),
        25 => apply(&mut ed.denied_by, op, v32 % 64, value),
        _ => b.snapshot_end = !b.snapshot_end,
    }
}
