//! The normalised flow model every source decodes into (docs/architecture.md, "Flow model
//! and learning rules").
//!
//! A [`FlowRecord`] says what one data plane reported about one connection (or one
//! aggregate of connections): who talked to whom, on which transport and server port,
//! where the reporter saw it, and what the data plane decided. Nothing here knows about
//! Kubernetes objects beyond names: owner resolution happens later, behind
//! [`crate::resolve::Resolver`].

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A cheaply clonable, immutable string.
pub type Str = Arc<str>;

/// Nanoseconds since the Unix epoch (UTC).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// From whole seconds since the epoch.
    pub fn from_secs(secs: i64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// The system clock's time now.
    pub fn now() -> Self {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(i64::try_from(since.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// The kinds of Kubernetes object a pod can belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    /// A ReplicaSet without a Deployment above it.
    ReplicaSet,
    Job,
    CronJob,
    /// A pod without a controller.
    Pod,
}

impl WorkloadKind {
    /// Only these kinds get proposals; every other kind is a peer only.
    pub fn is_subject(self) -> bool {
        matches!(
            self,
            WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::DaemonSet
        )
    }

    /// The Kubernetes kind name (`Deployment`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Pod => "Pod",
        }
    }

    /// Parses a Kubernetes kind name, as Hubble's `workloads[].kind` carries it.
    pub fn parse(kind: &str) -> Option<Self> {
        Some(match kind {
            "Deployment" => WorkloadKind::Deployment,
            "StatefulSet" => WorkloadKind::StatefulSet,
            "DaemonSet" => WorkloadKind::DaemonSet,
            "ReplicaSet" => WorkloadKind::ReplicaSet,
            "Job" => WorkloadKind::Job,
            "CronJob" => WorkloadKind::CronJob,
            "Pod" => WorkloadKind::Pod,
            _ => return None,
        })
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A named workload in a namespace.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkloadRef {
    pub namespace: Str,
    pub kind: WorkloadKind,
    pub name: Str,
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// Identities that are not workloads (Cilium's reserved identities and their
/// equivalents in the other data planes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reserved {
    Host,
    RemoteNode,
    KubeApiserver,
    Health,
    Init,
    Ingress,
    Unmanaged,
    /// Outside the cluster, with no usable address (Calico `pub`/`pvt`, Cilium world
    /// without an IP).
    World,
    Unknown,
}

impl Reserved {
    pub fn as_str(self) -> &'static str {
        match self {
            Reserved::Host => "host",
            Reserved::RemoteNode => "remote-node",
            Reserved::KubeApiserver => "kube-apiserver",
            Reserved::Health => "health",
            Reserved::Init => "init",
            Reserved::Ingress => "ingress",
            Reserved::Unmanaged => "unmanaged",
            Reserved::World => "world",
            Reserved::Unknown => "unknown",
        }
    }
}

/// What an endpoint *is*, as far as the record tells. This is the identity used as a
/// key; labels and addresses are attributes carried beside it in [`Endpoint`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EndpointId {
    /// The record names the owning workload (Hubble `workloads`, Goldmane labels).
    Workload(WorkloadRef),
    /// A pod whose owner the record does not name.
    Pod {
        namespace: Str,
        name: Str,
    },
    /// Pods aggregated by name prefix (Calico's `GenerateName*`); `prefix` excludes the `*`.
    PodGroup {
        namespace: Str,
        prefix: Str,
    },
    /// An address outside the cluster.
    External(IpAddr),
    Reserved(Reserved),
}

impl EndpointId {
    /// The namespace, for in-cluster endpoints.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            EndpointId::Workload(w) => Some(&w.namespace),
            EndpointId::Pod { namespace, .. } | EndpointId::PodGroup { namespace, .. } => {
                Some(namespace)
            }
            EndpointId::External(_) | EndpointId::Reserved(_) => None,
        }
    }
}

/// An [`EndpointId`] borrowed from wherever its names live (the owned id, or the bytes of
/// a record being decoded): what the flow table hashes and compares, so that a record can
/// be looked up before anything is allocated for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdView<'a> {
    Workload {
        namespace: &'a str,
        kind: WorkloadKind,
        name: &'a str,
    },
    Pod {
        namespace: &'a str,
        name: &'a str,
    },
    PodGroup {
        namespace: &'a str,
        prefix: &'a str,
    },
    External(IpAddr),
    Reserved(Reserved),
}

impl IdView<'_> {
    /// The owned id (allocates its names).
    pub fn to_id(self) -> EndpointId {
        match self {
            IdView::Workload {
                namespace,
                kind,
                name,
            } => EndpointId::Workload(WorkloadRef {
                namespace: namespace.into(),
                kind,
                name: name.into(),
            }),
            IdView::Pod { namespace, name } => EndpointId::Pod {
                namespace: namespace.into(),
                name: name.into(),
            },
            IdView::PodGroup { namespace, prefix } => EndpointId::PodGroup {
                namespace: namespace.into(),
                prefix: prefix.into(),
            },
            IdView::External(ip) => EndpointId::External(ip),
            IdView::Reserved(r) => EndpointId::Reserved(r),
        }
    }
}

impl EndpointId {
    /// This id as a borrowed view.
    pub fn view(&self) -> IdView<'_> {
        match self {
            EndpointId::Workload(w) => IdView::Workload {
                namespace: &w.namespace,
                kind: w.kind,
                name: &w.name,
            },
            EndpointId::Pod { namespace, name } => IdView::Pod { namespace, name },
            EndpointId::PodGroup { namespace, prefix } => IdView::PodGroup { namespace, prefix },
            EndpointId::External(ip) => IdView::External(*ip),
            EndpointId::Reserved(r) => IdView::Reserved(*r),
        }
    }
}

