//! [`RecordOnly`]: resolution from what the flow record itself carries, for offline use
//! without cluster state. Nothing is guessed: a pod whose record does not name its owner
//! keeps no owner (hash suffixes are never stripped from names).

use ne_flow::flow::{Endpoint, EndpointId, Labels, Str, labels};

use super::{
    NAMESPACE_NAME_LABEL, Resolution, ResolvedPod, Resolver, Seen, selector_for, template_labels,
};

/// Cilium adds these pseudo-labels to an endpoint's pod labels (with the `k8s:` source
/// prefix the decoder strips). They are not pod labels: a selector using them would match
/// no pod.
const CILIUM_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const CILIUM_META_PREFIX: &str = "io.cilium.k8s.";
/// `io.cilium.k8s.namespace.labels.<key>=<value>`: the namespace's labels.
const CILIUM_NAMESPACE_LABELS: &str = "io.cilium.k8s.namespace.labels.";
/// `io.cilium.k8s.policy.serviceaccount=<name>`.
const CILIUM_SERVICE_ACCOUNT: &str = "io.cilium.k8s.policy.serviceaccount";

/// Resolves endpoints from the record alone.
///
/// - `Workload(w)`: owner `w`; selector = `matchLabels` of the carried labels minus the
///   controller-added ones (`None` when none remain).
/// - `Pod` / `PodGroup`: no owner (a peer can still be selected by its labels; a subject
///   needs an owner); selector as above.
/// - `External` / `Reserved`: as they are.
///
/// Namespace labels hold `kubernetes.io/metadata.name` plus any namespace labels the
/// record carries (Cilium's `io.cilium.k8s.namespace.labels.*`); the ServiceAccount comes
/// from Cilium's `io.cilium.k8s.policy.serviceaccount` or an Istio principal
/// `<trust domain>/ns/<namespace>/sa/<name>` in the same namespace.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecordOnly;

impl Resolver for RecordOnly {
    /// What the record carries does not change with time.
    fn resolve_at(&self, endpoint: &Endpoint, _: Seen) -> Resolution {
        let (namespace, owner) = match &endpoint.id {
            EndpointId::Workload(w) => (w.namespace.clone(), Some(w.clone())),
            EndpointId::Pod { namespace, .. } | EndpointId::PodGroup { namespace, .. } => {
                (namespace.clone(), None)
            }
            EndpointId::External(ip) => return Resolution::External(*ip),
            EndpointId::Reserved(r) => return Resolution::Reserved(*r),
        };
        let pod_labels: Labels = endpoint
            .labels
            .iter()
            .filter(|(k, _)| &**k != CILIUM_POD_NAMESPACE && !k.starts_with(CILIUM_META_PREFIX))
            .cloned()
            .collect();
        let namespace_labels = labels(
            endpoint
                .labels
                .iter()
                .filter_map(|(k, v)| Some((k.strip_prefix(CILIUM_NAMESPACE_LABELS)?, v.clone())))
                .filter(|(k, _)| *k != NAMESPACE_NAME_LABEL)
                .map(|(k, v)| (Str::from(k), v))
                .chain([(Str::from(NAMESPACE_NAME_LABEL), namespace.clone())]),
        );
        Resolution::Pod(ResolvedPod {
            selector: selector_for(&template_labels(&pod_labels)),
            service_account: service_account(endpoint, &namespace),
            namespace,
            owner,
            labels: pod_labels,
            namespace_labels,
            named_ports: Vec::new(),
        })
    }
}

