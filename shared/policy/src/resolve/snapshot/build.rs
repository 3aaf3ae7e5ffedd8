//! From typed objects to the resolution side tables: owner chains are followed once per
//! object here, so that [`super::ClusterSnapshot::resolve`] is a lookup and a clone.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};

use super::parse::{Objects, PodObject};
use super::{ClusterSnapshot, GonePod, Life, PodEntry, Slot};
use crate::resolve::{
    NAMESPACE_NAME_LABEL, NamedPort, Resolution, ResolvedPod, Unresolved, non_empty_selector,
    selector_for, template_labels,
};
use ne_flow::flow::{Labels, Protocol, Str, WorkloadKind, WorkloadRef, labels};

/// The workload that owns an object and the selector for its pods; `Ok(None)` when the
/// controller is of a kind this resolver does not follow (a static pod's Node, an Argo
/// Rollout, ...).
type Owner = Result<Option<(WorkloadRef, Option<LabelSelector>)>, Unresolved>;

/// The controlling owner reference (at most one per object).
fn controller(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
}

fn kind_of(reference: &OwnerReference) -> Option<WorkloadKind> {
    match (reference.api_version.as_str(), reference.kind.as_str()) {
        ("apps/v1", "Deployment") => Some(WorkloadKind::Deployment),
        ("apps/v1", "ReplicaSet") => Some(WorkloadKind::ReplicaSet),
        ("apps/v1", "StatefulSet") => Some(WorkloadKind::StatefulSet),
        ("apps/v1", "DaemonSet") => Some(WorkloadKind::DaemonSet),
        ("batch/v1", "Job") => Some(WorkloadKind::Job),
        ("batch/v1", "CronJob") => Some(WorkloadKind::CronJob),
        _ => None,
    }
}

fn template_selector(template: Option<&PodTemplateSpec>) -> Option<LabelSelector> {
    let pod_labels = labels(
        template?
            .metadata
            .as_ref()?
            .labels
            .clone()
            .unwrap_or_default(),
    );
    selector_for(&template_labels(&pod_labels))
}

struct Builder<'o> {
    objects: &'o Objects,
    namespace_labels: HashMap<String, Labels>,
}

