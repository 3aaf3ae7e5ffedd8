//! The agent's hot path: Hubble `GetFlowsResponse` bytes → edge → `FlowTable`.
//!
//! Side by side in one run, on the same bytes:
//! - `walker`: our borrowed protobuf walk (`hubble_pb::decode_response`), alone and with
//!   edge derivation + `FlowTable::record_flow` ("pipeline");
//! - `walker/fast`: the agent's path, `HubbleDecoder::record`: a lean walk straight into the
//!   table, endpoints found again by their bytes, the key borrowed from the bytes; only an
//!   edge the table lacks is built owned;
//! - `prost`: a plain prost decode into owned structs, alone and mapped to the same
//!   `FlowRecord` and recorded the same way — what a straightforward agent would do.
//!
//! Input: 20 000 seeded flows between 200 workloads in 10 namespaces, each as Cilium's
//! node server writes it (workloads, labels, trace event, direction, reply flag), in two
//! traffic shapes: `node`, 800 conversations drawn with Zipf weights (a node's traffic: a
//! few hot pairs, a long tail), and `scattered`, a new client, server and port for every
//! flow (almost every flow a new edge: the worst case).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_dataplanes::hubble_pb::{HubbleDecoder, HubbleMessage, decode_response};
use ne_flow::edge::Provider;
use ne_flow::flow::{
    Endpoint, EndpointId, FlowRecord, ObservationPoint, Protocol, Timestamp, Verdict, WorkloadKind,
    WorkloadRef, labels,
};
use ne_flow::table::FlowTable;
use ne_proto::flow::{self as pb, layer4};
use ne_proto::observer::{GetFlowsResponse, get_flows_response};
use ne_proto::prost::Message;
use ne_proto::prost_types::Timestamp as PbTimestamp;

const FLOWS: usize = 20_000;
const WORKLOADS: u64 = 200;

/// splitmix64: a fixed seed gives the same bytes every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Zipf-like: the square of a uniform pick favours small indices.
    fn skewed(&mut self, n: u64) -> u64 {
        let u = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        ((u * u) * n as f64) as u64
    }
}

fn endpoint(w: u64, local: bool) -> pb::Endpoint {
    let ns = format!("team-{}", w % 10);
    let app = format!("svc-{w}");
    pb::Endpoint {
        id: if local { 1000 + w as u32 } else { 0 },
        identity: 20_000 + w as u32,
        namespace: ns.clone(),
        labels: vec![
            format!("k8s:app={app}"),
            format!("k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name={ns}"),
            "k8s:io.cilium.k8s.policy.cluster=default".to_owned(),
            format!("k8s:io.cilium.k8s.policy.serviceaccount={app}"),
            format!("k8s:io.kubernetes.pod.namespace={ns}"),
            "k8s:tier=backend".to_owned(),
        ],
        pod_name: format!("{app}-7d4f9c6b8d-k2x7p"),
        workloads: if local {
            vec![pb::Workload {
                name: app,
                kind: "Deployment".to_owned(),
            }]
        } else {
            vec![]
        },
        cluster_name: "default".to_owned(),
    }
}

/// Who talks to whom.
#[derive(Clone, Copy)]
enum Traffic {
    /// A node's traffic: this many conversations (client, server, port), each flow drawn
    /// from them with Zipf weights 1/(rank + 1), as in `ne_benches::Config`.
    Conversations(usize),
    /// Every flow draws its own client, server and port: almost every flow is a new edge
    /// (a worst case for the table and for the endpoint cache).
    Scattered,
}

impl Traffic {
    fn name(self) -> &'static str {
        match self {
            Traffic::Conversations(_) => "node",
            Traffic::Scattered => "scattered",
        }
    }
}

