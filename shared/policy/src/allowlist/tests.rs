use std::collections::HashMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

use super::*;
use crate::eval::selector::tests::sel;
use crate::eval::{Decision, PolicyRef, check_edge};
use crate::resolve::ResolvedPod;
use ne_flow::flow::{Endpoint, EndpointId, labels};

/// A resolver over a fixed map; addresses and reserved identities resolve to themselves.
pub(super) struct MapResolver(pub(super) HashMap<EndpointId, Resolution>);

impl Resolver for MapResolver {
    fn resolve_at(&self, endpoint: &Endpoint, _: crate::resolve::Seen) -> Resolution {
        match (self.0.get(&endpoint.id), &endpoint.id) {
            (Some(r), _) => r.clone(),
            (None, EndpointId::External(ip)) => Resolution::External(*ip),
            (None, EndpointId::Reserved(r)) => Resolution::Reserved(*r),
            (None, _) => Resolution::Unresolved(Unresolved::NotFound),
        }
    }
}

pub(super) fn wref(ns: &str, kind: WorkloadKind, name: &str) -> WorkloadRef {
    WorkloadRef {
        namespace: ns.into(),
        kind,
        name: name.into(),
    }
}

/// A resolved pod of workload `ns/kind/name` with labels `app=<name>` and selector
/// `app=<name>`.
pub(super) fn pod(ns: &str, kind: WorkloadKind, name: &str) -> ResolvedPod {
    ResolvedPod {
        namespace: ns.into(),
        owner: Some(wref(ns, kind, name)),
        selector: Some(sel(&[("app", name)], &[])),
        labels: labels([("app", name), ("pod-template-hash", "abc12")]),
        namespace_labels: labels([("kubernetes.io/metadata.name", ns)]),
        named_ports: Vec::new(),
        service_account: Some(name.into()),
    }
}

/// The endpoint of workload `ns/kind/name`, with its principal.
pub(super) fn ep(ns: &str, kind: WorkloadKind, name: &str) -> Endpoint {
    Endpoint::new(EndpointId::Workload(wref(ns, kind, name)))
        .with_identity(Some(format!("cluster.local/ns/{ns}/sa/{name}").into()))
}

fn ext(ip: &str) -> Endpoint {
    let ip: IpAddr = ip.parse().unwrap();
    Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip))
}

fn reserved(r: Reserved, ip: Option<&str>) -> Endpoint {
    Endpoint::new(EndpointId::Reserved(r)).with_ip(ip.map(|i| i.parse().unwrap()))
}

fn edge(
    subject: &Endpoint,
    direction: Direction,
    peer: &Endpoint,
    protocol: Protocol,
    port: u16,
) -> Edge {
    Edge {
        subject: subject.clone(),
        direction,
        peer: peer.clone(),
        protocol,
        port,
        peer_dns: None,
        denied_by: None,
    }
}

/// An edge with its aggregate: count and first/last seen in seconds.
pub(super) type Agg = (Edge, u64, i64, i64);

fn agg(edge: Edge, count: u64, first: i64, last: i64) -> Agg {
    (edge, count, first, last)
}

pub(super) fn run(
    edges: &[Agg],
    resolver: &MapResolver,
    provider: Provider,
    options: &LearnOptions,
) -> Learned {
    let it = edges
        .iter()
        .map(|(edge, count, first, last)| AggregatedEdge {
            edge,
            count: *count,
            first_seen: Timestamp::from_secs(*first),
            last_seen: Timestamp::from_secs(*last),
        });
    learn(it, resolver, provider, options)
}

use WorkloadKind::{CronJob, DaemonSet, Deployment, Job, Pod, ReplicaSet, StatefulSet};

