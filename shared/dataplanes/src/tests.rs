//! Tests over the real captured files (`testdata/real/`, see its ORIGINS.md), CRI
//! framing built from real lines, malformed input, and a property test that no input
//! panics.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use ne_flow::edge::{self, Provider};
use ne_flow::flow::{
    Endpoint, EndpointId, ObservationPoint, Protocol, Reserved, Timestamp, Verdict, WorkloadKind,
    WorkloadRef, labels,
};

fn real(name: &str) -> String {
    let path = format!("{}/../../testdata/real/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes `input` line by line, keeping each record's 1-based line number.
fn decode_numbered(format: Format, input: &str) -> (Vec<(usize, FlowRecord)>, DecodeStats) {
    let mut dec = LineDecoder::new(format);
    let mut stats = DecodeStats::default();
    let mut out = Vec::new();
    for (i, line) in input.lines().enumerate() {
        if let Some(rec) = stats.account(i + 1, dec.feed(line.as_bytes())) {
            out.push((i + 1, rec));
        }
    }
    stats.add_skip(SkipReason::CriPartialAtEof, dec.finish());
    (out, stats)
}

fn at(recs: &[(usize, FlowRecord)], line: usize) -> &FlowRecord {
    &recs
        .iter()
        .find(|(n, _)| *n == line)
        .unwrap_or_else(|| panic!("no record on line {line}"))
        .1
}

fn pod(ns: &str, name: &str) -> EndpointId {
    EndpointId::Pod {
        namespace: ns.into(),
        name: name.into(),
    }
}

fn workload(ns: &str, kind: WorkloadKind, name: &str) -> EndpointId {
    EndpointId::Workload(WorkloadRef {
        namespace: ns.into(),
        kind,
        name: name.into(),
    })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn count(recs: &[(usize, FlowRecord)], pred: impl Fn(&FlowRecord) -> bool) -> usize {
    recs.iter().filter(|(_, r)| pred(r)).count()
}

/// Derives the edges of all records and checks none of them learned a client port.
/// Returns how many edges there were.
fn assert_no_client_port_edges(recs: &[(usize, FlowRecord)], provider: Provider) -> usize {
    let mut edges = 0;
    for (line, rec) in recs {
        if let Ok(e) = edge::derive(rec, provider) {
            edges += 1;
            assert!(
                !(32768..=60999).contains(&e.port),
                "line {line}: edge on ephemeral port {}",
                e.port
            );
            assert_ne!(e.port, 15008, "line {line}: edge on the HBONE tunnel port");
        }
    }
    edges
}

#[test]
fn hubble_real_file_totals() {
    let (recs, stats) = decode_numbered(Format::HubbleJson, &real("hubble-flows.jsonl"));
    assert_eq!(
        (stats.records, stats.errors, stats.skipped_total()),
        (46, 0, 0),
        "{:?}",
        stats.first_errors
    );
    // ORIGINS.md: FORWARDED 41 + REDIRECTED 2; DROPPED 3 (2 POLICY_DENIED, 1 INVALID_SOURCE_IP).
    assert_eq!(count(&recs, |r| r.verdict == Verdict::Forwarded), 43);
    assert_eq!(count(&recs, |r| r.verdict == Verdict::PolicyDenied), 2);
    assert_eq!(count(&recs, |r| r.verdict == Verdict::Dropped), 1);
    // EGRESS 22, INGRESS 16, no direction 8. TCP 36, UDP 6, ICMPv4 3 + ICMPv6 1.
    assert_eq!(
        count(&recs, |r| r.observation == ObservationPoint::Egress),
        22
    );
    assert_eq!(
        count(&recs, |r| r.observation == ObservationPoint::Ingress),
        16
    );
    assert_eq!(
        count(&recs, |r| r.observation == ObservationPoint::Unknown),
        8
    );
    assert_eq!(count(&recs, |r| r.protocol == Protocol::Tcp), 36);
    assert_eq!(count(&recs, |r| r.protocol == Protocol::Udp), 6);
    assert_eq!(count(&recs, |r| r.protocol == Protocol::Icmp), 4);
    // is_reply true 12 / false 15; legacy reply:true on 17, 5 of them without is_reply.
    assert_eq!(count(&recs, |r| r.reply == Some(true)), 17);
    assert_eq!(count(&recs, |r| r.reply == Some(false)), 15);
    assert_eq!(count(&recs, |r| r.reply.is_none()), 14);
    // `workloads` on 3 records, both ends.
    let is_wl = |id: &EndpointId| matches!(id, EndpointId::Workload(_));
    assert_eq!(
        count(&recs, |r| is_wl(&r.source.id) && is_wl(&r.destination.id)),
        3
    );
    assert_eq!(
        count(&recs, |r| is_wl(&r.source.id) || is_wl(&r.destination.id)),
        3
    );
    // Port 53 on 8 records (either side: DNS answers come from 53).
    assert_eq!(
        count(&recs, |r| r.destination_port == 53 || r.source_port == 53),
        8
    );
    assert!(
        recs.iter()
            .all(|(_, r)| r.time.is_some() && r.node.is_some() && r.connections == 1)
    );
}

#[test]
fn hubble_real_file_records() {
    let (recs, _) = decode_numbered(Format::HubbleJson, &real("hubble-flows.jsonl"));
    // Line 1: legacy reply from a pod to the host; wrapper with node_name and time.
    let r = at(&recs, 1);
    assert_eq!(r.source.id, pod("bookinfo", "reviews-v1-545db77b95-s6jb8"));
    assert_eq!(
        r.source.labels,
        labels([
            ("app", "reviews"),
            ("security.istio.io/tlsMode", "istio"),
            ("version", "v1")
        ])
    );
    assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::Host));
    assert_eq!(r.reply, Some(true));
    assert_eq!(r.time, Some(Timestamp(1_623_862_333_136_834_446)));
    assert_eq!(
        r.node.as_deref(),
        Some("gke-ilya-otel-demo-1-ilya-otel-demo-1-6114bb84-zr1l")
    );
    assert_eq!((r.source_port, r.destination_port), (15020, 42044));
    // Line 8: egress to the world with its address.
    assert_eq!(
        at(&recs, 8).destination.id,
        EndpointId::External(ip("35.246.31.234"))
    );
    // Line 26/27: `reserved:world` on a named pod (L7 proxy record) is that pod.
    assert_eq!(
        at(&recs, 26).destination.id,
        pod("bookinfo", "details-v1-79f774bdb9-m4j4k")
    );
    assert_eq!(
        at(&recs, 27).source.id,
        pod("bookinfo", "details-v1-79f774bdb9-m4j4k")
    );
    // Line 19: labels but no pod name: unknown, labels kept.
    let r = at(&recs, 19);
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Unknown));
    assert!(
        r.source
            .labels
            .iter()
            .any(|(k, v)| &**k == "app" && &**v == "productpage")
    );
    // Lines 38-40: ICMP between host / remote-node and health.
    assert_eq!(
        at(&recs, 38).source.id,
        EndpointId::Reserved(Reserved::Host)
    );
    assert_eq!(
        at(&recs, 38).destination.id,
        EndpointId::Reserved(Reserved::Health)
    );
    assert_eq!(
        at(&recs, 40).source.id,
        EndpointId::Reserved(Reserved::RemoteNode)
    );
    // Line 41: field-masked ICMPv6 drop with empty endpoints.
    let r = at(&recs, 41);
    assert_eq!(
        (r.verdict, r.protocol, r.observation),
        (Verdict::Dropped, Protocol::Icmp, ObservationPoint::Unknown)
    );
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Unknown));
    assert_eq!(r.source.ip, Some(ip("fe80::64d8:8aff:fe72:fc14")));
    // Line 42: field-masked policy drop between two pods.
    let r = at(&recs, 42);
    assert_eq!(r.verdict, Verdict::PolicyDenied);
    assert_eq!(r.source.id, pod("default", "xwing"));
    assert_eq!(
        r.destination.id,
        pod("default", "deathstar-7848d6c4d5-th9v2")
    );
    assert_eq!(r.destination_port, 80);
    // Line 43: bare Flow, numeric drop_reason 133, from remote-node.
    let r = at(&recs, 43);
    assert_eq!(
        (r.verdict, r.observation, r.destination_port),
        (Verdict::PolicyDenied, ObservationPoint::Ingress, 8182)
    );
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::RemoteNode));
    assert_eq!(
        r.destination.id,
        pod("namespace-name", "pod-name-nginx-5869cc6967-trl5q")
    );
    assert_eq!(
        r.node.as_deref(),
        Some("cluster-name/node-name-0-65d7c5944b-kt976")
    );
    // Line 46: workloads on both ends, no outer wrapper fields.
    let r = at(&recs, 46);
    assert_eq!(
        r.source.id,
        workload("default", WorkloadKind::Deployment, "kapinger-bad")
    );
    assert_eq!(
        r.destination.id,
        workload("default", WorkloadKind::Deployment, "kapinger-good")
    );
    assert_eq!(r.reply, Some(false));
    assert_eq!(
        r.node.as_deref(),
        Some("longtestnetworkflowcni/aks-nodepool1-27013129-vmss000000")
    );
}

