//! Allow-lists: aggregated edges become one allow-list per (workload, direction), which
//! renders to a `WorkloadNetworkPolicyProposal` (docs/architecture.md, "Flow model and
//! learning rules" and "Custom resources").
//!
//! Input is what the agent's `FlowTable` aggregated: an [`Edge`] with its flow count and
//! first/last time seen ([`AggregatedEdge`]). For each edge the [`Learner`]:
//! 1. checks the edge is expressible for the provider (a port, TCP/UDP/SCTP; Istio:
//!    ingress and TCP only);
//! 2. resolves the subject: it must be a pod owned by a Deployment, StatefulSet or
//!    DaemonSet with a known, non-empty selector, outside the excluded namespaces;
//! 3. resolves the peer into a [`PeerKey`]: Kubernetes backend (Cilium, Calico) — a pod
//!    becomes namespace name + the peer's selector, an external address a /32 (/128)
//!    `ipBlock` with its DNS name kept as evidence; host, remote-node, kube-apiserver,
//!    health, ingress and unmanaged identities are *unmanaged peers*: they cannot be
//!    expressed portably (Cilium does not match them by CIDR) and are reported, never
//!    turned into an ipBlock. Istio backend — the peer's principal.
//!
//! Nothing is dropped silently: every edge that does not become part of a rule is counted
//! in the [`LearnSummary`] under its reason, and per allow-list as `omitted` flows.
//!
//! Output is deterministic whatever the input order: allow-lists are sorted by
//! (workload, direction), rules by [`PeerKey`], ports by (protocol, port). One peer with
//! several ports is one rule; peers with the same port set stay separate rules, so each
//! rule maps to one peer's evidence and rules do not reshape as ports are learned.

mod incremental;
mod peer;
pub(crate) mod render;
mod summary;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use ne_crds::Backend;
use serde::Serialize;

pub use incremental::Incremental;
pub use peer::{NAMESPACE_NAME_LABEL, PeerKey, SelectorKey, host_cidr};
pub use render::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, MAX_NAME_LEN, PeerEvidenceRow, Proposal, RenderError,
    kube_time, proposal_name, render_proposal, render_proposal_with_status,
};
pub use summary::{AllowListSummary, InvalidEdge, LearnSummary, PeerSkip, Tally, UnmanagedPeer};

use crate::resolve::{Resolution, Resolver, Seen, Unresolved};
use ne_flow::edge::{Edge, Provider};
use ne_flow::flow::{Direction, Protocol, Reserved, Str, Timestamp, WorkloadKind, WorkloadRef};

/// One aggregated edge, borrowed from whatever holds it (e.g. a `FlowTable` snapshot).
#[derive(Clone, Copy, Debug)]
pub struct AggregatedEdge<'a> {
    pub edge: &'a Edge,
    /// Flows (connections) aggregated into this edge.
    pub count: u64,
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
}

/// Learning options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LearnOptions {
    /// Namespaces whose workloads get no allow-list (they still appear as peers).
    pub exclude_namespaces: BTreeSet<String>,
}

/// At most this many DNS names are kept per (peer, protocol, port): the smallest ones, so
/// that the kept set does not depend on input order.
pub const MAX_DNS_NAMES: usize = 8;

/// Why one (peer, protocol, port) is in an allow-list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub first_seen: Timestamp,
    pub last_seen: Timestamp,
    pub flow_count: u64,
    /// DNS names the data plane gave for the peer (at most [`MAX_DNS_NAMES`]).
    pub dns: BTreeSet<Str>,
}

impl Evidence {
    fn new(e: &AggregatedEdge<'_>) -> Self {
        let mut ev = Evidence {
            first_seen: e.first_seen,
            last_seen: e.last_seen,
            flow_count: 0,
            dns: BTreeSet::new(),
        };
        ev.merge(e);
        ev
    }

    fn merge(&mut self, e: &AggregatedEdge<'_>) {
        self.first_seen = self.first_seen.min(e.first_seen);
        self.last_seen = self.last_seen.max(e.last_seen);
        self.flow_count = self.flow_count.saturating_add(e.count);
        if let Some(dns) = &e.edge.peer_dns {
            self.dns.insert(dns.clone());
            if self.dns.len() > MAX_DNS_NAMES {
                self.dns.pop_last();
            }
        }
    }
}

