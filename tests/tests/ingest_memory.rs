//! The leader's memory under a flood of interned strings, over real gRPC on loopback: agents
//! with valid credentials send millions of new strings, which the per-stream tables would
//! keep for as long as the stream lasts. The tables of every stream share one budget
//! (`--max-stream-table-bytes`): a batch that would pass it is rejected, the stream ends
//! and its tables are freed. The allocator counts what the process really holds (after
//! every answer of the leader), so this test runs alone in its own binary.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ne_leader::ingest::{IndexHandle, IngestLimits, IngestService, LeaderMetrics};
use ne_proto::ingest::ingest_client::IngestClient;
use ne_proto::ingest::{AgentMessage, Batch, Hello, agent_message, leader_message};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Bytes the process holds now (a reallocation's growth is already in `bytes_allocated`,
/// its shrinking in `bytes_deallocated`).
fn live() -> i64 {
    let s = ALLOCATOR.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

const BUDGET: usize = 32 << 20;
/// Strings per batch, and their length: about 1 MB on the wire, 2.4 MB in a table.
const PER_BATCH: usize = 50_000;
const LEN: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn millions_of_interned_strings_stay_within_the_tables_budget() {
    let (index, _owner) = IndexHandle::spawn(1 << 10);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Arc::new(LeaderMetrics::default());
    let service = IngestService::new(
        index,
        Arc::new(AtomicBool::new(true)),
        1,
        metrics.clone(),
        Arc::new(ne_leader::auth::Insecure),
    )
    .with_limits(IngestLimits {
        table_bytes: BUDGET,
        max_streams_per_address: 100,
        ..IngestLimits::default()
    });
    tokio::spawn(service.serve(listener));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = IngestClient::new(channel);

    let baseline = live();
    // The most held after any answer of the leader: its tables are then at their largest.
    let mut peak = 0i64;
    let mut sent = 0usize;
    let mut rejects = Vec::new();
    // Three attackers in turn, each adding strings until the leader cuts it off.
    for attacker in 0..3 {
        let (tx, rx) = mpsc::channel(4);
        let hello = Hello {
            node: format!("node-{attacker}"),
            agent_id: format!("node-{attacker}"),
            agent_epoch: 1,
            provider: "cilium".into(),
            capabilities: Vec::new(),
        };
        tx.send(AgentMessage {
            message: Some(agent_message::Message::Hello(hello)),
        })
        .await
        .unwrap();
        let mut inbound = client
            .stream(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let mut sequence = 1u64;
        let reject = loop {
            let strings = (0..PER_BATCH)
                .map(|i| format!("{:0LEN$}", sent + i))
                .collect();
            let batch = Batch {
                sequence,
                strings_base: ((sequence - 1) as usize * PER_BATCH) as u32,
                strings,
                ..Batch::default()
            };
            // The leader may have ended the stream already: then the reject is below.
            let _ = tx
                .send(AgentMessage {
                    message: Some(agent_message::Message::Batch(batch)),
                })
                .await;
            sent += PER_BATCH;
            // Wait for this batch's answer (the hello's ack comes first).
            let answer = loop {
                let m = inbound.message().await.unwrap().and_then(|m| m.message);
                match m {
                    Some(leader_message::Message::Ack(a)) if a.sequence == 0 => continue,
                    other => break other,
                }
            };
            peak = peak.max(live() - baseline);
            match answer {
                Some(leader_message::Message::Ack(a)) => assert_eq!(a.sequence, sequence),
                Some(leader_message::Message::Reject(r)) => break r,
                None => panic!("the stream ended without a reject"),
            }
            sequence += 1;
            assert!(sent < 10_000_000, "never cut off");
        };
        rejects.push(reject.reason);
        drop(tx);
        while inbound.message().await.is_ok_and(|m| m.is_some()) {}
    }

    for reason in &rejects {
        assert_eq!(
            reason,
            &format!(
                "the tables of all streams would take more than {BUDGET} bytes (the leader's budget)"
            )
        );
    }
    // 2 M strings sent, 96 MB in tables had they all been kept.
    assert!(sent >= 1_500_000, "{sent} strings");
    // The budget, plus a batch in flight at both ends and the transport's buffers.
    let bound = (BUDGET + (16 << 20)) as i64;
    assert!(
        peak <= bound,
        "peak {peak} bytes above the baseline, bound {bound} ({sent} strings sent)"
    );
    let ended = ne_telemetry::http::Exposition::encode(&*metrics);
    assert!(
        ended.contains("network_enforcer_leader_streams_ended_total{reason=\"table_budget\"} 3"),
        "{ended}"
    );
    // Every stream's tables were given back.
    assert!(
        ended.contains("network_enforcer_leader_stream_table_bytes 0"),
        "{ended}"
    );
}
