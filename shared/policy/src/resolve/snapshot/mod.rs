//! [`ClusterSnapshot`]: resolution against a saved cluster state, exactly as the leader
//! resolves against live objects, for offline learning (`ne-leader learn`) and tests.
//!
//! Input is what `kubectl get namespaces,pods,replicasets,deployments,statefulsets,
//! daemonsets,jobs,cronjobs -A -o yaml` prints: a `kind: List`, or several YAML documents
//! of objects or lists. `parse` reads it into typed objects; `build` follows every
//! owner chain once and fills the side tables that [`ClusterSnapshot::resolve`] looks up.

mod build;
mod parse;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use foldhash::HashMap;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod};

use ne_flow::flow::{Endpoint, EndpointId, Str, WorkloadKind, WorkloadRef};

use super::{Resolution, ResolvedPod, Resolver, Unresolved};

/// Where an item sits in the input: the document (1-based) and, inside a `List`, its
/// index in `items` (0-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub document: usize,
    pub index: Option<usize>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "document {}, items[{i}]", self.document),
            None => write!(f, "document {}", self.document),
        }
    }
}

/// Names the item an error is about: `Pod shop/orders-1 (document 1, items[3])`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRef {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub location: Location,
}

impl fmt::Display for ItemRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.kind)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        write!(
            f,
            "{} ({})",
            self.name.as_deref().unwrap_or("<unnamed>"),
            self.location
        )
    }
}

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The text is not YAML (or exceeds the parser's limits).
    #[error("invalid yaml: {0}")]
    Yaml(#[source] Box<serde_saphyr::Error>),
    /// A document or list item is not a mapping.
    #[error("{location}: not a kubernetes object")]
    NotAnObject { location: Location },
    /// An object without `kind`.
    #[error("{location}: object has no kind")]
    MissingKind { location: Location },
    /// The item does not decode as its kind.
    #[error("{item}: {source}")]
    Decode {
        item: Box<ItemRef>,
        #[source]
        source: serde_json::Error,
    },
    /// The item decodes but cannot be used (missing name, bad address, ...).
    #[error("{item}: {problem}")]
    Invalid { item: Box<ItemRef>, problem: String },
}

impl SnapshotError {
    /// A bounded label for metrics.
    pub fn error_type(&self) -> &'static str {
        match self {
            SnapshotError::Yaml(_) => "yaml",
            SnapshotError::NotAnObject { .. } => "not_an_object",
            SnapshotError::MissingKind { .. } => "missing_kind",
            SnapshotError::Decode { .. } => "decode",
            SnapshotError::Invalid { .. } => "invalid",
        }
    }

    /// The item the error is about, when it is about one.
    pub fn item(&self) -> Option<&ItemRef> {
        match self {
            SnapshotError::Decode { item, .. } | SnapshotError::Invalid { item, .. } => Some(item),
            _ => None,
        }
    }
}

/// A lookup result: one pod, or several that cannot be told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Pod(usize),
    Ambiguous,
}

#[derive(Debug)]
struct PodEntry {
    namespace: Str,
    /// The owner as far as it matters for grouping: resolved owner, unknown owner (`None`),
    /// or why the chain broke.
    owner: Result<Option<WorkloadRef>, Unresolved>,
    resolution: Resolution,
}

/// Live objects of the kinds a snapshot reads, as typed objects.
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub replicasets: Vec<ReplicaSet>,
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub daemonsets: Vec<DaemonSet>,
    pub jobs: Vec<Job>,
    pub cronjobs: Vec<CronJob>,
}

/// Resolves endpoints against a saved cluster state. Built once; every lookup is a hash
/// lookup (foldhash) and a clone of a precomputed [`Resolution`].
///
/// - `Pod { ns, name }`: the pod by name, else by the endpoint's address (same namespace),
///   else `NotFound`.
/// - `PodGroup { ns, prefix }`: the pods whose `metadata.generateName` is exactly `prefix`;
///   `Ambiguous` when their owners differ.
/// - `Workload(w)`: the workload object itself (`NotFound` if absent), its owner chain
///   followed (a ReplicaSet resolves to its Deployment); labels and ports come from the
///   pod at the endpoint's address when that pod has the same owner, else from the
///   template.
/// - `External(ip)`: the pod with that address if there is one (not host-network, not
///   finished), else external.
///
/// Owners: Pod → ReplicaSet → Deployment, Pod → StatefulSet / DaemonSet,
/// Pod → Job → CronJob, by controller owner references; a pod without a controller is its
/// own owner (kind `Pod`); a controller of another kind leaves the owner unknown. A broken
/// chain (an owner missing from the snapshot) is `NotFound`.
#[derive(Debug, Default)]
pub struct ClusterSnapshot {
    pods: Vec<PodEntry>,
    /// namespace → pod name → pod.
    by_name: HashMap<Str, HashMap<Str, usize>>,
    by_ip: HashMap<IpAddr, Slot>,
    /// namespace → generateName → pod.
    groups: HashMap<Str, HashMap<Str, Slot>>,
    /// Every workload object (not pods), under its own kind.
    workloads: HashMap<WorkloadRef, Resolution>,
    namespaces: usize,
    ignored: BTreeMap<String, usize>,
}

