//! Agent → leader over real gRPC on loopback: the agent's shipper (`ne_node_agent::ship`)
//! against the leader's ingest service (`ne_leader::ingest`), two leader replicas with an
//! in-process Lease flag. The leaders' merged indexes must end equal to everything the
//! agents recorded: nothing lost across a failover or an agent restart, nothing counted
//! twice.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ne_flow::edge::{Edge, Provider};
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_flow::table::{EdgeKey, FlowTable};
use ne_leader::ingest::{IndexHandle, IngestService, LeaderMetrics};
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship::{self, ShipConfig};
use ne_node_agent::sources::SourceState;
use ne_proto::ingest::ingest_server::{Ingest, IngestServer};
use ne_proto::ingest::{Ack, AgentMessage, LeaderMessage, agent_message, leader_message};
use tonic::Status;

/// One leader replica: its index, its Lease flag and its server task.
struct Leader {
    address: SocketAddr,
    index: IndexHandle,
    leading: Arc<AtomicBool>,
    metrics: Arc<LeaderMetrics>,
    server: tokio::task::JoinHandle<()>,
}

async fn leader(leading: bool, epoch: u64) -> Leader {
    leader_with(leading, epoch, Arc::new(ne_leader::auth::Insecure)).await
}

async fn leader_with(
    leading: bool,
    epoch: u64,
    auth: Arc<dyn ne_leader::auth::Authenticator>,
) -> Leader {
    let (index, _owner) = IndexHandle::spawn(1 << 16);
    let leading = Arc::new(AtomicBool::new(leading));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Arc::new(LeaderMetrics::default());
    let service = IngestService::new(index.clone(), leading.clone(), epoch, metrics.clone(), auth);
    let server = tokio::spawn(async move {
        let _ = service.serve(listener).await;
    });
    Leader {
        address,
        index,
        leading,
        metrics,
        server,
    }
}

fn workload(name: String) -> EndpointId {
    EndpointId::Workload(WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: name.into(),
    })
}

fn edge(client: u32, server: u32, port: u16) -> Edge {
    Edge {
        subject: Endpoint::new(workload(format!("client-{client}"))),
        direction: Direction::Egress,
        peer: Endpoint::new(workload(format!("server-{server}"))),
        protocol: Protocol::Tcp,
        port,
        peer_dns: None,
        denied_by: None,
    }
}

/// What the agents recorded, computed apart from the table: key → (count, first, last).
type Model = BTreeMap<EdgeKey, (u64, i64, i64)>;

fn record(table: &FlowTable, model: &mut Model, edge: &Edge, time: i64, count: u64) {
    table.record(edge, Timestamp(time), count);
    let e = model.entry(EdgeKey::of(edge)).or_insert((0, time, time));
    e.0 += count;
    e.1 = e.1.min(time);
    e.2 = e.2.max(time);
}

/// Records `n` flows over a spread of edges (some repeated), at times from `t0`.
fn traffic(table: &FlowTable, model: &mut Model, n: u32, t0: i64) {
    for i in 0..n {
        let e = edge(i % 7, i % 11, [80, 443, 5432][(i % 3) as usize]);
        record(table, model, &e, t0 + i64::from(i), 1 + u64::from(i % 4));
    }
}

async fn index_of(index: &IndexHandle) -> Model {
    index
        .read()
        .await
        .unwrap()
        .edges
        .into_iter()
        .map(|m| (m.key(), (m.count, m.first_seen.0, m.last_seen.0)))
        .collect()
}

