//! Detection: what the leader merged this round, turned into observations of the
//! policies they concern.
//!
//! - Monitor: every forwarded edge whose subject a `monitor`-mode policy covers is checked
//!   with real NetworkPolicy or Istio semantics ([`ne_policy::eval`], exactly as
//!   `ne-leader check` does); what the policy would not allow is an observation. ztunnel's
//!   dry-run deny lines (the dry-run AuthorizationPolicy of a monitored Istio workload)
//!   are the same signal: their observation carries no port and joins the record the
//!   check makes of the same connection (see [`super::record`]).
//! - Protect: connections the data plane denied are observations of the `protect`-mode
//!   policy covering their subject.
//!
//! Attribution is by the subject workload's `targetRef` and the edge's direction, never by
//! comparing selectors, so a workload's ingress and egress policies (which share one
//! selector) each get only their own traffic. Denials no policy covers are returned as
//! unattributed.

use std::collections::BTreeMap;
use std::hash::BuildHasher as _;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use ne_crds::{
    Backend, Mode, PolicyDirection, ViolationReason, WorkloadEndpointRef, WorkloadNetworkPolicy,
};
use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, Endpoint, EndpointId};
use ne_policy::allowlist::kube_time;
use ne_policy::eval::{Decision, DenyReason};
use ne_policy::index::MergedEdge;
use ne_policy::resolve::{Resolution, Resolver, Seen};

use super::record::{Observation, UNKNOWN_PORT};
use crate::attribution::{Target, Targets};

/// A policy's key: (`namespace`, `name`).
pub type PolicyKey = (String, String);

/// What the leader merged this round, by verdict (the agents ship each class apart).
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic<'a> {
    /// Forwarded traffic: checked against `monitor`-mode policies.
    pub edges: &'a [MergedEdge],
    /// Connections a data plane denied (Hubble policy drops, Goldmane `Deny`, ztunnel
    /// policy rejections): observations of `protect`-mode policies.
    pub denials: &'a [MergedEdge],
    /// Connections a dry-run policy would have denied (ztunnel's dry-run lines): the same
    /// signal as a `monitor`-mode check, and merged into the same record.
    pub audits: &'a [MergedEdge],
}

/// Observations per policy, what matched no policy, and what could not be checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Detected {
    pub observations: BTreeMap<PolicyKey, Vec<Observation>>,
    /// Denials and dry-run denials whose subject no policy of that mode covers (a policy
    /// the user wrote by hand, a workload without a policy): counted and exported with an
    /// empty policy reference, never written to a status.
    pub unattributed: Vec<Observation>,
    /// Edges a monitored policy allows.
    pub allowed: u64,
    /// Edges under a monitored NetworkPolicy whose peer is not resolved at their time, by
    /// reason: whether the policy allows them cannot be told, so they make no record.
    pub unresolved_peers: BTreeMap<&'static str, u64>,
    /// Edges a policy could not be evaluated on (an invalid spec), by policy.
    pub errors: BTreeMap<PolicyKey, String>,
}

/// One end of a connection as the violation record names it.
pub fn endpoint_ref(endpoint: &Endpoint, resolution: &Resolution) -> WorkloadEndpointRef {
    let mut r = WorkloadEndpointRef {
        identity: endpoint.identity.as_ref().map(ToString::to_string),
        ip: endpoint.ip.map(|ip| ip.to_string()),
        ..WorkloadEndpointRef::default()
    };
    match (resolution, &endpoint.id) {
        (Resolution::Pod(p), _) => {
            r.namespace = Some(p.namespace.to_string());
            if let Some(owner) = &p.owner {
                r.kind = Some(owner.kind.as_str().to_owned());
                r.name = Some(owner.name.to_string());
            }
        }
        (Resolution::External(ip), _) => r.ip = Some(ip.to_string()),
        (Resolution::Reserved(reserved), _) => {
            r.kind = Some("Reserved".to_owned());
            r.name = Some(reserved.as_str().to_owned());
        }
        (Resolution::Unresolved(_), EndpointId::Pod { namespace, name }) => {
            r.namespace = Some(namespace.to_string());
            r.kind = Some("Pod".to_owned());
            r.name = Some(name.to_string());
        }
        (Resolution::Unresolved(_), _) => {}
    }
    r
}

