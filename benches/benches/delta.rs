//! Shipping cost: the agent's `delta::Encoder` and the leader's `delta::Decoder`
//! (docs/architecture.md, "Agent ↔ leader protocol" and "Performance goals": shipped bytes
//! ≤ 1 % of source bytes at steady state; the leader merges ≥ 1 M delta edges/s, of which
//! decoding is the first step).
//!
//! Timed cases, each with `Throughput::Elements` = entries per iteration:
//! - `encode/changed/<n>`: the steady state: `n` entries the stream already knows, with
//!   new counts and times, into 4 MiB batches (rows only);
//! - `encode/snapshot/<n>`: the same entries on a fresh stream (every string, endpoint and
//!   edge defined);
//! - `decode/changed/<n>` and `decode/snapshot/<n>`: the leader reading those batches.
//!
//! And with `Throughput::Bytes` = bytes on the wire, the leader's whole cost of a batch
//! (protobuf, then the decoder on a fresh stream, then dropping it all): `wire/snapshot`,
//! the 10 000-entry snapshot, and `wire/strings`, a batch of 50 000 new 16-character
//! strings (a flood of interned strings): what an agent's budget of bytes per second is
//! worth in CPU.
//!
//! Before the timings, the bench prints bytes per entry of both kinds of batches and a
//! steady-state share: generated Hubble JSON and ztunnel lines ([`ne_benches::generate`])
//! fed through `LineDecoder` → `FlowTable`, drained and encoded every "interval" of
//! `k` lines as the shipper would, shipped bytes ÷ source bytes after the first interval.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::{Config, Shape, generate};
use ne_dataplanes::{Decoded, LineDecoder};
use ne_delta::{DEFAULT_MAX_MESSAGE_BYTES, Decoder, Encoder, agent_message_len};
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef, labels,
};
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_proto::ingest::Batch;

/// xorshift64: deterministic, no `rand` dependency.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x % n
    }
}

fn workload(namespace: String, kind: WorkloadKind, name: String) -> Endpoint {
    let labels = labels([
        ("app", name.clone()),
        ("pod-template-hash", format!("{:x}", name.len() * 7919)),
    ]);
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: namespace.into(),
        kind,
        name: name.into(),
    }))
    .with_labels(labels)
}

/// `n` table entries shaped like a busy node's: local workloads in 16 namespaces, in-
/// cluster peers, one peer in five an external address with a DNS name; counts up to
/// 100 000, first_seen within the last hour.
fn entries(n: usize, rng: &mut XorShift) -> Vec<EdgeSnapshot> {
    (0..n)
        .map(|i| {
            let subject = workload(
                format!("team-{}", i % 16),
                WorkloadKind::Deployment,
                format!("service-{}", i % 400),
            );
            let external = i % 5 == 0;
            let peer = if external {
                let ip = IpAddr::V4(Ipv4Addr::from(0xcb00_7100 + i as u32));
                Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip))
            } else {
                workload(
                    format!("team-{}", (i / 16) % 16),
                    WorkloadKind::StatefulSet,
                    format!("backend-{}", i % 997),
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
                peer_dns: external.then(|| format!("api-{}.example.com", i % 101).into()),
                denied_by: None,
            };
            let first = 1_780_000_000_000_000_000 + rng.below(3_600_000_000_000) as i64;
            EdgeSnapshot {
                edge,
                count: 1 + rng.below(100_000),
                first_seen: Timestamp(first),
                last_seen: Timestamp(first),
                serial: i as u64 + 1,
            }
        })
        .collect()
}

/// The next 1 s flush interval: new connections, last_seen within the interval (ns).
fn advance(entries: &mut [EdgeSnapshot], now: i64, rng: &mut XorShift) {
    for e in entries {
        e.count += 1 + rng.below(500);
        e.last_seen = Timestamp(now - rng.below(1_000_000_000) as i64);
    }
}

fn wire_bytes(batches: &[Batch]) -> usize {
    batches.iter().map(agent_message_len).sum()
}

/// A stream in steady state: the snapshot batches, then a delta of every entry changed.
struct Stream {
    snapshot: Vec<Batch>,
    changed: Vec<Batch>,
    /// The encoder after the snapshot (it knows every entry).
    encoder: Encoder,
    updated: Vec<EdgeSnapshot>,
    original: Vec<EdgeSnapshot>,
}

fn stream(n: usize) -> Stream {
    let mut rng = XorShift(0x5eed ^ n as u64);
    let original = entries(n, &mut rng);
    let mut encoder = Encoder::new();
    let snapshot = encoder.encode(1, true, &original, DEFAULT_MAX_MESSAGE_BYTES);
    let mut updated = original.clone();
    advance(&mut updated, 1_780_003_700_000_000_000, &mut rng);
    // Encode the delta once on a copy of the state, for the decode cases.
    let mut probe = Encoder::new();
    probe.encode(1, true, &original, DEFAULT_MAX_MESSAGE_BYTES);
    let changed = probe.encode(
        1 + snapshot.len() as u64,
        false,
        &updated,
        DEFAULT_MAX_MESSAGE_BYTES,
    );
    Stream {
        snapshot,
        changed,
        encoder,
        updated,
        original,
    }
}