#[test]
fn hubble_edges_never_use_client_ports() {
    let (recs, _) = decode_numbered(Format::HubbleJson, &real("hubble-flows.jsonl"));
    let edges = assert_no_client_port_edges(&recs, Provider::Cilium);
    // 19 forwarded non-reply TCP/UDP records with a direction (counted in the file).
    assert_eq!(edges, 19);
}

#[test]
fn ztunnel_real_text_file() {
    let (all, stats) = decode_numbered(Format::Ztunnel, &real("ztunnel-access.log"));
    // 47 access lines and 2 dry-run denials (lines 37 and 40); the 4 other `state` lines
    // (enforcing decisions and allows) are skips.
    assert_eq!(
        (stats.records, stats.errors),
        (49, 0),
        "{:?}",
        stats.first_errors
    );
    assert_eq!(stats.skips(SkipReason::ZtunnelNonAccess), 4);
    assert_eq!(stats.skipped_total(), 4);
    let (dry_run, recs): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|(_, r)| r.verdict == Verdict::AuditDenied);
    let lines: Vec<usize> = dry_run.iter().map(|(n, _)| *n).collect();
    assert_eq!(lines, [37, 40]);
    let dry = |time: &str, policy: Option<&str>| FlowRecord {
        time: Some(time.parse().unwrap()),
        node: None,
        source: Endpoint::new(EndpointId::External(ip("10.244.0.5")))
            .with_ip(Some(ip("10.244.0.5"))),
        destination: Endpoint::new(pod("default", "http-server-6cbcc86f5d-lhq82")),
        protocol: Protocol::Tcp,
        source_port: 49084,
        destination_port: 0,
        observation: ObservationPoint::Ingress,
        verdict: Verdict::AuditDenied,
        reply: Some(false),
        destination_dns: None,
        policy: policy.map(Into::into),
        connections: 1,
    };
    assert_eq!(
        at(&dry_run, 37),
        &dry(
            "2026-08-03T15:34:57.746680Z",
            Some("default/deny-http-server-monitor")
        )
    );
    assert_eq!(at(&dry_run, 40), &dry("2026-08-03T15:36:17.033568Z", None));
    assert_eq!(
        count(&recs, |r| r.observation == ObservationPoint::Ingress),
        22
    );
    assert_eq!(
        count(&recs, |r| r.observation == ObservationPoint::Egress),
        25
    );
    assert_eq!(count(&recs, |r| r.verdict == Verdict::PolicyDenied), 3);
    assert_eq!(count(&recs, |r| r.verdict == Verdict::Error), 4);
    assert_eq!(count(&recs, |r| r.source.identity.is_some()), 44);
    assert!(
        recs.iter().all(|(_, r)| r.time.is_some()
            && r.protocol == Protocol::Tcp
            && r.reply == Some(false))
    );

    // Line 2: early format, quoted hbone_addr on an inbound line.
    let r = at(&recs, 2);
    assert_eq!(r.destination_port, 9080);
    assert_eq!(
        r.source.identity.as_deref(),
        Some("cluster.local/ns/istio-system/sa/istio-ingressgateway-service-account")
    );
    // Line 22: plaintext inbound from prometheus: no identity, port from dst.addr.
    let r = at(&recs, 22);
    assert_eq!(
        (r.source.identity.as_ref(), r.destination_port),
        (None, 9080)
    );
    // Line 30: unquoted values.
    let r = at(&recs, 30);
    assert_eq!(r.source.id, pod("my-ambient", "sleep-bc9998558-bhv5z"));
    assert_eq!(
        r.destination.id,
        pod("my-ambient", "helloworld-v1-77489ccb5f-pjbq5")
    );
    assert_eq!((r.source_port, r.destination_port), (37522, 5000));
    // Line 32: outbound to an external address.
    let r = at(&recs, 32);
    assert_eq!(r.destination.id, EndpointId::External(ip("142.251.209.46")));
    assert_eq!(
        (r.destination_port, r.observation),
        (80, ObservationPoint::Egress)
    );
    // Line 45: explicit deny names the policy; line 48: the other reason form.
    let r = at(&recs, 45);
    assert_eq!(
        (r.verdict, r.policy.as_deref()),
        (
            Verdict::PolicyDenied,
            Some("default/deny-http-server-protect")
        )
    );
    assert_eq!(r.destination_port, 18080);
    let r = at(&recs, 48);
    assert_eq!(
        (r.verdict, r.policy.as_deref()),
        (Verdict::PolicyDenied, None)
    );
    // Line 43: an HTTP error is not a policy decision.
    assert_eq!(at(&recs, 43).verdict, Verdict::Error);
    // Line 50: tabs expanded to spaces; line 51: bare policy rejection.
    assert_eq!(at(&recs, 50).verdict, Verdict::Error);
    assert_eq!(
        at(&recs, 50).time,
        Some("2024-07-26T17:18:00.953004Z".parse().unwrap())
    );
    assert_eq!(at(&recs, 51).verdict, Verdict::PolicyDenied);
    // Line 53: unknown keys tolerated.
    assert_eq!(
        at(&recs, 53).source.id,
        pod("default", "simple-http-waypoint-547d6d7b8b-4xckr")
    );
    assert_eq!(at(&recs, 53).destination_port, 8080);

    let edges = assert_no_client_port_edges(&recs, Provider::Istio);
    assert!(edges > 10, "{edges}");
}

