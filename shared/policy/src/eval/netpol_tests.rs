use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::eval::Decision::{Allowed, Denied, NotRestricted};
use crate::eval::DenyReason;
use crate::eval::selector::tests::sel;
use crate::eval::test_support::{TestFlow, from_ip, from_pod};
use ne_flow::flow::Reserved;

const NS: &str = "shop";

fn pods(s: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(s),
        ..Default::default()
    }
}

fn namespaces(s: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(s),
        ..Default::default()
    }
}

fn both(ns: LabelSelector, pod: LabelSelector) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        namespace_selector: Some(ns),
        pod_selector: Some(pod),
        ..Default::default()
    }
}

fn block(cidr: &str, except: &[&str]) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: (!except.is_empty()).then(|| except.iter().map(|e| e.to_string()).collect()),
        }),
        ..Default::default()
    }
}

fn port(
    protocol: Option<&str>,
    port: Option<IntOrString>,
    end_port: Option<i32>,
) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: protocol.map(str::to_owned),
        port,
        end_port,
    }
}

fn tcp(n: i32) -> NetworkPolicyPort {
    port(Some("TCP"), Some(IntOrString::Int(n)), None)
}

/// An Ingress-only policy with one rule per `(peers, ports)`; empty lists become absent.
fn ingress(rules: Vec<(Vec<NetworkPolicyPeer>, Vec<NetworkPolicyPort>)>) -> NetworkPolicySpec {
    NetworkPolicySpec {
        pod_selector: Some(sel(&[("app", "api")], &[])),
        policy_types: Some(vec!["Ingress".into()]),
        ingress: Some(
            rules
                .into_iter()
                .map(|(from, ports)| NetworkPolicyIngressRule {
                    from: (!from.is_empty()).then_some(from),
                    ports: (!ports.is_empty()).then_some(ports),
                })
                .collect(),
        ),
        egress: None,
    }
}

fn egress(rules: Vec<(Vec<NetworkPolicyPeer>, Vec<NetworkPolicyPort>)>) -> NetworkPolicySpec {
    NetworkPolicySpec {
        pod_selector: Some(sel(&[("app", "api")], &[])),
        policy_types: Some(vec!["Egress".into()]),
        egress: Some(
            rules
                .into_iter()
                .map(|(to, ports)| NetworkPolicyEgressRule {
                    to: (!to.is_empty()).then_some(to),
                    ports: (!ports.is_empty()).then_some(ports),
                })
                .collect(),
        ),
        ingress: None,
    }
}

/// Denied: no rule admits the peer.
const DENIED: Decision = Denied {
    reason: DenyReason::NoRuleForPeer,
    invalid_skipped: false,
};
/// Denied: a rule admits the peer, not the port.
const DENIED_PORT: Decision = Denied {
    reason: DenyReason::PortNotAllowed,
    invalid_skipped: false,
};
/// Denied: a rule admits the peer and the port, over another protocol.
const DENIED_PROTOCOL: Decision = Denied {
    reason: DenyReason::ProtocolNotAllowed,
    invalid_skipped: false,
};
const ALLOWED: Decision = Allowed { rule: 0 };

fn check(cases: &[(&str, &NetworkPolicySpec, TestFlow, Decision)]) {
    for (name, spec, flow, want) in cases {
        assert_eq!(evaluate(spec, NS, &flow.view()), *want, "{name}");
    }
}

#[test]
fn namespace_only_peer() {
    let p = ingress(vec![(vec![namespaces(sel(&[("team", "a")], &[]))], vec![])]);
    check(&[
        (
            "labelled namespace, any pod",
            &p,
            from_pod("other", &[]).ns_labels(&[("team", "a")]),
            ALLOWED,
        ),
        (
            "unlabelled namespace",
            &p,
            from_pod("other", &[("app", "web")]),
            DENIED,
        ),
        (
            "policy namespace itself is not special",
            &p,
            from_pod(NS, &[]),
            DENIED,
        ),
        ("external address", &p, from_ip("10.0.0.1"), DENIED),
    ]);
    let by_name = ingress(vec![(
        vec![namespaces(sel(
            &[("kubernetes.io/metadata.name", "db")],
            &[],
        ))],
        vec![],
    )]);
    check(&[
        ("namespace by name", &by_name, from_pod("db", &[]), ALLOWED),
        (
            "other namespace by name",
            &by_name,
            from_pod("dbx", &[]),
            DENIED,
        ),
    ]);
}