fn service_account(endpoint: &Endpoint, namespace: &str) -> Option<Str> {
    if let Some((_, sa)) = endpoint
        .labels
        .iter()
        .find(|(k, _)| &**k == CILIUM_SERVICE_ACCOUNT)
    {
        return Some(sa.clone());
    }
    let principal = endpoint.identity.as_deref()?;
    let mut parts = principal.split('/');
    let (_trust_domain, ns_key, ns, sa_key, sa) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (parts.next().is_none()
        && ns_key == "ns"
        && sa_key == "sa"
        && ns == namespace
        && !sa.is_empty())
    .then(|| Str::from(sa))
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use ne_flow::flow::{Reserved, WorkloadKind, WorkloadRef};

    fn pod(resolution: Resolution) -> ResolvedPod {
        match resolution {
            Resolution::Pod(p) => p,
            other => panic!("expected a pod, got {other:?}"),
        }
    }

    fn match_labels(p: &ResolvedPod) -> Option<Vec<(String, String)>> {
        let m = p.selector.as_ref()?.match_labels.as_ref()?;
        Some(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_workload_gets_its_template_labels_as_selector() {
        let w = WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: "orders".into(),
        };
        let ep = Endpoint::new(EndpointId::Workload(w.clone())).with_labels(labels([
            ("app", "orders"),
            ("tier", "backend"),
            ("pod-template-hash", "7d9f8c6b5"),
            ("io.kubernetes.pod.namespace", "shop"),
            ("io.cilium.k8s.policy.cluster", "default"),
            ("io.cilium.k8s.policy.serviceaccount", "orders-sa"),
            ("io.cilium.k8s.namespace.labels.team", "payments"),
        ]));
        let p = pod(RecordOnly.resolve(&ep));
        assert_eq!(p.owner, Some(w));
        assert_eq!(
            match_labels(&p),
            Some(kv(&[("app", "orders"), ("tier", "backend")]))
        );
        // Pod labels keep the controller's hash but not Cilium's pseudo-labels.
        assert_eq!(
            p.labels,
            labels([
                ("app", "orders"),
                ("pod-template-hash", "7d9f8c6b5"),
                ("tier", "backend")
            ])
        );
        assert_eq!(
            p.namespace_labels,
            labels([
                ("kubernetes.io/metadata.name", "shop"),
                ("team", "payments")
            ])
        );
        assert_eq!(p.service_account.as_deref(), Some("orders-sa"));
    }

    #[test]
    fn controller_labels_only_leave_no_selector_but_still_a_pod() {
        let w = WorkloadRef {
            namespace: "ops".into(),
            kind: WorkloadKind::Job,
            name: "backup-123".into(),
        };
        let ep = Endpoint::new(EndpointId::Workload(w.clone())).with_labels(labels([
            ("job-name", "backup-123"),
            ("controller-uid", "abc"),
            ("batch.kubernetes.io/job-completion-index", "0"),
        ]));
        let p = pod(RecordOnly.resolve(&ep));
        assert_eq!((p.owner, p.selector), (Some(w), None));
        assert_eq!(
            p.namespace_labels,
            labels([("kubernetes.io/metadata.name", "ops")])
        );
    }

    #[test]
    fn a_pod_keeps_no_owner_and_its_name_is_not_trimmed() {
        let ep = Endpoint::new(EndpointId::Pod {
            namespace: "shop".into(),
            name: "orders-7d9f8c6b5-x2x4q".into(),
        })
        .with_labels(labels([
            ("app", "orders"),
            ("pod-template-hash", "7d9f8c6b5"),
        ]))
        .with_identity(Some("cluster.local/ns/shop/sa/orders".into()));
        let p = pod(RecordOnly.resolve(&ep));
        assert_eq!(p.owner, None);
        assert_eq!(match_labels(&p), Some(kv(&[("app", "orders")])));
        assert_eq!(p.service_account.as_deref(), Some("orders"));

        let group = Endpoint::new(EndpointId::PodGroup {
            namespace: "shop".into(),
            prefix: "orders-7d9f8c6b5-".into(),
        });
        let p = pod(RecordOnly.resolve(&group));
        assert_eq!((p.owner, p.selector, p.service_account), (None, None, None));
        assert_eq!(&*p.namespace, "shop");
    }

    #[test]
    fn a_principal_from_another_namespace_gives_no_service_account() {
        let ep = Endpoint::new(EndpointId::Pod {
            namespace: "shop".into(),
            name: "a".into(),
        })
        .with_identity(Some("cluster.local/ns/other/sa/orders".into()));
        assert_eq!(pod(RecordOnly.resolve(&ep)).service_account, None);
    }

    #[test]
    fn external_and_reserved_pass_through() {
        let ip = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));
        assert_eq!(
            RecordOnly.resolve(&Endpoint::new(EndpointId::External(ip))),
            Resolution::External(ip)
        );
        assert_eq!(
            RecordOnly.resolve(&Endpoint::new(EndpointId::Reserved(
                Reserved::KubeApiserver
            ))),
            Resolution::Reserved(Reserved::KubeApiserver)
        );
    }
}
