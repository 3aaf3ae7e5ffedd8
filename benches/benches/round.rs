//! One controller round's work after the resolver snapshot, at a large cluster's size:
//! learning (merged edges → proposals: every edge in one go, as rounds did before, and the
//! 1 % that changed into what was learned, as they do now), violation detection (every forwarded edge whose
//! subject a monitor-mode policy covers, checked with the policy's real semantics), the
//! `ProtectSafe` facts, and the planner over all of it. Each stage is timed alone, on the
//! output of the one before, as `Controller::round` chains them.
//!
//! Shape: `ne_benches::round::Fixture` (10 000 pods, 100 000 merged edges, 1 000
//! monitor-mode policies). `ne-round <stage>` runs one stage once, for callgrind.
//!
//! Command: `cargo bench -p ne-benches --bench round -- --warm-up-time 1 --measurement-time 10`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use ne_benches::round::{EDGES, Fixture, POLICIES};
use ne_flow::edge::Provider;
use ne_leader::controller::plan::{self, Config, Workload, World};
use ne_leader::controller::safety::{self, HostTraffic};
use ne_leader::violations::detect::{Traffic, detect};

fn config() -> Config {
    Config {
        backend: ne_policy::allowlist::backend_for(Provider::Cilium),
        excluded_namespaces: Default::default(),
        stable_after: Duration::from_secs(600),
        status_refresh: Duration::from_secs(60),
    }
}

fn round(c: &mut Criterion) {
    let fixture = Fixture::new();
    let (snapshot, edges, policies) = (&fixture.snapshot, &fixture.edges, &fixture.policies);
    let learned = fixture.learn();
    let traffic = Traffic {
        edges,
        ..Traffic::default()
    };
    let detected = detect(traffic, policies, snapshot, ne_crds::Backend::Kubernetes);
    let violating: usize = detected.observations.values().map(Vec::len).sum();
    assert!(
        violating > 0 && detected.allowed > 0,
        "both kinds of traffic"
    );
    let facts = || {
        safety::facts(
            policies,
            &learned.proposals,
            snapshot,
            &learned.summary.allow_lists,
            HostTraffic::Allowed,
        )
    };
    let safety = facts();
    let workloads: BTreeMap<_, _> = learned
        .proposals
        .iter()
        .map(|p| {
            let target = &p.spec.target_ref;
            let namespace = p.metadata.namespace.clone().unwrap_or_default();
            (
                (namespace.clone(), target.kind, target.name.clone()),
                Workload {
                    uid: format!("d-{namespace}-{}", target.name),
                    service_account: None,
                },
            )
        })
        .collect();
    let now = Time(jiff::Timestamp::from_second(1_800_000_100).unwrap());
    let rule_issues = BTreeMap::new();
    let world = World {
        learned: &learned.proposals,
        workloads: &workloads,
        proposals: &[],
        policies,
        network_policies: &[],
        authorization_policies: None,
        observations: &detected.observations,
        rule_issues: &rule_issues,
        safety: &safety,
        now: &now,
    };
    let config = config();
    println!(
        "round: {EDGES} merged edges, {} proposals, {POLICIES} monitor policies, {violating} \
         observations, {} edges allowed",
        learned.proposals.len(),
        detected.allowed
    );

    let mut group = c.benchmark_group("round");
    group.sample_size(10);
    group.bench_function("learn", |b| b.iter(|| black_box(fixture.learn())));
    // What a round learns now: the 1 % of the edges that changed, into the allow-lists
    // learned so far; and every edge again, as after the cluster changed.
    let mut learning = fixture.learning();
    let mut rounds = 0;
    group.bench_function("learn changed (1 %)", |b| {
        b.iter(|| {
            rounds += 1;
            learning.take(fixture.changes(EDGES / 100, rounds));
            black_box(learning.learn(snapshot, 0))
        })
    });
    let mut generation = 0;
    group.bench_function("learn every edge again (resolver changed)", |b| {
        b.iter(|| {
            generation += 1;
            black_box(learning.learn(snapshot, generation))
        })
    });
    group.bench_function("detect", |b| {
        b.iter(|| {
            black_box(detect(
                traffic,
                policies,
                snapshot,
                ne_crds::Backend::Kubernetes,
            ))
        })
    });
    group.bench_function("safety", |b| b.iter(|| black_box(facts())));
    group.bench_function("plan", |b| {
        b.iter(|| black_box(plan::plan(&world, &config)))
    });
    group.finish();
}

criterion_group!(benches, round);
criterion_main!(benches);
