//! From `kubectl get ... -A -o yaml` text to typed objects: documents are read as generic
//! values, `List`s are flattened, each item is dispatched on its `kind` and decoded into
//! its k8s-openapi type. Unknown kinds are counted, not rejected.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::{ItemRef, Location, SnapshotError};

/// `(namespace, name)`.
pub(super) type NsName = (String, String);

/// A pod with its identity and its parsed addresses.
#[derive(Debug)]
pub(super) struct PodObject {
    pub namespace: String,
    pub name: String,
    pub pod: Pod,
    /// `status.podIPs` and `status.podIP`, deduplicated.
    pub ips: Vec<IpAddr>,
}

/// Every object of a snapshot, by kind.
#[derive(Debug, Default)]
pub(super) struct Objects {
    /// Namespace name → its labels.
    pub namespaces: HashMap<String, BTreeMap<String, String>>,
    pub pods: Vec<PodObject>,
    pub replicasets: HashMap<NsName, ReplicaSet>,
    pub deployments: HashMap<NsName, Deployment>,
    pub statefulsets: HashMap<NsName, StatefulSet>,
    pub daemonsets: HashMap<NsName, DaemonSet>,
    pub jobs: HashMap<NsName, Job>,
    pub cronjobs: HashMap<NsName, CronJob>,
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

/// Parses every document of `yaml` (objects or `List`s of objects).
pub(super) fn parse(yaml: &str) -> Result<Objects, SnapshotError> {
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(yaml, options(yaml.len()))
        .map_err(|e| SnapshotError::Yaml(Box::new(e)))?;
    let mut objects = Objects::default();
    for (i, doc) in docs.into_iter().enumerate() {
        let document = i + 1;
        let Value::Object(mut map) = doc else {
            return Err(SnapshotError::NotAnObject {
                location: Location {
                    document,
                    index: None,
                },
            });
        };
        let kind = map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match map.remove("items") {
            Some(items) if kind.ends_with("List") => {
                let Value::Array(items) = items else {
                    return Err(SnapshotError::NotAnObject {
                        location: Location {
                            document,
                            index: None,
                        },
                    });
                };
                // A typed list from the API (`PodList`) leaves `kind` out of its items.
                let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
                for (index, item) in items.into_iter().enumerate() {
                    objects.add(
                        item,
                        Location {
                            document,
                            index: Some(index),
                        },
                        item_kind,
                    )?;
                }
            }
            other => {
                if let Some(items) = other {
                    map.insert("items".to_owned(), items);
                }
                objects.add(
                    Value::Object(map),
                    Location {
                        document,
                        index: None,
                    },
                    None,
                )?;
            }
        }
    }
    Ok(objects)
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
                self.pods.push(PodObject {
                    namespace,
                    name,
                    pod,
                    ips,
                });
            }
            "ReplicaSet" => {
                self.replicasets
                    .insert(ns_name(&item)?, decode(value, &item)?);
            }
            "Deployment" => {
                self.deployments
                    .insert(ns_name(&item)?, decode(value, &item)?);
            }
            "StatefulSet" => {
                self.statefulsets
                    .insert(ns_name(&item)?, decode(value, &item)?);
            }
            "DaemonSet" => {
                self.daemonsets
                    .insert(ns_name(&item)?, decode(value, &item)?);
            }
            "Job" => {
                self.jobs.insert(ns_name(&item)?, decode(value, &item)?);
            }
            "CronJob" => {
                self.cronjobs.insert(ns_name(&item)?, decode(value, &item)?);
            }
            _ => *self.ignored.entry(item.kind).or_default() += 1,
        }
        Ok(())
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

/// Typed live objects into [`Objects`]: items without namespace or name are skipped, and so
/// are pod addresses that do not parse; both are counted.
pub(super) fn from_objects(c: super::ClusterObjects) -> (Objects, usize) {
    let mut objects = Objects::default();
    let mut skipped = 0;
    let mut key = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| match (
        meta.namespace.as_deref(),
        meta.name.as_deref(),
    ) {
        (Some(ns), Some(name)) if !ns.is_empty() && !name.is_empty() => {
            Some((ns.to_owned(), name.to_owned()))
        }
        _ => {
            skipped += 1;
            None
        }
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
    let mut pods = Vec::with_capacity(c.pods.len());
    for pod in c.pods {
        let Some((namespace, name)) = key(&pod.metadata) else {
            continue;
        };
        pods.push((namespace, name, pod));
    }
    for (namespace, name, pod) in pods {
        let mut ips = Vec::new();
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
                Err(_) => skipped += 1,
            }
        }
        objects.pods.push(PodObject {
            namespace,
            name,
            pod,
            ips,
        });
    }
    for ns in c.namespaces {
        match ns.metadata.name.filter(|n| !n.is_empty()) {
            Some(name) => {
                objects
                    .namespaces
                    .insert(name, ns.metadata.labels.unwrap_or_default());
            }
            None => skipped += 1,
        }
    }
    (objects, skipped)
}
