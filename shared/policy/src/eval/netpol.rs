//! `networking.k8s.io/v1` NetworkPolicy semantics for one direction of one subject.
//!
//! - The direction is restricted when `policyTypes` names it; without `policyTypes`,
//!   Ingress always is and Egress is when egress rules exist (the API server's default).
//! - A restricted direction with no rules denies everything; a flow is allowed when any
//!   rule matches both its peer and its port.
//! - A rule without `from`/`to` (or with an empty list) matches every peer; without
//!   `ports` every port and protocol.
//! - Peers: `podSelector` alone selects pods in the policy's namespace,
//!   `namespaceSelector` alone every pod in matching namespaces, both together the AND;
//!   `{}` matches everything. Selectors never match non-pod peers.
//! - `ipBlock` (with `except`) matches the flow's peer address whatever the peer is. The
//!   Kubernetes API leaves pod addresses in an ipBlock implementation-defined (Cilium does
//!   not match pods by CIDR); matching by address errs on the side of "allowed".
//! - Ports: protocol defaults to TCP; `port` with `endPort` is a range; a named port is
//!   looked up in [`FlowView::named_ports`] by name and protocol, and matches when it
//!   resolves to the flow's port (unresolvable: no match).

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::cidr::Cidr;
use super::{Decision, FlowView, PeerView, Problem, Scan, SpecIssue, selector};
use ne_flow::flow::{Direction, Protocol, Reserved};

/// Evaluates `flow` against `spec`, a policy in `namespace` that selects the subject.
pub fn evaluate(spec: &NetworkPolicySpec, namespace: &str, flow: &FlowView<'_>) -> Decision {
    evaluate_rules(spec, namespace, flow, None)
}

/// [`evaluate`] over the rules numbered in `candidates` (ascending) only, or over every
/// rule. A rule left out must be one that cannot match the flow without meeting an invalid
/// part (see [`super::compiled`]), so the decision is the same.
pub(super) fn evaluate_rules(
    spec: &NetworkPolicySpec,
    namespace: &str,
    flow: &FlowView<'_>,
    candidates: Option<&[u32]>,
) -> Decision {
    if !restricts(spec, flow.direction) {
        return Decision::NotRestricted;
    }
    if flow.direction == Direction::Ingress && flow.peer == PeerView::Reserved(Reserved::Host) {
        return Decision::NodeLocal;
    }
    let mut scan = Scan::default();
    let mut matches = |peers: Option<&[NetworkPolicyPeer]>, ports: Option<&[NetworkPolicyPort]>| {
        if !peers_match(peers, namespace, flow, &mut scan) {
            return false;
        }
        if ports_match(ports, flow, &mut scan) {
            return true;
        }
        scan.peer_admitted = true;
        scan.other_protocol |= other_protocol(ports, flow);
        false
    };
    let hit = match flow.direction {
        Direction::Ingress => {
            let rules = spec.ingress.as_deref().unwrap_or_default();
            first(rules.len(), candidates, |i| {
                matches(rules[i].from.as_deref(), rules[i].ports.as_deref())
            })
        }
        Direction::Egress => {
            let rules = spec.egress.as_deref().unwrap_or_default();
            first(rules.len(), candidates, |i| {
                matches(rules[i].to.as_deref(), rules[i].ports.as_deref())
            })
        }
    };
    match hit {
        Some(rule) => Decision::Allowed { rule },
        None => scan.denied(),
    }
}

/// The first rule number of `candidates` (or of `0..len`) that `matches`, in order.
pub(super) fn first(
    len: usize,
    candidates: Option<&[u32]>,
    mut matches: impl FnMut(usize) -> bool,
) -> Option<usize> {
    match candidates {
        None => (0..len).find(|&i| matches(i)),
        Some(c) => c.iter().map(|&i| i as usize).find(|&i| matches(i)),
    }
}

/// Whether the policy restricts `direction` at all.
pub fn restricts(spec: &NetworkPolicySpec, direction: Direction) -> bool {
    match spec.policy_types.as_deref() {
        Some(types) if !types.is_empty() => types.iter().any(|t| t == direction.as_str()),
        _ => match direction {
            Direction::Ingress => true,
            Direction::Egress => spec.egress.as_ref().is_some_and(|e| !e.is_empty()),
        },
    }
}

