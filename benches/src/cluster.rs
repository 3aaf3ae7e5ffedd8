//! Cluster objects for the resolver benches: a cluster of Deployments, and the same
//! cluster after a span of pod churn with the pods it lost (what the live leader keeps).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use ne_flow::flow::Timestamp;
use ne_policy::resolve::{Change, ClusterChanges, ClusterObjects, ClusterSnapshot, GonePod};
use serde_json::json;

const PODS_PER_DEPLOYMENT: usize = 5;
const DEPLOYMENTS_PER_NAMESPACE: usize = 20;

fn owner(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
}

/// The address of the `i`-th pod.
pub fn address(i: usize) -> String {
    format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)
}

/// `pods` pods: 5 per Deployment (one current ReplicaSet each, owner references and
/// `pod-template-hash` as the controllers set them), 20 Deployments per namespace, each pod
/// with 4 labels, an address and a ServiceAccount.
pub fn cluster(pods: usize) -> ClusterObjects {
    let deployments = pods / PODS_PER_DEPLOYMENT;
    let mut objects = ClusterObjects::default();
    for d in 0..deployments {
        let ns = format!("ns-{}", d / DEPLOYMENTS_PER_NAMESPACE);
        if d % DEPLOYMENTS_PER_NAMESPACE == 0 {
            objects.namespaces.push(
                serde_json::from_value::<Namespace>(json!({
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, "team": "shop"}},
                }))
                .map(Arc::new)
                .expect("a namespace"),
            );
        }
        let name = format!("app-{d}");
        let labels = json!({"app": name, "tier": "backend"});
        let mut pod_labels = labels.clone();
        pod_labels["pod-template-hash"] = json!("5c8b7d9f6c");
        let template = json!({"metadata": {"labels": labels}, "spec": {"serviceAccountName": name, "containers": []}});
        objects.deployments.push(
            serde_json::from_value::<Deployment>(json!({
                "metadata": {"name": name, "namespace": ns, "uid": format!("d-{d}")},
                "spec": {"selector": {"matchLabels": labels}, "template": template},
            }))
            .map(Arc::new)
            .expect("a Deployment"),
        );
        let rs = format!("{name}-5c8b7d9f6c");
        objects.replicasets.push(
            serde_json::from_value::<ReplicaSet>(json!({
                "metadata": {"name": rs, "namespace": ns, "uid": format!("rs-{d}"), "labels": pod_labels,
                             "ownerReferences": owner("Deployment", &name, &format!("d-{d}"))},
                "spec": {"selector": {"matchLabels": pod_labels}, "template": template},
            }))
            .map(Arc::new)
            .expect("a ReplicaSet"),
        );
        for p in 0..PODS_PER_DEPLOYMENT {
            let i = d * PODS_PER_DEPLOYMENT + p;
            objects.pods.push(
                serde_json::from_value::<Pod>(json!({
                    "metadata": {"name": format!("{rs}-{p:05}"), "namespace": ns, "labels": pod_labels,
                                 "uid": format!("p-{i}"),
                                 "ownerReferences": owner("ReplicaSet", &rs, &format!("rs-{d}"))},
                    "spec": {"serviceAccountName": name, "containers": []},
                    "status": {"podIP": address(i), "phase": "Running"},
                }))
                .map(Arc::new)
                .expect("a Pod"),
            );
        }
    }
    objects
}

pub const CHURN_PODS: usize = 10_000;
pub const CHANGES_PER_SECOND: i64 = 20;
/// An hour: the leader's default retention (90 minutes) holds all of it.
pub const CHURN_SECONDS: i64 = 3_600;
/// Addresses beyond the live pods': the node allocators' free ranges. A freed address
/// is handed out again after the others (about 100 s later here).
const SPARE_ADDRESSES: usize = 2_000;
pub const SECOND: i64 = 1_000_000_000;

fn time(nanos: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(nanos)).expect("a valid time"))
}

/// A cluster after churn, ending at `now`.
#[derive(Debug)]
pub struct Churn {
    /// The objects listed at `now`.
    pub live: ClusterObjects,
    /// The pods replaced meanwhile, as the live leader keeps them.
    pub gone: Vec<GonePod>,
    /// Nanoseconds since the epoch.
    pub now: i64,
    /// (address, start, end) of the gone pods, in deletion order.
    pub past: Vec<(IpAddr, i64, i64)>,
}

