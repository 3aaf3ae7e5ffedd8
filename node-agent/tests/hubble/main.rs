//! The Hubble source against real gRPC servers in the same process: a scripted Hubble on a
//! real unix socket (the node's own server) and on TLS loopback TCP (Relay with mTLS).
//!
//! Every case streams the example capture as protobuf `GetFlowsResponse`s and checks the
//! agent's FlowTable against the offline pipeline (`decode_lines` + `record_flow`) on the
//! same file, plus the metrics that account for what did not become an edge. Waits are on
//! conditions (the agent's counters), never fixed delays.

mod certs;
mod flows;
mod server;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use ne_flow::edge::Provider;
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_node_agent::metrics::{AgentMetrics, DropReason, ReasonLabel, SourceLabel};
use ne_node_agent::sink::FlowSink;
use ne_node_agent::sources::SourceState;
use ne_node_agent::sources::backoff::Backoff;
use ne_node_agent::sources::hubble::{HubbleConfig, HubbleTarget, run};
use ne_node_agent::sources::tls::TlsFiles;
use ne_proto::flow::LostEventSource;
use ne_proto::observer::GetFlowsResponse;
use ne_proto::observer::get_flows_response::ResponseTypes;
use ne_proto::relay::NodeStatusEvent;
use rcgen::ExtendedKeyUsagePurpose;
use tokio::task::JoinHandle;

use flows::{Offline, example_capture, lost_events, offline, responses, sorted};
use server::{Session, TestHubble, encode};

/// One agent's Hubble source, with its table and metrics.
struct Agent {
    metrics: Arc<AgentMetrics>,
    table: Arc<FlowTable>,
    state: SourceState,
    task: JoinHandle<anyhow::Result<()>>,
}

fn start_agent(target: HubbleTarget, tls: TlsFiles, node_name: Option<&str>) -> Agent {
    let metrics = Arc::new(AgentMetrics::default());
    let table = Arc::new(FlowTable::new(100_000));
    let state = SourceState::default();
    let config = HubbleConfig {
        target,
        tls,
        node_name: node_name.map(str::to_owned),
        // Fast retries keep the tests short; the schedule itself is tested in `backoff`.
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(20)),
    };
    let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Cilium, "hubble");
    let task = tokio::spawn(run(config, sink, state.clone()));
    Agent {
        metrics,
        table,
        state,
        task,
    }
}

