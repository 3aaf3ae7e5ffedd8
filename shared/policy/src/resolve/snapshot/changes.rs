//! What changed in the live cluster, applied to a snapshot in place: the cost is that of
//! the objects that changed and of what depends on them, not that of the cluster.
//!
//! - A pod: its entry is resolved again and filed again under its keys. Another uid under
//!   the same name, or no object, ends the entry held (it is gone, returned to the caller
//!   for its history) before the new one is added.
//! - A workload object: its own resolution again; when the owner it resolves to (the
//!   workload at the top of its chain and that workload's selector) changed, also the
//!   workloads and live pods that name it as their controller, and theirs. A status update
//!   changes no owner and costs one resolution.
//! - A namespace whose labels changed: every resolution in it (rare; a scan of the pods).

use std::sync::Arc;

use foldhash::HashSet;
use k8s_openapi::Metadata;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use ne_flow::flow::{Timestamp, WorkloadKind, WorkloadRef};

use super::build::{Owner, owner};
use super::parse::{NsName, Objects, PodObject};
use super::{ClusterSnapshot, GonePod};

/// One object as it is now, after it changed; `object: None` when it no longer exists.
#[derive(Clone, Debug)]
pub struct Change<K> {
    pub namespace: String,
    pub name: String,
    pub object: Option<Arc<K>>,
}

/// The objects that changed since a snapshot was built or last changed, by kind; each
/// listed once, as it is now. Namespaces by name.
#[derive(Clone, Debug, Default)]
pub struct ClusterChanges {
    pub namespaces: Vec<(String, Option<Arc<Namespace>>)>,
    pub pods: Vec<Change<Pod>>,
    pub replicasets: Vec<Change<ReplicaSet>>,
    pub deployments: Vec<Change<Deployment>>,
    pub statefulsets: Vec<Change<StatefulSet>>,
    pub daemonsets: Vec<Change<DaemonSet>>,
    pub jobs: Vec<Change<Job>>,
    pub cronjobs: Vec<Change<CronJob>>,
}

/// A workload kind and where [`Objects`] keeps its objects.
trait WorkloadObject: Metadata<Ty = ObjectMeta> + Sized {
    const WORKLOAD: WorkloadKind;
    fn listed(objects: &mut Objects) -> &mut std::collections::HashMap<NsName, Arc<Self>>;
}

macro_rules! workload_object {
    ($($ty:ty => $kind:ident, $field:ident;)*) => {$(
        impl WorkloadObject for $ty {
            const WORKLOAD: WorkloadKind = WorkloadKind::$kind;
            fn listed(objects: &mut Objects) -> &mut std::collections::HashMap<NsName, Arc<Self>> {
                &mut objects.$field
            }
        }
    )*};
}

workload_object! {
    Deployment => Deployment, deployments;
    StatefulSet => StatefulSet, statefulsets;
    DaemonSet => DaemonSet, daemonsets;
    ReplicaSet => ReplicaSet, replicasets;
    Job => Job, jobs;
    CronJob => CronJob, cronjobs;
}

fn refs<K: WorkloadObject>(changes: &[Change<K>]) -> impl Iterator<Item = WorkloadRef> + '_ {
    changes.iter().map(|c| WorkloadRef {
        namespace: c.namespace.as_str().into(),
        kind: K::WORKLOAD,
        name: c.name.as_str().into(),
    })
}

