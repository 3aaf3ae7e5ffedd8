//! From typed objects to the resolution side tables: owner chains are followed once per
//! object here, so that [`super::ClusterSnapshot::resolve`] is a lookup and a clone.

use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};

use super::parse::{NsName, Objects, PodObject};
use super::{ClusterSnapshot, GonePod, Life, PodEntry};
use crate::resolve::{
    NAMESPACE_NAME_LABEL, NamedPort, Resolution, ResolvedPod, Unresolved, non_empty_selector,
    selector_for, template_labels,
};
use ne_flow::flow::{Labels, Protocol, Str, WorkloadKind, WorkloadRef, labels};

/// The workload that owns an object and the selector for its pods; `Ok(None)` when the
/// controller is of a kind this resolver does not follow (a static pod's Node, an Argo
/// Rollout, ...).
pub(super) type Owner = Result<Option<(WorkloadRef, Option<LabelSelector>)>, Unresolved>;

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

/// The workload named by an object's controller reference, when of a kind followed here.
pub(super) fn controller_ref(namespace: &str, meta: &ObjectMeta) -> Option<WorkloadRef> {
    let reference = controller(meta)?;
    Some(WorkloadRef {
        namespace: namespace.into(),
        kind: kind_of(reference)?,
        name: reference.name.as_str().into(),
    })
}

/// The metadata and pod template of a listed workload object.
pub(super) fn workload_object<'o>(
    o: &'o Objects,
    kind: WorkloadKind,
    key: &NsName,
) -> Option<(&'o ObjectMeta, Option<&'o PodTemplateSpec>)> {
    match kind {
        WorkloadKind::Deployment => o
            .deployments
            .get(key)
            .map(|d| (&d.metadata, d.spec.as_ref().map(|s| &s.template))),
        WorkloadKind::StatefulSet => o
            .statefulsets
            .get(key)
            .map(|s| (&s.metadata, s.spec.as_ref().map(|s| &s.template))),
        WorkloadKind::DaemonSet => o
            .daemonsets
            .get(key)
            .map(|d| (&d.metadata, d.spec.as_ref().map(|s| &s.template))),
        WorkloadKind::ReplicaSet => o.replicasets.get(key).map(|r| {
            let template = r.spec.as_ref().and_then(|s| s.template.as_ref());
            (&r.metadata, template)
        }),
        WorkloadKind::Job => o
            .jobs
            .get(key)
            .map(|j| (&j.metadata, j.spec.as_ref().map(|s| &s.template))),
        WorkloadKind::CronJob => o.cronjobs.get(key).map(|c| {
            let template = c
                .spec
                .as_ref()
                .and_then(|s| s.job_template.spec.as_ref())
                .map(|s| &s.template);
            (&c.metadata, template)
        }),
        WorkloadKind::Pod => None,
    }
}