#[test]
fn ztunnel_real_json_file() {
    let (recs, stats) = decode_numbered(Format::Ztunnel, &real("ztunnel-access-json.log"));
    // Lines 1–2 are dry-run denials, 3–4 access lines; line 5 (`no allow policies
    // matched`, an enforcing decision, its peer redacted) is a skip.
    assert_eq!(
        (stats.records, stats.errors),
        (4, 0),
        "{:?}",
        stats.first_errors
    );
    assert_eq!(stats.skips(SkipReason::ZtunnelNonAccess), 1);
    assert_eq!(stats.skipped_total(), 1);
    let dry = |time: &str, peer_port: u16, policy: Option<&str>| FlowRecord {
        time: Some(time.parse().unwrap()),
        node: None,
        source: Endpoint::new(EndpointId::External(ip("10.244.0.9")))
            .with_ip(Some(ip("10.244.0.9"))),
        destination: Endpoint::new(pod("default", "http-server-7bbf596dd9-8gs65")),
        protocol: Protocol::Tcp,
        source_port: peer_port,
        destination_port: 0,
        observation: ObservationPoint::Ingress,
        verdict: Verdict::AuditDenied,
        reply: Some(false),
        destination_dns: None,
        policy: policy.map(Into::into),
        connections: 1,
    };
    assert_eq!(
        at(&recs, 1),
        &dry(
            "2026-08-11T10:45:04.121633Z",
            46266,
            Some("default/deny-http-server-monitor")
        )
    );
    assert_eq!(
        at(&recs, 2),
        &dry("2026-08-11T10:46:53.334606Z", 46266, None)
    );
    let r = at(&recs, 3);
    assert_eq!(
        (r.observation, r.destination_port, r.source_port),
        (ObservationPoint::Egress, 18080, 57866)
    );
    assert_eq!(r.time, Some("2026-08-10T08:19:58.950669Z".parse().unwrap()));
    let r = at(&recs, 4);
    assert_eq!(r.observation, ObservationPoint::Ingress);
    assert_eq!(
        r.destination.id,
        pod("default", "http-server-7bbf596dd9-4rgdc")
    );
    assert_eq!(
        r.destination.identity.as_deref(),
        Some("cluster.local/ns/default/sa/http-server-sa")
    );
}

