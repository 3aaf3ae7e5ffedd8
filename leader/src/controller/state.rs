//! The cluster as the controller sees it: one reflector per kind, started on every replica
//! (standbys keep their caches warm, ready for when they take over), read as plain snapshots
//! each round.
//!
//! Objects are stored without `managedFields` (and pods without their annotations), which
//! are most of their size and of no use here.
//!
//! The reflectors of the kinds the resolver reads also note which objects changed, so that
//! a round applies those to its resolver instead of building it again from every object.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod, PodTemplateSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use ne_crds::{
    AuthorizationPolicy, TargetKind, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_policy::resolve::{Change, ClusterChanges, ClusterObjects, ClusterSnapshot, GonePod};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

use super::plan::{Workload, WorkloadKey};

/// The reflector stores.
#[derive(Clone)]
pub struct Stores {
    namespaces: Store<Namespace>,
    pods: Store<Pod>,
    replicasets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    statefulsets: Store<StatefulSet>,
    daemonsets: Store<DaemonSet>,
    jobs: Store<Job>,
    cronjobs: Store<CronJob>,
    pub proposals: Store<WorkloadNetworkPolicyProposal>,
    pub policies: Store<WorkloadNetworkPolicy>,
    pub network_policies: Store<NetworkPolicy>,
    /// `None` when Istio's AuthorizationPolicy CRD is not served.
    pub authorization_policies: Option<Store<AuthorizationPolicy>>,
    /// Events applied to the stores the resolver reads (namespaces, pods, their owners).
    resolver_changes: Arc<AtomicU64>,
    /// Which of their objects changed since the resolver last took them.
    changed: Arc<Mutex<Changed>>,
}

/// The kinds the resolver reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum ResolverKind {
    Namespace,
    Pod,
    ReplicaSet,
    Deployment,
    StatefulSet,
    DaemonSet,
    Job,
    CronJob,
}

/// Objects changed since the resolver last took them, by kind, namespace and name.
#[derive(Debug, Default)]
struct Changed {
    keys: HashSet<(ResolverKind, Option<String>, String)>,
    /// A store was listed again (a watch restarted) or more objects changed than are worth
    /// applying one by one: the resolver is built again from the stores.
    rebuild: bool,
}

impl Changed {
    /// More changed objects than this, and the resolver is built again: the set stays
    /// small while nobody takes it (a standby runs no rounds).
    const MAX: usize = 20_000;

    fn note(&mut self, kind: ResolverKind, meta: &kube::api::ObjectMeta) {
        if self.rebuild {
            return;
        }
        if let Some(name) = &meta.name {
            self.keys
                .insert((kind, meta.namespace.clone(), name.clone()));
        }
        if self.keys.len() > Self::MAX {
            self.relisted();
        }
    }

    fn relisted(&mut self) {
        self.rebuild = true;
        self.keys = HashSet::new();
    }
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("pods", &self.pods.state().len())
            .field("proposals", &self.proposals.state().len())
            .field("policies", &self.policies.state().len())
            .finish_non_exhaustive()
    }
}