/// Follows a workload object up its controller chain (ReplicaSet → Deployment,
/// Job → CronJob) to the owner and its selector.
pub(super) fn owner(o: &Objects, namespace: &str, kind: WorkloadKind, name: &str) -> Owner {
    let key = (namespace.to_owned(), name.to_owned());
    let found = |sel: Option<LabelSelector>| {
        let owner = WorkloadRef {
            namespace: namespace.into(),
            kind,
            name: name.into(),
        };
        Ok(Some((owner, sel)))
    };
    let selected = |sel: Option<&LabelSelector>| found(sel.and_then(non_empty_selector));
    let above = |meta: &ObjectMeta, parent: WorkloadKind| match controller(meta) {
        None => None,
        Some(r) if kind_of(r) == Some(parent) => Some(owner(o, namespace, parent, &r.name)),
        Some(_) => Some(Ok(None)),
    };
    match kind {
        WorkloadKind::Deployment => {
            let d = o.deployments.get(&key).ok_or(Unresolved::NotFound)?;
            selected(d.spec.as_ref().map(|s| &s.selector))
        }
        WorkloadKind::StatefulSet => {
            let s = o.statefulsets.get(&key).ok_or(Unresolved::NotFound)?;
            selected(s.spec.as_ref().map(|s| &s.selector))
        }
        WorkloadKind::DaemonSet => {
            let d = o.daemonsets.get(&key).ok_or(Unresolved::NotFound)?;
            selected(d.spec.as_ref().map(|s| &s.selector))
        }
        WorkloadKind::ReplicaSet => {
            let rs = o.replicasets.get(&key).ok_or(Unresolved::NotFound)?;
            above(&rs.metadata, WorkloadKind::Deployment)
                .unwrap_or_else(|| selected(rs.spec.as_ref().map(|s| &s.selector)))
        }
        WorkloadKind::Job => {
            let job = o.jobs.get(&key).ok_or(Unresolved::NotFound)?;
            above(&job.metadata, WorkloadKind::CronJob)
                .unwrap_or_else(|| found(template_selector(job.spec.as_ref().map(|s| &s.template))))
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

/// Resolves pods and workloads against the objects, with the namespace labels computed
/// once per namespace.
pub(super) struct Builder<'o> {
    pub objects: &'o Objects,
    pub namespace_labels: &'o mut HashMap<Str, Labels>,
}

impl Builder<'_> {
    /// The namespace's labels plus `kubernetes.io/metadata.name`, shared per namespace.
    pub fn namespace_labels(&mut self, namespace: &str) -> Labels {
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
            .insert(namespace.into(), built.clone());
        built
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

    /// A pod's resolution and its owner as far as grouping goes.
    pub fn pod(
        &mut self,
        namespace: &str,
        name: &str,
        pod: &Pod,
    ) -> (Resolution, Result<Option<WorkloadRef>, Unresolved>) {
        let pod_labels = labels(pod.metadata.labels.clone().unwrap_or_default());
        let owner = match controller(&pod.metadata) {
            None => {
                let owner = WorkloadRef {
                    namespace: namespace.into(),
                    kind: WorkloadKind::Pod,
                    name: name.into(),
                };
                Ok(Some((owner, selector_for(&template_labels(&pod_labels)))))
            }
            Some(r) => match kind_of(r) {
                Some(kind) => owner(self.objects, namespace, kind, &r.name),
                None => Ok(None),
            },
        };
        let resolution = self.resolved(namespace, owner, pod_labels, pod.spec.as_ref());
        let owner = match &resolution {
            Resolution::Pod(r) => Ok(r.owner.clone()),
            Resolution::Unresolved(why) => Err(*why),
            Resolution::External(_) | Resolution::Reserved(_) => Err(Unresolved::NotFound),
        };
        (resolution, owner)
    }

    /// The entry of a pod object.
    pub fn entry(&mut self, p: PodObject) -> PodEntry {
        let (resolution, owner) = self.pod(&p.namespace, &p.name, &p.pod);
        let (life, addressable) = life(&p);
        let meta = &p.pod.metadata;
        let alive = !p.deleted;
        PodEntry {
            namespace: p.namespace.as_str().into(),
            name: p.name.as_str().into(),
            uid: meta.uid.as_deref().filter(|u| !u.is_empty()).map(Str::from),
            owner,
            resolution: resolution.into(),
            ips: p.ips,
            life,
            generate_name: meta
                .generate_name
                .as_deref()
                .filter(|g| !g.is_empty())
                .map(Str::from),
            addressable,
            gone: p.deleted,
            controller: alive.then(|| controller_ref(&p.namespace, meta)).flatten(),
            bad_ips: if alive { p.bad_ips } else { 0 },
            object: alive.then_some(p.pod),
        }
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
        let owner = owner(self.objects, namespace, kind, name);
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
    let mut pods = objects.take_pods();
    // Sorted, so that the pods come out of `endpoints` in the same order on every run.
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let ignored = std::mem::take(&mut objects.ignored);
    let mut snapshot = ClusterSnapshot {
        objects,
        ignored,
        ..ClusterSnapshot::default()
    };
    let workloads = snapshot.objects.workload_refs();
    for w in &workloads {
        snapshot.refresh_workload(w);
        snapshot.file_workload(w, true);
    }
    let namespaces: Vec<String> = snapshot.objects.namespaces.keys().cloned().collect();
    for namespace in namespaces {
        snapshot.refresh_namespace(&namespace);
    }
    let entries: Vec<PodEntry> = {
        let mut b = snapshot.builder();
        pods.into_iter().map(|p| b.entry(p)).collect()
    };
    for entry in entries {
        snapshot.insert(entry);
    }
    for pod in gone {
        snapshot.insert(pod.0.clone());
    }
    snapshot.settle();
    snapshot
}

impl ClusterSnapshot {
    pub(super) fn builder(&mut self) -> Builder<'_> {
        Builder {
            objects: &self.objects,
            namespace_labels: &mut self.label_cache,
        }
    }

    /// The resolution of workload `w` again from its object (gone when it is not listed).
    pub(super) fn refresh_workload(&mut self, w: &WorkloadRef) {
        let key = (w.namespace.to_string(), w.name.to_string());
        let mut b = self.builder();
        let resolution = workload_object(b.objects, w.kind, &key)
            .map(|(_, template)| b.workload(&w.namespace, w.kind, &w.name, template));
        match resolution {
            Some(resolution) => self.workloads.insert(w.clone(), resolution),
            None => self.workloads.remove(w),
        };
    }

    /// Files (`add`) or unfiles the listed object `w` under its controller and, for a
    /// ReplicaSet, its `pod-template-hash`.
    pub(super) fn file_workload(&mut self, w: &WorkloadRef, add: bool) {
        let key = (w.namespace.to_string(), w.name.to_string());
        let Some((meta, _)) = workload_object(&self.objects, w.kind, &key) else {
            return;
        };
        let parent = matches!(w.kind, WorkloadKind::ReplicaSet | WorkloadKind::Job)
            .then(|| controller_ref(&w.namespace, meta))
            .flatten();
        let hash = (w.kind == WorkloadKind::ReplicaSet)
            .then(|| meta.labels.as_ref()?.get("pod-template-hash"))
            .flatten()
            .map(|h| (w.namespace.clone(), Str::from(h.as_str())));
        if let Some(parent) = parent {
            self.link(&parent, w, add);
        }
        if let Some(hash) = hash {
            if add {
                self.replicasets_by_hash
                    .entry(hash)
                    .or_default()
                    .push(w.name.clone());
            } else if let Some(names) = self.replicasets_by_hash.get_mut(&hash) {
                names.retain(|n| *n != w.name);
                if names.is_empty() {
                    self.replicasets_by_hash.remove(&hash);
                }
            }
        }
    }

    /// A namespace's labels again from its object: the cached ones, and the listed ones.
    pub(super) fn refresh_namespace(&mut self, namespace: &str) {
        self.label_cache.remove(namespace);
        if self.objects.namespaces.contains_key(namespace) {
            let labels = self.builder().namespace_labels(namespace);
            self.namespace_labels.insert(namespace.into(), labels);
        } else {
            self.namespace_labels.remove(namespace);
        }
    }
}