impl ClusterSnapshot {
    /// Applies `changes` as of `now`; returns the pods that went away (their entries stay,
    /// gone, until [`ClusterSnapshot::forget`]).
    pub fn apply(&mut self, changes: ClusterChanges, now: Timestamp) -> Vec<GonePod> {
        // Live pods to resolve again, by slot.
        let mut stale: HashSet<usize> = HashSet::default();

        for (name, namespace) in changes.namespaces {
            let labels = namespace.map(|n| n.metadata.labels.clone().unwrap_or_default());
            if self.objects.namespaces.get(&name) == labels.as_ref() {
                continue;
            }
            match labels {
                Some(labels) => self.objects.namespaces.insert(name.clone(), labels),
                None => self.objects.namespaces.remove(&name),
            };
            self.refresh_namespace(&name);
            let workloads: Vec<WorkloadRef> = self
                .workloads
                .keys()
                .filter(|w| *w.namespace == *name)
                .cloned()
                .collect();
            for w in &workloads {
                self.refresh_workload(w);
            }
            stale.extend(self.pods.iter().enumerate().filter_map(|(i, p)| {
                let p = p.as_ref()?;
                (!p.gone && *p.namespace == *name).then_some(i)
            }));
        }

        let changed: Vec<WorkloadRef> = refs(&changes.deployments)
            .chain(refs(&changes.statefulsets))
            .chain(refs(&changes.daemonsets))
            .chain(refs(&changes.replicasets))
            .chain(refs(&changes.jobs))
            .chain(refs(&changes.cronjobs))
            .collect();
        let before: Vec<Owner> = changed.iter().map(|w| self.owner_of(w)).collect();
        self.replace(changes.deployments);
        self.replace(changes.statefulsets);
        self.replace(changes.daemonsets);
        self.replace(changes.replicasets);
        self.replace(changes.jobs);
        self.replace(changes.cronjobs);
        let mut moved: Vec<WorkloadRef> = Vec::new();
        for (w, before) in changed.iter().zip(before) {
            self.refresh_workload(w);
            if self.owner_of(w) != before {
                moved.push(w.clone());
            }
        }
        // What names a moved workload as its controller moved with it, down the chain.
        let mut seen: HashSet<WorkloadRef> = HashSet::default();
        while let Some(w) = moved.pop() {
            if !seen.insert(w.clone()) {
                continue;
            }
            let Some(dependents) = self.dependents.get(&w) else {
                continue;
            };
            stale.extend(dependents.pods.iter().copied());
            let children = dependents.workloads.clone();
            for child in children {
                self.refresh_workload(&child);
                moved.push(child);
            }
        }

        let mut gone = Vec::new();
        for change in changes.pods {
            let uid = change
                .object
                .as_ref()
                .and_then(|p| p.metadata.uid.as_deref().filter(|u| !u.is_empty()));
            if let Some(i) = self.live_named(&change.namespace, &change.name) {
                let same = change.object.is_some() && self.pod(i).uid.as_deref() == uid;
                let old = self.remove(i);
                if !same {
                    let ended = old.into_gone(now);
                    gone.push(GonePod(ended.clone()));
                    self.insert(ended);
                }
            }
            if let Some(pod) = change.object {
                let object = PodObject::live(change.namespace, change.name, pod);
                let entry = self.builder().entry(object);
                self.insert(entry);
            }
        }

        for i in stale {
            self.resolve_again(i);
        }
        self.settle();
        gone
    }

    /// Removes gone pods (the history forgot them): edges of their lifetime no longer
    /// resolve to them.
    pub fn forget<'g>(&mut self, pods: impl IntoIterator<Item = &'g GonePod>) {
        for GonePod(pod) in pods {
            let Some(same) = self
                .by_name
                .get(&pod.namespace)
                .and_then(|n| n.get(&pod.name))
            else {
                continue;
            };
            let found = same.iter().copied().find(|&i| {
                let held = self.pod(i);
                held.gone && held.uid == pod.uid && held.life == pod.life
            });
            if let Some(i) = found {
                self.remove(i);
            }
        }
        self.settle();
    }

    /// The owner workload `w` resolves to now.
    fn owner_of(&self, w: &WorkloadRef) -> Owner {
        owner(&self.objects, &w.namespace, w.kind, &w.name)
    }

    /// Replaces the objects of one kind, keeping their filing (controller, hash) current.
    fn replace<K: WorkloadObject>(&mut self, changes: Vec<Change<K>>) {
        for change in changes {
            let w = WorkloadRef {
                namespace: change.namespace.as_str().into(),
                kind: K::WORKLOAD,
                name: change.name.as_str().into(),
            };
            self.file_workload(&w, false);
            let key = (change.namespace, change.name);
            let listed = K::listed(&mut self.objects);
            match change.object {
                Some(object) => listed.insert(key, object),
                None => listed.remove(&key),
            };
            self.file_workload(&w, true);
        }
    }

    /// Resolves the live pod in slot `i` again from its object (its owners changed).
    fn resolve_again(&mut self, i: usize) {
        let Some(Some(entry)) = self.pods.get(i) else {
            return;
        };
        let Some(object) = entry.object.clone() else {
            return;
        };
        let (namespace, name) = (entry.namespace.clone(), entry.name.clone());
        let (resolution, owner) = self.builder().pod(&namespace, &name, &object);
        let Some(Some(entry)) = self.pods.get_mut(i) else {
            return;
        };
        entry.resolution = Arc::new(resolution);
        if entry.owner != owner {
            entry.owner = owner;
            if let Some(prefix) = &entry.generate_name {
                self.unsettled.groups.insert((namespace, prefix.clone()));
            }
        }
    }
}