/// The policies of `backend` in `mode`, by what they target (the CRDs' rules allow one
/// policy per target; should two exist, the later one is used).
fn by_target(
    policies: &[WorkloadNetworkPolicy],
    backend: Backend,
    mode: Mode,
) -> Targets<'_, WorkloadNetworkPolicy> {
    Targets::latest(
        policies
            .iter()
            .filter(|w| w.spec.mode == mode && w.spec.backend == backend),
    )
}

fn key_of(w: &WorkloadNetworkPolicy) -> PolicyKey {
    (
        w.metadata.namespace.clone().unwrap_or_default(),
        w.metadata.name.clone().unwrap_or_default(),
    )
}

/// Why the policy's rules do not allow `edge`, as the record says it.
fn rule_reason(reason: DenyReason, edge: &Edge) -> (ViolationReason, String) {
    let direction = match edge.direction {
        Direction::Ingress => "ingress",
        Direction::Egress => "egress",
    };
    let (protocol, port) = (edge.protocol.as_str(), edge.port);
    match reason {
        DenyReason::NoRuleForPeer => (
            ViolationReason::NoRuleForPeer,
            format!("no {direction} rule of the policy admits this peer"),
        ),
        DenyReason::PortNotAllowed => (
            ViolationReason::PortNotAllowed,
            format!("{direction} rules admit this peer, but not on {protocol} port {port}"),
        ),
        DenyReason::ProtocolNotAllowed => (
            ViolationReason::ProtocolNotAllowed,
            format!("{direction} rules admit this peer on port {port}, but not over {protocol}"),
        ),
    }
}

/// The reason of a connection the data plane denied (`protect`), or that the dry-run
/// policy of a monitored workload would have denied (`monitor`), naming the policy the
/// data plane blamed when it did.
fn data_plane_reason(mode: Mode, denied_by: Option<&str>) -> (ViolationReason, String) {
    let message = match (mode, denied_by) {
        (Mode::Protect, None) => "the data plane denied the connection".to_owned(),
        (Mode::Protect, Some(policy)) => {
            format!("the data plane denied the connection: policy {policy}")
        }
        (Mode::Monitor, None) => {
            "the data plane's dry-run policy would deny the connection".to_owned()
        }
        (Mode::Monitor, Some(policy)) => {
            format!("the data plane's dry-run policy {policy} would deny the connection")
        }
    };
    (ViolationReason::DeniedByDataPlane, message)
}

/// The observation `m` makes in `mode`, its subject and peer resolved, for `reason`.
fn observation(
    m: &MergedEdge,
    subject: &Resolution,
    peer: &Resolution,
    mode: Mode,
    (reason, message): (ViolationReason, String),
) -> Observation {
    let edge = &m.edge;
    let (local, remote) = (
        endpoint_ref(&edge.subject, subject),
        endpoint_ref(&edge.peer, peer),
    );
    let (source, destination) = match edge.direction {
        Direction::Egress => (local, remote),
        Direction::Ingress => (remote, local),
    };
    Observation {
        source,
        destination,
        protocol: edge.protocol.as_str().to_owned(),
        port: if edge.port == 0 {
            UNKNOWN_PORT
        } else {
            i32::from(edge.port)
        },
        direction: match edge.direction {
            Direction::Ingress => PolicyDirection::Ingress,
            Direction::Egress => PolicyDirection::Egress,
        },
        mode,
        count: i64::try_from(m.count).unwrap_or(i64::MAX),
        first_seen: kube_time(m.first_seen),
        last_seen: kube_time(m.last_seen),
        reason,
        message,
        // Only the data plane's own verdicts name a policy (learned edges carry none).
        denied_by: (reason == ViolationReason::DeniedByDataPlane)
            .then(|| edge.denied_by.as_deref().map(str::to_owned))
            .flatten(),
    }
}

