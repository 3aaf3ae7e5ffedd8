//! Edge derivation: which (subject, direction, peer, protocol, port) a flow teaches
//! (docs/architecture.md, "Flow model and learning rules").
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
    /// For a denial or an audit denial, the policy the data plane blamed, as it names it
    /// (`namespace/name`, or `name` for a cluster-wide policy), when it says; always
    /// `None` for a learned edge. Evidence, like `peer_dns`: not part of the key.
    pub denied_by: Option<crate::flow::Str>,
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

/// The scalars of a flow the learning rules look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Learnable {
    pub reply: Option<bool>,
    pub verdict: Verdict,
    pub protocol: Protocol,
    pub destination_port: u16,
    pub observation: ObservationPoint,
    /// The source carries a mesh identity.
    pub source_identity: bool,
}

impl Learnable {
    /// The learning rules (docs/architecture.md, "Flow model and learning rules"), in order:
    /// the direction the flow teaches, or why it teaches nothing. The one place these rules
    /// live.
    pub fn direction(self, provider: Provider) -> Result<Direction, EdgeSkip> {
        if self.reply == Some(true) {
            return Err(EdgeSkip::Reply);
        }
        if self.verdict != Verdict::Forwarded {
            return Err(EdgeSkip::NotForwarded);
        }
        if !self.protocol.is_policy_protocol() {
            return Err(EdgeSkip::Protocol);
        }
        if self.destination_port == 0 {
            return Err(EdgeSkip::NoPort);
        }
        let direction = match self.observation {
            ObservationPoint::Egress => Direction::Egress,
            ObservationPoint::Ingress => Direction::Ingress,
            ObservationPoint::Unknown => return Err(EdgeSkip::UnknownDirection),
        };
        if !provider.learns(direction) {
            return Err(EdgeSkip::DirectionNotLearned);
        }
        if provider == Provider::Istio && self.protocol != Protocol::Tcp {
            return Err(EdgeSkip::Protocol);
        }
        if provider == Provider::Istio && !self.source_identity {
            return Err(EdgeSkip::NoIdentity);
        }
        Ok(direction)
    }
}

/// Derives the edge a flow teaches under `provider`'s rules.
pub fn derive(flow: &FlowRecord, provider: Provider) -> Result<Edge, EdgeSkip> {
    let direction = learnable(flow).direction(provider)?;
    Ok(edge_of(flow, direction))
}

/// Derives the edge a policy denial concerns: the same subject, peer and server port a
/// forwarded flow would teach, kept apart from learning as a protect-mode observation
/// (Hubble `POLICY_DENIED`, Goldmane `Deny`, ztunnel policy rejections). Flows that are
/// not policy denials return [`EdgeSkip::NotForwarded`]. Provider direction and identity
/// rules do not apply: a denial is recorded wherever the data plane saw it.
pub fn derive_denial(flow: &FlowRecord) -> Result<Edge, EdgeSkip> {
    if flow.verdict != Verdict::PolicyDenied {
        return Err(EdgeSkip::NotForwarded);
    }
    observed(flow, flow.destination_port)
}

/// Derives the edge an audit / dry-run denial concerns ([`Verdict::AuditDenied`]: Hubble
/// `AUDIT`, ztunnel `dry-run:` deny lines), kept apart from learning as a monitor-mode
/// observation. As [`derive_denial`], except that port 0 is allowed: ztunnel's dry-run
/// lines name no port, and the edge then has port 0. Other flows return
/// [`EdgeSkip::NotForwarded`].
pub fn derive_audit(flow: &FlowRecord) -> Result<Edge, EdgeSkip> {
    if flow.verdict != Verdict::AuditDenied {
        return Err(EdgeSkip::NotForwarded);
    }
    // Any non-zero port passes the port rule; the edge keeps the flow's own.
    observed(flow, flow.destination_port.max(1))
}

/// The rules for forwarded flows, without the provider's direction and identity rules,
/// with `port` in place of the destination port for the checks only.
fn observed(flow: &FlowRecord, port: u16) -> Result<Edge, EdgeSkip> {
    let direction = Learnable {
        verdict: Verdict::Forwarded,
        source_identity: true,
        destination_port: port,
        ..learnable(flow)
    }
    .direction(Provider::Cilium)?;
    Ok(Edge {
        denied_by: flow.policy.clone(),
        ..edge_of(flow, direction)
    })
}

fn learnable(flow: &FlowRecord) -> Learnable {
    Learnable {
        reply: flow.reply,
        verdict: flow.verdict,
        protocol: flow.protocol,
        destination_port: flow.destination_port,
        observation: flow.observation,
        source_identity: flow.source.identity.is_some(),
    }
}

