//! Learning: aggregated edges → one proposal per workload and direction. Offline `learn`
//! learns a capture aggregated in a `FlowTable` in one go ([`learn`]); the leader's rounds
//! learn the merged index round after round, from what changed in it ([`Learning`]). The
//! rules are the same (`ne_policy::allowlist`); only the edges' origin and the resolver
//! differ.

use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_flow::table::EdgeSnapshot;
use ne_policy::allowlist::{self, AggregatedEdge, Incremental, LearnOptions, LearnSummary};
use ne_policy::index::MergedEdge;
use ne_policy::resolve::Resolver;

use crate::ingest::Changes;
use crate::violations::detect::Traffic;

/// What learning made of a set of edges.
#[derive(Debug, Default)]
pub struct Learned {
    pub summary: LearnSummary,
    /// One proposal (with its evidence as status) per allow-list.
    pub proposals: Vec<WorkloadNetworkPolicyProposal>,
    /// Allow-lists that could not be rendered, as `subject direction: why`. Learning makes
    /// allow-lists of subjects and expressible peers only, so this stays empty; should one
    /// fail, the others are still proposed.
    pub unrendered: Vec<String>,
}

/// Learns the allow-lists of `edges`, endpoints resolved by `resolver`, and renders them
/// as proposals.
pub fn learn<'a>(
    edges: impl IntoIterator<Item = AggregatedEdge<'a>>,
    resolver: &dyn Resolver,
    provider: Provider,
    options: &LearnOptions,
) -> Learned {
    let learned = allowlist::learn(edges, resolver, provider, options);
    let mut proposals = Vec::with_capacity(learned.allow_lists.len());
    let mut unrendered = Vec::new();
    for list in &learned.allow_lists {
        match allowlist::render_proposal_with_status(list) {
            Ok(p) => proposals.push(p),
            Err(e) => unrendered.push(format!("{} {}: {e}", list.subject, list.direction)),
        }
    }
    Learned {
        summary: learned.summary,
        proposals,
        unrendered,
    }
}

/// The edges of the leader's merged index.
pub fn merged(edges: &[MergedEdge]) -> impl Iterator<Item = AggregatedEdge<'_>> {
    edges.iter().map(aggregated)
}

/// The edges of a `FlowTable` (an offline capture).
pub fn snapshots(edges: &[EdgeSnapshot]) -> impl Iterator<Item = AggregatedEdge<'_>> {
    edges.iter().map(|s| AggregatedEdge {
        edge: &s.edge,
        count: s.count,
        first_seen: s.first_seen,
        last_seen: s.last_seen,
    })
}

/// What the leader learns with, round after round: a copy of the merged indexes by slot,
/// kept up to date from what changed in them ([`Changes`]), which is the traffic detection
/// reads, and the allow-lists learned from it. A round costs the edges that changed since
/// the last one, and every edge only when the resolver changed.
#[derive(Debug)]
pub struct Learning {
    edges: Vec<MergedEdge>,
    denials: Vec<MergedEdge>,
    audits: Vec<MergedEdge>,
    /// Slots of learned edges changed since they were last learned.
    pending: Vec<u32>,
    learner: Incremental,
    /// The generation of the resolver last learned with.
    resolved_with: Option<u64>,
}

impl Learning {
    /// Nothing held, nothing learned.
    pub fn new(provider: Provider, options: LearnOptions) -> Self {
        Learning {
            edges: Vec::new(),
            denials: Vec::new(),
            audits: Vec::new(),
            pending: Vec::new(),
            learner: Incremental::new(provider, options),
            resolved_with: None,
        }
    }

    /// Takes what changed in the indexes into the copy (all of what one
    /// `IndexHandle::changes` returned: every slot is new or known).
    pub fn take(&mut self, changes: Changes) {
        self.pending
            .extend(changes.edges.iter().map(|(slot, _)| *slot));
        put(&mut self.edges, changes.edges);
        put(&mut self.denials, changes.denials);
        put(&mut self.audits, changes.audits);
    }

    /// Learns the edges changed since the last call, resolved by `resolver`; every edge
    /// when `generation` (the resolver's: it must change whenever the resolver does) is
    /// not the one of the last call. Whether anything learned changed: the proposals or
    /// the summary.
    pub fn learn(&mut self, resolver: &dyn Resolver, generation: u64) -> bool {
        let pending = std::mem::take(&mut self.pending);
        let learner = &mut self.learner;
        let edges = &self.edges;
        let mut learn = |slot: u32| {
            if let Some(m) = edges.get(slot as usize) {
                learner.learn(slot, aggregated(m), resolver);
            }
        };
        if self.resolved_with == Some(generation) {
            pending.into_iter().for_each(&mut learn);
        } else {
            (0..edges.len())
                .filter_map(|s| u32::try_from(s).ok())
                .for_each(&mut learn);
            self.resolved_with = Some(generation);
        }
        self.learner.finish()
    }

    /// The traffic held: every merged edge of every class.
    pub fn traffic(&self) -> Traffic<'_> {
        Traffic {
            edges: &self.edges,
            denials: &self.denials,
            audits: &self.audits,
        }
    }

    /// What was learned by the last [`Learning::learn`].
    pub fn learned(&self) -> &Incremental {
        &self.learner
    }
}