#[test]
fn ztunnel_real_fragments_each_line() {
    let text = real("ztunnel-access-fragments.log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    // 1: tracing default format; outbound without dst.workload: external pod address.
    let Ok(Decoded::Record(r)) = decode_line(Format::Ztunnel, lines[0].as_bytes()) else {
        panic!("line 1")
    };
    assert_eq!(r.time, Some("2024-04-11T15:38:42.182974Z".parse().unwrap()));
    assert_eq!(r.source.id, pod("default", "shell-6d8bcd654d-t88gp"));
    assert_eq!(r.destination.id, EndpointId::External(ip("10.244.0.42")));
    assert_eq!(
        (r.destination_port, r.observation),
        (80, ObservationPoint::Egress)
    );
    // 2: timestamp cut off by the poster: no time.
    let Ok(Decoded::Record(r)) = decode_line(Format::Ztunnel, lines[1].as_bytes()) else {
        panic!("line 2")
    };
    assert_eq!(r.time, None);
    assert_eq!(
        (r.verdict, r.observation, r.destination_port),
        (Verdict::PolicyDenied, ObservationPoint::Ingress, 9080)
    );
    // 3: Kiali UI prefix, no header at all.
    let e = decode_line(Format::Ztunnel, lines[2].as_bytes()).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"unknown line shape: expected a timestamp or a log level at the start of the line, found "[ztunnel-b8dqs]""#
    );
    // 4: Grafana/Loki prefix `<time> | `.
    let e = decode_line(Format::Ztunnel, lines[3].as_bytes()).unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"unknown line shape: expected a log level (trace, debug, info, warn, error) after the timestamp, found "|""#
    );
}

const CRI_TS: &str = "2026-03-14T09:26:53.421950312Z";

