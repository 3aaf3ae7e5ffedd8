//! [`ClusterSnapshot`]: resolution against a saved cluster state, exactly as the leader
//! resolves against live objects, for offline learning (`ne-leader learn`) and tests.
//!
//! Input is what `kubectl get namespaces,pods,replicasets,deployments,statefulsets,
//! daemonsets,jobs,cronjobs -A -o yaml` prints: a `kind: List`, or several YAML documents
//! of objects or lists; several such snapshots and watch streams make a history. `parse`
//! reads them into typed objects; `build` follows every owner chain once and fills the
//! side tables that [`ClusterSnapshot::resolve_at`] looks up; `history` keeps who held
//! each address when, and `unlisted` resolves pods no input lists through their owners.

mod build;
mod changes;
pub use changes::{Change, ClusterChanges};
mod history;
mod index;
mod parse;
mod unlisted;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use foldhash::HashMap;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

use ne_flow::flow::{Endpoint, EndpointId, Str, Timestamp, WorkloadKind, WorkloadRef};

use super::{Resolution, ResolvedPod, Resolver, Seen, Unresolved};

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
    /// The text starts as JSON but is not a stream of JSON values.
    #[error("invalid json: {0}")]
    Json(#[source] serde_json::Error),
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
            SnapshotError::Json(_) => "json",
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

/// When a pod existed, in nanoseconds since the epoch (`None`: not known).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Life {
    /// `status.startTime`, else `metadata.creationTimestamp`.
    start: Option<i64>,
    /// The earliest of its `deletionTimestamp`, the time it finished (`Succeeded` or
    /// `Failed`) and, live, when the leader saw it gone.
    end: Option<i64>,
}

impl Life {
    fn overlaps(self, (first, last): (i64, i64)) -> bool {
        self.start.is_none_or(|s| s <= last) && self.end.is_none_or(|e| e > first)
    }
}

#[derive(Clone, Debug)]
struct PodEntry {
    namespace: Str,
    name: Str,
    uid: Option<Str>,
    /// The owner as far as it matters for grouping: resolved owner, unknown owner (`None`),
    /// or why the chain broke.
    owner: Result<Option<WorkloadRef>, Unresolved>,
    /// Shared: a gone pod's copy in the history and in every snapshot rebuilt with it.
    resolution: Arc<Resolution>,
    ips: Vec<IpAddr>,
    life: Life,
    generate_name: Option<Str>,
    /// Whether it holds its addresses: not on the host network (its address is the
    /// node's), and not finished at an unknown time.
    addressable: bool,
    /// Deleted: it resolves the flows of its lifetime, and no selector selects it.
    gone: bool,
    /// Alive: the object it was resolved from, to resolve it again when its owners change
    /// (shared with the caller's cache).
    object: Option<Arc<Pod>>,
    /// Alive: the workload named by its controller reference, whether listed or not.
    controller: Option<WorkloadRef>,
    /// Alive: addresses in its status that do not parse.
    bad_ips: usize,
}

/// A pod the live cluster no longer lists, kept so that the edges of its lifetime still
/// resolve to it (see [`ClusterSnapshot::gone_since`]).
#[derive(Clone, Debug)]
pub struct GonePod(PodEntry);

impl GonePod {
    /// When it was last known to hold its addresses (nanoseconds since the epoch).
    pub fn ended(&self) -> Timestamp {
        Timestamp(self.0.life.end.unwrap_or_default())
    }