#[test]
fn pod_only_peer_is_in_the_policy_namespace() {
    let p = ingress(vec![(vec![pods(sel(&[("app", "web")], &[]))], vec![])]);
    check(&[
        (
            "same namespace, matching",
            &p,
            from_pod(NS, &[("app", "web")]),
            ALLOWED,
        ),
        (
            "other namespace, matching labels",
            &p,
            from_pod("other", &[("app", "web")]),
            DENIED,
        ),
        (
            "same namespace, other labels",
            &p,
            from_pod(NS, &[("app", "db")]),
            DENIED,
        ),
        (
            "another node's identity",
            &p,
            from_ip("192.168.1.2").reserved(Reserved::RemoteNode),
            DENIED,
        ),
    ]);
}

#[test]
fn namespace_and_pod_selector_are_anded() {
    let p = ingress(vec![(
        vec![both(
            sel(&[("team", "a")], &[]),
            sel(&[("app", "web")], &[]),
        )],
        vec![],
    )]);
    check(&[
        (
            "both match",
            &p,
            from_pod("other", &[("app", "web")]).ns_labels(&[("team", "a")]),
            ALLOWED,
        ),
        (
            "namespace only",
            &p,
            from_pod("other", &[("app", "db")]).ns_labels(&[("team", "a")]),
            DENIED,
        ),
        ("pod only", &p, from_pod("other", &[("app", "web")]), DENIED),
        (
            "pod only, policy namespace",
            &p,
            from_pod(NS, &[("app", "web")]),
            DENIED,
        ),
    ]);
    // Separate peers are ORed.
    let or = ingress(vec![(
        vec![
            namespaces(sel(&[("team", "a")], &[])),
            pods(sel(&[("app", "web")], &[])),
        ],
        vec![],
    )]);
    check(&[
        (
            "first peer",
            &or,
            from_pod("other", &[]).ns_labels(&[("team", "a")]),
            ALLOWED,
        ),
        ("second peer", &or, from_pod(NS, &[("app", "web")]), ALLOWED),
        ("neither", &or, from_pod("other", &[("app", "web")]), DENIED),
    ]);
}

#[test]
fn empty_selectors_match_everything_of_their_kind() {
    let all_ns = ingress(vec![(vec![namespaces(sel(&[], &[]))], vec![])]);
    let own_ns = ingress(vec![(vec![pods(sel(&[], &[]))], vec![])]);
    let all_pods = ingress(vec![(vec![both(sel(&[], &[]), sel(&[], &[]))], vec![])]);
    check(&[
        (
            "{} namespaces: any pod",
            &all_ns,
            from_pod("anywhere", &[("x", "y")]),
            ALLOWED,
        ),
        (
            "{} namespaces: not external",
            &all_ns,
            from_ip("8.8.8.8"),
            DENIED,
        ),
        (
            "{} namespaces: not a node",
            &all_ns,
            from_ip("10.0.0.1").reserved(Reserved::RemoteNode),
            DENIED,
        ),
        (
            "{} pods: own namespace",
            &own_ns,
            from_pod(NS, &[]),
            ALLOWED,
        ),
        (
            "{} pods: other namespace",
            &own_ns,
            from_pod("other", &[]),
            DENIED,
        ),
        (
            "{} both: any pod",
            &all_pods,
            from_pod("other", &[]),
            ALLOWED,
        ),
    ]);
}

#[test]
fn match_expressions_in_peers() {
    let expr = |op: &str, vals: &[&str]| {
        ingress(vec![(vec![pods(sel(&[], &[("tier", op, vals)]))], vec![])])
    };
    let (in_, not_in, exists, dne) = (
        expr("In", &["front", "edge"]),
        expr("NotIn", &["back"]),
        expr("Exists", &[]),
        expr("DoesNotExist", &[]),
    );
    check(&[
        ("In hit", &in_, from_pod(NS, &[("tier", "edge")]), ALLOWED),
        ("In miss", &in_, from_pod(NS, &[("tier", "back")]), DENIED),
        ("In absent", &in_, from_pod(NS, &[]), DENIED),
        (
            "NotIn hit",
            &not_in,
            from_pod(NS, &[("tier", "back")]),
            DENIED,
        ),
        (
            "NotIn other",
            &not_in,
            from_pod(NS, &[("tier", "front")]),
            ALLOWED,
        ),
        ("NotIn absent", &not_in, from_pod(NS, &[]), ALLOWED),
        ("Exists", &exists, from_pod(NS, &[("tier", "")]), ALLOWED),
        ("Exists absent", &exists, from_pod(NS, &[]), DENIED),
        ("DoesNotExist absent", &dne, from_pod(NS, &[]), ALLOWED),
        (
            "DoesNotExist present",
            &dne,
            from_pod(NS, &[("tier", "x")]),
            DENIED,
        ),
    ]);
}