/// Every real ztunnel line decodes the same unframed, as one `F` line, and split into
/// `P` pieces at many offsets (including inside quoted values), mixed with stderr noise.
#[test]
fn ztunnel_cri_framing_of_real_lines() {
    for file in ["ztunnel-access.log", "ztunnel-access-json.log"] {
        let text = real(file);
        let (plain, plain_stats) = decode_numbered(Format::Ztunnel, &text);
        let want: Vec<&FlowRecord> = plain.iter().map(|(_, r)| r).collect();

        let framed: String = text
            .lines()
            .map(|l| format!("{CRI_TS} stdout F {l}\n"))
            .collect();
        let mut got = Vec::new();
        let stats = decode_lines(Format::Ztunnel, framed.as_bytes(), |r| got.push(r));
        assert_eq!(got.iter().collect::<Vec<_>>(), want, "{file} F-framed");
        assert_eq!(
            (stats.skipped, stats.errors),
            (plain_stats.skipped.clone(), 0)
        );

        for pieces in [2usize, 3, 7] {
            let mut split = String::new();
            for line in text.lines() {
                // Cut inside the first quoted value too, when there is one.
                let mut cuts: Vec<usize> = (1..pieces).map(|k| line.len() * k / pieces).collect();
                if let Some(q) = line.find("=\"") {
                    cuts.push(q + 4);
                }
                cuts.sort_unstable();
                cuts.dedup();
                let mut from = 0;
                for &c in cuts.iter().filter(|&&c| c > 0 && c < line.len()) {
                    split.push_str(&format!("{CRI_TS} stdout P {}\n", &line[from..c]));
                    split.push_str(&format!(
                        "{CRI_TS} stderr F 2026-03-14T09:26:53Z warn xds stderr noise\n"
                    ));
                    from = c;
                }
                split.push_str(&format!("{CRI_TS} stdout F {}\n", &line[from..]));
            }
            let mut got = Vec::new();
            let stats = decode_lines(Format::Ztunnel, split.as_bytes(), |r| got.push(r));
            assert_eq!(
                got.iter().collect::<Vec<_>>(),
                want,
                "{file} in {pieces} pieces"
            );
            assert_eq!(
                stats.errors, 0,
                "{file} in {pieces} pieces: {:?}",
                stats.first_errors
            );
            assert_eq!(stats.skips(SkipReason::CriPartialAtEof), 0);
            assert_eq!(stats.skips(SkipReason::CriPartialAbandoned), 0);
        }
    }
}

#[test]
fn cri_partial_without_final_piece() {
    let line = real("ztunnel-access.log")
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let (head, tail) = line.split_at(100);
    // A P piece at EOF is counted, not decoded.
    let input = format!("{CRI_TS} stdout F {line}\n{CRI_TS} stdout P {head}\n");
    let stats = decode_lines(Format::Ztunnel, input.as_bytes(), |_| {});
    assert_eq!((stats.records, stats.errors), (1, 0));
    assert_eq!(stats.skips(SkipReason::CriPartialAtEof), 1);
    // A P piece followed by an unframed line is abandoned; the unframed line still decodes.
    let input = format!("{CRI_TS} stdout P {head}\n{line}\n{CRI_TS} stdout F {tail}\n");
    let stats = decode_lines(Format::Ztunnel, input.as_bytes(), |_| {});
    assert_eq!(stats.skips(SkipReason::CriPartialAbandoned), 1);
    assert_eq!(stats.records, 1);
    assert_eq!(
        stats.errors, 1,
        "the orphaned tail is not a line: {:?}",
        stats.first_errors
    );
    // A lone P line.
    let stats = decode_lines(
        Format::Ztunnel,
        format!("{CRI_TS} stdout P ").as_bytes(),
        |_| {},
    );
    assert_eq!(
        (
            stats.records,
            stats.errors,
            stats.skips(SkipReason::CriPartialAtEof)
        ),
        (0, 0, 1)
    );
}

#[test]
fn goldmane_real_record() {
    let (recs, stats) = decode_numbered(Format::GoldmaneJson, &real("goldmane-flows.jsonl"));
    assert_eq!(
        (stats.records, stats.errors),
        (1, 0),
        "{:?}",
        stats.first_errors
    );
    let r = at(&recs, 1);
    // The labels prove a DaemonSet: controller-revision-hash + pod-template-generation.
    assert_eq!(
        r.source.id,
        workload(
            "longhorn-system",
            WorkloadKind::DaemonSet,
            "longhorn-manager"
        )
    );
    assert_eq!(
        r.destination.id,
        pod(
            "longhorn-system",
            "instance-manager-318f1eac2bc7c775b7a6d2e68e9e2800"
        )
    );
    assert_eq!((r.protocol, r.destination_port), (Protocol::Tcp, 8503));
    assert_eq!(
        (r.observation, r.verdict),
        (ObservationPoint::Egress, Verdict::Forwarded)
    );
    assert_eq!(r.time, Some(Timestamp::from_secs(1_764_970_845)));
    assert_eq!(r.connections, 1);
    assert_eq!(r.source.labels.len(), 11);
    let webhook = r
        .source
        .labels
        .iter()
        .find(|(k, _)| &**k == "longhorn.io/admission-webhook");
    assert_eq!(
        webhook.map(|(_, v)| &**v),
        Some("long horn-admission-webhook")
    );
    assert_eq!(r.destination.labels.len(), 6);
    assert_eq!((r.source.ip, r.node.as_ref(), r.reply), (None, None, None));
    assert_eq!(assert_no_client_port_edges(&recs, Provider::Calico), 1);
}

