//! Owned flows for evaluator tests, viewed as [`FlowView`]s.

use std::net::IpAddr;

use super::{FlowView, PeerView};
use crate::resolve::NamedPort;
use ne_flow::flow::{Direction, Labels, Protocol, Reserved, labels};

/// The peer of a test flow.
#[derive(Clone, Debug)]
pub(crate) enum TestPeer {
    Pod {
        namespace: String,
        labels: Labels,
        namespace_labels: Labels,
    },
    External,
    Reserved(Reserved),
    /// Not resolved.
    Unknown,
}

/// An owned flow; `view()` borrows it as a [`FlowView`].
#[derive(Clone, Debug)]
pub(crate) struct TestFlow {
    pub direction: Direction,
    pub peer: TestPeer,
    pub ip: Option<IpAddr>,
    pub identity: Option<String>,
    pub protocol: Protocol,
    pub port: u16,
    pub named_ports: Vec<NamedPort>,
}

/// Ingress TCP 80 from a pod in `ns` with `pod_labels`; the namespace carries
/// `kubernetes.io/metadata.name`.
pub(crate) fn from_pod(ns: &str, pod_labels: &[(&str, &str)]) -> TestFlow {
    TestFlow {
        direction: Direction::Ingress,
        peer: TestPeer::Pod {
            namespace: ns.to_owned(),
            labels: labels(pod_labels.iter().copied()),
            namespace_labels: labels([("kubernetes.io/metadata.name", ns)]),
        },
        ip: None,
        identity: None,
        protocol: Protocol::Tcp,
        port: 80,
        named_ports: Vec::new(),
    }
}

/// Ingress TCP 80 from an external address.
pub(crate) fn from_ip(ip: &str) -> TestFlow {
    TestFlow {
        direction: Direction::Ingress,
        peer: TestPeer::External,
        ip: ip.parse().ok(),
        identity: None,
        protocol: Protocol::Tcp,
        port: 80,
        named_ports: Vec::new(),
    }
}

/// Ingress TCP 80 from a mesh identity.
pub(crate) fn from_principal(principal: Option<&str>) -> TestFlow {
    TestFlow {
        identity: principal.map(str::to_owned),
        ..from_ip("10.1.2.3")
    }
}

impl TestFlow {
    pub(crate) fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    pub(crate) fn proto(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    pub(crate) fn egress(mut self) -> Self {
        self.direction = Direction::Egress;
        self
    }

    pub(crate) fn ip(mut self, ip: &str) -> Self {
        self.ip = ip.parse().ok();
        self
    }

    pub(crate) fn reserved(mut self, r: Reserved) -> Self {
        self.peer = TestPeer::Reserved(r);
        self
    }

    /// Adds namespace labels besides `kubernetes.io/metadata.name`.
    pub(crate) fn ns_labels(mut self, extra: &[(&str, &str)]) -> Self {
        if let TestPeer::Pod {
            namespace,
            namespace_labels,
            ..
        } = &mut self.peer
        {
            let mut all: Vec<(&str, &str)> = extra.to_vec();
            all.push(("kubernetes.io/metadata.name", namespace.as_str()));
            *namespace_labels = labels(all);
        }
        self
    }

    pub(crate) fn named(mut self, name: &str, protocol: Protocol, port: u16) -> Self {
        self.named_ports.push(NamedPort {
            name: name.into(),
            protocol,
            port,
        });
        self
    }

    pub(crate) fn view(&self) -> FlowView<'_> {
        FlowView {
            direction: self.direction,
            peer: match &self.peer {
                TestPeer::Pod {
                    namespace,
                    labels,
                    namespace_labels,
                } => PeerView::Pod {
                    namespace,
                    labels,
                    namespace_labels,
                },
                TestPeer::External => PeerView::External,
                TestPeer::Reserved(r) => PeerView::Reserved(*r),
                TestPeer::Unknown => PeerView::Unknown,
            },
            peer_ip: self.ip,
            peer_identity: self.identity.as_deref(),
            protocol: self.protocol,
            port: self.port,
            named_ports: &self.named_ports,
        }
    }
}
