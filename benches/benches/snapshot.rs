//! The resolver snapshot a live controller round rebuilds from its caches
//! (`leader::controller::state::Stores::snapshot`): every cached object cloned out of the
//! store, then `ClusterSnapshot::from_objects` (the same code as `learn --cluster`).
//!
//! Cluster shape: 5 pods per Deployment (one current ReplicaSet each, owner references
//! and `pod-template-hash` as the controllers set them), 20 Deployments per namespace,
//! pods with 4 labels, an address and a ServiceAccount. Sizes: 1 000 and 10 000 pods.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use ne_policy::resolve::{ClusterObjects, ClusterSnapshot};
use serde_json::json;

const PODS_PER_DEPLOYMENT: usize = 5;
const DEPLOYMENTS_PER_NAMESPACE: usize = 20;

fn owner(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
}

fn cluster(pods: usize) -> ClusterObjects {
    let deployments = pods / PODS_PER_DEPLOYMENT;
    let mut objects = ClusterObjects::default();
    for d in 0..deployments {
        let ns = format!("ns-{}", d / DEPLOYMENTS_PER_NAMESPACE);
        if d % DEPLOYMENTS_PER_NAMESPACE == 0 {
            objects.namespaces.push(
                serde_json::from_value::<Namespace>(json!({
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, "team": "shop"}},
                }))
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
            .expect("a Deployment"),
        );
        let rs = format!("{name}-5c8b7d9f6c");
        objects.replicasets.push(
            serde_json::from_value::<ReplicaSet>(json!({
                "metadata": {"name": rs, "namespace": ns, "uid": format!("rs-{d}"), "labels": pod_labels,
                             "ownerReferences": owner("Deployment", &name, &format!("d-{d}"))},
                "spec": {"selector": {"matchLabels": pod_labels}, "template": template},
            }))
            .expect("a ReplicaSet"),
        );
        for p in 0..PODS_PER_DEPLOYMENT {
            let i = d * PODS_PER_DEPLOYMENT + p;
            objects.pods.push(
                serde_json::from_value::<Pod>(json!({
                    "metadata": {"name": format!("{rs}-{p:05}"), "namespace": ns, "labels": pod_labels,
                                 "ownerReferences": owner("ReplicaSet", &rs, &format!("rs-{d}"))},
                    "spec": {"serviceAccountName": name, "containers": []},
                    "status": {"podIP": format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255), "phase": "Running"},
                }))
                .expect("a Pod"),
            );
        }
    }
    objects
}

fn snapshot(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot");
    group.sample_size(20);
    for pods in [1_000, 10_000] {
        let objects = cluster(pods);
        let (_, skipped) = ClusterSnapshot::from_objects(objects.clone(), []);
        assert_eq!(skipped, 0, "every generated object is usable");
        group.throughput(Throughput::Elements(pods as u64));
        group.bench_with_input(
            BenchmarkId::new("clone_and_build", pods),
            &objects,
            |b, objects| b.iter(|| black_box(ClusterSnapshot::from_objects(objects.clone(), []))),
        );
        // The build alone (the clone happens outside the timed part).
        group.bench_with_input(BenchmarkId::new("build", pods), &objects, |b, objects| {
            b.iter_batched(
                || objects.clone(),
                |o| black_box(ClusterSnapshot::from_objects(o, [])),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
