//! The walker against the JSON decoder (same record for the same flow, on real captures
//! and on random flows), against prost (merged and unknown fields), and against
//! malformed bytes (never a panic).

use std::fs;

use ne_proto::flow::{
    self as pb, Endpoint, Flow, Ip, Layer4, LostEvent, Policy, Tcp, Workload, layer4,
};
use ne_proto::observer::GetFlowsResponse;
use ne_proto::observer::get_flows_response::ResponseTypes;
use ne_proto::prost::Message;
use ne_proto::prost::encoding::{WireType, encode_key, encode_varint};
use ne_proto::prost_types;
use ne_proto::relay::NodeStatusEvent;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::*;
use crate::{Decoded, SkipReason, hubble};
use ne_flow::flow::{EndpointId, Protocol, Reserved, Verdict, WorkloadKind};

// ---------------------------------------------------------------------------------------
// JSON (as in the captures) -> prost

fn key<'v>(obj: &'v Map<String, Value>, snake: &str) -> Option<&'v Value> {
    obj.get(snake).or_else(|| {
        let mut camel = String::new();
        let mut up = false;
        for c in snake.chars() {
            if c == '_' {
                up = true;
            } else if up {
                camel.extend(c.to_uppercase());
                up = false;
            } else {
                camel.push(c);
            }
        }
        obj.get(&camel)
    })
}

fn string(obj: &Map<String, Value>, k: &str) -> String {
    key(obj, k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn strings(obj: &Map<String, Value>, k: &str) -> Vec<String> {
    key(obj, k)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn uint(obj: &Map<String, Value>, k: &str) -> u64 {
    match key(obj, k) {
        Some(Value::Number(n)) => n.as_u64().unwrap(),
        Some(Value::String(s)) => s.parse().unwrap(),
        _ => 0,
    }
}

/// An enum given by name or number. Names this subset does not declare (drop reasons
/// other than the policy ones, most observation points) become 9999: a value the record
/// rules treat like any other unlisted one.
fn enumeration(obj: &Map<String, Value>, k: &str, by_name: fn(&str) -> Option<i32>) -> i32 {
    match key(obj, k) {
        Some(Value::Number(n)) => i32::try_from(n.as_i64().unwrap()).unwrap(),
        Some(Value::String(s)) => by_name(s).unwrap_or(9999),
        _ => 0,
    }
}

fn object<'v>(obj: &'v Map<String, Value>, k: &str) -> Option<&'v Map<String, Value>> {
    key(obj, k).and_then(Value::as_object)
}

fn timestamp(obj: &Map<String, Value>, k: &str) -> Option<prost_types::Timestamp> {
    let text = key(obj, k)?.as_str()?;
    let t = ne_flow::time::parse_rfc3339(text).unwrap();
    let (seconds, nanos) = ne_flow::time::split(t);
    Some(prost_types::Timestamp {
        seconds,
        nanos: nanos as i32,
    })
}

fn endpoint_from_json(e: &Map<String, Value>) -> Endpoint {
    Endpoint {
        id: uint(e, "ID") as u32,
        identity: uint(e, "identity") as u32,
        namespace: string(e, "namespace"),
        labels: strings(e, "labels"),
        pod_name: string(e, "pod_name"),
        workloads: key(e, "workloads")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|w| {
                let w = w.as_object().unwrap();
                Workload {
                    name: string(w, "name"),
                    kind: string(w, "kind"),
                }
            })
            .collect(),
        cluster_name: string(e, "cluster_name"),
    }
}

fn policies_from_json(obj: &Map<String, Value>, k: &str) -> Vec<Policy> {
    key(obj, k)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| {
            let p = p.as_object().unwrap();
            Policy {
                name: string(p, "name"),
                namespace: string(p, "namespace"),
            }
        })
        .collect()
}

