//! `FlowTable::record` throughput (docs/architecture.md, "Performance goals": ≥ 1 M
//! flows/s/core for repeated keys).
//!
//! Cases: 1k hot keys (fits in cache, the steady state of a busy node), 100k and 1M keys
//! (cache-missing), each recorded from 1 and 2 threads into one shared table. The table
//! is filled before measuring, so the cases measure the update path that dominates real
//! traffic; keys are chosen by a fixed-seed xorshift so that runs are comparable.
//!
//! Memory: before the timings, the bench prints the resident memory one table entry adds
//! (`/proc/self/status` VmRSS around filling a 1M-key table; the workspace forbids the
//! `unsafe` a counting allocator needs), and what the input edges themselves take, whose
//! strings the table shares.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::edges::edges;
use ne_flow::edge::Edge;
use ne_flow::flow::Timestamp;
use ne_flow::table::FlowTable;

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

/// Prints the bytes per entry of a filled 1M-key table.
fn bytes_per_edge() {
    const N: usize = 1_000_000;
    let before = rss();
    let edges = edges(N);
    let with_edges = rss();
    let table = FlowTable::new(N);
    for e in &edges {
        table.record(e, Timestamp(0), 1);
    }
    let with_table = rss();
    assert_eq!(table.len(), N);
    println!(
        "flow_table/bytes_per_edge: {:.0} B per entry (table, strings shared with the edges), {:.0} B per input edge (its strings, labels and struct); RSS, {N} keys",
        with_table.saturating_sub(with_edges) as f64 / N as f64,
        with_edges.saturating_sub(before) as f64 / N as f64,
    );
    drop(black_box(table));
}

fn record(c: &mut Criterion) {
    bytes_per_edge();
    let mut group = c.benchmark_group("flow_table/record");
    group.throughput(Throughput::Elements(OPS as u64));
    for keys in [1_000usize, 100_000, 1_000_000] {
        let edges = edges(keys);
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
                        run(&table, &edges, only);
                    } else {
                        std::thread::scope(|s| {
                            for sched in schedules {
                                s.spawn(|| run(&table, &edges, sched));
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
