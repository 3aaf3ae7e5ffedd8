//! What the planner needs from the cluster's pods to tell what protect mode would break
//! (the `ProtectSafe` condition, `plan/safety.rs`): the labels of each policy's target pods,
//! whether an egress policy lets them reach the cluster's DNS, and which principals its
//! rules name that several workloads run as, and what learning saw of its workload that no
//! rule can name. One pass over the resolver's pods per round.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ne_crds::{
    Backend, PolicyDirection, TargetRef, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_flow::flow::{Direction, Protocol, Reserved};
use ne_policy::allowlist::{AllowListSummary, UnmanagedPeer};
use ne_policy::eval::{self, FlowView, PeerView, PolicyRef};
use ne_policy::resolve::{ClusterSnapshot, ResolvedPod};

use crate::attribution::{TargetKey, target_key};

/// Where the cluster's DNS pods are, and the label they carry (CoreDNS and kube-dns alike).
pub const DNS_NAMESPACE: &str = "kube-system";
pub const DNS_LABEL: (&str, &str) = ("k8s-app", "kube-dns");

/// The cluster's side of one policy's safety check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SafetyFacts {
    /// The labels of the target's pods (one pod's, or the workload template's); `None`
    /// when the cluster shows none.
    pub target_labels: Option<Vec<(String, String)>>,
    /// An egress policy (Kubernetes backend) that allows UDP port 53 to none of the
    /// cluster's DNS pods (false when the cluster has none the resolver knows).
    pub dns_denied: bool,
    /// Principals the rules name that several workloads run as, each with those workloads.
    pub shared_principals: Vec<String>,
    /// Traffic learning saw in the policy's direction with a peer no rule can name (host,
    /// remote-node, kube-apiserver, ...), which protect mode blocks, in words: `peer on
    /// PROTOCOL port (N flows)`.
    pub unexpressible: Vec<String>,
}

/// What the data plane does with traffic from a pod's own node (kubelet probes) once a
/// policy selects the pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HostTraffic {
    /// Lets it through whatever the policy says: the default of Cilium (`allow-localhost`),
    /// Calico and the NetworkPolicy API, and Istio ambient, which exempts probes.
    #[default]
    Allowed,
    /// Applies the policy to it (e.g. Cilium's host firewall or `allow-localhost: policy`):
    /// a policy that cannot name the node blocks the probes.
    Enforced,
}

/// The facts of every policy and every proposal, each by `(namespace, name)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Safety {
    pub policies: BTreeMap<(String, String), SafetyFacts>,
    pub proposals: BTreeMap<(String, String), SafetyFacts>,
}