fn flow_from_json(f: &Map<String, Value>) -> Flow {
    let ports = |p: &Map<String, Value>| {
        (
            uint(p, "source_port") as u32,
            uint(p, "destination_port") as u32,
        )
    };
    let l4 = object(f, "l4").map(|l4| {
        let protocol = if let Some(p) = object(l4, "TCP") {
            let (source_port, destination_port) = ports(p);
            Some(layer4::Protocol::Tcp(Tcp {
                source_port,
                destination_port,
                flags: None,
            }))
        } else if let Some(p) = object(l4, "UDP") {
            let (source_port, destination_port) = ports(p);
            Some(layer4::Protocol::Udp(pb::Udp {
                source_port,
                destination_port,
            }))
        } else if let Some(p) = object(l4, "SCTP") {
            let (source_port, destination_port) = ports(p);
            Some(layer4::Protocol::Sctp(pb::Sctp {
                source_port,
                destination_port,
            }))
        } else if let Some(p) = object(l4, "ICMPv4") {
            Some(layer4::Protocol::IcmPv4(pb::IcmPv4 {
                r#type: uint(p, "type") as u32,
                code: uint(p, "code") as u32,
            }))
        } else {
            object(l4, "ICMPv6").map(|p| {
                layer4::Protocol::IcmPv6(pb::IcmPv6 {
                    r#type: uint(p, "type") as u32,
                    code: uint(p, "code") as u32,
                })
            })
        };
        Layer4 { protocol }
    });
    Flow {
        time: timestamp(f, "time"),
        verdict: enumeration(f, "verdict", |s| {
            pb::Verdict::from_str_name(s).map(|v| v as i32)
        }),
        drop_reason: uint(f, "drop_reason") as u32,
        ip: object(f, "IP").map(|ip| Ip {
            source: string(ip, "source"),
            destination: string(ip, "destination"),
            ip_version: enumeration(ip, "ipVersion", |s| {
                pb::IpVersion::from_str_name(s).map(|v| v as i32)
            }),
        }),
        l4,
        source: object(f, "source").map(endpoint_from_json),
        destination: object(f, "destination").map(endpoint_from_json),
        r#type: enumeration(f, "Type", |s| {
            pb::FlowType::from_str_name(s).map(|v| v as i32)
        }),
        node_name: string(f, "node_name"),
        source_names: strings(f, "source_names"),
        destination_names: strings(f, "destination_names"),
        reply: key(f, "reply").and_then(Value::as_bool).unwrap_or(false),
        event_type: object(f, "event_type").map(|e| pb::CiliumEventType {
            r#type: uint(e, "type") as i32,
            sub_type: uint(e, "sub_type") as i32,
        }),
        source_service: None,
        destination_service: None,
        traffic_direction: enumeration(f, "traffic_direction", |s| {
            pb::TrafficDirection::from_str_name(s).map(|v| v as i32)
        }),
        trace_observation_point: enumeration(f, "trace_observation_point", |s| {
            pb::TraceObservationPoint::from_str_name(s).map(|v| v as i32)
        }),
        drop_reason_desc: enumeration(f, "drop_reason_desc", |s| {
            pb::DropReason::from_str_name(s).map(|v| v as i32)
        }),
        is_reply: key(f, "is_reply").and_then(Value::as_bool),
        uuid: string(f, "uuid"),
        egress_denied_by: policies_from_json(f, "egress_denied_by"),
        ingress_denied_by: policies_from_json(f, "ingress_denied_by"),
    }
}

/// A capture line (`GetFlowsResponse` or bare `Flow` as JSON) as a prost message.
fn response_from_json(line: &str) -> GetFlowsResponse {
    let v: Value = serde_json::from_str(line).unwrap();
    let top = v.as_object().unwrap();
    let (flow, wrapper) = match object(top, "flow") {
        Some(inner) => (inner, true),
        None => (top, false),
    };
    GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(flow_from_json(flow))),
        node_name: if wrapper {
            string(top, "node_name")
        } else {
            String::new()
        },
        time: if wrapper {
            timestamp(top, "time")
        } else {
            None
        },
    }
}

fn capture_lines() -> Vec<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let files = [
        format!("{root}/../../testdata/real/hubble-flows.jsonl"),
        format!("{root}/../../examples/flows/hubble.jsonl"),
    ];
    let mut out = Vec::new();
    for path in files {
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for (i, line) in text.lines().enumerate() {
            if !line.trim().is_empty() {
                out.push((format!("{path}:{}", i + 1), line.to_owned()));
            }
        }
    }
    out
}

#[test]
fn captures_decode_to_the_same_records_as_json() {
    let mut records = 0;
    for (at, line) in capture_lines() {
        let Ok(Decoded::Record(want)) = hubble::decode(line.as_bytes()) else {
            panic!("{at}: the JSON decoder gives no record");
        };
        let bytes = response_from_json(&line).encode_to_vec();
        assert_eq!(
            decode_response(&bytes),
            Ok(HubbleMessage::Flow(want)),
            "{at}"
        );
        records += 1;
    }
    // 46 real Hubble captures and 152 example flows.
    assert_eq!(records, 198);
}

// ---------------------------------------------------------------------------------------
// prost -> JSON, for random flows

fn endpoint_json(e: &Endpoint) -> Value {
    json!({
        "ID": e.id,
        "identity": e.identity,
        "namespace": e.namespace,
        "labels": e.labels,
        "pod_name": e.pod_name,
        "workloads": e.workloads.iter().map(|w| json!({"name": w.name, "kind": w.kind})).collect::<Vec<_>>(),
    })
}

fn time_json(t: &prost_types::Timestamp) -> Value {
    json!({"seconds": t.seconds, "nanos": t.nanos})
}