/// The peers, protocols and ports one workload used in one direction.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllowList {
    pub subject: WorkloadRef,
    pub direction: Direction,
    /// The workload's pod selector (policy `podSelector` / Istio `selector`).
    pub selector: LabelSelector,
    pub backend: Backend,
    /// Allowed (protocol, port) per peer, with evidence.
    pub peers: BTreeMap<PeerKey, BTreeMap<(Protocol, u16), Evidence>>,
}

impl AllowList {
    /// Flows behind all rules.
    pub fn flow_count(&self) -> u64 {
        self.evidence()
            .fold(0u64, |n, (_, _, e)| n.saturating_add(e.flow_count))
    }

    /// The earliest first-seen of any rule.
    pub fn learning_since(&self) -> Option<Timestamp> {
        self.evidence().map(|(_, _, e)| e.first_seen).min()
    }

    /// The latest last-seen of any rule.
    pub fn last_seen(&self) -> Option<Timestamp> {
        self.evidence().map(|(_, _, e)| e.last_seen).max()
    }

    /// Every (peer, (protocol, port), evidence), in rule order.
    pub fn evidence(&self) -> impl Iterator<Item = (&PeerKey, (Protocol, u16), &Evidence)> {
        self.peers
            .iter()
            .flat_map(|(peer, ports)| ports.iter().map(move |(pp, e)| (peer, *pp, e)))
    }
}

/// Allow-lists and what happened to every edge.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Learned {
    /// Non-empty allow-lists, sorted by (workload, direction).
    pub allow_lists: Vec<AllowList>,
    pub summary: LearnSummary,
}

/// Per (workload, direction) state while learning.
#[derive(Debug)]
struct Entry {
    selectors: BTreeSet<SelectorKey>,
    peers: BTreeMap<PeerKey, BTreeMap<(Protocol, u16), Evidence>>,
    omitted: Tally,
    unmanaged: BTreeMap<(Reserved, Protocol, u16), Tally>,
}

/// Builds allow-lists edge by edge.
pub struct Learner<'r> {
    provider: Provider,
    resolver: &'r dyn Resolver,
    options: LearnOptions,
    entries: BTreeMap<(WorkloadRef, Direction), Entry>,
    summary: LearnSummary,
    /// The canonical keys made of resolutions the resolver lends (see
    /// [`Resolver::resolve_shared`]), by the resolution's address: many edges share a pod,
    /// and its keys are made once. Sound because a lent resolution lives as long as the
    /// resolver, which outlives the learner: while it does, no other resolution can take
    /// its address.
    subject_keys: Keys<SelectorKey, Unresolved>,
    peer_keys: Keys<PeerKey, PeerSkip>,
}

/// Keys made of lent resolutions, by the resolution's address.
type Keys<K, E> = HashMap<usize, Result<K, E>>;

/// What `make` makes of `resolution`: made once per lent resolution and kept in `keys`,
/// made afresh for one the resolver made for the call.
#[expect(
    clippy::ptr_arg,
    reason = "whether the resolver lent it is what matters"
)]
fn made_once<'k, K: Clone, E: Copy>(
    keys: &'k mut Keys<K, E>,
    resolution: &Cow<'_, Resolution>,
    make: impl FnOnce() -> Result<K, E>,
) -> Result<Cow<'k, K>, E> {
    match resolution {
        Cow::Borrowed(r) => {
            let address = std::ptr::from_ref::<Resolution>(r) as usize;
            match keys.entry(address).or_insert_with(make) {
                Ok(key) => Ok(Cow::Borrowed(key)),
                Err(why) => Err(*why),
            }
        }
        Cow::Owned(_) => make().map(Cow::Owned),
    }
}

impl std::fmt::Debug for Learner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner")
            .field("provider", &self.provider)
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// The backend a provider's proposals render to.
pub fn backend_for(provider: Provider) -> Backend {
    match provider {
        Provider::Cilium | Provider::Calico => Backend::Kubernetes,
        Provider::Istio => Backend::Istio,
    }
}

/// Why an edge's subject gets no allow-list.
enum SubjectSkip {
    Excluded,
    Unresolved(Unresolved),
    NotASubject(WorkloadKind),
    External,
    Reserved(Reserved),
}

/// Why an edge's peer is not a rule.
enum PeerOmission {
    Unresolved(PeerSkip),
    Unmanaged(Reserved),
}

impl<'r> Learner<'r> {
    pub fn new(provider: Provider, resolver: &'r dyn Resolver, options: LearnOptions) -> Self {
        Learner {
            provider,
            resolver,
            options,
            entries: BTreeMap::new(),
            summary: LearnSummary::default(),
            subject_keys: HashMap::default(),
            peer_keys: HashMap::default(),
        }
    }

