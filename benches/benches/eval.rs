//! The evaluator's checks per flow: one flow against one policy, NetworkPolicy and Istio,
//! for policies of 1 to 1 000 rules, scanned (`ne_policy::eval::evaluate`, as
//! `ne-leader check` of one edge would) and compiled once per policy
//! (`ne_policy::eval::Compiled`, as the controller's detection does; ids `*_compiled`).
//!
//! Policies are shaped as learned proposals are: one rule per peer, each naming the peer
//! (pod + namespace selector, or SPIFFE principal) and one port. Flows come from pods:
//! - `allowed`: 256 flows, flow `i` from the peer of rule `i % rules` (on average half
//!   the rules are tried before the match);
//! - `denied`: 256 flows from a peer no rule names (every rule is tried).
//!
//! `networkpolicy_ipblock`: a policy of learned external peers, one `ipBlock` /32 per rule
//! (what a proposal holds for addresses outside the cluster), and 256 flows from addresses
//! no rule names.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ne_crds::{
    Backend, IstioAuthorizationPolicySpec, IstioFrom, IstioOperation, IstioRule, IstioSource,
    IstioTo, PolicyDirection,
};
use ne_flow::flow::{Direction, Labels, Protocol, labels};
use ne_policy::eval::{Compiled, FlowView, PeerView, PolicyRef, evaluate};

const FLOWS: usize = 256;
const NAMESPACES: usize = 8;

fn selector(key: &str, value: String) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_owned(), value)].into_iter().collect()),
        ..LabelSelector::default()
    }
}

fn netpol(rules: usize) -> NetworkPolicySpec {
    NetworkPolicySpec {
        pod_selector: Some(selector("app", "server".to_owned())),
        policy_types: Some(vec!["Ingress".to_owned()]),
        ingress: Some(
            (0..rules)
                .map(|k| NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        pod_selector: Some(selector("app", format!("peer-{k}"))),
                        namespace_selector: Some(selector(
                            "kubernetes.io/metadata.name",
                            format!("ns-{}", k % NAMESPACES),
                        )),
                        ip_block: None,
                    }]),
                    ports: Some(vec![NetworkPolicyPort {
                        protocol: Some("TCP".to_owned()),
                        port: Some(IntOrString::Int(8000)),
                        end_port: None,
                    }]),
                })
                .collect(),
        ),
        egress: None,
    }
}

/// Ingress from `rules` external addresses, one /32 each.
fn ip_blocks(rules: usize) -> NetworkPolicySpec {
    let mut spec = netpol(rules);
    for (k, rule) in spec.ingress.iter_mut().flatten().enumerate() {
        rule.from = Some(vec![NetworkPolicyPeer {
            ip_block: Some(IPBlock {
                cidr: format!("203.0.{}.{}/32", k / 256, k % 256),
                except: None,
            }),
            ..NetworkPolicyPeer::default()
        }]);
    }
    spec
}

fn istio(rules: usize) -> IstioAuthorizationPolicySpec {
    IstioAuthorizationPolicySpec {
        selector: selector("app", "server".to_owned()),
        rules: (0..rules)
            .map(|k| IstioRule {
                from: vec![IstioFrom {
                    source: IstioSource {
                        principals: vec![format!(
                            "cluster.local/ns/ns-{}/sa/peer-{k}",
                            k % NAMESPACES
                        )],
                    },
                }],
                to: vec![IstioTo {
                    operation: IstioOperation {
                        ports: vec!["8000".to_owned()],
                    },
                }],
            })
            .collect(),
    }
}

/// An owned ingress flow from pod `peer-<k>` (or `stranger` when `k` is `None`).
struct Flow {
    namespace: String,
    labels: Labels,
    namespace_labels: Labels,
    identity: String,
}

impl Flow {
    fn from(k: Option<usize>) -> Self {
        let (app, ns) = match k {
            Some(k) => (format!("peer-{k}"), format!("ns-{}", k % NAMESPACES)),
            None => ("stranger".to_owned(), "ns-0".to_owned()),
        };
        Flow {
            identity: format!("cluster.local/ns/{ns}/sa/{app}"),
            labels: labels([("app", app.as_str()), ("tier", "backend")]),
            namespace_labels: labels([("kubernetes.io/metadata.name", ns.as_str())]),
            namespace: ns,
        }
    }

