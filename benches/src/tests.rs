use std::collections::BTreeMap;

use ne_dataplanes::{LineDecoder, decode_lines};
use ne_flow::edge::EdgeSkip;
use ne_flow::flow::{EndpointId, FlowRecord, WorkloadKind};
use ne_flow::table::FlowTable;

use super::*;

fn records(shape: Shape, bytes: &[u8]) -> Vec<FlowRecord> {
    let mut out = Vec::new();
    let stats = decode_lines(shape.format(), bytes, |r| out.push(r));
    assert_eq!(stats.errors, 0, "{shape:?}: {:?}", stats.first_errors);
    assert_eq!(stats.skipped_total(), 0, "{shape:?}: {:?}", stats.skipped);
    out
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let config = Config::default();
    let other = Config {
        seed: 7,
        ..Config::default()
    };
    for shape in Shape::ALL {
        let a = generate(&config, shape, 300);
        assert_eq!(a, generate(&config, shape, 300), "{shape:?}");
        assert_ne!(a, generate(&other, shape, 300), "{shape:?}");
        assert_eq!(a.iter().filter(|&&b| b == b'\n').count(), 300);
    }
}

#[test]
fn every_line_decodes_to_a_record() {
    let config = Config::default();
    for shape in Shape::ALL {
        let bytes = generate(&config, shape, 2_000);
        assert_eq!(records(shape, &bytes).len(), 2_000, "{shape:?}");
    }
}

#[test]
fn cri_framing_wraps_the_same_payloads() {
    let config = Config::default();
    let plain = generate(&config, Shape::ZtunnelText, 500);
    let framed = generate(&config, Shape::ZtunnelTextCri, 500);
    let mut decoder = LineDecoder::new(Format::Ztunnel);
    let lines = |b: &'static [u8]| b.split(|&c| c == b'\n').filter(|l| !l.is_empty());
    for (p, f) in lines(plain.leak()).zip(lines(framed.leak())) {
        let prefix = f.len() - p.len();
        assert_eq!(&f[prefix..], p);
        assert!(f[..prefix].ends_with(b"Z stdout F "));
        assert_eq!(
            decoder.feed(f),
            ne_dataplanes::decode_line(Format::Ztunnel, p)
        );
    }
}

/// Edges and skip reasons per shape: the mix the pipeline bench runs on.
#[test]
fn records_teach_edges_with_the_expected_skips() {
    let config = Config::default();
    for shape in Shape::ALL {
        let table = FlowTable::new(1 << 20);
        let mut skips = BTreeMap::<EdgeSkip, usize>::new();
        let recs = records(shape, &generate(&config, shape, 3_000));
        for r in &recs {
            if let Err(s) = table.record_flow(r, shape.format().provider()) {
                *skips.entry(s).or_default() += 1;
            }
        }
        let learned = recs.len() - skips.values().sum::<usize>();
        // Hubble: a third are replies; ztunnel: only inbound with a mesh identity.
        assert!(learned * 100 >= recs.len() * 40, "{shape:?}: {skips:?}");
        let allowed: &[EdgeSkip] = match shape {
            Shape::HubbleJson => &[EdgeSkip::Reply],
            Shape::GoldmaneJson => &[],
            _ => &[EdgeSkip::DirectionNotLearned, EdgeSkip::NoIdentity],
        };
        assert!(
            skips.keys().all(|s| allowed.contains(s)),
            "{shape:?}: {skips:?}"
        );
        // Hot keys: the top 1 % of edges carry over a fifth of the connections.
        let mut hits: Vec<u64> = table.snapshot().iter().map(|s| s.count).collect();
        hits.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = hits[..hits.len() / 100].iter().sum();
        let all: u64 = hits.iter().sum();
        assert!(top * 5 > all, "{shape:?}: top 1 % of keys: {top} of {all}");
    }
}