#[test]
fn calico_real_flow_logs() {
    let (recs, stats) = decode_numbered(Format::CalicoFlowLog, &real("calico-flowlogs.jsonl"));
    assert_eq!(
        (stats.records, stats.errors),
        (7, 0),
        "{:?}",
        stats.first_errors
    );
    let access = workload("policy-demo", WorkloadKind::Deployment, "access");
    let nginx = workload("policy-demo", WorkloadKind::Deployment, "nginx");
    // 1: aggregated on both sides, reported by dst.
    let r = at(&recs, 1);
    assert_eq!((&r.source.id, &r.destination.id), (&access, &nginx));
    assert_eq!(
        (r.destination_port, r.observation, r.verdict),
        (80, ObservationPoint::Ingress, Verdict::Forwarded)
    );
    assert_eq!(
        (r.source.ip, r.destination.ip, r.source_port),
        (None, None, 0)
    );
    assert_eq!(
        (r.connections, r.time),
        (47, Some(Timestamp::from_secs(1_597_086_849)))
    );
    assert_eq!(r.node.as_deref(), Some("bz-n8kf-kadm-node-1"));
    // 2: named pods with addresses, reported by src. The aggregate names beside them,
    // with the pod-template-hash labels, prove the owners; the addresses are kept.
    let r = at(&recs, 2);
    assert_eq!((&r.source.id, &r.destination.id), (&access, &nginx));
    assert_eq!(
        (r.source.ip, r.destination.ip),
        (Some(ip("192.168.47.9")), Some(ip("192.168.213.223")))
    );
    assert_eq!(
        (r.observation, r.verdict, r.policy.as_ref()),
        (ObservationPoint::Egress, Verdict::Forwarded, None)
    );
    // 3: the deny, with its policy.
    let r = at(&recs, 3);
    assert_eq!(
        (r.verdict, r.observation),
        (Verdict::PolicyDenied, ObservationPoint::Ingress)
    );
    assert_eq!(
        r.policy.as_deref(),
        Some("policy-demo/default.deny-access-nginx")
    );
    assert_eq!(r.node.as_deref(), Some("bz-n8kf-kadm-node-2"));
    // 4, 5: allow by src, then by dst.
    assert_eq!(at(&recs, 4).observation, ObservationPoint::Egress);
    assert_eq!(at(&recs, 5).observation, ObservationPoint::Ingress);
    // 6, 7: single flows with a client port.
    assert_eq!(
        (at(&recs, 6).source_port, at(&recs, 6).connections),
        (42106, 1)
    );
    assert_eq!(at(&recs, 7).source_port, 43092);
    assert_eq!(
        (&at(&recs, 7).destination.id, at(&recs, 7).destination.ip),
        (&nginx, Some(ip("192.168.138.79")))
    );
    assert_eq!(count(&recs, |r| r.verdict == Verdict::Forwarded), 6);
    assert_eq!(assert_no_client_port_edges(&recs, Provider::Calico), 6);
}