/// A flow as Go's `encoding/json` would write it (enums as numbers, every field).
fn flow_json(f: &Flow) -> Value {
    let mut o = Map::new();
    if let Some(t) = &f.time {
        o.insert("time".into(), time_json(t));
    }
    o.insert("verdict".into(), json!(f.verdict));
    o.insert("drop_reason".into(), json!(f.drop_reason));
    if let Some(ip) = &f.ip {
        o.insert(
            "IP".into(),
            json!({"source": ip.source, "destination": ip.destination}),
        );
    }
    if let Some(l4) = &f.l4 {
        let ports = |s: u32, d: u32| json!({"source_port": s, "destination_port": d});
        let v = match &l4.protocol {
            Some(layer4::Protocol::Tcp(p)) => {
                json!({"TCP": ports(p.source_port, p.destination_port)})
            }
            Some(layer4::Protocol::Udp(p)) => {
                json!({"UDP": ports(p.source_port, p.destination_port)})
            }
            Some(layer4::Protocol::Sctp(p)) => {
                json!({"SCTP": ports(p.source_port, p.destination_port)})
            }
            Some(layer4::Protocol::IcmPv4(_)) => json!({"ICMPv4": {}}),
            Some(layer4::Protocol::IcmPv6(_)) => json!({"ICMPv6": {}}),
            None => json!({}),
        };
        o.insert("l4".into(), v);
    }
    if let Some(e) = &f.source {
        o.insert("source".into(), endpoint_json(e));
    }
    if let Some(e) = &f.destination {
        o.insert("destination".into(), endpoint_json(e));
    }
    o.insert("node_name".into(), json!(f.node_name));
    o.insert("destination_names".into(), json!(f.destination_names));
    o.insert("reply".into(), json!(f.reply));
    o.insert("traffic_direction".into(), json!(f.traffic_direction));
    o.insert("drop_reason_desc".into(), json!(f.drop_reason_desc));
    if let Some(r) = f.is_reply {
        o.insert("is_reply".into(), json!(r));
    }
    let policies = |l: &[Policy]| {
        l.iter()
            .map(|p| json!({"name": p.name, "namespace": p.namespace}))
            .collect::<Vec<_>>()
    };
    o.insert(
        "egress_denied_by".into(),
        json!(policies(&f.egress_denied_by)),
    );
    o.insert(
        "ingress_denied_by".into(),
        json!(policies(&f.ingress_denied_by)),
    );
    Value::Object(o)
}

fn response_json(r: &GetFlowsResponse) -> String {
    let mut o = Map::new();
    if let Some(ResponseTypes::Flow(f)) = &r.response_types {
        o.insert("flow".into(), flow_json(f));
    }
    o.insert("node_name".into(), json!(r.node_name));
    if let Some(t) = &r.time {
        o.insert("time".into(), time_json(t));
    }
    Value::Object(o).to_string()
}

fn pick(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(pool).prop_map(str::to_owned)
}

fn arb_endpoint() -> impl Strategy<Value = Endpoint> {
    let labels = prop::collection::vec(
        pick(&[
            "k8s:app=web",
            "k8s:app=db",
            "k8s:io.kubernetes.pod.namespace=shop",
            "k8s:io.cilium.k8s.policy.cluster=default",
            "reserved:world",
            "reserved:world-ipv4",
            "reserved:host",
            "reserved:kube-apiserver",
            "reserved:remote-node",
            "reserved:health",
            "cidr:1.2.3.4/32",
            "container:x=y",
            "",
        ]),
        0..5,
    );
    let workload = (
        pick(&["web", "db", ""]),
        pick(&["Deployment", "StatefulSet", "DeploymentConfig", ""]),
    )
        .prop_map(|(name, kind)| Workload { name, kind });
    let identity = prop_oneof![
        0u32..12,
        256u32..300,
        (1u32 << 24)..(1 << 24) + 5,
        any::<u32>()
    ];
    (
        identity,
        pick(&["shop", "data", ""]),
        labels,
        pick(&["web-1", "db-0", ""]),
        prop::collection::vec(workload, 0..3),
    )
        .prop_map(
            |(identity, namespace, labels, pod_name, workloads)| Endpoint {
                identity,
                namespace,
                labels,
                pod_name,
                workloads,
                ..Default::default()
            },
        )
}

fn arb_l4() -> impl Strategy<Value = Option<Layer4>> {
    let port = prop_oneof![0u32..70_000, any::<u32>()];
    let protocol = prop_oneof![
        (port.clone(), port.clone()).prop_map(|(s, d)| Some(layer4::Protocol::Tcp(Tcp {
            source_port: s,
            destination_port: d,
            flags: None
        }))),
        (port.clone(), port.clone()).prop_map(|(s, d)| Some(layer4::Protocol::Udp(pb::Udp {
            source_port: s,
            destination_port: d
        }))),
        (port.clone(), port).prop_map(|(s, d)| Some(layer4::Protocol::Sctp(pb::Sctp {
            source_port: s,
            destination_port: d
        }))),
        Just(Some(layer4::Protocol::IcmPv4(pb::IcmPv4::default()))),
        Just(Some(layer4::Protocol::IcmPv6(pb::IcmPv6::default()))),
        Just(None),
    ];
    prop::option::of(protocol.prop_map(|protocol| Layer4 { protocol }))
}

fn arb_time() -> impl Strategy<Value = Option<prost_types::Timestamp>> {
    prop::option::of(
        (any::<i64>(), any::<i32>())
            .prop_map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
    )
}

fn arb_policies() -> impl Strategy<Value = Vec<Policy>> {
    prop::collection::vec(
        (pick(&["deny-all", ""]), pick(&["shop", "-", ""]))
            .prop_map(|(name, namespace)| Policy { name, namespace }),
        0..2,
    )
}

