//! Cilium Hubble flows as JSON: `hubble observe -o json|jsonpb`, the Hubble exporter, and
//! Go `encoding/json` dumps of Hubble API v1's `GetFlowsResponse` and `Flow`.
//!
//! A line is a `GetFlowsResponse` (`{"flow":{…},"node_name":…,"time":…}`), `{"flow":…}`
//! alone, or a bare `Flow`. `lost_events` and `node_status` responses are counted skips.
//! Field names are accepted in protojson's `UseProtoNames` spelling (`traffic_direction`)
//! and in lowerCamelCase (`trafficDirection`); enums as names or numbers.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

mod fields;

pub(crate) use fields::*;

use super::common::{CowStr, EnumVal, TimeVal};
use super::{DecodeError, Decoded, SkipReason};
use ne_flow::flow::FlowRecord;

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

#[cfg(test)]
mod tests {
    use super::*;
    use ne_flow::flow::{
        EndpointId, ObservationPoint, Protocol, Reserved, Verdict, WorkloadKind, WorkloadRef,
        labels,
    };

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
