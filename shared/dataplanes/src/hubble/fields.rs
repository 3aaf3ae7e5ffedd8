//! The mapping both Hubble decoders share: the borrowed fields of one flow (filled from
//! JSON by [`super`] and from protobuf by [`crate::hubble_pb`]) to a
//! [`FlowRecord`], so that the two paths cannot drift.

use std::net::IpAddr;

use super::super::DecodeError;
use super::super::common::{EnumVal, parse_ip, policy_ref, port};
use ne_flow::flow::{
    Endpoint, FlowRecord, IdView, Labels, ObservationPoint, Protocol, Reserved, Str, Timestamp,
    Verdict, WorkloadKind, labels,
};

/// The fields of one Hubble flow that learning reads, borrowed from the input. The JSON
/// decoder and the protobuf walker ([`super::hubble_pb`]) both fill one and map it with
/// [`flow_record`], so the two paths cannot drift. Absent and empty strings mean the same.
pub(crate) struct FlowFields<'s, L> {
    /// The flow's time, else the response's.
    pub time: Option<Timestamp>,
    /// `Flow.node_name`.
    pub node_name: Option<&'s str>,
    /// `GetFlowsResponse.node_name`, used when the flow names no node.
    pub response_node_name: Option<&'s str>,
    pub ip_source: Option<&'s str>,
    pub ip_destination: Option<&'s str>,
    pub l4: L4Fields,
    pub source: EndpointFields<'s, L>,
    pub destination: EndpointFields<'s, L>,
    pub verdict: Option<EnumVal<'s>>,
    pub drop_reason_desc: Option<EnumVal<'s>>,
    /// The deprecated numeric drop reason.
    pub drop_reason: Option<u32>,
    pub traffic_direction: Option<EnumVal<'s>>,
    /// `is_reply` (a `BoolValue`: absent means unknown).
    pub is_reply: Option<bool>,
    /// The deprecated `reply` flag.
    pub reply: Option<bool>,
    /// The first of `destination_names`.
    pub destination_name: Option<&'s str>,
    /// The first of `egress_denied_by`.
    pub egress_denied_by: Option<PolicyFields<'s>>,
    /// The first of `ingress_denied_by`.
    pub ingress_denied_by: Option<PolicyFields<'s>>,
}

/// `Flow.l4`: the protocol and, for TCP/UDP/SCTP, `(source_port, destination_port)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum L4Fields {
    Tcp(u32, u32),
    Udp(u32, u32),
    Sctp(u32, u32),
    Icmp,
    Other,
}

/// One endpoint of a flow; `labels` iterates its identity labels (`k8s:app=web`, …) and is
/// cloned to iterate them again.
pub(crate) struct EndpointFields<'s, L> {
    pub identity: u32,
    pub namespace: Option<&'s str>,
    pub pod_name: Option<&'s str>,
    pub labels: L,
    /// What `labels` say about the endpoint's identity.
    pub summary: LabelSummary<'s>,
    /// The first of `workloads`.
    pub workload: Option<WorkloadFields<'s>>,
}

/// `Endpoint.workloads[0]`.
pub(crate) struct WorkloadFields<'s> {
    pub name: Option<&'s str>,
    pub kind: Option<&'s str>,
}

/// One policy of `*_denied_by`.
pub(crate) struct PolicyFields<'s> {
    pub name: Option<&'s str>,
    pub namespace: Option<&'s str>,
}

/// The checked scalars of a flow: everything edge derivation reads but the endpoints.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowCore {
    pub src_ip: Option<IpAddr>,
    pub dst_ip: Option<IpAddr>,
    pub protocol: Protocol,
    pub source_port: u16,
    pub destination_port: u16,
    pub observation: ObservationPoint,
    pub verdict: Verdict,
    pub reply: Option<bool>,
}

/// Checks and maps the scalars of one flow; its errors are those of [`flow_record`].
pub(crate) fn flow_core<L>(f: &FlowFields<'_, L>) -> Result<FlowCore, DecodeError> {
    let src_ip = parse_ip("IP.source", f.ip_source)?;
    let dst_ip = parse_ip("IP.destination", f.ip_destination)?;

    let (protocol, ports) = match f.l4 {
        L4Fields::Tcp(s, d) => (Protocol::Tcp, Some((s, d))),
        L4Fields::Udp(s, d) => (Protocol::Udp, Some((s, d))),
        L4Fields::Sctp(s, d) => (Protocol::Sctp, Some((s, d))),
        L4Fields::Icmp => (Protocol::Icmp, None),
        L4Fields::Other => (Protocol::Other, None),
    };
    let (source_port, destination_port) = match ports {
        Some((s, d)) => (
            port("l4.source_port", i64::from(s))?,
            port("l4.destination_port", i64::from(d))?,
        ),
        None => (0, 0),
    };

    let observation = match &f.traffic_direction {
        Some(d) if d.is("INGRESS", 1) => ObservationPoint::Ingress,
        Some(d) if d.is("EGRESS", 2) => ObservationPoint::Egress,
        _ => ObservationPoint::Unknown,
    };
    let verdict = verdict(
        f.verdict.as_ref(),
        f.drop_reason_desc.as_ref(),
        f.drop_reason,
    )?;
    Ok(FlowCore {
        src_ip,
        dst_ip,
        protocol,
        source_port,
        destination_port,
        observation,
        verdict,
        reply: f.is_reply.or(if f.reply == Some(true) {
            Some(true)
        } else {
            None
        }),
    })
}