fn generate(traffic: Traffic) -> Vec<Vec<u8>> {
    let mut rng = Rng(42);
    const PORTS: [u32; 5] = [8080, 5432, 443, 53, 9090];
    let conversations: Vec<(u64, u64, u32)> = match traffic {
        Traffic::Conversations(n) => (0..n)
            .map(|_| {
                let (src, dst) = (rng.skewed(WORKLOADS), rng.skewed(WORKLOADS));
                (src, dst, PORTS[(rng.next() % 5) as usize])
            })
            .collect(),
        Traffic::Scattered => Vec::new(),
    };
    let mut cumulative = Vec::with_capacity(conversations.len());
    let mut total = 0.0;
    for rank in 0..conversations.len() {
        total += 1.0 / (rank + 1) as f64;
        cumulative.push(total);
    }
    (0..FLOWS)
        .map(|i| {
            let (src, dst, port) = if conversations.is_empty() {
                let (src, dst) = (rng.skewed(WORKLOADS), rng.skewed(WORKLOADS));
                (src, dst, PORTS[(rng.next() % 5) as usize])
            } else {
                let u = (rng.next() % 1_000_000) as f64 / 1_000_000.0 * total;
                let rank = cumulative.partition_point(|&c| c < u);
                conversations[rank.min(conversations.len() - 1)]
            };
            let egress = rng.next().is_multiple_of(2);
            let reply = rng.next().is_multiple_of(4);
            let time = PbTimestamp {
                seconds: 1_764_583_200 + i as i64,
                nanos: (rng.next() % 1_000_000_000) as i32,
            };
            let flow = pb::Flow {
                time: Some(time),
                verdict: pb::Verdict::Forwarded as i32,
                ip: Some(pb::Ip {
                    source: format!("10.244.{}.{}", src % 250, src % 200 + 2),
                    destination: format!("10.244.{}.{}", dst % 250, dst % 200 + 2),
                    ip_version: 1,
                }),
                l4: Some(pb::Layer4 {
                    protocol: Some(layer4::Protocol::Tcp(pb::Tcp {
                        source_port: 32768 + (rng.next() % 28000) as u32,
                        destination_port: port,
                        flags: Some(pb::TcpFlags {
                            syn: true,
                            ..Default::default()
                        }),
                    })),
                }),
                source: Some(endpoint(src, egress)),
                destination: Some(endpoint(dst, !egress)),
                r#type: 1,
                node_name: "default/worker-1".to_owned(),
                event_type: Some(pb::CiliumEventType {
                    r#type: 4,
                    sub_type: 0,
                }),
                traffic_direction: if egress { 2 } else { 1 },
                trace_observation_point: if egress { 5 } else { 101 },
                is_reply: Some(reply),
                uuid: format!("{:016x}-{:016x}", rng.next(), rng.next()),
                ..Default::default()
            };
            GetFlowsResponse {
                node_name: "default/worker-1".to_owned(),
                time: Some(time),
                response_types: Some(get_flows_response::ResponseTypes::Flow(flow)),
            }
            .encode_to_vec()
        })
        .collect()
}

/// The plain way: prost's owned structs mapped to a `FlowRecord`.
fn record_of(flow: &pb::Flow) -> FlowRecord {
    let ip = flow.ip.as_ref();
    let endpoint = |ep: &Option<pb::Endpoint>, addr: Option<&String>| {
        let Some(ep) = ep else {
            return Endpoint::new(EndpointId::Reserved(ne_flow::flow::Reserved::Unknown));
        };
        let id = match ep.workloads.first() {
            Some(w) => EndpointId::Workload(WorkloadRef {
                namespace: ep.namespace.as_str().into(),
                kind: WorkloadKind::parse(&w.kind).unwrap_or(WorkloadKind::Pod),
                name: w.name.as_str().into(),
            }),
            None => EndpointId::Pod {
                namespace: ep.namespace.as_str().into(),
                name: ep.pod_name.as_str().into(),
            },
        };
        let pod_labels = ep
            .labels
            .iter()
            .filter_map(|l| l.strip_prefix("k8s:"))
            .filter(|l| {
                !l.starts_with("io.cilium.") && !l.starts_with("io.kubernetes.pod.namespace")
            })
            .filter_map(|l| l.split_once('='));
        Endpoint::new(id)
            .with_ip(addr.and_then(|a| a.parse().ok()))
            .with_labels(labels(pod_labels))
    };
    let (protocol, sport, dport) = match flow.l4.as_ref().and_then(|l| l.protocol) {
        Some(layer4::Protocol::Tcp(t)) => (Protocol::Tcp, t.source_port, t.destination_port),
        Some(layer4::Protocol::Udp(u)) => (Protocol::Udp, u.source_port, u.destination_port),
        _ => (Protocol::Other, 0, 0),
    };
    FlowRecord {
        time: flow
            .time
            .as_ref()
            .map(|t| Timestamp(t.seconds * 1_000_000_000 + i64::from(t.nanos))),
        node: Some(flow.node_name.as_str().into()),
        source: endpoint(&flow.source, ip.map(|i| &i.source)),
        destination: endpoint(&flow.destination, ip.map(|i| &i.destination)),
        protocol,
        source_port: sport as u16,
        destination_port: dport as u16,
        observation: match flow.traffic_direction {
            1 => ObservationPoint::Ingress,
            2 => ObservationPoint::Egress,
            _ => ObservationPoint::Unknown,
        },
        verdict: if flow.verdict == 1 {
            Verdict::Forwarded
        } else {
            Verdict::Dropped
        },
        reply: flow.is_reply,
        destination_dns: flow.destination_names.first().map(|n| n.as_str().into()),
        policy: None,
        connections: 1,
    }
}

