//! Policy semantics: does a promoted policy allow an observed flow? (docs/architecture.md,
//! "Violations": real semantics, not a structural comparison of rules.)
//!
//! Monitor mode turns every observed flow a `WorkloadNetworkPolicy` does not allow into a
//! violation, so "allowed" must mean what the data plane would do: label selectors
//! evaluated against live pod and namespace labels, port ranges, named ports, `ipBlock`
//! with `except` ([`netpol`]), and Istio principal and port matching ([`istio`]). A rule a
//! user widens by hand is therefore honoured.
//!
//! The flow is described from the policy subject's side in a [`FlowView`]. Attribution is
//! by `targetRef` + `direction` (never by comparing selectors), so the evaluator assumes
//! the subject is selected by the policy and does not evaluate `podSelector`/`selector`.
//!
//! Invalid parts of a spec (unknown selector operator, bad CIDR, bad port string, ...)
//! match nothing: the evaluation fails closed, producing a violation rather than a silent
//! allow. [`Decision::Denied`] says how near the nearest rule came ([`DenyReason`]) and whether
//! such a part was skipped, and [`validate`] lists
//! every invalid part with its path, so the leader can put it in a condition.

mod cidr;
mod compiled;
pub mod istio;
pub mod netpol;
pub mod peers;
pub mod selector;

use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use ne_crds::{
    Backend, IstioAuthorizationPolicySpec, PolicyDirection, WorkloadNetworkPolicyProposalSpec,
    WorkloadNetworkPolicySpec,
};
use serde::Serialize;

pub use cidr::Cidr;
pub use compiled::Compiled;

use crate::resolve::{NamedPort, Resolution, Resolver, Seen};
use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, Protocol, Reserved, Str};

/// The other end of a flow, as far as policy matching needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerView<'a> {
    /// A pod in the cluster.
    Pod {
        namespace: &'a str,
        /// The pod's labels.
        labels: &'a [(Str, Str)],
        /// Its namespace's labels (including `kubernetes.io/metadata.name`).
        namespace_labels: &'a [(Str, Str)],
    },
    /// An address outside the cluster (the address is [`FlowView::peer_ip`]).
    External,
    /// A reserved identity (host, kube-apiserver, ...): no selector matches it.
    Reserved(Reserved),
    /// Not resolved: only unconstrained peers and `ipBlock`s (by address) match it.
    Unknown,
}

impl<'a> PeerView<'a> {
    /// The view of a resolved endpoint.
    pub fn from_resolution(resolution: &'a Resolution) -> Self {
        match resolution {
            Resolution::Pod(p) => PeerView::Pod {
                namespace: &p.namespace,
                labels: &p.labels,
                namespace_labels: &p.namespace_labels,
            },
            Resolution::External(_) => PeerView::External,
            Resolution::Reserved(r) => PeerView::Reserved(*r),
            Resolution::Unresolved(_) => PeerView::Unknown,
        }
    }
}

/// One flow seen from the policy subject's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowView<'a> {
    /// Ingress: the peer is the client; egress: the peer is the server.
    pub direction: Direction,
    pub peer: PeerView<'a>,
    /// The peer's address, if known; `ipBlock`s match it whatever the peer is.
    pub peer_ip: Option<IpAddr>,
    /// The peer's mesh principal without `spiffe://` (Istio).
    pub peer_identity: Option<&'a str>,
    pub protocol: Protocol,
    /// The server-side port.
    pub port: u16,
    /// Named container ports of the pod that owns the destination port: the subject's for
    /// ingress, the peer's for egress (empty when unknown).
    pub named_ports: &'a [NamedPort],
}

/// The outcome of evaluating one flow against one policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Decision {
    /// The policy does not restrict this flow (other direction, a `policyTypes` without
    /// it, or traffic Istio's ztunnel does not authorize: egress, non-TCP).
    NotRestricted,
    /// Ingress from the subject's own node (kubelet probes): a NetworkPolicy always allows
    /// it, and Cilium and Calico do by default.
    NodeLocal,
    /// Rule number `rule` (in the direction's rule list) allows the flow.
    Allowed { rule: usize },
    /// No rule allows the flow, for `reason`. `invalid_skipped`: an invalid part of the
    /// spec was met and treated as matching nothing, so the denial may come from a typo.
    Denied {
        reason: DenyReason,
        invalid_skipped: bool,
    },
}