#[test]
fn invalid_operator_matches_nothing_and_is_flagged() {
    let bad = sel(&[], &[("tier", "Equals", &["front"])]);
    let p = ingress(vec![
        (vec![pods(bad.clone())], vec![]),
        (vec![pods(sel(&[("app", "web")], &[]))], vec![]),
    ]);
    check(&[
        (
            "invalid rule skipped",
            &p,
            from_pod(NS, &[("tier", "front")]),
            Denied {
                reason: DenyReason::NoRuleForPeer,
                invalid_skipped: true,
            },
        ),
        (
            "next rule still allows",
            &p,
            from_pod(NS, &[("tier", "front"), ("app", "web")]),
            Allowed { rule: 1 },
        ),
        // The selector is reported even when the peer could not have matched anyway.
        (
            "non-pod peer",
            &p,
            from_ip("1.2.3.4"),
            Denied {
                reason: DenyReason::NoRuleForPeer,
                invalid_skipped: true,
            },
        ),
    ]);
    let issues = validate(&p);
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].path, "ingress[0].from[0].podSelector");
    assert_eq!(
        issues[0].to_string(),
        "ingress[0].from[0].podSelector: unknown selector operator \"Equals\""
    );
}

#[test]
fn ip_block_with_except() {
    let v4 = ingress(vec![(
        vec![block("172.17.0.0/16", &["172.17.1.0/24"])],
        vec![],
    )]);
    let v6 = ingress(vec![(
        vec![block("2001:db8::/48", &["2001:db8:0:ff::/64"])],
        vec![],
    )]);
    check(&[
        ("v4 inside", &v4, from_ip("172.17.0.5"), ALLOWED),
        ("v4 in except", &v4, from_ip("172.17.1.5"), DENIED),
        ("v4 outside", &v4, from_ip("172.18.0.1"), DENIED),
        (
            "v4 block vs v6 address",
            &v4,
            from_ip("2001:db8::1"),
            DENIED,
        ),
        (
            "v4 block matches a pod by address",
            &v4,
            from_pod("other", &[]).ip("172.17.2.2"),
            ALLOWED,
        ),
        ("no address", &v4, from_pod("other", &[]), DENIED),
        ("v6 inside", &v6, from_ip("2001:db8::1"), ALLOWED),
        ("v6 in except", &v6, from_ip("2001:db8:0:ff::1"), DENIED),
        ("v6 outside", &v6, from_ip("2001:db9::1"), DENIED),
    ]);
    let broken = ingress(vec![(vec![block("172.17.0.0/16", &["nonsense"])], vec![])]);
    assert_eq!(
        evaluate(&broken, NS, &from_ip("172.17.0.5").view()),
        Denied {
            reason: DenyReason::NoRuleForPeer,
            invalid_skipped: true
        }
    );
    assert_eq!(
        validate(&broken)[0].path,
        "ingress[0].from[0].ipBlock.except[0]"
    );
    let mixed = ingress(vec![(
        vec![NetworkPolicyPeer {
            pod_selector: Some(sel(&[], &[])),
            ..block("0.0.0.0/0", &[])
        }],
        vec![],
    )]);
    assert_eq!(
        evaluate(&mixed, NS, &from_ip("1.1.1.1").view()),
        Denied {
            reason: DenyReason::NoRuleForPeer,
            invalid_skipped: true
        }
    );
    assert_eq!(validate(&mixed)[0].problem, Problem::IpBlockWithSelector);
}

#[test]
fn port_ranges_with_end_port() {
    let p = ingress(vec![(
        vec![],
        vec![port(Some("TCP"), Some(IntOrString::Int(8000)), Some(8100))],
    )]);
    let f = || from_pod(NS, &[]);
    check(&[
        ("low end", &p, f().port(8000), ALLOWED),
        ("inside", &p, f().port(8050), ALLOWED),
        ("high end", &p, f().port(8100), ALLOWED),
        ("above", &p, f().port(8101), DENIED_PORT),
        ("below", &p, f().port(7999), DENIED_PORT),
        (
            "other protocol",
            &p,
            f().port(8050).proto(Protocol::Udp),
            DENIED_PROTOCOL,
        ),
    ]);
    let reversed = ingress(vec![(
        vec![],
        vec![port(None, Some(IntOrString::Int(9000)), Some(8000))],
    )]);
    assert_eq!(
        evaluate(&reversed, NS, &f().port(8500).view()),
        Denied {
            reason: DenyReason::PortNotAllowed,
            invalid_skipped: true
        }
    );
    assert_eq!(
        validate(&reversed)[0].problem,
        Problem::BadEndPort {
            port: 9000,
            end: 8000
        }
    );
}