    /// Learns from one aggregated edge.
    pub fn add(&mut self, e: AggregatedEdge<'_>) {
        self.summary.input.add(e.count);
        if let Err(why) = check_edge(self.provider, e.edge) {
            self.summary
                .invalid_edges
                .entry(why)
                .or_default()
                .add(e.count);
            return;
        }
        let seen = Seen::between(e.first_seen, e.last_seen);
        let (subject, selector) = match subject(
            self.resolver,
            &self.options,
            &mut self.subject_keys,
            e.edge,
            seen,
            |key| key,
        ) {
            Ok(found) => found,
            Err(skip) => {
                let s = &mut self.summary;
                let tally = match skip {
                    SubjectSkip::Excluded => &mut s.excluded,
                    SubjectSkip::Unresolved(u) => s.unresolved_subjects.entry(u).or_default(),
                    SubjectSkip::NotASubject(k) => s.not_a_subject.entry(k).or_default(),
                    SubjectSkip::External => &mut s.external_subjects,
                    SubjectSkip::Reserved(r) => s.reserved_subjects.entry(r).or_default(),
                };
                tally.add(e.count);
                return;
            }
        };
        let peer = peer(
            self.provider,
            self.resolver,
            &mut self.peer_keys,
            e.edge,
            seen,
            |key| key,
        );
        let entry = self
            .entries
            .entry((subject, e.edge.direction))
            .or_insert_with(|| Entry {
                selectors: BTreeSet::new(),
                peers: BTreeMap::new(),
                omitted: Tally::default(),
                unmanaged: BTreeMap::new(),
            });
        if !entry.selectors.contains(&*selector) {
            entry.selectors.insert(selector.into_owned());
        }
        let s = &mut self.summary;
        match peer {
            Ok(key) => {
                // Looked up before it is copied: most edges add to a rule that exists.
                let ports = match entry.peers.get_mut(&*key) {
                    Some(ports) => ports,
                    None => entry.peers.entry(key.into_owned()).or_default(),
                };
                ports
                    .entry((e.edge.protocol, e.edge.port))
                    .and_modify(|ev| ev.merge(&e))
                    .or_insert_with(|| Evidence::new(&e));
                s.learned.add(e.count);
            }
            Err(omission) => {
                entry.omitted.add(e.count);
                let tally = match omission {
                    PeerOmission::Unresolved(why) => s.unresolved_peers.entry(why).or_default(),
                    PeerOmission::Unmanaged(r) => {
                        entry
                            .unmanaged
                            .entry((r, e.edge.protocol, e.edge.port))
                            .or_default()
                            .add(e.count);
                        s.unmanaged_peers.entry(r).or_default()
                    }
                };
                tally.add(e.count);
            }
        }
    }

    /// The allow-lists (non-empty ones) and the summary.
    pub fn finish(self) -> Learned {
        let backend = backend_for(self.provider);
        let mut summary = self.summary;
        let mut allow_lists = Vec::new();
        for ((subject, direction), entry) in self.entries {
            let Some(selector) = entry.selectors.first() else {
                continue;
            };
            let list = AllowList {
                subject,
                direction,
                selector: selector.to_selector(),
                backend,
                peers: entry.peers,
            };
            summary.allow_lists.push(AllowListSummary {
                name: proposal_name(list.subject.kind, &list.subject.name, direction),
                subject: list.subject.clone(),
                direction,
                rules: list.peers.len(),
                ports: list.peers.values().map(BTreeMap::len).sum(),
                flows: list.flow_count(),
                omitted: entry.omitted,
                unmanaged: entry
                    .unmanaged
                    .into_iter()
                    .map(|((peer, protocol, port), seen)| UnmanagedPeer {
                        peer,
                        protocol,
                        port,
                        seen,
                    })
                    .collect(),
                selector_conflict: entry.selectors.len() > 1,
            });
            if !list.peers.is_empty() {
                allow_lists.push(list);
            }
        }
        Learned {
            allow_lists,
            summary,
        }
    }
}

/// Whether `edge` can be part of a rule for `provider` at all.
fn check_edge(provider: Provider, edge: &Edge) -> Result<(), InvalidEdge> {
    if edge.port == 0 {
        return Err(InvalidEdge::NoPort);
    }
    if !provider.learns(edge.direction) {
        return Err(InvalidEdge::DirectionNotLearned);
    }
    let expressible = match provider {
        Provider::Istio => edge.protocol == Protocol::Tcp,
        Provider::Cilium | Provider::Calico => edge.protocol.is_policy_protocol(),
    };
    if expressible {
        Ok(())
    } else {
        Err(InvalidEdge::Protocol)
    }
}