fn arb_flow() -> impl Strategy<Value = Flow> {
    let ip = prop::option::of(
        (
            pick(&["10.0.0.1", "fd00::1", "", "10.0.0"]),
            pick(&["1.2.3.4", "10.0.2.9", ""]),
        )
            .prop_map(|(source, destination)| Ip {
                source,
                destination,
                ip_version: 0,
            }),
    );
    (
        (
            arb_time(),
            prop_oneof![0i32..8, any::<i32>()],
            prop_oneof![Just(0u32), Just(133), Just(181), any::<u32>()],
            ip,
            arb_l4(),
            prop::option::of(arb_endpoint()),
            prop::option::of(arb_endpoint()),
        ),
        (
            pick(&["default/worker-1", ""]),
            prop::collection::vec(pick(&["api.example.com", ""]), 0..2),
            any::<bool>(),
            prop_oneof![0i32..3, any::<i32>()],
            prop_oneof![Just(0i32), Just(133), Just(181), Just(132)],
            prop::option::of(any::<bool>()),
            arb_policies(),
            arb_policies(),
        ),
    )
        .prop_map(
            |(
                (time, verdict, drop_reason, ip, l4, source, destination),
                (node_name, destination_names, reply, direction, desc, is_reply, egress, ingress),
            )| Flow {
                time,
                verdict,
                drop_reason,
                ip,
                l4,
                source,
                destination,
                node_name,
                destination_names,
                reply,
                traffic_direction: direction,
                drop_reason_desc: desc,
                is_reply,
                egress_denied_by: egress,
                ingress_denied_by: ingress,
                ..Default::default()
            },
        )
}

fn arb_response() -> impl Strategy<Value = GetFlowsResponse> {
    (arb_flow(), pick(&["default/worker-2", ""]), arb_time()).prop_map(|(flow, node_name, time)| {
        GetFlowsResponse {
            response_types: Some(ResponseTypes::Flow(flow)),
            node_name,
            time,
        }
    })
}

/// What the JSON decoder makes of a line, in the walker's terms.
fn via_json(line: &str) -> Result<HubbleMessage, DecodeError> {
    match hubble::decode(line.as_bytes())? {
        Decoded::Record(r) => Ok(HubbleMessage::Flow(r)),
        other => panic!("{line}: {other:?}"),
    }
}

proptest! {
    /// Any flow, valid or not (bad addresses, ports past 65535, unknown verdicts), gives
    /// the same record or the same error on both paths.
    #[test]
    fn random_flows_decode_like_json(response in arb_response()) {
        let line = response_json(&response);
        prop_assert_eq!(decode_response(&response.encode_to_vec()), via_json(&line), "{}", line);
    }

    /// Random bytes never panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_response(&bytes);
        let _ = decode_flow_message(&bytes);
    }

    /// Valid messages with bytes flipped, removed or inserted never panic.
    #[test]
    fn mutated_messages_never_panic(
        response in arb_response(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
    ) {
        let mut bytes = response.encode_to_vec();
        for (at, byte, op) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] ^= byte.max(1),
                1 => { bytes.remove(i); }
                _ => bytes.insert(i, byte),
            }
        }
        let _ = decode_response(&bytes);
    }

    /// Merged and split encodings (an endpoint sent in two pieces, as protobuf allows)
    /// decode like prost's merged message.
    #[test]
    fn split_endpoints_merge_like_prost(a in arb_endpoint(), b in arb_endpoint(), flow in arb_flow()) {
        let mut bytes = flow.encode_to_vec();
        for part in [&a, &b] {
            encode_key(9, WireType::LengthDelimited, &mut bytes);
            encode_varint(part.encoded_len() as u64, &mut bytes);
            part.encode(&mut bytes).unwrap();
        }
        let merged = Flow::decode(bytes.as_slice()).unwrap();
        prop_assert_eq!(decode_flow_message(&bytes), decode_flow_message(&merged.encode_to_vec()));
    }
}

#[test]
fn truncated_captures_never_panic() {
    for (at, line) in capture_lines() {
        let bytes = response_from_json(&line).encode_to_vec();
        for cut in 0..bytes.len() {
            // A cut at a field boundary is a valid shorter message; anywhere else an error.
            let _ = decode_response(&bytes[..cut]);
        }
        assert!(decode_response(&bytes).is_ok(), "{at}");
    }
}

// ---------------------------------------------------------------------------------------
// Variants, unknown fields, malformed input

