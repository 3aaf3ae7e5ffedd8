//! From `kubectl get ... -A -o yaml` text (or a `kubectl get -w -o json` stream) to typed
//! objects: documents are read as generic values, `List`s are flattened, watch events
//! unwrapped, each item is dispatched on its `kind` and decoded into its k8s-openapi type.
//! Unknown kinds are counted, not rejected.
//!
//! Several inputs (snapshots taken at different times, watch streams) go into one
//! [`Objects`]: an object seen more than once keeps its latest observation (by
//! `resourceVersion` when both carry one, else input order), and a pod keeps every
//! address it was seen with. Pods are told apart by uid, so a StatefulSet pod recreated
//! under the same name is a second pod.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{ItemRef, Location, SnapshotError};
use ne_flow::flow::{WorkloadKind, WorkloadRef};

/// `(namespace, name)`.
pub(super) type NsName = (String, String);

/// A pod with its identity and its parsed addresses.
#[derive(Debug)]
pub(super) struct PodObject {
    pub namespace: String,
    pub name: String,
    pub pod: Arc<Pod>,
    /// `status.podIPs` and `status.podIP` of every observation, deduplicated.
    pub ips: Vec<IpAddr>,
    /// A watch stream reported its deletion.
    pub deleted: bool,
    /// Live: addresses in its status that do not parse, left out of `ips`.
    pub bad_ips: usize,
}

impl PodObject {
    /// Whether two observations of one namespace and name are of one pod: by uid when both
    /// carry one; when a trimmed input has none, by creation time (a StatefulSet pod
    /// recreated under its name is another pod), else they are taken as one.
    fn same_pod(&self, other: &PodObject) -> bool {
        let (a, b) = (&self.pod.metadata, &other.pod.metadata);
        match (uid(a), uid(b)) {
            (Some(x), Some(y)) => x == y,
            _ => match (&a.creation_timestamp, &b.creation_timestamp) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            },
        }
    }
}

fn uid(meta: &ObjectMeta) -> Option<&str> {
    meta.uid.as_deref().filter(|u| !u.is_empty())
}

/// Every object of a snapshot, by kind. Objects are shared (`Arc`) with whoever handed them
/// in: the leader's caches hold the same copies.
#[derive(Debug, Default)]
pub(super) struct Objects {
    /// Namespace name → its labels.
    pub namespaces: HashMap<String, BTreeMap<String, String>>,
    pub pods: Vec<PodObject>,
    /// Where the pods of each namespace and name are in `pods`.
    pod_index: HashMap<NsName, Vec<usize>>,
    pub replicasets: HashMap<NsName, Arc<ReplicaSet>>,
    pub deployments: HashMap<NsName, Arc<Deployment>>,
    pub statefulsets: HashMap<NsName, Arc<StatefulSet>>,
    pub daemonsets: HashMap<NsName, Arc<DaemonSet>>,
    pub jobs: HashMap<NsName, Arc<Job>>,
    pub cronjobs: HashMap<NsName, Arc<CronJob>>,
    /// Items of other kinds, counted by kind.
    pub ignored: BTreeMap<String, usize>,
}

/// Parser limits scaled to the input: a cluster dump easily exceeds the default node
/// budget (meant for config files), and every limit stays proportional to the input size.
fn options(input_len: usize) -> serde_saphyr::Options {
    let defaults = serde_saphyr::Budget::default();
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: defaults.max_events.max(input_len),
            max_nodes: defaults.max_nodes.max(input_len),
            max_documents: defaults.max_documents.max(input_len / 8),
            max_total_scalar_bytes: defaults.max_total_scalar_bytes.max(input_len),
        },
    }
}

/// The documents of one input, as generic values.
fn documents(text: &str) -> Result<Vec<Value>, SnapshotError> {
    if text.trim_start().starts_with('{') {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .collect::<Result<_, _>>()
            .map_err(SnapshotError::Json);
    }
    serde_saphyr::from_multiple_with_options(text, options(text.len()))
        .map_err(|e| SnapshotError::Yaml(Box::new(e)))
}

