//! Cilium Hubble flows as JSON: `hubble observe -o json|jsonpb`, the Hubble exporter, and
//! Go `encoding/json` dumps (dataplanes.md §1.3-1.6).
//!
//! A line is a `GetFlowsResponse` (`{"flow":{…},"node_name":…,"time":…}`), `{"flow":…}`
//! alone, or a bare `Flow`. `lost_events` and `node_status` responses are counted skips.
//! Field names are accepted in protojson's `UseProtoNames` spelling (`traffic_direction`)
//! and in lowerCamelCase (`trafficDirection`); enums as names or numbers.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::common::{CowStr, EnumVal, TimeVal, parse_ip, policy_ref, port};
use super::{DecodeError, Decoded, SkipReason};
use crate::flow::{
    Endpoint, FlowRecord, IdView, Labels, ObservationPoint, Protocol, Reserved, Str, Timestamp,
    Verdict, WorkloadKind, labels,
};

/// A `GetFlowsResponse` or a bare `Flow`: the flow's fields plus the wrapper's.
#[derive(Deserialize, Default)]
struct Flow<'a> {
    // GetFlowsResponse
    #[serde(borrow)]
    flow: Option<Box<Flow<'a>>>,
    #[serde(alias = "lostEvents")]
    lost_events: Option<IgnoredAny>,
    #[serde(alias = "nodeStatus")]
    node_status: Option<IgnoredAny>,
    // Flow (and the wrapper's node_name/time)
    #[serde(borrow)]
    time: Option<TimeVal<'a>>,
    #[serde(borrow)]
    verdict: Option<EnumVal<'a>>,
    #[serde(borrow, rename = "IP", alias = "ip")]
    ip: Option<Ip<'a>>,
    l4: Option<Layer4>,
    #[serde(borrow)]
    source: Option<HEndpoint<'a>>,
    #[serde(borrow)]
    destination: Option<HEndpoint<'a>>,
    #[serde(borrow, alias = "nodeName")]
    node_name: Option<CowStr<'a>>,
    #[serde(borrow, default, alias = "destinationNames")]
    destination_names: Vec<CowStr<'a>>,
    reply: Option<bool>,
    #[serde(alias = "isReply")]
    is_reply: Option<bool>,
    #[serde(borrow, alias = "trafficDirection")]
    traffic_direction: Option<EnumVal<'a>>,
    #[serde(borrow, alias = "dropReasonDesc")]
    drop_reason_desc: Option<EnumVal<'a>>,
    #[serde(alias = "dropReason")]
    drop_reason: Option<u32>,
    #[serde(borrow, default, alias = "egressDeniedBy")]
    egress_denied_by: Vec<Policy<'a>>,
    #[serde(borrow, default, alias = "ingressDeniedBy")]
    ingress_denied_by: Vec<Policy<'a>>,
}

impl Flow<'_> {
    fn has_flow_fields(&self) -> bool {
        self.verdict.is_some() || self.ip.is_some() || self.l4.is_some() || self.source.is_some()
    }
}

#[derive(Deserialize, Default)]
struct Ip<'a> {
    #[serde(borrow)]
    source: Option<CowStr<'a>>,
    #[serde(borrow)]
    destination: Option<CowStr<'a>>,
}

#[derive(Deserialize, Default)]
struct Layer4 {
    #[serde(rename = "TCP", alias = "tcp")]
    tcp: Option<Ports>,
    #[serde(rename = "UDP", alias = "udp")]
    udp: Option<Ports>,
    #[serde(rename = "SCTP", alias = "sctp")]
    sctp: Option<Ports>,
    #[serde(rename = "ICMPv4", alias = "icmpv4")]
    icmpv4: Option<IgnoredAny>,
    #[serde(rename = "ICMPv6", alias = "icmpv6")]
    icmpv6: Option<IgnoredAny>,
}

#[derive(Deserialize, Default)]
struct Ports {
    #[serde(default, alias = "sourcePort")]
    source_port: u32,
    #[serde(default, alias = "destinationPort")]
    destination_port: u32,
}