/// Why no rule allows a flow: how near the nearest rule came.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum DenyReason {
    /// No rule of the direction admits the peer.
    NoRuleForPeer,
    /// A rule admits the peer, but none of those rules admits the port.
    PortNotAllowed,
    /// A rule admits the peer on the port, but over another protocol.
    ProtocolNotAllowed,
}

impl DenyReason {
    /// The reason's name, as violation records and events carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::NoRuleForPeer => "NoRuleForPeer",
            DenyReason::PortNotAllowed => "PortNotAllowed",
            DenyReason::ProtocolNotAllowed => "ProtocolNotAllowed",
        }
    }
}

impl Decision {
    /// True unless the flow is denied.
    pub fn is_allowed(self) -> bool {
        !matches!(self, Decision::Denied { .. })
    }
}

/// An invalid part of a policy spec. Such a part matches nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("unknown selector operator {0:?}")]
    UnknownOperator(String),
    #[error("selector operator {0} needs values")]
    ValuesRequired(String),
    #[error("selector operator {0} takes no values")]
    ValuesForbidden(String),
    #[error("invalid cidr {0:?}")]
    InvalidCidr(String),
    #[error("unknown protocol {0:?} (TCP, UDP or SCTP)")]
    UnknownProtocol(String),
    #[error("port {0} is outside 1-65535")]
    PortOutOfRange(i32),
    #[error("endPort {end} is below port {port} or above 65535")]
    BadEndPort { port: i32, end: i32 },
    #[error("endPort needs a numeric port")]
    EndPortWithoutNumericPort,
    #[error("a peer must set ipBlock or selectors, not both")]
    IpBlockWithSelector,
    #[error("a peer must set ipBlock, namespaceSelector or podSelector")]
    EmptyPeer,
    #[error("unknown policy type {0:?}")]
    UnknownPolicyType(String),
    #[error("invalid port {0:?} (expected \"N\" or \"LO-HI\")")]
    InvalidPortString(String),
    #[error("principal {0:?} starts with spiffe:// and never matches")]
    SpiffePrefix(String),
}

/// An invalid part of a spec and where it is.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct SpecIssue {
    /// Path in the backend payload, e.g. `ingress[0].from[1].ipBlock.cidr`.
    pub path: String,
    pub problem: Problem,
}

/// Why a policy could not be evaluated at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("backend {0:?} has no payload")]
    MissingPayload(Backend),
    #[error("the namespace of the flow's subject is unknown")]
    NoSubjectNamespace,
}

/// The parts of a wnp or wnpp spec evaluation needs, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyRef<'a> {
    pub backend: Backend,
    pub kubernetes: Option<&'a NetworkPolicySpec>,
    pub istio: Option<&'a IstioAuthorizationPolicySpec>,
    pub direction: PolicyDirection,
}

impl<'a> From<&'a WorkloadNetworkPolicySpec> for PolicyRef<'a> {
    fn from(s: &'a WorkloadNetworkPolicySpec) -> Self {
        PolicyRef {
            backend: s.backend,
            kubernetes: s.kubernetes.as_ref(),
            istio: s.istio.as_ref(),
            direction: s.direction,
        }
    }
}

impl<'a> From<&'a WorkloadNetworkPolicyProposalSpec> for PolicyRef<'a> {
    fn from(s: &'a WorkloadNetworkPolicyProposalSpec) -> Self {
        PolicyRef {
            backend: s.backend,
            kubernetes: s.kubernetes.as_ref(),
            istio: s.istio.as_ref(),
            direction: s.direction,
        }
    }
}

fn same_direction(a: PolicyDirection, b: Direction) -> bool {
    matches!(
        (a, b),
        (PolicyDirection::Ingress, Direction::Ingress)
            | (PolicyDirection::Egress, Direction::Egress)
    )
}

/// Evaluates `flow` against a policy living in `namespace` (the subject's namespace).
/// A flow in the other direction than `spec.direction` is not restricted by it.
pub fn evaluate(
    policy: PolicyRef<'_>,
    namespace: &str,
    flow: &FlowView<'_>,
) -> Result<Decision, EvalError> {
    evaluate_candidates(policy, namespace, flow, |_| None)
}