#[test]
fn lost_events_and_node_status() {
    let lost = GetFlowsResponse {
        response_types: Some(ResponseTypes::LostEvents(LostEvent {
            source: pb::LostEventSource::HubbleRingBuffer as i32,
            num_events_lost: 1 << 40,
            cpu: Some(-1),
            first: Some(prost_types::Timestamp::default()),
            last: None,
        })),
        node_name: "worker-1".into(),
        ..Default::default()
    };
    assert_eq!(
        decode_response(&lost.encode_to_vec()),
        Ok(HubbleMessage::LostEvents {
            source: LostEventSource::HubbleRingBuffer,
            count: 1 << 40
        })
    );
    // The JSON decoder counts the same response as a skip.
    assert_eq!(
        hubble::decode(br#"{"lost_events":{"source":"HUBBLE_RING_BUFFER","num_events_lost":3}}"#),
        Ok(Decoded::Skip(SkipReason::HubbleLostEvents))
    );
    let unknown_source = GetFlowsResponse {
        response_types: Some(ResponseTypes::LostEvents(LostEvent {
            source: 17,
            num_events_lost: 2,
            ..Default::default()
        })),
        ..Default::default()
    };
    assert_eq!(
        decode_response(&unknown_source.encode_to_vec()),
        Ok(HubbleMessage::LostEvents {
            source: LostEventSource::Unknown,
            count: 2
        })
    );
    assert_eq!(
        LostEventSource::from_number(1).as_str(),
        "perf_event_ring_buffer"
    );

    let status = GetFlowsResponse {
        response_types: Some(ResponseTypes::NodeStatus(NodeStatusEvent {
            state_change: ne_proto::relay::NodeState::NodeUnavailable as i32,
            node_names: vec!["default/worker-2".into(), "default/worker-3".into()],
            message: String::new(),
        })),
        ..Default::default()
    };
    assert_eq!(
        decode_response(&status.encode_to_vec()),
        Ok(HubbleMessage::NodeStatus(NodeStatus {
            state: NodeState::Unavailable,
            node_names: vec!["default/worker-2".into(), "default/worker-3".into()],
            message: None,
        }))
    );
    // No member at all: a response type this version does not know.
    let bare = GetFlowsResponse {
        node_name: "worker-1".into(),
        ..Default::default()
    };
    assert_eq!(
        decode_response(&bare.encode_to_vec()),
        Ok(HubbleMessage::Other)
    );
    assert_eq!(decode_response(&[]), Ok(HubbleMessage::Other));
}

fn sample_flow() -> Flow {
    Flow {
        verdict: pb::Verdict::Dropped as i32,
        drop_reason_desc: pb::DropReason::PolicyDeny as i32,
        ip: Some(Ip {
            source: "10.0.1.5".into(),
            destination: "10.0.2.9".into(),
            ip_version: 1,
        }),
        l4: Some(Layer4 {
            protocol: Some(layer4::Protocol::Tcp(Tcp {
                source_port: 40_000,
                destination_port: 5432,
                flags: None,
            })),
        }),
        source: Some(Endpoint {
            identity: 300,
            namespace: "shop".into(),
            labels: vec!["k8s:app=api".into()],
            pod_name: "api-1".into(),
            ..Default::default()
        }),
        destination: Some(Endpoint {
            identity: 301,
            namespace: "data".into(),
            labels: vec![
                "k8s:app=db".into(),
                "k8s:io.kubernetes.pod.namespace=data".into(),
            ],
            pod_name: "db-0".into(),
            workloads: vec![Workload {
                name: "db".into(),
                kind: "StatefulSet".into(),
            }],
            ..Default::default()
        }),
        traffic_direction: pb::TrafficDirection::Ingress as i32,
        ingress_denied_by: vec![Policy {
            name: "deny-all".into(),
            namespace: "data".into(),
        }],
        ..Default::default()
    }
}

#[test]
fn a_flow_maps_through_the_hubble_rules() {
    let response = GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(sample_flow())),
        node_name: "default/worker-3".into(),
        time: Some(prost_types::Timestamp {
            seconds: 10,
            nanos: 5,
        }),
    };
    let Ok(HubbleMessage::Flow(r)) = decode_response(&response.encode_to_vec()) else {
        panic!("no flow");
    };
    assert_eq!(r.verdict, Verdict::PolicyDenied);
    assert_eq!(r.protocol, Protocol::Tcp);
    assert_eq!((r.source_port, r.destination_port), (40_000, 5432));
    assert_eq!(r.policy.as_deref(), Some("data/deny-all"));
    assert_eq!(r.node.as_deref(), Some("default/worker-3"));
    assert_eq!(r.time, Some(ne_flow::flow::Timestamp(10_000_000_005)));
    assert_eq!(r.reply, None);
    assert_eq!(
        r.destination.id,
        EndpointId::Workload(ne_flow::flow::WorkloadRef {
            namespace: "data".into(),
            kind: WorkloadKind::StatefulSet,
            name: "db".into(),
        })
    );
    assert_eq!(r.destination.labels, ne_flow::flow::labels([("app", "db")]));
    assert_eq!(r.destination.ip, "10.0.2.9".parse().ok());
    // The bare Flow decodes the same, less what only the response carried.
    let bare = decode_flow_message(&sample_flow().encode_to_vec()).unwrap();
    assert_eq!((bare.node, bare.time), (None, None));
    assert_eq!(bare.destination, r.destination);
}

/// Appends a field of every wire type under an unused number.
fn unknown_fields(buf: &mut Vec<u8>) {
    encode_key(4000, WireType::Varint, buf);
    encode_varint(u64::MAX, buf);
    encode_key(4001, WireType::SixtyFourBit, buf);
    buf.extend_from_slice(&[7; 8]);
    encode_key(4002, WireType::LengthDelimited, buf);
    buf.extend_from_slice(&[3, 0xff, 0xfe, 0x00]); // not UTF-8: never read
    encode_key(4003, WireType::StartGroup, buf);
    encode_key(1, WireType::Varint, buf);
    encode_varint(1, buf);
    encode_key(4003, WireType::EndGroup, buf);
    encode_key(4004, WireType::ThirtyTwoBit, buf);
    buf.extend_from_slice(&[9; 4]);
}

fn with_unknown(message: &impl Message) -> Vec<u8> {
    let mut buf = Vec::new();
    unknown_fields(&mut buf);
    message.encode(&mut buf).unwrap();
    unknown_fields(&mut buf);
    buf
}

fn len_field(number: u32, body: &[u8], buf: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, buf);
    encode_varint(body.len() as u64, buf);
    buf.extend_from_slice(body);
}

