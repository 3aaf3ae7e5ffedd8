//! The resolver snapshot a live controller round rebuilds from its caches
//! (`leader::controller::state::Stores::snapshot`): every cached object cloned out of the
//! store, then `ClusterSnapshot::from_objects` (the same code as `learn --cluster`).
//!
//! Cluster shape: `ne_benches::cluster::cluster` (5 pods per Deployment, 20 Deployments
//! per namespace). Sizes: 1 000 and 10 000 pods.
//!
//! `history`: the same 10 000 pods after an hour of churn at 20 pod replacements per
//! second (72 000 gone pods, within the leader's default retention of 90 minutes): a
//! rebuild with the history and address lookups against it, each beside the same cluster
//! without history. Memory: `benches/benches/snapshot_memory.rs`.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::cluster::{CHURN_PODS, Churn, SECOND, churn, cluster};
use ne_flow::flow::{Endpoint, EndpointId, Timestamp};
use ne_policy::resolve::{ClusterSnapshot, Resolution, Resolver, Seen};

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

criterion_group!(benches, snapshot, history);
criterion_main!(benches);
