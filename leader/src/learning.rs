//! Learning: aggregated edges → one proposal per workload and direction. The one place for
//! offline `learn`, the controller's round and `run --output` alike; only the edges' origin
//! (a capture aggregated in a `FlowTable`, or the merged index) and the resolver differ.

use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_flow::table::EdgeSnapshot;
use ne_policy::allowlist::{self, AggregatedEdge, LearnOptions, LearnSummary};
use ne_policy::index::MergedEdge;
use ne_policy::resolve::Resolver;

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
    edges.iter().map(|m| AggregatedEdge {
        edge: &m.edge,
        count: m.count,
        first_seen: m.first_seen,
        last_seen: m.last_seen,
    })
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