/// shop/web (Deployment), shop/db (StatefulSet), other/agent (DaemonSet),
/// kube-system/coredns (Deployment), batch/report (Job), batch/nightly (CronJob),
/// batch/debug (Pod), batch/legacy (ReplicaSet).
pub(super) fn cluster() -> MapResolver {
    let mut m = HashMap::new();
    for (ns, kind, name) in [
        ("shop", Deployment, "web"),
        ("shop", StatefulSet, "db"),
        ("other", DaemonSet, "agent"),
        ("kube-system", Deployment, "coredns"),
        ("batch", Job, "report"),
        ("batch", CronJob, "nightly"),
        ("batch", Pod, "debug"),
        ("batch", ReplicaSet, "legacy"),
    ] {
        m.insert(ep(ns, kind, name).id, Resolution::Pod(pod(ns, kind, name)));
    }
    MapResolver(m)
}

fn web() -> Endpoint {
    ep("shop", Deployment, "web")
}

fn db() -> Endpoint {
    ep("shop", StatefulSet, "db")
}

pub(super) fn no_options() -> LearnOptions {
    LearnOptions::default()
}

/// Every input edge is counted exactly once.
pub(super) fn assert_accounted(s: &LearnSummary) {
    let sum = |m: &mut dyn Iterator<Item = &Tally>| {
        m.fold(Tally::default(), |a, t| Tally {
            edges: a.edges + t.edges,
            flows: a.flows + t.flows,
        })
    };
    let parts = [
        s.learned,
        s.excluded,
        s.external_subjects,
        sum(&mut s.invalid_edges.values()),
        sum(&mut s.unresolved_subjects.values()),
        sum(&mut s.not_a_subject.values()),
        sum(&mut s.reserved_subjects.values()),
        sum(&mut s.unresolved_peers.values()),
        sum(&mut s.unmanaged_peers.values()),
    ];
    let total = sum(&mut parts.iter());
    assert_eq!(total, s.input, "every edge counted once: {s:#?}");
}

#[test]
fn one_peer_with_several_ports_is_one_rule() {
    let edges = [
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Udp, 53),
            2,
            10,
            20,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Tcp, 8080),
            5,
            5,
            30,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Tcp, 8080),
            1,
            1,
            2,
        ),
    ];
    let learned = run(&edges, &cluster(), Provider::Cilium, &no_options());
    assert_eq!(learned.allow_lists.len(), 1);
    let p = render_proposal(&learned.allow_lists[0]).unwrap();
    assert_eq!(
        p.object.metadata.name.as_deref(),
        Some("deployment-web-egress")
    );
    assert_eq!(p.object.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(
        p.object.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
        MANAGED_BY_VALUE
    );
    let spec = p.object.spec.kubernetes.as_ref().unwrap();
    assert_eq!(
        spec.policy_types.as_deref(),
        Some(&["Egress".to_owned()][..])
    );
    assert!(spec.ingress.is_none());
    assert_eq!(spec.pod_selector, Some(sel(&[("app", "web")], &[])));
    let rules = spec.egress.as_ref().unwrap();
    assert_eq!(rules.len(), 1);
    let to = rules[0].to.as_ref().unwrap();
    assert_eq!(to.len(), 1);
    assert_eq!(to[0].pod_selector, Some(sel(&[("app", "db")], &[])));
    assert_eq!(
        to[0].namespace_selector,
        Some(sel(&[("kubernetes.io/metadata.name", "shop")], &[]))
    );
    let ports: Vec<(Option<&str>, Option<&IntOrString>)> = rules[0]
        .ports
        .iter()
        .flatten()
        .map(|p| (p.protocol.as_deref(), p.port.as_ref()))
        .collect();
    assert_eq!(
        ports,
        [
            (Some("TCP"), Some(&IntOrString::Int(8080))),
            (Some("UDP"), Some(&IntOrString::Int(53)))
        ]
    );
    // Evidence merges the two TCP 8080 aggregates.
    let tcp = p.evidence.iter().find(|r| r.port == 8080).unwrap();
    assert_eq!(
        (tcp.flow_count, tcp.first_seen, tcp.last_seen),
        (6, Timestamp::from_secs(1), Timestamp::from_secs(30))
    );
    assert_eq!(
        (p.flow_count, p.learning_since),
        (8, Timestamp::from_secs(1))
    );
    assert_eq!(learned.summary.allow_lists[0].rules, 1);
    assert_eq!(learned.summary.allow_lists[0].ports, 2);
    assert_accounted(&learned.summary);
}

