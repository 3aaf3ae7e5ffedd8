//! The compiled evaluator decides as the scanning one does, on policies that mix every
//! kind of peer, valid and invalid, and on flows of every kind of peer.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ne_crds::{
    Backend, IstioAuthorizationPolicySpec, IstioFrom, IstioOperation, IstioRule, IstioSource,
    IstioTo, PolicyDirection,
};
use ne_flow::flow::{Direction, Protocol, Reserved, labels};
use proptest::prelude::*;

use super::Compiled;
use crate::eval::test_support::{TestFlow, TestPeer, from_ip};
use crate::eval::{Decision, PolicyRef, evaluate};
use crate::resolve::NamedPort;

const NAMESPACE: &str = "default";

fn pick<T: Clone + std::fmt::Debug + 'static>(items: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(items)
}

/// Mostly one of `common`, now and then one of `rare`: policies of many rules in which an
/// invalid part, or a rule matching every peer, is met only sometimes (a part met on every
/// check would hide a rule wrongly left out).
fn rarely<T: Clone + std::fmt::Debug + 'static>(
    common: &'static [T],
    rare: &'static [T],
) -> impl Strategy<Value = T> {
    prop_oneof![40 => pick(common), 1 => pick(rare)]
}

const CIDRS: &[&str] = &[
    "10.0.0.0/8",
    "10.1.0.0/16",
    "10.1.2.3/32",
    "10.1.2.4/32",
    "0.0.0.0/0",
    "2001:db8::/32",
    "2001:db8::7/128",
    "::ffff:10.1.2.3/128",
];
const BAD_CIDRS: &[&str] = &["bad", "10.0.0.0/33"];
const PAIRS: &[(&str, &str)] = &[
    ("app", "a"),
    ("app", "b"),
    ("tier", "x"),
    ("kubernetes.io/metadata.name", "default"),
    ("kubernetes.io/metadata.name", "other"),
    ("team", "z"),
];

fn selector() -> impl Strategy<Value = LabelSelector> {
    const REQUIREMENTS: &[(&str, &str, &[&str])] = &[
        ("app", "In", &["a"]),
        ("tier", "NotIn", &["x"]),
        ("app", "Exists", &[]),
    ];
    const BAD_REQUIREMENTS: &[(&str, &str, &[&str])] = &[("app", "Bogus", &[]), ("app", "In", &[])];
    let requirement = rarely(REQUIREMENTS, BAD_REQUIREMENTS).prop_map(|(key, operator, values)| {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: operator.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    });
    (
        proptest::collection::vec(pick(PAIRS), 0..3),
        proptest::option::of(requirement),
    )
        .prop_map(|(pairs, requirement)| LabelSelector {
            match_labels: (!pairs.is_empty()).then(|| {
                let map: BTreeMap<String, String> = pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect();
                map
            }),
            match_expressions: requirement.map(|r| vec![r]),
        })
}

fn block() -> impl Strategy<Value = IPBlock> {
    const EXCEPTS: &[Option<&str>] = &[None, Some("10.1.0.0/16")];
    (rarely(CIDRS, BAD_CIDRS), rarely(EXCEPTS, &[Some("bad")])).prop_map(|(cidr, except)| IPBlock {
        cidr: cidr.to_owned(),
        except: except.map(|e| vec![e.to_owned()]),
    })
}

fn peer() -> impl Strategy<Value = NetworkPolicyPeer> {
    prop_oneof![
        30 => block().prop_map(|b| NetworkPolicyPeer { ip_block: Some(b), ..Default::default() }),
        10 => selector().prop_map(|s| NetworkPolicyPeer { namespace_selector: Some(s), ..Default::default() }),
        10 => selector().prop_map(|s| NetworkPolicyPeer { pod_selector: Some(s), ..Default::default() }),
        10 => (selector(), selector()).prop_map(|(ns, pod)| NetworkPolicyPeer {
            namespace_selector: Some(ns),
            pod_selector: Some(pod),
            ip_block: None,
        }),
        // Invalid: nothing set.
        1 => Just(NetworkPolicyPeer::default()),
        // Invalid: a block and a selector.
        1 => (block(), selector()).prop_map(|(b, s)| NetworkPolicyPeer {
            ip_block: Some(b),
            pod_selector: Some(s),
            namespace_selector: None,
        }),
    ]
}

