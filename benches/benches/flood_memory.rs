//! Memory per edge under a flood of new edges, at both ends and part by part, counted by
//! the allocator (net bytes, exact and repeatable). The flood is the worst case `ne-load
//! --churn` makes: every edge a new external peer ([`ne_benches::edges::flood_edge`]).
//!
//! - Agent: its `FlowTable`, one drain of it while it is shipped, the drain's encoded
//!   batches, and the stream encoder's tables (within `Limits::for_entries` of the table's
//!   capacity).
//! - Leader: the stream decoder's tables, the merged `EdgeIndex`, the copy of the index a
//!   round reads (`Merged`), and the proposals learned from it.
//!
//! `cargo bench -p ne-benches --bench flood_memory`

use std::hint::black_box;

use ne_benches::edges::flood_edge;
use ne_delta::{Decoder, Encoder, Limits};
use ne_flow::edge::Provider;
use ne_flow::flow::Timestamp;
use ne_flow::table::FlowTable;
use ne_leader::learning;
use ne_policy::allowlist::LearnOptions;
use ne_policy::index::{AgentId, EdgeIndex, MergedEdge};
use ne_policy::resolve::RecordOnly;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Net bytes allocated while `f` runs and still held after it, with what it returns.
fn held<T>(f: impl FnOnce() -> T) -> (T, i64) {
    ne_benches::alloc::held(ALLOCATOR, f)
}

const ENTRIES: usize = 100_000;

fn main() {
    let per = |bytes: i64| bytes as f64 / ENTRIES as f64;

    // The agent.
    let (table, table_bytes) = held(|| {
        let table = FlowTable::new(ENTRIES);
        for i in 0..ENTRIES as u32 {
            table.record(&flood_edge(i), Timestamp(i64::from(i)), 1);
        }
        table
    });
    let (drained, drain_bytes) = held(|| table.drain_dirty());
    let limits = Limits::for_entries(table.capacity());
    let ((encoder, batches), encoding_bytes) = held(|| {
        let mut encoder = Encoder::with_limits(limits);
        let batches = encoder.encode(1, true, &drained, 1 << 20);
        (encoder, batches)
    });
    let wire: usize = batches.iter().map(ne_delta::agent_message_len).sum();
    drop(drained);

    // The leader, fed the agent's batches.
    let agent = AgentId("node-0".into());
    let ((decoder, index), leader_bytes) = held(|| {
        let mut decoder = Decoder::new();
        let mut index = EdgeIndex::new(ENTRIES);
        index.hello(&agent, 1);
        for batch in &batches {
            let decoded = decoder.decode(batch).expect("our own batches decode");
            index.apply(&agent, 1, &decoded.edges);
        }
        (decoder, index)
    });
    let (_, index_bytes) = held(|| drop(decoder));
    let decoder_bytes = -index_bytes;
    let index_bytes = leader_bytes - decoder_bytes;
    let (merged, merged_bytes) = held(|| index.merged().cloned().collect::<Vec<MergedEdge>>());
    let (learned, learned_bytes) = held(|| {
        learning::learn(
            learning::merged(&merged),
            &RecordOnly,
            Provider::Cilium,
            &LearnOptions::default(),
        )
    });

    // What the batches held is what dropping them gives back; the rest is the encoder's.
    let ((), freed) = held(|| drop(batches));
    let (batch_bytes, encoder_bytes) = (-freed, encoding_bytes + freed);
    println!(
        "flood_memory: {ENTRIES} flood edges, bytes per edge. Agent: table {:.0}; one drain {:.0}; \
         its batches {:.0} in memory ({:.1} on the wire); encoder tables {:.0} (its estimate {:.0}, \
         limit {}). Leader: decoder tables {:.0}; index {:.0}; a round's copy of the index {:.0}; \
         the proposals learned {:.0} ({} proposals)",
        per(table_bytes),
        per(drain_bytes),
        per(batch_bytes),
        wire as f64 / ENTRIES as f64,
        per(encoder_bytes),
        encoder.table_bytes() as f64 / ENTRIES as f64,
        limits.bytes / ENTRIES,
        per(decoder_bytes),
        per(index_bytes),
        per(merged_bytes),
        per(learned_bytes),
        learned.proposals.len(),
    );
    black_box((table, encoder, index, merged, learned));
}
