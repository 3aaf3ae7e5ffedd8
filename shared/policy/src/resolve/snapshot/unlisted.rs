//! Pods no input lists (deleted before the snapshot was taken), resolved through the
//! owners that are still listed. Never by trimming a name down to a guess: a candidate
//! owner must be a listed object whose exact name the pod's name is generated from, and
//! must agree with everything else the record says.
//!
//! - The record's `pod-template-hash` label: the ReplicaSets of the namespace carrying
//!   that hash.
//! - The record's `batch.kubernetes.io/job-name` (or `job-name`) label: that Job.
//! - Otherwise the name as its controller generates it: `<StatefulSet>-<ordinal>`, or
//!   `<ReplicaSet | DaemonSet | Job>-<five generated characters>` (the API server's
//!   `generateName` suffix).
//!
//! A candidate is kept only if its selector matches the labels the record carries, and its
//! pods' ServiceAccount is the one of the record's mesh identity. One owner left resolves
//! the pod as its owner's template; several are `Ambiguous`. With none, a record that
//! carries the pod's labels still says all a peer needs (labels, namespace): the pod
//! resolves with those and no owner, as without a cluster; else it is `PodNotListed`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use ne_flow::flow::{Endpoint, Str, WorkloadKind, WorkloadRef};

use super::ClusterSnapshot;
use crate::eval::selector;
use crate::resolve::{RecordOnly, Resolution, Resolver, Unresolved};

/// The characters of the random suffix the API server appends to a `generateName`.
const GENERATED: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const GENERATED_LEN: usize = 5;

/// `base` when `name` is `<base>-<five generated characters>`.
fn generated_from(name: &str) -> Option<&str> {
    let (base, suffix) = name.rsplit_once('-')?;
    let generated = suffix.len() == GENERATED_LEN && suffix.bytes().all(|b| GENERATED.contains(&b));
    (generated && !base.is_empty()).then_some(base)
}

/// `base` when `name` is `<base>-<ordinal>`.
fn ordinal_of(name: &str) -> Option<&str> {
    let (base, ordinal) = name.rsplit_once('-')?;
    let canonical = !ordinal.is_empty()
        && ordinal.bytes().all(|b| b.is_ascii_digit())
        && (ordinal == "0" || !ordinal.starts_with('0'));
    (canonical && !base.is_empty()).then_some(base)
}

fn label<'a>(endpoint: &'a Endpoint, key: &str) -> Option<&'a str> {
    endpoint
        .labels
        .iter()
        .find(|(k, _)| &**k == key)
        .map(|(_, v)| &**v)
}

/// The ServiceAccount of an Istio principal `<trust domain>/ns/<namespace>/sa/<name>` in
/// `namespace`.
fn service_account<'a>(endpoint: &'a Endpoint, namespace: &str) -> Option<&'a str> {
    let principal = endpoint.identity.as_deref()?;
    let principal = principal.strip_prefix("spiffe://").unwrap_or(principal);
    let mut parts = principal.split('/').skip(1);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("ns"), Some(ns), Some("sa"), Some(sa)) if ns == namespace => Some(sa),
        _ => None,
    }
}

impl ClusterSnapshot {
    /// A pod named by the record that no input lists.
    pub(super) fn unlisted_pod(
        &self,
        endpoint: &Endpoint,
        namespace: &Str,
        name: &str,
    ) -> Resolution {
        let workload = |kind, name: &str| WorkloadRef {
            namespace: namespace.clone(),
            kind,
            name: name.into(),
        };
        let mut candidates = Vec::new();
        if let Some(hash) = label(endpoint, "pod-template-hash") {
            let listed = self
                .replicasets_by_hash
                .get(&(namespace.clone(), Str::from(hash)));
            candidates.extend(
                listed
                    .into_iter()
                    .flatten()
                    .map(|rs| workload(WorkloadKind::ReplicaSet, rs)),
            );
        } else if let Some(job) =
            label(endpoint, "batch.kubernetes.io/job-name").or(label(endpoint, "job-name"))
        {
            candidates.push(workload(WorkloadKind::Job, job));
        } else {
            if let Some(set) = ordinal_of(name) {
                candidates.push(workload(WorkloadKind::StatefulSet, set));
            }
            if let Some(base) = generated_from(name) {
                for kind in [
                    WorkloadKind::ReplicaSet,
                    WorkloadKind::DaemonSet,
                    WorkloadKind::Job,
                ] {
                    candidates.push(workload(kind, base));
                }
            }
        }
        self.owner_of_unlisted(endpoint, namespace, candidates)
    }

