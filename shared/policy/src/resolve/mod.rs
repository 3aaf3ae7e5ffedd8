//! Owner resolution: from what a flow record says about an endpoint to the workload it
//! belongs to, its selector and its labels.
//!
//! One trait, [`Resolver`], with two implementations here: [`RecordOnly`] (what the record
//! carries, nothing guessed) and [`ClusterSnapshot`] (cluster state with its history: `kubectl
//! get -o yaml` dumps and watch streams offline, the reflector stores and the pods deleted
//! since live).
//!
//! Time and identity decide attribution: an endpoint is resolved as it was while the edge
//! was observed ([`Seen`]). A record that names a pod is that pod, never whoever holds its
//! address; an address alone resolves only to the pod that held it during the whole window.
//!
//! Submodules: `record` ([`RecordOnly`]) and `snapshot` ([`ClusterSnapshot`]); the
//! helpers below (controller-added labels, selectors from labels) are shared by both and
//! by the leader.

mod record;
mod snapshot;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use ne_flow::flow::{Endpoint, Labels, Reserved, Str, Timestamp, WorkloadRef};

pub use record::RecordOnly;
pub use snapshot::{
    Change, ClusterChanges, ClusterObjects, ClusterSnapshot, GonePod, ItemRef, Location,
    SnapshotError,
};

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
    /// The record names a pod but not its owner, and the cluster state (if any) does not
    /// know it either.
    NoOwnerInfo,
    /// The pod (or workload) is not in the cluster state.
    NotFound,
    /// Several workloads could own the endpoint (`orders-*` vs `orders-db-*`).
    Ambiguous,
    /// The owner is known but its selector is not.
    NoSelector,
    /// The record names a pod no cluster input lists, no listed owner matches its labels,
    /// its generated name and its service account, and it carries no labels to select it
    /// by.
    PodNotListed,
    /// Only an address is known, and no known pod held it while the edge was observed
    /// (it did at another time).
    AddressNotHeld,
    /// Only an address is known, and it changed hands while the edge was observed (or the
    /// holder started or ended within the window): the edge cannot be split between them.
    AddressReused,
}

impl Unresolved {
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::NoOwnerInfo => "no_owner_info",
            Unresolved::NotFound => "not_found",
            Unresolved::Ambiguous => "ambiguous",
            Unresolved::NoSelector => "no_selector",
            Unresolved::PodNotListed => "pod_not_listed",
            Unresolved::AddressNotHeld => "address_not_held",
            Unresolved::AddressReused => "address_reused",
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

/// When an endpoint was observed: the first and last observation of the edge (or the time
/// of one record). `Timestamp(0)` stands for "not known" (records without a time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Seen {
    pub first: Timestamp,
    pub last: Timestamp,
}

impl Seen {
    /// No time known.
    pub const UNKNOWN: Seen = Seen {
        first: Timestamp(0),
        last: Timestamp(0),
    };

    /// Observed from `first` to `last`.
    pub fn between(first: Timestamp, last: Timestamp) -> Self {
        Seen { first, last }
    }

    /// Observed once, at `time` (unknown when `None`).
    pub fn at(time: Option<Timestamp>) -> Self {
        let t = time.unwrap_or_default();
        Seen { first: t, last: t }
    }

    /// The window in nanoseconds, `None` when no time is known. A missing start (a mix of
    /// records with and without a time) is taken as the end.
    pub(crate) fn window(self) -> Option<(i64, i64)> {
        match (self.first.0, self.last.0) {
            (0, 0) => None,
            (0, last) => Some((last, last)),
            (first, 0) => Some((first, first)),
            (first, last) => Some((first.min(last), first.max(last))),
        }
    }
}

/// Resolves endpoints to workloads. Implementations must be cheap to call per edge.
pub trait Resolver {
    /// Resolves `endpoint` as it was while it was `seen`.
    fn resolve_at(&self, endpoint: &Endpoint, seen: Seen) -> Resolution;

    /// [`Resolver::resolve_at`], borrowed from the resolver where it holds the answer
    /// already (a cluster snapshot's pods and workloads): no copy of labels and selectors
    /// per lookup, for the callers that only read it.
    fn resolve_shared(&self, endpoint: &Endpoint, seen: Seen) -> Cow<'_, Resolution> {
        Cow::Owned(self.resolve_at(endpoint, seen))
    }

    /// Resolves `endpoint` without knowing when it was observed: an address then resolves
    /// only when one known pod ever held it.
    fn resolve(&self, endpoint: &Endpoint) -> Resolution {
        self.resolve_at(endpoint, Seen::UNKNOWN)
    }
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