fn excluded(options: &LearnOptions, namespace: Option<&str>) -> bool {
    namespace.is_some_and(|ns| options.exclude_namespaces.contains(ns))
}

/// The allow-list an edge belongs to: its subject's owner and selector, the selector as
/// `to_key` keeps it.
fn subject<'k, K: Clone>(
    resolver: &dyn Resolver,
    options: &LearnOptions,
    keys: &'k mut Keys<K, Unresolved>,
    edge: &Edge,
    seen: Seen,
    to_key: impl FnOnce(SelectorKey) -> K,
) -> Result<(WorkloadRef, Cow<'k, K>), SubjectSkip> {
    if excluded(options, edge.subject.id.namespace()) {
        return Err(SubjectSkip::Excluded);
    }
    let resolution = resolver.resolve_shared(&edge.subject, seen);
    let pod = match &*resolution {
        Resolution::Pod(p) => p,
        Resolution::External(_) => return Err(SubjectSkip::External),
        Resolution::Reserved(r) => return Err(SubjectSkip::Reserved(*r)),
        Resolution::Unresolved(u) => return Err(SubjectSkip::Unresolved(*u)),
    };
    let owner = pod
        .owner
        .clone()
        .ok_or(SubjectSkip::Unresolved(Unresolved::NoOwnerInfo))?;
    if excluded(options, Some(&pod.namespace)) || excluded(options, Some(&owner.namespace)) {
        return Err(SubjectSkip::Excluded);
    }
    if !owner.kind.is_subject() {
        return Err(SubjectSkip::NotASubject(owner.kind));
    }
    // An empty selector would select every pod of the namespace.
    let make = || {
        pod.selector
            .as_ref()
            .map(SelectorKey::new)
            .filter(|s| !s.is_empty())
            .map(to_key)
            .ok_or(Unresolved::NoSelector)
    };
    let selector = made_once(keys, &resolution, make).map_err(SubjectSkip::Unresolved)?;
    Ok((owner, selector))
}

/// What an edge's peer is as a rule, the peer key as `to_key` keeps it.
fn peer<'k, K: Clone>(
    provider: Provider,
    resolver: &dyn Resolver,
    keys: &'k mut Keys<K, PeerSkip>,
    edge: &Edge,
    seen: Seen,
    to_key: impl FnOnce(PeerKey) -> K,
) -> Result<Cow<'k, K>, PeerOmission> {
    let unresolved = |why| Err(PeerOmission::Unresolved(why));
    if provider == Provider::Istio {
        return match edge.peer.identity.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => Ok(Cow::Owned(to_key(PeerKey::Principal(
                id.strip_prefix("spiffe://").unwrap_or(id).to_owned(),
            )))),
            None => unresolved(PeerSkip::NoIdentity),
        };
    }
    let resolution = resolver.resolve_shared(&edge.peer, seen);
    match &*resolution {
        Resolution::Pod(p) => {
            let make = || match &p.selector {
                Some(s) => Ok(to_key(PeerKey::Pods {
                    namespace: p.namespace.to_string(),
                    selector: SelectorKey::new(s),
                })),
                None => Err(PeerSkip::NoSelector),
            };
            made_once(keys, &resolution, make).map_err(PeerOmission::Unresolved)
        }
        Resolution::External(ip) => Ok(Cow::Owned(to_key(PeerKey::Address(*ip)))),
        Resolution::Reserved(Reserved::World) => match edge.peer.ip {
            Some(ip) => Ok(Cow::Owned(to_key(PeerKey::Address(ip)))),
            None => unresolved(PeerSkip::WorldWithoutAddress),
        },
        Resolution::Reserved(Reserved::Init | Reserved::Unknown) => {
            unresolved(PeerSkip::UnknownIdentity)
        }
        Resolution::Reserved(r) => Err(PeerOmission::Unmanaged(*r)),
        Resolution::Unresolved(u) => unresolved((*u).into()),
    }
}

/// Learns allow-lists from `edges` in one go.
pub fn learn<'a>(
    edges: impl IntoIterator<Item = AggregatedEdge<'a>>,
    resolver: &dyn Resolver,
    provider: Provider,
    options: &LearnOptions,
) -> Learned {
    let mut learner = Learner::new(provider, resolver, options.clone());
    for e in edges {
        learner.add(e);
    }
    learner.finish()
}

#[cfg(test)]
mod tests;
