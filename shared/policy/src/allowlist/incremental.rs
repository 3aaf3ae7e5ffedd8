//! Allow-lists kept from one round to the next: what the leader learns with.
//!
//! [`learn`](super::learn) makes allow-lists of a set of edges in one go. The leader's
//! merged index changes by a few edges a round while it holds hundreds of thousands, so
//! [`Incremental`] remembers what each edge contributed, under the slot the edge has in
//! the index, and a round re-learns only the edges it is given (those that changed; every
//! edge after the resolver changed) and renders again only the allow-lists they touched.
//! Whatever the rounds, its output is what [`learn`](super::learn) makes of the edges last
//! given for each slot, with the resolver of the last round (a property test holds it to
//! that).
//!
//! An edge's values only grow in the index (its count, and its window of first and last
//! seen), so an edge that stays where it was adds its growth to its rule; one that moves
//! (its resolution changed) or shrinks is taken out, and the rule it left is summed again
//! from the edges still in it.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use foldhash::HashMap;

use super::render::{set_evidence, set_totals};
use super::{
    AggregatedEdge, AllowList, AllowListSummary, Evidence, InvalidEdge, Keys, LearnOptions,
    LearnSummary, MAX_DNS_NAMES, PeerKey, PeerOmission, PeerSkip, SelectorKey, SubjectSkip, Tally,
    UnmanagedPeer, backend_for, check_edge, peer, proposal_name, render_proposal_with_status,
    subject,
};
use crate::resolve::{Resolver, Seen, Unresolved};
use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_flow::flow::{Direction, Protocol, Reserved, Str, Timestamp, WorkloadKind, WorkloadRef};

/// Allow-lists learned round after round from the edges of an index, by slot (see the
/// module docs). A round is [`Incremental::learn`] for each edge given, then
/// [`Incremental::finish`]; the outputs are read between rounds.
pub struct Incremental {
    provider: Provider,
    options: LearnOptions,
    /// What each slot's edge contributed, by slot.
    slots: Vec<Option<Contribution>>,
    lists: Vec<ListState>,
    list_ids: HashMap<(WorkloadRef, Direction), u32>,
    selectors: Interner<SelectorKey>,
    peers: Interner<PeerKey>,
    sums: Sums,
    /// Lists touched since the last [`Incremental::finish`].
    dirty: BTreeSet<u32>,
    /// Whether anything was touched since then, summary counts included.
    touched: bool,
    /// The non-empty allow-lists' proposals, in (workload, direction) order, and the list
    /// of each.
    proposals: Vec<WorkloadNetworkPolicyProposal>,
    proposal_lists: Vec<u32>,
    /// Every list's summary, in (workload, direction) order.
    summaries: Vec<AllowListSummary>,
    /// Lists that could not be rendered, as `subject direction: why`.
    unrendered: BTreeMap<u32, String>,
    /// Keys made of the resolutions the round's resolver lent, by address (as the one-go
    /// learner does); emptied when the round finishes, as the resolver may change.
    subject_keys: Keys<u32, Unresolved>,
    peer_keys: Keys<u32, PeerSkip>,
}

impl std::fmt::Debug for Incremental {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incremental")
            .field("provider", &self.provider)
            .field("slots", &self.slots.len())
            .field("lists", &self.lists.len())
            .finish_non_exhaustive()
    }
}

/// What one edge contributed: its values and where they went.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Contribution {
    count: u64,
    first: Timestamp,
    last: Timestamp,
    dns: Option<Str>,
    outcome: Outcome,
}

impl Contribution {
    /// Whether `self` is `old` grown in place: the same outcome and DNS name, a count and
    /// a window that include the old ones.
    fn grows(&self, old: &Contribution) -> bool {
        self.outcome == old.outcome
            && self.dns == old.dns
            && self.count >= old.count
            && self.first <= old.first
            && self.last >= old.last
    }
}

/// Where an edge went, by the ids of interned keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Invalid(InvalidEdge),
    Excluded,
    UnresolvedSubject(Unresolved),
    NotASubject(WorkloadKind),
    ExternalSubject,
    ReservedSubject(Reserved),
    /// The subject's allow-list, under the subject's selector.
    Listed {
        list: u32,
        selector: u32,
        peer: Peer,
    },
}

/// What an edge of an allow-list is to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Rule {
        peer: u32,
        protocol: Protocol,
        port: u16,
    },
    Unresolved(PeerSkip),
    Unmanaged {
        peer: Reserved,
        protocol: Protocol,
        port: u16,
    },
}