    fn view(&self) -> FlowView<'_> {
        FlowView {
            direction: Direction::Ingress,
            peer: PeerView::Pod {
                namespace: &self.namespace,
                labels: &self.labels,
                namespace_labels: &self.namespace_labels,
            },
            peer_ip: None,
            peer_identity: Some(&self.identity),
            protocol: Protocol::Tcp,
            port: 8000,
            named_ports: &[],
        }
    }
}

fn check(c: &mut Criterion) {
    let mut group = c.benchmark_group("eval");
    group.throughput(Throughput::Elements(FLOWS as u64));
    for rules in [1usize, 10, 100, 1_000] {
        let np = netpol(rules);
        let ist = istio(rules);
        let policies = [
            (
                "networkpolicy",
                PolicyRef {
                    backend: Backend::Kubernetes,
                    kubernetes: Some(&np),
                    istio: None,
                    direction: PolicyDirection::Ingress,
                },
            ),
            (
                "istio",
                PolicyRef {
                    backend: Backend::Istio,
                    kubernetes: None,
                    istio: Some(&ist),
                    direction: PolicyDirection::Ingress,
                },
            ),
        ];
        let allowed: Vec<Flow> = (0..FLOWS).map(|i| Flow::from(Some(i % rules))).collect();
        let denied: Vec<Flow> = (0..FLOWS).map(|_| Flow::from(None)).collect();
        for (backend, policy) in policies {
            for (case, flows, want_allowed) in
                [("allowed", &allowed, true), ("denied", &denied, false)]
            {
                // The cases are what they say.
                for f in flows {
                    let d = evaluate(policy, "server-ns", &f.view()).expect("valid policy");
                    assert_eq!(d.is_allowed(), want_allowed, "{backend} {case} {rules}");
                }
                let id = BenchmarkId::new(format!("{backend}/{case}"), format!("{rules}_rules"));
                group.bench_with_input(id, flows, |b, flows| {
                    b.iter(|| {
                        for f in flows {
                            black_box(evaluate(policy, "server-ns", &f.view()).ok());
                        }
                    })
                });
                let compiled = Compiled::new(policy, "server-ns");
                for f in flows {
                    let view = f.view();
                    assert_eq!(
                        compiled.evaluate(&view),
                        evaluate(policy, "server-ns", &view)
                    );
                }
                let id = BenchmarkId::new(
                    format!("{backend}_compiled/{case}"),
                    format!("{rules}_rules"),
                );
                group.bench_with_input(id, flows, |b, flows| {
                    b.iter(|| {
                        for f in flows {
                            black_box(compiled.evaluate(&f.view()).ok());
                        }
                    })
                });
            }
        }
    }
    for rules in [10usize, 100, 1_000] {
        let spec = ip_blocks(rules);
        let policy = PolicyRef {
            backend: Backend::Kubernetes,
            kubernetes: Some(&spec),
            istio: None,
            direction: PolicyDirection::Ingress,
        };
        let stranger = Flow::from(None);
        let addresses: Vec<std::net::IpAddr> = (0..FLOWS)
            .map(|i| std::net::IpAddr::from([198, 51, 100, i as u8]))
            .collect();
        let view = |ip| FlowView {
            peer: PeerView::External,
            peer_ip: Some(ip),
            ..stranger.view()
        };
        for &ip in &addresses {
            let d = evaluate(policy, "server-ns", &view(ip)).expect("valid policy");
            assert!(!d.is_allowed(), "no rule names {ip}");
        }
        let id = BenchmarkId::new("networkpolicy_ipblock/denied", format!("{rules}_rules"));
        group.bench_with_input(id, &addresses, |b, addresses| {
            b.iter(|| {
                for &ip in addresses {
                    black_box(evaluate(policy, "server-ns", &view(ip)).ok());
                }
            })
        });
        let compiled = Compiled::new(policy, "server-ns");
        for &ip in &addresses {
            assert_eq!(
                compiled.evaluate(&view(ip)),
                evaluate(policy, "server-ns", &view(ip))
            );
        }
        let id = BenchmarkId::new(
            "networkpolicy_ipblock_compiled/denied",
            format!("{rules}_rules"),
        );
        group.bench_with_input(id, &addresses, |b, addresses| {
            b.iter(|| {
                for &ip in addresses {
                    black_box(compiled.evaluate(&view(ip)).ok());
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, check);
criterion_main!(benches);
