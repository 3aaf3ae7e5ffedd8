//! Test data: Hubble's JSON captures turned into the protobuf `GetFlowsResponse`s a Hubble
//! server would send, and the offline pipeline's result on the same file.
//!
//! The conversion covers every field the decoders read (the same ground as the walker's
//! own equivalence test in `shared/dataplanes/src/hubble_pb/tests.rs`); fields they ignore
//! (ethernet, summary, trace reason) are left out, as a subset server would.

use ne_dataplanes::{Format, decode_lines};
use ne_flow::edge::Provider;
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_proto::flow::{self as pb, Endpoint, Flow, Ip, Layer4, LostEvent, Policy, Workload, layer4};
use ne_proto::observer::GetFlowsResponse;
use ne_proto::observer::get_flows_response::ResponseTypes;
use ne_proto::prost_types::Timestamp;
use serde_json::{Map, Value};

type Obj = Map<String, Value>;

/// The example capture every test streams (152 flows of a small shop).
pub fn example_capture() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/flows/hubble.jsonl"
    );
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each line of `capture` as a `GetFlowsResponse`.
pub fn responses(capture: &str) -> Vec<GetFlowsResponse> {
    capture
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let v: Value = serde_json::from_str(line).unwrap();
            let top = v.as_object().unwrap();
            match obj(top, "flow") {
                Some(flow) => GetFlowsResponse {
                    response_types: Some(ResponseTypes::Flow(flow_from_json(flow))),
                    node_name: string(top, "node_name"),
                    time: time(top, "time"),
                },
                None => GetFlowsResponse {
                    response_types: Some(ResponseTypes::Flow(flow_from_json(top))),
                    ..GetFlowsResponse::default()
                },
            }
        })
        .collect()
}

/// A `LostEvents` response.
pub fn lost_events(source: pb::LostEventSource, count: u64) -> GetFlowsResponse {
    GetFlowsResponse {
        response_types: Some(ResponseTypes::LostEvents(LostEvent {
            source: source as i32,
            num_events_lost: count,
            ..LostEvent::default()
        })),
        node_name: "default/worker-1".into(),
        time: None,
    }
}

/// What `ne-leader learn` makes of `capture`: the FlowTable entries (sorted by key), the
/// number of records decoded and how many of them taught no edge.
#[derive(Debug)]
pub struct Offline {
    pub edges: Vec<EdgeSnapshot>,
    pub records: u64,
    pub not_learned: u64,
}

pub fn offline(capture: &str) -> Offline {
    let table = FlowTable::new(1_000_000);
    let mut not_learned = 0;
    let stats = decode_lines(Format::HubbleJson, capture.as_bytes(), |record| {
        if table.record_flow(&record, Provider::Cilium).is_err() {
            not_learned += 1;
        }
    });
    assert_eq!(stats.errors, 0, "the capture decodes cleanly");
    Offline {
        edges: sorted(table.snapshot()),
        records: stats.records,
        not_learned,
    }
}

/// Snapshot entries in key order.
pub fn sorted(mut edges: Vec<EdgeSnapshot>) -> Vec<EdgeSnapshot> {
    edges.sort_by_key(EdgeSnapshot::key);
    edges
}

// ---------------------------------------------------------------------------------------
// JSON -> prost. Field names in protojson's proto spelling or lowerCamelCase; enums by name
// or number.

fn get<'v>(o: &'v Obj, snake: &str) -> Option<&'v Value> {
    o.get(snake).or_else(|| {
        let mut camel = String::new();
        let mut parts = snake.split('_');
        camel.push_str(parts.next().unwrap_or_default());
        for p in parts {
            let mut cs = p.chars();
            if let Some(c) = cs.next() {
                camel.extend(c.to_uppercase());
                camel.push_str(cs.as_str());
            }
        }
        o.get(&camel)
    })
}

fn obj<'v>(o: &'v Obj, k: &str) -> Option<&'v Obj> {
    get(o, k).and_then(Value::as_object)
}

fn string(o: &Obj, k: &str) -> String {
    get(o, k).and_then(Value::as_str).unwrap_or_default().into()
}

fn strings(o: &Obj, k: &str) -> Vec<String> {
    get(o, k)
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap().into()).collect())
        .unwrap_or_default()
}

fn uint(o: &Obj, k: &str) -> u32 {
    match get(o, k) {
        Some(Value::Number(n)) => u32::try_from(n.as_u64().unwrap()).unwrap(),
        Some(Value::String(s)) => s.parse().unwrap(),
        _ => 0,
    }
}