fn peers_match(
    peers: Option<&[NetworkPolicyPeer]>,
    namespace: &str,
    flow: &FlowView<'_>,
    scan: &mut Scan,
) -> bool {
    match peers {
        None | Some([]) => true,
        Some(peers) => peers.iter().any(|p| {
            let r = peer_matches(p, namespace, flow);
            scan.ok(r)
        }),
    }
}

fn peer_matches(
    peer: &NetworkPolicyPeer,
    namespace: &str,
    flow: &FlowView<'_>,
) -> Result<bool, Problem> {
    match (&peer.ip_block, &peer.namespace_selector, &peer.pod_selector) {
        (Some(block), None, None) => ip_block_matches(block, flow),
        (Some(_), _, _) => Err(Problem::IpBlockWithSelector),
        (None, None, None) => Err(Problem::EmptyPeer),
        (None, ns_sel, pod_sel) => {
            // Validate both selectors first, so an invalid one is reported whatever the peer.
            ns_sel
                .iter()
                .chain(pod_sel)
                .try_for_each(selector::validate)?;
            let PeerView::Pod {
                namespace: peer_ns,
                labels,
                namespace_labels,
            } = flow.peer
            else {
                return Ok(false);
            };
            let ns_ok = match ns_sel {
                Some(s) => selector::matches(s, namespace_labels)?,
                None => peer_ns == namespace,
            };
            Ok(ns_ok
                && pod_sel
                    .as_ref()
                    .map_or(Ok(true), |s| selector::matches(s, labels))?)
        }
    }
}

fn ip_block_matches(block: &IPBlock, flow: &FlowView<'_>) -> Result<bool, Problem> {
    let cidr = Cidr::parse(&block.cidr)?;
    let excepts = block
        .except
        .iter()
        .flatten()
        .map(|e| Cidr::parse(e))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(flow
        .peer_ip
        .is_some_and(|ip| cidr.contains(ip) && !excepts.iter().any(|e| e.contains(ip))))
}

fn ports_match(ports: Option<&[NetworkPolicyPort]>, flow: &FlowView<'_>, scan: &mut Scan) -> bool {
    match ports {
        None | Some([]) => true,
        Some(ports) => ports.iter().any(|p| {
            let r = port_matches(p, flow);
            scan.ok(r)
        }),
    }
}

/// Whether a port of `ports` would admit the flow over another protocol.
fn other_protocol(ports: Option<&[NetworkPolicyPort]>, flow: &FlowView<'_>) -> bool {
    ports.into_iter().flatten().any(|p| {
        protocol(p).is_ok_and(|proto| {
            proto != flow.protocol && port_spec(p).is_ok_and(|spec| spec_admits(&spec, proto, flow))
        })
    })
}

/// The protocol of a policy port: `None` is TCP; names are upper case as the API requires.
fn protocol(p: &NetworkPolicyPort) -> Result<Protocol, Problem> {
    match p.protocol.as_deref() {
        None | Some("TCP") => Ok(Protocol::Tcp),
        Some("UDP") => Ok(Protocol::Udp),
        Some("SCTP") => Ok(Protocol::Sctp),
        Some(other) => Err(Problem::UnknownProtocol(other.to_owned())),
    }
}

/// What a policy port's `port`/`endPort` select.
enum PortSpec<'a> {
    Any,
    Range(u16, u16),
    Named(&'a str),
}

fn port_spec(p: &NetworkPolicyPort) -> Result<PortSpec<'_>, Problem> {
    let to_port = |n: i32| u16::try_from(n).ok().filter(|&n| n > 0);
    match (&p.port, p.end_port) {
        (None, None) => Ok(PortSpec::Any),
        (Some(IntOrString::Int(n)), end) => {
            let lo = to_port(*n).ok_or(Problem::PortOutOfRange(*n))?;
            let hi = match end {
                None => lo,
                Some(e) => to_port(e)
                    .filter(|&e| e >= lo)
                    .ok_or(Problem::BadEndPort { port: *n, end: e })?,
            };
            Ok(PortSpec::Range(lo, hi))
        }
        (Some(IntOrString::String(name)), None) => Ok(PortSpec::Named(name)),
        (_, Some(_)) => Err(Problem::EndPortWithoutNumericPort),
    }
}