/// The facts of `policies` and `proposals` against `cluster` and what learning made of
/// each workload (`learned`, the round's allow-list summaries), a proposal named twice: its
/// first.
pub fn facts<'p>(
    policies: &[WorkloadNetworkPolicy],
    proposals: impl IntoIterator<Item = &'p WorkloadNetworkPolicyProposal>,
    cluster: &ClusterSnapshot,
    learned: &[AllowListSummary],
    host: HostTraffic,
) -> Safety {
    let unmanaged: HashMap<TargetKey, &[UnmanagedPeer]> = learned
        .iter()
        .map(|s| (target_key(&s.subject, s.direction), s.unmanaged.as_slice()))
        .collect();
    let mut by_owner: HashMap<(&str, &str, &str), &ResolvedPod> = HashMap::new();
    let mut dns = Vec::new();
    let mut by_identity: HashMap<(&str, &str), BTreeSet<String>> = HashMap::new();
    // Of an owner's pods, the first by labels (not by where the resolver holds them, which
    // moves as pods come and go); its template only when it has none.
    let pods = cluster.live_pods().map(|p| (p, false));
    for (pod, template) in pods.chain(cluster.templates().map(|t| (t, true))) {
        if let Some(owner) = &pod.owner {
            by_owner
                .entry((&pod.namespace, owner.kind.as_str(), &owner.name))
                .and_modify(|first| {
                    if !template && pod.labels < first.labels {
                        *first = pod;
                    }
                })
                .or_insert(pod);
            let account = pod.service_account.as_deref().unwrap_or("default");
            by_identity
                .entry((&pod.namespace, account))
                .or_default()
                .insert(format!("{}/{}", owner.kind.as_str(), owner.name));
        }
        if &*pod.namespace == DNS_NAMESPACE
            && pod
                .labels
                .iter()
                .any(|(k, v)| &**k == DNS_LABEL.0 && &**v == DNS_LABEL.1)
        {
            dns.push(pod);
        }
    }
    let of = |namespace: &str, policy: PolicyRef<'_>, target: &TargetRef| {
        let kind = format!("{:?}", target.kind);
        let pod = by_owner.get(&(namespace, kind.as_str(), target.name.as_str()));
        SafetyFacts {
            target_labels: pod.map(|p| {
                p.labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            dns_denied: dns_denied(policy, namespace, &dns),
            shared_principals: shared_principals(policy, &by_identity),
            unexpressible: unexpressible(policy, namespace, target, &unmanaged, host),
        }
    };
    let key = |meta: &ObjectMeta| {
        (
            meta.namespace.clone().unwrap_or_default(),
            meta.name.clone().unwrap_or_default(),
        )
    };
    Safety {
        policies: policies
            .iter()
            .map(|w| {
                let k = key(&w.metadata);
                let facts = of(&k.0, PolicyRef::from(&w.spec), &w.spec.target_ref);
                (k, facts)
            })
            .collect(),
        proposals: proposals.into_iter().fold(BTreeMap::new(), |mut out, p| {
            let k = key(&p.metadata);
            let namespace = k.0.clone();
            out.entry(k)
                .or_insert_with(|| of(&namespace, PolicyRef::from(&p.spec), &p.spec.target_ref));
            out
        }),
    }
}

/// An egress policy of the Kubernetes backend that lets the target reach none of `dns` on
/// UDP port 53.
fn dns_denied(policy: PolicyRef<'_>, namespace: &str, dns: &[&ResolvedPod]) -> bool {
    if policy.direction != PolicyDirection::Egress
        || policy.backend != Backend::Kubernetes
        || dns.is_empty()
    {
        return false;
    }
    !dns.iter().any(|pod| {
        let flow = FlowView {
            direction: Direction::Egress,
            peer: PeerView::Pod {
                namespace: &pod.namespace,
                labels: &pod.labels,
                namespace_labels: &pod.namespace_labels,
            },
            peer_ip: None,
            peer_identity: None,
            protocol: Protocol::Udp,
            port: 53,
            named_ports: &pod.named_ports,
        };
        eval::evaluate(policy, namespace, &flow).is_ok_and(|d| d.is_allowed())
    })
}

/// The traffic of `target` in `policy`'s direction that learning saw with a peer no rule
/// can name, which protect mode would block: every such peer of a Kubernetes-backend
/// policy, except the node's own traffic into its pods when the data plane lets that
/// through ([`HostTraffic::Allowed`]). Istio policies name peers by principal, and learning
/// from ztunnel sees no such peer.
fn unexpressible(
    policy: PolicyRef<'_>,
    namespace: &str,
    target: &TargetRef,
    unmanaged: &HashMap<TargetKey, &[UnmanagedPeer]>,
    host: HostTraffic,
) -> Vec<String> {
    if policy.backend != Backend::Kubernetes {
        return Vec::new();
    }
    let key = (
        namespace.to_owned(),
        target.kind,
        target.name.clone(),
        policy.direction,
    );
    let Some(peers) = unmanaged.get(&key) else {
        return Vec::new();
    };
    let ingress = policy.direction == PolicyDirection::Ingress;
    peers
        .iter()
        .filter(|p| !(p.peer == Reserved::Host && ingress && host == HostTraffic::Allowed))
        .map(|p| {
            let what = match p.peer {
                Reserved::Host if ingress => "host (the node: kubelet probes)",
                peer => peer.as_str(),
            };
            format!(
                "{what} on {} {} ({} flows)",
                p.protocol.as_str(),
                p.port,
                p.seen.flows
            )
        })
        .collect()
}

/// Exact principals (`<trust domain>/ns/<namespace>/sa/<account>`) of the rules that more
/// than one workload runs as: allowing one allows them all.
fn shared_principals(
    policy: PolicyRef<'_>,
    by_identity: &HashMap<(&str, &str), BTreeSet<String>>,
) -> Vec<String> {
    let Some(istio) = policy.istio.filter(|_| policy.backend == Backend::Istio) else {
        return Vec::new();
    };
    let principals: BTreeSet<&str> = istio
        .rules
        .iter()
        .flat_map(|r| &r.from)
        .flat_map(|f| &f.source.principals)
        .map(String::as_str)
        .collect();
    principals
        .into_iter()
        .filter_map(|principal| {
            let rest = principal.split_once("/ns/")?.1;
            let (namespace, account) = rest.split_once("/sa/")?;
            let workloads = by_identity.get(&(namespace, account))?;
            (workloads.len() > 1).then(|| {
                format!(
                    "{principal} ({})",
                    workloads.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(
        ns: &str,
        name: &str,
        labels: serde_json::Value,
        account: &str,
    ) -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}")},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels},
                             "spec": {"serviceAccountName": account,
                                      "containers": [{"name": name, "image": "x"}]}},
            },
        })
    }

    fn cluster() -> ClusterSnapshot {
        let namespace = |n: &str| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}})
        };
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            namespace("shop"), namespace("kube-system"),
            deployment("kube-system", "coredns", json!({"k8s-app": "kube-dns"}), "coredns"),
            deployment("shop", "api", json!({"app": "api", "tier": "back"}), "api"),
            deployment("shop", "web", json!({"app": "web"}), "shared"),
            deployment("shop", "cron", json!({"app": "cron"}), "shared"),
        ]});
        ClusterSnapshot::from_yaml(&serde_json::to_string(&list).unwrap()).unwrap()
    }

    fn policy(name: &str, spec: serde_json::Value) -> WorkloadNetworkPolicy {
        serde_json::from_value(json!({
            "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
            "kind": "WorkloadNetworkPolicy",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn egress(rules: serde_json::Value) -> serde_json::Value {
        json!({
            "backend": "kubernetes", "mode": "monitor", "direction": "Egress",
            "targetRef": {"kind": "Deployment", "name": "api"},
            "kubernetes": {"podSelector": {"matchLabels": {"app": "api"}},
                           "policyTypes": ["Egress"], "egress": rules},
        })
    }

    #[test]
    fn the_target_pods_labels_and_whether_egress_reaches_the_cluster_dns() {
        let web_only = policy(
            "no-dns",
            egress(
                json!([{"to": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                           "ports": [{"protocol": "TCP", "port": 443}]}]),
            ),
        );
        let with_dns = policy(
            "dns",
            egress(
                json!([{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                           "ports": [{"protocol": "UDP", "port": 53}]}]),
            ),
        );
        let tcp_dns_only = policy(
            "tcp-dns",
            egress(json!([{"to": [{"namespaceSelector": {}}],
                           "ports": [{"protocol": "TCP", "port": 53}]}])),
        );
        let facts = facts(
            &[web_only, with_dns, tcp_dns_only],
            [],
            &cluster(),
            &[],
            HostTraffic::Allowed,
        );
        let of = |name: &str| &facts.policies[&("shop".to_owned(), name.to_owned())];
        assert!(of("no-dns").dns_denied);
        assert!(!of("dns").dns_denied);
        assert!(of("tcp-dns").dns_denied, "lookups go over UDP first");
        let mut labels = of("dns").target_labels.clone().unwrap();
        labels.sort();
        assert_eq!(
            labels,
            [
                ("app".to_owned(), "api".to_owned()),
                ("tier".to_owned(), "back".to_owned())
            ]
        );
    }

    #[test]
    fn the_target_pod_is_chosen_by_its_labels_not_by_where_the_resolver_holds_it() {
        // Mid-rollout: two pods of `api` from two ReplicaSets; by name (the order the
        // resolver holds them in) the older template's pod comes first.
        let owner = |kind: &str, name: &str| json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": name, "controller": true}]);
        let replicaset = |hash: &str| {
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": format!("api-{hash}"), "namespace": "shop",
                                "labels": {"pod-template-hash": hash},
                                "ownerReferences": owner("Deployment", "api")},
                   "spec": {"selector": {"matchLabels": {"app": "api"}}}})
        };
        let pod = |name: &str, hash: &str| {
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "shop", "uid": name,
                                "labels": {"app": "api", "pod-template-hash": hash},
                                "ownerReferences": owner("ReplicaSet", &format!("api-{hash}"))},
                   "status": {"podIP": "10.0.0.1"}})
        };
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            deployment("shop", "api", json!({"app": "api"}), "api"),
            replicaset("new"), replicaset("old"),
            pod("api-0", "old"), pod("api-a", "new"),
        ]});
        let cluster = ClusterSnapshot::from_yaml(&serde_json::to_string(&list).unwrap()).unwrap();
        let p = policy("api", egress(json!([])));
        let facts = facts(&[p], [], &cluster, &[], HostTraffic::Allowed);
        let labels = facts.policies[&("shop".to_owned(), "api".to_owned())]
            .target_labels
            .clone()
            .unwrap();
        assert!(
            labels.contains(&("pod-template-hash".to_owned(), "new".to_owned())),
            "{labels:?}"
        );
    }

    /// What learning saw of `api` with peers no rule can name: probes from its node and
    /// traffic from another node into it, and calls to the API server out of it.
    fn learned_with_reserved_peers() -> Vec<AllowListSummary> {
        use ne_flow::edge::{Edge, Provider};
        use ne_flow::flow::{Endpoint, EndpointId, Timestamp, WorkloadKind, WorkloadRef};
        let api = Endpoint::new(EndpointId::Workload(WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: "api".into(),
        }));
        let edge = |direction, peer, protocol, port| Edge {
            subject: api.clone(),
            direction,
            peer: Endpoint::new(EndpointId::Reserved(peer)),
            protocol,
            port,
            peer_dns: None,
            denied_by: None,
        };
        let edges = [
            (
                edge(Direction::Ingress, Reserved::Host, Protocol::Tcp, 8080),
                40,
            ),
            (
                edge(
                    Direction::Ingress,
                    Reserved::RemoteNode,
                    Protocol::Tcp,
                    8080,
                ),
                3,
            ),
            (
                edge(
                    Direction::Egress,
                    Reserved::KubeApiserver,
                    Protocol::Tcp,
                    443,
                ),
                12,
            ),
        ];
        let learned = ne_policy::allowlist::learn(
            edges
                .iter()
                .map(|(edge, count)| ne_policy::allowlist::AggregatedEdge {
                    edge,
                    count: *count,
                    first_seen: Timestamp(1),
                    last_seen: Timestamp(2),
                }),
            &cluster(),
            Provider::Cilium,
            &Default::default(),
        );
        learned.summary.allow_lists
    }

    #[test]
    fn peers_no_rule_can_name_are_hazards_and_the_nodes_own_traffic_only_where_enforced() {
        let ingress = policy(
            "ingress",
            json!({
                "backend": "kubernetes", "mode": "monitor", "direction": "Ingress",
                "targetRef": {"kind": "Deployment", "name": "api"},
                "kubernetes": {"podSelector": {"matchLabels": {"app": "api"}},
                               "policyTypes": ["Ingress"], "ingress": []},
            }),
        );
        let egress = policy("egress", egress(json!([])));
        let istio = policy(
            "istio",
            json!({
                "backend": "istio", "mode": "monitor", "direction": "Ingress",
                "targetRef": {"kind": "Deployment", "name": "api"},
                "istio": {"selector": {"matchLabels": {"app": "api"}}, "rules": []},
            }),
        );
        let learned = learned_with_reserved_peers();
        let policies = [ingress, egress, istio];
        let of = |host| {
            let facts = facts(&policies, [], &cluster(), &learned, host);
            let get = |name: &str| {
                facts.policies[&("shop".to_owned(), name.to_owned())]
                    .unexpressible
                    .clone()
            };
            (get("ingress"), get("egress"), get("istio"))
        };
        let (ingress, egress, istio) = of(HostTraffic::Allowed);
        assert_eq!(ingress, ["remote-node on TCP 8080 (3 flows)"]);
        assert_eq!(egress, ["kube-apiserver on TCP 443 (12 flows)"]);
        assert!(istio.is_empty(), "ztunnel names peers by principal");
        let (ingress, egress, _) = of(HostTraffic::Enforced);
        assert_eq!(
            ingress,
            [
                "host (the node: kubelet probes) on TCP 8080 (40 flows)",
                "remote-node on TCP 8080 (3 flows)"
            ]
        );
        assert_eq!(egress, ["kube-apiserver on TCP 443 (12 flows)"]);
    }

    #[test]
    fn principals_several_workloads_run_as_are_named_with_them() {
        let w = policy(
            "ingress",
            json!({
                "backend": "istio", "mode": "monitor", "direction": "Ingress",
                "targetRef": {"kind": "Deployment", "name": "api"},
                "istio": {"selector": {"matchLabels": {"app": "api"}}, "rules": [
                    {"from": [{"source": {"principals": [
                        "cluster.local/ns/shop/sa/shared", "cluster.local/ns/shop/sa/api"]}}]},
                ]},
            }),
        );
        let facts = facts(&[w], [], &cluster(), &[], HostTraffic::Allowed);
        let f = &facts.policies[&("shop".to_owned(), "ingress".to_owned())];
        assert_eq!(
            f.shared_principals,
            ["cluster.local/ns/shop/sa/shared (Deployment/cron, Deployment/web)"]
        );
        assert!(!f.dns_denied, "not an egress policy");
    }
}
