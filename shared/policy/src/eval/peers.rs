//! Peers that select nothing: the parts of a policy's rules that name pods (selectors) or
//! mesh identities (principals) which no pod and no workload template in the cluster has.
//!
//! Such a part is valid, but it allows nothing: most often a typo in a label or a
//! ServiceAccount name in a rule edited by hand, which monitor mode would otherwise only
//! show as a stream of violations. Workload templates count as well as pods, so a rule for
//! a workload scaled to zero is not reported. Invalid parts are [`super::validate`]'s
//! business and are not repeated here; `ipBlock`s and unconstrained peers always select
//! something.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{NetworkPolicyPeer, NetworkPolicySpec};
use ne_crds::{Backend, IstioAuthorizationPolicySpec};

use super::{PolicyRef, istio::principal_matches, selector};
use crate::resolve::ResolvedPod;

/// What selectors can select, grouped by namespace (every endpoint of a namespace carries
/// the same namespace labels), so that a peer without a `namespaceSelector` scans only its
/// own namespace.
#[derive(Debug, Default)]
pub struct Endpoints<'a> {
    by_namespace: BTreeMap<&'a str, Vec<&'a ResolvedPod>>,
}

impl<'a> Endpoints<'a> {
    pub fn new(endpoints: impl IntoIterator<Item = &'a ResolvedPod>) -> Self {
        let mut by_namespace: BTreeMap<&str, Vec<_>> = BTreeMap::new();
        for e in endpoints {
            by_namespace.entry(&e.namespace).or_default().push(e);
        }
        Endpoints { by_namespace }
    }

    fn all(&self) -> impl Iterator<Item = &'a ResolvedPod> + '_ {
        self.by_namespace.values().flatten().copied()
    }
}

/// The paths (in the backend payload, as [`super::SpecIssue::path`]) of the peers of
/// `policy` (living in `namespace`) that select none of `endpoints`.
pub fn unselected(
    policy: PolicyRef<'_>,
    namespace: &str,
    endpoints: &Endpoints<'_>,
) -> Vec<String> {
    match policy.backend {
        Backend::Kubernetes => policy
            .kubernetes
            .map(|spec| network_policy(spec, namespace, endpoints))
            .unwrap_or_default(),
        Backend::Istio => policy
            .istio
            .map(|spec| authorization_policy(spec, endpoints))
            .unwrap_or_default(),
    }
}

fn network_policy(
    spec: &NetworkPolicySpec,
    namespace: &str,
    endpoints: &Endpoints<'_>,
) -> Vec<String> {
    let ingress = spec
        .ingress
        .iter()
        .flatten()
        .enumerate()
        .flat_map(|(i, r)| {
            r.from
                .iter()
                .flatten()
                .enumerate()
                .map(move |(j, p)| (format!("ingress[{i}].from[{j}]"), p))
        });
    let egress = spec.egress.iter().flatten().enumerate().flat_map(|(i, r)| {
        r.to.iter()
            .flatten()
            .enumerate()
            .map(move |(j, p)| (format!("egress[{i}].to[{j}]"), p))
    });
    ingress
        .chain(egress)
        .filter(|(_, peer)| selects_nothing(peer, namespace, endpoints))
        .map(|(path, _)| path)
        .collect()
}

/// Whether a selector peer is valid and matches no endpoint. A peer with an `ipBlock`, no
/// selector at all, or an invalid selector is not reported here.
fn selects_nothing(peer: &NetworkPolicyPeer, namespace: &str, endpoints: &Endpoints<'_>) -> bool {
    if peer.ip_block.is_some() {
        return false;
    }
    let (ns, pod) = (&peer.namespace_selector, &peer.pod_selector);
    if ns.is_none() && pod.is_none() {
        return false;
    }
    let valid = |s: &Option<_>| s.as_ref().is_none_or(|s| selector::validate(s).is_ok());
    if !valid(ns) || !valid(pod) {
        return false;
    }
    let selected = |e: &&ResolvedPod| {
        pod.as_ref()
            .is_none_or(|s| selector::matches(s, &e.labels).unwrap_or(false))
    };
    let found = match ns {
        None => endpoints
            .by_namespace
            .get(namespace)
            .is_some_and(|pods| pods.iter().any(selected)),
        Some(s) => endpoints.by_namespace.values().any(|pods| {
            pods.first()
                .is_some_and(|e| selector::matches(s, &e.namespace_labels).unwrap_or(false))
                && pods.iter().any(selected)
        }),
    };
    !found
}

fn authorization_policy(
    spec: &IstioAuthorizationPolicySpec,
    endpoints: &Endpoints<'_>,
) -> Vec<String> {
    let mut paths = Vec::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        for (j, from) in rule.from.iter().enumerate() {
            for (k, pattern) in from.source.principals.iter().enumerate() {
                if principal_selects_nothing(pattern, endpoints) {
                    paths.push(format!("rules[{i}].from[{j}].source.principals[{k}]"));
                }
            }
        }
    }
    paths
}