#[derive(Deserialize, Default)]
struct HEndpoint<'a> {
    #[serde(default)]
    identity: u32,
    #[serde(borrow)]
    namespace: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    labels: Vec<CowStr<'a>>,
    #[serde(borrow, alias = "podName")]
    pod_name: Option<CowStr<'a>>,
    #[serde(borrow, default)]
    workloads: Vec<Workload<'a>>,
}

#[derive(Deserialize)]
struct Workload<'a> {
    #[serde(borrow)]
    name: Option<CowStr<'a>>,
    #[serde(borrow)]
    kind: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct Policy<'a> {
    #[serde(borrow)]
    name: Option<CowStr<'a>>,
    #[serde(borrow)]
    namespace: Option<CowStr<'a>>,
}

/// Decodes one Hubble JSON line.
pub fn decode(line: &[u8]) -> Result<Decoded, DecodeError> {
    let top: Flow<'_> = serde_json::from_slice(line).map_err(DecodeError::json)?;
    if top.lost_events.is_some() {
        return Ok(Decoded::Skip(SkipReason::HubbleLostEvents));
    }
    if top.node_status.is_some() {
        return Ok(Decoded::Skip(SkipReason::HubbleNodeStatus));
    }
    let (flow, outer_node, outer_time) = match top.flow {
        Some(inner) => (*inner, top.node_name, top.time),
        None if top.has_flow_fields() => (top, None, None),
        None => {
            return Err(DecodeError::shape(
                "a Hubble flow, GetFlowsResponse, lost_events or node_status",
                &String::from_utf8_lossy(line),
            ));
        }
    };
    record(flow, outer_node, outer_time).map(Decoded::Record)
}

/// Borrows a JSON enum value without copying its text.
fn enum_ref<'s>(v: &'s EnumVal<'_>) -> EnumVal<'s> {
    match v {
        EnumVal::Name(n) => EnumVal::Name(CowStr(Cow::Borrowed(&**n))),
        EnumVal::Num(n) => EnumVal::Num(*n),
    }
}

/// A borrowed label of a JSON endpoint.
fn label_str<'s>(l: &'s CowStr<'_>) -> &'s str {
    l
}

fn json_endpoint<'s>(
    e: &'s HEndpoint<'_>,
) -> EndpointFields<'s, impl Iterator<Item = &'s str> + Clone> {
    EndpointFields {
        identity: e.identity,
        namespace: e.namespace.as_deref(),
        pod_name: e.pod_name.as_deref(),
        labels: e.labels.iter().map(label_str),
        summary: LabelSummary::of(e.labels.iter().map(label_str)),
        workload: e.workloads.first().map(|w| WorkloadFields {
            name: w.name.as_deref(),
            kind: w.kind.as_deref(),
        }),
    }
}

fn json_policy<'s>(list: &'s [Policy<'_>]) -> Option<PolicyFields<'s>> {
    list.first().map(|p| PolicyFields {
        name: p.name.as_deref(),
        namespace: p.namespace.as_deref(),
    })
}

fn record(
    f: Flow<'_>,
    outer_node: Option<CowStr<'_>>,
    outer_time: Option<TimeVal<'_>>,
) -> Result<FlowRecord, DecodeError> {
    let time = f
        .time
        .as_ref()
        .or(outer_time.as_ref())
        .map(TimeVal::resolve)
        .transpose()?;
    let ip = f.ip.as_ref();
    let l4 = match f.l4.as_ref() {
        Some(Layer4 { tcp: Some(p), .. }) => L4Fields::Tcp(p.source_port, p.destination_port),
        Some(Layer4 { udp: Some(p), .. }) => L4Fields::Udp(p.source_port, p.destination_port),
        Some(Layer4 { sctp: Some(p), .. }) => L4Fields::Sctp(p.source_port, p.destination_port),
        Some(Layer4 {
            icmpv4: Some(_), ..
        })
        | Some(Layer4 {
            icmpv6: Some(_), ..
        }) => L4Fields::Icmp,
        _ => L4Fields::Other,
    };
    let (no_source, no_destination) = (HEndpoint::default(), HEndpoint::default());
    flow_record(FlowFields {
        time,
        node_name: f.node_name.as_deref(),
        response_node_name: outer_node.as_deref(),
        ip_source: ip.and_then(|ip| ip.source.as_deref()),
        ip_destination: ip.and_then(|ip| ip.destination.as_deref()),
        l4,
        source: json_endpoint(f.source.as_ref().unwrap_or(&no_source)),
        destination: json_endpoint(f.destination.as_ref().unwrap_or(&no_destination)),
        verdict: f.verdict.as_ref().map(enum_ref),
        drop_reason_desc: f.drop_reason_desc.as_ref().map(enum_ref),
        drop_reason: f.drop_reason,
        traffic_direction: f.traffic_direction.as_ref().map(enum_ref),
        is_reply: f.is_reply,
        reply: f.reply,
        destination_name: f.destination_names.first().map(|n| &**n),
        egress_denied_by: json_policy(&f.egress_denied_by),
        ingress_denied_by: json_policy(&f.ingress_denied_by),
    })
}

/// The fields of one Hubble flow that learning reads, borrowed from the input. The JSON
/// decoder and the protobuf walker ([`super::hubble_pb`]) both fill one and map it with
/// [`flow_record`], so the two paths cannot drift. Absent and empty strings mean the same.
pub(super) struct FlowFields<'s, L> {
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
pub(super) enum L4Fields {
    Tcp(u32, u32),
    Udp(u32, u32),
    Sctp(u32, u32),
    Icmp,
    Other,
}

/// One endpoint of a flow; `labels` iterates its identity labels (`k8s:app=web`, …) and is
/// cloned to iterate them again.
pub(super) struct EndpointFields<'s, L> {
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
pub(super) struct WorkloadFields<'s> {
    pub name: Option<&'s str>,
    pub kind: Option<&'s str>,
}

