//! What users and other tools write into the cluster, as the leader's planner receives it:
//! proposals with any promote label, policies with hand-edited specs, acknowledgement
//! annotations and statuses. Objects the CRD types accept, whatever their values, never
//! panic the rule checks, the acknowledgements or the planner, and a plan is the same
//! when made twice.
//!
//! Input: a YAML stream of proposals and policies, told apart by `kind` (objects that do
//! not deserialize are left out, as the API server's schema would refuse them).
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;
use ne_crds::{Backend, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};
use ne_leader::controller::plan::{Config, Workload, World, plan};
use ne_leader::violations::record::{acknowledge, acknowledgements};
use ne_policy::eval::peers::{Endpoints, unselected};
use ne_policy::eval::{PolicyRef, validate};
use ne_policy::resolve::ClusterSnapshot;
use serde_json::Value;

/// The bundled example's cluster, for the peer checks.
static CLUSTER: LazyLock<ClusterSnapshot> = LazyLock::new(|| {
    ClusterSnapshot::from_yaml(include_str!("../../examples/cluster.yaml"))
        .expect("the example cluster")
});

fn objects<T: serde::de::DeserializeOwned>(docs: &[Value], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d["kind"] == kind)
        .filter_map(|v| serde_json::from_value(v.clone()).ok())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(docs) = serde_saphyr::from_multiple::<Value>(text) else {
        return;
    };
    let proposals: Vec<WorkloadNetworkPolicyProposal> =
        objects(&docs, "WorkloadNetworkPolicyProposal");
    let policies: Vec<WorkloadNetworkPolicy> = objects(&docs, "WorkloadNetworkPolicy");
    let now = Time(Timestamp::from_second(1_796_385_600).expect("a time"));

    let endpoints = Endpoints::new(CLUSTER.endpoints());
    for w in &policies {
        let policy = PolicyRef::from(&w.spec);
        let _ = validate(policy);
        let _ = unselected(
            policy,
            w.metadata.namespace.as_deref().unwrap_or_default(),
            &endpoints,
        );
        if let (Some(annotations), Some(status)) = (&w.metadata.annotations, &w.status) {
            let acks = acknowledgements(annotations);
            let _ = acknowledge(status, &acks, &now);
        }
    }

    // Every target named exists, so that promotion and status paths run.
    let workloads: BTreeMap<_, _> = proposals
        .iter()
        .map(|p| (p.metadata.namespace.clone(), &p.spec.target_ref))
        .chain(
            policies
                .iter()
                .map(|p| (p.metadata.namespace.clone(), &p.spec.target_ref)),
        )
        .map(|(ns, t)| {
            let workload = Workload {
                uid: format!("uid-{}", t.name),
                service_account: Some(t.name.clone()),
            };
            ((ns.unwrap_or_default(), t.kind, t.name.clone()), workload)
        })
        .collect();
    let (observations, rule_issues) = (BTreeMap::new(), BTreeMap::new());
    let world = World {
        learned: &proposals,
        workloads: &workloads,
        proposals: &proposals,
        policies: &policies,
        network_policies: &[],
        authorization_policies: Some(&[]),
        observations: &observations,
        rule_issues: &rule_issues,
        safety: &Default::default(),
        now: &now,
    };
    for backend in [Backend::Kubernetes, Backend::Istio] {
        let config = Config {
            backend,
            excluded_namespaces: BTreeSet::from(["kube-system".to_owned()]),
            stable_after: Duration::from_secs(600),
            status_refresh: Duration::from_secs(60),
        };
        assert_eq!(
            plan(&world, &config),
            plan(&world, &config),
            "the plan is not deterministic"
        );
    }
});