#[test]
fn named_ports_resolve_against_the_destination_pod() {
    let named = |name: &str, proto: Option<&str>| {
        ingress(vec![(
            vec![],
            vec![port(proto, Some(IntOrString::String(name.into())), None)],
        )])
    };
    let http = named("http", None);
    let dns = named("dns", Some("UDP"));
    let f = || {
        from_pod(NS, &[])
            .named("http", Protocol::Tcp, 8080)
            .named("dns", Protocol::Udp, 53)
    };
    check(&[
        (
            "resolves to the flow's port",
            &http,
            f().port(8080),
            ALLOWED,
        ),
        (
            "resolves to another port",
            &http,
            f().port(8081),
            DENIED_PORT,
        ),
        (
            "unknown name",
            &named("grpc", None),
            f().port(8080),
            DENIED_PORT,
        ),
        (
            "no named ports known",
            &http,
            from_pod(NS, &[]).port(8080),
            DENIED_PORT,
        ),
        (
            "UDP named port",
            &dns,
            f().port(53).proto(Protocol::Udp),
            ALLOWED,
        ),
        (
            "named port protocol must agree",
            &named("dns", None),
            f().port(53).proto(Protocol::Udp),
            DENIED_PORT,
        ),
    ]);
    // Egress: the peer's (destination's) named ports are the ones in the view.
    let eg = egress(vec![(
        vec![],
        vec![port(None, Some(IntOrString::String("http".into())), None)],
    )]);
    assert_eq!(evaluate(&eg, NS, &f().egress().port(8080).view()), ALLOWED);
}

#[test]
fn protocol_defaults_to_tcp() {
    let p = ingress(vec![(
        vec![],
        vec![port(None, Some(IntOrString::Int(53)), None)],
    )]);
    check(&[
        ("TCP", &p, from_pod(NS, &[]).port(53), ALLOWED),
        (
            "UDP",
            &p,
            from_pod(NS, &[]).port(53).proto(Protocol::Udp),
            DENIED_PROTOCOL,
        ),
        (
            "SCTP",
            &p,
            from_pod(NS, &[]).port(53).proto(Protocol::Sctp),
            DENIED_PROTOCOL,
        ),
    ]);
    let lower = ingress(vec![(
        vec![],
        vec![port(Some("udp"), Some(IntOrString::Int(53)), None)],
    )]);
    let udp = from_pod(NS, &[]).port(53).proto(Protocol::Udp);
    assert_eq!(
        evaluate(&lower, NS, &udp.view()),
        Denied {
            reason: DenyReason::PortNotAllowed,
            invalid_skipped: true
        }
    );
    // A port without a number is every port of the protocol.
    let all_udp = ingress(vec![(vec![], vec![port(Some("UDP"), None, None)])]);
    assert_eq!(
        evaluate(&all_udp, NS, &udp.clone().port(9999).view()),
        ALLOWED
    );
    assert_eq!(
        evaluate(&all_udp, NS, &from_pod(NS, &[]).port(9999).view()),
        DENIED_PROTOCOL
    );
}

#[test]
fn absent_peers_and_ports_match_everything() {
    let any_peer = ingress(vec![(vec![], vec![tcp(80)])]);
    let any_port = ingress(vec![(vec![pods(sel(&[("app", "web")], &[]))], vec![])]);
    let empty_lists = NetworkPolicySpec {
        ingress: Some(vec![NetworkPolicyIngressRule {
            from: Some(vec![]),
            ports: Some(vec![]),
        }]),
        ..ingress(vec![])
    };
    check(&[
        ("no from: external", &any_peer, from_ip("8.8.8.8"), ALLOWED),
        (
            "no from: a node",
            &any_peer,
            from_ip("10.0.0.1").reserved(Reserved::RemoteNode),
            ALLOWED,
        ),
        (
            "no from: wrong port",
            &any_peer,
            from_ip("8.8.8.8").port(81),
            DENIED_PORT,
        ),
        (
            "no ports: UDP",
            &any_port,
            from_pod(NS, &[("app", "web")])
                .port(53)
                .proto(Protocol::Udp),
            ALLOWED,
        ),
        (
            "no ports: SCTP",
            &any_port,
            from_pod(NS, &[("app", "web")])
                .port(9)
                .proto(Protocol::Sctp),
            ALLOWED,
        ),
        (
            "empty lists",
            &empty_lists,
            from_ip("8.8.8.8").port(1),
            ALLOWED,
        ),
    ]);
}

