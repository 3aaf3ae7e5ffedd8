//! Denials from the data plane to the leader's index, every part real: a scripted Hubble
//! server on a unix socket streams a real capture to the agent's Hubble source; the
//! agent's file source replays a real ztunnel log; both agents ship over loopback gRPC to
//! the leader's ingest service. Policy denials must end in the leader's `denials`,
//! ztunnel's dry-run lines in its `audits`, and neither ever in the learned `edges`.

// The scripted Hubble server and the capture conversion of node-agent's own Hubble tests;
// this test uses part of them.
#[allow(dead_code)]
#[path = "../../node-agent/tests/hubble/flows.rs"]
mod flows;
#[allow(dead_code)]
#[path = "../../node-agent/tests/hubble/server.rs"]
mod server;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ne_flow::edge::Provider;
use ne_flow::table::FlowTable;
use ne_leader::ingest::{IndexHandle, IngestService, LeaderMetrics, Merged};
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship::{self, ShipConfig, ShipTables};
use ne_node_agent::sink::FlowSink;
use ne_node_agent::sources::SourceState;
use ne_node_agent::sources::backoff::Backoff;
use ne_node_agent::sources::file::{FileSource, format_of};
use ne_node_agent::sources::hubble::{HubbleConfig, HubbleTarget};
use ne_node_agent::sources::tls::TlsFiles;
use ne_policy::index::MergedEdge;

use server::{Session, TestHubble};

fn real(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/real")
        .join(name)
}

/// A leading replica's ingest service on loopback.
async fn leader() -> (SocketAddr, IndexHandle, Arc<LeaderMetrics>) {
    let (index, _owner) = IndexHandle::spawn(1 << 12);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let metrics = Arc::new(LeaderMetrics::default());
    let service = IngestService::new(
        index.clone(),
        Arc::new(AtomicBool::new(true)),
        1,
        metrics.clone(),
        Arc::new(ne_leader::auth::Insecure),
    );
    tokio::spawn(service.serve(listener));
    (address, index, metrics)
}

/// An agent's three tables and its sink.
struct Tables {
    learned: Arc<FlowTable>,
    denials: Arc<FlowTable>,
    audits: Arc<FlowTable>,
    metrics: Arc<AgentMetrics>,
}

impl Tables {
    fn new() -> Self {
        Tables {
            learned: Arc::new(FlowTable::new(1000)),
            denials: Arc::new(FlowTable::new(100)),
            audits: Arc::new(FlowTable::new(100)),
            metrics: Arc::new(AgentMetrics::default()),
        }
    }

    fn sink(&self, provider: Provider, source: &'static str) -> FlowSink {
        FlowSink::new(self.learned.clone(), self.metrics.clone(), provider, source)
            .with_denials(self.denials.clone())
            .with_audits(self.audits.clone())
    }

    /// Ships the tables to `leader` as agent `id` until `state` stops.
    fn ship(&self, leader: SocketAddr, id: &str, provider: Provider, state: &SourceState) {
        let config = ShipConfig {
            addresses: vec![leader.to_string()],
            node: id.into(),
            agent_id: id.into(),
            epoch: 1,
            provider,
            flush_interval: Duration::from_millis(10),
            max_message_bytes: 1024,
            max_unacked: 8,
            max_unacked_bytes: 8 << 20,
            idle_expiry: Duration::from_secs(3600),
            token_file: None,
        };
        let tables = ShipTables {
            learned: self.learned.clone(),
            denials: Some(self.denials.clone()),
            audits: Some(self.audits.clone()),
        };
        tokio::spawn(ship::run(
            config,
            tables,
            self.metrics.clone(),
            state.clone(),
        ));
    }
}

/// `(subject, peer, port)` of merged edges, sorted.
fn keys(edges: &[MergedEdge]) -> Vec<(String, String, u16)> {
    let mut v: Vec<_> = edges
        .iter()
        .map(|m| {
            (
                m.edge.subject.id.to_string(),
                m.edge.peer.id.to_string(),
                m.edge.port,
            )
        })
        .collect();
    v.sort();
    v
}