/// An enum by name or number. Names the subset does not declare (most observation points
/// and drop reasons) become 9999, a value the decoders treat like any unlisted one.
fn enumeration(o: &Obj, k: &str, by_name: fn(&str) -> Option<i32>) -> i32 {
    match get(o, k) {
        Some(Value::Number(n)) => i32::try_from(n.as_i64().unwrap()).unwrap(),
        Some(Value::String(s)) => by_name(s).unwrap_or(9999),
        _ => 0,
    }
}

fn time(o: &Obj, k: &str) -> Option<Timestamp> {
    let t = ne_flow::time::parse_rfc3339(get(o, k)?.as_str()?).unwrap();
    let (seconds, nanos) = ne_flow::time::split(t);
    Some(Timestamp {
        seconds,
        nanos: i32::try_from(nanos).unwrap(),
    })
}

fn endpoint(e: &Obj) -> Endpoint {
    let workloads = get(e, "workloads").and_then(Value::as_array);
    Endpoint {
        id: uint(e, "ID"),
        identity: uint(e, "identity"),
        namespace: string(e, "namespace"),
        labels: strings(e, "labels"),
        pod_name: string(e, "pod_name"),
        workloads: workloads
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

fn policies(o: &Obj, k: &str) -> Vec<Policy> {
    let list = get(o, k).and_then(Value::as_array);
    list.into_iter()
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

fn layer4(l4: &Obj) -> Layer4 {
    let ports = |p: &Obj| (uint(p, "source_port"), uint(p, "destination_port"));
    let icmp = |p: &Obj| (uint(p, "type"), uint(p, "code"));
    let protocol = if let Some(p) = obj(l4, "TCP") {
        let (source_port, destination_port) = ports(p);
        Some(layer4::Protocol::Tcp(pb::Tcp {
            source_port,
            destination_port,
            flags: None,
        }))
    } else if let Some(p) = obj(l4, "UDP") {
        let (source_port, destination_port) = ports(p);
        Some(layer4::Protocol::Udp(pb::Udp {
            source_port,
            destination_port,
        }))
    } else if let Some(p) = obj(l4, "SCTP") {
        let (source_port, destination_port) = ports(p);
        Some(layer4::Protocol::Sctp(pb::Sctp {
            source_port,
            destination_port,
        }))
    } else if let Some(p) = obj(l4, "ICMPv4") {
        let (r#type, code) = icmp(p);
        Some(layer4::Protocol::IcmPv4(pb::IcmPv4 { r#type, code }))
    } else {
        obj(l4, "ICMPv6").map(|p| {
            let (r#type, code) = icmp(p);
            layer4::Protocol::IcmPv6(pb::IcmPv6 { r#type, code })
        })
    };
    Layer4 { protocol }
}

fn flow_from_json(f: &Obj) -> Flow {
    Flow {
        time: time(f, "time"),
        verdict: enumeration(f, "verdict", |s| {
            pb::Verdict::from_str_name(s).map(|v| v as i32)
        }),
        drop_reason: uint(f, "drop_reason"),
        ip: obj(f, "IP").map(|ip| Ip {
            source: string(ip, "source"),
            destination: string(ip, "destination"),
            ip_version: enumeration(ip, "ipVersion", |s| {
                pb::IpVersion::from_str_name(s).map(|v| v as i32)
            }),
        }),
        l4: obj(f, "l4").map(layer4),
        source: obj(f, "source").map(endpoint),
        destination: obj(f, "destination").map(endpoint),
        r#type: enumeration(f, "Type", |s| {
            pb::FlowType::from_str_name(s).map(|v| v as i32)
        }),
        node_name: string(f, "node_name"),
        source_names: strings(f, "source_names"),
        destination_names: strings(f, "destination_names"),
        reply: get(f, "reply").and_then(Value::as_bool).unwrap_or(false),
        event_type: obj(f, "event_type").map(|e| pb::CiliumEventType {
            r#type: uint(e, "type") as i32,
            sub_type: uint(e, "sub_type") as i32,
        }),
        traffic_direction: enumeration(f, "traffic_direction", |s| {
            pb::TrafficDirection::from_str_name(s).map(|v| v as i32)
        }),
        trace_observation_point: enumeration(f, "trace_observation_point", |s| {
            pb::TraceObservationPoint::from_str_name(s).map(|v| v as i32)
        }),
        drop_reason_desc: enumeration(f, "drop_reason_desc", |s| {
            pb::DropReason::from_str_name(s).map(|v| v as i32)
        }),
        is_reply: get(f, "is_reply").and_then(Value::as_bool),
        uuid: string(f, "uuid"),
        egress_denied_by: policies(f, "egress_denied_by"),
        ingress_denied_by: policies(f, "ingress_denied_by"),
        ..Flow::default()
    }
}