#[test]
fn unknown_fields_are_skipped_at_every_level() {
    let flow = sample_flow();
    let want = decode_flow_message(&flow.encode_to_vec()).unwrap();
    // Rebuild the flow with unknown fields inside the IP, l4, TCP, endpoint, workload and
    // policy messages and around the flow itself.
    let mut bare = flow.clone();
    bare.ip = None;
    bare.l4 = None;
    bare.destination = None;
    bare.ingress_denied_by.clear();
    let mut body = with_unknown(&bare);
    len_field(5, &with_unknown(flow.ip.as_ref().unwrap()), &mut body);
    let Some(layer4::Protocol::Tcp(tcp)) = flow.l4.as_ref().unwrap().protocol else {
        unreachable!()
    };
    let mut l4 = Vec::new();
    len_field(1, &with_unknown(&tcp), &mut l4);
    unknown_fields(&mut l4);
    len_field(6, &l4, &mut body);
    let mut dest = flow.destination.clone().unwrap();
    let workload = dest.workloads.remove(0);
    let mut dest_body = with_unknown(&dest);
    len_field(6, &with_unknown(&workload), &mut dest_body);
    len_field(9, &dest_body, &mut body);
    len_field(21005, &with_unknown(&flow.ingress_denied_by[0]), &mut body);
    assert_eq!(decode_flow_message(&body), Ok(want.clone()));

    let mut response = Vec::new();
    unknown_fields(&mut response);
    len_field(1, &body, &mut response);
    unknown_fields(&mut response);
    assert_eq!(decode_response(&response), Ok(HubbleMessage::Flow(want)));
}

#[test]
fn oneof_last_member_wins_and_scalars_keep_the_last_value() {
    let flow_bytes = GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(sample_flow())),
        ..Default::default()
    }
    .encode_to_vec();
    let lost_bytes = GetFlowsResponse {
        response_types: Some(ResponseTypes::LostEvents(LostEvent {
            source: 1,
            num_events_lost: 9,
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec();
    let both = [flow_bytes.clone(), lost_bytes.clone()].concat();
    assert_eq!(
        GetFlowsResponse::decode(both.as_slice())
            .unwrap()
            .response_types,
        GetFlowsResponse::decode(lost_bytes.as_slice())
            .unwrap()
            .response_types
    );
    assert!(matches!(
        decode_response(&both),
        Ok(HubbleMessage::LostEvents { count: 9, .. })
    ));
    let both = [lost_bytes, flow_bytes].concat();
    assert!(matches!(decode_response(&both), Ok(HubbleMessage::Flow(_))));

    // A repeated scalar keeps its last value: verdict FORWARDED after DROPPED.
    let mut bytes = sample_flow().encode_to_vec();
    encode_key(2, WireType::Varint, &mut bytes);
    encode_varint(1, &mut bytes);
    assert_eq!(
        decode_flow_message(&bytes).unwrap().verdict,
        Verdict::Forwarded
    );
}

fn protobuf_error(r: Result<HubbleMessage, DecodeError>) -> (&'static str, &'static str) {
    match r {
        Err(DecodeError::Protobuf { field, reason, .. }) => (field, reason),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_messages_are_errors() {
    let good = GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(sample_flow())),
        ..Default::default()
    }
    .encode_to_vec();
    // Cut inside the flow: its length now runs past the end.
    assert_eq!(
        protobuf_error(decode_response(&good[..good.len() - 3])),
        ("GetFlowsResponse", "length past the end")
    );
    // A known field with the wrong wire type: verdict as a string.
    let mut flow = Vec::new();
    len_field(2, b"FORWARDED", &mut flow);
    let mut r = Vec::new();
    len_field(1, &flow, &mut r);
    assert_eq!(
        protobuf_error(decode_response(&r)),
        ("Flow.verdict", "wrong wire type for a known field")
    );
    // Invalid UTF-8 in a label the record keeps.
    let mut endpoint = Vec::new();
    len_field(4, b"k8s:app=\xff", &mut endpoint);
    let mut flow = Vec::new();
    encode_key(2, WireType::Varint, &mut flow);
    encode_varint(1, &mut flow);
    len_field(8, &endpoint, &mut flow);
    let err = decode_flow_message(&flow).unwrap_err();
    assert_eq!(
        err,
        DecodeError::Protobuf {
            field: "Endpoint.labels",
            offset: 14,
            reason: "invalid utf-8 in a string"
        }
    );
    assert_eq!(err.kind(), "protobuf");
    // A truncated varint in the wrapper.
    assert_eq!(
        protobuf_error(decode_response(&[0xc0, 0x3e, 0x80])),
        ("GetFlowsResponse", "truncated varint")
    );
}

#[test]
fn reserved_identities_without_labels() {
    let mut flow = sample_flow();
    flow.source = Some(Endpoint {
        identity: 6,
        ..Default::default()
    });
    flow.destination = Some(Endpoint {
        identity: (1 << 24) + 3,
        ..Default::default()
    });
    let r = decode_flow_message(&flow.encode_to_vec()).unwrap();
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::RemoteNode));
    assert_eq!(
        r.destination.id,
        EndpointId::External("10.0.2.9".parse().unwrap())
    );
}

// ---------------------------------------------------------------------------------------
// The fast path (`record_response`) against `decode_response` + `record_flow`

use ne_flow::edge::Provider;
use ne_flow::table::{EdgeSnapshot, FlowTable, RecordOutcome};

fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(EdgeSnapshot::key);
    s
}

