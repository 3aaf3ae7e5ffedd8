//! Memory of the leader's pod history: the bytes an hour of churn at 20 pod replacements
//! per second (10 000 pods, 72 000 gone) keeps alive, counted by the allocator (net bytes
//! allocated, exact and repeatable), and what `leader_pod_history_bytes` reports for them.
//!
//! `cargo bench -p ne-benches --bench snapshot_memory`

use std::hint::black_box;
use std::sync::Arc;

use ne_benches::cluster::churn;
use ne_policy::resolve::{ClusterObjects, ClusterSnapshot, GonePod};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// Net bytes allocated while `f` runs and still held after it, with what it returns.
fn held<T>(f: impl FnOnce() -> T) -> (T, i64) {
    ne_benches::alloc::held(ALLOCATOR, f)
}

/// A copy of every object, not of the `Arc`s.
fn deep_copy(o: &ClusterObjects) -> ClusterObjects {
    fn each<K: Clone>(v: &[Arc<K>]) -> Vec<Arc<K>> {
        v.iter().map(|k| Arc::new(K::clone(k))).collect()
    }
    ClusterObjects {
        namespaces: each(&o.namespaces),
        pods: each(&o.pods),
        replicasets: each(&o.replicasets),
        deployments: each(&o.deployments),
        statefulsets: each(&o.statefulsets),
        daemonsets: each(&o.daemonsets),
        jobs: each(&o.jobs),
        cronjobs: each(&o.cronjobs),
    }
}

fn main() {
    // `churn` drops the snapshots it derived the gone pods from, so what it leaves held is
    // the live objects and the history, as in the leader; a deep copy of the live objects
    // tells them apart. The resolvers share the live objects (as the leader's share its
    // caches'), so their figures are what a resolver adds to the caches.
    let (churn, both) = held(churn);
    let (live_copy, live) = held(|| deep_copy(&churn.live));
    drop(live_copy);
    let past = (churn.past.capacity() * size_of_val(&churn.past[0])) as i64;
    let history = both - live - past;
    let gone = &churn.gone;
    let n = gone.len() as f64;
    let accounted: usize = gone
        .iter()
        .map(|g| size_of::<GonePod>() + g.heap_bytes())
        .sum();
    let (plain, without) = held(|| ClusterSnapshot::from_objects(churn.live.clone(), []));
    let (with, with_history) = held(|| ClusterSnapshot::from_objects(churn.live.clone(), gone));
    println!(
        "snapshot_memory: {} gone pods; history {:.0} B per gone pod (allocator), {:.0} B (leader_pod_history_bytes); resolver {:.1} MiB without history, {:.1} MiB with (+{:.0} B per gone pod)",
        gone.len(),
        history as f64 / n,
        accounted as f64 / n,
        without as f64 / 1_048_576.0,
        with_history as f64 / 1_048_576.0,
        (with_history - without) as f64 / n,
    );
    black_box((plain, with));
}
