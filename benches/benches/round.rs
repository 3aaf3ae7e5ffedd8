//! One controller round's work after the resolver snapshot, at a large cluster's size:
//! learning (merged edges → proposals), violation detection (every forwarded edge whose
//! subject a monitor-mode policy covers, checked with the policy's real semantics), the
//! `ProtectSafe` facts, and the planner over all of it. Each stage is timed alone, on the
//! output of the one before, as `Controller::round` chains them.
//!
//! Shape: `ne_benches::cluster::cluster(10 000)` (2 000 Deployments in 100 namespaces);
//! 100 000 merged ingress edges between them on 50 ports; 1 000 of the Deployments'
//! learned proposals promoted to monitor-mode policies, each with its last rule dropped so
//! that part of the traffic is a violation.
//!
//! Command: `cargo bench -p ne-benches --bench round -- --warm-up-time 1 --measurement-time 10`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use ne_benches::cluster::cluster;
use ne_crds::{Mode, WorkloadNetworkPolicy};
use ne_flow::edge::{Edge, Provider};
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_leader::controller::plan::{self, Config, Workload, World};
use ne_leader::controller::safety::{self, HostTraffic};
use ne_leader::violations::detect::{Traffic, detect};
use ne_policy::allowlist::LearnOptions;
use ne_policy::index::MergedEdge;
use ne_policy::resolve::ClusterSnapshot;

const PODS: usize = 10_000;
const DEPLOYMENTS: usize = PODS / 5;
const EDGES: usize = 100_000;
const POLICIES: usize = 1_000;

fn deployment(d: usize) -> Endpoint {
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: format!("ns-{}", d / 20).into(),
        kind: WorkloadKind::Deployment,
        name: format!("app-{d}").into(),
    }))
}

/// `EDGES` ingress edges: each Deployment is reached by 50 others, on one port each.
fn merged() -> Vec<MergedEdge> {
    (0..EDGES)
        .map(|i| {
            let subject = i % DEPLOYMENTS;
            let k = i / DEPLOYMENTS;
            let peer = (subject + 1 + k * 37) % DEPLOYMENTS;
            MergedEdge {
                edge: Edge {
                    subject: deployment(subject),
                    direction: Direction::Ingress,
                    peer: deployment(peer),
                    protocol: Protocol::Tcp,
                    port: 8000 + (k % 50) as u16,
                    peer_dns: None,
                    denied_by: None,
                },
                count: 10,
                first_seen: Timestamp::from_secs(1_800_000_000),
                last_seen: Timestamp::from_secs(1_800_000_060),
            }
        })
        .collect()
}

fn config() -> Config {
    Config {
        backend: ne_policy::allowlist::backend_for(Provider::Cilium),
        excluded_namespaces: Default::default(),
        stable_after: Duration::from_secs(600),
        status_refresh: Duration::from_secs(60),
    }
}

fn round(c: &mut Criterion) {
    let (snapshot, _) = ClusterSnapshot::from_objects(cluster(PODS), []);
    let edges = merged();
    let learn = || {
        ne_leader::learning::learn(
            ne_leader::learning::merged(&edges),
            &snapshot,
            Provider::Cilium,
            &LearnOptions::default(),
        )
    };
    let learned = learn();
    assert_eq!(
        learned.proposals.len(),
        DEPLOYMENTS,
        "one ingress proposal each"
    );
    // The first POLICIES proposals, promoted in monitor mode with their last rule dropped.
    let policies: Vec<WorkloadNetworkPolicy> = learned.proposals[..POLICIES]
        .iter()
        .map(|p| {
            let mut spec = p.spec.promoted(Mode::Monitor);
            if let Some(rules) = spec.kubernetes.as_mut().and_then(|k| k.ingress.as_mut()) {
                rules.pop();
            }
            let mut w =
                WorkloadNetworkPolicy::new(p.metadata.name.as_deref().unwrap_or_default(), spec);
            w.metadata.namespace = p.metadata.namespace.clone();
            w.metadata.uid = Some(format!(
                "uid-{}",
                p.metadata.name.as_deref().unwrap_or_default()
            ));
            w
        })
        .collect();
    let traffic = Traffic {
        edges: &edges,
        ..Traffic::default()
    };
    let detected = detect(traffic, &policies, &snapshot, ne_crds::Backend::Kubernetes);
    let violating: usize = detected.observations.values().map(Vec::len).sum();
    assert!(
        violating > 0 && detected.allowed > 0,
        "both kinds of traffic"
    );
    let facts = || {
        safety::facts(
            &policies,
            &learned.proposals,
            &snapshot,
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
        policies: &policies,
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
    group.bench_function("learn", |b| b.iter(|| black_box(learn())));
    group.bench_function("detect", |b| {
        b.iter(|| {
            black_box(detect(
                traffic,
                &policies,
                &snapshot,
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
