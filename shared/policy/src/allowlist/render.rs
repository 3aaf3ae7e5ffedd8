//! Rendering an [`AllowList`] as a `WorkloadNetworkPolicyProposal`, with the evidence
//! the leader writes into its status, and the proposal naming rule.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff;
use ne_crds::{
    Backend, IstioAuthorizationPolicySpec, IstioFrom, IstioOperation, IstioRule, IstioSource,
    IstioTo, PeerEvidence, PolicyDirection, TargetKind, TargetRef, WorkloadNetworkPolicyProposal,
    WorkloadNetworkPolicyProposalSpec, WorkloadNetworkPolicyProposalStatus,
};
use serde::Serialize;

use super::{AllowList, Evidence, PeerKey};
use ne_flow::flow::{Direction, Protocol, Timestamp, WorkloadKind};

/// Label set on every object Network Enforcer creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "network-enforcer";
/// Longest proposal name: it must fit a label value (`promoted-from`).
pub const MAX_NAME_LEN: usize = 63;

/// `<kind>-<name>-<direction>` in lower case. Characters outside `[a-z0-9.-]` become `-`.
/// A name longer than [`MAX_NAME_LEN`] is cut and suffixed with `-` and 8 hex digits of
/// the FNV-1a hash of the full name, so the result is at most 63 characters, stable across
/// releases and platforms, and starts and ends with an alphanumeric character. Dots in a
/// workload name are kept (valid in object names and label values).
pub fn proposal_name(kind: WorkloadKind, name: &str, direction: Direction) -> String {
    let full = format!("{}-{name}-{}", kind.as_str(), direction.as_str()).to_lowercase();
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME_LEN {
        return clean;
    }
    let hash = fnv1a32(full.as_bytes());
    // `clean` is ASCII, so any byte index is a char boundary.
    let prefix = clean[..MAX_NAME_LEN - 9].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash:08x}")
}

/// 32-bit FNV-1a: small, and stable by definition (unlike std's `DefaultHasher`).
pub(super) fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// One (peer, protocol, port) of a proposal and why it is there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerEvidenceRow {
    /// Index of the rendered rule (in `ingress`/`egress`/`rules`) that allows it.
    pub rule: usize,
    pub peer: PeerKey,
    pub protocol: Protocol,
    pub port: u16,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    pub flow_count: u64,
    pub dns: Vec<String>,
}

/// A rendered proposal and what the leader needs for its status and summary.
#[derive(Clone, Debug, Serialize)]
pub struct Proposal {
    /// The object, its status filled in as [`render_proposal_with_status`] fills it.
    pub object: WorkloadNetworkPolicyProposal,
    /// One row per (peer, protocol, port), in rule order.
    pub evidence: Vec<PeerEvidenceRow>,
    pub flow_count: u64,
    /// The earliest first-seen of any rule.
    pub learning_since: Timestamp,
    /// The latest last-seen of any rule.
    pub last_seen: Timestamp,
}