/// Whether `pattern` (a valid principal, possibly with a `*`) admits the identity of no
/// endpoint. An endpoint's identity is `<trust domain>/ns/<namespace>/sa/<account>`; the
/// trust domain is not known here, so the pattern's own is taken (`cluster.local` when the
/// pattern does not name one).
fn principal_selects_nothing(pattern: &str, endpoints: &Endpoints<'_>) -> bool {
    if principal_matches(pattern, None).is_err() {
        return false;
    }
    let trust_domain = pattern
        .split_once("/ns/")
        .map(|(td, _)| td)
        .filter(|td| !td.is_empty() && !td.contains('*'))
        .unwrap_or("cluster.local");
    !endpoints.all().any(|e| {
        let account = e.service_account.as_deref().unwrap_or("default");
        let identity = format!("{trust_domain}/ns/{}/sa/{account}", e.namespace);
        principal_matches(pattern, Some(&identity)).unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::networking::v1::{
        IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use ne_crds::{IstioFrom, IstioRule, IstioSource, PolicyDirection};

    use super::*;
    use ne_flow::flow::{Str, labels as labels_of};

    fn pod(namespace: &str, labels: &[(&str, &str)], account: Option<&str>) -> ResolvedPod {
        let pairs = |l: &[(&str, &str)]| labels_of(l.iter().copied());
        ResolvedPod {
            namespace: namespace.into(),
            owner: None,
            selector: None,
            labels: pairs(labels),
            namespace_labels: pairs(&[("kubernetes.io/metadata.name", namespace)]),
            named_ports: Vec::new(),
            service_account: account.map(Str::from),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    fn peer(ns: Option<LabelSelector>, pod: Option<LabelSelector>) -> NetworkPolicyPeer {
        NetworkPolicyPeer {
            namespace_selector: ns,
            pod_selector: pod,
            ip_block: None,
        }
    }

    fn kubernetes(spec: &NetworkPolicySpec) -> PolicyRef<'_> {
        PolicyRef {
            backend: Backend::Kubernetes,
            kubernetes: Some(spec),
            istio: None,
            direction: PolicyDirection::Ingress,
        }
    }

    #[test]
    fn selector_peers_that_match_no_pod_are_named_by_path() {
        let web = pod("shop", &[("app", "web")], None);
        let db = pod("data", &[("app", "db")], None);
        let endpoints = Endpoints::new([&web, &db]);
        let spec = NetworkPolicySpec {
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![
                    // Same namespace, existing label: selects web.
                    peer(None, Some(labels(&[("app", "web")]))),
                    // A typo: selects nothing.
                    peer(None, Some(labels(&[("app", "wbe")]))),
                    // db exists, but in another namespace than the policy's.
                    peer(None, Some(labels(&[("app", "db")]))),
                    // With its namespace: selects db.
                    peer(
                        Some(labels(&[("kubernetes.io/metadata.name", "data")])),
                        Some(labels(&[("app", "db")])),
                    ),
                    // A namespace that does not exist.
                    peer(
                        Some(labels(&[("kubernetes.io/metadata.name", "nowhere")])),
                        None,
                    ),
                    // Addresses and the unconstrained peer are never reported.
                    NetworkPolicyPeer {
                        ip_block: Some(IPBlock {
                            cidr: "203.0.113.7/32".into(),
                            except: None,
                        }),
                        ..peer(None, None)
                    },
                    peer(None, None),
                ]),
                ports: None,
            }]),
            egress: Some(vec![NetworkPolicyEgressRule {
                to: Some(vec![peer(
                    Some(LabelSelector::default()),
                    Some(labels(&[("app", "cache")])),
                )]),
                ports: None,
            }]),
            ..NetworkPolicySpec::default()
        };
        assert_eq!(
            unselected(kubernetes(&spec), "shop", &endpoints),
            [
                "ingress[0].from[1]",
                "ingress[0].from[2]",
                "ingress[0].from[4]",
                "egress[0].to[0]"
            ]
        );
    }

    #[test]
    fn an_invalid_selector_is_left_to_validate() {
        let web = pod("shop", &[("app", "web")], None);
        let spec = NetworkPolicySpec {
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![peer(
                    None,
                    Some(LabelSelector {
                        match_labels: None,
                        match_expressions: Some(vec![LabelSelectorRequirement {
                            key: "app".into(),
                            operator: "Has".into(),
                            values: None,
                        }]),
                    }),
                )]),
                ports: None,
            }]),
            ..NetworkPolicySpec::default()
        };
        assert!(unselected(kubernetes(&spec), "shop", &Endpoints::new([&web])).is_empty());
        assert_eq!(super::super::validate(kubernetes(&spec)).len(), 1);
    }

    #[test]
    fn principals_nobody_runs_as_are_named_by_path() {
        let web = pod("shop", &[("app", "web")], Some("web"));
        let plain = pod("shop", &[("app", "plain")], None);
        let endpoints = Endpoints::new([&web, &plain]);
        let spec = IstioAuthorizationPolicySpec {
            selector: LabelSelector::default(),
            rules: vec![IstioRule {
                from: vec![IstioFrom {
                    source: IstioSource {
                        principals: vec![
                            "cluster.local/ns/shop/sa/web".into(),
                            "cluster.local/ns/shop/sa/wbe".into(),
                            // The namespace's default account: `plain` runs as it.
                            "example.org/ns/shop/sa/default".into(),
                            "*/ns/shop/sa/web".into(),
                            "cluster.local/ns/other/*".into(),
                            "*".into(),
                            // Invalid: validate's business.
                            "spiffe://cluster.local/ns/shop/sa/nobody".into(),
                        ],
                    },
                }],
                to: Vec::new(),
            }],
        };
        let policy = PolicyRef {
            backend: Backend::Istio,
            kubernetes: None,
            istio: Some(&spec),
            direction: PolicyDirection::Ingress,
        };
        assert_eq!(
            unselected(policy, "shop", &endpoints),
            [
                "rules[0].from[0].source.principals[1]",
                "rules[0].from[0].source.principals[4]"
            ]
        );
    }
}