/// [`evaluate`] over the rules `candidates` names for the policy's backend (ascending; see
/// [`Compiled`]), or over every rule when it names none.
fn evaluate_candidates(
    policy: PolicyRef<'_>,
    namespace: &str,
    flow: &FlowView<'_>,
    candidates: impl FnOnce(Backend) -> Option<Vec<u32>>,
) -> Result<Decision, EvalError> {
    if !same_direction(policy.direction, flow.direction) {
        return Ok(Decision::NotRestricted);
    }
    match policy.backend {
        Backend::Kubernetes => {
            let spec = policy
                .kubernetes
                .ok_or(EvalError::MissingPayload(Backend::Kubernetes))?;
            let rules = candidates(Backend::Kubernetes);
            Ok(netpol::evaluate_rules(
                spec,
                namespace,
                flow,
                rules.as_deref(),
            ))
        }
        Backend::Istio => {
            let spec = policy
                .istio
                .ok_or(EvalError::MissingPayload(Backend::Istio))?;
            let rules = candidates(Backend::Istio);
            Ok(istio::evaluate_rules(spec, flow, rules.as_deref()))
        }
    }
}

/// Every invalid part of the backend payload (empty when valid or when it is missing).
pub fn validate(policy: PolicyRef<'_>) -> Vec<SpecIssue> {
    match policy.backend {
        Backend::Kubernetes => policy.kubernetes.map(netpol::validate).unwrap_or_default(),
        Backend::Istio => policy.istio.map(istio::validate).unwrap_or_default(),
    }
}

/// Checks one learned or observed edge (a violation candidate) against a policy: resolves
/// both ends with `resolver` as they were while `seen`, builds the [`FlowView`] and
/// evaluates it. The policy's namespace is `policy_namespace`.
pub fn check_edge(
    policy: PolicyRef<'_>,
    policy_namespace: &str,
    edge: &Edge,
    seen: Seen,
    resolver: &dyn Resolver,
) -> Result<Decision, EvalError> {
    let subject = resolver.resolve_shared(&edge.subject, seen);
    let peer = resolver.resolve_shared(&edge.peer, seen);
    evaluate(policy, policy_namespace, &flow_view(edge, &subject, &peer))
}

/// The [`FlowView`] of an edge whose subject and peer are already resolved.
pub fn flow_view<'a>(
    edge: &'a Edge,
    subject: &'a Resolution,
    peer: &'a Resolution,
) -> FlowView<'a> {
    let named_ports = match edge.direction {
        Direction::Ingress => pod_ports(subject),
        Direction::Egress => pod_ports(peer),
    };
    let peer_ip = match peer {
        Resolution::External(ip) => Some(*ip),
        _ => edge.peer.ip,
    };
    FlowView {
        direction: edge.direction,
        peer: PeerView::from_resolution(peer),
        peer_ip,
        peer_identity: edge.peer.identity.as_deref(),
        protocol: edge.protocol,
        port: edge.port,
        named_ports,
    }
}

fn pod_ports(r: &Resolution) -> &[NamedPort] {
    match r {
        Resolution::Pod(p) => &p.named_ports,
        _ => &[],
    }
}

/// Records whether an invalid part was met while matching, and how near the rules came.
#[derive(Debug, Default)]
struct Scan {
    invalid: bool,
    /// A rule admitted the peer (its ports did not admit the flow).
    peer_admitted: bool,
    /// A rule admitted the peer and the port, over another protocol.
    other_protocol: bool,
}

impl Scan {
    /// The value of `r`, or `false` (and a note) when it is invalid.
    fn ok(&mut self, r: Result<bool, Problem>) -> bool {
        r.unwrap_or_else(|_| {
            self.invalid = true;
            false
        })
    }

    fn denied(&self) -> Decision {
        let reason = if self.other_protocol {
            DenyReason::ProtocolNotAllowed
        } else if self.peer_admitted {
            DenyReason::PortNotAllowed
        } else {
            DenyReason::NoRuleForPeer
        };
        Decision::Denied {
            reason,
            invalid_skipped: self.invalid,
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support;