impl fmt::Display for EndpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointId::Workload(w) => w.fmt(f),
            EndpointId::Pod { namespace, name } => write!(f, "{namespace}/Pod/{name}"),
            EndpointId::PodGroup { namespace, prefix } => write!(f, "{namespace}/Pod/{prefix}*"),
            EndpointId::External(ip) => write!(f, "{ip}"),
            EndpointId::Reserved(r) => write!(f, "reserved:{}", r.as_str()),
        }
    }
}

/// Labels as `key=value` pairs, sorted by key, without source prefixes (`k8s:`).
pub type Labels = Arc<[(Str, Str)]>;

/// Builds [`Labels`] from pairs: sorted by key, last value of a repeated key wins.
pub fn labels<K: Into<Str>, V: Into<Str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Labels {
    let mut v: Vec<(Str, Str)> = pairs
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    // Stable, so equal keys keep their order and the last one's value moves forward.
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            std::mem::swap(&mut later.1, &mut kept.1);
        }
        same
    });
    v.into()
}

/// One side of a flow.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: EndpointId,
    /// The address the record gives, if any.
    pub ip: Option<IpAddr>,
    /// Pod labels as the record carries them (empty when it carries none).
    pub labels: Labels,
    /// Mesh identity: the SPIFFE principal without `spiffe://` (Istio).
    pub identity: Option<Str>,
}

impl Endpoint {
    pub fn new(id: EndpointId) -> Self {
        Endpoint {
            id,
            ip: None,
            labels: Labels::from([]),
            identity: None,
        }
    }

    pub fn with_ip(mut self, ip: Option<IpAddr>) -> Self {
        self.ip = ip;
        self
    }

    pub fn with_labels(mut self, labels: Labels) -> Self {
        self.labels = labels;
        self
    }

    pub fn with_identity(mut self, identity: Option<Str>) -> Self {
        self.identity = identity;
        self
    }
}

/// Layer-4 protocol of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    /// Anything else (VRRP, IGMP, unknown).
    Other,
}

impl Protocol {
    /// TCP, UDP and SCTP can be expressed in a policy; the others make no edge.
    pub fn is_policy_protocol(self) -> bool {
        matches!(self, Protocol::Tcp | Protocol::Udp | Protocol::Sctp)
    }

    /// The Kubernetes spelling (`TCP`, `UDP`, `SCTP`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
            Protocol::Icmp => "ICMP",
            Protocol::Other => "OTHER",
        }
    }

    /// Parses a protocol name in any case (`tcp`, `TCP`, `Tcp`).
    pub fn parse(s: &str) -> Protocol {
        if s.eq_ignore_ascii_case("tcp") {
            Protocol::Tcp
        } else if s.eq_ignore_ascii_case("udp") {
            Protocol::Udp
        } else if s.eq_ignore_ascii_case("sctp") {
            Protocol::Sctp
        } else if s.len() >= 4 && s[..4].eq_ignore_ascii_case("icmp") {
            Protocol::Icmp
        } else {
            Protocol::Other
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the reporter saw the flow, relative to the endpoint local to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ObservationPoint {
    /// Seen leaving the source (the source is local to the reporter).
    Egress,
    /// Seen arriving at the destination (the destination is local to the reporter).
    Ingress,
    Unknown,
}

/// What the data plane decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Verdict {
    /// Allowed and forwarded.
    Forwarded,
    /// Dropped or denied by a policy (Hubble `POLICY_DENIED`, Goldmane `Deny`, ztunnel
    /// policy rejection).
    PolicyDenied,
    /// Would be denied by a policy in audit / dry-run mode, and was let through.
    AuditDenied,
    /// Dropped for a reason that is not policy (invalid packet, ...).
    Dropped,
    /// The connection failed for another reason (refused, timed out, ...).
    Error,
}

impl Verdict {
    /// A policy's decision against the traffic, enforced ([`Verdict::PolicyDenied`]) or
    /// in audit / dry-run mode ([`Verdict::AuditDenied`]): what the agent keeps as
    /// observations, apart from learning.
    pub fn is_denial(self) -> bool {
        matches!(self, Verdict::PolicyDenied | Verdict::AuditDenied)
    }
}

/// Direction of an edge, seen from its subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    /// `Ingress` / `Egress`, as the CRDs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One flow as a data plane reported it, normalised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// When the flow was observed (Goldmane: the start of its aggregation window).
    pub time: Option<Timestamp>,
    /// The node that reported the flow, if the record says.
    pub node: Option<Str>,
    pub source: Endpoint,
    pub destination: Endpoint,
    pub protocol: Protocol,
    /// The client's port, when the record carries one.
    pub source_port: u16,
    /// The server-side port after Service translation (for ztunnel inbound HBONE the
    /// port of `dst.hbone_addr`); 0 when the protocol has none or it is unknown.
    pub destination_port: u16,
    pub observation: ObservationPoint,
    pub verdict: Verdict,
    /// `Some(true)` for reply traffic, `Some(false)` for requests, `None` when the
    /// record cannot tell.
    pub reply: Option<bool>,
    /// DNS name of the destination, when the data plane resolved one.
    pub destination_dns: Option<Str>,
    /// The policy the data plane blamed for a denial (`namespace/name`), if it says.
    pub policy: Option<Str>,
    /// Number of connections this record stands for (Goldmane aggregates; others 1).
    pub connections: u64,
}