    /// `namespace/name`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.0.namespace, self.0.name)
    }

    /// Bytes it holds beyond its own size (names, labels, selector, addresses), counted
    /// the way the allocator sees them: for the memory figure of the history. The
    /// namespace's labels, shared by every pod of the namespace, are left out.
    pub fn heap_bytes(&self) -> usize {
        /// An `Arc<str>`: two counters and the text.
        fn arc(s: &str) -> usize {
            2 * size_of::<usize>() + s.len()
        }
        fn workload(w: &WorkloadRef) -> usize {
            arc(&w.namespace) + arc(&w.name)
        }
        /// A `BTreeMap` of up to 11 entries is one node with room for 11.
        fn btree(m: &BTreeMap<String, String>) -> usize {
            let node = 11 * 2 * size_of::<String>() + 2 * size_of::<usize>();
            m.len().div_ceil(11) * node + m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        }
        let e = &self.0;
        let mut n = arc(&e.namespace) + arc(&e.name);
        n += e.uid.as_deref().map_or(0, arc) + e.generate_name.as_deref().map_or(0, arc);
        n += e.ips.capacity() * size_of::<IpAddr>();
        // Its owner shares its names with the resolution's.
        n += 2 * size_of::<usize>() + size_of::<Resolution>();
        if let Resolution::Pod(p) = &*e.resolution {
            n += arc(&p.namespace) + p.owner.as_ref().map_or(0, workload);
            n += 2 * size_of::<usize>() + p.labels.len() * 2 * size_of::<Str>();
            n += p.labels.iter().map(|(k, v)| arc(k) + arc(v)).sum::<usize>();
            n += p.named_ports.capacity() * size_of::<super::NamedPort>();
            n += p
                .named_ports
                .iter()
                .map(|port| arc(&port.name))
                .sum::<usize>();
            n += p.service_account.as_deref().map_or(0, arc);
            if let Some(selector) = &p.selector {
                n += selector.match_labels.as_ref().map_or(0, btree);
                n += selector.match_expressions.as_ref().map_or(0, |x| {
                    x.capacity() * size_of::<LabelSelectorRequirement>()
                        + x.iter()
                            .map(|r| {
                                r.key.len()
                                    + r.operator.len()
                                    + r.values.as_ref().map_or(0, |v| {
                                        v.capacity() * size_of::<String>()
                                            + v.iter().map(String::len).sum::<usize>()
                                    })
                            })
                            .sum::<usize>()
                });
            }
        }
        n
    }
}

/// Live objects of the kinds a snapshot reads, as typed objects shared with the caller
/// (the leader's reflector stores hand out `Arc`s; the snapshot keeps them, not copies).
#[derive(Clone, Debug, Default)]
pub struct ClusterObjects {
    pub namespaces: Vec<Arc<Namespace>>,
    pub pods: Vec<Arc<Pod>>,
    pub replicasets: Vec<Arc<ReplicaSet>>,
    pub deployments: Vec<Arc<Deployment>>,
    pub statefulsets: Vec<Arc<StatefulSet>>,
    pub daemonsets: Vec<Arc<DaemonSet>>,
    pub jobs: Vec<Arc<Job>>,
    pub cronjobs: Vec<Arc<CronJob>>,
}

/// Resolves endpoints against cluster state and its history. Built once; every lookup is
/// a few hash lookups (foldhash) and a clone of a precomputed [`Resolution`].
///
/// - `Pod { ns, name }`: the pod of that name (of several with one name, the one alive
///   while the edge was seen, else the newest); never by address. A pod no input lists is
///   resolved through its owner (see `unlisted`), else `PodNotListed`.
/// - `PodGroup { ns, prefix }`: the pods whose `metadata.generateName` is exactly `prefix`
///   (`Ambiguous` when their owners differ), else the ReplicaSet, DaemonSet or Job that
///   generates exactly that name.
/// - `Workload(w)`: the workload object itself (`NotFound` if absent), its owner chain
///   followed (a ReplicaSet resolves to its Deployment); labels and ports come from the
///   pod that held the endpoint's address while it was seen, when that pod has the same
///   owner, else from the template.
/// - `External(ip)`: the pod that held the address during the whole window; an address
///   no known pod ever held is external; `AddressNotHeld` / `AddressReused` otherwise.
///
/// A pod holds its addresses from its start (`status.startTime`, else its creation) until
/// the earliest of its deletion, its finish and the start of the next pod given the same
/// address. Host-network pods hold none.
///
/// Owners: Pod → ReplicaSet → Deployment, Pod → StatefulSet / DaemonSet,
/// Pod → Job → CronJob, by controller owner references; a pod without a controller is its
/// own owner (kind `Pod`); a controller of another kind leaves the owner unknown. A broken
/// chain (an owner missing from the snapshot) is `NotFound`.
#[derive(Debug, Default)]
pub struct ClusterSnapshot {
    /// Every pod held, live and gone; `None`: a slot free for reuse (listed in `free`).
    pods: Vec<Option<PodEntry>>,
    free: Vec<usize>,
    /// namespace → pod name → the pods of that name, oldest first.
    by_name: HashMap<Str, HashMap<Str, Vec<usize>>>,
    by_ip: HashMap<IpAddr, history::Holders>,
    /// namespace → generateName → its pods and what the name resolves to.
    groups: HashMap<Str, HashMap<Str, index::Group>>,
    /// Every workload object (not pods), under its own kind.
    workloads: HashMap<WorkloadRef, Resolution>,
    /// (namespace, `pod-template-hash`) → the ReplicaSets carrying it.
    replicasets_by_hash: HashMap<(Str, Str), Vec<Str>>,
    /// The labels of every listed namespace (with `kubernetes.io/metadata.name`).
    namespace_labels: HashMap<Str, ne_flow::flow::Labels>,
    /// The namespaces and workload objects resolutions are derived from (pods are held by
    /// their entries), kept to apply changes.
    objects: parse::Objects,
    /// The labels every resolution in a namespace carries, listed or not.
    label_cache: HashMap<Str, ne_flow::flow::Labels>,
    /// Workload → the live pods and workload objects whose controller reference names it.
    dependents: HashMap<WorkloadRef, index::Dependents>,
    /// Index keys to settle after entries were added or removed.
    unsettled: index::Unsettled,
    /// Objects without namespace or name, and pod addresses that do not parse.
    skipped: usize,
    ignored: BTreeMap<String, usize>,
}