impl Builder<'_> {
    /// The namespace's labels plus `kubernetes.io/metadata.name`, shared per namespace.
    fn namespace_labels(&mut self, namespace: &str) -> Labels {
        if let Some(found) = self.namespace_labels.get(namespace) {
            return found.clone();
        }
        let own = self
            .objects
            .namespaces
            .get(namespace)
            .cloned()
            .unwrap_or_default();
        let built = labels(
            own.into_iter()
                .chain([(NAMESPACE_NAME_LABEL.to_owned(), namespace.to_owned())]),
        );
        self.namespace_labels
            .insert(namespace.to_owned(), built.clone());
        built
    }

    /// Follows a workload object up its controller chain (ReplicaSet → Deployment,
    /// Job → CronJob) to the owner and its selector.
    fn owner(&self, namespace: &str, kind: WorkloadKind, name: &str) -> Owner {
        let o = self.objects;
        let key = (namespace.to_owned(), name.to_owned());
        let found = |sel: Option<LabelSelector>| {
            let owner = WorkloadRef {
                namespace: namespace.into(),
                kind,
                name: name.into(),
            };
            Ok(Some((owner, sel)))
        };
        let above = |meta: &ObjectMeta, parent: WorkloadKind| match controller(meta) {
            None => None,
            Some(r) if kind_of(r) == Some(parent) => Some(self.owner(namespace, parent, &r.name)),
            Some(_) => Some(Ok(None)),
        };
        match kind {
            WorkloadKind::Deployment => {
                let d = o.deployments.get(&key).ok_or(Unresolved::NotFound)?;
                found(
                    d.spec
                        .as_ref()
                        .and_then(|s| non_empty_selector(&s.selector)),
                )
            }
            WorkloadKind::StatefulSet => {
                let s = o.statefulsets.get(&key).ok_or(Unresolved::NotFound)?;
                found(
                    s.spec
                        .as_ref()
                        .and_then(|s| non_empty_selector(&s.selector)),
                )
            }
            WorkloadKind::DaemonSet => {
                let d = o.daemonsets.get(&key).ok_or(Unresolved::NotFound)?;
                found(
                    d.spec
                        .as_ref()
                        .and_then(|s| non_empty_selector(&s.selector)),
                )
            }
            WorkloadKind::ReplicaSet => {
                let rs = o.replicasets.get(&key).ok_or(Unresolved::NotFound)?;
                above(&rs.metadata, WorkloadKind::Deployment).unwrap_or_else(|| {
                    found(
                        rs.spec
                            .as_ref()
                            .and_then(|s| non_empty_selector(&s.selector)),
                    )
                })
            }
            WorkloadKind::Job => {
                let job = o.jobs.get(&key).ok_or(Unresolved::NotFound)?;
                above(&job.metadata, WorkloadKind::CronJob).unwrap_or_else(|| {
                    found(template_selector(job.spec.as_ref().map(|s| &s.template)))
                })
            }
            WorkloadKind::CronJob => {
                let cj = o.cronjobs.get(&key).ok_or(Unresolved::NotFound)?;
                let template = cj
                    .spec
                    .as_ref()
                    .and_then(|s| s.job_template.spec.as_ref())
                    .map(|s| &s.template);
                found(template_selector(template))
            }
            WorkloadKind::Pod => Err(Unresolved::NotFound),
        }
    }

    /// A resolved endpoint from an owner and the pod (or pod template) behind it.
    fn resolved(
        &mut self,
        namespace: &str,
        owner: Owner,
        pod_labels: Labels,
        spec: Option<&PodSpec>,
    ) -> Resolution {
        let (owner, selector) = match owner {
            Ok(Some((owner, selector))) => (Some(owner), selector),
            Ok(None) => (None, selector_for(&template_labels(&pod_labels))),
            Err(why) => return Resolution::Unresolved(why),
        };
        Resolution::Pod(ResolvedPod {
            namespace: namespace.into(),
            owner,
            selector,
            labels: pod_labels,
            namespace_labels: self.namespace_labels(namespace),
            named_ports: spec.map(named_ports).unwrap_or_default(),
            service_account: spec.map(service_account),
        })
    }

    fn pod(&mut self, p: &PodObject) -> Resolution {
        let pod_labels = labels(p.pod.metadata.labels.clone().unwrap_or_default());
        let owner = match controller(&p.pod.metadata) {
            None => {
                let owner = WorkloadRef {
                    namespace: p.namespace.as_str().into(),
                    kind: WorkloadKind::Pod,
                    name: p.name.as_str().into(),
                };
                Ok(Some((owner, selector_for(&template_labels(&pod_labels)))))
            }
            Some(r) => match kind_of(r) {
                Some(kind) => self.owner(&p.namespace, kind, &r.name),
                None => Ok(None),
            },
        };
        self.resolved(&p.namespace, owner, pod_labels, p.pod.spec.as_ref())
    }

    /// The resolution of a workload id: the owner chain from the object, labels and ports
    /// from its pod template.
    fn workload(
        &mut self,
        namespace: &str,
        kind: WorkloadKind,
        name: &str,
        template: Option<&PodTemplateSpec>,
    ) -> Resolution {
        let owner = self.owner(namespace, kind, name);
        let pod_labels = labels(
            template
                .and_then(|t| t.metadata.as_ref()?.labels.clone())
                .unwrap_or_default(),
        );
        self.resolved(
            namespace,
            owner,
            pod_labels,
            template.and_then(|t| t.spec.as_ref()),
        )
    }
}

fn named_ports(spec: &PodSpec) -> Vec<NamedPort> {
    let ports = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten());
    ports
        .filter_map(|p| {
            let name = p.name.as_deref().filter(|n| !n.is_empty())?;
            let port = u16::try_from(p.container_port).ok().filter(|&n| n != 0)?;
            let protocol = Protocol::parse(p.protocol.as_deref().unwrap_or("TCP"));
            Some(NamedPort {
                name: name.into(),
                protocol,
                port,
            })
        })
        .collect()
}

fn service_account(spec: &PodSpec) -> Str {
    let named = spec
        .service_account_name
        .as_deref()
        .or(spec.service_account.as_deref());
    named.filter(|n| !n.is_empty()).unwrap_or("default").into()
}

/// Nanoseconds since the epoch of a Kubernetes time.
fn nanos(t: &Time) -> i64 {
    i64::try_from(t.0.as_nanosecond()).unwrap_or(i64::MAX)
}

/// When the pod existed, and whether it holds its addresses: not on the host network
/// (its address is the node's), and not finished at a time its status does not give (its
/// address may already belong to a new pod).
fn life(p: &PodObject) -> (Life, bool) {
    let pod = &p.pod;
    let status = pod.status.as_ref();
    let start = status
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(nanos);
    let finished = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let finished_at = finished
        .then(|| {
            let containers = status?.container_statuses.iter().flatten();
            containers
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                .map(nanos)
                .max()
        })
        .flatten();
    let deleted = pod.metadata.deletion_timestamp.as_ref().map(nanos);
    let end = match (finished_at, deleted) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    let addressable = !host_network && (!finished || finished_at.is_some());
    (Life { start, end }, addressable)
}

