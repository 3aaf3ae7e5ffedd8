//! Edge derivation: which (subject, direction, peer, protocol, port) a flow teaches
//! (ARCHITECTURE §3).
//!
//! Every record is one observation at one point, so it yields at most one edge: an
//! egress edge on the source when the reporter saw the flow leave the source, an ingress
//! edge on the destination when it saw it arrive. Replies, denied flows and protocols a
//! policy cannot express never make edges; the reason is returned so that callers count
//! it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::flow::{Direction, Endpoint, FlowRecord, ObservationPoint, Protocol, Verdict};

/// The data plane that produced the flows. It decides which directions are learnable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Provider {
    Cilium,
    Calico,
    Istio,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Cilium => "cilium",
            Provider::Calico => "calico",
            Provider::Istio => "istio",
        }
    }

    /// Istio ambient enforces only at the receiving ztunnel, so only ingress is learned.
    pub fn learns(self, direction: Direction) -> bool {
        match self {
            Provider::Istio => direction == Direction::Ingress,
            Provider::Cilium | Provider::Calico => true,
        }
    }
}

/// A learned fact: `subject` talks to `peer` in `direction` on `protocol`/`port`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edge {
    pub subject: Endpoint,
    pub direction: Direction,
    pub peer: Endpoint,
    pub protocol: Protocol,
    /// Server-side port (never the client's ephemeral port).
    pub port: u16,
    /// DNS name of the peer, when the data plane resolved one (evidence only).
    pub peer_dns: Option<crate::flow::Str>,
}

/// Why a flow made no edge. Bounded, so it can label a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EdgeSkip {
    /// Reply traffic (or traffic whose reply state says it is not a request).
    Reply,
    /// Dropped, denied or failed: not allowed traffic.
    NotForwarded,
    /// ICMP and other protocols a policy cannot express.
    Protocol,
    /// TCP/UDP/SCTP without a destination port.
    NoPort,
    /// The record does not say where it was observed.
    UnknownDirection,
    /// The provider cannot enforce this direction (Istio egress).
    DirectionNotLearned,
    /// Istio: the peer has no mesh identity (plaintext from outside the mesh).
    NoIdentity,
}

impl EdgeSkip {
    pub const ALL: [EdgeSkip; 7] = [
        EdgeSkip::Reply,
        EdgeSkip::NotForwarded,
        EdgeSkip::Protocol,
        EdgeSkip::NoPort,
        EdgeSkip::UnknownDirection,
        EdgeSkip::DirectionNotLearned,
        EdgeSkip::NoIdentity,
    ];

    /// A stable snake_case label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeSkip::Reply => "reply",
            EdgeSkip::NotForwarded => "not_forwarded",
            EdgeSkip::Protocol => "protocol",
            EdgeSkip::NoPort => "no_port",
            EdgeSkip::UnknownDirection => "unknown_direction",
            EdgeSkip::DirectionNotLearned => "direction_not_learned",
            EdgeSkip::NoIdentity => "no_identity",
        }
    }
}

impl fmt::Display for EdgeSkip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The direction (and so the subject side) a flow is learnable in, or why it is not.
/// Shared by edge derivation and by violation checks, which look at the same side.
pub fn direction_of(flow: &FlowRecord) -> Result<Direction, EdgeSkip> {
    match flow.observation {
        ObservationPoint::Egress => Ok(Direction::Egress),
        ObservationPoint::Ingress => Ok(Direction::Ingress),
        ObservationPoint::Unknown => Err(EdgeSkip::UnknownDirection),
    }
}

/// Derives the edge a flow teaches under `provider`'s rules.
pub fn derive(flow: &FlowRecord, provider: Provider) -> Result<Edge, EdgeSkip> {
    if flow.reply == Some(true) {
        return Err(EdgeSkip::Reply);
    }
    if flow.verdict != Verdict::Forwarded {
        return Err(EdgeSkip::NotForwarded);
    }
    if !flow.protocol.is_policy_protocol() {
        return Err(EdgeSkip::Protocol);
    }
    if flow.destination_port == 0 {
        return Err(EdgeSkip::NoPort);
    }
    let direction = direction_of(flow)?;
    if !provider.learns(direction) {
        return Err(EdgeSkip::DirectionNotLearned);
    }
    if provider == Provider::Istio
        && (flow.protocol != Protocol::Tcp || flow.source.identity.is_none())
    {
        return Err(if flow.protocol != Protocol::Tcp {
            EdgeSkip::Protocol
        } else {
            EdgeSkip::NoIdentity
        });
    }
    let (subject, peer, peer_dns) = match direction {
        Direction::Egress => (
            &flow.source,
            &flow.destination,
            flow.destination_dns.clone(),
        ),
        Direction::Ingress => (&flow.destination, &flow.source, None),
    };
    Ok(Edge {
        subject: subject.clone(),
        direction,
        peer: peer.clone(),
        protocol: flow.protocol,
        port: flow.destination_port,
        peer_dns,
    })
}
