use std::borrow::Cow;
use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::allowlist::tests::{
    Agg, MapResolver, arb_edge, arb_provider, assert_accounted, cluster, ep, no_options, pod, run,
};
use crate::resolve::Resolution;
use ne_flow::edge::Edge;
use ne_flow::flow::{Endpoint, EndpointId};

/// A resolver that lends its resolutions, as a cluster snapshot does (the key caches are
/// used only then).
struct Lending(MapResolver);

impl Resolver for Lending {
    fn resolve_at(&self, endpoint: &Endpoint, seen: Seen) -> Resolution {
        self.0.resolve_at(endpoint, seen)
    }

    fn resolve_shared(&self, endpoint: &Endpoint, seen: Seen) -> Cow<'_, Resolution> {
        match self.0.0.get(&endpoint.id) {
            Some(r) => Cow::Borrowed(r),
            None => Cow::Owned(self.0.resolve_at(endpoint, seen)),
        }
    }
}

/// The test cluster after some changes: shop/web has a new selector, shop/db is gone and
/// kube-system/coredns is now a Job's.
fn changed_cluster() -> MapResolver {
    let mut m = cluster();
    let web = ep("shop", WorkloadKind::Deployment, "web").id;
    let mut p = pod("shop", WorkloadKind::Deployment, "web");
    p.selector = Some(crate::eval::selector::tests::sel(&[("app", "web-v2")], &[]));
    m.0.insert(web, Resolution::Pod(p));
    m.0.remove(&ep("shop", WorkloadKind::StatefulSet, "db").id);
    let coredns = ep("kube-system", WorkloadKind::Deployment, "coredns").id;
    m.0.insert(
        coredns,
        Resolution::Pod(pod("kube-system", WorkloadKind::Job, "coredns")),
    );
    m
}

fn aggregated((edge, count, first, last): &Agg) -> AggregatedEdge<'_> {
    AggregatedEdge {
        edge,
        count: *count,
        first_seen: Timestamp::from_secs(*first),
        last_seen: Timestamp::from_secs(*last),
    }
}

/// What a round does to one slot.
#[derive(Clone, Debug)]
enum Update {
    /// Another edge, or the same with other values (counts and windows may shrink).
    Replace(Box<Agg>),
    /// The slot's edge, its count and window grown (what the index does to an edge).
    Grow {
        count: u64,
        earlier: i64,
        later: i64,
    },
    /// The slot's edge with another DNS name for its peer (the index may take another
    /// incarnation's metadata), or none.
    Name(Option<u8>),
}

fn arb_update() -> impl Strategy<Value = (u32, Update)> {
    let update = prop_oneof![
        arb_edge().prop_map(|agg| Update::Replace(Box::new(agg))),
        (0..5u64, 0..3i64, 0..3i64).prop_map(|(count, earlier, later)| Update::Grow {
            count,
            earlier,
            later
        }),
        prop::option::of(0..10u8).prop_map(Update::Name),
    ];
    (0..12u32, update)
}