/// [`CHURN_PODS`] pods after [`CHURN_SECONDS`] of churn at [`CHANGES_PER_SECOND`]: at
/// each change one pod is deleted and its Deployment's replacement starts with the address
/// freed longest ago (handed out again about 100 s after it was freed).
pub fn churn() -> Churn {
    let mut all = cluster(CHURN_PODS);
    let live = all.pods.len();
    let changes = (CHANGES_PER_SECOND * CHURN_SECONDS) as usize;
    let start = 1_796_385_600 * SECOND; // 2026-12-04T10:00:00Z
    let now = start + CHURN_SECONDS * SECOND;
    let mut free: VecDeque<usize> = (live..live + SPARE_ADDRESSES).collect();
    let mut current: Vec<usize> = (0..live).collect(); // slot → index in all.pods
    for p in &mut all.pods {
        Arc::make_mut(p)
            .status
            .as_mut()
            .expect("a status")
            .start_time = Some(time(start - CHURN_SECONDS * SECOND));
    }
    let mut addresses: Vec<usize> = (0..live).collect(); // index in all.pods → address
    let base: Vec<String> = all
        .pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    let mut past = Vec::with_capacity(changes);
    for k in 0..changes {
        // The k-th change, at a whole second as the API server records it.
        let at = start + (k as i64 / CHANGES_PER_SECOND) * SECOND;
        let slot = (k * 7_919) % live;
        let old = current[slot];
        let mut pod = (*all.pods[old]).clone();
        Arc::make_mut(&mut all.pods[old])
            .metadata
            .deletion_timestamp = Some(time(at));
        let freed = addresses[old];
        let begun = all.pods[old]
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_nanosecond() as i64);
        past.push((
            address(freed).parse().expect("an address"),
            begun.unwrap_or(start),
            at,
        ));
        free.push_back(freed);
        let given = free.pop_front().expect("a free address");
        pod.metadata.name = Some(format!("{}-g{k}", base[slot]));
        pod.metadata.uid = Some(format!("g-{k}"));
        let status = pod.status.as_mut().expect("a status");
        status.pod_ip = Some(address(given));
        status.start_time = Some(time(at));
        current[slot] = all.pods.len();
        addresses.push(given);
        all.pods.push(Arc::new(pod));
    }
    let mut live_objects = all.clone();
    live_objects.pods = current.iter().map(|&i| all.pods[i].clone()).collect();
    let (before, _) = ClusterSnapshot::from_objects(all, []);
    let (after, _) = ClusterSnapshot::from_objects(live_objects.clone(), []);
    let mut gone = before.gone_since(&after, Timestamp(now));
    gone.shrink_to_fit(); // as the leader holds them: one slot each
    assert_eq!(gone.len(), changes, "every replaced pod is gone");
    Churn {
        live: live_objects,
        gone,
        now,
        past,
    }
}

/// A change of `pods` pods of `objects` (spread over the cluster), and the change that
/// undoes it: each pod deleted and replaced by a new pod of its ReplicaSet, with a new name,
/// uid and address, as a rolling restart does.
pub fn replacements(objects: &ClusterObjects, pods: usize) -> (ClusterChanges, ClusterChanges) {
    let mut forth = ClusterChanges::default();
    let mut back = ClusterChanges::default();
    let step = (objects.pods.len() / pods.max(1)).max(1);
    for (k, old) in objects.pods.iter().step_by(step).take(pods).enumerate() {
        let mut new = (**old).clone();
        let name = format!("{}-r", old.metadata.name.as_deref().unwrap_or_default());
        new.metadata.name = Some(name.clone());
        new.metadata.uid = Some(format!("r-{k}"));
        if let Some(status) = new.status.as_mut() {
            status.pod_ip = Some(address(objects.pods.len() + k));
        }
        let new = Arc::new(new);
        let ns = old.metadata.namespace.clone().unwrap_or_default();
        let old_name = old.metadata.name.clone().unwrap_or_default();
        let change = |name: &str, object: Option<&Arc<Pod>>| Change {
            namespace: ns.clone(),
            name: name.to_owned(),
            object: object.cloned(),
        };
        forth.pods.push(change(&old_name, None));
        forth.pods.push(change(&name, Some(&new)));
        back.pods.push(change(&name, None));
        back.pods.push(change(&old_name, Some(old)));
    }
    (forth, back)
}

/// The first Deployment of `objects` changed in `spec.selector` (its pods resolve again)
/// or, with `status_only`, in its status alone (only it resolves again), and the change
/// back.
pub fn deployment_change(
    objects: &ClusterObjects,
    status_only: bool,
) -> (ClusterChanges, ClusterChanges) {
    let old = objects.deployments.first().expect("a Deployment");
    let mut new = (**old).clone();
    if status_only {
        let status = new.status.get_or_insert_default();
        status.ready_replicas = Some(status.ready_replicas.unwrap_or(0) + 1);
    } else if let Some(spec) = new.spec.as_mut() {
        spec.selector
            .match_labels
            .get_or_insert_default()
            .remove("tier");
    }
    let change = |object: &Arc<Deployment>| ClusterChanges {
        deployments: vec![Change {
            namespace: old.metadata.namespace.clone().unwrap_or_default(),
            name: old.metadata.name.clone().unwrap_or_default(),
            object: Some(object.clone()),
        }],
        ..ClusterChanges::default()
    };
    (change(&Arc::new(new)), change(old))
}