fn port() -> impl Strategy<Value = NetworkPolicyPort> {
    let port = |protocol: Option<&str>, port: Option<IntOrString>, end_port: Option<i32>| {
        NetworkPolicyPort {
            protocol: protocol.map(str::to_owned),
            port,
            end_port,
        }
    };
    prop_oneof![
        10 => Just(port(None, Some(IntOrString::Int(80)), None)),
        10 => Just(port(Some("UDP"), Some(IntOrString::Int(80)), None)),
        10 => Just(port(Some("TCP"), Some(IntOrString::Int(443)), None)),
        10 => Just(port(None, Some(IntOrString::Int(80)), Some(90))),
        10 => Just(port(None, Some(IntOrString::String("http".into())), None)),
        1 => Just(port(Some("ICMP"), Some(IntOrString::Int(80)), None)),
        1 => Just(port(None, Some(IntOrString::Int(0)), None)),
    ]
}

type Rule = (
    Option<Vec<NetworkPolicyPeer>>,
    Option<Vec<NetworkPolicyPort>>,
);

fn rules() -> impl Strategy<Value = Vec<Rule>> {
    let peers = prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        60 => proptest::collection::vec(peer(), 1..3).prop_map(Some),
    ];
    let ports = proptest::option::of(proptest::collection::vec(port(), 0..3));
    proptest::collection::vec((peers, ports), 0..20)
}

fn network_policy() -> impl Strategy<Value = (PolicyDirection, NetworkPolicySpec)> {
    const TYPES: &[&[&str]] = &[&["Ingress"], &["Egress"], &["Ingress", "Egress"]];
    (
        pick(&[PolicyDirection::Ingress, PolicyDirection::Egress]),
        proptest::option::of(pick(TYPES)),
        rules(),
        rules(),
    )
        .prop_map(|(direction, types, ingress, egress)| {
            let spec = NetworkPolicySpec {
                policy_types: types.map(|t| t.iter().map(|t| (*t).to_owned()).collect()),
                ingress: Some(
                    ingress
                        .into_iter()
                        .map(|(from, ports)| NetworkPolicyIngressRule { from, ports })
                        .collect(),
                ),
                egress: Some(
                    egress
                        .into_iter()
                        .map(|(to, ports)| NetworkPolicyEgressRule { to, ports })
                        .collect(),
                ),
                ..Default::default()
            };
            (direction, spec)
        })
}

const PRINCIPALS: &[&str] = &[
    "cluster.local/ns/a/sa/x",
    "cluster.local/ns/b/sa/y",
    "cluster.local/ns/c/sa/z",
    "",
];
/// Patterns, and a principal that never matches.
const PRINCIPAL_PATTERNS: &[&str] = &[
    "*",
    "cluster.local/ns/a/*",
    "*/sa/y",
    "spiffe://cluster.local/ns/a/sa/x",
];

fn flow() -> impl Strategy<Value = TestFlow> {
    let pod = (
        pick(&["default", "other"]),
        proptest::collection::vec(pick(PAIRS), 0..3),
        any::<bool>(),
    )
        .prop_map(|(namespace, pod_labels, team)| {
            let mut ns_labels = vec![("kubernetes.io/metadata.name", namespace)];
            if team {
                ns_labels.push(("team", "z"));
            }
            TestPeer::Pod {
                namespace: namespace.to_owned(),
                labels: labels(pod_labels),
                namespace_labels: labels(ns_labels),
            }
        });
    let peer = prop_oneof![
        3 => pod,
        2 => Just(TestPeer::External),
        1 => pick(&[Reserved::Host, Reserved::World]).prop_map(TestPeer::Reserved),
        1 => Just(TestPeer::Unknown),
    ];
    let ip = proptest::option::of(pick(&[
        "10.1.2.3",
        "10.1.9.9",
        "10.200.0.1",
        "192.168.0.1",
        "2001:db8::7",
        "2001:db9::1",
        "::ffff:10.1.2.3",
    ]));
    (
        pick(&[Direction::Ingress, Direction::Egress]),
        peer,
        ip,
        proptest::option::of(prop_oneof![pick(PRINCIPALS), pick(PRINCIPAL_PATTERNS)]),
        pick(&[Protocol::Tcp, Protocol::Udp]),
        pick(&[80u16, 85, 443]),
        any::<bool>(),
    )
        .prop_map(
            |(direction, peer, ip, identity, protocol, port, named)| TestFlow {
                direction,
                peer,
                ip: ip.map(|ip| ip.parse().unwrap()),
                identity: identity.map(str::to_owned),
                protocol,
                port,
                named_ports: if named {
                    vec![NamedPort {
                        name: "http".into(),
                        protocol: Protocol::Tcp,
                        port: 80,
                    }]
                } else {
                    Vec::new()
                },
            },
        )
}