impl ClusterSnapshot {
    /// Reads a snapshot from `kubectl get ... -o yaml` output.
    pub fn from_yaml(yaml: &str) -> Result<Self, SnapshotError> {
        Ok(build::build(parse::parse(yaml)?))
    }

    /// Builds a snapshot from live objects (the leader's reflector stores). Objects without
    /// a namespace or name, and pod addresses that do not parse, are left out and counted
    /// in the second value.
    pub fn from_objects(objects: ClusterObjects) -> (Self, usize) {
        let (objects, skipped) = parse::from_objects(objects);
        (build::build(objects), skipped)
    }

    /// Number of pods held.
    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Number of workload objects held (Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets, Jobs, CronJobs).
    pub fn workload_count(&self) -> usize {
        self.workloads.len()
    }

    /// Number of Namespace objects held.
    pub fn namespace_count(&self) -> usize {
        self.namespaces
    }

    /// Every pod, then every workload's pod template (with the workload's namespace
    /// labels): what a policy's selectors can select, scaled-to-zero workloads included.
    pub fn endpoints(&self) -> impl Iterator<Item = &ResolvedPod> {
        let pods = self.pods.iter().map(|p| &p.resolution);
        pods.chain(self.workloads.values()).filter_map(|r| match r {
            Resolution::Pod(p) => Some(p),
            _ => None,
        })
    }

    /// Items of kinds this resolver does not use, counted by kind.
    pub fn ignored_kinds(&self) -> &BTreeMap<String, usize> {
        &self.ignored
    }

    fn slot(&self, slot: Option<&Slot>) -> Option<Resolution> {
        match slot? {
            Slot::Pod(i) => Some(self.pods[*i].resolution.clone()),
            Slot::Ambiguous => Some(Resolution::Unresolved(Unresolved::Ambiguous)),
        }
    }

    /// The pod at the endpoint's address, if it is in `namespace`.
    fn by_ip_in(&self, endpoint: &Endpoint, namespace: &str) -> Option<Resolution> {
        match self.by_ip.get(&endpoint.ip?)? {
            Slot::Pod(i) if &*self.pods[*i].namespace == namespace => {
                Some(self.pods[*i].resolution.clone())
            }
            Slot::Pod(_) => None,
            Slot::Ambiguous => Some(Resolution::Unresolved(Unresolved::Ambiguous)),
        }
    }

    fn workload(&self, endpoint: &Endpoint, w: &WorkloadRef) -> Option<Resolution> {
        if w.kind == WorkloadKind::Pod {
            return self.slot(
                self.by_name
                    .get(&w.namespace)?
                    .get(&w.name)
                    .map(|&i| Slot::Pod(i))
                    .as_ref(),
            );
        }
        let resolution = self.workloads.get(w)?;
        // Prefer the actual pod behind the address, when it belongs to the same owner.
        if let (Resolution::Pod(template), Some(Slot::Pod(i))) =
            (resolution, endpoint.ip.and_then(|ip| self.by_ip.get(&ip)))
            && let Resolution::Pod(pod) = &self.pods[*i].resolution
            && pod.owner.is_some()
            && pod.owner == template.owner
        {
            return Some(self.pods[*i].resolution.clone());
        }
        Some(resolution.clone())
    }
}

impl Resolver for ClusterSnapshot {
    fn resolve(&self, endpoint: &Endpoint) -> Resolution {
        let found = match &endpoint.id {
            EndpointId::Reserved(r) => return Resolution::Reserved(*r),
            EndpointId::External(ip) => {
                return self
                    .slot(self.by_ip.get(ip))
                    .unwrap_or(Resolution::External(*ip));
            }
            EndpointId::Workload(w) => self.workload(endpoint, w),
            EndpointId::Pod { namespace, name } => self
                .slot(
                    self.by_name
                        .get(namespace)
                        .and_then(|m| m.get(name))
                        .map(|&i| Slot::Pod(i))
                        .as_ref(),
                )
                .or_else(|| self.by_ip_in(endpoint, namespace)),
            EndpointId::PodGroup { namespace, prefix } => self
                .slot(self.groups.get(namespace).and_then(|m| m.get(prefix)))
                .or_else(|| self.by_ip_in(endpoint, namespace)),
        };
        found.unwrap_or(Resolution::Unresolved(Unresolved::NotFound))
    }
}

#[cfg(test)]
mod tests;
