//! `FlowTable::record` throughput (docs/architecture.md, "Performance goals": ≥ 1 M
//! flows/s/core for repeated keys).
//!
//! Two groups: `record` on pre-built edges (each read from its own heap allocations, so
//! at 1M keys much of the time is the bench's own cache misses on its input), and
//! `record_by_key` on keys borrowed from a pool of distinct endpoint ids, the agent
//! decoders' path. Cases: 1k hot keys (fits in cache, the steady state of a busy node), 100k and 1M keys
//! (cache-missing), each recorded from 1 and 2 threads into one shared table. The table
//! is filled before measuring, so the cases measure the update path that dominates real
//! traffic; keys are chosen by a fixed-seed xorshift so that runs are comparable.
//!
//! Memory: before the timings, the bench prints the resident memory one table entry adds,
//! everything it keeps included (`/proc/self/status` VmRSS around filling a 1M-key table
//! from edges built one at a time and dropped after recording, so that the table owns
//! every string and label it keeps; the workspace forbids the `unsafe` a counting
//! allocator needs).

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::edges::{edge, edges};
use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, EndpointId, Protocol, Timestamp};
use ne_flow::table::{EdgeKeyRef, FlowTable};

/// Records per measured iteration (split across threads).
const OPS: usize = 100_000;

/// xorshift64: deterministic, no `rand` dependency.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// The sequence of edge indices one thread records.
fn schedule(n: usize, len: usize, seed: u64) -> Vec<usize> {
    let mut rng = XorShift(seed);
    (0..len).map(|_| (rng.next() % n as u64) as usize).collect()
}

fn run(table: &FlowTable, edges: &[Edge], schedule: &[usize]) {
    for (t, &i) in schedule.iter().enumerate() {
        black_box(table.record(&edges[i], Timestamp(t as i64), 1));
    }
}

/// Resident memory of this process in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Prints the bytes per entry of a filled 1M-key table, its strings and labels included.
fn bytes_per_edge() {
    const N: usize = 1_000_000;
    let before = rss();
    let table = FlowTable::new(N);
    for i in 0..N {
        table.record(&edge(i), Timestamp(0), 1);
    }
    let with_table = rss();
    assert_eq!(table.len(), N);
    println!(
        "flow_table/bytes_per_edge: {:.0} B per entry, strings and labels included; RSS, {N} keys",
        with_table.saturating_sub(before) as f64 / N as f64,
    );
    drop(black_box(table));
}

/// The keys of some edges as positions in a pool of their distinct endpoint ids: a lookup's
/// input as compact as the agent's decoders have it (endpoints in their caches, the rest
/// in the message), so that `record_by_key` is measured without the cache misses of
/// reading edges scattered over the heap.
struct PooledKeys {
    ids: Vec<EndpointId>,
    keys: Vec<(u32, u32, u16, Direction)>,
}

impl PooledKeys {
    fn of(edges: &[Edge]) -> Self {
        let mut pool: HashMap<EndpointId, u32> = HashMap::new();
        let mut ids = Vec::new();
        let mut intern = |id: &EndpointId| {
            *pool.entry(id.clone()).or_insert_with(|| {
                ids.push(id.clone());
                (ids.len() - 1) as u32
            })
        };
        let keys = edges
            .iter()
            .map(|e| {
                (
                    intern(&e.subject.id),
                    intern(&e.peer.id),
                    e.port,
                    e.direction,
                )
            })
            .collect();
        PooledKeys { ids, keys }
    }

    fn key(&self, i: usize) -> EdgeKeyRef<'_> {
        let (subject, peer, port, direction) = self.keys[i];
        EdgeKeyRef {
            subject: self.ids[subject as usize].view(),
            direction,
            peer: self.ids[peer as usize].view(),
            peer_identity: None,
            protocol: Protocol::Tcp,
            port,
        }
    }
}

fn run_by_key(table: &FlowTable, keys: &PooledKeys, schedule: &[usize]) {
    for (t, &i) in schedule.iter().enumerate() {
        let recorded = table.record_by_key(&keys.key(i), Timestamp(t as i64), 1, || Err(()));
        black_box(recorded).expect("every key is in the table");
    }
}

fn record(c: &mut Criterion) {
    bytes_per_edge();
    for by_key in [false, true] {
        record_group(c, by_key);
    }
}

/// `record` on pre-built edges, or `record_by_key` on pooled keys.
fn record_group(c: &mut Criterion, by_key: bool) {
    let mut group = c.benchmark_group(if by_key {
        "flow_table/record_by_key"
    } else {
        "flow_table/record"
    });
    group.throughput(Throughput::Elements(OPS as u64));
    for keys in [1_000usize, 100_000, 1_000_000] {
        let edges = edges(keys);
        let pooled = PooledKeys::of(&edges);
        let run = |table: &FlowTable, schedule: &[usize]| {
            if by_key {
                run_by_key(table, &pooled, schedule);
            } else {
                run(table, &edges, schedule);
            }
        };
        for threads in [1usize, 2] {
            let table = FlowTable::new(keys);
            for e in &edges {
                table.record(e, Timestamp(0), 1);
            }
            let schedules: Vec<Vec<usize>> = (0..threads)
                .map(|t| schedule(keys, OPS / threads, 0x9e37_79b9_7f4a_7c15 ^ t as u64))
                .collect();
            let label = match keys {
                1_000_000 => "1M_keys".to_owned(),
                k => format!("{}k_keys", k / 1_000),
            };
            let id = BenchmarkId::new(label, format!("{threads}_threads"));
            group.bench_with_input(id, &schedules, |b, schedules| {
                b.iter(|| {
                    if let [only] = schedules.as_slice() {
                        run(&table, only);
                    } else {
                        std::thread::scope(|s| {
                            for sched in schedules {
                                s.spawn(|| run(&table, sched));
                            }
                        });
                    }
                })
            });
            assert_eq!(table.dropped(), 0);
        }
    }
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