#[test]
fn policy_types_decide_what_is_restricted() {
    let ing = ingress(vec![(vec![], vec![])]);
    let eg_flow = || from_ip("1.1.1.1").egress();
    assert_eq!(evaluate(&ing, NS, &eg_flow().view()), NotRestricted);
    let default_types = NetworkPolicySpec {
        policy_types: None,
        ..ingress(vec![])
    };
    assert_eq!(
        evaluate(&default_types, NS, &eg_flow().view()),
        NotRestricted
    );
    assert_eq!(
        evaluate(&default_types, NS, &from_ip("1.1.1.1").view()),
        DENIED
    );
    let default_with_egress = NetworkPolicySpec {
        policy_types: None,
        ..egress(vec![(vec![], vec![tcp(443)])])
    };
    assert_eq!(
        evaluate(&default_with_egress, NS, &eg_flow().port(443).view()),
        ALLOWED
    );
    assert_eq!(
        evaluate(&default_with_egress, NS, &eg_flow().port(80).view()),
        DENIED_PORT
    );
    let eg_only = egress(vec![]);
    assert_eq!(
        evaluate(&eg_only, NS, &from_ip("1.1.1.1").view()),
        NotRestricted
    );
}

#[test]
fn restricted_direction_without_rules_denies_all() {
    let none = NetworkPolicySpec {
        ingress: None,
        ..ingress(vec![])
    };
    let empty = ingress(vec![]);
    assert_eq!(evaluate(&none, NS, &from_pod(NS, &[]).view()), DENIED);
    assert_eq!(evaluate(&empty, NS, &from_pod(NS, &[]).view()), DENIED);
    let eg = egress(vec![]);
    assert_eq!(
        evaluate(&eg, NS, &from_ip("8.8.8.8").egress().view()),
        DENIED
    );
}

#[test]
fn rules_are_ored_and_report_their_index() {
    let p = ingress(vec![
        (vec![block("10.0.0.0/8", &[])], vec![tcp(80)]),
        (vec![], vec![tcp(443)]),
    ]);
    check(&[
        ("first rule", &p, from_ip("10.1.1.1"), Allowed { rule: 0 }),
        (
            "second rule",
            &p,
            from_ip("8.8.8.8").port(443),
            Allowed { rule: 1 },
        ),
        (
            "peer of one, port of the other",
            &p,
            from_ip("8.8.8.8"),
            DENIED_PORT,
        ),
    ]);
}

#[test]
fn validate_reports_every_problem_with_its_path() {
    let spec = NetworkPolicySpec {
        policy_types: Some(vec!["Ingress".into(), "ingress".into()]),
        ..ingress(vec![
            (
                vec![NetworkPolicyPeer::default()],
                vec![port(Some("ICMP"), None, None)],
            ),
            (
                vec![block("10.0.0.0/33", &[])],
                vec![
                    tcp(0),
                    port(None, Some(IntOrString::String("x".into())), Some(9)),
                ],
            ),
        ])
    };
    let got: Vec<String> = validate(&spec).iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "policyTypes[1]: unknown policy type \"ingress\"",
            "ingress[0].from[0]: a peer must set ipBlock, namespaceSelector or podSelector",
            "ingress[0].ports[0]: unknown protocol \"ICMP\" (TCP, UDP or SCTP)",
            "ingress[1].from[0].ipBlock.cidr: invalid cidr \"10.0.0.0/33\"",
            "ingress[1].ports[0]: port 0 is outside 1-65535",
            "ingress[1].ports[1]: endPort needs a numeric port",
        ]
    );
    assert!(
        validate(&ingress(vec![(
            vec![pods(sel(&[("a", "b")], &[]))],
            vec![tcp(1)]
        )]))
        .is_empty()
    );
}

/// `metadata.name` and `spec` of a NetworkPolicy document.
#[derive(serde::Deserialize)]
struct Doc {
    metadata: Meta,
    spec: NetworkPolicySpec,
}

#[derive(serde::Deserialize)]
struct Meta {
    name: String,
    namespace: String,
}