    /// A group of pods (Calico's `<generateName>*`) none of which any input lists: the
    /// ReplicaSet, DaemonSet or Job whose pods are generated with exactly that prefix.
    pub(super) fn unlisted_group(
        &self,
        endpoint: &Endpoint,
        namespace: &Str,
        prefix: &str,
    ) -> Resolution {
        let candidates = prefix
            .strip_suffix('-')
            .filter(|base| !base.is_empty())
            .map(|base| {
                [
                    WorkloadKind::ReplicaSet,
                    WorkloadKind::DaemonSet,
                    WorkloadKind::Job,
                ]
                .map(|kind| WorkloadRef {
                    namespace: namespace.clone(),
                    kind,
                    name: base.into(),
                })
            });
        self.owner_of_unlisted(
            endpoint,
            namespace,
            candidates.into_iter().flatten().collect(),
        )
    }

    /// The one listed candidate that agrees with the record.
    fn owner_of_unlisted(
        &self,
        endpoint: &Endpoint,
        namespace: &str,
        candidates: Vec<WorkloadRef>,
    ) -> Resolution {
        let account = service_account(endpoint, namespace);
        let mut found: Option<&Resolution> = None;
        for candidate in &candidates {
            let Some(resolution @ Resolution::Pod(template)) = self.workloads.get(candidate) else {
                continue;
            };
            let selects = |s: &LabelSelector| selector::matches(s, &endpoint.labels) == Ok(true);
            if !endpoint.labels.is_empty() && !template.selector.as_ref().is_some_and(selects) {
                continue;
            }
            if account.is_some_and(|sa| template.service_account.as_deref() != Some(sa)) {
                continue;
            }
            match found {
                Some(Resolution::Pod(first)) if first.owner != template.owner => {
                    return Resolution::Unresolved(Unresolved::Ambiguous);
                }
                Some(_) => {}
                None => found = Some(resolution),
            }
        }
        if let Some(owner) = found {
            return owner.clone();
        }
        if endpoint.labels.is_empty() {
            return Resolution::Unresolved(Unresolved::PodNotListed);
        }
        match RecordOnly.resolve(endpoint) {
            Resolution::Pod(mut pod) => {
                pod.owner = None;
                if let Some(labels) = self.namespace_labels.get(namespace) {
                    pod.namespace_labels = labels.clone();
                }
                Resolution::Pod(pod)
            }
            _ => Resolution::Unresolved(Unresolved::PodNotListed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_need_the_exact_suffix_alphabet() {
        assert_eq!(
            generated_from("orders-7d9f8c6b5-x2x4q"),
            Some("orders-7d9f8c6b5")
        );
        assert_eq!(generated_from("log-shipper-r4t9w"), Some("log-shipper"));
        // Vowels, `1`, `0` and upper case are never generated; the length is exact.
        assert_eq!(generated_from("orders-7d9f8c6b5-abcde"), None);
        assert_eq!(generated_from("orders-x2x4"), None);
        assert_eq!(generated_from("orders-x2x4qq"), None);
        assert_eq!(generated_from("-x2x4q"), None);
        assert_eq!(generated_from("x2x4q"), None);
    }

    #[test]
    fn ordinals_are_canonical_numbers() {
        assert_eq!(ordinal_of("db-0"), Some("db"));
        assert_eq!(ordinal_of("web-db-12"), Some("web-db"));
        assert_eq!(ordinal_of("db-01"), None);
        assert_eq!(ordinal_of("db-"), None);
        assert_eq!(ordinal_of("db-a1"), None);
        assert_eq!(ordinal_of("-3"), None);
    }

    #[test]
    fn the_service_account_comes_from_a_principal_in_the_namespace() {
        let ep = |id: &str| {
            Endpoint::new(ne_flow::flow::EndpointId::External([10, 0, 0, 1].into()))
                .with_identity(Some(id.into()))
        };
        assert_eq!(
            service_account(&ep("cluster.local/ns/shop/sa/orders"), "shop"),
            Some("orders")
        );
        assert_eq!(
            service_account(&ep("spiffe://td/ns/shop/sa/orders"), "shop"),
            Some("orders")
        );
        assert_eq!(service_account(&ep("td/ns/other/sa/orders"), "shop"), None);
        assert_eq!(service_account(&ep("td/sa/orders"), "shop"), None);
    }
}