/// All three pipelines must learn the same edges from the same bytes, or the comparison
/// means nothing.
fn same_edges(messages: &[Vec<u8>]) {
    let (walker, prost, fast) = (
        FlowTable::new(1 << 20),
        FlowTable::new(1 << 20),
        FlowTable::new(1 << 20),
    );
    let mut decoder = HubbleDecoder::new();
    for m in messages {
        let _ = decoder.record(&fast, m, Provider::Cilium);
        if let Ok(HubbleMessage::Flow(f)) = decode_response(m) {
            let _ = walker.record_flow(&f, Provider::Cilium);
        }
        if let Ok(GetFlowsResponse {
            response_types: Some(get_flows_response::ResponseTypes::Flow(f)),
            ..
        }) = GetFlowsResponse::decode(m.as_slice())
        {
            let _ = prost.record_flow(&record_of(&f), Provider::Cilium);
        }
    }
    let keys = |t: &FlowTable| {
        let mut k: Vec<_> = t.snapshot().iter().map(|s| (s.key(), s.count)).collect();
        k.sort();
        k
    };
    assert!(!walker.is_empty());
    assert_eq!(keys(&walker), keys(&prost), "walker and prost disagree");
    let full = |t: &FlowTable| {
        let mut s = t.snapshot();
        s.sort_by_key(|s| s.key());
        s
    };
    assert_eq!(full(&fast), full(&walker), "fast path and walker disagree");
}

fn bench(c: &mut Criterion) {
    for traffic in [Traffic::Conversations(800), Traffic::Scattered] {
        bench_traffic(c, traffic);
    }
}

fn bench_traffic(c: &mut Criterion, traffic: Traffic) {
    let messages = generate(traffic);
    same_edges(&messages);
    let mut group = c.benchmark_group(format!("hubble_pb/{}", traffic.name()));
    group.throughput(Throughput::Elements(messages.len() as u64));
    group.bench_function(BenchmarkId::new("walker", "decode"), |b| {
        b.iter(|| {
            for m in &messages {
                black_box(decode_response(m).ok());
            }
        });
    });
    group.bench_function(BenchmarkId::new("walker", "pipeline"), |b| {
        let table = FlowTable::new(1 << 20);
        b.iter(|| {
            for m in &messages {
                if let Ok(HubbleMessage::Flow(flow)) = decode_response(m) {
                    let _ = black_box(table.record_flow(&flow, Provider::Cilium));
                }
            }
        });
    });
    group.bench_function(BenchmarkId::new("walker", "fast"), |b| {
        let table = FlowTable::new(1 << 20);
        let mut decoder = HubbleDecoder::new();
        b.iter(|| {
            for m in &messages {
                let _ = black_box(decoder.record(&table, m, Provider::Cilium));
            }
        });
    });
    group.bench_function(BenchmarkId::new("prost", "decode"), |b| {
        b.iter(|| {
            for m in &messages {
                black_box(GetFlowsResponse::decode(m.as_slice()).ok());
            }
        });
    });
    group.bench_function(BenchmarkId::new("prost", "pipeline"), |b| {
        let table = FlowTable::new(1 << 20);
        b.iter(|| {
            for m in &messages {
                if let Ok(GetFlowsResponse {
                    response_types: Some(get_flows_response::ResponseTypes::Flow(f)),
                    ..
                }) = GetFlowsResponse::decode(m.as_slice())
                {
                    let _ = black_box(table.record_flow(&record_of(&f), Provider::Cilium));
                }
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