#[test]
fn format_detection_and_names() {
    let cases = [
        ("hubble-flows.jsonl", Format::HubbleJson),
        ("ztunnel-access.log", Format::Ztunnel),
        ("ztunnel-access-json.log", Format::Ztunnel),
        ("ztunnel-access-fragments.log", Format::Ztunnel),
        ("goldmane-flows.jsonl", Format::GoldmaneJson),
        ("calico-flowlogs.jsonl", Format::CalicoFlowLog),
    ];
    for (file, want) in cases {
        let text = real(file);
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap();
        assert_eq!(Format::detect(first.as_bytes()), Some(want), "{file}");
        // Through CRI framing, and from a truncated first piece.
        assert_eq!(
            Format::detect(format!("{CRI_TS} stdout F {first}").as_bytes()),
            Some(want),
            "{file} framed"
        );
        assert_eq!(
            Format::detect(&first.as_bytes()[..60]),
            Some(want),
            "{file} truncated"
        );
    }
    // Bare Flow (line 43), lost events, FlowResult and Whisker shapes.
    let hubble = real("hubble-flows.jsonl");
    assert_eq!(
        Format::detect(hubble.lines().nth(42).unwrap().as_bytes()),
        Some(Format::HubbleJson)
    );
    assert_eq!(
        Format::detect(br#"{"lost_events":{}}"#),
        Some(Format::HubbleJson)
    );
    assert_eq!(
        Format::detect(br#"{"id":"1","flow":{"Key":{}}}"#),
        Some(Format::GoldmaneJson)
    );
    assert_eq!(
        Format::detect(br#"{"source_name":"a","action":"Allow"}"#),
        Some(Format::GoldmaneJson)
    );
    assert_eq!(Format::detect(b"[ztunnel-b8dqs] src.addr=1.2.3.4:5"), None);
    assert_eq!(Format::detect(b"{}"), None);
    assert_eq!(Format::detect(b""), None);
    for f in Format::ALL {
        assert_eq!(f.as_str().parse::<Format>(), Ok(f));
    }
    let err = "hubble".parse::<Format>().unwrap_err();
    assert!(err.to_string().contains("hubble-json"), "{err}");
}

/// What a malformed line must turn into.
#[derive(Debug)]
enum Want {
    /// One error of this [`DecodeError::kind`].
    Error(&'static str),
    Skip(SkipReason),
    /// Odd but decodable: a record, no error.
    Record,
}

#[test]
fn malformed_input_table() {
    use Format::*;
    let long_port = format!(
        r#"{{"flow":{{"verdict":"FORWARDED","l4":{{"TCP":{{"destination_port":{}}}}}}}}}"#,
        u64::MAX
    );
    let cases: Vec<(Format, &[u8], Want)> = vec![
        (HubbleJson, b"\n", Want::Skip(SkipReason::EmptyLine)),
        (HubbleJson, b"  \t ", Want::Skip(SkipReason::EmptyLine)),
        (HubbleJson, br#"{"flow":{"verdict":"FORWARDED","IP":{"source":"10.0"#, Want::Error("invalid_json")),
        (HubbleJson, br#"{"flow":{"verdict":"FORWARDED","l4":{"TCP":{"destination_port":"80"}}}}"#, Want::Error("invalid_json")),
        (HubbleJson, long_port.as_bytes(), Want::Error("invalid_json")),
        (HubbleJson, br#"{"flow":{"verdict":"FORWARDED","l4":{"UDP":{"destination_port":1e30}}}}"#, Want::Error("invalid_json")),
        (HubbleJson, br#"{"flow":{"verdict":"FORWARDED","time":"2021-02-30T00:00:00Z"}}"#, Want::Error("bad_timestamp")),
        (HubbleJson, br#"{"flow":{"verdict":"FORWARDED","source":{"labels":"k8s:a=b"}}}"#, Want::Error("invalid_json")),
        (HubbleJson, b"{\"flow\":{\"verdict\":\"FORW\xffARDED\"}}", Want::Error("invalid_json")),
        (HubbleJson, br#"{"flow":{}}"#, Want::Error("missing_field")),
        (HubbleJson, br#"{"flow":null}"#, Want::Error("line_shape")),
        (HubbleJson, b"[1,2]", Want::Error("invalid_json")),
        (HubbleJson, b"null", Want::Error("invalid_json")),
        (HubbleJson, br#"{"lost_events":{"num_events_lost":"18446744073709551615"}}"#, Want::Skip(SkipReason::HubbleLostEvents)),
        (Ztunnel, b"info access connection complete src.addr=10.0.0.1:5 dst.addr=", Want::Error("bad_address")),
        (Ztunnel, b"info access connection complete src.addr=10.xx.xx.xx:40422 dst.addr=10.0.0.1:80", Want::Error("bad_address")),
        (Ztunnel, b"info access connection complete src.addr=10.0.0.1:99999 dst.addr=10.0.0.1:80", Want::Error("bad_address")),
        (Ztunnel, b"info access connection complete src.addr=10.0.0.1:5 dst.addr=10.0.0.1:80 dst.hbone_addr=\"10.0.0.1\"", Want::Error("bad_address")),
        (Ztunnel, b"info access connection complete src.addr=10.0.0.1:5 error=\"unterminated", Want::Error("unterminated_quote")),
        (Ztunnel, b"2024-04-12T10:17:44.080629 info access connection complete", Want::Error("bad_timestamp")),
        (Ztunnel, b"2024-04-12T10:17:44Z\xff info access", Want::Error("invalid_utf8")),
        (Ztunnel, b"2024-04-12T10:17:44Z info \xff connection complete", Want::Error("invalid_utf8")),
        (Ztunnel, b"2024-04-12T10:17:44Z", Want::Error("line_shape")),
        (Ztunnel, b"2024-04-12T10:17:44Z info", Want::Error("line_shape")),
        (Ztunnel, b"2024-04-12T10:17:44Z info state:proxy{wl=a/b}:inbound{id=1 peer=10.xx.xx.xx:1} no allow policies matched ", Want::Skip(SkipReason::ZtunnelNonAccess)),
        (Ztunnel, b"2024-04-12T10:17:44Z info state:proxy{unclosed", Want::Skip(SkipReason::ZtunnelNonAccess)),
        (Ztunnel, br#"{"scope":"access","message":"connection complete","src.addr":"10.0.0.1:5","dst.addr":"10.0.0.1:80","bytes_sent":"x"}"#, Want::Record),
        (Ztunnel, br#"{"scope":"access","message":"connection complete","src.addr":5}"#, Want::Error("invalid_json")),
        (Ztunnel, br#"{"scope":"access","message":"connection complete","time":"now"}"#, Want::Error("bad_timestamp")),
        (Ztunnel, br#"{"scope":"access""#, Want::Error("invalid_json")),
        (Ztunnel, b"2026-03-14T09:26:53Z stdout P", Want::Skip(SkipReason::CriPartialAtEof)),
        (GoldmaneJson, br#"{"Key":{"action":"Allow","destPort":"99999999999999999999"}}"#, Want::Error("invalid_json")),
        (GoldmaneJson, br#"{"Key":{"action":"Allow","destPort":70000}}"#, Want::Error("bad_port")),
        (GoldmaneJson, br#"{"Key":{"action":"Allow"},"startTime":"soon"}"#, Want::Error("bad_timestamp")),
        (GoldmaneJson, br#"{"Key":{"action":"Allow"},"sourceLabels":[1]}"#, Want::Error("invalid_json")),
        (GoldmaneJson, br#"{"Key":{"action":true}}"#, Want::Error("invalid_json")),
        (GoldmaneJson, br#"{"Key":"#, Want::Error("invalid_json")),
        (CalicoFlowLog, br#"{}"#, Want::Error("missing_field")),
        (CalicoFlowLog, br#"{"action":"allow","dest_port":"eighty"}"#, Want::Error("invalid_json")),
        (CalicoFlowLog, br#"{"action":"allow","start_time":-99999999999999}"#, Want::Record),
        (CalicoFlowLog, br#"{"action":"allow","source_labels":{"labels":"x=y"}}"#, Want::Record),
        (CalicoFlowLog, br#"{"action":"allow","dest_ip":"300.1.1.1"}"#, Want::Error("bad_ip")),
    ];
    for (format, input, want) in cases {
        let stats = decode_lines(format, input, |_| {});
        let shown = String::from_utf8_lossy(input);
        match want {
            Want::Skip(reason) => {
                assert_eq!(
                    (stats.records, stats.errors, stats.skips(reason)),
                    (0, 0, 1),
                    "{shown}: {stats:?}"
                );
            }
            Want::Record => assert_eq!((stats.records, stats.errors), (1, 0), "{shown}: {stats:?}"),
            Want::Error(kind) => {
                assert_eq!(stats.errors, 1, "{shown}: {stats:?}");
                assert_eq!(
                    stats.first_errors[0].error.kind(),
                    kind,
                    "{shown}: {}",
                    stats.first_errors[0].error
                );
                assert_eq!(stats.first_errors[0].line, 1);
            }
        }
    }
}

#[test]
fn decode_lines_counts_and_caps_errors() {
    let mut input = String::from("\r\n");
    for _ in 0..30 {
        input.push_str("not json\r\n");
    }
    input.push_str(&real("goldmane-flows.jsonl"));
    let stats = decode_lines(Format::GoldmaneJson, input.as_bytes(), |_| {});
    assert_eq!(
        (
            stats.records,
            stats.errors,
            stats.skips(SkipReason::EmptyLine)
        ),
        (1, 30, 1)
    );
    assert_eq!(stats.first_errors.len(), DecodeStats::MAX_KEPT_ERRORS);
    assert_eq!(stats.first_errors[0].line, 2);
    assert_eq!(stats.first_errors[19].line, 21);
    assert!(
        stats.first_errors[0]
            .error
            .to_string()
            .starts_with("invalid json: expected ident"),
        "{}",
        stats.first_errors[0].error
    );
    // A last line without '\n' counts; the empty rest after a final '\n' does not.
    assert_eq!(
        decode_lines(Format::HubbleJson, b"\n\n", |_| {}).skips(SkipReason::EmptyLine),
        2
    );
    assert_eq!(
        decode_lines(Format::HubbleJson, b"", |_| {}),
        DecodeStats::default()
    );
}

/// Real lines of every format, to mutate in the property test.
fn corpus() -> Vec<(Format, String)> {
    let mut out = Vec::new();
    for (file, format) in [
        ("hubble-flows.jsonl", Format::HubbleJson),
        ("ztunnel-access.log", Format::Ztunnel),
        ("ztunnel-access-json.log", Format::Ztunnel),
        ("ztunnel-access-fragments.log", Format::Ztunnel),
        ("goldmane-flows.jsonl", Format::GoldmaneJson),
        ("calico-flowlogs.jsonl", Format::CalicoFlowLog),
    ] {
        out.extend(real(file).lines().map(|l| (format, l.to_owned())));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        for format in Format::ALL {
            let stats = decode_lines(format, &bytes, |_| {});
            prop_assert!(stats.first_errors.len() <= DecodeStats::MAX_KEPT_ERRORS);
            let _ = Format::detect(&bytes);
        }
    }

    #[test]
    fn mutated_real_lines_never_panic(
        pick in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
        pos in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        framed in any::<bool>(),
    ) {
        let corpus = corpus();
        let (format, line) = &corpus[pick.index(corpus.len())];
        let mut bytes = line.as_bytes()[..=cut.index(line.len())].to_vec();
        let i = pos.index(bytes.len());
        bytes[i] = byte;
        if framed {
            let mut f = format!("{CRI_TS} stdout P ").into_bytes();
            f.extend_from_slice(&bytes);
            bytes = f;
        }
        let _ = decode_lines(*format, &bytes, |_| {});
        let _ = decode_line(*format, &bytes);
    }
}