fn edge_of(flow: &FlowRecord, direction: Direction) -> Edge {
    let (subject, peer, peer_dns) = match direction {
        Direction::Egress => (
            &flow.source,
            &flow.destination,
            flow.destination_dns.clone(),
        ),
        Direction::Ingress => (&flow.destination, &flow.source, None),
    };
    Edge {
        subject: subject.clone(),
        direction,
        peer: peer.clone(),
        protocol: flow.protocol,
        port: flow.destination_port,
        peer_dns,
        denied_by: None,
    }
}

#[cfg(test)]
mod denial_tests {
    use super::*;
    use crate::flow::{EndpointId, Reserved};

    fn flow(verdict: Verdict, observation: ObservationPoint) -> FlowRecord {
        FlowRecord {
            time: None,
            node: None,
            source: Endpoint::new(EndpointId::Pod {
                namespace: "a".into(),
                name: "client".into(),
            }),
            destination: Endpoint::new(EndpointId::Pod {
                namespace: "b".into(),
                name: "server".into(),
            }),
            protocol: Protocol::Tcp,
            source_port: 40000,
            destination_port: 5432,
            observation,
            verdict,
            reply: None,
            destination_dns: None,
            policy: Some("b/deny".into()),
            connections: 1,
        }
    }

    #[test]
    fn denials_make_observation_edges_and_nothing_else_does() {
        let denied = flow(Verdict::PolicyDenied, ObservationPoint::Ingress);
        let e = derive_denial(&denied).unwrap();
        assert_eq!((e.direction, e.port), (Direction::Ingress, 5432));
        assert_eq!(e.subject.id, denied.destination.id);
        assert_eq!(e.denied_by.as_deref(), Some("b/deny"), "the blamed policy");
        let mut forwarded = denied.clone();
        forwarded.verdict = Verdict::Forwarded;
        assert_eq!(
            derive(&forwarded, Provider::Cilium).unwrap().denied_by,
            None,
            "a learned edge blames no policy, whatever the record says"
        );
        assert_eq!(
            derive(&denied, Provider::Cilium),
            Err(EdgeSkip::NotForwarded),
            "never learned"
        );
        // Istio: no identity needed, and the rules for forwarded flows are unchanged.
        assert!(derive_denial(&denied).is_ok());
        for verdict in [
            Verdict::Forwarded,
            Verdict::Dropped,
            Verdict::Error,
            Verdict::AuditDenied,
        ] {
            assert_eq!(
                derive_denial(&flow(verdict, ObservationPoint::Ingress)),
                Err(EdgeSkip::NotForwarded)
            );
        }
        assert_eq!(
            derive_denial(&flow(Verdict::PolicyDenied, ObservationPoint::Unknown)),
            Err(EdgeSkip::UnknownDirection)
        );
        let mut icmp = denied.clone();
        icmp.protocol = Protocol::Icmp;
        assert_eq!(derive_denial(&icmp), Err(EdgeSkip::Protocol));
        let mut egress = flow(Verdict::PolicyDenied, ObservationPoint::Egress);
        egress.destination = Endpoint::new(EndpointId::Reserved(Reserved::World));
        assert_eq!(derive_denial(&egress).unwrap().subject.id, egress.source.id);
        let mut no_port = denied.clone();
        no_port.destination_port = 0;
        assert_eq!(derive_denial(&no_port), Err(EdgeSkip::NoPort));
    }

    #[test]
    fn audit_denials_make_observation_edges_even_without_a_port() {
        let mut dry_run = flow(Verdict::AuditDenied, ObservationPoint::Ingress);
        dry_run.destination_port = 0;
        let e = derive_audit(&dry_run).unwrap();
        assert_eq!((e.direction, e.port), (Direction::Ingress, 0));
        assert_eq!(
            (e.subject.id.clone(), e.peer.id.clone()),
            (dry_run.destination.id.clone(), dry_run.source.id.clone())
        );
        assert_eq!(
            derive(&dry_run, Provider::Istio),
            Err(EdgeSkip::NotForwarded)
        );
        assert_eq!(derive_denial(&dry_run), Err(EdgeSkip::NotForwarded));
        let audit = flow(Verdict::AuditDenied, ObservationPoint::Egress);
        assert_eq!(derive_audit(&audit).unwrap().port, 5432);
        for verdict in [
            Verdict::Forwarded,
            Verdict::PolicyDenied,
            Verdict::Dropped,
            Verdict::Error,
        ] {
            assert_eq!(
                derive_audit(&flow(verdict, ObservationPoint::Ingress)),
                Err(EdgeSkip::NotForwarded)
            );
        }
        let mut icmp = dry_run.clone();
        icmp.protocol = Protocol::Icmp;
        assert_eq!(derive_audit(&icmp), Err(EdgeSkip::Protocol));
        assert!(Verdict::AuditDenied.is_denial() && Verdict::PolicyDenied.is_denial());
        assert!(!Verdict::Dropped.is_denial() && !Verdict::Forwarded.is_denial());
    }
}