#[test]
fn non_subjects_are_counted_not_proposed() {
    let mut r = cluster();
    let mut no_selector = pod("shop", Deployment, "nosel");
    no_selector.selector = None;
    let mut empty_selector = pod("shop", Deployment, "empty");
    empty_selector.selector = Some(sel(&[], &[]));
    let mut no_owner = pod("shop", Deployment, "orphan");
    no_owner.owner = None;
    for (name, p) in [
        ("nosel", no_selector),
        ("empty", empty_selector),
        ("orphan", no_owner),
    ] {
        r.0.insert(ep("shop", Deployment, name).id, Resolution::Pod(p));
    }
    r.0.insert(
        ep("shop", Deployment, "amb").id,
        Resolution::Unresolved(Unresolved::Ambiguous),
    );
    let mut edges = Vec::new();
    for (kind, name) in [
        (Job, "report"),
        (CronJob, "nightly"),
        (Pod, "debug"),
        (ReplicaSet, "legacy"),
    ] {
        edges.push(agg(
            edge(
                &ep("batch", kind, name),
                Direction::Egress,
                &db(),
                Protocol::Tcp,
                5432,
            ),
            3,
            1,
            2,
        ));
    }
    for name in ["nosel", "empty", "orphan", "amb"] {
        edges.push(agg(
            edge(
                &ep("shop", Deployment, name),
                Direction::Ingress,
                &web(),
                Protocol::Tcp,
                80,
            ),
            1,
            1,
            1,
        ));
    }
    edges.push(agg(
        edge(
            &reserved(Reserved::Host, Some("10.0.0.1")),
            Direction::Egress,
            &db(),
            Protocol::Tcp,
            5432,
        ),
        1,
        1,
        1,
    ));
    // The Job is a fine peer, though: db's ingress from it is learned.
    edges.push(agg(
        edge(
            &db(),
            Direction::Ingress,
            &ep("batch", Job, "report"),
            Protocol::Tcp,
            5432,
        ),
        4,
        1,
        1,
    ));
    let learned = run(&edges, &r, Provider::Calico, &no_options());
    let s = &learned.summary;
    for kind in [Job, CronJob, Pod, ReplicaSet] {
        assert_eq!(
            s.not_a_subject.get(&kind),
            Some(&Tally { edges: 1, flows: 3 }),
            "{kind}"
        );
    }
    assert_eq!(
        s.unresolved_subjects.get(&Unresolved::NoSelector),
        Some(&Tally { edges: 2, flows: 2 })
    );
    assert_eq!(
        s.unresolved_subjects.get(&Unresolved::NoOwnerInfo),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_eq!(
        s.unresolved_subjects.get(&Unresolved::Ambiguous),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_eq!(
        s.reserved_subjects.get(&Reserved::Host),
        Some(&Tally { edges: 1, flows: 1 })
    );
    let subjects: Vec<&WorkloadRef> = learned.allow_lists.iter().map(|l| &l.subject).collect();
    assert_eq!(subjects, [&wref("shop", StatefulSet, "db")]);
    assert_accounted(s);
    // All fields serialize (the CLI writes the summary as JSON).
    let json = serde_json::to_value(s).unwrap();
    assert_eq!(json["not_a_subject"]["CronJob"]["flows"], 3);
}

#[test]
fn external_addresses_become_host_blocks_with_dns_evidence() {
    let mut api = edge(
        &web(),
        Direction::Egress,
        &ext("203.0.113.10"),
        Protocol::Tcp,
        443,
    );
    api.peer_dns = Some("api.example.com".into());
    let mut api2 = api.clone();
    api2.peer_dns = Some("cdn.example.com".into());
    let edges = [
        agg(api, 1, 1, 1),
        agg(api2, 1, 2, 2),
        agg(
            edge(
                &web(),
                Direction::Egress,
                &ext("2001:db8::7"),
                Protocol::Tcp,
                443,
            ),
            1,
            1,
            1,
        ),
        agg(
            edge(
                &web(),
                Direction::Egress,
                &reserved(Reserved::World, Some("198.51.100.1")),
                Protocol::Udp,
                123,
            ),
            1,
            1,
            1,
        ),
        agg(
            edge(
                &web(),
                Direction::Egress,
                &reserved(Reserved::World, None),
                Protocol::Tcp,
                80,
            ),
            7,
            1,
            1,
        ),
        agg(
            edge(
                &web(),
                Direction::Egress,
                &reserved(Reserved::KubeApiserver, Some("10.96.0.1")),
                Protocol::Tcp,
                443,
            ),
            2,
            1,
            1,
        ),
        agg(
            edge(
                &web(),
                Direction::Egress,
                &reserved(Reserved::Host, Some("192.168.0.1")),
                Protocol::Tcp,
                10250,
            ),
            3,
            1,
            1,
        ),
    ];
    let learned = run(&edges, &cluster(), Provider::Cilium, &no_options());
    let p = render_proposal(&learned.allow_lists[0]).unwrap();
    let rules = p
        .object
        .spec
        .kubernetes
        .as_ref()
        .unwrap()
        .egress
        .clone()
        .unwrap();
    let cidrs: Vec<String> = rules
        .iter()
        .map(|r| {
            r.to.as_ref().unwrap()[0]
                .ip_block
                .as_ref()
                .map(|b| b.cidr.clone())
                .unwrap_or_default()
        })
        .collect();
    // Host, kube-apiserver and address-less world are never turned into ipBlocks.
    assert_eq!(
        cidrs,
        ["198.51.100.1/32", "203.0.113.10/32", "2001:db8::7/128"]
    );
    assert!(rules.iter().all(|r| {
        r.to.as_ref().unwrap()[0]
            .ip_block
            .as_ref()
            .unwrap()
            .except
            .is_none()
    }));
    let row = p
        .evidence
        .iter()
        .find(|r| r.peer == PeerKey::Address("203.0.113.10".parse().unwrap()))
        .unwrap();
    assert_eq!(row.dns, ["api.example.com", "cdn.example.com"]);
    assert_eq!(row.flow_count, 2);
    let s = &learned.summary;
    assert_eq!(
        s.unresolved_peers.get(&PeerSkip::WorldWithoutAddress),
        Some(&Tally { edges: 1, flows: 7 })
    );
    assert_eq!(
        s.unmanaged_peers.get(&Reserved::KubeApiserver),
        Some(&Tally { edges: 1, flows: 2 })
    );
    assert_eq!(
        s.unmanaged_peers.get(&Reserved::Host),
        Some(&Tally { edges: 1, flows: 3 })
    );
    assert_eq!(
        s.allow_lists[0].omitted,
        Tally {
            edges: 3,
            flows: 12
        }
    );
    assert_accounted(s);
}

#[test]
fn unresolved_pod_peers_are_counted_per_allow_list() {
    let mut r = cluster();
    let mut nosel = pod("shop", Deployment, "nosel");
    nosel.selector = None;
    r.0.insert(ep("shop", Deployment, "nosel").id, Resolution::Pod(nosel));
    let ghost = Endpoint::new(EndpointId::Pod {
        namespace: "shop".into(),
        name: "ghost-1".into(),
    });
    let edges = [
        agg(
            edge(
                &db(),
                Direction::Ingress,
                &ep("shop", Deployment, "nosel"),
                Protocol::Tcp,
                5432,
            ),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &ghost, Protocol::Tcp, 5432),
            2,
            1,
            1,
        ),
    ];
    let learned = run(&edges, &r, Provider::Cilium, &no_options());
    assert!(
        learned.allow_lists.is_empty(),
        "no proposal that would deny what was seen"
    );
    let s = &learned.summary;
    assert_eq!(
        s.unresolved_peers.get(&PeerSkip::NoSelector),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_eq!(
        s.unresolved_peers.get(&PeerSkip::NotFound),
        Some(&Tally { edges: 1, flows: 2 })
    );
    assert_eq!(s.allow_lists.len(), 1);
    assert_eq!(
        (s.allow_lists[0].rules, s.allow_lists[0].omitted.flows),
        (0, 3)
    );
    assert_accounted(s);
}

#[test]
fn istio_renders_principals_and_port_strings_and_never_egress() {
    let client = ep("other", DaemonSet, "agent");
    let spiffe = Endpoint::new(EndpointId::External("10.1.1.1".parse().unwrap()))
        .with_identity(Some("spiffe://cluster.local/ns/x/sa/y".into()));
    let anonymous = ext("10.1.1.2");
    let edges = [
        agg(
            edge(&db(), Direction::Ingress, &client, Protocol::Tcp, 10000),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &client, Protocol::Tcp, 9000),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &web(), Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &spiffe, Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &anonymous, Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
        agg(
            edge(&db(), Direction::Ingress, &web(), Protocol::Udp, 53),
            1,
            1,
            1,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
    ];
    let learned = run(&edges, &cluster(), Provider::Istio, &no_options());
    assert_eq!(learned.allow_lists.len(), 1);
    let p = render_proposal(&learned.allow_lists[0]).unwrap();
    assert_eq!(
        p.object.metadata.name.as_deref(),
        Some("statefulset-db-ingress")
    );
    let spec = &p.object.spec;
    assert_eq!(
        (spec.backend, spec.direction, spec.kubernetes.is_none()),
        (Backend::Istio, ne_crds::PolicyDirection::Ingress, true)
    );
    let istio = spec.istio.as_ref().unwrap();
    assert_eq!(istio.selector, sel(&[("app", "db")], &[]));
    let rules: Vec<(Vec<String>, Vec<String>)> = istio
        .rules
        .iter()
        .map(|r| {
            (
                r.from[0].source.principals.clone(),
                r.to[0].operation.ports.clone(),
            )
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        rules,
        [
            (
                s(&["cluster.local/ns/other/sa/agent"]),
                s(&["9000", "10000"])
            ),
            (s(&["cluster.local/ns/shop/sa/web"]), s(&["5432"])),
            (s(&["cluster.local/ns/x/sa/y"]), s(&["5432"])),
        ]
    );
    let sm = &learned.summary;
    assert_eq!(
        sm.invalid_edges.get(&InvalidEdge::DirectionNotLearned),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_eq!(
        sm.invalid_edges.get(&InvalidEdge::Protocol),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_eq!(
        sm.unresolved_peers.get(&PeerSkip::NoIdentity),
        Some(&Tally { edges: 1, flows: 1 })
    );
    assert_accounted(sm);
}

#[test]
fn excluded_namespaces_are_skipped_as_subjects_only() {
    let dns = ep("kube-system", Deployment, "coredns");
    let edges = [
        agg(
            edge(&dns, Direction::Ingress, &web(), Protocol::Udp, 53),
            9,
            1,
            1,
        ),
        agg(
            edge(&web(), Direction::Egress, &dns, Protocol::Udp, 53),
            9,
            1,
            1,
        ),
    ];
    let options = LearnOptions {
        exclude_namespaces: ["kube-system".to_owned()].into(),
    };
    let learned = run(&edges, &cluster(), Provider::Cilium, &options);
    assert_eq!(learned.summary.excluded, Tally { edges: 1, flows: 9 });
    assert_eq!(learned.allow_lists.len(), 1);
    assert_eq!(
        learned.allow_lists[0].subject,
        wref("shop", Deployment, "web")
    );
    let peer = learned.allow_lists[0].peers.keys().next().unwrap();
    assert_eq!(peer.to_string(), "pods:kube-system/app=coredns");
    assert_accounted(&learned.summary);
}

#[test]
fn invalid_edges_are_counted() {
    let edges = [
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Tcp, 0),
            1,
            1,
            1,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Icmp, 0),
            1,
            1,
            1,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Icmp, 8),
            1,
            1,
            1,
        ),
    ];
    let learned = run(&edges, &cluster(), Provider::Cilium, &no_options());
    assert!(learned.allow_lists.is_empty());
    assert_eq!(
        learned.summary.invalid_edges.get(&InvalidEdge::NoPort),
        Some(&Tally { edges: 2, flows: 2 })
    );
    assert_eq!(
        learned.summary.invalid_edges.get(&InvalidEdge::Protocol),
        Some(&Tally { edges: 1, flows: 1 })
    );
}

#[test]
fn selector_conflicts_keep_the_smallest_selector() {
    let mut r = cluster();
    let mut other = pod("shop", Deployment, "web");
    other.selector = Some(sel(&[("app", "web"), ("track", "canary")], &[]));
    let canary = Endpoint::new(EndpointId::Pod {
        namespace: "shop".into(),
        name: "web-canary".into(),
    });
    r.0.insert(canary.id.clone(), Resolution::Pod(other));
    let edges = [
        agg(
            edge(&canary, Direction::Egress, &db(), Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
        agg(
            edge(&web(), Direction::Egress, &db(), Protocol::Tcp, 5432),
            1,
            1,
            1,
        ),
    ];
    for order in [[0, 1], [1, 0]] {
        let e: Vec<Agg> = order.iter().map(|&i| edges[i].clone()).collect();
        let learned = run(&e, &r, Provider::Cilium, &no_options());
        assert_eq!(learned.allow_lists[0].selector, sel(&[("app", "web")], &[]));
        assert!(learned.summary.allow_lists[0].selector_conflict);
    }
}

#[test]
fn fnv1a_is_the_standard_function() {
    // Published FNV-1a 32-bit test vectors: the hash is stable by definition.
    assert_eq!(render::fnv1a32(b""), 0x811c_9dc5);
    assert_eq!(render::fnv1a32(b"a"), 0xe40c_292c);
    assert_eq!(render::fnv1a32(b"foobar"), 0xbf9c_f968);
}

fn valid_label_value(s: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    s.len() <= 63
        && s.chars().all(ok_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[test]
fn proposal_names() {
    assert_eq!(
        proposal_name(Deployment, "http-server", Direction::Ingress),
        "deployment-http-server-ingress"
    );
    assert_eq!(
        proposal_name(DaemonSet, "Agent", Direction::Egress),
        "daemonset-agent-egress"
    );
    let exact = "a".repeat(63 - "statefulset--egress".len());
    assert_eq!(
        proposal_name(StatefulSet, &exact, Direction::Egress).len(),
        63,
        "63 is not cut"
    );
    // The cut lands right after a `-` here; it is trimmed, not left dangling before the hash.
    let long = format!("{}-{}", "x".repeat(42), "y".repeat(40));
    let name = proposal_name(Deployment, &long, Direction::Ingress);
    let full = format!("deployment-{long}-ingress");
    assert_eq!(
        name,
        format!(
            "deployment-{}-{:08x}",
            "x".repeat(42),
            render::fnv1a32(full.as_bytes())
        )
    );
    assert!(valid_label_value(&name), "{name}");
    assert_eq!(
        name,
        proposal_name(Deployment, &long, Direction::Ingress),
        "stable"
    );
    assert_ne!(
        name,
        proposal_name(Deployment, &long, Direction::Egress),
        "direction still distinguishes"
    );
    let weird = proposal_name(
        Deployment,
        &format!("{}_ü", "z".repeat(70)),
        Direction::Egress,
    );
    assert!(valid_label_value(&weird), "{weird}");
}

proptest! {
    #[test]
    fn long_names_are_valid_and_distinct(name in "[a-z0-9]([-a-z0-9.]{0,100}[a-z0-9])?") {
        let n = proposal_name(StatefulSet, &name, Direction::Ingress);
        prop_assert!(valid_label_value(&n), "{}", n);
        let full = format!("statefulset-{name}-ingress");
        if full.len() <= 63 { prop_assert_eq!(n, full) } else { prop_assert_eq!(n.len() <= 63, true) }
    }
}

// ---- Properties over a small universe: order independence and learn/eval consistency.

/// Peers of the universe: workloads, externals, reserved identities, an unknown pod.
fn universe_peers() -> Vec<Endpoint> {
    let mut dns_ext = ext("203.0.113.10");
    dns_ext.identity = Some("cluster.local/ns/ext/sa/gw".into());
    vec![
        web(),
        db(),
        ep("other", DaemonSet, "agent"),
        ep("kube-system", Deployment, "coredns"),
        ep("batch", Job, "report"),
        dns_ext,
        ext("2001:db8::7"),
        reserved(Reserved::World, Some("198.51.100.1")),
        reserved(Reserved::World, None),
        reserved(Reserved::Host, Some("192.168.0.1")),
        reserved(Reserved::KubeApiserver, Some("10.96.0.1")),
        Endpoint::new(EndpointId::Pod {
            namespace: "shop".into(),
            name: "ghost".into(),
        }),
    ]
}

fn universe_subjects() -> Vec<Endpoint> {
    vec![
        web(),
        db(),
        ep("other", DaemonSet, "agent"),
        ep("batch", Job, "report"),
        ep("kube-system", Deployment, "coredns"),
    ]
}

pub(super) fn arb_edge() -> impl Strategy<Value = Agg> {
    let protos = prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp)
    ];
    let dirs = prop_oneof![Just(Direction::Ingress), Just(Direction::Egress)];
    (
        0..5usize,
        dirs,
        0..12usize,
        protos,
        prop::sample::select(vec![53u16, 80, 443, 8080, 9000]),
        1..50u64,
        0..100i64,
        0..100i64,
        any::<bool>(),
    )
        .prop_map(|(s, d, p, proto, port, count, a, b, dns)| {
            let mut e = edge(
                &universe_subjects()[s],
                d,
                &universe_peers()[p],
                proto,
                port,
            );
            if dns && d == Direction::Egress {
                e.peer_dns = Some(format!("n{port}.example.com").into());
            }
            agg(e, count, a.min(b), a.max(b))
        })
}

pub(super) fn arb_provider() -> impl Strategy<Value = Provider> {
    prop_oneof![
        Just(Provider::Cilium),
        Just(Provider::Calico),
        Just(Provider::Istio)
    ]
}

/// Whether an edge should end up in a rule (an independent restatement of the rules).
fn learnable(e: &Edge, provider: Provider, r: &MapResolver) -> bool {
    let subject_ok = matches!(r.resolve(&e.subject), Resolution::Pod(p) if p.owner.as_ref().is_some_and(|o| o.kind.is_subject()));
    let peer_ok = match provider {
        Provider::Istio => {
            e.direction == Direction::Ingress
                && e.protocol == Protocol::Tcp
                && e.peer.identity.is_some()
        }
        Provider::Cilium | Provider::Calico => match r.resolve(&e.peer) {
            Resolution::Pod(_) | Resolution::External(_) => true,
            Resolution::Reserved(Reserved::World) => e.peer.ip.is_some(),
            _ => false,
        },
    };
    subject_ok && peer_ok
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn output_does_not_depend_on_input_order(
        (edges, shuffled) in prop::collection::vec(arb_edge(), 1..40).prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
        provider in arb_provider(),
    ) {
        let r = cluster();
        let a = run(&edges, &r, provider, &no_options());
        let b = run(&shuffled, &r, provider, &no_options());
        prop_assert_eq!(&a, &b);
        let render = |l: &Learned| {
            l.allow_lists.iter().map(|x| serde_json::to_value(render_proposal(x).unwrap()).unwrap()).collect::<Vec<_>>()
        };
        prop_assert_eq!(render(&a), render(&b));
        assert_accounted(&a.summary);
    }

    /// The key consistency property: a rendered proposal allows every edge it was learned
    /// from, and denies edges whose peer it could not express. Ports are never invented.
    #[test]
    fn rendered_proposals_allow_exactly_what_was_learned(edges in prop::collection::vec(arb_edge(), 1..40), provider in arb_provider()) {
        let r = cluster();
        let learned = run(&edges, &r, provider, &no_options());
        let proposals: HashMap<(WorkloadRef, Direction), Proposal> = learned
            .allow_lists
            .iter()
            .map(|l| ((l.subject.clone(), l.direction), render_proposal(l).unwrap()))
            .collect();
        for (e, ..) in &edges {
            let EndpointId::Workload(w) = &e.subject.id else { continue };
            let Some(p) = proposals.get(&(w.clone(), e.direction)) else {
                prop_assert!(!learnable(e, provider, &r), "learnable edge without proposal: {:?}", e);
                continue;
            };
            let ns = p.object.metadata.namespace.as_deref().unwrap();
            let decision = check_edge(PolicyRef::from(&p.object.spec), ns, e, crate::resolve::Seen::UNKNOWN, &r).unwrap();
            if learnable(e, provider, &r) {
                prop_assert!(matches!(decision, Decision::Allowed { .. }), "{:?} {:?}", e, decision);
                prop_assert!(p.evidence.iter().any(|row| row.port == e.port && row.protocol == e.protocol));
            } else if provider == Provider::Istio && e.protocol != Protocol::Tcp {
                // ztunnel does not authorize UDP: nothing to learn, nothing to deny.
                prop_assert_eq!(decision, Decision::NotRestricted);
            } else if provider != Provider::Istio
                && e.direction == Direction::Ingress
                && e.peer.id == EndpointId::Reserved(Reserved::Host)
            {
                // A NetworkPolicy never blocks the pod's own node: an unmanaged peer, but
                // no violation.
                prop_assert_eq!(decision, Decision::NodeLocal);
            } else {
                prop_assert!(matches!(decision, Decision::Denied { invalid_skipped: false, .. }), "{:?} {:?}", e, decision);
            }
        }
        // No port in any proposal that no input edge had.
        for p in proposals.values() {
            for row in &p.evidence {
                prop_assert!(edges.iter().any(|(e, ..)| e.port == row.port && e.protocol == row.protocol));
            }
        }
    }

    /// The status and the typed evidence rows of a rendered proposal say the same: one
    /// status row per evidence row, in rule order, with the peer's text, protocol, port,
    /// flow count and DNS names.
    #[test]
    fn the_status_and_the_evidence_rows_agree(edges in prop::collection::vec(arb_edge(), 1..40), provider in arb_provider()) {
        let r = cluster();
        let learned = run(&edges, &r, provider, &no_options());
        for list in &learned.allow_lists {
            let p = render_proposal(list).unwrap();
            let status = p.object.status.as_ref().expect("a status");
            let from_status: Vec<_> = status
                .peers
                .iter()
                .map(|e| (e.peer.clone(), e.protocol.clone(), e.port, e.flow_count, e.dns_name.clone()))
                .collect();
            let from_rows: Vec<_> = p
                .evidence
                .iter()
                .map(|row| {
                    let dns = (!row.dns.is_empty()).then(|| row.dns.join(","));
                    (row.peer.to_string(), row.protocol.as_str().to_owned(), i32::from(row.port), row.flow_count as i64, dns)
                })
                .collect();
            prop_assert_eq!(from_status, from_rows);
            prop_assert_eq!(status.flow_count, p.flow_count as i64);
        }
    }
}