/// Maps the borrowed fields of one flow to a [`FlowRecord`] (the Hubble rules, shared by
/// both decoders).
pub(crate) fn flow_record<'s, L>(f: FlowFields<'s, L>) -> Result<FlowRecord, DecodeError>
where
    L: Iterator<Item = &'s str> + Clone,
{
    let core = flow_core(&f)?;
    let non_empty = |s: &&str| !s.is_empty();
    let node = f
        .node_name
        .filter(non_empty)
        .or(f.response_node_name.filter(non_empty))
        .map(Str::from);
    let denied_by = match core.observation {
        ObservationPoint::Ingress => [&f.ingress_denied_by, &f.egress_denied_by],
        _ => [&f.egress_denied_by, &f.ingress_denied_by],
    };
    let policy = denied_by
        .into_iter()
        .find_map(Option::as_ref)
        .and_then(|p| policy_ref(p.namespace, p.name.unwrap_or("")));

    Ok(FlowRecord {
        time: f.time,
        node,
        source: endpoint(f.source, core.src_ip),
        destination: endpoint(f.destination, core.dst_ip),
        protocol: core.protocol,
        source_port: core.source_port,
        destination_port: core.destination_port,
        observation: core.observation,
        verdict: core.verdict,
        reply: core.reply,
        destination_dns: f.destination_name.filter(non_empty).map(Str::from),
        policy,
        connections: 1,
    })
}

/// Hubble verdicts: FORWARDED, REDIRECTED (to a proxy), TRACED and TRANSLATED all let the
/// packet through; DROPPED is a policy denial only for POLICY_DENIED (133) or POLICY_DENY
/// (181); AUDIT is a policy denial in audit mode.
fn verdict(
    v: Option<&EnumVal<'_>>,
    desc: Option<&EnumVal<'_>>,
    reason: Option<u32>,
) -> Result<Verdict, DecodeError> {
    let Some(v) = v.filter(|v| !v.is("VERDICT_UNKNOWN", 0)) else {
        return Err(DecodeError::MissingField("verdict"));
    };
    Ok(
        if v.is("FORWARDED", 1)
            || v.is("REDIRECTED", 5)
            || v.is("TRACED", 6)
            || v.is("TRANSLATED", 7)
        {
            Verdict::Forwarded
        } else if v.is("DROPPED", 2) {
            let by_desc =
                desc.is_some_and(|d| d.is("POLICY_DENIED", 133) || d.is("POLICY_DENY", 181));
            let by_reason = matches!(reason, Some(133 | 181));
            if by_desc || by_reason {
                Verdict::PolicyDenied
            } else {
                Verdict::Dropped
            }
        } else if v.is("AUDIT", 4) {
            Verdict::AuditDenied
        } else if v.is("ERROR", 3) {
            Verdict::Error
        } else {
            return Err(DecodeError::BadValue {
                field: "verdict",
                value: v.text(),
            });
        },
    )
}

/// What the labels of one endpoint say about its identity, gathered in one pass (the
/// protobuf walker gathers it while it validates the labels).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LabelSummary<'s> {
    /// Whether the endpoint has any label at all.
    pub any: bool,
    /// Which reserved identity its `reserved:*` labels name. When several are present the
    /// most specific wins: host (identity 1) before kube-apiserver (which Cilium adds to
    /// the host or a remote node when the API server runs there), then remote-node and
    /// the rest; world last.
    pub reserved: Option<Reserved>,
    /// The first `k8s:io.kubernetes.pod.namespace=` label's value.
    pub namespace: Option<&'s str>,
}

impl<'s> LabelSummary<'s> {
    /// The summary of `labels`.
    pub fn of(labels: impl Iterator<Item = &'s str>) -> Self {
        let mut summary = LabelSummary::default();
        for l in labels {
            summary.add(l);
        }
        summary
    }

