//! `FlowTable::record` throughput (ARCHITECTURE §8: ≥ 1 M flows/s/core for repeated keys).
//!
//! Cases: 1k hot keys (fits in cache, the steady state of a busy node) and 100k keys
//! (cache-missing), each recorded from 1 and 2 threads into one shared table. The table
//! is filled before measuring, so the cases measure the update path that dominates real
//! traffic; keys are chosen by a fixed-seed xorshift so that runs are comparable.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::edges::edges;
use ne_shared::edge::Edge;
use ne_shared::flow::Timestamp;
use ne_shared::table::FlowTable;

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

fn record(c: &mut Criterion) {
    let mut group = c.benchmark_group("flow_table/record");
    group.throughput(Throughput::Elements(OPS as u64));
    for keys in [1_000usize, 100_000] {
        let edges = edges(keys);
        for threads in [1usize, 2] {
            let table = FlowTable::new(keys);
            for e in &edges {
                table.record(e, Timestamp(0), 1);
            }
            let schedules: Vec<Vec<usize>> = (0..threads)
                .map(|t| schedule(keys, OPS / threads, 0x9e37_79b9_7f4a_7c15 ^ t as u64))
                .collect();
            let id = BenchmarkId::new(
                format!("{}k_keys", keys / 1_000),
                format!("{threads}_threads"),
            );
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