/// A watch event (`{"type": ..., "object": {...}}`): its type and object.
fn watch_event(map: &mut Map<String, Value>) -> Option<(String, Value)> {
    if map.contains_key("kind") || !map.get("object").is_some_and(Value::is_object) {
        return None;
    }
    let kind = map.get("type")?.as_str()?.to_owned();
    Some((kind, map.remove("object")?))
}

impl Objects {
    /// Adds every document of one more input: YAML (objects or `List`s of objects, one or
    /// more documents) or a stream of JSON values (`kubectl get -w -o json`, with or
    /// without `--output-watch-events`).
    pub(super) fn parse(&mut self, text: &str) -> Result<(), SnapshotError> {
        for (i, doc) in documents(text)?.into_iter().enumerate() {
            let location = Location {
                document: i + 1,
                index: None,
            };
            let Value::Object(mut map) = doc else {
                return Err(SnapshotError::NotAnObject { location });
            };
            let mut deleted = false;
            if let Some((event, object)) = watch_event(&mut map) {
                match event.as_str() {
                    "ADDED" | "MODIFIED" => {}
                    "DELETED" => deleted = true,
                    // Bookmarks and errors carry no object state.
                    _ => {
                        *self
                            .ignored
                            .entry(format!("watch event {event}"))
                            .or_default() += 1;
                        continue;
                    }
                }
                let Value::Object(object) = object else {
                    return Err(SnapshotError::NotAnObject { location });
                };
                map = object;
            }
            let kind = map
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            match map.remove("items") {
                Some(items) if kind.ends_with("List") => {
                    let Value::Array(items) = items else {
                        return Err(SnapshotError::NotAnObject { location });
                    };
                    // A typed list from the API (`PodList`) leaves `kind` out of its items.
                    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
                    for (index, item) in items.into_iter().enumerate() {
                        let location = Location {
                            index: Some(index),
                            ..location
                        };
                        self.add(item, location, item_kind, false)?;
                    }
                }
                other => {
                    if let Some(items) = other {
                        map.insert("items".to_owned(), items);
                    }
                    self.add(Value::Object(map), location, None, deleted)?;
                }
            }
        }
        Ok(())
    }
}

fn metadata_str(map: &Map<String, Value>, field: &str) -> Option<String> {
    map.get("metadata")?.get(field)?.as_str().map(str::to_owned)
}

/// Decodes `value` as `T`, naming the item on failure.
fn decode<T: DeserializeOwned>(value: Value, item: &ItemRef) -> Result<T, SnapshotError> {
    serde_json::from_value(value).map_err(|source| SnapshotError::Decode {
        item: Box::new(item.clone()),
        source,
    })
}

fn invalid(item: &ItemRef, problem: impl Into<String>) -> SnapshotError {
    SnapshotError::Invalid {
        item: Box::new(item.clone()),
        problem: problem.into(),
    }
}

/// The namespace and name of a namespaced object; both are required.
fn ns_name(item: &ItemRef) -> Result<NsName, SnapshotError> {
    match (&item.namespace, &item.name) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => {
            Ok((ns.clone(), name.clone()))
        }
        (_, Some(name)) if !name.is_empty() => Err(invalid(item, "metadata.namespace is missing")),
        _ => Err(invalid(item, "metadata.name is missing")),
    }
}

