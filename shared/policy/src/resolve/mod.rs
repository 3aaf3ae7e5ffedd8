//! Owner resolution: from what a flow record says about an endpoint to the workload it
//! belongs to, its selector and its labels.
//!
//! One trait, [`Resolver`], with two offline implementations here: [`RecordOnly`] (what the
//! record carries, nothing guessed) and [`ClusterSnapshot`] (a `kubectl get -o yaml` dump,
//! resolved exactly as in a cluster). The leader's in-cluster resolver implements the same
//! trait over its reflector stores.
//!
//! Submodules: `record` ([`RecordOnly`]) and `snapshot` ([`ClusterSnapshot`]); the
//! helpers below (controller-added labels, selectors from labels) are shared by both and
//! by the leader.

mod record;
mod snapshot;

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use ne_flow::flow::{Endpoint, Labels, Reserved, Str, WorkloadRef};

pub use record::RecordOnly;
pub use snapshot::{ClusterObjects, ClusterSnapshot, ItemRef, Location, SnapshotError};

/// A named container port of a pod, for NetworkPolicy named ports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedPort {
    pub name: Str,
    pub protocol: ne_flow::flow::Protocol,
    pub port: u16,
}

/// An in-cluster endpoint after resolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedPod {
    pub namespace: Str,
    /// The owning workload, when known. Jobs, CronJobs, bare pods and ReplicaSets without
    /// a Deployment have their own kind here; only Deployments, StatefulSets and DaemonSets
    /// can be subjects.
    pub owner: Option<WorkloadRef>,
    /// A selector for the owner's pods: the workload's `.spec.selector` when the cluster is
    /// known, else the template labels the record carries. `None` when it cannot be
    /// determined (such a subject is reported, never invented).
    pub selector: Option<LabelSelector>,
    /// The pod's labels (for evaluating selectors).
    pub labels: Labels,
    /// The namespace's labels; always holds `kubernetes.io/metadata.name`.
    pub namespace_labels: Labels,
    /// Named container ports, when the pod spec is known.
    pub named_ports: Vec<NamedPort>,
    /// The pod's ServiceAccount, when known.
    pub service_account: Option<Str>,
}

/// Why an endpoint could not be resolved. Bounded, so it can label a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Unresolved {
    /// The record names a pod but not its owner, and no cluster state is known.
    NoOwnerInfo,
    /// The pod (or workload) is not in the cluster state.
    NotFound,
    /// Several workloads could own the endpoint (`orders-*` vs `orders-db-*`).
    Ambiguous,
    /// The owner is known but its selector is not.
    NoSelector,
}

impl Unresolved {
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::NoOwnerInfo => "no_owner_info",
            Unresolved::NotFound => "not_found",
            Unresolved::Ambiguous => "ambiguous",
            Unresolved::NoSelector => "no_selector",
        }
    }
}

/// The result of resolving one endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Resolution {
    Pod(ResolvedPod),
    External(IpAddr),
    Reserved(Reserved),
    Unresolved(Unresolved),
}

/// Resolves endpoints to workloads. Implementations must be cheap to call per edge.
pub trait Resolver {
    fn resolve(&self, endpoint: &Endpoint) -> Resolution;
}

/// The label every namespace carries with its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Labels that controllers add to the pods they create (per revision, per pod or per
/// job run). They are not part of a workload's identity, so selectors never use them.
pub const CONTROLLER_LABELS: [&str; 9] = [
    "pod-template-hash",
    "controller-revision-hash",
    "pod-template-generation",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
];

/// Whether `key` is a label a controller adds to pods: one of [`CONTROLLER_LABELS`], or
/// any `batch.kubernetes.io/` label (the Job controller also adds
/// `batch.kubernetes.io/job-completion-index`).
pub fn is_controller_label(key: &str) -> bool {
    CONTROLLER_LABELS.contains(&key) || key.starts_with("batch.kubernetes.io/")
}

/// The pod-template labels behind a pod's labels: the labels minus the controller-added
/// ones.
pub fn template_labels(labels: &[(Str, Str)]) -> Labels {
    labels
        .iter()
        .filter(|(k, _)| !is_controller_label(k))
        .cloned()
        .collect()
}

/// A `matchLabels` selector for exactly these labels; `None` when there are none (an
/// empty selector would select every pod in the namespace).
pub fn selector_for(labels: &[(Str, Str)]) -> Option<LabelSelector> {
    if labels.is_empty() {
        return None;
    }
    let match_labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(LabelSelector {
        match_labels: Some(match_labels),
        match_expressions: None,
    })
}

/// `selector` unless it selects everything (no labels and no expressions): such a
/// selector cannot stand for one workload.
pub fn non_empty_selector(selector: &LabelSelector) -> Option<LabelSelector> {
    let has_labels = selector
        .match_labels
        .as_ref()
        .is_some_and(|m| !m.is_empty());
    let has_expressions = selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty());
    (has_labels || has_expressions).then(|| selector.clone())
}
