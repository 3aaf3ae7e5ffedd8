//! The generator's Hubble protobuf output: one [`Event`] as the `GetFlowsResponse` a Cilium
//! node's Hubble server streams (the same fields as the JSON shape in `render`, which
//! follows `examples/flows/*`). The load harness (`ne-load`) serves these over real gRPC;
//! the time of each flow is given by the caller (the harness stamps the send time, so an
//! agent's lag is the real delay from the server to its FlowTable).

use std::net::Ipv4Addr;

use ne_flow::flow::Timestamp;
use ne_proto::flow::{self as pb, layer4};
use ne_proto::observer::{GetFlowsResponse, get_flows_response};
use ne_proto::prost_types::Timestamp as PbTimestamp;

use super::{End, Event, Generator, Side};
use crate::render::{ext_name, fnv};

/// Hubble's `TrafficDirection`.
const INGRESS: i32 = 1;
const EGRESS: i32 = 2;
/// Hubble's `TraceObservationPoint`: `FROM_ENDPOINT`, `TO_ENDPOINT`.
const FROM_ENDPOINT: i32 = 5;
const TO_ENDPOINT: i32 = 101;

fn pb_time(t: Timestamp) -> PbTimestamp {
    PbTimestamp {
        seconds: t.0.div_euclid(1_000_000_000),
        nanos: t.0.rem_euclid(1_000_000_000) as i32,
    }
}

impl Generator {
    /// Re-seeds the draws (not the cluster): generators built from one [`crate::Config`]
    /// and re-seeded differently see the same cluster and conversations, as the nodes of
    /// one cluster do, but draw their own flows.
    pub fn reseed(&mut self, seed: u64) {
        self.rng = crate::SplitMix::new(seed);
    }

    /// The next flow (a reply one time in three) as Hubble's `GetFlowsResponse`, observed
    /// at `time` on node `node`.
    pub fn hubble_response(&mut self, time: Timestamp, node: &str) -> GetFlowsResponse {
        let mut e = self.event(false, true);
        e.time = time;
        self.hubble_pb(&e, node)
    }

    /// A flow that teaches an edge no other flow does: workload `n % workloads` (not
    /// CoreDNS) calls the `n`-th address of 100.64.0.0/10 on TCP/443 (churn: a new
    /// external peer). Distinct `n` below 2^22 give distinct edges.
    pub fn hubble_new_peer(&mut self, n: u64, time: Timestamp, node: &str) -> GetFlowsResponse {
        let w = 1 + (n as usize) % (self.workloads.len() - 1);
        let r = self.rng.below(self.workloads[w].pods.len());
        let e = Event {
            conv: super::Conversation {
                client: Side::Workload(w),
                server: Side::External(0),
                protocol: "TCP",
                port: 443,
            },
            client: End::Pod(w, r),
            server: End::External(0),
            at_server: false,
            reply: false,
            ephemeral: 32768 + self.rng.below(28_232) as u16,
            time,
        };
        let mut response = self.hubble_pb(&e, node);
        if let Some(get_flows_response::ResponseTypes::Flow(flow)) = &mut response.response_types {
            let ip = Ipv4Addr::from(0x6440_0000 + (n as u32 & 0x3f_ffff));
            if let Some(ip_layer) = &mut flow.ip {
                ip_layer.destination = ip.to_string();
            }
            flow.destination_names = vec![format!("churn-{n}.example.net")];
        }
        response
    }

    fn hubble_pb(&mut self, e: &Event, node: &str) -> GetFlowsResponse {
        let server_is_pod = matches!(e.conv.server, Side::Workload(_));
        // (source, destination, source is the local end, direction, point), as in JSON.
        let (src, dst, local_src, direction, point) = match (e.reply, e.at_server) {
            (true, _) if server_is_pod => (e.server, e.client, true, INGRESS, FROM_ENDPOINT),
            (true, _) => (e.server, e.client, false, EGRESS, TO_ENDPOINT),
            (false, true) => (e.client, e.server, false, INGRESS, TO_ENDPOINT),
            (false, false) => (e.client, e.server, true, EGRESS, FROM_ENDPOINT),
        };
        let (sport, dport) = if e.reply {
            (e.conv.port, e.ephemeral)
        } else {
            (e.ephemeral, e.conv.port)
        };
        let (sport, dport) = (u32::from(sport), u32::from(dport));
        let protocol = if e.conv.protocol == "TCP" {
            layer4::Protocol::Tcp(pb::Tcp {
                source_port: sport,
                destination_port: dport,
                flags: Some(pb::TcpFlags {
                    syn: true,
                    ack: e.reply,
                    ..Default::default()
                }),
            })
        } else {
            layer4::Protocol::Udp(pb::Udp {
                source_port: sport,
                destination_port: dport,
            })
        };
        let destination_names = match (e.reply, e.conv.server) {
            (false, Side::External(x)) => vec![ext_name(x)],
            _ => Vec::new(),
        };
        let r = [self.rng.next_u64(), self.rng.next_u64()];
        let flow = pb::Flow {
            time: Some(pb_time(e.time)),
            uuid: format!(
                "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                r[0] >> 32,
                r[0] >> 16 & 0xffff,
                r[0] & 0xfff,
                0x8000 | (r[1] >> 48 & 0x3fff),
                r[1] & 0xffff_ffff_ffff
            ),
            verdict: pb::Verdict::Forwarded as i32,
            ip: Some(pb::Ip {
                source: self.ip(src).to_string(),
                destination: self.ip(dst).to_string(),
                ip_version: 1,
            }),
            l4: Some(pb::Layer4 {
                protocol: Some(protocol),
            }),
            source: Some(self.pb_endpoint(src, local_src)),
            destination: Some(self.pb_endpoint(dst, !local_src)),
            r#type: 1,
            node_name: node.to_owned(),
            destination_names,
            event_type: Some(pb::CiliumEventType {
                r#type: 4,
                sub_type: 0,
            }),
            traffic_direction: direction,
            trace_observation_point: point,
            is_reply: Some(e.reply),
            ..Default::default()
        };
        GetFlowsResponse {
            node_name: node.to_owned(),
            time: Some(pb_time(e.time)),
            response_types: Some(get_flows_response::ResponseTypes::Flow(flow)),
        }
    }

    /// A Hubble endpoint; only the local end carries an `ID` and `workloads`.
    fn pb_endpoint(&self, end: End, local: bool) -> pb::Endpoint {
        let Some((w, pod)) = self.workload(end) else {
            return pb::Endpoint {
                identity: 2,
                labels: vec!["reserved:world".to_owned()],
                ..Default::default()
            };
        };
        let (ns, o) = (&w.namespace, &w.owner);
        pb::Endpoint {
            id: if local {
                1000 + fnv(&pod.name) % 3000
            } else {
                0
            },
            identity: 20000 + fnv(o) % 40000,
            namespace: ns.clone(),
            labels: vec![
                format!("k8s:app={o}"),
                format!("k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name={ns}"),
                "k8s:io.cilium.k8s.policy.cluster=default".to_owned(),
                format!("k8s:io.cilium.k8s.policy.serviceaccount={o}"),
                format!("k8s:io.kubernetes.pod.namespace={ns}"),
                format!("k8s:tier={}", w.tier),
            ],
            pod_name: pod.name.clone(),
            workloads: if local {
                vec![pb::Workload {
                    name: o.clone(),
                    kind: w.kind.to_owned(),
                }]
            } else {
                Vec::new()
            },
            cluster_name: "default".to_owned(),
        }
    }
}