/// A [`Timestamp`] as a Kubernetes `Time`, to the second.
pub fn kube_time(t: Timestamp) -> Time {
    let secs = t.0.div_euclid(1_000_000_000);
    Time(jiff::Timestamp::from_second(secs).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

/// Why an allow-list cannot be rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("{0} workloads get no proposal")]
    NotASubject(WorkloadKind),
    #[error("allow-list has no rules (it would deny everything)")]
    Empty,
    #[error("peer {peer} cannot be expressed in a {backend:?} policy")]
    PeerBackendMismatch { peer: String, backend: Backend },
    #[error("istio policies cover ingress only")]
    IstioEgress,
}

fn target_kind(kind: WorkloadKind) -> Result<TargetKind, RenderError> {
    match kind {
        WorkloadKind::Deployment => Ok(TargetKind::Deployment),
        WorkloadKind::StatefulSet => Ok(TargetKind::StatefulSet),
        WorkloadKind::DaemonSet => Ok(TargetKind::DaemonSet),
        other => Err(RenderError::NotASubject(other)),
    }
}

fn policy_direction(d: Direction) -> PolicyDirection {
    match d {
        Direction::Ingress => PolicyDirection::Ingress,
        Direction::Egress => PolicyDirection::Egress,
    }
}

type Ports = BTreeMap<(Protocol, u16), Evidence>;

/// Renders `list` as a proposal in the workload's namespace: one rule per peer, ports
/// sorted by (protocol, port). The owner reference to the workload (which needs its UID)
/// is left to the caller.
pub fn render_proposal(list: &AllowList) -> Result<Proposal, RenderError> {
    let object = render_proposal_with_status(list)?;
    let evidence = list
        .peers
        .iter()
        .enumerate()
        .flat_map(|(rule, (peer, ports))| {
            ports
                .iter()
                .map(move |(&(protocol, port), e)| PeerEvidenceRow {
                    rule,
                    peer: peer.clone(),
                    protocol,
                    port,
                    first_seen: e.first_seen,
                    last_seen: e.last_seen,
                    flow_count: e.flow_count,
                    dns: e.dns.iter().map(|d| d.to_string()).collect(),
                })
        })
        .collect();
    Ok(Proposal {
        object,
        evidence,
        flow_count: list.flow_count(),
        learning_since: list.learning_since().unwrap_or_default(),
        last_seen: list.last_seen().unwrap_or_default(),
    })
}

/// The proposal object of `list` with the status its evidence makes: `learningSince`, one
/// row per peer, protocol and port (each rule's peer written once), the flow count and the
/// summary fields. Times are cut to whole seconds, as `metav1.Time` carries them. What a
/// controller round renders; [`render_proposal`] adds typed evidence rows.
pub fn render_proposal_with_status(
    list: &AllowList,
) -> Result<WorkloadNetworkPolicyProposal, RenderError> {
    let mut object = render_object(list)?;
    let mut peers = Vec::with_capacity(list.peers.values().map(BTreeMap::len).sum());
    for (peer, ports) in &list.peers {
        let text = peer.to_string();
        for (&(protocol, port), e) in ports {
            let mut row = PeerEvidence {
                peer: text.clone(),
                protocol: protocol.as_str().to_owned(),
                port: i32::from(port),
                first_seen: Time(jiff::Timestamp::UNIX_EPOCH),
                last_seen: Time(jiff::Timestamp::UNIX_EPOCH),
                flow_count: 0,
                dns_name: None,
            };
            set_evidence(&mut row, e);
            peers.push(row);
        }
    }
    let mut status = WorkloadNetworkPolicyProposalStatus {
        conditions: Vec::new(),
        peers,
        ..WorkloadNetworkPolicyProposalStatus::default()
    };
    set_totals(
        &mut status,
        list.learning_since().unwrap_or_default(),
        list.flow_count(),
    );
    status.summarize();
    object.status = Some(status);
    Ok(object)
}

/// Sets the values of one status row from its evidence.
pub(crate) fn set_evidence(row: &mut PeerEvidence, e: &Evidence) {
    row.first_seen = kube_time(e.first_seen);
    row.last_seen = kube_time(e.last_seen);
    row.flow_count = i64::try_from(e.flow_count).unwrap_or(i64::MAX);
    row.dns_name = (!e.dns.is_empty()).then(|| {
        let names: Vec<&str> = e.dns.iter().map(|d| &**d).collect();
        names.join(",")
    });
}

/// Sets a status's `learningSince` and flow count.
pub(crate) fn set_totals(
    status: &mut WorkloadNetworkPolicyProposalStatus,
    learning_since: Timestamp,
    flows: u64,
) {
    status.learning_since = Some(kube_time(learning_since));
    status.flow_count = i64::try_from(flows).unwrap_or(i64::MAX);
}

/// The proposal object of `list`, without status.
fn render_object(list: &AllowList) -> Result<WorkloadNetworkPolicyProposal, RenderError> {
    let kind = target_kind(list.subject.kind)?;
    if list.peers.is_empty() {
        return Err(RenderError::Empty);
    }
    let direction = policy_direction(list.direction);
    let mut spec = WorkloadNetworkPolicyProposalSpec {
        backend: list.backend,
        kubernetes: None,
        istio: None,
        target_ref: TargetRef {
            kind,
            name: list.subject.name.to_string(),
        },
        direction,
    };
    match list.backend {
        Backend::Kubernetes => spec.kubernetes = Some(network_policy(list)?),
        Backend::Istio => spec.istio = Some(authorization_policy(list)?),
    }
    let name = proposal_name(list.subject.kind, &list.subject.name, list.direction);
    let mut object = WorkloadNetworkPolicyProposal::new(&name, spec);
    object.metadata.namespace = Some(list.subject.namespace.to_string());
    object.metadata.labels =
        Some([(MANAGED_BY_LABEL.to_owned(), MANAGED_BY_VALUE.to_owned())].into());
    Ok(object)
}

fn mismatch(peer: &PeerKey, backend: Backend) -> RenderError {
    RenderError::PeerBackendMismatch {
        peer: peer.to_string(),
        backend,
    }
}

fn network_policy(list: &AllowList) -> Result<NetworkPolicySpec, RenderError> {
    let rules: Vec<(NetworkPolicyPeer, Vec<NetworkPolicyPort>)> = list
        .peers
        .iter()
        .map(|(peer, ports)| {
            let p = peer
                .network_policy_peer()
                .ok_or_else(|| mismatch(peer, Backend::Kubernetes))?;
            Ok((p, policy_ports(ports)))
        })
        .collect::<Result<_, RenderError>>()?;
    let mut spec = NetworkPolicySpec {
        pod_selector: Some(list.selector.clone()),
        policy_types: Some(vec![list.direction.as_str().to_owned()]),
        ..Default::default()
    };
    match list.direction {
        Direction::Ingress => {
            spec.ingress = Some(
                rules
                    .into_iter()
                    .map(|(peer, ports)| NetworkPolicyIngressRule {
                        from: Some(vec![peer]),
                        ports: Some(ports),
                    })
                    .collect(),
            );
        }
        Direction::Egress => {
            spec.egress = Some(
                rules
                    .into_iter()
                    .map(|(peer, ports)| NetworkPolicyEgressRule {
                        to: Some(vec![peer]),
                        ports: Some(ports),
                    })
                    .collect(),
            );
        }
    }
    Ok(spec)
}

fn policy_ports(ports: &Ports) -> Vec<NetworkPolicyPort> {
    ports
        .keys()
        .map(|&(protocol, port)| NetworkPolicyPort {
            protocol: Some(protocol.as_str().to_owned()),
            port: Some(IntOrString::Int(i32::from(port))),
            end_port: None,
        })
        .collect()
}

fn authorization_policy(list: &AllowList) -> Result<IstioAuthorizationPolicySpec, RenderError> {
    if list.direction != Direction::Ingress {
        // ztunnel enforces inbound only; the CRD rejects an Istio egress proposal.
        return Err(RenderError::IstioEgress);
    }
    let rules = list
        .peers
        .iter()
        .map(|(peer, ports)| {
            let PeerKey::Principal(principal) = peer else {
                return Err(mismatch(peer, Backend::Istio));
            };
            let ports = ports
                .keys()
                .map(|&(protocol, port)| match protocol {
                    Protocol::Tcp => Ok(port.to_string()),
                    _ => Err(mismatch(peer, Backend::Istio)),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(IstioRule {
                from: vec![IstioFrom {
                    source: IstioSource {
                        principals: vec![principal.clone()],
                    },
                }],
                to: vec![IstioTo {
                    operation: IstioOperation { ports },
                }],
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(IstioAuthorizationPolicySpec {
        selector: list.selector.clone(),
        rules,
    })
}