/// One policy of `*_denied_by`.
pub(super) struct PolicyFields<'s> {
    pub name: Option<&'s str>,
    pub namespace: Option<&'s str>,
}

/// The checked scalars of a flow: everything edge derivation reads but the endpoints.
#[derive(Clone, Copy, Debug)]
pub(super) struct FlowCore {
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
pub(super) fn flow_core<L>(f: &FlowFields<'_, L>) -> Result<FlowCore, DecodeError> {
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
pub(super) fn flow_record<'s, L>(f: FlowFields<'s, L>) -> Result<FlowRecord, DecodeError>
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
pub(super) struct LabelSummary<'s> {
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

/// Cilium's reserved identity numbers (dataplanes.md §1.6). 11 (encrypted overlay) is
/// node-to-node tunnel traffic, so it maps to remote-node.
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
pub(super) fn endpoint_id<'s, L>(e: &EndpointFields<'s, L>, ip: Option<IpAddr>) -> IdView<'s> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{EndpointId, WorkloadRef};

    fn one(line: &str) -> FlowRecord {
        match decode(line.as_bytes()) {
            Ok(Decoded::Record(r)) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn reserved_labels_and_identities() {
        let r = one(
            r#"{"verdict":"FORWARDED","IP":{"source":"10.0.0.1","destination":"1.2.3.4"},"l4":{"TCP":{"source_port":40000,"destination_port":443}},"source":{"identity":1,"labels":["reserved:host","reserved:kube-apiserver"]},"destination":{"identity":16777217,"labels":["reserved:kube-apiserver","reserved:world"]},"traffic_direction":"EGRESS"}"#,
        );
        assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Host));
        assert_eq!(
            r.destination.id,
            EndpointId::Reserved(Reserved::KubeApiserver)
        );
        // Identity numbers only when labels are absent; world with an address is external.
        let r = one(
            r#"{"verdict":2,"IP":{"source":"10.0.0.1","destination":"1.2.3.4"},"source":{"identity":6},"destination":{"identity":16777300},"traffic_direction":1,"drop_reason_desc":181}"#,
        );
        assert_eq!(r.source.id, EndpointId::Reserved(Reserved::RemoteNode));
        assert_eq!(
            r.destination.id,
            EndpointId::External("1.2.3.4".parse().unwrap())
        );
        assert_eq!(r.observation, ObservationPoint::Ingress);
        assert_eq!(r.verdict, Verdict::PolicyDenied);
        assert_eq!(r.protocol, Protocol::Other);
        let r = one(
            r#"{"verdict":"FORWARDED","source":{"labels":["reserved:world"]},"destination":{"labels":["reserved:world-ipv4","reserved:remote-node","reserved:kube-apiserver"]}}"#,
        );
        assert_eq!(
            r.destination.id,
            EndpointId::Reserved(Reserved::KubeApiserver)
        );
        let r = one(
            r#"{"verdict":"FORWARDED","source":{"labels":["reserved:world"]},"destination":{}}"#,
        );
        assert_eq!(r.source.id, EndpointId::Reserved(Reserved::World));
        assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::Unknown));
    }

    #[test]
    fn verdicts_policies_and_camel_case() {
        let r = one(
            r#"{"flow":{"verdict":"AUDIT","trafficDirection":"EGRESS","isReply":false,"destinationNames":["api.example.com"],"egressDeniedBy":[{"name":"deny-all","namespace":"shop"}],"source":{"namespace":"shop","podName":"web-1"}}}"#,
        );
        assert_eq!(r.verdict, Verdict::AuditDenied);
        assert_eq!(r.observation, ObservationPoint::Egress);
        assert_eq!(r.reply, Some(false));
        assert_eq!(r.destination_dns.as_deref(), Some("api.example.com"));
        assert_eq!(r.policy.as_deref(), Some("shop/deny-all"));
        assert_eq!(
            r.source.id,
            EndpointId::Pod {
                namespace: "shop".into(),
                name: "web-1".into()
            }
        );
        let r = one(
            r#"{"verdict":"DROPPED","drop_reason_desc":"CT_MAP_INSERTION_FAILED","source":{}}"#,
        );
        assert_eq!(r.verdict, Verdict::Dropped);
        let r = one(r#"{"verdict":"ERROR","source":{}}"#);
        assert_eq!(r.verdict, Verdict::Error);
        assert!(matches!(
            decode(br#"{"verdict":"MAYBE","source":{}}"#),
            Err(DecodeError::BadValue {
                field: "verdict",
                ..
            })
        ));
        assert_eq!(
            decode(br#"{"IP":{"source":"10.0.0.1"}}"#),
            Err(DecodeError::MissingField("verdict"))
        );
    }

    #[test]
    fn workloads_with_unknown_kind_fall_back_to_pod() {
        let r = one(
            r#"{"verdict":"FORWARDED","source":{"namespace":"ops","pod_name":"dc-1-x","workloads":[{"name":"dc","kind":"DeploymentConfig"}]},"destination":{"namespace":"ops","pod_name":"db-0","workloads":[{"name":"db","kind":"StatefulSet"}],"labels":["k8s:app=db","k8s:io.cilium.k8s.policy.cluster=c","k8s:io.kubernetes.pod.namespace=ops","container:x=y"]}}"#,
        );
        assert_eq!(
            r.source.id,
            EndpointId::Pod {
                namespace: "ops".into(),
                name: "dc-1-x".into()
            }
        );
        let want = WorkloadRef {
            namespace: "ops".into(),
            kind: WorkloadKind::StatefulSet,
            name: "db".into(),
        };
        assert_eq!(r.destination.id, EndpointId::Workload(want));
        assert_eq!(r.destination.labels, labels([("app", "db")]));
    }

    #[test]
    fn skips_and_shapes() {
        assert_eq!(
            decode(br#"{"lost_events":{"source":1,"num_events_lost":3}}"#),
            Ok(Decoded::Skip(SkipReason::HubbleLostEvents))
        );
        assert_eq!(
            decode(br#"{"node_status":{"state_change":1}}"#),
            Ok(Decoded::Skip(SkipReason::HubbleNodeStatus))
        );
        assert!(matches!(
            decode(br#"{"node_name":"n"}"#),
            Err(DecodeError::LineShape { .. })
        ));
        assert!(matches!(
            decode(br#"{"flow":{"verdict":"FORWARDED","l4":{"TCP":{"destination_port":70000}}}}"#),
            Err(DecodeError::BadPort { value: 70000, .. })
        ));
        assert!(matches!(
            decode(br#"{"flow":{"verdict":"FORWARDED","IP":{"source":"10.0.0"}}}"#),
            Err(DecodeError::BadIp {
                field: "IP.source",
                ..
            })
        ));
        assert!(matches!(
            decode(br#"{"flow":{"verdict":"FORWARDED","time":"yesterday"}}"#),
            Err(DecodeError::BadTimestamp { .. })
        ));
    }
}