impl ClusterSnapshot {
    /// Reads a snapshot from `kubectl get ... -o yaml` output.
    pub fn from_yaml(yaml: &str) -> Result<Self, SnapshotError> {
        Self::from_inputs([yaml]).map_err(|(_, e)| e)
    }

    /// Reads the cluster's history from several inputs, oldest first: snapshots
    /// (`kubectl get ... -o yaml` or `-o json`) and watch streams (`kubectl get pods -w -o
    /// json`, with or without `--output-watch-events`). On error, the index of the input.
    pub fn from_inputs<'a>(
        inputs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, (usize, SnapshotError)> {
        let mut objects = parse::Objects::default();
        for (i, text) in inputs.into_iter().enumerate() {
            objects.parse(text).map_err(|e| (i, e))?;
        }
        Ok(build::build(objects, []))
    }

    /// Builds a snapshot from live objects (the leader's reflector stores) and the pods
    /// deleted since (see [`ClusterSnapshot::gone_since`]). Objects without a namespace or
    /// name, and pod addresses that do not parse, are left out and counted in the second
    /// value.
    pub fn from_objects<'g>(
        objects: ClusterObjects,
        gone: impl IntoIterator<Item = &'g GonePod>,
    ) -> (Self, usize) {
        let (objects, nameless) = parse::from_objects(objects);
        let mut snapshot = build::build(objects, gone);
        snapshot.skipped += nameless;
        let skipped = snapshot.skipped;
        (snapshot, skipped)
    }

    /// Adds pods found gone after this snapshot was built (see
    /// [`ClusterSnapshot::gone_since`]).
    pub fn add_gone(&mut self, gone: &[GonePod]) {
        for pod in gone {
            self.insert(pod.0.clone());
        }
        self.settle();
    }

    /// The pods this snapshot lists alive that `next` does not list any more, ended at
    /// `now` at the latest: what the live leader keeps so that the edges of their
    /// lifetime still resolve to them.
    pub fn gone_since(&self, next: &ClusterSnapshot, now: Timestamp) -> Vec<GonePod> {
        let alive: foldhash::HashSet<(&str, &str, Option<&str>)> = next
            .entries()
            .filter(|p| !p.gone)
            .map(|p| (&*p.namespace, &*p.name, p.uid.as_deref()))
            .collect();
        self.entries()
            .filter(|p| !p.gone && !alive.contains(&(&*p.namespace, &*p.name, p.uid.as_deref())))
            .map(|p| GonePod(p.clone().into_gone(now)))
            .collect()
    }

    /// Number of pods held (gone ones included).
    pub fn pod_count(&self) -> usize {
        self.pods.len() - self.free.len()
    }

    /// Number of workload objects held (Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets, Jobs, CronJobs).
    pub fn workload_count(&self) -> usize {
        self.workloads.len()
    }

    /// Number of Namespace objects held.
    pub fn namespace_count(&self) -> usize {
        self.objects.namespaces.len()
    }

    /// Objects left out (without namespace or name) and pod addresses that do not parse,
    /// in the cluster state this snapshot holds.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Every pod not gone, then every workload's pod template (with the workload's
    /// namespace labels): what a policy's selectors can select, scaled-to-zero workloads
    /// included.
    pub fn endpoints(&self) -> impl Iterator<Item = &ResolvedPod> {
        self.live_pods().chain(self.templates())
    }

    /// Every pod not gone, in no particular order (it changes as pods come and go).
    pub fn live_pods(&self) -> impl Iterator<Item = &ResolvedPod> {
        let pods = self.entries().filter(|p| !p.gone);
        pods.filter_map(|p| match &*p.resolution {
            Resolution::Pod(p) => Some(p),
            _ => None,
        })
    }

    /// Every workload's pod template, with the workload's namespace labels.
    pub fn templates(&self) -> impl Iterator<Item = &ResolvedPod> {
        self.workloads.values().filter_map(|r| match r {
            Resolution::Pod(p) => Some(p),
            _ => None,
        })
    }

    /// Items of kinds this resolver does not use, counted by kind.
    pub fn ignored_kinds(&self) -> &BTreeMap<String, usize> {
        &self.ignored
    }

    /// Offline, per record: an endpoint known only by its address becomes the pod that
    /// held the address at `time`, so that an aggregated edge never mixes two holders.
    pub fn pin(&self, endpoint: &mut Endpoint, time: Option<Timestamp>) {
        let EndpointId::External(ip) = endpoint.id else {
            return;
        };
        if let Some(Ok(Slot::Pod(i))) = self.holder(&ip, Seen::at(time)) {
            let pod = self.pod(i);
            endpoint.id = EndpointId::Pod {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
            };
        }
    }

    /// The entry an index points at (indexes point at held entries only).
    fn pod(&self, i: usize) -> &PodEntry {
        index::held(&self.pods, i)
    }

    fn entries(&self) -> impl Iterator<Item = &PodEntry> {
        self.pods.iter().flatten()
    }

    fn slot(&self, slot: Slot) -> Cow<'_, Resolution> {
        match slot {
            Slot::Pod(i) => Cow::Borrowed(&self.pod(i).resolution),
            Slot::Ambiguous => Cow::Owned(Resolution::Unresolved(Unresolved::Ambiguous)),
        }
    }

    /// The pod named `name` in `namespace` while `seen`: of several pods with the name,
    /// the one alive then, else the newest.
    fn named(&self, namespace: &str, name: &str, seen: Seen) -> Option<usize> {
        let same = self.by_name.get(namespace)?.get(name)?;
        let newest = *same.last()?;
        let Some(window) = seen.window() else {
            return Some(newest);
        };
        let alive = same
            .iter()
            .rev()
            .find(|&&i| self.pod(i).life.overlaps(window));
        Some(alive.copied().unwrap_or(newest))
    }

    fn workload(
        &self,
        endpoint: &Endpoint,
        w: &WorkloadRef,
        seen: Seen,
    ) -> Option<Cow<'_, Resolution>> {
        if w.kind == WorkloadKind::Pod {
            return self
                .named(&w.namespace, &w.name, seen)
                .map(|i| self.slot(Slot::Pod(i)));
        }
        let resolution = self.workloads.get(w)?;
        // Prefer the actual pod behind the address, when it belongs to the same owner.
        if let (Resolution::Pod(template), Some(Ok(Slot::Pod(i)))) = (
            resolution,
            endpoint.ip.and_then(|ip| self.holder(&ip, seen)),
        ) && let Resolution::Pod(pod) = &*self.pod(i).resolution
            && pod.owner.is_some()
            && pod.owner == template.owner
        {
            return Some(Cow::Borrowed(&self.pod(i).resolution));
        }
        Some(Cow::Borrowed(resolution))
    }
}