/// The one-go learner's proposals, rendered as a round renders them.
fn rendered(learned: &super::super::Learned) -> Vec<WorkloadNetworkPolicyProposal> {
    learned
        .allow_lists
        .iter()
        .map(|l| render_proposal_with_status(l).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the rounds, the incremental learner says what the one-go learner says of
    /// the edges each slot holds, with the last round's resolver; and a round it reports
    /// as unchanged left every output as it was.
    #[test]
    fn rounds_learn_what_one_go_learns(
        rounds in prop::collection::vec((prop::collection::vec(arb_update(), 0..6), 0..2usize), 1..8),
        provider in arb_provider(),
        exclude in any::<bool>(),
    ) {
        let resolvers = [Lending(cluster()), Lending(changed_cluster())];
        let mut options = no_options();
        if exclude {
            options.exclude_namespaces.insert("kube-system".into());
        }
        let mut learner = Incremental::new(provider, options.clone());
        let mut held: BTreeMap<u32, Agg> = BTreeMap::new();
        let mut last_resolver = None;
        for (updates, r) in rounds {
            let resolver = &resolvers[r];
            let mut given = Vec::new();
            for (slot, update) in updates {
                match update {
                    Update::Replace(agg) => {
                        held.insert(slot, *agg);
                    }
                    Update::Grow { count, earlier, later } => {
                        let Some((_, c, first, last)) = held.get_mut(&slot) else { continue };
                        *c += count;
                        *first -= earlier;
                        *last += later;
                    }
                    Update::Name(name) => {
                        let Some((edge, ..)) = held.get_mut(&slot) else { continue };
                        edge.peer_dns = name.map(|n| format!("d{n}.example.com").into());
                    }
                }
                given.push(slot);
            }
            if last_resolver != Some(r) {
                given = held.keys().copied().collect();
            }
            last_resolver = Some(r);
            let before = (learner.proposals().to_vec(), learner.summary());
            for slot in given {
                if let Some(agg) = held.get(&slot) {
                    learner.learn(slot, aggregated(agg), resolver);
                }
            }
            let changed = learner.finish();

            let edges: Vec<Agg> = held.values().cloned().collect();
            let reference = run(&edges, &resolver.0, provider, &options);
            let summary = learner.summary();
            prop_assert_eq!(&summary, &reference.summary);
            assert_accounted(&summary);
            let proposals = rendered(&reference);
            prop_assert_eq!(learner.proposals(), proposals.as_slice());
            prop_assert_eq!(learner.allow_lists(), reference.summary.allow_lists.as_slice());
            prop_assert_eq!(learner.unrendered().count(), 0);
            if !changed {
                prop_assert_eq!(before, (learner.proposals().to_vec(), summary));
            }
        }
    }
}

fn ingress(peer: &Endpoint, port: u16) -> Edge {
    Edge {
        subject: ep("shop", WorkloadKind::Deployment, "web"),
        direction: Direction::Ingress,
        peer: peer.clone(),
        protocol: Protocol::Tcp,
        port,
        peer_dns: None,
        denied_by: None,
    }
}

fn evidence(learner: &Incremental) -> Vec<(String, i32, i64, Option<String>)> {
    let p = &learner.proposals()[0];
    let status = p.status.as_ref().unwrap();
    status
        .peers
        .iter()
        .map(|e| {
            let first = e.first_seen.0.as_second();
            (
                e.peer.clone(),
                e.port,
                e.flow_count,
                Some(first.to_string()),
            )
        })
        .collect()
}

#[test]
fn an_edge_that_moves_leaves_its_rule_summed_from_the_edges_still_in_it() {
    let r = cluster();
    let db = ep("shop", WorkloadKind::StatefulSet, "db");
    let agent = ep("other", WorkloadKind::DaemonSet, "agent");
    let early = (ingress(&db, 5432), 3, 10, 20);
    let late = (ingress(&db, 5432), 4, 30, 40);
    let mut learner = Incremental::new(Provider::Cilium, no_options());
    learner.learn(0, aggregated(&early), &r);
    learner.learn(1, aggregated(&late), &r);
    assert!(learner.finish());
    let both = evidence(&learner);
    assert_eq!(both.len(), 1);
    assert_eq!((both[0].2, both[0].3.as_deref()), (7, Some("10")));

    // The early edge is now of another peer: the db rule keeps the late edge alone.
    let moved = (ingress(&agent, 5432), 3, 10, 20);
    learner.learn(0, aggregated(&moved), &r);
    assert!(learner.finish());
    let rows = evidence(&learner);
    let db_row = rows.iter().find(|row| row.0.contains("db")).unwrap();
    assert_eq!((db_row.2, db_row.3.as_deref()), (4, Some("30")));
    assert_eq!(rows.len(), 2);

    // The same edges again change nothing.
    learner.learn(0, aggregated(&moved), &r);
    learner.learn(1, aggregated(&late), &r);
    assert!(!learner.finish());
}

#[test]
fn an_edge_grown_in_place_adds_its_growth_to_its_rule() {
    let r = cluster();
    let db = ep("shop", WorkloadKind::StatefulSet, "db");
    let mut learner = Incremental::new(Provider::Cilium, no_options());
    learner.learn(0, aggregated(&(ingress(&db, 5432), 3, 10, 20)), &r);
    learner.learn(1, aggregated(&(ingress(&db, 5432), 1, 15, 16)), &r);
    learner.finish();
    learner.learn(0, aggregated(&(ingress(&db, 5432), 8, 5, 50)), &r);
    assert!(learner.finish());
    let rows = evidence(&learner);
    assert_eq!((rows[0].2, rows[0].3.as_deref()), (9, Some("5")));
    let summary = learner.summary();
    assert_eq!(summary.input, Tally { edges: 2, flows: 9 });
    assert_eq!(summary.learned, summary.input);
}

#[test]
fn a_list_whose_edges_all_left_is_gone_from_every_output() {
    let r = cluster();
    let db = ep("shop", WorkloadKind::StatefulSet, "db");
    let mut learner = Incremental::new(Provider::Cilium, no_options());
    learner.learn(0, aggregated(&(ingress(&db, 5432), 3, 10, 20)), &r);
    learner.finish();
    assert_eq!(learner.proposals().len(), 1);
    // The same slot now holds an edge of a subject that gets no allow-list.
    let mut batch = ingress(&db, 5432);
    batch.subject = ep("batch", WorkloadKind::Job, "report");
    learner.learn(0, aggregated(&(batch, 3, 10, 20)), &r);
    assert!(learner.finish());
    assert!(learner.proposals().is_empty());
    assert!(learner.allow_lists().is_empty());
    let summary = learner.summary();
    assert_eq!(summary.learned, Tally::default());
    assert_eq!(
        summary.not_a_subject.get(&WorkloadKind::Job),
        Some(&Tally { edges: 1, flows: 3 })
    );
    assert_eq!(summary.input, Tally { edges: 1, flows: 3 });
    let _ = EndpointId::Reserved(Reserved::Host);
}