/// Reads the leader's index until `done` holds for it (30 s at most).
async fn read_until(index: &IndexHandle, what: &str, done: impl Fn(&Merged) -> bool) -> Merged {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let merged = index.read().await.unwrap();
        if done(&merged) {
            return merged;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {what}: {} edges, {:?} denials, {:?} audits",
            merged.edges.len(),
            keys(&merged.denials),
            keys(&merged.audits)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_and_dry_runs_reach_the_leader_apart_from_learned_edges() {
    let (address, index, leader_metrics) = leader().await;

    // Cilium: the real Hubble capture, streamed by a scripted Hubble on a unix socket.
    let dir = std::env::temp_dir().join(format!("ne-denials-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("hubble.sock");
    let capture = std::fs::read_to_string(real("hubble-flows.jsonl")).unwrap();
    let responses = flows::responses(&capture);
    let hubble = TestHubble::new([Session::hold(&responses)]).serve_unix(&socket);
    let cilium = Tables::new();
    let state = SourceState::default();
    let config = HubbleConfig {
        target: HubbleTarget::Unix(socket.clone()),
        tls: TlsFiles::default(),
        node_name: None,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(20)),
    };
    let source = tokio::spawn(ne_node_agent::sources::hubble::run(
        config,
        cilium.sink(Provider::Cilium, "hubble"),
        state.clone(),
    ));
    let received = || {
        cilium
            .metrics
            .flows_received
            .get_or_create(&ne_node_agent::metrics::SourceLabel { source: "hubble" })
            .get()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while received() < responses.len() as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the capture is read"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Counted before shipping: a shipper expires entries idle for an hour before the
    // latest flow time it shipped, and the captures span months.
    let cilium_counts = (cilium.learned.len(), cilium.denials.len());
    cilium.ship(address, "cilium-node", Provider::Cilium, &state);

    // Istio: the real ztunnel log, replayed by the file source.
    let istio = Tables::new();
    let path = real("ztunnel-access.log");
    let file = FileSource {
        path: &path,
        format: format_of(&path, "auto").unwrap(),
        follow: false,
        poll: Duration::from_millis(10),
    };
    ne_node_agent::sources::file::run(
        &file,
        &istio.sink(Provider::Istio, "file"),
        &SourceState::default(),
    )
    .unwrap();
    let istio_counts = (istio.learned.len(), istio.denials.len());
    istio.ship(address, "istio-node", Provider::Istio, &state);

    // Line 43 of the Hubble capture (DROPPED, drop_reason 133) is the Cilium denial; the
    // ztunnel policy rejections (lines 45, 48, 51) are denials with their ports; the two
    // dry-run lines (37, 40) one audit edge, port 0.
    let cilium_denial = (
        "namespace-name/Pod/pod-name-nginx-5869cc6967-trl5q".to_owned(),
        "reserved:remote-node".to_owned(),
        8182,
    );
    let dry_run = (
        "default/Pod/http-server-6cbcc86f5d-lhq82".to_owned(),
        "10.244.0.5".to_owned(),
        0,
    );
    let learned = cilium_counts.0 + istio_counts.0;
    let denied = cilium_counts.1 + istio_counts.1;
    let merged = read_until(&index, "every table at the leader", |m| {
        m.edges.len() == learned && m.denials.len() == denied && m.audits.len() == 1
    })
    .await;
    assert_eq!(cilium_counts.1, 1);
    assert!(istio_counts.1 >= 2, "{}", istio_counts.1);
    let denials = keys(&merged.denials);
    assert!(denials.contains(&cilium_denial), "{denials:?}");
    assert!(denials.iter().any(|d| d.2 == 18080), "{denials:?}");
    // The policy each data plane blamed travels with its denial: ztunnel names the DENY
    // policy that refused port 18080 (first seen before the same connection's unnamed
    // rejections); the Hubble capture's drop names none.
    let blamed = |port: u16| {
        merged
            .denials
            .iter()
            .find(|m| m.edge.port == port)
            .map(|m| m.edge.denied_by.as_deref().map(str::to_owned))
    };
    assert_eq!(
        blamed(18080),
        Some(Some("default/deny-http-server-protect".to_owned()))
    );
    assert_eq!(blamed(8182), Some(None));
    assert_eq!(keys(&merged.audits), [dry_run]);
    assert_eq!(merged.audits[0].count, 2);
    // Learning never sees a denial or a dry run. (The ztunnel capture also has allowed
    // connections over the edge that was later denied: that edge is learned from those.)
    let edges = keys(&merged.edges);
    assert!(!edges.contains(&cilium_denial));
    assert!(edges.iter().all(|e| e.2 != 0), "no port-0 edge is learned");
    // Every entry of every table arrived (the audit one included).
    assert!(leader_metrics.edges_received.get() as usize > learned + denied);

    state.shut_down();
    let _ = source.await;
    hubble.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
