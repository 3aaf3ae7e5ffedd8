//! Pre-built edges for the benches that start after decoding (`flow_table`, `index`).

use std::net::{IpAddr, Ipv4Addr};

use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, WorkloadKind, WorkloadRef, labels};

fn workload(namespace: &str, name: String) -> Endpoint {
    let id = EndpointId::Workload(WorkloadRef {
        namespace: namespace.into(),
        kind: WorkloadKind::Deployment,
        name: name.as_str().into(),
    });
    Endpoint::new(id).with_labels(labels([("app", name)]))
}

/// `n` distinct edges with realistic shapes: in-cluster and external peers, both
/// directions. Every call allocates anew.
pub fn edges(n: usize) -> Vec<Edge> {
    (0..n).map(edge).collect()
}

/// The `i`th edge of [`edges`], with its own allocations: every fourth has an external
/// peer (all distinct), the others one of about a thousand workload peers; subjects are
/// 32 namespaces × 997 names.
pub fn edge(i: usize) -> Edge {
    let subject = workload(&format!("ns-{}", i % 32), format!("app-{}", i % 997));
    let peer = if i.is_multiple_of(4) {
        let ip = Ipv4Addr::from(0x0a00_0000 + i as u32);
        Endpoint::new(EndpointId::External(IpAddr::V4(ip))).with_ip(Some(IpAddr::V4(ip)))
    } else {
        workload("shop", format!("peer-{}", i / 997))
    };
    Edge {
        subject,
        direction: if i.is_multiple_of(2) {
            Direction::Egress
        } else {
            Direction::Ingress
        },
        peer,
        protocol: Protocol::Tcp,
        port: 1_000 + (i % 50) as u16,
        peer_dns: None,
        denied_by: None,
    }
}

/// The edges of a flood of new peers, the worst case for memory (what `ne-load --churn`
/// sends): the `i`th is workload `i % 200` (8 namespaces) to the `i`th external address,
/// TCP 443. Every call allocates anew.
pub fn flood_edge(i: u32) -> Edge {
    let w = i % 200;
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
    Edge {
        subject: workload(&format!("ns-{}", w % 8), format!("app-{w}")),
        direction: Direction::Egress,
        peer: Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip)),
        protocol: Protocol::Tcp,
        port: 443,
        peer_dns: None,
        denied_by: None,
    }
}