/// Edges and flows, taken out again as edges change; flows in 128 bits so that a sum
/// taken apart again is exact, saturated only when read (as [`Tally`] saturates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Sum {
    edges: u64,
    flows: u128,
}

/// How one contribution changes the sums it is in.
#[derive(Clone, Copy, Debug)]
enum Delta {
    /// A new edge of this many flows.
    Add(u64),
    /// An edge of this many flows taken out.
    Sub(u64),
    /// An edge, still counted, grown by this many flows.
    Grow(u64),
}

impl Sum {
    fn apply(&mut self, delta: Delta) {
        match delta {
            Delta::Add(flows) => {
                self.edges += 1;
                self.flows += u128::from(flows);
            }
            Delta::Sub(flows) => {
                self.edges -= 1;
                self.flows -= u128::from(flows);
            }
            Delta::Grow(by) => self.flows += u128::from(by),
        }
    }

    fn tally(self) -> Tally {
        Tally {
            edges: self.edges,
            flows: saturated(self.flows),
        }
    }
}

/// Applies `delta` to the sum of `key` in `sums`: made by an edge added, removed with the
/// last edge taken out.
fn apply_keyed<K: Ord>(sums: &mut BTreeMap<K, Sum>, key: K, delta: Delta) {
    if let Delta::Add(_) = delta {
        sums.entry(key).or_default().apply(delta);
    } else if let Some(sum) = sums.get_mut(&key) {
        sum.apply(delta);
        if sum.edges == 0 {
            sums.remove(&key);
        }
    }
}

fn saturated(flows: u128) -> u64 {
    u64::try_from(flows).unwrap_or(u64::MAX)
}

/// Sums kept by reason, an entry only while it counts an edge.
#[derive(Debug)]
struct ByReason<K>(BTreeMap<K, Sum>);

impl<K> Default for ByReason<K> {
    fn default() -> Self {
        ByReason(BTreeMap::new())
    }
}

impl<K: Ord + Copy> ByReason<K> {
    fn apply(&mut self, key: K, delta: Delta) {
        apply_keyed(&mut self.0, key, delta);
    }

    fn tallies(&self) -> BTreeMap<K, Tally> {
        self.0.iter().map(|(k, s)| (*k, s.tally())).collect()
    }
}

/// The summary's counts, every edge in exactly one of them besides `input`.
#[derive(Debug, Default)]
struct Sums {
    input: Sum,
    learned: Sum,
    invalid: ByReason<InvalidEdge>,
    excluded: Sum,
    unresolved_subjects: ByReason<Unresolved>,
    not_a_subject: ByReason<WorkloadKind>,
    external_subjects: Sum,
    reserved_subjects: ByReason<Reserved>,
    unresolved_peers: ByReason<PeerSkip>,
    unmanaged_peers: ByReason<Reserved>,
}

/// One allow-list: what its edges sum to.
#[derive(Debug)]
struct ListState {
    subject: WorkloadRef,
    direction: Direction,
    /// Selector ids and the edges that resolved each: every edge of the list resolved one,
    /// so the list has edges while this is not empty.
    selectors: BTreeMap<u32, u64>,
    /// Rules by (peer id, protocol, port), in no order (a rendering sorts them): a map
    /// per peer would cost a tree node per peer, and flood edges are a peer each.
    rules: HashMap<(u32, Protocol, u16), Rule>,
    /// Peer ids and how many of the rules are theirs.
    peer_ports: HashMap<u32, u32>,
    omitted: Sum,
    unmanaged: BTreeMap<(Reserved, Protocol, u16), Sum>,
    /// Rules, ports or selectors came or went since the list was last rendered: the
    /// proposal is rendered again.
    reshaped: bool,
    /// Rules whose evidence alone changed since then, by (peer id, protocol, port): their
    /// rows of the rendered status are set again.
    changed_rows: Vec<(u32, Protocol, u16)>,
}

impl ListState {
    /// Flows behind all rules, saturating (as `AllowList::flow_count`).
    fn flows(&self) -> u64 {
        self.rules
            .values()
            .fold(0u64, |n, r| n.saturating_add(saturated(r.flows)))
    }
}

/// The evidence of one (peer, protocol, port) and the slots of the edges it sums.
#[derive(Debug)]
struct Rule {
    flows: u128,
    first: Timestamp,
    last: Timestamp,
    dns: BTreeSet<Str>,
    slots: Vec<u32>,
    /// The rule's row in the rendered status (rows are in rule order), set when the list
    /// is rendered.
    row: usize,
}