/// Puts each changed entry in its slot of `held`: a known slot is replaced, the next one
/// appended. A slot past the next would mean changes were lost (a second consumer of
/// `IndexHandle::changes`); it is logged and left out.
fn put(held: &mut Vec<MergedEdge>, mut changes: Vec<(u32, MergedEdge)>) {
    changes.sort_unstable_by_key(|(slot, _)| *slot);
    for (slot, m) in changes {
        let at = slot as usize;
        match at.cmp(&held.len()) {
            std::cmp::Ordering::Less => held[at] = m,
            std::cmp::Ordering::Equal => held.push(m),
            std::cmp::Ordering::Greater => {
                tracing::error!(
                    slot,
                    held = held.len(),
                    "an index change skipped slots; left out"
                );
            }
        }
    }
}

fn aggregated(m: &MergedEdge) -> AggregatedEdge<'_> {
    AggregatedEdge {
        edge: &m.edge,
        count: m.count,
        first_seen: m.first_seen,
        last_seen: m.last_seen,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use ne_flow::edge::Edge;
    use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind};
    use ne_policy::index::{AgentId, EdgeIndex};
    use ne_policy::resolve::{RecordOnly, Resolution, Seen};

    use super::*;

    /// [`RecordOnly`], counting the endpoints it resolves.
    #[derive(Default)]
    struct Counting(Cell<usize>);

    impl Resolver for Counting {
        fn resolve_at(&self, endpoint: &Endpoint, seen: Seen) -> Resolution {
            self.0.set(self.0.get() + 1);
            RecordOnly.resolve_at(endpoint, seen)
        }
    }

    fn workload(name: &str) -> Endpoint {
        let w = ne_flow::flow::WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: name.into(),
        };
        Endpoint::new(EndpointId::Workload(w)).with_labels(ne_flow::flow::labels([("app", name)]))
    }

    fn snap(peer: &str, port: u16, count: u64, last: i64) -> EdgeSnapshot {
        EdgeSnapshot {
            edge: Edge {
                subject: workload("web"),
                direction: Direction::Ingress,
                peer: workload(peer),
                protocol: Protocol::Tcp,
                port,
                peer_dns: None,
                denied_by: None,
            },
            count,
            first_seen: Timestamp::from_secs(10),
            last_seen: Timestamp::from_secs(last),
            serial: 1,
        }
    }

    fn drain(index: &mut EdgeIndex) -> Changes {
        Changes {
            edges: index.drain_changed().map(|(s, m)| (s, m.clone())).collect(),
            ..Changes::default()
        }
    }

    /// What one go over the whole index learns.
    fn at_once(index: &EdgeIndex) -> Vec<WorkloadNetworkPolicyProposal> {
        let edges: Vec<MergedEdge> = index.merged().cloned().collect();
        learn(
            merged(&edges),
            &RecordOnly,
            Provider::Cilium,
            &LearnOptions::default(),
        )
        .proposals
    }

    #[test]
    fn a_round_resolves_what_changed_and_every_edge_after_the_resolver_changed() {
        let agent = AgentId::from("node-1");
        let mut index = EdgeIndex::new(100);
        let mut learning = Learning::new(Provider::Cilium, LearnOptions::default());
        let resolver = Counting::default();
        let resolved = |f: &mut dyn FnMut()| {
            let before = resolver.0.get();
            f();
            resolver.0.get() - before
        };

        index.apply(
            &agent,
            1,
            &[
                snap("a", 80, 1, 20),
                snap("b", 80, 1, 20),
                snap("c", 443, 1, 20),
            ],
        );
        learning.take(drain(&mut index));
        // Both ends of each of the three edges.
        assert_eq!(resolved(&mut || assert!(learning.learn(&resolver, 0))), 6);
        assert_eq!(learning.learned().proposals(), at_once(&index));
        assert_eq!(learning.traffic().edges.len(), 3);

        // One edge grew, one is new: only they are resolved.
        index.apply(&agent, 1, &[snap("b", 80, 5, 30), snap("d", 8080, 1, 30)]);
        learning.take(drain(&mut index));
        assert_eq!(resolved(&mut || assert!(learning.learn(&resolver, 0))), 4);
        assert_eq!(learning.learned().proposals(), at_once(&index));
        let held: Vec<&MergedEdge> = learning.traffic().edges.iter().collect();
        assert_eq!(held, index.merged().collect::<Vec<_>>());

        // Nothing changed: nothing resolved, nothing learned.
        learning.take(drain(&mut index));
        assert_eq!(resolved(&mut || assert!(!learning.learn(&resolver, 0))), 0);

        // A resolver of another generation: every edge again (the same answers here).
        assert_eq!(resolved(&mut || assert!(!learning.learn(&resolver, 1))), 8);
        assert_eq!(learning.learned().proposals(), at_once(&index));
    }

    #[test]
    fn changes_that_skip_a_slot_are_left_out_not_misplaced() {
        let agent = AgentId::from("node-1");
        let mut index = EdgeIndex::new(100);
        index.apply(&agent, 1, &[snap("a", 80, 1, 20), snap("b", 80, 1, 20)]);
        let mut changes = drain(&mut index);
        // Slot 0 lost: slot 1 cannot be placed.
        changes.edges.retain(|(slot, _)| *slot == 1);
        let mut learning = Learning::new(Provider::Cilium, LearnOptions::default());
        learning.take(changes);
        assert!(learning.traffic().edges.is_empty());
        assert!(!learning.learn(&RecordOnly, 0));
    }
}
