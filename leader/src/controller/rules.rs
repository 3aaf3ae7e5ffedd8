//! What is wrong with each policy's rules: invalid parts (they match nothing) and peers
//! that select no pod or workload in the cluster (they allow nothing). The planner turns
//! it into the `PeersResolved` condition and a Warning Event.
//!
//! Checking peers scans the cluster's pods, so a policy is checked again only when its spec
//! (generation) or the cluster (the resolver's generation) changed.

use std::collections::{BTreeMap, HashMap};

use ne_crds::{Backend, WorkloadNetworkPolicy};
use ne_policy::eval::peers::{Endpoints, unselected};
use ne_policy::eval::{PolicyRef, validate};
use ne_policy::resolve::ClusterSnapshot;

use super::plan::RuleIssues;

/// The findings of the last check, by policy uid, with the policy generation and the
/// resolver generation they were made at.
#[derive(Debug, Default)]
pub struct RuleChecks {
    checked: HashMap<String, (Option<i64>, u64, RuleIssues)>,
}

impl RuleChecks {
    /// The issues of every policy with any, by `(namespace, name)`.
    pub fn check(
        &mut self,
        policies: &[WorkloadNetworkPolicy],
        cluster: &ClusterSnapshot,
        cluster_generation: u64,
    ) -> BTreeMap<(String, String), RuleIssues> {
        let mut endpoints = None;
        let mut checked = HashMap::with_capacity(self.checked.len());
        let mut issues = BTreeMap::new();
        for w in policies {
            let Some(uid) = w.metadata.uid.clone() else {
                continue;
            };
            let generation = w.metadata.generation;
            let found = match self.checked.remove(&uid) {
                Some((g, c, found)) if g == generation && c == cluster_generation => found,
                _ => {
                    let endpoints =
                        endpoints.get_or_insert_with(|| Endpoints::new(cluster.endpoints()));
                    let policy = PolicyRef::from(&w.spec);
                    let namespace = w.metadata.namespace.as_deref().unwrap_or_default();
                    let payload = match w.spec.backend {
                        Backend::Kubernetes => "spec.kubernetes",
                        Backend::Istio => "spec.istio",
                    };
                    RuleIssues {
                        invalid: validate(policy)
                            .iter()
                            .map(|issue| format!("{payload}.{issue}"))
                            .collect(),
                        unselected: unselected(policy, namespace, endpoints)
                            .into_iter()
                            .map(|path| format!("{payload}.{path}"))
                            .collect(),
                    }
                }
            };
            if !found.is_empty() {
                issues.insert(
                    (
                        w.metadata.namespace.clone().unwrap_or_default(),
                        w.metadata.name.clone().unwrap_or_default(),
                    ),
                    found.clone(),
                );
            }
            checked.insert(uid, (generation, cluster_generation, found));
        }
        self.checked = checked;
        issues
    }
}
