//! The leader's ingest under attack, over real gRPC on loopback: an agent with valid
//! credentials (the insecure authenticator here; TokenReview is `ingest_cluster`'s) sends
//! what no agent of ours sends. Each attack must be refused or cut off with a clear status
//! and counted by reason, and the leader must go on serving the other agents.
//!
//! Memory under a flood of interned strings is `ingest_memory`'s (it counts allocations,
//! so it runs alone in its own binary).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ne_flow::edge::{Edge, Provider};
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_flow::table::FlowTable;
use ne_leader::ingest::{IndexHandle, IngestLimits, IngestService, LeaderMetrics};
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship::{self, ShipConfig};
use ne_node_agent::sources::SourceState;
use ne_proto::ingest::ingest_client::IngestClient;
use ne_proto::ingest::{AgentMessage, Batch, Hello, LeaderMessage, agent_message, leader_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint as GrpcEndpoint};
use tonic::{Code, Status, Streaming};

/// A leader replica with `limits`, serving on loopback.
struct Leader {
    address: SocketAddr,
    index: IndexHandle,
    metrics: Arc<LeaderMetrics>,
}

async fn leader(limits: IngestLimits) -> Leader {
    let (index, _owner) = IndexHandle::spawn_with_max_agents(1 << 16, limits.max_agents);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Arc::new(LeaderMetrics::default());
    let service = IngestService::new(
        index.clone(),
        Arc::new(AtomicBool::new(true)),
        1,
        metrics.clone(),
        Arc::new(ne_leader::auth::Insecure),
    )
    .with_limits(limits);
    tokio::spawn(service.serve(listener));
    Leader {
        address,
        index,
        metrics,
    }
}

/// Limits for tests where every agent connects from loopback.
fn loopback() -> IngestLimits {
    IngestLimits {
        max_streams_per_address: 1000,
        ..IngestLimits::default()
    }
}