/// Waits (polling, 30 s at most) until `holds` is true.
async fn eventually(what: &str, mut holds: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !holds() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (polling, 30 s at most) until the leader's index equals `want`.
async fn converges(index: &IndexHandle, want: &Model, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = index_of(index).await;
        if &got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the index did not converge\n got {} edges, want {}",
            got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn config(addresses: &[SocketAddr], epoch: u64) -> ShipConfig {
    ShipConfig {
        addresses: addresses.iter().map(ToString::to_string).collect(),
        node: "worker-1".into(),
        agent_id: "worker-1".into(),
        epoch,
        provider: Provider::Cilium,
        flush_interval: Duration::from_millis(10),
        // Small messages: the snapshot and the deltas span several batches.
        max_message_bytes: 512,
        max_unacked: 8,
        max_unacked_bytes: 8 << 20,
        idle_expiry: Duration::from_secs(3600),
        token_file: None,
    }
}

fn start_agent(
    config: ShipConfig,
    table: Arc<FlowTable>,
) -> (SourceState, Arc<AgentMetrics>, tokio::task::JoinHandle<()>) {
    let state = SourceState::default();
    let metrics = Arc::new(AgentMetrics::default());
    let task = tokio::spawn(ship::run(config, table, metrics.clone(), state.clone()));
    (state, metrics, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_loses_nothing_and_counts_nothing_twice() {
    let a = leader(true, 1).await;
    let b = leader(false, 2).await;
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    traffic(&table, &mut model, 300, 1_000);
    let (state, metrics, task) = start_agent(config(&[a.address, b.address], 7), table.clone());

    converges(&a.index, &model, "leader A").await;
    // The standby refused the agent or was never tried; it holds nothing.
    assert!(index_of(&b.index).await.is_empty());

    // A loses the Lease and dies; B takes over. More traffic meanwhile, over known and
    // new edges.
    a.leading.store(false, Ordering::Release);
    a.server.abort();
    b.leading.store(true, Ordering::Release);
    traffic(&table, &mut model, 500, 5_000);
    record(&table, &mut model, &edge(99, 99, 8443), 9_999, 3);

    converges(&b.index, &model, "leader B").await;
    // A never saw the second half; what it holds is a subset, never more than was sent.
    let at_a = index_of(&a.index).await;
    assert!(at_a.len() < model.len());
    for (key, (count, ..)) in &at_a {
        assert!(*count <= model[key].0);
    }
    assert!(
        metrics.ship_snapshots.get() >= 2,
        "a new stream starts with a snapshot"
    );
    // At B every hello and every batch was acked, none rejected, and the ingest lag was
    // observed once per batch that carried entries.
    let m = &b.metrics;
    assert!(m.batches_received.get() > 0 && m.batch_bytes_received.get() > 0);
    assert_eq!(m.streams_opened.get(), 1);
    assert_eq!(
        m.acks_sent.get(),
        m.batches_received.get() + m.streams_opened.get()
    );
    assert_eq!(m.rejects_sent.get(), 0);
    let text = ne_telemetry::http::Exposition::encode(&**m);
    let lag_count = text
        .lines()
        .find_map(|l| l.strip_prefix("network_enforcer_leader_ingest_lag_seconds_count "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(
        lag_count.is_some_and(|n| n > 0 && n <= m.batches_received.get()),
        "{text}"
    );
    state.shut_down();
    task.await.unwrap();
    b.server.abort();
}

/// A replica that loses the Lease ends its open streams with UNAVAILABLE even while the
/// agent is idle (nothing to send), and the agent moves to the new leader, which gets
/// everything from a snapshot. The old replica keeps serving: only the Lease moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_ends_idle_streams_and_the_agent_moves_on() {
    let a = leader(true, 1).await;
    let b = leader(false, 2).await;
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    traffic(&table, &mut model, 100, 1_000);
    let (state, metrics, task) = start_agent(config(&[a.address, b.address], 7), table.clone());
    converges(&a.index, &model, "leader A").await;
    eventually("the agent is idle at A", || {
        metrics.ship_unacked.get() == 0 && a.metrics.streams_active.get() == 1
    })
    .await;

    // The Lease moves; no new traffic, so no message would ever reach A's session.
    a.leading.store(false, Ordering::Release);
    b.leading.store(true, Ordering::Release);
    eventually("A ends the stream", || {
        a.metrics.streams_active.get() == 0 && a.metrics.streams_lost_lease.get() == 1
    })
    .await;
    converges(&b.index, &model, "leader B, from the new stream's snapshot").await;
    assert_eq!(index_of(&a.index).await, model, "A keeps what it had");
    assert_eq!(b.metrics.streams_opened.get(), 1);
    assert!(metrics.ship_snapshots.get() >= 2);
    state.shut_down();
    task.await.unwrap();
    a.server.abort();
    b.server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_adds_the_new_process_counts_to_the_old_ones() {
    let l = leader(true, 1).await;
    let mut model = Model::new();

    // First process: epoch 10.
    let first = Arc::new(FlowTable::new(1 << 12));
    traffic(&first, &mut model, 200, 1_000);
    let (state, _, task) = start_agent(config(&[l.address], 10), first.clone());
    converges(&l.index, &model, "first process").await;
    state.shut_down();
    task.await.unwrap();

    // The restarted process starts from an empty table, with a larger epoch; the same
    // edges again count on top of what the first process shipped.
    let second = Arc::new(FlowTable::new(1 << 12));
    traffic(&second, &mut model, 200, 2_000);
    let (state, _, task) = start_agent(config(&[l.address], 11), second.clone());
    converges(&l.index, &model, "after the restart").await;
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// The whole live pipeline on the bundled captures that name their workloads (ztunnel
/// records name pods: they need a cluster snapshot, which the live leader does not read
/// yet): the agent's file source replays a capture into its FlowTable, the shipper streams it to the leader, and the proposals
/// the leader renders from its merged index are exactly those of offline `learn` on the
/// same file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_pipeline_proposes_what_offline_learn_proposes() {
    use ne_leader::cli::{InputArgs, InputFormat, LearnArgs, SummaryFormat};
    use ne_node_agent::sink::FlowSink;
    use ne_node_agent::sources::file::{self, FileSource};
    use ne_policy::allowlist::LearnOptions;

    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/flows");
    for name in ["hubble.jsonl", "goldmane.jsonl"] {
        let path = std::path::PathBuf::from(examples).join(name);
        let format = file::format_of(&path, "auto").unwrap();
        let provider = format.provider();

        let table = Arc::new(FlowTable::new(1 << 12));
        let sink = FlowSink::new(
            table.clone(),
            Arc::new(AgentMetrics::default()),
            provider,
            "file",
        );
        let source = FileSource {
            path: &path,
            format,
            follow: false,
            poll: Duration::from_millis(10),
        };
        file::run(&source, &sink, &SourceState::default()).unwrap();
        let mut want = Model::new();
        for s in table.snapshot() {
            want.insert(s.key(), (s.count, s.first_seen.0, s.last_seen.0));
        }

        let l = leader(true, 1).await;
        let (state, _, task) = start_agent(
            ShipConfig {
                provider,
                ..config(&[l.address], 1)
            },
            table,
        );
        converges(&l.index, &want, name).await;
        state.shut_down();
        task.await.unwrap();
        l.server.abort();

        let options = LearnOptions {
            exclude_namespaces: ["kube-system".to_owned()].into(),
        };
        let live = ne_leader::learning::learn(
            ne_leader::learning::merged(&l.index.read().await.unwrap().edges),
            &ne_policy::resolve::RecordOnly,
            provider,
            &options,
        )
        .proposals;
        let offline = ne_leader::offline::learn::learn(&LearnArgs {
            input: InputArgs {
                input: vec![path.clone()],
                cluster: Vec::new(),
                format: InputFormat::Auto,
                strict: false,
            },
            output: "-".to_owned(),
            exclude_namespaces: vec!["kube-system".to_owned()],
            summary: SummaryFormat::Table,
        })
        .unwrap()
        .proposals;
        assert!(!offline.is_empty(), "{name}: nothing learned");
        assert_eq!(live, offline, "{name}");
    }
}

/// An entry not seen for `idle_expiry` before the latest flow shipped is forgotten by the
/// agent once the leader has acked it, and the leader keeps it; the recent one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_idle_entries_expire_at_the_agent_only() {
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    let (old, recent) = (edge(1, 1, 80), edge(2, 2, 80));
    record(&table, &mut model, &old, 1_000, 1);
    record(&table, &mut model, &recent, 10_000_000_000, 1);
    let (state, _, task) = start_agent(
        ShipConfig {
            idle_expiry: Duration::from_secs(1),
            ..config(&[l.address], 1)
        },
        table.clone(),
    );
    converges(&l.index, &model, "both edges").await;
    eventually("the old entry expires", || table.len() == 1).await;
    assert_eq!(table.snapshot()[0].key(), EdgeKey::of(&recent));
    assert_eq!(index_of(&l.index).await, model);
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// An agent whose table changes at every flush interval (a busy node: some entry is always
/// dirty, so some batch is always in flight right after a drain) still forgets its idle
/// entries, once the leader holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_agent_still_expires_its_idle_entries() {
    const SECOND: i64 = 1_000_000_000;
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    let (old, hot) = (edge(1, 1, 80), edge(2, 2, 80));
    record(&table, &mut model, &old, 10 * SECOND, 1);
    record(&table, &mut model, &hot, 10 * SECOND, 1);
    // Then traffic on the hot edge every millisecond (ten times per flush interval), its
    // flow clock moving 10 ms at a time: the old entry turns idle (1 s) after some 100
    // flush intervals of a busy table.
    let busy = {
        let (table, hot) = (table.clone(), hot.clone());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(1));
            for ms in 1.. {
                every.tick().await;
                table.record(&hot, Timestamp(10 * SECOND + ms * 10_000_000), 1);
            }
        })
    };
    let (state, metrics, task) = start_agent(
        ShipConfig {
            idle_expiry: Duration::from_secs(1),
            ..config(&[l.address], 1)
        },
        table.clone(),
    );
    eventually(
        "the idle entry expires while the hot one keeps changing",
        || table.len() == 1,
    )
    .await;
    busy.abort();
    let idle = metrics
        .edges_expired
        .get_or_create(&ne_node_agent::metrics::ExpiryLabel { reason: "idle" })
        .get();
    assert_eq!(idle, 1);
    assert_eq!(table.snapshot()[0].key(), EdgeKey::of(&hot));
    let at_leader = index_of(&l.index).await;
    assert_eq!(
        at_leader.get(&EdgeKey::of(&old)),
        model.get(&EdgeKey::of(&old)),
        "the leader holds the expired entry's last value"
    );
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// A flood of new edges fills the agent's table: once the leader has acked them, the
/// shipper sheds the least recently seen down to 75 % of the capacity (counted), the leader
/// keeps every one, and a new edge finds room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_sheds_its_least_recent_shipped_entries_and_takes_new_edges_again() {
    const SECOND: i64 = 1_000_000_000;
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(100));
    let mut model = Model::new();
    for i in 1..=100 {
        record(
            &table,
            &mut model,
            &edge(i, i, 80),
            i64::from(i) * SECOND,
            1,
        );
    }
    let late = edge(500, 500, 80);
    assert_eq!(
        table.record(&late, Timestamp(101 * SECOND), 1),
        ne_flow::table::RecordOutcome::Dropped
    );
    let (state, metrics, task) = start_agent(config(&[l.address], 1), table.clone());
    converges(&l.index, &model, "every flooded edge").await;
    eventually("the table sheds under pressure", || table.len() <= 75).await;
    let oldest = table.snapshot().iter().map(|s| s.last_seen.0).min();
    assert_eq!(oldest, Some(26 * SECOND), "the 25 least recently seen went");
    let pressure = metrics
        .edges_expired
        .get_or_create(&ne_node_agent::metrics::ExpiryLabel { reason: "pressure" })
        .get();
    assert_eq!(pressure, 25);
    assert_eq!(index_of(&l.index).await, model, "the leader keeps them all");
    record(&table, &mut model, &late, 101 * SECOND, 1);
    converges(&l.index, &model, "the late edge, after the flood").await;
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// A leader that acks the hello, then holds back every batch's ack until `release` turns
/// true (a leader too slow to keep up); it keeps the size of every batch received.
struct HoldingLeader {
    sizes: Arc<std::sync::Mutex<Vec<usize>>>,
    release: tokio::sync::watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Ingest for HoldingLeader {
    type StreamStream = tokio_stream::wrappers::ReceiverStream<Result<LeaderMessage, Status>>;

    async fn stream(
        &self,
        request: tonic::Request<tonic::Streaming<AgentMessage>>,
    ) -> Result<tonic::Response<Self::StreamStream>, Status> {
        let mut inbound = request.into_inner();
        let (sizes, mut release) = (self.sizes.clone(), self.release.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let ack = |sequence| {
                Ok(LeaderMessage {
                    message: Some(leader_message::Message::Ack(Ack {
                        sequence,
                        leader_epoch: 1,
                    })),
                })
            };
            let mut last = 0;
            loop {
                if (last == 0 || *release.borrow_and_update()) && tx.send(ack(last)).await.is_err()
                {
                    return;
                }
                tokio::select! {
                    message = inbound.message() => match message {
                        Ok(Some(AgentMessage { message: Some(agent_message::Message::Batch(b)) })) => {
                            sizes.lock().unwrap().push(ne_delta::agent_message_len(&b));
                            last = b.sequence;
                        }
                        Ok(Some(_)) => {}
                        _ => return,
                    },
                    changed = release.changed() => if changed.is_err() { return },
                }
            }
        });
        Ok(tonic::Response::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
    }
}

/// A leader that does not ack holds the agent at `--max-unacked-bytes`: past it the
/// shipper drains nothing (counted), the table keeps aggregating, and once the leader acks,
/// what was held back is shipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_does_not_ack_holds_the_agent_at_its_byte_budget() {
    const BUDGET: usize = 1024;
    let (release_tx, release) = tokio::sync::watch::channel(false);
    let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let leader = HoldingLeader {
        sizes: sizes.clone(),
        release,
    };
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IngestServer::new(leader))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    let (state, metrics, task) = start_agent(
        ShipConfig {
            max_unacked: 1000,
            max_unacked_bytes: BUDGET,
            ..config(&[address], 1)
        },
        table.clone(),
    );
    let held = |reason| {
        metrics
            .ship_held
            .get_or_create(&ne_node_agent::metrics::HeldLabel { reason })
            .get()
    };
    // One new edge at a time, each in a drain of its own, until the shipper holds back.
    let mut recorded = 0u32;
    while held("unacked_bytes") == 0 {
        assert!(recorded < 500, "500 edges shipped and never held back");
        recorded += 1;
        let e = edge(recorded, recorded, 80);
        record(&table, &mut model, &e, i64::from(recorded), 1);
        let sent = || metrics.delta_edges_sent.get() == u64::from(recorded);
        eventually("the edge is shipped or held back", || {
            sent() || held("unacked_bytes") > 0
        })
        .await;
    }
    let shipped = metrics.delta_edges_sent.get();
    for i in 1..=50 {
        record(&table, &mut model, &edge(1000 + i, i, 443), 5_000, 1);
    }
    let then = held("unacked_bytes");
    eventually("ten more flush intervals held back", || {
        held("unacked_bytes") >= then + 10
    })
    .await;
    assert_eq!(metrics.delta_edges_sent.get(), shipped, "nothing drained");
    assert_eq!(held("unacked_batches"), 0);
    assert_eq!(table.len(), model.len(), "the table kept aggregating");
    eventually("the leader has every batch sent", || {
        sizes.lock().unwrap().len() as u64 == metrics.deltas_sent.get()
    })
    .await;
    let received = sizes.lock().unwrap().clone();
    let total: usize = received.iter().sum();
    assert_eq!(metrics.ship_unacked_bytes.get(), total as i64);
    assert!(
        total >= BUDGET && total - received.last().unwrap() < BUDGET,
        "the last drain shipped was admitted under the budget: {received:?}"
    );

    release_tx.send(true).unwrap();
    eventually("everything held back is shipped once acked", || {
        metrics.delta_edges_sent.get() == model.len() as u64
    })
    .await;
    state.shut_down();
    task.await.unwrap();
    server.abort();
}

/// A table filled within one flush interval and then flooded with new edges only ships
/// nothing more, so shipping alone would never move its flow clock and nothing would turn
/// old enough to shed: the dropped flows' times move it, and the table takes new edges
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_full_of_new_entries_sheds_on_the_clock_of_the_flows_it_drops() {
    const SECOND: i64 = 1_000_000_000;
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(100));
    let mut model = Model::new();
    for i in 1..=100 {
        record(
            &table,
            &mut model,
            &edge(i, i, 80),
            10 * SECOND + i64::from(i),
            1,
        );
    }
    let (state, metrics, task) = start_agent(config(&[l.address], 1), table.clone());
    converges(&l.index, &model, "the table, shipped").await;
    // The flood goes on, seconds later on the flows' clock: every flow a new edge.
    let flood = edge(500, 500, 80);
    assert_eq!(
        table.record(&flood, Timestamp(15 * SECOND), 1),
        ne_flow::table::RecordOutcome::Dropped
    );
    eventually("the table sheds under pressure", || table.len() <= 75).await;
    let pressure = metrics
        .edges_expired
        .get_or_create(&ne_node_agent::metrics::ExpiryLabel { reason: "pressure" })
        .get();
    assert_eq!(pressure, 25);
    record(&table, &mut model, &flood, 15 * SECOND, 1);
    converges(&l.index, &model, "a flood edge, after the shedding").await;
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// A drain of more changed entries than the shipper encodes at a time goes out in pieces,
/// and the leader gets every entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_larger_than_a_chunk_arrives_whole() {
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(1 << 16));
    let mut model = Model::new();
    let (state, metrics, task) = start_agent(
        ShipConfig {
            max_message_bytes: 1 << 20,
            // Long enough to record them all between two drains.
            flush_interval: Duration::from_millis(500),
            ..config(&[l.address], 1)
        },
        table.clone(),
    );
    // Once the snapshot is taken, whatever is recorded goes out in deltas only.
    eventually("the stream's snapshot", || {
        metrics.ship_snapshots.get() == 1
    })
    .await;
    // 40 000 new edges at once: one flush interval's drain of about three chunks.
    for i in 0..40_000u32 {
        record(&table, &mut model, &edge(i % 200, i, 80), i64::from(i), 1);
    }
    converges(&l.index, &model, "every entry of the drain").await;
    assert_eq!(
        metrics.delta_edges_sent.get(),
        40_000,
        "each entry shipped once"
    );
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// An entry too large for one message even alone is not shipped, and is counted; the
/// others still reach the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_too_large_for_a_message_is_counted_not_lost_silently() {
    let l = leader(true, 1).await;
    let table = Arc::new(FlowTable::new(1 << 12));
    let mut model = Model::new();
    record(&table, &mut model, &edge(1, 1, 80), 1_000, 1);
    let mut huge = edge(2, 2, 80);
    huge.peer = huge.peer.with_labels(ne_flow::flow::labels(
        (0..200).map(|i| (format!("label-{i}"), "x".repeat(40))),
    ));
    table.record(&huge, Timestamp(1_000), 1);
    let (state, metrics, task) = start_agent(config(&[l.address], 1), table);
    converges(&l.index, &model, "the small edge only").await;
    assert_eq!(metrics.ship_oversized.get(), 1);
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
}