/// What identifies an observation's record: several edges can name one tuple (their
/// endpoints differ in details the record does not name), and are summed into one.
type Tuple<'a> = (
    &'a WorkloadEndpointRef,
    &'a WorkloadEndpointRef,
    &'a str,
    i32,
    Mode,
);

fn tuple(o: &Observation) -> Tuple<'_> {
    (&o.source, &o.destination, &o.protocol, o.port, o.mode)
}

/// Sums `observation` into `o`, an observation of the same tuple.
fn absorb(o: &mut Observation, observation: Observation) {
    if o.denied_by.is_none() && observation.denied_by.is_some() {
        (o.denied_by, o.message) = (observation.denied_by, observation.message);
    }
    o.count = o.count.saturating_add(observation.count);
    if observation.first_seen.0 < o.first_seen.0 {
        o.first_seen = observation.first_seen;
    }
    if observation.last_seen.0 > o.last_seen.0 {
        o.last_seen = observation.last_seen;
    }
}

/// The observations of one policy (or of none), in the order first made, one per tuple:
/// adding one costs the same however many the policy has.
#[derive(Default)]
struct Tally {
    list: Vec<Observation>,
    /// Positions in `list`, by the hash of their tuple.
    by_tuple: HashTable<usize>,
}

impl Tally {
    fn add(&mut self, observation: Observation, hasher: &RandomState) {
        let Tally { list, by_tuple } = self;
        let hash = hasher.hash_one(tuple(&observation));
        let same = |&i: &usize| tuple(&list[i]) == tuple(&observation);
        if let Some(&i) = by_tuple.find(hash, same) {
            absorb(&mut list[i], observation);
        } else {
            by_tuple.insert_unique(hash, list.len(), |&i| hasher.hash_one(tuple(&list[i])));
            list.push(observation);
        }
    }
}

/// The round's tallies, by the policy they concern (borrowed from the policies until
/// the round's result is made).
#[derive(Default)]
struct Tallies<'p> {
    by_policy: BTreeMap<(&'p str, &'p str), Tally>,
    unattributed: Tally,
    hasher: RandomState,
}

impl<'p> Tallies<'p> {
    fn add(&mut self, policy: &'p WorkloadNetworkPolicy, observation: Observation) {
        let key = (
            policy.metadata.namespace.as_deref().unwrap_or_default(),
            policy.metadata.name.as_deref().unwrap_or_default(),
        );
        let tally = self.by_policy.entry(key).or_default();
        tally.add(observation, &self.hasher);
    }

    fn unattributed(&mut self, observation: Observation) {
        self.unattributed.add(observation, &self.hasher);
    }
}

