//! The inputs of one controller round at a large cluster's size, shared by the `round`
//! bench and `ne-round` (one stage once, for `valgrind --tool=callgrind`).
//!
//! Shape: [`crate::cluster::cluster`]`(10 000)` (2 000 Deployments in 100 namespaces);
//! 100 000 merged ingress edges between them on 50 ports; 1 000 of the Deployments'
//! learned proposals promoted to monitor-mode policies, each with its last rule dropped so
//! that part of the traffic is a violation.

use ne_crds::{Mode, WorkloadNetworkPolicy};
use ne_flow::edge::{Edge, Provider};
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_leader::ingest::Changes;
use ne_leader::learning::{self, Learned, Learning};
use ne_policy::allowlist::LearnOptions;
use ne_policy::index::MergedEdge;
use ne_policy::resolve::ClusterSnapshot;

use crate::cluster::cluster;

pub const PODS: usize = 10_000;
pub const DEPLOYMENTS: usize = PODS / 5;
pub const EDGES: usize = 100_000;
pub const POLICIES: usize = 1_000;

/// The resolver, the merged edges and the promoted policies of the round.
#[derive(Debug)]
pub struct Fixture {
    pub snapshot: ClusterSnapshot,
    pub edges: Vec<MergedEdge>,
    pub policies: Vec<WorkloadNetworkPolicy>,
}

fn deployment(d: usize) -> Endpoint {
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: format!("ns-{}", d / 20).into(),
        kind: WorkloadKind::Deployment,
        name: format!("app-{d}").into(),
    }))
}

/// [`EDGES`] ingress edges: each Deployment is reached by 50 others, on one port each.
pub fn merged() -> Vec<MergedEdge> {
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

impl Fixture {
    pub fn new() -> Self {
        let (snapshot, _) = ClusterSnapshot::from_objects(cluster(PODS), []);
        let edges = merged();
        let mut fixture = Fixture {
            snapshot,
            edges,
            policies: Vec::new(),
        };
        let learned = fixture.learn();
        assert_eq!(
            learned.proposals.len(),
            DEPLOYMENTS,
            "one ingress proposal each"
        );
        // The first POLICIES proposals, promoted in monitor mode with their last rule
        // dropped.
        fixture.policies = learned.proposals[..POLICIES]
            .iter()
            .map(|p| {
                let mut spec = p.spec.promoted(Mode::Monitor);
                if let Some(rules) = spec.kubernetes.as_mut().and_then(|k| k.ingress.as_mut()) {
                    rules.pop();
                }
                let name = p.metadata.name.as_deref().unwrap_or_default();
                let mut w = WorkloadNetworkPolicy::new(name, spec);
                w.metadata.namespace = p.metadata.namespace.clone();
                w.metadata.uid = Some(format!("uid-{name}"));
                w
            })
            .collect();
        fixture
    }

    /// The learn stage as a round did it before rounds learned what changed: every merged
    /// edge → proposals, in one go.
    pub fn learn(&self) -> Learned {
        learning::learn(
            learning::merged(&self.edges),
            &self.snapshot,
            Provider::Cilium,
            &LearnOptions::default(),
        )
    }

    /// The leader's learning after its first round: every edge taken in and learned,
    /// with the resolver of generation 0.
    pub fn learning(&self) -> Learning {
        let mut learning = Learning::new(Provider::Cilium, LearnOptions::default());
        learning.take(self.changes(EDGES, 0));
        learning.learn(&self.snapshot, 0);
        learning
    }

    /// What changed in the index in a round where `n` edges each saw `round` more flows,
    /// the last of them `round` seconds later: every 101st slot, round the index, so that
    /// the edges changed are of as many allow-lists as they can be (101 is prime to the
    /// number of edges and of Deployments).
    pub fn changes(&self, n: usize, round: u64) -> Changes {
        let len = self.edges.len();
        let edges = (0..n.min(len))
            .map(|k| (k * 101) % len)
            .map(|at| {
                let slot = u32::try_from(at).unwrap_or(u32::MAX);
                let mut m = self.edges[at].clone();
                m.count += round;
                m.last_seen =
                    Timestamp(m.last_seen.0 + i64::try_from(round).unwrap_or(0) * 1_000_000_000);
                (slot, m)
            })
            .collect();
        Changes {
            edges,
            ..Changes::default()
        }
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Fixture::new()
    }
}