#[test]
fn endpoints_cover_workloads_pods_and_external_peers() {
    let recs = records(
        Shape::HubbleJson,
        &generate(&Config::default(), Shape::HubbleJson, 3_000),
    );
    let ends = || recs.iter().flat_map(|r| [&r.source.id, &r.destination.id]);
    assert!(ends().any(|id| matches!(id, EndpointId::External(_))));
    assert!(ends().any(|id| matches!(id, EndpointId::Pod { .. })));
    for kind in [
        WorkloadKind::Deployment,
        WorkloadKind::StatefulSet,
        WorkloadKind::DaemonSet,
    ] {
        assert!(
            ends().any(|id| matches!(id, EndpointId::Workload(w) if w.kind == kind)),
            "{kind:?}"
        );
    }
    assert!(recs.iter().any(|r| r.destination_dns.is_some()));
    let gm = records(
        Shape::GoldmaneJson,
        &generate(&Config::default(), Shape::GoldmaneJson, 500),
    );
    // Goldmane names owners through aggregated names and labels.
    assert!(gm.iter().all(|r| !matches!(
        (&r.source.id, &r.destination.id),
        (EndpointId::PodGroup { .. }, _) | (_, EndpointId::PodGroup { .. })
    )));
}

/// Share of draws that land on the top 1 % of conversations.
fn top_share(zipf_exponent: f64) -> f64 {
    let mut g = Generator::new(&Config {
        zipf_exponent,
        ..Config::default()
    });
    let top = g.conversations() / 100;
    let draws = 20_000;
    let hits = (0..draws).filter(|_| g.pick() < top).count();
    hits as f64 / draws as f64
}

#[test]
fn zipf_exponent_controls_hot_keys() {
    let (uniform, zipf) = (top_share(0.0), top_share(1.0));
    assert!(uniform < 0.03, "{uniform}");
    assert!(zipf > 0.25, "{zipf}");
}

#[test]
fn tiny_configs_still_generate_decodable_lines() {
    let tiny = Config {
        namespaces: 0,
        workloads: 0,
        peers_per_workload: 0,
        external_peers: 0,
        ..Config::default()
    };
    for shape in Shape::ALL {
        assert_eq!(records(shape, &generate(&tiny, shape, 50)).len(), 50);
    }
}

mod pb {
    use ne_dataplanes::hubble_pb::{HubbleMessage, decode_response};
    use ne_flow::edge::{Provider, derive};
    use ne_flow::flow::{EndpointId, Timestamp};
    use ne_flow::table::FlowTable;
    use ne_proto::prost::Message;

    use crate::{Config, Generator};

    fn responses(seed: u64, n: usize) -> Vec<Vec<u8>> {
        let mut g = Generator::new(&Config::default());
        g.reseed(seed);
        (0..n)
            .map(|i| {
                g.hubble_response(Timestamp(1_000 + i as i64), "default/node-0")
                    .encode_to_vec()
            })
            .collect()
    }

    #[test]
    fn same_seed_same_bytes_and_every_response_is_a_flow_at_its_time() {
        let a = responses(1, 500);
        assert_eq!(a, responses(1, 500));
        assert_ne!(a, responses(2, 500));
        let table = FlowTable::new(10_000);
        let mut replies = 0;
        for (i, bytes) in a.iter().enumerate() {
            let HubbleMessage::Flow(flow) = decode_response(bytes).unwrap() else {
                panic!("response {i} is not a flow");
            };
            assert_eq!(flow.time, Some(Timestamp(1_000 + i as i64)));
            match table.record_flow(&flow, Provider::Cilium) {
                Ok(_) => {}
                Err(_) => replies += 1,
            }
        }
        // About one flow in three is a reply (not learned); the rest are edges of the
        // generated cluster's conversations.
        assert!((100..250).contains(&replies), "{replies} replies");
        assert!(table.len() > 100, "{} edges", table.len());
    }

    #[test]
    fn new_peers_are_new_external_edges() {
        let mut g = Generator::new(&Config::default());
        let table = FlowTable::new(10_000);
        for n in 0..300u64 {
            let bytes = g
                .hubble_new_peer(n, Timestamp(5), "default/node-1")
                .encode_to_vec();
            let HubbleMessage::Flow(flow) = decode_response(&bytes).unwrap() else {
                panic!("not a flow");
            };
            let edge = derive(&flow, Provider::Cilium).unwrap();
            assert!(matches!(edge.peer.id, EndpointId::External(_)), "{edge:?}");
            assert_eq!(edge.port, 443);
            table.record(&edge, Timestamp(5), 1);
        }
        assert_eq!(table.len(), 300, "every churn flow is a distinct edge");
    }
}
