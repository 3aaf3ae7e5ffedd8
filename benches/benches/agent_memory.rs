//! Memory of one agent under a flood of new edges, part by part: what its `FlowTable`
//! holds, what one drain of it holds while it is shipped, and what the stream's encoder
//! keeps (its tables, within `Limits::for_entries` of the table's capacity), counted by the
//! allocator (net bytes, exact and repeatable). The flood is the worst case `ne-load
//! --churn` makes: every edge a new external peer of one of 200 workloads.
//!
//! `cargo bench -p ne-benches --bench agent_memory`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use ne_delta::{Encoder, Limits};
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_flow::table::FlowTable;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Net bytes allocated while `f` runs and still held after it, with what it returns.
fn held<T>(f: impl FnOnce() -> T) -> (T, i64) {
    let region = Region::new(ALLOCATOR);
    let value = f();
    let s = region.change();
    (value, s.bytes_allocated as i64 - s.bytes_deallocated as i64)
}

const ENTRIES: usize = 100_000;

/// The `i`-th flood edge: workload `i % 200` to the `i`-th external address, TCP 443.
fn flood_edge(subjects: &[Endpoint], i: u32) -> Edge {
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
    Edge {
        subject: subjects[i as usize % subjects.len()].clone(),
        direction: Direction::Egress,
        peer: Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip)),
        protocol: Protocol::Tcp,
        port: 443,
        peer_dns: None,
        denied_by: None,
    }
}

fn main() {
    let subjects: Vec<Endpoint> = (0..200)
        .map(|w| {
            let name = format!("app-{w}");
            Endpoint::new(EndpointId::Workload(WorkloadRef {
                namespace: format!("ns-{}", w % 8).into(),
                kind: WorkloadKind::Deployment,
                name: name.as_str().into(),
            }))
            .with_labels([("app".into(), name.as_str().into())].into_iter().collect())
        })
        .collect();
    let n = ENTRIES as f64;
    let (table, table_bytes) = held(|| {
        let table = FlowTable::new(ENTRIES);
        for i in 0..ENTRIES as u32 {
            table.record(&flood_edge(&subjects, i), Timestamp(i64::from(i)), 1);
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
    // What the batches held is what dropping them gives back; the rest is the encoder's.
    let ((), freed) = held(|| drop(batches));
    let (batch_bytes, encoder_bytes) = (-freed, encoding_bytes + freed);
    drop(drained);
    println!(
        "agent_memory: {ENTRIES} flood edges; table {:.0} B per entry; one drain of them {:.0} B per entry; \
         encoded batches {:.0} B per entry in memory ({:.1} on the wire); encoder tables {:.0} B per entry \
         (its estimate {:.0} B, limit {} B)",
        table_bytes as f64 / n,
        drain_bytes as f64 / n,
        batch_bytes as f64 / n,
        wire as f64 / n,
        encoder_bytes as f64 / n,
        encoder.table_bytes() as f64 / n,
        limits.bytes / ENTRIES,
    );
    black_box((table, encoder));
}
