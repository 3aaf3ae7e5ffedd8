//! The resolver snapshot of a live controller round (`leader::controller::state::Stores`):
//! built once from the cached objects (`ClusterSnapshot::from_objects`, the same code as
//! `learn --cluster`), then kept current by applying the objects that changed
//! (`ClusterSnapshot::apply`).
//!
//! Cluster shape: `ne_benches::cluster::cluster` (5 pods per Deployment, 20 Deployments
//! per namespace). Sizes: 1 000 and 10 000 pods.
//!
//! `changes`: at 10 000 and 100 000 pods, a build beside the changes a round applies: one
//! second of churn at 20 pod replacements per second (40 pod changes, the gone pods
//! forgotten again as a full history does), a Deployment's status update, and a
//! Deployment's selector change (its pods resolve again). Each change is applied and then
//! undone, so the snapshot stays the same size.
//!
//! `history`: the same 10 000 pods after an hour of churn at 20 pod replacements per
//! second (72 000 gone pods, within the leader's default retention of 90 minutes): a
//! rebuild with the history and address lookups against it, each beside the same cluster
//! without history. Memory: `benches/benches/snapshot_memory.rs`.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::cluster::{
    CHURN_PODS, Churn, SECOND, churn, cluster, deployment_change, replacements,
};
use ne_flow::flow::{Endpoint, EndpointId, Timestamp};
use ne_policy::resolve::{ClusterChanges, ClusterSnapshot, Resolution, Resolver, Seen};

/// Lookups per timed iteration.
const LOOKUPS: usize = 1_000;

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

/// Applies `forth`, then `back` on the next call, and so on; forgets the pods gone.
fn flip(snapshot: &mut ClusterSnapshot, pair: &(ClusterChanges, ClusterChanges), odd: &mut bool) {
    let changes = if *odd { &pair.1 } else { &pair.0 };
    *odd = !*odd;
    let gone = snapshot.apply(changes.clone(), Timestamp(0));
    snapshot.forget(&gone);
    black_box(gone);
}

fn changes(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot/changes");
    group.sample_size(10);
    for pods in [10_000, 100_000] {
        let objects = cluster(pods);
        group.bench_with_input(BenchmarkId::new("build", pods), &objects, |b, objects| {
            b.iter(|| black_box(ClusterSnapshot::from_objects(objects.clone(), [])))
        });
        let cases = [
            ("apply_20_pod_replacements", replacements(&objects, 20)),
            ("apply_deployment_status", deployment_change(&objects, true)),
            (
                "apply_deployment_selector",
                deployment_change(&objects, false),
            ),
        ];
        for (name, pair) in &cases {
            let (mut snapshot, _) = ClusterSnapshot::from_objects(objects.clone(), []);
            let before = snapshot.pod_count();
            let mut odd = false;
            flip(&mut snapshot, pair, &mut odd);
            flip(&mut snapshot, pair, &mut odd);
            assert_eq!(snapshot.pod_count(), before, "{name} undone keeps the size");
            group.bench_function(BenchmarkId::new(*name, pods), |b| {
                b.iter(|| flip(&mut snapshot, pair, &mut odd))
            });
        }
    }
    group.finish();
}

fn lookups(snapshot: &ClusterSnapshot, queries: &[(Endpoint, Seen)]) -> usize {
    queries
        .iter()
        .filter(|(e, seen)| matches!(snapshot.resolve_at(e, *seen), Resolution::Pod(_)))
        .count()
}

fn history(c: &mut Criterion) {
    let churn: Churn = churn();
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

criterion_group!(benches, snapshot, changes, history);
criterion_main!(benches);