impl Rule {
    fn new() -> Self {
        Rule {
            flows: 0,
            first: Timestamp(i64::MAX),
            last: Timestamp(i64::MIN),
            dns: BTreeSet::new(),
            slots: Vec::new(),
            row: 0,
        }
    }

    /// Adds an edge's values (as `Evidence::merge` does).
    fn add(&mut self, c: &Contribution) {
        self.flows += u128::from(c.count);
        self.first = self.first.min(c.first);
        self.last = self.last.max(c.last);
        if let Some(dns) = &c.dns {
            self.dns.insert(dns.clone());
            if self.dns.len() > MAX_DNS_NAMES {
                self.dns.pop_last();
            }
        }
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            first_seen: self.first,
            last_seen: self.last,
            flow_count: saturated(self.flows),
            dns: self.dns.clone(),
        }
    }
}

/// Keys made once, by id.
#[derive(Debug)]
struct Interner<K> {
    ids: HashMap<K, u32>,
    keys: Vec<K>,
}

impl<K> Default for Interner<K> {
    fn default() -> Self {
        Interner {
            ids: HashMap::default(),
            keys: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> Interner<K> {
    fn id(&mut self, key: K) -> u32 {
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        // Keys are of edges the index holds, which are fewer than u32::MAX.
        let id = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.keys.push(key.clone());
        self.ids.insert(key, id);
        id
    }

    fn key(&self, id: u32) -> &K {
        &self.keys[id as usize]
    }
}

impl Incremental {
    /// Nothing learned yet.
    pub fn new(provider: Provider, options: LearnOptions) -> Self {
        Incremental {
            provider,
            options,
            slots: Vec::new(),
            lists: Vec::new(),
            list_ids: HashMap::default(),
            selectors: Interner::default(),
            peers: Interner::default(),
            sums: Sums::default(),
            dirty: BTreeSet::new(),
            touched: false,
            proposals: Vec::new(),
            proposal_lists: Vec::new(),
            summaries: Vec::new(),
            unrendered: BTreeMap::new(),
            subject_keys: HashMap::default(),
            peer_keys: HashMap::default(),
        }
    }

    /// Learns the edge in `slot` as it is now, in place of what the slot held. Give every
    /// edge that changed since the last round; after the resolver changed, every edge. All
    /// calls of one round must use one resolver (see [`Incremental::finish`]).
    pub fn learn(&mut self, slot: u32, e: AggregatedEdge<'_>, resolver: &dyn Resolver) {
        let outcome = self.outcome(&e, resolver);
        let new = Contribution {
            count: e.count,
            first: e.first_seen,
            last: e.last_seen,
            dns: e.edge.peer_dns.clone(),
            outcome,
        };
        let at = slot as usize;
        if self.slots.len() <= at {
            self.slots.resize(at + 1, None);
        }
        match self.slots[at].take() {
            Some(old) if old == new => {}
            Some(old) if new.grows(&old) => self.grow(slot, &old, &new),
            Some(old) => {
                self.remove(slot, &old);
                self.add(slot, &new);
            }
            None => self.add(slot, &new),
        }
        self.slots[at] = Some(new);
    }

    /// Ends a round: renders again the allow-lists its edges touched. Whether anything
    /// learned changed since the last round (the proposals or the summary).
    pub fn finish(&mut self) -> bool {
        self.subject_keys.clear();
        self.peer_keys.clear();
        for id in std::mem::take(&mut self.dirty) {
            self.render(id);
        }
        std::mem::take(&mut self.touched)
    }

    /// The proposal of every non-empty allow-list, in (workload, direction) order.
    pub fn proposals(&self) -> &[WorkloadNetworkPolicyProposal] {
        &self.proposals
    }

    /// The summary of every allow-list, those whose peers were all omitted included, in
    /// (workload, direction) order.
    pub fn allow_lists(&self) -> &[AllowListSummary] {
        &self.summaries
    }

    /// Allow-lists that could not be rendered, as `subject direction: why` (see
    /// `render_proposal_with_status`; learning makes none of those).
    pub fn unrendered(&self) -> impl Iterator<Item = &str> {
        self.unrendered.values().map(String::as_str)
    }

    /// The summary of what every edge given became, as [`learn`](super::learn) reports
    /// it.
    pub fn summary(&self) -> LearnSummary {
        LearnSummary {
            allow_lists: self.summaries.clone(),
            ..self.counts()
        }
    }

    /// [`Incremental::summary`] without its allow-lists (those are
    /// [`Incremental::allow_lists`]): the counts by reason.
    pub fn counts(&self) -> LearnSummary {
        let s = &self.sums;
        LearnSummary {
            input: s.input.tally(),
            learned: s.learned.tally(),
            allow_lists: Vec::new(),
            invalid_edges: s.invalid.tallies(),
            excluded: s.excluded.tally(),
            unresolved_subjects: s.unresolved_subjects.tallies(),
            not_a_subject: s.not_a_subject.tallies(),
            external_subjects: s.external_subjects.tally(),
            reserved_subjects: s.reserved_subjects.tallies(),
            unresolved_peers: s.unresolved_peers.tallies(),
            unmanaged_peers: s.unmanaged_peers.tallies(),
        }
    }

    /// Where `e` goes, resolved as the one-go learner resolves it.
    fn outcome(&mut self, e: &AggregatedEdge<'_>, resolver: &dyn Resolver) -> Outcome {
        if let Err(why) = check_edge(self.provider, e.edge) {
            return Outcome::Invalid(why);
        }
        let seen = Seen::between(e.first_seen, e.last_seen);
        let selectors = &mut self.selectors;
        let found = subject(
            resolver,
            &self.options,
            &mut self.subject_keys,
            e.edge,
            seen,
            |key| selectors.id(key),
        );
        let (owner, selector) = match found {
            Ok((owner, selector)) => (owner, *selector),
            Err(skip) => {
                return match skip {
                    SubjectSkip::Excluded => Outcome::Excluded,
                    SubjectSkip::Unresolved(u) => Outcome::UnresolvedSubject(u),
                    SubjectSkip::NotASubject(k) => Outcome::NotASubject(k),
                    SubjectSkip::External => Outcome::ExternalSubject,
                    SubjectSkip::Reserved(r) => Outcome::ReservedSubject(r),
                };
            }
        };
        let peers = &mut self.peers;
        let found = peer(
            self.provider,
            resolver,
            &mut self.peer_keys,
            e.edge,
            seen,
            |key| peers.id(key),
        );
        let (protocol, port) = (e.edge.protocol, e.edge.port);
        let peer = match found {
            Ok(id) => Peer::Rule {
                peer: *id,
                protocol,
                port,
            },
            Err(PeerOmission::Unresolved(why)) => Peer::Unresolved(why),
            Err(PeerOmission::Unmanaged(r)) => Peer::Unmanaged {
                peer: r,
                protocol,
                port,
            },
        };
        Outcome::Listed {
            list: self.list(owner, e.edge.direction),
            selector,
            peer,
        }
    }

    /// The id of the list of `subject` and `direction`, made when new.
    fn list(&mut self, subject: WorkloadRef, direction: Direction) -> u32 {
        let key = (subject, direction);
        if let Some(&id) = self.list_ids.get(&key) {
            return id;
        }
        let id = u32::try_from(self.lists.len()).unwrap_or(u32::MAX);
        let (subject, direction) = key;
        self.lists.push(ListState {
            subject: subject.clone(),
            direction,
            selectors: BTreeMap::new(),
            rules: HashMap::default(),
            peer_ports: HashMap::default(),
            omitted: Sum::default(),
            unmanaged: BTreeMap::new(),
            reshaped: true,
            changed_rows: Vec::new(),
        });
        self.list_ids.insert((subject, direction), id);
        id
    }

    /// Counts a new contribution of `slot`.
    fn add(&mut self, slot: u32, c: &Contribution) {
        self.count(slot, c, Delta::Add(c.count));
    }

    /// Takes `slot`'s contribution `c` out again.
    fn remove(&mut self, slot: u32, c: &Contribution) {
        self.count(slot, c, Delta::Sub(c.count));
    }

    /// Adds what `new` grew by since `old` (same outcome, see [`Contribution::grows`]).
    fn grow(&mut self, slot: u32, old: &Contribution, new: &Contribution) {
        self.count(slot, new, Delta::Grow(new.count - old.count));
    }

    /// Applies `delta`, of `slot`'s contribution `c`, to every sum `c` is in.
    fn count(&mut self, slot: u32, c: &Contribution, delta: Delta) {
        self.touched = true;
        let s = &mut self.sums;
        s.input.apply(delta);
        let (list, selector, peer) = match c.outcome {
            Outcome::Invalid(why) => return s.invalid.apply(why, delta),
            Outcome::Excluded => return s.excluded.apply(delta),
            Outcome::UnresolvedSubject(u) => return s.unresolved_subjects.apply(u, delta),
            Outcome::NotASubject(k) => return s.not_a_subject.apply(k, delta),
            Outcome::ExternalSubject => return s.external_subjects.apply(delta),
            Outcome::ReservedSubject(r) => return s.reserved_subjects.apply(r, delta),
            Outcome::Listed {
                list,
                selector,
                peer,
            } => (list, selector, peer),
        };
        self.dirty.insert(list);
        let l = &mut self.lists[list as usize];
        match delta {
            Delta::Add(_) => {
                let resolved = l.selectors.entry(selector).or_default();
                *resolved += 1;
                l.reshaped |= *resolved == 1;
            }
            Delta::Sub(_) => {
                if let Some(n) = l.selectors.get_mut(&selector) {
                    *n -= 1;
                    if *n == 0 {
                        l.selectors.remove(&selector);
                        l.reshaped = true;
                    }
                }
            }
            Delta::Grow(_) => {}
        }
        match peer {
            Peer::Rule {
                peer,
                protocol,
                port,
            } => {
                s.learned.apply(delta);
                count_rule(l, &self.slots, (peer, protocol, port), slot, c, delta);
            }
            Peer::Unresolved(why) => {
                l.omitted.apply(delta);
                s.unresolved_peers.apply(why, delta);
            }
            Peer::Unmanaged {
                peer,
                protocol,
                port,
            } => {
                l.omitted.apply(delta);
                apply_keyed(&mut l.unmanaged, (peer, protocol, port), delta);
                s.unmanaged_peers.apply(peer, delta);
            }
        }
    }

    /// Renders list `id` again: its summary, and its proposal (in full when its shape
    /// changed, else the rows whose evidence changed), each put in order, or taken out when
    /// the list has no edge (or no rule) left.
    fn render(&mut self, id: u32) {
        let l = &mut self.lists[id as usize];
        let reshaped = std::mem::take(&mut l.reshaped);
        let changed_rows = std::mem::take(&mut l.changed_rows);
        let l = &self.lists[id as usize];
        let key = (&l.subject, l.direction);
        let found = self
            .summaries
            .binary_search_by(|s| (&s.subject, s.direction).cmp(&key));
        let selector = l.selectors.keys().map(|&s| self.selectors.key(s)).min();
        let Some(selector) = selector else {
            if let Ok(at) = found {
                self.summaries.remove(at);
            }
            self.unrendered.remove(&id);
            self.place_proposal(id, None);
            return;
        };
        let summary = self.summarize(l);
        match found {
            Ok(at) => self.summaries[at] = summary,
            Err(at) => self.summaries.insert(at, summary),
        }
        if l.rules.is_empty() {
            self.unrendered.remove(&id);
            self.place_proposal(id, None);
            return;
        }
        if !reshaped && let Ok(at) = self.proposal_at(id) {
            self.patch(id, at, &changed_rows);
            return;
        }
        // Rules in rule order: by peer, then protocol and port.
        let mut order: Vec<(u32, Protocol, u16)> = l.rules.keys().copied().collect();
        order.sort_unstable_by(|a, b| {
            let (pa, pb) = (self.peers.key(a.0), self.peers.key(b.0));
            pa.cmp(pb).then((a.1, a.2).cmp(&(b.1, b.2)))
        });
        let mut peers: BTreeMap<PeerKey, BTreeMap<(Protocol, u16), Evidence>> = BTreeMap::new();
        for key in &order {
            let evidence = l.rules[key].evidence();
            let ports = match peers.get_mut(self.peers.key(key.0)) {
                Some(ports) => ports,
                None => peers.entry(self.peers.key(key.0).clone()).or_default(),
            };
            ports.insert((key.1, key.2), evidence);
        }
        let list = AllowList {
            subject: l.subject.clone(),
            direction: l.direction,
            selector: selector.to_selector(),
            backend: backend_for(self.provider),
            peers,
        };
        let proposal = match render_proposal_with_status(&list) {
            Ok(p) => {
                self.unrendered.remove(&id);
                Some(p)
            }
            Err(e) => {
                let why = format!("{} {}: {e}", list.subject, list.direction);
                self.unrendered.insert(id, why);
                None
            }
        };
        // Rows follow the rules in order, as the status was rendered.
        let l = &mut self.lists[id as usize];
        for (row, key) in order.iter().enumerate() {
            if let Some(rule) = l.rules.get_mut(key) {
                rule.row = row;
            }
        }
        self.place_proposal(id, proposal);
    }

    /// The summary of list `l`, from its sums.
    fn summarize(&self, l: &ListState) -> AllowListSummary {
        AllowListSummary {
            name: proposal_name(l.subject.kind, &l.subject.name, l.direction),
            subject: l.subject.clone(),
            direction: l.direction,
            rules: l.peer_ports.len(),
            ports: l.rules.len(),
            flows: l.flows(),
            omitted: l.omitted.tally(),
            unmanaged: l
                .unmanaged
                .iter()
                .map(|(&(peer, protocol, port), seen)| UnmanagedPeer {
                    peer,
                    protocol,
                    port,
                    seen: seen.tally(),
                })
                .collect(),
            selector_conflict: l.selectors.len() > 1,
        }
    }

    /// Sets the `changed` rows of list `id`'s proposal (at `at`) from its rules, and the
    /// status totals: a list whose rules, ports and selector stayed as they were rendered.
    fn patch(&mut self, id: u32, at: usize, changed: &[(u32, Protocol, u16)]) {
        let l = &self.lists[id as usize];
        let Some(status) = self.proposals[at].status.as_mut() else {
            return;
        };
        for &(peer, protocol, port) in changed {
            if let Some(rule) = l.rules.get(&(peer, protocol, port))
                && let Some(row) = status.peers.get_mut(rule.row)
            {
                set_evidence(row, &rule.evidence());
            }
        }
        let first = l.rules.values().map(|r| r.first).min().unwrap_or_default();
        set_totals(status, first, l.flows());
        status.summarize_times();
    }

    /// Where list `id`'s proposal is, or would be put, in `proposals`.
    fn proposal_at(&self, id: u32) -> Result<usize, usize> {
        let lists = &self.lists;
        let key = |id: u32| {
            let l = &lists[id as usize];
            (&l.subject, l.direction)
        };
        self.proposal_lists
            .binary_search_by(|&other| key(other).cmp(&key(id)))
    }

    /// Puts list `id`'s proposal in its place in (workload, direction) order, or takes it
    /// out.
    fn place_proposal(&mut self, id: u32, proposal: Option<WorkloadNetworkPolicyProposal>) {
        match (self.proposal_at(id), proposal) {
            (Ok(at), Some(p)) => self.proposals[at] = p,
            (Err(at), Some(p)) => {
                self.proposals.insert(at, p);
                self.proposal_lists.insert(at, id);
            }
            (Ok(at), None) => {
                self.proposals.remove(at);
                self.proposal_lists.remove(at);
            }
            (Err(_), None) => {}
        }
    }
}

/// Applies `delta` of `slot`'s contribution `c` to its rule `key` of list `l`: a new rule
/// or one left empty reshapes the list; a rule an edge left is summed again from the
/// edges still in it (`slots`), as its times and DNS names cannot be taken apart.
fn count_rule(
    l: &mut ListState,
    slots: &[Option<Contribution>],
    key: (u32, Protocol, u16),
    slot: u32,
    c: &Contribution,
    delta: Delta,
) {
    let peer = key.0;
    match delta {
        Delta::Add(_) => {
            let rule = l.rules.entry(key).or_insert_with(|| {
                l.reshaped = true;
                *l.peer_ports.entry(peer).or_default() += 1;
                Rule::new()
            });
            rule.add(c);
            rule.slots.push(slot);
        }
        Delta::Sub(_) => {
            let Some(rule) = l.rules.get_mut(&key) else {
                return;
            };
            rule.slots.retain(|&other| other != slot);
            if rule.slots.is_empty() {
                l.rules.remove(&key);
                l.reshaped = true;
                if let Some(n) = l.peer_ports.get_mut(&peer) {
                    *n -= 1;
                    if *n == 0 {
                        l.peer_ports.remove(&peer);
                    }
                }
                return;
            }
            let mut again = Rule::new();
            for c in rule
                .slots
                .iter()
                .filter_map(|&s| slots[s as usize].as_ref())
            {
                again.add(c);
            }
            again.slots = std::mem::take(&mut rule.slots);
            again.row = rule.row;
            *rule = again;
        }
        Delta::Grow(by) => {
            let Some(rule) = l.rules.get_mut(&key) else {
                return;
            };
            rule.flows += u128::from(by);
            rule.first = rule.first.min(c.first);
            rule.last = rule.last.max(c.last);
        }
    }
    l.changed_rows.push(key);
}

#[cfg(test)]
mod tests;
