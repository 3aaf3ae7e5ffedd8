//! The cluster as the controller sees it: one reflector per kind, started on every replica
//! (standbys keep their caches warm, ready for when they take over), read as plain snapshots
//! each round.
//!
//! Objects are stored without `managedFields` (and pods without their annotations), which
//! are most of their size and of no use here.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Pod, PodTemplateSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use ne_crds::{
    AuthorizationPolicy, TargetKind, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_policy::resolve::{ClusterObjects, ClusterSnapshot, GonePod};
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

/// Starts a reflector for `K` cluster-wide; the task runs until dropped (aborted). Every
/// event applied to the store bumps `changes`, when given.
fn reflect<K>(
    client: &Client,
    tasks: &mut Vec<JoinHandle<()>>,
    changes: Option<&Arc<AtomicU64>>,
) -> Store<K>
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
    let changes = changes.cloned();
    tasks.push(tokio::spawn(async move {
        reflector::reflector(writer, stream)
            .for_each(|event| {
                match event {
                    Ok(_) => {
                        if let Some(changes) = &changes {
                            changes.fetch_add(1, Ordering::Relaxed);
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

impl Stores {
    /// Starts every reflector. `istio`: whether to watch AuthorizationPolicies (the CRD is
    /// served, see [`authorization_policies_served`]).
    pub fn start(client: &Client, istio: bool) -> (Self, Vec<JoinHandle<()>>) {
        let mut tasks = Vec::new();
        let changes = Arc::new(AtomicU64::new(0));
        let resolver = Some(&changes);
        let stores = Stores {
            namespaces: reflect(client, &mut tasks, resolver),
            pods: reflect(client, &mut tasks, resolver),
            replicasets: reflect(client, &mut tasks, resolver),
            deployments: reflect(client, &mut tasks, resolver),
            statefulsets: reflect(client, &mut tasks, resolver),
            daemonsets: reflect(client, &mut tasks, resolver),
            jobs: reflect(client, &mut tasks, resolver),
            cronjobs: reflect(client, &mut tasks, resolver),
            proposals: reflect(client, &mut tasks, None),
            policies: reflect(client, &mut tasks, None),
            network_policies: reflect(client, &mut tasks, None),
            authorization_policies: istio.then(|| reflect(client, &mut tasks, None)),
            resolver_changes: changes.clone(),
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

    /// The resolver over the current objects and the pods known gone, and the count of
    /// objects it left out.
    pub fn snapshot<'g>(
        &self,
        gone: impl IntoIterator<Item = &'g GonePod>,
    ) -> (ClusterSnapshot, usize) {
        ClusterSnapshot::from_objects(
            ClusterObjects {
                namespaces: owned(&self.namespaces),
                pods: owned(&self.pods),
                replicasets: owned(&self.replicasets),
                deployments: owned(&self.deployments),
                statefulsets: owned(&self.statefulsets),
                daemonsets: owned(&self.daemonsets),
                jobs: owned(&self.jobs),
                cronjobs: owned(&self.cronjobs),
            },
            gone,
        )
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