fn istio_policy() -> impl Strategy<Value = IstioAuthorizationPolicySpec> {
    let principals = prop_oneof![
        40 => proptest::collection::vec(rarely(PRINCIPALS, PRINCIPAL_PATTERNS), 1..3),
        // Any source.
        1 => Just(Vec::new()),
    ];
    let source = principals.prop_map(|principals| IstioFrom {
        source: IstioSource {
            principals: principals.into_iter().map(str::to_owned).collect(),
        },
    });
    let to = proptest::collection::vec(rarely(&["80", "80-90", "443"], &["bad"]), 0..3).prop_map(
        |ports| IstioTo {
            operation: IstioOperation {
                ports: ports.into_iter().map(str::to_owned).collect(),
            },
        },
    );
    let rule = (
        prop_oneof![40 => proptest::collection::vec(source, 1..3), 1 => Just(Vec::new())],
        proptest::collection::vec(to, 0..2),
    )
        .prop_map(|(from, to)| IstioRule { from, to });
    proptest::collection::vec(rule, 0..20).prop_map(|rules| IstioAuthorizationPolicySpec {
        selector: LabelSelector::default(),
        rules,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn network_policies_decide_as_scanned(
        (direction, spec) in network_policy(),
        flows in proptest::collection::vec(flow(), 1..8),
    ) {
        let policy = PolicyRef {
            backend: Backend::Kubernetes,
            kubernetes: Some(&spec),
            istio: None,
            direction,
        };
        let compiled = Compiled::new(policy, NAMESPACE);
        for f in &flows {
            let view = f.view();
            prop_assert_eq!(compiled.evaluate(&view), evaluate(policy, NAMESPACE, &view), "{:?}", f);
        }
    }

    #[test]
    fn istio_policies_decide_as_scanned(
        spec in istio_policy(),
        flows in proptest::collection::vec(flow(), 1..8),
    ) {
        let policy = PolicyRef {
            backend: Backend::Istio,
            kubernetes: None,
            istio: Some(&spec),
            direction: PolicyDirection::Ingress,
        };
        let compiled = Compiled::new(policy, NAMESPACE);
        for f in &flows {
            let view = f.view();
            prop_assert_eq!(compiled.evaluate(&view), evaluate(policy, NAMESPACE, &view), "{:?}", f);
        }
    }
}

/// A learned proposal's shape: one rule per external peer. The compiled policy finds the
/// one rule of the flow's address among many, and denies an address it does not name.
#[test]
fn a_rule_per_address_is_found_by_address() {
    let rule = |i: u32| NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: format!("{}/32", std::net::Ipv4Addr::from(0x0a00_0000 + i)),
                except: None,
            }),
            ..Default::default()
        }]),
        ports: None,
    };
    let spec = NetworkPolicySpec {
        policy_types: Some(vec!["Egress".into()]),
        egress: Some((0..10_000).map(rule).collect()),
        ..Default::default()
    };
    let policy = PolicyRef {
        backend: Backend::Kubernetes,
        kubernetes: Some(&spec),
        istio: None,
        direction: PolicyDirection::Egress,
    };
    let compiled = Compiled::new(policy, NAMESPACE);
    let to = |ip: &str| from_ip(ip).egress().port(443);
    let found = to("10.0.26.255");
    assert_eq!(
        compiled.evaluate(&found.view()),
        Ok(Decision::Allowed { rule: 0x1aff })
    );
    let missing = to("10.1.0.0");
    assert_eq!(
        compiled.evaluate(&missing.view()),
        evaluate(policy, NAMESPACE, &missing.view())
    );
    assert!(matches!(
        compiled.evaluate(&missing.view()),
        Ok(Decision::Denied { .. })
    ));
}