/// The watchers' retry delays: from 0.5 s, doubling, at most 5 s; back to 0.5 s after an
/// event arrives. kube's default grows to 30 s, so after a one-minute API server outage the
/// caches stayed stale for up to half a minute, and the controller wrote again every round
/// what it had already written.
#[derive(Debug)]
struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (delay * 2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// Where a reflector reports what it applied: a counter bumped on every event, and the
/// objects changed.
struct Report {
    events: Arc<AtomicU64>,
    changed: Arc<Mutex<Changed>>,
    kind: ResolverKind,
}

/// Starts a reflector for `K` cluster-wide; the task runs until dropped (aborted). Every
/// event applied to the store is reported, when asked.
fn reflect<K>(client: &Client, tasks: &mut Vec<JoinHandle<()>>, report: Option<Report>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let api: Api<K> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let stream = watcher(api, watcher::Config::default().any_semantic())
        .map_ok(|event| {
            event.modify(|o| {
                o.meta_mut().managed_fields = None;
            })
        })
        .backoff(WatchBackoff::default());
    tasks.push(tokio::spawn(async move {
        reflector::reflector(writer, stream)
            .for_each(|event| {
                match event {
                    Ok(event) => {
                        if let Some(report) = &report {
                            report.note(&event);
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                    }
                }
                futures::future::ready(())
            })
            .await;
    }));
    reader
}

impl Report {
    /// Notes the object an event changed (the change first, then the count: a reader that
    /// saw the count move finds the change).
    fn note<K: Resource>(&self, event: &watcher::Event<K>) {
        {
            let mut changed = self.changed.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                    changed.note(self.kind, o.meta());
                }
                watcher::Event::InitDone => changed.relisted(),
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
            }
        }
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

/// The current state of each object named in `keys` of `kind`.
fn changes<K>(store: &Store<K>, keys: &[(Option<String>, String)]) -> Vec<Change<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    keys.iter()
        .map(|(namespace, name)| {
            let mut at = ObjectRef::new(name);
            if let Some(ns) = namespace {
                at = at.within(ns);
            }
            Change {
                namespace: namespace.clone().unwrap_or_default(),
                name: name.clone(),
                object: store.get(&at),
            }
        })
        .collect()
}

impl Stores {
    /// Starts every reflector. `istio`: whether to watch AuthorizationPolicies (the CRD is
    /// served, see [`authorization_policies_served`]).
    pub fn start(client: &Client, istio: bool) -> (Self, Vec<JoinHandle<()>>) {
        let mut tasks = Vec::new();
        let events = Arc::new(AtomicU64::new(0));
        let changed = Arc::new(Mutex::new(Changed::default()));
        let report = |kind| {
            Some(Report {
                events: events.clone(),
                changed: changed.clone(),
                kind,
            })
        };
        use ResolverKind as R;
        let stores = Stores {
            namespaces: reflect(client, &mut tasks, report(R::Namespace)),
            pods: reflect(client, &mut tasks, report(R::Pod)),
            replicasets: reflect(client, &mut tasks, report(R::ReplicaSet)),
            deployments: reflect(client, &mut tasks, report(R::Deployment)),
            statefulsets: reflect(client, &mut tasks, report(R::StatefulSet)),
            daemonsets: reflect(client, &mut tasks, report(R::DaemonSet)),
            jobs: reflect(client, &mut tasks, report(R::Job)),
            cronjobs: reflect(client, &mut tasks, report(R::CronJob)),
            proposals: reflect(client, &mut tasks, None),
            policies: reflect(client, &mut tasks, None),
            network_policies: reflect(client, &mut tasks, None),
            authorization_policies: istio.then(|| reflect(client, &mut tasks, None)),
            resolver_changes: events.clone(),
            changed: changed.clone(),
        };
        (stores, tasks)
    }

    /// Waits until every store holds its first complete list.
    pub async fn ready(&self) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        // Sequential waits: the lists run concurrently anyway, in their own tasks.
        self.namespaces.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.replicasets.wait_until_ready().await?;
        self.deployments.wait_until_ready().await?;
        self.statefulsets.wait_until_ready().await?;
        self.daemonsets.wait_until_ready().await?;
        self.jobs.wait_until_ready().await?;
        self.cronjobs.wait_until_ready().await?;
        self.proposals.wait_until_ready().await?;
        self.policies.wait_until_ready().await?;
        self.network_policies.wait_until_ready().await?;
        if let Some(aps) = &self.authorization_policies {
            aps.wait_until_ready().await?;
        }
        Ok(())
    }

    /// A number that changes whenever a store the resolver reads changed: a snapshot built
    /// after reading it is current until it moves.
    pub fn resolver_generation(&self) -> u64 {
        self.resolver_changes.load(Ordering::Relaxed)
    }

    /// The resolver over the current objects (shared with the stores, not copied) and the
    /// pods known gone. Changes noted before it are dropped: it holds them.
    pub fn snapshot<'g>(&self, gone: impl IntoIterator<Item = &'g GonePod>) -> ClusterSnapshot {
        *self.changed.lock().unwrap_or_else(PoisonError::into_inner) = Changed::default();
        let (snapshot, _) = ClusterSnapshot::from_objects(
            ClusterObjects {
                namespaces: self.namespaces.state(),
                pods: self.pods.state(),
                replicasets: self.replicasets.state(),
                deployments: self.deployments.state(),
                statefulsets: self.statefulsets.state(),
                daemonsets: self.daemonsets.state(),
                jobs: self.jobs.state(),
                cronjobs: self.cronjobs.state(),
            },
            gone,
        );
        snapshot
    }

    /// The objects changed since the last [`Stores::snapshot`] or [`Stores::changes`], as
    /// they are now; `None` when the resolver must be built again instead (a store was
    /// listed again, or too much changed).
    pub fn changes(&self) -> Option<ClusterChanges> {
        let taken =
            std::mem::take(&mut *self.changed.lock().unwrap_or_else(PoisonError::into_inner));
        if taken.rebuild {
            return None;
        }
        let mut by_kind: HashMap<ResolverKind, Vec<(Option<String>, String)>> = HashMap::new();
        for (kind, namespace, name) in taken.keys {
            by_kind.entry(kind).or_default().push((namespace, name));
        }
        let mut keys = |kind| by_kind.remove(&kind).unwrap_or_default();
        use ResolverKind as R;
        Some(ClusterChanges {
            namespaces: changes(&self.namespaces, &keys(R::Namespace))
                .into_iter()
                .map(|c| (c.name, c.object))
                .collect(),
            pods: changes(&self.pods, &keys(R::Pod)),
            replicasets: changes(&self.replicasets, &keys(R::ReplicaSet)),
            deployments: changes(&self.deployments, &keys(R::Deployment)),
            statefulsets: changes(&self.statefulsets, &keys(R::StatefulSet)),
            daemonsets: changes(&self.daemonsets, &keys(R::DaemonSet)),
            jobs: changes(&self.jobs, &keys(R::Job)),
            cronjobs: changes(&self.cronjobs, &keys(R::CronJob)),
        })
    }

    /// Deployments, StatefulSets and DaemonSets: the possible proposal owners.
    pub fn workloads(&self) -> BTreeMap<WorkloadKey, Workload> {
        let mut out = BTreeMap::new();
        let mut add = |meta: &kube::api::ObjectMeta, kind, template: &PodTemplateSpec| {
            if let (Some(ns), Some(name), Some(uid)) = (&meta.namespace, &meta.name, &meta.uid) {
                let service_account = template
                    .spec
                    .as_ref()
                    .and_then(|s| s.service_account_name.clone())
                    .filter(|s| !s.is_empty());
                out.insert(
                    (ns.clone(), kind, name.clone()),
                    Workload {
                        uid: uid.clone(),
                        service_account,
                    },
                );
            }
        };
        for d in self.deployments.state() {
            if let Some(spec) = &d.spec {
                add(&d.metadata, TargetKind::Deployment, &spec.template);
            }
        }
        for s in self.statefulsets.state() {
            if let Some(spec) = &s.spec {
                add(&s.metadata, TargetKind::StatefulSet, &spec.template);
            }
        }
        for d in self.daemonsets.state() {
            if let Some(spec) = &d.spec {
                add(&d.metadata, TargetKind::DaemonSet, &spec.template);
            }
        }
        out
    }
}

