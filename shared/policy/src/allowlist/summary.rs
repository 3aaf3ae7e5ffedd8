//! The learning summary: what happened to every edge, so nothing is dropped silently.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::resolve::Unresolved;
use ne_flow::flow::{Direction, Protocol, Reserved, WorkloadKind, WorkloadRef};

/// Edges and the flows they stand for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub edges: u64,
    pub flows: u64,
}

impl Tally {
    pub(super) fn add(&mut self, flows: u64) {
        self.edges = self.edges.saturating_add(1);
        self.flows = self.flows.saturating_add(flows);
    }
}

/// Why an edge cannot be part of any rule for the provider. Edges from
/// [`ne_flow::edge::derive`] never have these; they are checked because input may come from
/// elsewhere (files, older agents).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum InvalidEdge {
    NoPort,
    /// ICMP and others; for Istio anything but TCP.
    Protocol,
    /// Istio egress.
    DirectionNotLearned,
}

/// Why a peer could not become a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PeerSkip {
    /// See [`Unresolved::NoOwnerInfo`].
    NoOwnerInfo,
    /// See [`Unresolved::NotFound`].
    NotFound,
    /// See [`Unresolved::Ambiguous`].
    Ambiguous,
    /// The peer pod's selector is unknown.
    NoSelector,
    /// Outside the cluster without an address.
    WorldWithoutAddress,
    /// Cilium `init` / `unknown` identities: not yet known.
    UnknownIdentity,
    /// Istio: the peer has no mesh principal.
    NoIdentity,
    /// See [`Unresolved::PodNotListed`].
    PodNotListed,
    /// See [`Unresolved::AddressNotHeld`].
    AddressNotHeld,
    /// See [`Unresolved::AddressReused`].
    AddressReused,
}

impl PeerSkip {
    /// A stable snake_case label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerSkip::NoOwnerInfo => "no_owner_info",
            PeerSkip::NotFound => "not_found",
            PeerSkip::Ambiguous => "ambiguous",
            PeerSkip::NoSelector => "no_selector",
            PeerSkip::WorldWithoutAddress => "world_without_address",
            PeerSkip::UnknownIdentity => "unknown_identity",
            PeerSkip::NoIdentity => "no_identity",
            PeerSkip::PodNotListed => "pod_not_listed",
            PeerSkip::AddressNotHeld => "address_not_held",
            PeerSkip::AddressReused => "address_reused",
        }
    }
}

impl From<Unresolved> for PeerSkip {
    fn from(u: Unresolved) -> Self {
        match u {
            Unresolved::NoOwnerInfo => PeerSkip::NoOwnerInfo,
            Unresolved::NotFound => PeerSkip::NotFound,
            Unresolved::Ambiguous => PeerSkip::Ambiguous,
            Unresolved::NoSelector => PeerSkip::NoSelector,
            Unresolved::PodNotListed => PeerSkip::PodNotListed,
            Unresolved::AddressNotHeld => PeerSkip::AddressNotHeld,
            Unresolved::AddressReused => PeerSkip::AddressReused,
        }
    }
}

/// One allow-list in the summary (also for subjects all of whose peers were omitted,
/// which get no proposal).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllowListSummary {
    pub subject: WorkloadRef,
    pub direction: Direction,
    /// The proposal name.
    pub name: String,
    pub rules: usize,
    pub ports: usize,
    /// Flows behind the rules.
    pub flows: u64,
    /// Flows of this subject and direction whose peer could not be expressed.
    pub omitted: Tally,
    /// Of those, the peers no rule can name (host, remote-node, kube-apiserver, health,
    /// ingress, unmanaged), by peer, protocol and port: traffic a protect-mode policy of
    /// this direction blocks unless the data plane lets it through by itself.
    pub unmanaged: Vec<UnmanagedPeer>,
    /// Different selectors were resolved for the subject; the smallest was used.
    pub selector_conflict: bool,
}

/// Traffic of one subject and direction with a peer no policy rule can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct UnmanagedPeer {
    pub peer: Reserved,
    pub protocol: Protocol,
    pub port: u16,
    pub seen: Tally,
}

/// What learning did with every edge. Every input edge is counted exactly once, either in
/// `learned` or under one reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LearnSummary {
    /// All input.
    pub input: Tally,
    /// Edges that are part of a rule.
    pub learned: Tally,
    pub allow_lists: Vec<AllowListSummary>,
    pub invalid_edges: BTreeMap<InvalidEdge, Tally>,
    /// Subject in an excluded namespace.
    pub excluded: Tally,
    /// Subject not resolved, by reason (an empty selector counts as `NoSelector`).
    pub unresolved_subjects: BTreeMap<Unresolved, Tally>,
    /// Subject resolved to a workload kind that gets no proposal (Job, CronJob, Pod,
    /// ReplicaSet).
    pub not_a_subject: BTreeMap<WorkloadKind, Tally>,
    /// Subject is outside the cluster (an egress edge seen on a host, say).
    pub external_subjects: Tally,
    /// Subject is a reserved identity (host, ...).
    pub reserved_subjects: BTreeMap<Reserved, Tally>,
    /// Peer not expressible, by reason.
    pub unresolved_peers: BTreeMap<PeerSkip, Tally>,
    /// Peer is host, remote-node, kube-apiserver, health, ingress or unmanaged: not
    /// portable in a NetworkPolicy. A protected egress policy will block these.
    pub unmanaged_peers: BTreeMap<Reserved, Tally>,
}
