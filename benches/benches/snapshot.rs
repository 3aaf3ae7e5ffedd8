//! The resolver snapshot a live controller round rebuilds from its caches
//! (`leader::controller::state::Stores::snapshot`): every cached object cloned out of the
//! store, then `ClusterSnapshot::from_objects` (the same code as `learn --cluster`).
//!
//! Cluster shape: 5 pods per Deployment (one current ReplicaSet each, owner references
//! and `pod-template-hash` as the controllers set them), 20 Deployments per namespace,
//! pods with 4 labels, an address and a ServiceAccount. Sizes: 1 000 and 10 000 pods.
//!
//! `history`: the same 10 000 pods after an hour of churn at 20 pod replacements per
//! second (72 000 gone pods, the leader's default retention filled): a rebuild with the
//! history and address lookups against it, each beside the same cluster without history.

use std::collections::VecDeque;
use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use ne_flow::flow::{Endpoint, EndpointId, Timestamp};
use ne_policy::resolve::{ClusterObjects, ClusterSnapshot, GonePod, Resolution, Resolver, Seen};
use serde_json::json;

const PODS_PER_DEPLOYMENT: usize = 5;
const DEPLOYMENTS_PER_NAMESPACE: usize = 20;

fn owner(kind: &str, name: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true}])
}

fn address(i: usize) -> String {
    format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255)
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
                    "status": {"podIP": address(i), "phase": "Running"},
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

const CHURN_PODS: usize = 10_000;
const CHANGES_PER_SECOND: i64 = 20;
const RETENTION_SECONDS: i64 = 3_600;
/// Addresses beyond the live pods': the node allocators' free ranges. A freed address
/// is handed out again after the others (about 100 s later here).
const SPARE_ADDRESSES: usize = 2_000;
/// Lookups per timed iteration.
const LOOKUPS: usize = 1_000;
const SECOND: i64 = 1_000_000_000;

fn time(nanos: i64) -> Time {
    Time(jiff::Timestamp::from_nanosecond(i128::from(nanos)).expect("a valid time"))
}

/// An hour of churn ending at `now`: every 50 ms one pod is deleted and its Deployment's
/// replacement starts with the address freed longest ago.
struct Churn {
    live: ClusterObjects,
    gone: Vec<GonePod>,
    now: i64,
    /// (address, start, end) of gone pods, in deletion order.
    past: Vec<(IpAddr, i64, i64)>,
}

fn churn() -> Churn {
    let mut all = cluster(CHURN_PODS);
    let live = all.pods.len();
    let changes = (CHANGES_PER_SECOND * RETENTION_SECONDS) as usize;
    let start = 1_796_385_600 * SECOND; // 2026-12-04T10:00:00Z
    let now = start + RETENTION_SECONDS * SECOND;
    let mut free: VecDeque<usize> = (live..live + SPARE_ADDRESSES).collect();
    let mut current: Vec<usize> = (0..live).collect(); // slot → index in all.pods
    for p in &mut all.pods {
        p.status.as_mut().expect("a status").start_time =
            Some(time(start - RETENTION_SECONDS * SECOND));
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
        let mut pod = all.pods[old].clone();
        all.pods[old].metadata.deletion_timestamp = Some(time(at));
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
        let status = pod.status.as_mut().expect("a status");
        status.pod_ip = Some(address(given));
        status.start_time = Some(time(at));
        current[slot] = all.pods.len();
        addresses.push(given);
        all.pods.push(pod);
    }
    let mut live_objects = all.clone();
    live_objects.pods = current.iter().map(|&i| all.pods[i].clone()).collect();
    let (before, _) = ClusterSnapshot::from_objects(all, []);
    let (after, _) = ClusterSnapshot::from_objects(live_objects.clone(), []);
    let gone = before.gone_since(&after, Timestamp(now));
    assert_eq!(gone.len(), changes, "every replaced pod is gone");
    Churn {
        live: live_objects,
        gone,
        now,
        past,
    }
}