/// Owned copies of a store's objects, in a stable order (namespace, name).
pub fn owned<K>(store: &Store<K>) -> Vec<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    let mut items: Vec<Arc<K>> = store.state();
    items.sort_by(|a, b| {
        (&a.meta().namespace, &a.meta().name).cmp(&(&b.meta().namespace, &b.meta().name))
    });
    items.into_iter().map(|k| (*k).clone()).collect()
}

/// Whether the API server serves `security.istio.io/v1` AuthorizationPolicies.
pub async fn authorization_policies_served(client: &Client) -> Result<bool, kube::Error> {
    match client
        .list_api_group_resources("security.istio.io/v1")
        .await
    {
        Ok(list) => Ok(list
            .resources
            .iter()
            .any(|r| r.name == "authorizationpolicies")),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod changed_tests {
    use super::*;

    fn meta(namespace: Option<&str>, name: &str) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            namespace: namespace.map(str::to_owned),
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }

    #[test]
    fn an_object_changed_twice_is_applied_once_and_too_many_changes_mean_a_rebuild() {
        let mut changed = Changed::default();
        changed.note(ResolverKind::Pod, &meta(Some("shop"), "api-1"));
        changed.note(ResolverKind::Pod, &meta(Some("shop"), "api-1"));
        changed.note(ResolverKind::Namespace, &meta(None, "shop"));
        assert_eq!(changed.keys.len(), 2);
        assert!(!changed.rebuild);

        for i in 0..Changed::MAX {
            changed.note(ResolverKind::Pod, &meta(Some("shop"), &format!("web-{i}")));
        }
        assert!(changed.rebuild, "past the cap the resolver is built again");
        assert!(
            changed.keys.is_empty(),
            "and the keys are dropped, not kept growing"
        );
        changed.note(ResolverKind::Pod, &meta(Some("shop"), "api-2"));
        assert!(changed.keys.is_empty());
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[test]
    fn the_watch_backoff_doubles_to_five_seconds_and_starts_over_after_a_success() {
        let mut backoff = WatchBackoff::default();
        let delays: Vec<_> = backoff.by_ref().take(6).map(|d| d.as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 5000, 5000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(Duration::from_millis(500)));
    }
}