/// Accepts the token `good` only, as a TokenReview would accept one ServiceAccount.
struct OneToken;

#[tonic::async_trait]
impl ne_leader::auth::Authenticator for OneToken {
    async fn authenticate(
        &self,
        bearer: Option<&str>,
    ) -> Result<ne_leader::auth::Identity, ne_leader::auth::Refusal> {
        match bearer {
            Some("good") => Ok(ne_leader::auth::Identity::unbound(
                "system:serviceaccount:network-enforcer:agent",
            )),
            _ => Err(ne_leader::auth::Refusal {
                status: tonic::Status::unauthenticated("no"),
                reason: "unauthenticated",
            }),
        }
    }
}

/// A stream without an accepted token is refused before its hello, counted, and nothing
/// it would send reaches the index; the agent with the right token is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_an_accepted_token_are_refused_and_counted() {
    let l = leader_with(true, 1, Arc::new(OneToken)).await;
    let dir = std::env::temp_dir().join(format!("ne-ingest-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (bad, good) = (dir.join("bad"), dir.join("good"));
    std::fs::write(&bad, "bad\n").unwrap();
    std::fs::write(&good, "good\n").unwrap();

    let mut model = Model::new();
    let intruder = Arc::new(FlowTable::new(16));
    record(&intruder, &mut Model::new(), &edge(9, 9, 9), 1, 1);
    let (state, metrics, task) = start_agent(
        ShipConfig {
            token_file: Some(bad),
            ..config(&[l.address], 1)
        },
        intruder,
    );
    let refused = |m: &LeaderMetrics| {
        ne_telemetry::http::Exposition::encode(m)
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "network_enforcer_leader_streams_refused_total{reason=\"unauthenticated\"} ",
                )
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    eventually("the stream is refused", || refused(&l.metrics) > 0).await;
    assert_eq!(metrics.leader_connected.get(), 0);
    state.shut_down();
    task.await.unwrap();

    let table = Arc::new(FlowTable::new(16));
    record(&table, &mut model, &edge(1, 1, 80), 1, 1);
    let (state, _, task) = start_agent(
        ShipConfig {
            token_file: Some(good),
            agent_id: "worker-2".into(),
            ..config(&[l.address], 1)
        },
        table,
    );
    converges(&l.index, &model, "the authenticated agent only").await;
    assert_eq!(l.metrics.streams_opened.get(), 1);
    state.shut_down();
    task.await.unwrap();
    l.server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}