fn mutate(mut bytes: Vec<u8>, edits: Vec<(prop::sample::Index, u8, u8)>) -> Vec<u8> {
    for (at, byte, op) in edits {
        if bytes.is_empty() {
            break;
        }
        let i = at.index(bytes.len());
        match op {
            0 => bytes[i] ^= byte.max(1),
            1 => {
                bytes.remove(i);
            }
            _ => bytes.insert(i, byte),
        }
    }
    bytes
}

/// Messages of every kind: random flows (mostly skipped), flows that teach an edge, split
/// endpoints, lost events and node status, and corrupted bytes.
fn arb_message() -> BoxedStrategy<Vec<u8>> {
    let learnable = || {
        (arb_response(), 1i32..3, any::<bool>())
            .prop_map(|(mut r, dir, tcp)| {
                if let Some(ResponseTypes::Flow(f)) = &mut r.response_types {
                    f.verdict = 1;
                    f.is_reply = None;
                    f.reply = false;
                    f.traffic_direction = dir;
                    if tcp {
                        f.l4 = Some(Layer4 {
                            protocol: Some(layer4::Protocol::Tcp(Tcp {
                                source_port: 40_000,
                                destination_port: 8080,
                                flags: None,
                            })),
                        });
                    }
                }
                r.encode_to_vec()
            })
            .boxed()
    };
    let split = (arb_endpoint(), arb_flow())
        .prop_map(|(extra, flow)| {
            let mut bytes = flow.encode_to_vec();
            encode_key(8, WireType::LengthDelimited, &mut bytes);
            encode_varint(extra.encoded_len() as u64, &mut bytes);
            extra.encode(&mut bytes).unwrap();
            let mut response = Vec::new();
            encode_key(1, WireType::LengthDelimited, &mut response);
            encode_varint(bytes.len() as u64, &mut response);
            response.extend_from_slice(&bytes);
            response
        })
        .boxed();
    let other = prop_oneof![
        Just(GetFlowsResponse {
            response_types: Some(ResponseTypes::LostEvents(LostEvent {
                source: 2,
                num_events_lost: 7,
                ..Default::default()
            })),
            ..Default::default()
        }),
        Just(GetFlowsResponse {
            response_types: Some(ResponseTypes::NodeStatus(NodeStatusEvent {
                state_change: 2,
                node_names: vec!["worker-3".into()],
                message: "gone".into(),
            })),
            ..Default::default()
        }),
        Just(GetFlowsResponse::default()),
    ]
    .prop_map(|r| r.encode_to_vec())
    .boxed();
    let edits = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4);
    prop_oneof![
        3 => arb_response().prop_map(|r| r.encode_to_vec()).boxed(),
        6 => learnable(),
        1 => split,
        1 => other,
        2 => (learnable(), edits).prop_map(|(bytes, edits)| mutate(bytes, edits)).boxed(),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Message for message, the fast path answers like the slow path (errors, skips,
    /// outcomes), and the two tables end up identical: same entries with the same first
    /// edge, counts and times. Each batch is recorded twice, so the second pass is all
    /// hits; a small capacity makes tables fill up and drop.
    #[test]
    fn fast_path_records_like_the_slow_path(
        messages in prop::collection::vec(arb_message(), 1..24),
        provider in prop::sample::select(&[Provider::Cilium, Provider::Calico, Provider::Istio][..]),
        capacity in prop_oneof![Just(1usize << 10), 0usize..4],
    ) {
        let (fast, slow) = (FlowTable::new(capacity), FlowTable::new(capacity));
        let mut decoder = HubbleDecoder::new();
        for bytes in messages.iter().chain(&messages) {
            prop_assert_eq!(
                decoder.record(&fast, bytes, provider),
                record_exact(&slow, bytes, provider)
            );
        }
        prop_assert_eq!(sorted(&fast), sorted(&slow));
        prop_assert_eq!(fast.dropped(), slow.dropped());
    }
}

#[test]
fn fast_path_learns_the_captures_like_the_slow_path() {
    let (fast, slow) = (FlowTable::new(1 << 10), FlowTable::new(1 << 10));
    let mut decoder = HubbleDecoder::new();
    let mut recorded = 0;
    for (_, line) in capture_lines() {
        let bytes = response_from_json(&line).encode_to_vec();
        for _ in 0..2 {
            let got = decoder.record(&fast, &bytes, Provider::Cilium);
            assert_eq!(got, record_exact(&slow, &bytes, Provider::Cilium), "{line}");
            recorded += usize::from(matches!(
                got,
                Ok(HubbleRecorded::Flow { outcome: Ok(_), .. })
            ));
        }
    }
    assert!(recorded > 0 && !fast.is_empty());
    assert_eq!(sorted(&fast), sorted(&slow));
}

/// Whether the fast path's walk takes a message (its endpoints included), rather than
/// leaving it to the slow path.
fn lean_walk_takes(bytes: &[u8]) -> bool {
    scan::response(bytes, &mut scan::blank())
        .and_then(|walk| {
            walk.endpoints
                .into_iter()
                .flatten()
                .try_for_each(|body| scan::endpoint(body, &mut scan::blank_endpoint()))
        })
        .is_ok()
}

/// Whether a flow's addresses are absent, empty or valid.
fn addresses_parse(r: &GetFlowsResponse) -> bool {
    let ok = |a: &str| a.is_empty() || a.parse::<std::net::IpAddr>().is_ok();
    match &r.response_types {
        Some(ResponseTypes::Flow(Flow { ip: Some(ip), .. })) => {
            ok(&ip.source) && ok(&ip.destination)
        }
        _ => true,
    }
}

/// Whether a flow names a denying policy (which the lean walk leaves to the slow path).
fn names_a_policy(r: &GetFlowsResponse) -> bool {
    matches!(&r.response_types, Some(ResponseTypes::Flow(f))
        if !f.egress_denied_by.is_empty() || !f.ingress_denied_by.is_empty())
}

proptest! {
    /// The lean walk takes every flow as an encoder writes it, unless it names a denying
    /// policy, holds a negative number (a ten-byte varint) or an address that is not one
    /// (an error the slow path reports): the fast path is the common path, not a rarely
    /// taken branch.
    #[test]
    fn the_lean_walk_takes_encoded_flows(mut r in arb_response()) {
        let non_negative = |t: &mut Option<prost_types::Timestamp>| {
            if let Some(t) = t {
                t.seconds = t.seconds.unsigned_abs() as i64 >> 1;
                t.nanos = t.nanos.rem_euclid(1_000_000_000);
            }
        };
        non_negative(&mut r.time);
        if let Some(ResponseTypes::Flow(f)) = &mut r.response_types {
            non_negative(&mut f.time);
            f.verdict = f.verdict.rem_euclid(8);
            f.traffic_direction = f.traffic_direction.rem_euclid(3);
        }
        let bytes = r.encode_to_vec();
        prop_assert_eq!(lean_walk_takes(&bytes), !names_a_policy(&r) && addresses_parse(&r));
    }
}

#[test]
fn the_lean_walk_takes_the_captures() {
    let mut taken = 0;
    for (_, line) in capture_lines() {
        let r = response_from_json(&line);
        if !matches!(r.response_types, Some(ResponseTypes::Flow(_))) {
            continue;
        }
        let bytes = r.encode_to_vec();
        let fast = lean_walk_takes(&bytes);
        assert_eq!(fast, !names_a_policy(&r), "{line}");
        taken += usize::from(fast);
    }
    assert!(taken > 0);
}

/// A flow over a known edge is still rejected whole when any string the slow path reads
/// is not UTF-8, a label or a name the edge key does not use included.
#[test]
fn the_fast_path_rejects_invalid_utf8_the_slow_path_rejects() {
    let mut flow = sample_flow();
    flow.verdict = pb::Verdict::Forwarded as i32;
    flow.drop_reason_desc = 0;
    flow.ingress_denied_by.clear();
    flow.node_name = "node-A".into();
    flow.destination_names = vec!["name-B.example".into()];
    flow.destination
        .as_mut()
        .unwrap()
        .labels
        .push("k8s:tier=C".into());
    let response = GetFlowsResponse {
        response_types: Some(ResponseTypes::Flow(flow)),
        node_name: "relay-D".into(),
        time: None,
    };
    let good = response.encode_to_vec();
    let table = FlowTable::new(16);
    let mut decoder = HubbleDecoder::new();
    assert!(matches!(
        decoder.record(&table, &good, Provider::Cilium),
        Ok(HubbleRecorded::Flow {
            outcome: Ok(RecordOutcome::Inserted),
            ..
        })
    ));
    for marker in [b"=C", b"-A", b"-B", b"-D"] {
        let at = good.windows(2).position(|w| w == marker).unwrap() + 1;
        let mut bad = good.clone();
        bad[at] = 0xff;
        let fast = decoder.record(&table, &bad, Provider::Cilium);
        assert!(
            matches!(
                fast,
                Err(DecodeError::Protobuf {
                    reason: "invalid utf-8 in a string",
                    ..
                })
            ),
            "{marker:?}: {fast:?}"
        );
        assert_eq!(fast, decode_response(&bad).map(|_| HubbleRecorded::Other));
    }
    assert_eq!(table.snapshot()[0].count, 1);
}

/// The `hubble_pb` fuzz target's seeds (written where `NE_FUZZ_SEEDS` points, by
/// `fuzz/run`): every capture's flow as the target reads it, a provider byte then the
/// message behind its 2-byte length.
#[test]
fn captures_encode_as_fuzz_seeds() {
    let dir = std::env::var_os("NE_FUZZ_SEEDS").map(|d| std::path::Path::new(&d).join("hubble_pb"));
    let lines = capture_lines();
    for (i, (at, line)) in lines.iter().enumerate() {
        let bytes = response_from_json(line).encode_to_vec();
        assert!(decode_response(&bytes).is_ok(), "{at}");
        let len = u16::try_from(bytes.len()).expect("a capture message under 64 KiB");
        let mut seed = vec![(i % 3) as u8];
        seed.extend_from_slice(&len.to_le_bytes());
        seed.extend_from_slice(&bytes);
        if let Some(dir) = &dir {
            fs::create_dir_all(dir).unwrap();
            fs::write(dir.join(format!("capture-{i:04}")), seed).unwrap();
        }
    }
    assert!(!lines.is_empty());
}