impl Agent {
    fn received(&self) -> u64 {
        self.metrics
            .flows_received
            .get_or_create(&SourceLabel { source: "hubble" })
            .get()
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        self.metrics
            .flows_dropped
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    /// Sum of every `agent_flows_dropped_total` series, read from the exposition.
    fn dropped_total(&self) -> u64 {
        metric_values(&self.metrics, "network_enforcer_agent_flows_dropped_total{")
            .into_iter()
            .map(|(_, v)| v)
            .sum()
    }

    fn reconnects(&self) -> u64 {
        self.metrics.source_reconnects.get()
    }

    fn connected(&self) -> i64 {
        self.metrics.source_connected.get()
    }

    fn ready(&self) -> bool {
        self.state.ready_flag().load(Ordering::Relaxed)
    }

    fn edges(&self) -> Vec<EdgeSnapshot> {
        sorted(self.table.snapshot())
    }

    /// Waits until `cond` holds (the agent works concurrently); fails after 30 s.
    async fn until(&self, what: &str, cond: impl Fn(&Agent) -> bool) {
        let wait = async {
            let mut tick = tokio::time::interval(Duration::from_millis(2));
            while !cond(self) {
                tick.tick().await;
            }
        };
        if tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .is_err()
        {
            panic!(
                "timed out waiting for {what}: received {}, reconnects {}, connected {}",
                self.received(),
                self.reconnects(),
                self.connected()
            );
        }
    }

    /// Shuts the source down; it must end cleanly.
    async fn stop(self) {
        self.state.shut_down();
        self.task.await.unwrap().unwrap();
    }
}

/// `(line, value)` of every exposition line starting with `prefix`.
fn metric_values(metrics: &AgentMetrics, prefix: &str) -> Vec<(String, u64)> {
    metrics
        .encode()
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// The agent learned exactly what the offline pipeline learns from the capture.
fn assert_learned_like_offline(agent: &Agent, expected: &Offline) {
    assert!(!expected.edges.is_empty());
    assert_eq!(agent.received(), expected.records);
    assert_eq!(agent.edges(), expected.edges);
    assert_eq!(
        agent.dropped_total() - agent.dropped(DropReason::decode_error),
        expected.not_learned,
        "flows that teach no edge are counted by reason"
    );
}

fn unix_dir(test: &str) -> (std::path::PathBuf, HubbleTarget) {
    let dir = certs::temp_dir(test);
    let socket = dir.join("hubble.sock");
    (dir, HubbleTarget::Unix(socket))
}

fn socket_of(target: &HubbleTarget) -> &std::path::Path {
    match target {
        HubbleTarget::Unix(path) => path,
        HubbleTarget::Relay { .. } => unreachable!("a unix target"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flow_of_the_node_socket_becomes_the_offline_edges() {
    let capture = example_capture();
    let expected = offline(&capture);
    assert_eq!(expected.records, 152);
    let (dir, target) = unix_dir("all-flows");
    let hubble = TestHubble::new([Session::hold(&responses(&capture))]);
    let server = hubble.serve_unix(socket_of(&target));

    let agent = start_agent(target, TlsFiles::default(), Some("worker-1"));
    agent
        .until("every flow", |a| a.received() == expected.records)
        .await;
    assert_learned_like_offline(&agent, &expected);
    assert_eq!(agent.dropped(DropReason::decode_error), 0);
    assert_eq!(agent.metrics.scraper_lag.count(), expected.records);
    assert_eq!((agent.connected(), agent.ready()), (1, true));
    assert_eq!(agent.reconnects(), 0);

    // From now on, learned event types, and no node filter: the socket is this node's.
    let requests = hubble.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!((request.number, request.follow), (0, true));
    assert_eq!(request.whitelist.len(), 1);
    assert!(request.whitelist[0].node_name.is_empty());
    let types: Vec<i32> = request.whitelist[0]
        .event_type
        .iter()
        .map(|e| e.r#type)
        .collect();
    assert_eq!(types, [1, 4, 5]);

    agent.stop().await;
    server.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_events_are_counted_by_cause() {
    let capture = example_capture();
    let expected = offline(&capture);
    let flows = responses(&capture);
    let (last, rest) = flows.split_last().unwrap();
    let node_status = GetFlowsResponse {
        response_types: Some(ResponseTypes::NodeStatus(NodeStatusEvent {
            state_change: 2,
            node_names: vec!["default/worker-2".into()],
            message: "connection refused".into(),
        })),
        ..GetFlowsResponse::default()
    };
    let mut script = vec![lost_events(LostEventSource::HubbleRingBuffer, 5)];
    script.extend_from_slice(&rest[..70]);
    script.push(lost_events(LostEventSource::HubbleRingBuffer, 7));
    script.push(node_status);
    script.push(lost_events(LostEventSource::PerfEventRingBuffer, 3));
    script.extend_from_slice(&rest[70..]);
    script.push(lost_events(LostEventSource::HubbleRingBuffer, 30));
    // The last flow comes after every other message: once it is in, all of them are.
    script.push(last.clone());

    let (dir, target) = unix_dir("lost-events");
    let server = TestHubble::new([Session::hold(&script)]).serve_unix(socket_of(&target));
    let agent = start_agent(target, TlsFiles::default(), None);
    agent
        .until("every flow", |a| a.received() == expected.records)
        .await;

    let lost = metric_values(
        &agent.metrics,
        "network_enforcer_agent_source_lost_events_total{",
    );
    assert_eq!(lost.len(), 2, "{lost:?}");
    for (series, value) in [
        (
            r#"network_enforcer_agent_source_lost_events_total{source="hubble",cause="hubble_ring_buffer"}"#,
            5 + 7 + 30,
        ),
        (
            r#"network_enforcer_agent_source_lost_events_total{source="hubble",cause="perf_event_ring_buffer"}"#,
            3,
        ),
    ] {
        assert!(
            lost.contains(&(series.to_owned(), value)),
            "{series} {value} not in {lost:?}"
        );
    }
    // Lost events and node status are neither flows nor drops.
    assert_learned_like_offline(&agent, &expected);
    assert_eq!(agent.dropped(DropReason::decode_error), 0);

    agent.stop().await;
    server.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_are_counted_and_the_stream_goes_on() {
    let capture = example_capture();
    let expected = offline(&capture);
    let flows = responses(&capture);
    let whole = encode(&flows[60]);
    let mut messages: Vec<Bytes> = flows[..60].iter().map(encode).collect();
    // A message cut in half (its flow's length runs past the end), and a truncated varint.
    messages.push(whole.slice(..whole.len() / 2));
    messages.push(Bytes::from_static(&[0xff, 0xff, 0xff]));
    messages.extend(flows[60..].iter().map(encode));

    let (dir, target) = unix_dir("malformed");
    let session = Session {
        messages,
        end: false,
    };
    let server = TestHubble::new([session]).serve_unix(socket_of(&target));
    let agent = start_agent(target, TlsFiles::default(), None);
    agent
        .until("every flow", |a| a.received() == expected.records)
        .await;
    assert_eq!(agent.dropped(DropReason::decode_error), 2);
    assert_learned_like_offline(&agent, &expected);
    assert_eq!(agent.reconnects(), 0, "bad bytes do not break the stream");

    agent.stop().await;
    server.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reconnected_and_nothing_is_lost() {
    let capture = example_capture();
    let expected = offline(&capture);
    let flows = responses(&capture);
    let (dir, target) = unix_dir("restart");
    let socket = socket_of(&target).to_owned();

    let first = TestHubble::new([Session::hold(&flows[..80])]).serve_unix(&socket);
    let agent = start_agent(target, TlsFiles::default(), None);
    agent
        .until("the first session's flows", |a| a.received() == 80)
        .await;
    assert_eq!(agent.connected(), 1);

    // The server dies mid-stream; its socket file stays behind, refusing connections.
    first.stop().await;
    agent
        .until("the agent to notice", |a| {
            a.connected() == 0 && !a.ready() && a.reconnects() >= 1
        })
        .await;

    let second = TestHubble::new([Session::hold(&flows[80..])]).serve_unix(&socket);
    agent
        .until("the second session's flows", |a| {
            a.received() == expected.records
        })
        .await;
    assert_learned_like_offline(&agent, &expected);
    assert!(agent.reconnects() >= 1);
    assert_eq!((agent.connected(), agent.ready()), (1, true));
    assert_eq!(second.hubble.requests().len(), 1);

    agent.stop().await;
    second.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_over_mtls_filters_on_the_node_and_refuses_foreign_clients() {
    let capture = example_capture();
    let expected = offline(&capture);
    let dir = certs::temp_dir("relay-mtls");
    let ca = certs::Ca::new("hubble-ca");
    let (server_cert, server_key) = ca.issue(
        &["*.hubble-relay.cilium.io"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (client_cert, client_key) = ca.issue(
        &["network-enforcer.hubble-relay.cilium.io"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let stranger = certs::Ca::new("another-ca");
    let (foreign_cert, foreign_key) = stranger.issue(
        &["network-enforcer.hubble-relay.cilium.io"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    let ca_file = certs::write(&dir, "ca.pem", &ca.pem);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let hubble = TestHubble::new([Session::hold(&responses(&capture))]);
    let server = hubble.serve_mtls(listener, &server_cert, &server_key, &ca.pem);

    let target = HubbleTarget::parse(&address).unwrap();
    let tls = |cert: Option<&str>, key: Option<&str>, name: &str| TlsFiles {
        ca: Some(ca_file.clone()),
        cert: cert.map(|c| certs::write(&dir, &format!("{name}.crt"), c)),
        key: key.map(|k| certs::write(&dir, &format!("{name}.key"), k)),
        // The certificate names Relay, not 127.0.0.1.
        server_name: Some("ui.hubble-relay.cilium.io".into()),
    };

    let agent = start_agent(
        target.clone(),
        tls(Some(&client_cert), Some(&client_key), "client"),
        Some("worker-1"),
    );
    agent
        .until("every flow over mTLS", |a| a.received() == expected.records)
        .await;
    assert_learned_like_offline(&agent, &expected);
    let requests = hubble.requests();
    assert_eq!(requests.len(), 1);
    let filter = &requests[0].whitelist[0];
    assert_eq!(filter.node_name, ["worker-1", "*/worker-1"]);
    assert_eq!(filter.event_type.len(), 3);
    assert_eq!((requests[0].number, requests[0].follow), (0, true));

    // A certificate from another CA, or none at all: refused at the handshake, retried
    // without end, and nothing reaches the server's handler.
    let refused = [
        start_agent(
            target.clone(),
            tls(Some(&foreign_cert), Some(&foreign_key), "foreign"),
            Some("worker-2"),
        ),
        start_agent(
            target.clone(),
            tls(None, None, "anonymous"),
            Some("worker-3"),
        ),
    ];
    for agent in &refused {
        agent
            .until("repeated refusals", |a| a.reconnects() >= 3)
            .await;
        assert_eq!((agent.received(), agent.connected()), (0, 0));
        assert!(!agent.ready());
        assert!(!agent.task.is_finished(), "the source keeps retrying");
    }
    assert_eq!(hubble.requests().len(), 1);
    for agent in refused {
        agent.stop().await;
    }

    agent.stop().await;
    server.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