fn port_matches(p: &NetworkPolicyPort, flow: &FlowView<'_>) -> Result<bool, Problem> {
    let proto = protocol(p)?;
    let spec = port_spec(p)?;
    Ok(proto == flow.protocol && spec_admits(&spec, proto, flow))
}

/// Whether `spec` over `proto` admits the flow's port.
fn spec_admits(spec: &PortSpec<'_>, proto: Protocol, flow: &FlowView<'_>) -> bool {
    match *spec {
        PortSpec::Any => true,
        PortSpec::Range(lo, hi) => (lo..=hi).contains(&flow.port),
        PortSpec::Named(name) => flow
            .named_ports
            .iter()
            .any(|np| &*np.name == name && np.protocol == proto && np.port == flow.port),
    }
}

/// Every invalid part of `spec`, with its path.
pub fn validate(spec: &NetworkPolicySpec) -> Vec<SpecIssue> {
    let mut issues = Vec::new();
    let mut push = |path: String, r: Result<(), Problem>| {
        if let Err(problem) = r {
            issues.push(SpecIssue { path, problem });
        }
    };
    if let Some(s) = &spec.pod_selector {
        push("podSelector".into(), selector::validate(s));
    }
    for (i, t) in spec.policy_types.iter().flatten().enumerate() {
        let ok = t == "Ingress" || t == "Egress";
        push(
            format!("policyTypes[{i}]"),
            if ok {
                Ok(())
            } else {
                Err(Problem::UnknownPolicyType(t.clone()))
            },
        );
    }
    let ingress = spec
        .ingress
        .iter()
        .flatten()
        .map(|r| ("ingress", "from", r.from.as_deref(), r.ports.as_deref()));
    let egress = spec
        .egress
        .iter()
        .flatten()
        .map(|r| ("egress", "to", r.to.as_deref(), r.ports.as_deref()));
    let mut index = (0usize, 0usize);
    for (list, peers_field, peers, ports) in ingress.chain(egress) {
        let i = if list == "ingress" {
            &mut index.0
        } else {
            &mut index.1
        };
        let rule = format!("{list}[{i}]");
        *i += 1;
        for (j, peer) in peers.unwrap_or_default().iter().enumerate() {
            let path = format!("{rule}.{peers_field}[{j}]");
            validate_peer(peer, &path, &mut push);
        }
        for (j, port) in ports.unwrap_or_default().iter().enumerate() {
            push(
                format!("{rule}.ports[{j}]"),
                protocol(port).and_then(|_| port_spec(port)).map(|_| ()),
            );
        }
    }
    issues
}

fn validate_peer(
    peer: &NetworkPolicyPeer,
    path: &str,
    push: &mut impl FnMut(String, Result<(), Problem>),
) {
    match (&peer.ip_block, &peer.namespace_selector, &peer.pod_selector) {
        (Some(block), None, None) => {
            push(
                format!("{path}.ipBlock.cidr"),
                Cidr::parse(&block.cidr).map(|_| ()),
            );
            for (k, e) in block.except.iter().flatten().enumerate() {
                push(
                    format!("{path}.ipBlock.except[{k}]"),
                    Cidr::parse(e).map(|_| ()),
                );
            }
        }
        (Some(_), _, _) => push(path.to_owned(), Err(Problem::IpBlockWithSelector)),
        (None, None, None) => push(path.to_owned(), Err(Problem::EmptyPeer)),
        (None, ns, pod) => {
            if let Some(s) = ns {
                push(format!("{path}.namespaceSelector"), selector::validate(s));
            }
            if let Some(s) = pod {
                push(format!("{path}.podSelector"), selector::validate(s));
            }
        }
    }
}

#[cfg(test)]
#[path = "netpol_tests.rs"]
mod tests;