impl Resolver for ClusterSnapshot {
    fn resolve_at(&self, endpoint: &Endpoint, seen: Seen) -> Resolution {
        self.resolve_shared(endpoint, seen).into_owned()
    }

    fn resolve_shared(&self, endpoint: &Endpoint, seen: Seen) -> Cow<'_, Resolution> {
        match &endpoint.id {
            EndpointId::Reserved(r) => Cow::Owned(Resolution::Reserved(*r)),
            EndpointId::External(ip) => match self.holder(ip, seen) {
                None => Cow::Owned(Resolution::External(*ip)),
                Some(Ok(slot)) => self.slot(slot),
                Some(Err(why)) => Cow::Owned(Resolution::Unresolved(why)),
            },
            EndpointId::Workload(w) => self
                .workload(endpoint, w, seen)
                .unwrap_or(Cow::Owned(Resolution::Unresolved(Unresolved::NotFound))),
            EndpointId::Pod { namespace, name } => match self.named(namespace, name, seen) {
                Some(i) => self.slot(Slot::Pod(i)),
                None => Cow::Owned(self.unlisted_pod(endpoint, namespace, name)),
            },
            EndpointId::PodGroup { namespace, prefix } => {
                match self.groups.get(namespace).and_then(|m| m.get(prefix)) {
                    Some(group) => self.slot(group.slot),
                    None => Cow::Owned(self.unlisted_group(endpoint, namespace, prefix)),
                }
            }
        }
    }
}

#[cfg(test)]
mod changes_tests;
#[cfg(test)]
mod churn_tests;
#[cfg(test)]
mod tests;