/// Builds the side tables from the parsed objects and the pods known gone.
pub(super) fn build<'g>(
    mut objects: Objects,
    gone: impl IntoIterator<Item = &'g GonePod>,
) -> ClusterSnapshot {
    // Sorted, so that the representative of a pod group is the same on every run.
    objects
        .pods
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut b = Builder {
        objects: &objects,
        namespace_labels: HashMap::new(),
    };
    let mut snapshot = ClusterSnapshot::default();

    for p in &b.objects.pods {
        let resolution = b.pod(p);
        let owner = match &resolution {
            Resolution::Pod(r) => Ok(r.owner.clone()),
            Resolution::Unresolved(why) => Err(*why),
            Resolution::External(_) | Resolution::Reserved(_) => Err(Unresolved::NotFound),
        };
        let (life, addressable) = life(p);
        let meta = &p.pod.metadata;
        snapshot.pods.push(PodEntry {
            namespace: p.namespace.as_str().into(),
            name: p.name.as_str().into(),
            uid: meta.uid.as_deref().filter(|u| !u.is_empty()).map(Str::from),
            owner,
            resolution: resolution.into(),
            ips: p.ips.clone(),
            life,
            generate_name: meta
                .generate_name
                .as_deref()
                .filter(|g| !g.is_empty())
                .map(Str::from),
            addressable,
            gone: p.deleted,
            older: None,
        });
    }
    snapshot.pods.extend(gone.into_iter().map(|g| g.0.clone()));
    snapshot.index_pods();
    snapshot.index_addresses();

    let o = b.objects;
    let mut workloads: Vec<(WorkloadKind, &(String, String), Option<&PodTemplateSpec>)> =
        Vec::new();
    workloads.extend(o.deployments.iter().map(|(k, d)| {
        (
            WorkloadKind::Deployment,
            k,
            d.spec.as_ref().map(|s| &s.template),
        )
    }));
    workloads.extend(o.statefulsets.iter().map(|(k, s)| {
        (
            WorkloadKind::StatefulSet,
            k,
            s.spec.as_ref().map(|s| &s.template),
        )
    }));
    workloads.extend(o.daemonsets.iter().map(|(k, d)| {
        (
            WorkloadKind::DaemonSet,
            k,
            d.spec.as_ref().map(|s| &s.template),
        )
    }));
    workloads.extend(o.replicasets.iter().map(|(k, r)| {
        (
            WorkloadKind::ReplicaSet,
            k,
            r.spec.as_ref().and_then(|s| s.template.as_ref()),
        )
    }));
    workloads.extend(
        o.jobs
            .iter()
            .map(|(k, j)| (WorkloadKind::Job, k, j.spec.as_ref().map(|s| &s.template))),
    );
    workloads.extend(o.cronjobs.iter().map(|(k, c)| {
        let template = c
            .spec
            .as_ref()
            .and_then(|s| s.job_template.spec.as_ref())
            .map(|s| &s.template);
        (WorkloadKind::CronJob, k, template)
    }));
    for (kind, (namespace, name), template) in workloads {
        let resolution = b.workload(namespace, kind, name, template);
        let id = WorkloadRef {
            namespace: namespace.as_str().into(),
            kind,
            name: name.as_str().into(),
        };
        snapshot.workloads.insert(id, resolution);
    }

    for ((namespace, name), rs) in &o.replicasets {
        let hash = rs
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("pod-template-hash"));
        if let Some(hash) = hash {
            snapshot
                .replicasets_by_hash
                .entry((namespace.as_str().into(), hash.as_str().into()))
                .or_default()
                .push(name.as_str().into());
        }
    }

    for namespace in o.namespaces.keys() {
        let labels = b.namespace_labels(namespace);
        snapshot
            .namespace_labels
            .insert(namespace.as_str().into(), labels);
    }
    snapshot.namespaces = o.namespaces.len();
    snapshot.ignored = objects.ignored;
    snapshot
}

impl ClusterSnapshot {
    /// Indexes the pods by name (newest first, older ones of the same name chained) and by
    /// `generateName`.
    pub(super) fn index_pods(&mut self) {
        self.by_name.clear();
        self.groups.clear();
        let mut order: Vec<usize> = (0..self.pods.len()).collect();
        order.sort_by_key(|&i| self.pods[i].life.start.unwrap_or(i64::MIN));
        for i in order {
            let pod = &self.pods[i];
            let (namespace, name) = (pod.namespace.clone(), pod.name.clone());
            let older = self
                .by_name
                .entry(namespace.clone())
                .or_default()
                .insert(name, i);
            self.pods[i].older = older;
        }
        for i in 0..self.pods.len() {
            let pod = &self.pods[i];
            let Some(prefix) = pod.generate_name.clone() else {
                continue;
            };
            let owner = &pod.owner;
            let groups = self.groups.entry(pod.namespace.clone()).or_default();
            match groups.get(&prefix) {
                None => {
                    groups.insert(prefix, Slot::Pod(i));
                }
                Some(Slot::Pod(first)) if self.pods[*first].owner != *owner => {
                    groups.insert(prefix, Slot::Ambiguous);
                }
                Some(_) => {}
            }
        }
    }
}