fn real_policies() -> Vec<Doc> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/real/networkpolicy-examples.yaml"
    );
    let text = std::fs::read_to_string(path).expect("testdata/real/networkpolicy-examples.yaml");
    serde_saphyr::from_multiple(&text).expect("valid yaml")
}

#[test]
fn real_kubernetes_example_policy() {
    let docs = real_policies();
    let doc = docs
        .iter()
        .find(|d| d.metadata.name == "test-network-policy")
        .expect("document 1");
    assert!(validate(&doc.spec).is_empty());
    let (spec, ns) = (&doc.spec, doc.metadata.namespace.as_str());
    assert_eq!(ns, "default");
    let ok = |f: TestFlow| evaluate(spec, ns, &f.view()).is_allowed();
    // ingress: ipBlock 172.17.0.0/16 except 172.17.1.0/24, namespace project=myproject,
    // pod role=frontend in the policy namespace; TCP 6379 only.
    assert!(ok(from_ip("172.17.0.5").port(6379)));
    assert!(!ok(from_ip("172.17.1.5").port(6379)), "except");
    assert!(!ok(from_ip("172.17.0.5").port(6380)), "other port");
    assert!(
        !ok(from_ip("172.17.0.5").port(6379).proto(Protocol::Udp)),
        "other protocol"
    );
    assert!(!ok(from_ip("172.18.0.5").port(6379)), "outside the block");
    assert!(ok(from_pod("default", &[("role", "frontend")]).port(6379)));
    assert!(
        !ok(from_pod("other", &[("role", "frontend")]).port(6379)),
        "pod selector is namespace-local"
    );
    assert!(!ok(from_pod("default", &[("role", "backend")]).port(6379)));
    assert!(ok(from_pod("other", &[("any", "pod")])
        .ns_labels(&[("project", "myproject")])
        .port(6379)));
    assert!(!ok(from_pod("other", &[])
        .ns_labels(&[("project", "theirproject")])
        .port(6379)));
    // egress: 10.0.0.0/24 on TCP 5978.
    assert!(ok(from_ip("10.0.0.7").egress().port(5978)));
    assert!(!ok(from_ip("10.0.1.7").egress().port(5978)));
    assert!(!ok(from_ip("10.0.0.7").egress().port(5979)));
    assert!(
        !ok(from_pod("default", &[("role", "frontend")])
            .egress()
            .port(5978)),
        "egress has no pod peers"
    );
}

#[test]
fn real_allow_only_tcp_8080_policy() {
    let docs = real_policies();
    let doc = docs
        .iter()
        .find(|d| d.metadata.name == "allow-only-tcp-8080")
        .expect("document 2");
    let (spec, ns) = (&doc.spec, doc.metadata.namespace.as_str());
    let ok = |f: TestFlow| evaluate(spec, ns, &f.view());
    assert!(ok(from_pod("test-ns", &[("run", "client")]).port(8080)).is_allowed());
    assert_eq!(
        ok(from_pod("test-ns", &[("run", "client")])
            .port(8080)
            .proto(Protocol::Udp)),
        DENIED_PROTOCOL
    );
    assert_eq!(
        ok(from_pod("default", &[("run", "client")]).port(8080)),
        DENIED
    );
    assert_eq!(ok(from_ip("10.0.0.1").port(8080)), DENIED);
    assert_eq!(
        ok(from_ip("10.0.0.1").egress().port(8080)),
        NotRestricted,
        "policyTypes is Ingress only"
    );
}

#[test]
fn ingress_from_the_own_node_is_always_allowed() {
    let deny_all = ingress(vec![]);
    let only_web = ingress(vec![(
        vec![pods(sel(&[("app", "web")], &[]))],
        vec![tcp(8080)],
    )]);
    let egress_only_web = egress(vec![(
        vec![pods(sel(&[("app", "web")], &[]))],
        vec![tcp(8080)],
    )]);
    let host = || from_ip("172.18.0.3").reserved(Reserved::Host);
    check(&[
        (
            "kubelet probe against deny-all",
            &deny_all,
            host(),
            Decision::NodeLocal,
        ),
        (
            "kubelet probe against a rule for other pods",
            &only_web,
            host(),
            Decision::NodeLocal,
        ),
        (
            "remote node is not exempt",
            &deny_all,
            from_ip("172.18.0.4").reserved(Reserved::RemoteNode),
            DENIED,
        ),
        (
            "egress to the host is restricted",
            &egress_only_web,
            host().egress(),
            DENIED,
        ),
    ]);
}