/// Bytes the leader's history accounts per gone pod (`leader_pod_history_bytes`), and the
/// resident memory each snapshot rebuilt with the history takes beyond one without (the
/// snapshot shares names, labels and resolutions with the history's entries). RSS grows
/// only once the memory freed while generating is used up: copies are built and kept until
/// it is, then the growth over several copies of each kind is averaged.
fn history_memory(churn: &Churn) {
    const COPIES: usize = 4;
    let accounted: usize = churn
        .gone
        .iter()
        .map(|g| size_of::<GonePod>() + g.heap_bytes())
        .sum();
    let build = |gone: &[GonePod]| ClusterSnapshot::from_objects(churn.live.clone(), gone);
    let mut kept: Vec<_> = (0..COPIES).map(|_| build(&churn.gone)).collect();
    let mut growth = |gone: &[GonePod]| {
        let before = rss();
        kept.extend((0..COPIES).map(|_| build(gone)));
        rss().saturating_sub(before) as f64 / COPIES as f64
    };
    let plain = growth(&[]);
    let with = growth(&churn.gone);
    drop(black_box(kept));
    let n = churn.gone.len() as f64;
    println!(
        "snapshot/history/memory: {} gone pods; history {:.0} B per gone pod (accounted); snapshot +{:.0} B per gone pod (RSS per copy: {:.1} MiB without history, {:.1} MiB with)",
        churn.gone.len(),
        accounted as f64 / n,
        (with - plain) / n,
        plain / 1_048_576.0,
        with / 1_048_576.0,
    );
}

/// Resident memory of this process in bytes.
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

fn lookups(snapshot: &ClusterSnapshot, queries: &[(Endpoint, Seen)]) -> usize {
    queries
        .iter()
        .filter(|(e, seen)| matches!(snapshot.resolve_at(e, *seen), Resolution::Pod(_)))
        .count()
}

fn history(c: &mut Criterion) {
    let churn = churn();
    history_memory(&churn);
    let (plain, _) = ClusterSnapshot::from_objects(churn.live.clone(), []);
    let (with, _) = ClusterSnapshot::from_objects(churn.live.clone(), &churn.gone);
    let external = |ip: IpAddr| Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip));
    // Edges of the last minute (or since the pod started), from live pods' addresses.
    let recent: Vec<(Endpoint, Seen)> = churn
        .live
        .pods
        .iter()
        .step_by(CHURN_PODS / LOOKUPS)
        .map(|p| {
            let ip = p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref())
                .expect("an address");
            let started = p
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map_or(0, |t| t.0.as_nanosecond() as i64);
            let first = (churn.now - 60 * SECOND).max(started);
            let seen = Seen::between(Timestamp(first), Timestamp(churn.now));
            (external(ip.parse().expect("an address")), seen)
        })
        .collect();
    // Edges of gone pods, seen during their lifetime (the last minute before each went).
    let past: Vec<(Endpoint, Seen)> = churn
        .past
        .iter()
        .rev()
        .step_by(churn.past.len() / LOOKUPS)
        .map(|&(ip, start, end)| {
            let first = (end - 60 * SECOND).max(start);
            (
                external(ip),
                Seen::between(Timestamp(first), Timestamp(end - 1)),
            )
        })
        .collect();
    assert_eq!(
        lookups(&with, &recent),
        recent.len(),
        "live addresses resolve with the history"
    );
    assert_eq!(
        lookups(&plain, &recent),
        recent.len(),
        "live addresses resolve without it"
    );
    assert_eq!(
        lookups(&with, &past),
        past.len(),
        "each gone pod's address resolves to it"
    );

    let mut group = c.benchmark_group("snapshot/history");
    group.sample_size(10);
    group.throughput(Throughput::Elements(CHURN_PODS as u64));
    group.bench_function("build/none", |b| {
        b.iter_batched(
            || churn.live.clone(),
            |o| black_box(ClusterSnapshot::from_objects(o, [])),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("build/72000_gone", |b| {
        b.iter_batched(
            || churn.live.clone(),
            |o| black_box(ClusterSnapshot::from_objects(o, &churn.gone)),
            BatchSize::LargeInput,
        )
    });
    group.sample_size(20);
    group.throughput(Throughput::Elements(LOOKUPS as u64));
    group.bench_function("resolve_live_address/none", |b| {
        b.iter(|| lookups(&plain, &recent))
    });
    group.bench_function("resolve_live_address/72000_gone", |b| {
        b.iter(|| lookups(&with, &recent))
    });
    group.bench_function("resolve_gone_address/72000_gone", |b| {
        b.iter(|| lookups(&with, &past))
    });
    group.finish();
}

criterion_group!(benches, snapshot, history);
criterion_main!(benches);