    /// Adds one label.
    pub fn add(&mut self, label: &'s str) {
        self.any = true;
        if let Some(name) = label.strip_prefix("reserved:") {
            let r = match name {
                "host" => Reserved::Host,
                "kube-apiserver" => Reserved::KubeApiserver,
                "remote-node" => Reserved::RemoteNode,
                "health" => Reserved::Health,
                "init" => Reserved::Init,
                "ingress" => Reserved::Ingress,
                "unmanaged" => Reserved::Unmanaged,
                n if n.starts_with("world") => Reserved::World,
                _ => Reserved::Unknown,
            };
            self.reserved = Some(
                self.reserved
                    .map_or(r, |b| if rank(r) < rank(b) { r } else { b }),
            );
        } else if self.namespace.is_none() {
            self.namespace = label.strip_prefix("k8s:io.kubernetes.pod.namespace=");
        }
    }
}

fn rank(r: Reserved) -> u8 {
    match r {
        Reserved::Host => 0,
        Reserved::KubeApiserver => 1,
        Reserved::RemoteNode => 2,
        Reserved::Health => 3,
        Reserved::Init => 4,
        Reserved::Ingress => 5,
        Reserved::Unmanaged => 6,
        Reserved::World => 7,
        Reserved::Unknown => 8,
    }
}

/// Cilium's reserved identity numbers (1-255 are reserved, cluster identities start at 256).
/// 11 (encrypted overlay) is node-to-node tunnel traffic, so it maps to remote-node.
fn reserved_from_identity(identity: u32) -> Option<Reserved> {
    Some(match identity {
        1 => Reserved::Host,
        2 | 9 | 10 => Reserved::World,
        3 => Reserved::Unmanaged,
        4 => Reserved::Health,
        5 => Reserved::Init,
        6 | 11 => Reserved::RemoteNode,
        7 => Reserved::KubeApiserver,
        8 => Reserved::Ingress,
        _ => return None,
    })
}

/// `k8s:` labels without the prefix, dropping Cilium's bookkeeping keys.
fn pod_labels<'s>(raw: impl Iterator<Item = &'s str>) -> Labels {
    labels(raw.filter_map(|l| {
        let kv = l.strip_prefix("k8s:")?;
        // The key is what precedes the first '=': these prefixes hold no '=', so testing
        // them on `k=v` tests the key, without splitting the labels that are dropped.
        let internal =
            kv.starts_with("io.cilium.") || kv.starts_with("io.kubernetes.pod.namespace=");
        if internal {
            return None;
        }
        let (k, v) = kv.split_once('=')?;
        Some((Str::from(k), Str::from(v)))
    }))
}

/// The endpoint rules, first match wins: reserved labels (`reserved:*`), then
/// workloads, then the pod, then reserved identity numbers. A `reserved:world` endpoint
/// that names a pod is that pod (Cilium's L7 proxy records resolve the pod by address
/// while the identity is still world).
pub(crate) fn endpoint_id<'s, L>(e: &EndpointFields<'s, L>, ip: Option<IpAddr>) -> IdView<'s> {
    let namespace = e
        .namespace
        .filter(|n| !n.is_empty())
        .or(e.summary.namespace);
    let pod = e.pod_name.filter(|p| !p.is_empty());
    let world = |ip: Option<IpAddr>| ip.map_or(IdView::Reserved(Reserved::World), IdView::External);
    let workload = e.workload.as_ref().and_then(|w| {
        let kind = WorkloadKind::parse(w.kind?)?;
        let name = w.name.filter(|n| !n.is_empty())?;
        Some(IdView::Workload {
            namespace: namespace?,
            kind,
            name,
        })
    });
    let pod_id = || {
        pod.zip(namespace)
            .map(|(name, namespace)| IdView::Pod { namespace, name })
    };
    match e.summary.reserved {
        Some(Reserved::World) => workload.or_else(pod_id).unwrap_or_else(|| world(ip)),
        Some(r) => IdView::Reserved(r),
        None => match workload.or_else(pod_id) {
            Some(id) => id,
            None if !e.summary.any => match reserved_from_identity(e.identity) {
                Some(Reserved::World) => world(ip),
                Some(r) => IdView::Reserved(r),
                // CIDR identities (local scope 1<<24) are addresses outside the cluster.
                None if (1 << 24..2 << 24).contains(&e.identity) => world(ip),
                None => IdView::Reserved(Reserved::Unknown),
            },
            None => IdView::Reserved(Reserved::Unknown),
        },
    }
}

/// The owned endpoint: its id ([`endpoint_id`]), address and pod labels.
fn endpoint<'s, L>(e: EndpointFields<'s, L>, ip: Option<IpAddr>) -> Endpoint
where
    L: Iterator<Item = &'s str> + Clone,
{
    Endpoint::new(endpoint_id(&e, ip).to_id())
        .with_ip(ip)
        .with_labels(pod_labels(e.labels))
}