impl Objects {
    fn add(
        &mut self,
        value: Value,
        location: Location,
        default_kind: Option<&str>,
        deleted: bool,
    ) -> Result<(), SnapshotError> {
        let Value::Object(map) = &value else {
            return Err(SnapshotError::NotAnObject { location });
        };
        let kind = match map.get("kind").and_then(Value::as_str).or(default_kind) {
            Some(kind) if !kind.is_empty() => kind.to_owned(),
            _ => return Err(SnapshotError::MissingKind { location }),
        };
        let item = ItemRef {
            namespace: metadata_str(map, "namespace"),
            name: metadata_str(map, "name"),
            kind,
            location,
        };
        match item.kind.as_str() {
            "Namespace" => {
                let ns: Namespace = decode(value, &item)?;
                let name = ns.metadata.name.filter(|n| !n.is_empty());
                let name = name.ok_or_else(|| invalid(&item, "metadata.name is missing"))?;
                self.namespaces
                    .insert(name, ns.metadata.labels.unwrap_or_default());
            }
            "Pod" => {
                let (namespace, name) = ns_name(&item)?;
                let pod: Pod = decode(value, &item)?;
                let ips = pod_ips(&pod, &item)?;
                self.add_pod(PodObject {
                    namespace,
                    name,
                    pod: Arc::new(pod),
                    ips,
                    deleted,
                    bad_ips: 0,
                });
            }
            "ReplicaSet" => {
                latest(
                    &mut self.replicasets,
                    ns_name(&item)?,
                    decode(value, &item)?,
                );
            }
            "Deployment" => {
                latest(
                    &mut self.deployments,
                    ns_name(&item)?,
                    decode(value, &item)?,
                );
            }
            "StatefulSet" => {
                latest(
                    &mut self.statefulsets,
                    ns_name(&item)?,
                    decode(value, &item)?,
                );
            }
            "DaemonSet" => {
                latest(&mut self.daemonsets, ns_name(&item)?, decode(value, &item)?);
            }
            "Job" => latest(&mut self.jobs, ns_name(&item)?, decode(value, &item)?),
            "CronJob" => latest(&mut self.cronjobs, ns_name(&item)?, decode(value, &item)?),
            _ => *self.ignored.entry(item.kind).or_default() += 1,
        }
        Ok(())
    }
}

impl Objects {
    /// The pods, out of these objects (a snapshot keeps them in its entries).
    pub(super) fn take_pods(&mut self) -> Vec<PodObject> {
        self.pod_index.clear();
        std::mem::take(&mut self.pods)
    }

    /// Every workload object listed, in a stable order (kind, namespace, name).
    pub(super) fn workload_refs(&self) -> Vec<WorkloadRef> {
        fn of<T>(
            kind: WorkloadKind,
            map: &HashMap<NsName, T>,
        ) -> impl Iterator<Item = WorkloadRef> {
            map.keys().map(move |(namespace, name)| WorkloadRef {
                namespace: namespace.as_str().into(),
                kind,
                name: name.as_str().into(),
            })
        }
        let mut refs: Vec<WorkloadRef> = of(WorkloadKind::Deployment, &self.deployments)
            .chain(of(WorkloadKind::StatefulSet, &self.statefulsets))
            .chain(of(WorkloadKind::DaemonSet, &self.daemonsets))
            .chain(of(WorkloadKind::ReplicaSet, &self.replicasets))
            .chain(of(WorkloadKind::Job, &self.jobs))
            .chain(of(WorkloadKind::CronJob, &self.cronjobs))
            .collect();
        refs.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
        refs
    }

    /// Adds one observation of a pod: the first of its key, or a later one that replaces
    /// an older (keeping the addresses of both, and the deletion once reported).
    fn add_pod(&mut self, mut pod: PodObject) {
        let same = self
            .pod_index
            .entry((pod.namespace.clone(), pod.name.clone()))
            .or_default();
        let Some(&i) = same.iter().find(|&&i| self.pods[i].same_pod(&pod)) else {
            same.push(self.pods.len());
            self.pods.push(pod);
            return;
        };
        let known = &mut self.pods[i];
        for ip in std::mem::take(&mut known.ips) {
            if !pod.ips.contains(&ip) {
                pod.ips.push(ip);
            }
        }
        pod.deleted |= known.deleted;
        if is_newer(&pod.pod.metadata, &known.pod.metadata) {
            if uid(&pod.pod.metadata).is_none() {
                Arc::make_mut(&mut pod.pod).metadata.uid =
                    Arc::make_mut(&mut known.pod).metadata.uid.take();
            }
            *known = pod;
        } else {
            if uid(&known.pod.metadata).is_none() {
                Arc::make_mut(&mut known.pod).metadata.uid = pod.pod.metadata.uid.clone();
            }
            known.ips = pod.ips;
            known.deleted = pod.deleted;
        }
    }
}

/// Whether `new` is a later observation than `old`: by `resourceVersion` when both are
/// numbers (etcd's), else by input order (later wins).
fn is_newer(new: &ObjectMeta, old: &ObjectMeta) -> bool {
    let version = |m: &ObjectMeta| m.resource_version.as_deref()?.parse::<u64>().ok();
    match (version(new), version(old)) {
        (Some(n), Some(o)) => n >= o,
        _ => true,
    }
}