/// Shipped bytes ÷ source bytes once the table is warm, shipping every `per_interval`
/// lines.
fn steady_share(shape: Shape, per_interval: usize) -> (f64, f64, usize) {
    let input = generate(&Config::default(), shape, 40 * per_interval);
    let lines: Vec<&[u8]> = input
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let format = shape.format();
    let (table, mut decoder, mut encoder) = (
        FlowTable::new(1 << 20),
        LineDecoder::new(format),
        Encoder::new(),
    );
    let (mut sequence, mut source, mut shipped, mut rows) = (1u64, 0usize, 0usize, 0usize);
    for (i, chunk) in lines.chunks(per_interval).enumerate() {
        for line in chunk {
            if let Ok(Decoded::Record(r)) = decoder.feed(line) {
                let _ = table.record_flow(&r, format.provider());
            }
        }
        let batches = encoder.encode(
            sequence,
            i == 0,
            &table.drain_dirty(),
            DEFAULT_MAX_MESSAGE_BYTES,
        );
        sequence += batches.len() as u64;
        if i > 0 {
            source += chunk.iter().map(|l| l.len() + 1).sum::<usize>();
            shipped += wire_bytes(&batches);
            rows += batches
                .iter()
                .map(|b| b.rows.as_ref().map_or(0, |r| r.edge.len()))
                .sum::<usize>();
        }
    }
    (
        shipped as f64 / source as f64,
        shipped as f64 / rows.max(1) as f64,
        table.len(),
    )
}

fn report() {
    for n in [1_000usize, 100_000] {
        let s = stream(n);
        eprintln!(
            "delta: {n} entries: snapshot {:.1} B/entry in {} batches, changed {:.2} B/entry in {} batches",
            wire_bytes(&s.snapshot) as f64 / n as f64,
            s.snapshot.len(),
            wire_bytes(&s.changed) as f64 / n as f64,
            s.changed.len(),
        );
    }
    for shape in [Shape::HubbleJson, Shape::ZtunnelText] {
        for per_interval in [1_000usize, 10_000, 100_000] {
            let (share, per_row, keys) = steady_share(shape, per_interval);
            eprintln!(
                "delta: {} steady state, {per_interval} lines/interval over {keys} keys: shipped {:.3} % of source bytes ({per_row:.1} B/changed entry)",
                shape.name(),
                share * 100.0
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    report();
    let mut group = c.benchmark_group("delta");
    for n in [1_000usize, 10_000, 100_000] {
        let mut s = stream(n);
        group.throughput(Throughput::Elements(n as u64));
        let mut sequence = 1_000;
        group.bench_function(BenchmarkId::new("encode/changed", n), |b| {
            b.iter(|| {
                let batches =
                    s.encoder
                        .encode(sequence, false, &s.updated, DEFAULT_MAX_MESSAGE_BYTES);
                sequence += batches.len() as u64;
                black_box(batches)
            })
        });
        group.bench_function(BenchmarkId::new("encode/snapshot", n), |b| {
            b.iter_batched(
                Encoder::new,
                |mut encoder| {
                    black_box(encoder.encode(1, true, &s.original, DEFAULT_MAX_MESSAGE_BYTES))
                },
                BatchSize::SmallInput,
            )
        });
        // A decoder that has the snapshot; the changed batches are renumbered to follow on.
        let mut decoder = Decoder::new();
        for batch in &s.snapshot {
            decoder.decode(batch).expect("snapshot decodes");
        }
        let mut next = 1 + s.snapshot.len() as u64;
        group.bench_function(BenchmarkId::new("decode/changed", n), |b| {
            b.iter(|| {
                let mut edges = 0;
                for batch in &mut s.changed {
                    batch.sequence = next;
                    next += 1;
                    edges += decoder.decode(batch).expect("delta decodes").edges.len();
                }
                assert_eq!(edges, n);
            })
        });
        group.bench_function(BenchmarkId::new("decode/snapshot", n), |b| {
            b.iter_batched(
                Decoder::new,
                |mut decoder| {
                    for batch in &s.snapshot {
                        black_box(decoder.decode(batch).expect("snapshot decodes"));
                    }
                },
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    wire(c);
}

/// The leader's cost per byte received: protobuf decoding, the decoder, the drop.
fn wire(c: &mut Criterion) {
    use ne_proto::prost::Message;
    let snapshot: Vec<Vec<u8>> = stream(10_000)
        .snapshot
        .iter()
        .map(Message::encode_to_vec)
        .collect();
    let strings = vec![
        Batch {
            sequence: 1,
            strings: (0..50_000u64).map(|i| format!("{i:016}")).collect(),
            ..Batch::default()
        }
        .encode_to_vec(),
    ];
    let mut group = c.benchmark_group("delta");
    for (name, batches) in [("wire/snapshot", &snapshot), ("wire/strings", &strings)] {
        group.throughput(Throughput::Bytes(
            batches.iter().map(|b| b.len() as u64).sum(),
        ));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut decoder = Decoder::new();
                for bytes in batches {
                    let batch = Batch::decode(bytes.as_slice()).expect("protobuf");
                    black_box(decoder.decode(&batch).expect("decodes"));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