/// Checks the round's traffic against the policies of `backend`:
/// - forwarded edges whose subject a `monitor`-mode policy covers, with the policy's real
///   semantics: what it would not allow is an observation;
/// - denials: an observation of the `protect`-mode policy covering the subject;
/// - dry-run denials: an observation of the `monitor`-mode policy covering the subject
///   (its port unknown, so it joins the record the check makes of the same connection).
///
/// Attribution is by the subject workload and the edge's direction only.
pub fn detect(
    traffic: Traffic<'_>,
    policies: &[WorkloadNetworkPolicy],
    resolver: &dyn Resolver,
    backend: Backend,
) -> Detected {
    let monitored = by_target(policies, backend, Mode::Monitor);
    let protected = by_target(policies, backend, Mode::Protect);
    let mut detected = Detected::default();
    let mut tallies = Tallies::default();
    for m in traffic.edges {
        let edge = &m.edge;
        let seen = Seen::between(m.first_seen, m.last_seen);
        let (subject, Target::Policy(_, covered)) = monitored.attribute(edge, seen, resolver)
        else {
            continue;
        };
        let peer = resolver.resolve_shared(&edge.peer, seen);
        // Istio policies match peers by principal, which the record carries.
        if let (Resolution::Unresolved(why), Backend::Kubernetes) = (&*peer, backend) {
            *detected.unresolved_peers.entry(why.as_str()).or_default() += 1;
            continue;
        }
        let reason = match covered.decide(edge, &subject, &peer) {
            Ok(Decision::Denied { reason, .. }) => reason,
            Ok(_) => {
                detected.allowed += 1;
                continue;
            }
            Err(error) => {
                detected
                    .errors
                    .insert(key_of(covered.policy), error.to_string());
                continue;
            }
        };
        let o = observation(m, &subject, &peer, Mode::Monitor, rule_reason(reason, edge));
        tallies.add(covered.policy, o);
    }
    for (edges, policies, mode) in [
        (traffic.denials, &protected, Mode::Protect),
        (traffic.audits, &monitored, Mode::Monitor),
    ] {
        for m in edges {
            let edge = &m.edge;
            let seen = Seen::between(m.first_seen, m.last_seen);
            let (subject, target) = policies.attribute(edge, seen, resolver);
            let peer = resolver.resolve_shared(&edge.peer, seen);
            let reason = data_plane_reason(mode, m.edge.denied_by.as_deref());
            let o = observation(m, &subject, &peer, mode, reason);
            match target {
                Target::Policy(_, covered) => tallies.add(covered.policy, o),
                Target::NotASubject | Target::Uncovered(_) => tallies.unattributed(o),
            }
        }
    }
    detected.observations = tallies
        .by_policy
        .into_iter()
        .map(|((namespace, name), t)| ((namespace.to_owned(), name.to_owned()), t.list))
        .collect();
    detected.unattributed = tallies.unattributed.list;
    detected
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::tests::{seen, time};
    use super::*;

    /// The tally as a scan of the list: the lookup it must agree with.
    fn scanned(observations: &[Observation]) -> Vec<Observation> {
        let mut list: Vec<Observation> = Vec::new();
        for n in observations.iter().cloned() {
            match list.iter_mut().find(|o| tuple(o) == tuple(&n)) {
                Some(o) => absorb(o, n),
                None => list.push(n),
            }
        }
        list
    }

    fn observation() -> impl Strategy<Value = Observation> {
        (
            0..4usize,
            prop::sample::select(vec![80, 443, UNKNOWN_PORT]),
            prop::bool::ANY,
            (0..1000i64, 0..100i64, 0..100i64),
            prop::option::of(0..2usize),
        )
            .prop_map(|(src, port, protect, (count, first, last), blamed)| {
                let mut o = seen(&format!("client-{src}"), port, count, first, first + last);
                if protect {
                    o.mode = Mode::Protect;
                }
                o.denied_by = blamed.map(|b| format!("policy-{b}"));
                o
            })
    }

    #[test]
    fn one_tuple_keeps_the_earliest_first_the_latest_last_and_the_blamed_policy() {
        let mut o = seen("client", 80, 3, 20, 30);
        let mut blamed = seen("client", 80, 4, 10, 25);
        blamed.denied_by = Some("deny-all".to_owned());
        absorb(&mut o, blamed);
        absorb(&mut o, seen("client", 80, 5, 15, 40));
        assert_eq!(o.count, 12);
        assert_eq!((o.first_seen, o.last_seen), (time(10), time(40)));
        assert_eq!(o.denied_by.as_deref(), Some("deny-all"));
    }

    proptest! {
        /// Summing by a hash of the tuple gives what a scan of the list gives, in the same
        /// order.
        #[test]
        fn a_tally_sums_as_a_scan_does(observations in prop::collection::vec(observation(), 0..64)) {
            let mut tally = Tally::default();
            let hasher = RandomState::default();
            for o in observations.iter().cloned() {
                tally.add(o, &hasher);
            }
            prop_assert_eq!(tally.list, scanned(&observations));
        }
    }
}
