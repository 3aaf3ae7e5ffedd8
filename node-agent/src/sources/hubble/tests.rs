//! Address parsing, the request each mode sends, and the lost-events accounting. The
//! stream itself is tested against real gRPC servers in `tests/hubble/`.

use std::sync::Arc;

use clap::Parser;

use super::*;

fn relay(authority: &str, host: &str) -> HubbleTarget {
    HubbleTarget::Relay {
        authority: authority.into(),
        host: host.into(),
    }
}

#[test]
fn addresses() {
    assert_eq!(
        HubbleTarget::parse("unix:///var/run/cilium/hubble.sock").unwrap(),
        HubbleTarget::Unix("/var/run/cilium/hubble.sock".into())
    );
    assert_eq!(
        HubbleTarget::parse("unix:relative.sock").unwrap(),
        HubbleTarget::Unix("relative.sock".into())
    );
    assert_eq!(
        HubbleTarget::parse("hubble-relay.kube-system.svc:443").unwrap(),
        relay(
            "hubble-relay.kube-system.svc:443",
            "hubble-relay.kube-system.svc"
        )
    );
    assert_eq!(
        HubbleTarget::parse(" [::1]:4245 ").unwrap(),
        relay("[::1]:4245", "::1")
    );
    for bad in [
        "unix://",
        "hubble-relay",
        "https://relay:443",
        "relay:443/x",
        "relay:port",
        "",
    ] {
        assert!(HubbleTarget::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(
        HubbleTarget::parse("unix:///run/h.sock")
            .unwrap()
            .to_string(),
        "unix:///run/h.sock"
    );
}

#[test]
fn node_patterns_match_relay_names_old_and_new() {
    assert_eq!(
        node_patterns("Worker-1").unwrap(),
        ["worker-1", "*/worker-1"]
    );
    assert_eq!(
        node_patterns("ip-10-0-1-2.eu-west-1.compute.internal").unwrap(),
        [
            "ip-10-0-1-2.eu-west-1.compute.internal",
            "*/ip-10-0-1-2.eu-west-1.compute.internal"
        ]
    );
    assert_eq!(node_patterns("prod/worker-1").unwrap(), ["prod/worker-1"]);
    for bad in ["", "a b", "node_1", "a/b/c", "/node", "node*"] {
        assert!(node_patterns(bad).is_err(), "{bad:?} accepted");
    }
}

fn config(args: &[&str]) -> anyhow::Result<HubbleConfig> {
    let mut argv = vec!["ne-agent", "--source", "hubble"];
    argv.extend_from_slice(args);
    HubbleConfig::from_args(&Args::try_parse_from(argv)?)
}

#[test]
fn relay_requests_filter_on_this_node_and_the_learned_event_types() {
    let c = config(&[
        "--hubble-address",
        "relay:443",
        "--node-name",
        "worker-1",
        "--hubble-tls-ca",
        "/ca.pem",
        "--hubble-tls-server-name",
        "ui.hubble-relay.cilium.io",
    ])
    .unwrap();
    assert_eq!(c.tls.ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
    assert_eq!(
        c.tls.server_name.as_deref(),
        Some("ui.hubble-relay.cilium.io")
    );
    let r = c.request().unwrap();
    assert_eq!((r.number, r.follow), (0, true), "from now on, no history");
    assert!(r.blacklist.is_empty() && r.since.is_none());
    assert_eq!(r.whitelist.len(), 1, "one filter: its fields are ANDed");
    let f = &r.whitelist[0];
    assert_eq!(f.node_name, ["worker-1", "*/worker-1"]);
    let types: Vec<i32> = f.event_type.iter().map(|e| e.r#type).collect();
    assert_eq!(types, [1, 4, 5]);
    assert!(f.event_type.iter().all(|e| !e.match_sub_type));
    assert!(f.verdict.is_empty() && f.reply.is_empty() && f.traffic_direction.is_empty());
}

#[test]
fn the_node_socket_gets_no_node_filter() {
    // The default address is the node's own socket: it only has this node's flows.
    let c = config(&["--node-name", "worker-1"]).unwrap();
    assert_eq!(
        c.target,
        HubbleTarget::Unix("/var/run/cilium/hubble.sock".into())
    );
    let r = c.request().unwrap();
    assert!(r.whitelist[0].node_name.is_empty());
    assert_eq!(r.whitelist[0].event_type.len(), 3);
    // Relay without a node name reads every node (warned about at start).
    let c = config(&["--hubble-address", "relay:80"]).unwrap();
    assert!(c.request().unwrap().whitelist[0].node_name.is_empty());
}

#[test]
fn bad_configuration_fails_at_start() {
    assert!(config(&["--hubble-address", "relay"]).is_err());
    assert!(config(&["--hubble-address", "relay:80", "--node-name", "Not A Node"]).is_err());
    // On the socket the node name is not used, so it cannot be wrong.
    assert!(config(&["--node-name", "Not A Node"]).is_ok());
}

#[test]
fn lost_events_are_all_counted_and_warned_about_at_most_every_10_s() {
    let metrics = AgentMetrics::default();
    let mut log = LostLog::default();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let ring = LostEventSource::HubbleRingBuffer;
    let perf = LostEventSource::PerfEventRingBuffer;
    assert_eq!(log.record(&metrics, ring, 5, at(0)), Some(5));
    assert_eq!(log.record(&metrics, ring, 7, at(3)), None);
    assert_eq!(log.record(&metrics, perf, 2, at(9)), None);
    // The next warning reports everything since the last one.
    assert_eq!(log.record(&metrics, ring, 1, at(10)), Some(10));
    assert_eq!(log.record(&metrics, ring, 1, at(11)), None);
    let count = |cause| {
        metrics
            .lost_events
            .get_or_create(&LostLabel {
                source: "hubble",
                cause,
            })
            .get()
    };
    assert_eq!(count("hubble_ring_buffer"), 14);
    assert_eq!(count("perf_event_ring_buffer"), 2);
}

#[tokio::test(start_paused = true)]
async fn stops_while_waiting_for_a_server_that_is_not_there() {
    let dir = std::env::temp_dir().join(format!("ne-hubble-absent-{}", std::process::id()));
    let config = HubbleConfig {
        target: HubbleTarget::Unix(dir.join("hubble.sock")),
        tls: TlsFiles::default(),
        node_name: None,
        backoff: Backoff::new(Duration::from_secs(1), Duration::from_secs(8)),
    };
    let metrics = Arc::new(AgentMetrics::default());
    let table = Arc::new(ne_flow::table::FlowTable::new(100));
    let sink = FlowSink::new(
        table,
        metrics.clone(),
        ne_flow::edge::Provider::Cilium,
        "hubble",
    );
    let state = SourceState::default();
    let task = tokio::spawn(run(config, sink, state.clone()));
    // Paused time runs ahead whenever the runtime is idle: the failed dials and backoff
    // delays pass without waiting.
    while metrics.source_reconnects.get() < 5 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metrics.source_connected.get(), 0);
    assert!(
        !state
            .ready_flag()
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    state.shut_down();
    task.await.unwrap().unwrap();
}
