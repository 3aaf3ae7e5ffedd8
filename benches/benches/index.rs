//! `EdgeIndex::apply` throughput on the leader (docs/architecture.md, "Performance goals":
//! merges ≥ 1 M delta edges/s; this module's own goal is ≥ 5 M/s/core for known keys).
//!
//! Cases, each with batches of 1 000 entries as one decoded wire message would carry:
//! - `known/<n>k_keys`: the steady state. Four agents, each key shipped by two of them;
//!   the index already holds every key, and every iteration re-ships all entries of every
//!   agent with larger counts and times (each entry changes its merged edge). The entries
//!   are built separately from the ones that filled the index, so lookups compare
//!   strings in other allocations, as with freshly decoded batches. The changed list is
//!   drained (untimed) between iterations, so each iteration flags every key again.
//! - `new/<n>k_keys`: one agent's snapshot into an empty index (insertion path).
//! - `known_100_agents/50k_keys`: a 100-node cluster's flush: 100 agents of 1 000 entries
//!   each, every key shipped by two of them, all known to the index.
//!
//! Memory: 457-586 bytes per distinct edge of fixed size on x86_64 (map bucket and
//! entry, plus 32 per further agent), besides the edge's strings, which are shared with
//! the decoded batch that first carried it; see `bytes_per_distinct_edge` in
//! `shared/policy/src/index/tests.rs`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::edges::edges;
use ne_flow::edge::Edge;
use ne_flow::flow::Timestamp;
use ne_flow::table::EdgeSnapshot;
use ne_policy::index::{AgentId, EdgeIndex};

const AGENTS: usize = 4;
/// Entries per batch.
const BATCH: usize = 1_000;

/// The entries of `edges` that `keep` selects (by position), in batches; entry `i` has
/// serial `i + 1` (any value works: serials are per agent).
fn batches(edges: &[Edge], keep: impl Fn(usize) -> bool) -> Vec<Vec<EdgeSnapshot>> {
    let entries: Vec<EdgeSnapshot> = edges
        .iter()
        .enumerate()
        .filter(|&(i, _)| keep(i))
        .map(|(i, edge)| EdgeSnapshot {
            edge: edge.clone(),
            count: 1,
            first_seen: Timestamp(0),
            last_seen: Timestamp(0),
            serial: i as u64 + 1,
        })
        .collect();
    entries
        .chunks(BATCH)
        .map(<[EdgeSnapshot]>::to_vec)
        .collect()
}

/// Each of `agents` agents' batches: key `i` is shipped by agents `i % agents` and
/// `(i + 1) % agents` (a conversation is seen at the client's and the server's node).
fn agent_batches(edges: &[Edge], agents: usize) -> Vec<(AgentId, Vec<Vec<EdgeSnapshot>>)> {
    (0..agents)
        .map(|agent| {
            let mine = batches(edges, |i| i % agents == agent || (i + 1) % agents == agent);
            (AgentId::from(format!("node-{agent}")), mine)
        })
        .collect()
}

fn apply_all(index: &mut EdgeIndex, agents: &[(AgentId, Vec<Vec<EdgeSnapshot>>)]) {
    for (id, batches) in agents {
        for batch in batches {
            black_box(index.apply(id, 1, batch));
        }
    }
}

/// The steady state: every agent re-ships all its entries with larger counts and times.
fn known(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: BenchmarkId,
    keys: usize,
    agent_count: usize,
) {
    let mut index = EdgeIndex::new(keys);
    apply_all(&mut index, &agent_batches(&edges(keys), agent_count));
    assert_eq!(index.len(), keys);
    let mut agents = agent_batches(&edges(keys), agent_count);
    let entries: usize = agents.iter().flat_map(|(_, b)| b).map(Vec::len).sum();
    group.throughput(Throughput::Elements(entries as u64));
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                for snap in agents.iter_mut().flat_map(|(_, b)| b).flatten() {
                    snap.count += 1;
                    snap.last_seen.0 += 1;
                }
                black_box(index.drain_changed().count());
                let start = Instant::now();
                apply_all(&mut index, &agents);
                timed += start.elapsed();
            }
            timed
        })
    });
    let totals = index.totals();
    assert_eq!((totals.dropped, totals.stale_serial), (0, 0));
    assert_eq!(totals.unchanged, 0, "every entry changes its edge");
}

fn apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("index/apply");
    for keys in [1_000usize, 100_000] {
        let label = format!("{}k_keys", keys / 1_000);
        known(&mut group, BenchmarkId::new("known", &label), keys, AGENTS);
        let one_agent = vec![(AgentId::from("node-0"), batches(&edges(keys), |_| true))];
        group.throughput(Throughput::Elements(keys as u64));
        group.bench_function(BenchmarkId::new("new", &label), |b| {
            b.iter_batched(
                || EdgeIndex::new(keys),
                |mut index| {
                    apply_all(&mut index, &one_agent);
                    index
                },
                BatchSize::LargeInput,
            )
        });
    }
    // A 100-node cluster: 50k keys, each shipped by 2 of 100 agents (1 000 entries each).
    known(
        &mut group,
        BenchmarkId::new("known_100_agents", "50k_keys"),
        50_000,
        100,
    );
    group.finish();
}

criterion_group!(benches, apply);
criterion_main!(benches);