/// The value of `name{reason="reason"}` in the leader's exposition (0 when absent).
fn metric(metrics: &LeaderMetrics, name: &str, reason: &str) -> u64 {
    let text = ne_telemetry::http::Exposition::encode(metrics);
    let prefix = format!("network_enforcer_{name}{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

fn gauge(metrics: &LeaderMetrics, name: &str) -> i64 {
    let text = ne_telemetry::http::Exposition::encode(metrics);
    let prefix = format!("network_enforcer_{name} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Waits (polling, 30 s at most) until `holds` is true.
async fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn client(
    address: SocketAddr,
    endpoint: impl FnOnce(GrpcEndpoint) -> GrpcEndpoint,
) -> IngestClient<Channel> {
    let channel = endpoint(GrpcEndpoint::from_shared(format!("http://{address}")).unwrap())
        .connect()
        .await
        .unwrap();
    IngestClient::new(channel).max_encoding_message_size(64 << 20)
}

fn hello(agent: &str, epoch: u64) -> AgentMessage {
    AgentMessage {
        message: Some(agent_message::Message::Hello(Hello {
            node: agent.into(),
            agent_id: agent.into(),
            agent_epoch: epoch,
            provider: "cilium".into(),
            capabilities: Vec::new(),
        })),
    }
}

fn batch(batch: Batch) -> AgentMessage {
    AgentMessage {
        message: Some(agent_message::Message::Batch(batch)),
    }
}

/// A stream opened by hand: what is sent goes through `tx`.
struct Raw {
    tx: mpsc::Sender<AgentMessage>,
    inbound: Streaming<LeaderMessage>,
}

/// Opens a stream whose first message is `first` (a hello, usually); the leader's answer
/// is the stream or the status it refused it with.
async fn open(
    client: &mut IngestClient<Channel>,
    first: Option<AgentMessage>,
) -> Result<Raw, Status> {
    let (tx, rx) = mpsc::channel(1 << 16);
    if let Some(first) = first {
        tx.send(first).await.unwrap();
    }
    let inbound = client.stream(ReceiverStream::new(rx)).await?.into_inner();
    Ok(Raw { tx, inbound })
}

/// Opens a stream with a hello of `agent` and reads the leader's ack of it.
async fn hello_acked(client: &mut IngestClient<Channel>, agent: &str, epoch: u64) -> Raw {
    let mut raw = open(client, Some(hello(agent, epoch))).await.unwrap();
    match raw.inbound.message().await.unwrap().and_then(|m| m.message) {
        Some(leader_message::Message::Ack(ack)) => assert_eq!(ack.sequence, 0),
        other => panic!("expected the hello's ack, got {other:?}"),
    }
    raw
}

/// The status the stream ends with (after any messages).
async fn end_status(inbound: &mut Streaming<LeaderMessage>) -> Status {
    loop {
        match inbound.message().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("the stream ended without a status"),
            Err(status) => return status,
        }
    }
}

/// A client connecting from the loopback address `127.0.0.<host>` (another node).
async fn client_from(address: SocketAddr, host: u8) -> IngestClient<Channel> {
    client(address, |e| {
        e.local_address(Some(std::net::Ipv4Addr::new(127, 0, 0, host).into()))
    })
    .await
}

/// Whether a new connection from `127.0.0.<host>` gets a stream with its hello acked.
async fn served(address: SocketAddr, host: u8, agent: &str) -> bool {
    let connected = GrpcEndpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .local_address(Some(std::net::Ipv4Addr::new(127, 0, 0, host).into()))
        .connect()
        .await;
    let Ok(channel) = connected else {
        return false;
    };
    let Ok(mut raw) = open(&mut IngestClient::new(channel), Some(hello(agent, 1))).await else {
        return false;
    };
    matches!(
        raw.inbound.message().await.ok().flatten().and_then(|m| m.message),
        Some(leader_message::Message::Ack(a)) if a.sequence == 0
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_message_ends_its_stream_and_its_address_cools_down() {
    let l = leader(IngestLimits {
        max_message_bytes: 64 << 10,
        // Longer than this test: the address is still cooling down when it looks.
        cooldown: Duration::from_secs(600),
        ..loopback()
    })
    .await;
    let mut c = client_from(l.address, 2).await;

    let mut raw = hello_acked(&mut c, "node-a", 1).await;
    let oversize = Batch {
        sequence: 1,
        strings: vec!["x".repeat(100 << 10)],
        ..Batch::default()
    };
    raw.tx.send(batch(oversize)).await.unwrap();
    let status = end_status(&mut raw.inbound).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status}");
    assert!(status.message().contains("too large"), "{status}");
    eventually("the stream's end is counted", || {
        metric(
            &l.metrics,
            "leader_streams_ended_total",
            "message_too_large",
        ) == 1
    })
    .await;
    assert_eq!(gauge(&l.metrics, "leader_address_cooldowns_total"), 1);

    // The address cools down: its connections are closed as they are accepted.
    assert!(!served(l.address, 2, "node-a").await);
    assert!(gauge(&l.metrics, "leader_connections_refused_total") >= 1);

    // An oversize first message is refused before any hello is read, and its address
    // cools down too.
    let mut c = client_from(l.address, 3).await;
    let mut big_hello = hello("node-b", 1);
    if let Some(agent_message::Message::Hello(h)) = &mut big_hello.message {
        h.node = "n".repeat(100 << 10);
    }
    let refused = open(&mut c, Some(big_hello)).await.err().expect("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
    assert_eq!(
        metric(
            &l.metrics,
            "leader_streams_refused_total",
            "message_too_large"
        ),
        1
    );
    assert_eq!(gauge(&l.metrics, "leader_address_cooldowns_total"), 2);
    assert!(!served(l.address, 3, "node-b").await);

    // Every other address is served: a batch within the limit is applied and acked.
    let mut c = client_from(l.address, 4).await;
    let mut raw = hello_acked(&mut c, "node-c", 1).await;
    raw.tx
        .send(batch(Batch {
            sequence: 1,
            strings: vec!["x".repeat(1000)],
            ..Batch::default()
        }))
        .await
        .unwrap();
    let ack = raw.inbound.message().await.unwrap().and_then(|m| m.message);
    assert!(matches!(ack, Some(leader_message::Message::Ack(a)) if a.sequence == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_is_served_again_after_its_cooldown() {
    let l = leader(IngestLimits {
        max_message_bytes: 64 << 10,
        cooldown: Duration::from_millis(200),
        ..loopback()
    })
    .await;
    let mut c = client_from(l.address, 2).await;
    let refused = open(
        &mut c,
        Some(batch(Batch {
            strings: vec!["x".repeat(100 << 10)],
            ..Batch::default()
        })),
    )
    .await
    .err()
    .expect("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused}");
    assert_eq!(gauge(&l.metrics, "leader_address_cooldowns_total"), 1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !served(l.address, 2, "node-a").await {
        assert!(tokio::time::Instant::now() < deadline, "never served again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bytes of `message` on the wire.
fn wire_len(message: &AgentMessage) -> usize {
    match &message.message {
        Some(agent_message::Message::Batch(b)) => ne_delta::agent_message_len(b),
        _ => 0,
    }
}

/// `n` batches of about 100 KB of new strings each, from sequence 1.
fn string_batches(n: u64) -> Vec<AgentMessage> {
    (0..n)
        .map(|b| {
            batch(Batch {
                sequence: b + 1,
                strings_base: (b * 5_000) as u32,
                strings: (0..5_000u64)
                    .map(|i| format!("{:018}", b * 5_000 + i))
                    .collect(),
                ..Batch::default()
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_past_its_budget_is_paced_and_the_others_are_not() {
    let l = leader(IngestLimits {
        agent_bytes_per_second: 1 << 20,
        agent_burst_bytes: 128 << 10,
        // One batch decoded at a time: a paced agent must not hold that place.
        decoding: 1,
        ..loopback()
    })
    .await;
    let mut c = client(l.address, |e| e).await;

    // Six batches of 100 KB (decoded off the runtime's threads) at 1 MiB/s after a
    // 128 KiB burst: the stream cannot be done sooner than the rate allows.
    let batches = string_batches(6);
    let sent: usize = batches.iter().map(wire_len).sum();
    let mut raw = hello_acked(&mut c, "node-flood", 1).await;
    let began = std::time::Instant::now();
    for b in batches {
        raw.tx.send(b).await.unwrap();
    }
    let mut last = 0;
    while last < 6 {
        match raw.inbound.message().await.unwrap().and_then(|m| m.message) {
            Some(leader_message::Message::Ack(a)) => last = a.sequence,
            other => panic!("expected acks, got {other:?}"),
        }
    }
    let least = Duration::from_secs_f64((sent - (128 << 10)) as f64 / f64::from(1 << 20));
    assert!(
        began.elapsed() >= least,
        "{sent} bytes acked in {:?}, sooner than the budget's {least:?}",
        began.elapsed()
    );
    assert!(gauge(&l.metrics, "leader_paced_batches_total") >= 4);

    // The same agent again, deep in debt (5 MB at 1 MiB/s is some 5 s), while another
    // agent sends a batch: the other is decoded and acked at once, well before the
    // debtor's last ack.
    let mut raw = hello_acked(&mut c, "node-flood", 1).await;
    for b in string_batches(50) {
        raw.tx.send(b).await.unwrap();
    }
    eventually("the debtor is paced", || {
        gauge(&l.metrics, "leader_paced_batches_total") >= 6
    })
    .await;
    // Another node: a connection of its own, as every agent has.
    let mut other = hello_acked(&mut client_from(l.address, 3).await, "node-quiet", 1).await;
    other.tx.send(string_batches(1).remove(0)).await.unwrap();
    let ack = other
        .inbound
        .message()
        .await
        .unwrap()
        .and_then(|m| m.message);
    assert!(matches!(ack, Some(leader_message::Message::Ack(a)) if a.sequence == 1));
    // The debtor's acks so far (those already here; none is awaited).
    let mut debtor_acked = 0;
    while let Ok(Ok(Some(_))) =
        tokio::time::timeout(Duration::from_millis(1), raw.inbound.message()).await
    {
        debtor_acked += 1;
    }
    assert!(
        debtor_acked < 50,
        "the debtor was done first: it was not paced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_out_of_sequence_are_rejected_naming_the_one_expected() {
    let l = leader(loopback()).await;
    let mut c = client(l.address, |e| e).await;
    let mut raw = hello_acked(&mut c, "node-a", 1).await;
    for sequence in [1, 2] {
        raw.tx
            .send(batch(Batch {
                sequence,
                ..Batch::default()
            }))
            .await
            .unwrap();
    }
    // Batch 2 again, then 7: the first is out of sequence already.
    raw.tx
        .send(batch(Batch {
            sequence: 2,
            ..Batch::default()
        }))
        .await
        .unwrap();
    let mut acked = Vec::new();
    let reject = loop {
        match raw.inbound.message().await.unwrap().and_then(|m| m.message) {
            Some(leader_message::Message::Ack(a)) => acked.push(a.sequence),
            Some(leader_message::Message::Reject(r)) => break r,
            None => panic!("no reject"),
        }
    };
    assert_eq!(acked, [1, 2]);
    assert_eq!(reject.sequence, 2);
    assert_eq!(reject.reason, "batch 2 out of sequence, expected 3");
    assert!(
        raw.inbound.message().await.unwrap().is_none(),
        "the stream ends"
    );
    eventually("the reject is counted", || {
        metric(&l.metrics, "leader_streams_ended_total", "out_of_sequence") == 1
    })
    .await;
    // The agent starts over on a new stream, as ours do.
    let mut raw = hello_acked(&mut c, "node-a", 1).await;
    raw.tx
        .send(batch(Batch {
            sequence: 1,
            ..Batch::default()
        }))
        .await
        .unwrap();
    let ack = raw.inbound.message().await.unwrap().and_then(|m| m.message);
    assert!(matches!(ack, Some(leader_message::Message::Ack(a)) if a.sequence == 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_hellos_meets_the_stream_and_agent_limits() {
    // Streams in all.
    let l = leader(IngestLimits {
        max_streams: 3,
        ..loopback()
    })
    .await;
    let mut c = client(l.address, |e| e).await;
    let mut open_streams = Vec::new();
    for i in 0..3 {
        open_streams.push(hello_acked(&mut c, &format!("node-{i}"), 1).await);
    }
    for i in 3..100 {
        let refused = open(&mut c, Some(hello(&format!("node-{i}"), 1)))
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.code(), Code::ResourceExhausted);
        assert!(
            refused.message().contains("--max-agent-streams"),
            "{refused}"
        );
    }
    assert_eq!(
        metric(
            &l.metrics,
            "leader_streams_refused_total",
            "too_many_streams"
        ),
        97
    );
    // A stream that ends gives its place back.
    drop(open_streams.pop());
    eventually("the closed stream is gone", || {
        gauge(&l.metrics, "leader_streams_active") == 2
    })
    .await;
    open_streams.push(hello_acked(&mut c, "node-99", 1).await);

    // Streams per address.
    let l = leader(IngestLimits {
        max_streams_per_address: 2,
        ..IngestLimits::default()
    })
    .await;
    let mut c = client(l.address, |e| e).await;
    let _a = hello_acked(&mut c, "node-a", 1).await;
    let _b = hello_acked(&mut c, "node-b", 1).await;
    let refused = open(&mut c, Some(hello("node-c", 1)))
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(
        metric(
            &l.metrics,
            "leader_streams_refused_total",
            "too_many_streams_from_address"
        ),
        1
    );

    // Agents known: one stream after another, each with a new id.
    let l = leader(IngestLimits {
        max_agents: 5,
        ..loopback()
    })
    .await;
    let mut c = client(l.address, |e| e).await;
    for i in 0..5 {
        drop(hello_acked(&mut c, &format!("node-{i}"), 1).await);
    }
    for i in 5..1000 {
        let refused = open(&mut c, Some(hello(&format!("node-{i}"), 1)))
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.code(), Code::ResourceExhausted);
        assert!(refused.message().contains("--max-agents"), "{refused}");
    }
    assert_eq!(
        metric(
            &l.metrics,
            "leader_streams_refused_total",
            "too_many_agents"
        ),
        995
    );
    // Known agents still connect, a restarted one included; an older process is refused.
    drop(hello_acked(&mut c, "node-3", 1).await);
    drop(hello_acked(&mut c, "node-3", 2).await);
    let stale = open(&mut c, Some(hello("node-3", 1)))
        .await
        .err()
        .expect("refused");
    assert_eq!(stale.code(), Code::FailedPrecondition, "{stale}");
    assert_eq!(
        metric(&l.metrics, "leader_streams_refused_total", "stale_epoch"),
        1
    );

    // A stream that never says hello holds its place for the hello timeout only.
    let l = leader(IngestLimits {
        hello_timeout: Duration::from_millis(200),
        ..loopback()
    })
    .await;
    let mut c = client(l.address, |e| e).await;
    let silent = open(&mut c, None).await.err().expect("refused");
    assert_eq!(silent.code(), Code::DeadlineExceeded, "{silent}");
    assert_eq!(
        metric(&l.metrics, "leader_streams_refused_total", "hello_timeout"),
        1
    );
}

fn workload(name: String) -> EndpointId {
    EndpointId::Workload(WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: name.into(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_reads_its_acks_is_cut_off_and_others_carry_on() {
    let l = leader(IngestLimits {
        ack_timeout: Duration::from_secs(2),
        ..loopback()
    })
    .await;
    // A client whose receive window is small: the leader's acks fill it quickly.
    let mut c = client(l.address, |e| e.initial_stream_window_size(Some(1024))).await;
    let raw = hello_acked(&mut c, "node-hostile", 1).await;
    for sequence in 1..=20_000 {
        raw.tx
            .send(batch(Batch {
                sequence,
                ..Batch::default()
            }))
            .await
            .unwrap();
    }

    // A well-behaved agent meanwhile: everything it records reaches the index.
    let table = Arc::new(FlowTable::new(1 << 12));
    for i in 0..200u32 {
        let edge = Edge {
            subject: Endpoint::new(workload(format!("client-{}", i % 7))),
            direction: Direction::Egress,
            peer: Endpoint::new(workload(format!("server-{}", i % 11))),
            protocol: Protocol::Tcp,
            port: 8080,
            peer_dns: None,
            denied_by: None,
        };
        table.record(&edge, Timestamp(1_000 + i64::from(i)), 1);
    }
    let config = ShipConfig {
        addresses: vec![l.address.to_string()],
        node: "node-good".into(),
        agent_id: "node-good".into(),
        epoch: 1,
        provider: Provider::Cilium,
        flush_interval: Duration::from_millis(10),
        max_message_bytes: 1024,
        max_unacked: 8,
        max_unacked_bytes: 8 << 20,
        idle_expiry: Duration::from_secs(3600),
        token_file: None,
    };
    let state = SourceState::default();
    let agent = tokio::spawn(ship::run(
        config,
        table.clone(),
        Arc::new(AgentMetrics::default()),
        state.clone(),
    ));
    let want = table.len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while l.index.read().await.unwrap().edges.len() < want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the good agent's edges never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    eventually("the hostile stream is cut off", || {
        metric(&l.metrics, "leader_streams_ended_total", "ack_timeout") == 1
    })
    .await;
    eventually("only the good agent's stream is open", || {
        gauge(&l.metrics, "leader_streams_active") == 1
    })
    .await;
    // The hostile client's own stream ends too: its outbound queue is closed.
    drop(raw);
    state.shut_down();
    agent.await.unwrap();
}