/// Keeps the latest observation of a workload object.
fn latest<T: Metadata<Ty = ObjectMeta>>(map: &mut HashMap<NsName, Arc<T>>, key: NsName, value: T) {
    match map.get(&key) {
        Some(known) if !is_newer(value.metadata(), known.metadata()) => {}
        _ => {
            map.insert(key, Arc::new(value));
        }
    }
}

/// The pod's addresses (`status.podIPs`, then `status.podIP`), each parsed.
fn pod_ips(pod: &Pod, item: &ItemRef) -> Result<Vec<IpAddr>, SnapshotError> {
    let Some(status) = &pod.status else {
        return Ok(Vec::new());
    };
    let listed = status.pod_ips.iter().flatten().map(|p| p.ip.as_str());
    let mut ips = Vec::new();
    for text in listed
        .chain(status.pod_ip.as_deref())
        .filter(|t| !t.is_empty())
    {
        let ip: IpAddr = text
            .parse()
            .map_err(|_| invalid(item, format!("status pod IP {text:?} is not an address")))?;
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    Ok(ips)
}

/// The namespace and name of a live object, when it has both.
pub(super) fn live_key(meta: &ObjectMeta) -> Option<NsName> {
    match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => {
            Some((ns.to_owned(), name.to_owned()))
        }
        _ => None,
    }
}

impl PodObject {
    /// A live pod; addresses that do not parse are left out and counted.
    pub(super) fn live(namespace: String, name: String, pod: Arc<Pod>) -> Self {
        let mut ips = Vec::new();
        let mut bad_ips = 0;
        let status = pod.status.as_ref();
        let listed = status
            .and_then(|s| s.pod_ips.as_ref())
            .into_iter()
            .flatten()
            .map(|p| p.ip.as_str());
        for text in listed
            .chain(status.and_then(|s| s.pod_ip.as_deref()))
            .filter(|t| !t.is_empty())
        {
            match text.parse::<IpAddr>() {
                Ok(ip) if !ips.contains(&ip) => ips.push(ip),
                Ok(_) => {}
                Err(_) => bad_ips += 1,
            }
        }
        PodObject {
            namespace,
            name,
            pod,
            ips,
            deleted: false,
            bad_ips,
        }
    }
}

/// Typed live objects into [`Objects`]: items without namespace or name are skipped and
/// counted (pod addresses that do not parse are counted on each pod).
pub(super) fn from_objects(c: super::ClusterObjects) -> (Objects, usize) {
    let mut objects = Objects::default();
    let mut skipped = 0;
    let mut key = |meta: &ObjectMeta| {
        let key = live_key(meta);
        skipped += usize::from(key.is_none());
        key
    };
    fn insert<T>(map: &mut HashMap<NsName, T>, key: Option<NsName>, value: T) {
        if let Some(key) = key {
            map.insert(key, value);
        }
    }
    for rs in c.replicasets {
        insert(&mut objects.replicasets, key(&rs.metadata), rs);
    }
    for d in c.deployments {
        insert(&mut objects.deployments, key(&d.metadata), d);
    }
    for s in c.statefulsets {
        insert(&mut objects.statefulsets, key(&s.metadata), s);
    }
    for d in c.daemonsets {
        insert(&mut objects.daemonsets, key(&d.metadata), d);
    }
    for j in c.jobs {
        insert(&mut objects.jobs, key(&j.metadata), j);
    }
    for j in c.cronjobs {
        insert(&mut objects.cronjobs, key(&j.metadata), j);
    }
    for pod in c.pods {
        if let Some((namespace, name)) = key(&pod.metadata) {
            objects.add_pod(PodObject::live(namespace, name, pod));
        }
    }
    for ns in c.namespaces {
        match ns.metadata.name.as_deref().filter(|n| !n.is_empty()) {
            Some(name) => {
                objects.namespaces.insert(
                    name.to_owned(),
                    ns.metadata.labels.clone().unwrap_or_default(),
                );
            }
            None => skipped += 1,
        }
    }
    (objects, skipped)
}
