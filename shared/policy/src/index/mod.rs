//! The leader's merged edge index (docs/architecture.md, "The leader" and "Agent ↔ leader
//! protocol").
//!
//! Data flow on the leader: an agent's ingest stream → decode (the delta codec) →
//! [`EdgeIndex::apply`] per batch → the leader's rounds, which take what changed since the
//! last round ([`EdgeIndex::drain_changed`]) each flush interval, so that a round costs
//! the edges that changed, not every edge held. Every key keeps its *slot* (its position
//! in the index, from 0 in insertion order) for the index's life: keys are never removed,
//! so a consumer keeps its own state by slot.
//!
//! The index is a synchronous state machine: one owner task calls [`EdgeIndex::hello`] when
//! a stream starts and [`EdgeIndex::apply`] per batch, never awaits, and holds no lock.
//!
//! # What agents send, and how it is merged
//!
//! Every agent ships [`EdgeSnapshot`]s of its `FlowTable`: cumulative totals per entry,
//! tagged with the entry's `serial` (its incarnation in the table). An agent process is
//! `(agent id, epoch)`; a restarted agent has a larger epoch and a table that starts from
//! zero. Batches may be duplicated, re-sent after a reconnect and interleaved across
//! agents; the index converges to the same result whatever the order, by keeping per key
//! and agent only the *current* incarnation `(epoch, serial)` and its largest count:
//!
//! - same epoch and serial: count = max, first_seen = min, last_seen = max (idempotent);
//! - a larger serial (the agent expired the entry and inserted it again), or a larger
//!   epoch (the agent restarted): the stored count is *retired* — it stays in the merged
//!   total — and the incoming incarnation becomes current;
//! - a smaller serial: stale, ignored and counted ([`ApplyStats::stale_serial`]);
//! - a batch from an epoch older than the agent's current one: ignored and counted
//!   ([`ApplyStats::stale_epoch`]). [`EdgeIndex::hello`] (or the first batch) of a newer
//!   epoch makes the older epochs stale. Their contributions are retired lazily, when the
//!   new epoch next touches the key; the merged totals are the same either way.
//!
//! A merged edge's count is the retired counts plus the current ones; its first and last
//! seen are the min and max over everything accepted. Its metadata (labels, addresses, DNS
//! name) is the edge of the incarnation with the smallest `(first_seen, agent id, epoch,
//! serial)`: the earliest observation, with a total tie-break, so that the arrival order
//! does not matter.
//!
//! Contract for the agent: the final count of an incarnation must reach the leader
//! before any newer incarnation of the same key from the same process (ship, and have
//! acked, an entry's last value before expiring it), since a late value of a retired
//! incarnation is stale by the rule above.
//!
//! Memory is bounded by a capacity on distinct keys: past it, new keys are dropped and
//! counted ([`ApplyStats::dropped`]), known keys keep merging.

mod entry;

use std::collections::HashMap;
use std::fmt;
use std::ops::AddAssign;

use foldhash::fast::RandomState;

use entry::{Entry, Merge};
use ne_flow::edge::Edge;
use ne_flow::flow::{Str, Timestamp};
use ne_flow::table::{EdgeKey, EdgeSnapshot, EdgeView, KeyView};

/// An agent's stable identity (one per node, or per Goldmane deployment), as sent in its
/// stream's hello. Ordered, for the deterministic metadata tie-break.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(pub Str);

impl AgentId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for AgentId {
    fn from(id: &str) -> Self {
        AgentId(id.into())
    }
}

impl From<String> for AgentId {
    fn from(id: String) -> Self {
        AgentId(id.into())
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One key of the index as the proposal writer reads it: the metadata edge and the totals
/// over every agent, epoch and incarnation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedEdge {
    /// The edge of the earliest incarnation seen (see the module docs for the exact rule).
    pub edge: Edge,
    /// Connections over every agent, epoch and incarnation (saturating).
    pub count: u64,
    /// Earliest observation time.
    pub first_seen: Timestamp,
    /// Latest observation time.
    pub last_seen: Timestamp,
}

impl MergedEdge {
    /// The key this edge is stored under.
    pub fn key(&self) -> EdgeKey {
        EdgeKey::of(&self.edge)
    }
}

/// What [`EdgeIndex::hello`] made of a new stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hello {
    /// The agent was unknown.
    New,
    /// The agent's current epoch again: a reconnect, or a new leader's first stream.
    Resumed,
    /// A newer epoch: the agent restarted; its older epochs are retired.
    Restarted,
    /// An older epoch than the agent's current one: its batches will be ignored (a stale
    /// process; the stream should be refused).
    Stale,
    /// The agent is unknown and the index already knows as many agents as it may
    /// ([`EdgeIndex::with_max_agents`]): its batches will be dropped (the stream should be
    /// refused).
    Full,
}

/// What one [`EdgeIndex::apply`] did with its entries; every entry is counted once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ApplyStats {
    /// Entries that created a new key.
    pub inserted: u64,
    /// Entries that changed a known key's merged edge.
    pub updated: u64,
    /// Entries accepted without changing anything (duplicates, re-sent snapshots).
    pub unchanged: u64,
    /// Entries of an incarnation older than the agent's current one for the key.
    pub stale_serial: u64,
    /// Entries of a batch from an epoch older than the agent's current one.
    pub stale_epoch: u64,
    /// Entries of a new key dropped because the index was full, or of an agent it had no
    /// room for ([`Hello::Full`]).
    pub dropped: u64,
}

impl ApplyStats {
    /// Entries counted, whatever their outcome.
    pub fn total(&self) -> u64 {
        self.inserted
            + self.updated
            + self.unchanged
            + self.stale_serial
            + self.stale_epoch
            + self.dropped
    }
}

impl AddAssign for ApplyStats {
    fn add_assign(&mut self, other: Self) {
        self.inserted += other.inserted;
        self.updated += other.updated;
        self.unchanged += other.unchanged;
        self.stale_serial += other.stale_serial;
        self.stale_epoch += other.stale_epoch;
        self.dropped += other.dropped;
    }
}

/// What the index knows of one agent.
#[derive(Debug)]
struct AgentState {
    id: AgentId,
    /// The newest epoch seen; batches of older ones are stale.
    epoch: u64,
}

/// The leader's merged edge index: one [`MergedEdge`] per [`EdgeKey`], summed over every
/// agent. Synchronous and single-owner; see the module docs for the merge rules.
///
/// Layout: a hash map from the owned key to a slot in a vector of entries, so that a known
/// key costs one lookup with a key *borrowed* from the incoming edge (no clone), and the
/// changed keys are a list of slots. Hasher: [`foldhash::fast::RandomState`], seeded per
/// process, because keys carry addresses remote parties choose (as in the `FlowTable`).
#[derive(Debug)]
pub struct EdgeIndex {
    keys: HashMap<EdgeKey, u32, RandomState>,
    entries: Vec<Entry>,
    /// Slots whose `changed` flag went up since the last drain.
    changed: Vec<u32>,
    agent_slots: HashMap<AgentId, u32, RandomState>,
    agents: Vec<AgentState>,
    /// Most agents known at once.
    max_agents: usize,
    capacity: usize,
    totals: ApplyStats,
}

/// Up to this many keys are allocated up front; the index grows beyond as needed.
const PREALLOCATE_MAX: usize = 1 << 14;

impl EdgeIndex {
    /// An empty index that holds at most `capacity` distinct edges (and never more than
    /// `u32::MAX`).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.min(u32::MAX as usize);
        let preallocate = capacity.min(PREALLOCATE_MAX);
        EdgeIndex {
            keys: HashMap::with_capacity_and_hasher(preallocate, RandomState::default()),
            entries: Vec::with_capacity(preallocate),
            changed: Vec::new(),
            agent_slots: HashMap::default(),
            agents: Vec::new(),
            max_agents: u32::MAX as usize,
            capacity,
            totals: ApplyStats::default(),
        }
    }

    /// This index, knowing at most `max` agents (streams of further agents are refused:
    /// [`Hello::Full`]). Every agent ever seen stays known, as its entries refer to it.
    pub fn with_max_agents(mut self, max: usize) -> Self {
        self.max_agents = max.min(u32::MAX as usize);
        self
    }

    /// Agents known (every agent id that ever sent a hello or a batch).
    pub fn agents(&self) -> usize {
        self.agents.len()
    }

    /// Registers a new stream of `agent` in `epoch`. A newer epoch retires the agent's
    /// older ones (their counts stay in the totals) and makes their batches stale.
    pub fn hello(&mut self, agent: &AgentId, epoch: u64) -> Hello {
        match self.agent_slots.get(agent) {
            None if self.agents.len() >= self.max_agents => Hello::Full,
            None => {
                self.register(agent, epoch);
                Hello::New
            }
            Some(&slot) => {
                let state = &mut self.agents[slot as usize];
                match epoch.cmp(&state.epoch) {
                    std::cmp::Ordering::Less => Hello::Stale,
                    std::cmp::Ordering::Equal => Hello::Resumed,
                    std::cmp::Ordering::Greater => {
                        state.epoch = epoch;
                        Hello::Restarted
                    }
                }
            }
        }
    }

    fn register(&mut self, agent: &AgentId, epoch: u64) -> u32 {
        // Agents are nodes: far fewer than u32::MAX.
        let slot = u32::try_from(self.agents.len()).unwrap_or(u32::MAX);
        self.agents.push(AgentState {
            id: agent.clone(),
            epoch,
        });
        self.agent_slots.insert(agent.clone(), slot);
        slot
    }

    /// The agent's slot if a batch of `epoch` is current (a newer or unknown epoch is an
    /// implicit hello), else why not ([`Hello::Stale`] or [`Hello::Full`]).
    fn admit(&mut self, agent: &AgentId, epoch: u64) -> Result<u32, Hello> {
        match self.hello(agent, epoch) {
            refused @ (Hello::Stale | Hello::Full) => Err(refused),
            Hello::New | Hello::Resumed | Hello::Restarted => {
                self.agent_slots.get(agent).copied().ok_or(Hello::Full)
            }
        }
    }

    /// Merges one batch of `agent`'s entries from its process `epoch` (see the module docs
    /// for the rules). A known key costs one hash lookup with a borrowed key; a new key is
    /// cloned once, or dropped and counted when the index is full.
    pub fn apply(&mut self, agent: &AgentId, epoch: u64, edges: &[EdgeSnapshot]) -> ApplyStats {
        let mut stats = ApplyStats::default();
        let slot = match self.admit(agent, epoch) {
            Ok(slot) => slot,
            Err(refused) => {
                let n = edges.len() as u64;
                if refused == Hello::Stale {
                    stats.stale_epoch = n;
                } else {
                    stats.dropped = n;
                }
                self.totals += stats;
                return stats;
            }
        };
        for snap in edges {
            let view: &dyn KeyView = &EdgeView(&snap.edge);
            if let Some(&at) = self.keys.get(view) {
                let entry = &mut self.entries[at as usize];
                match entry.merge(slot, epoch, snap, &self.agents) {
                    Merge::Changed => {
                        stats.updated += 1;
                        if !entry.changed {
                            entry.changed = true;
                            self.changed.push(at);
                        }
                    }
                    Merge::Unchanged => stats.unchanged += 1,
                    Merge::StaleSerial => stats.stale_serial += 1,
                }
            } else if self.entries.len() < self.capacity {
                // Below the capacity, which is at most u32::MAX.
                let at = self.entries.len() as u32;
                self.entries.push(Entry::new(slot, epoch, snap));
                self.keys.insert(EdgeKey::of(&snap.edge), at);
                self.changed.push(at);
                stats.inserted += 1;
            } else {
                stats.dropped += 1;
            }
        }
        self.totals += stats;
        stats
    }

    /// The merged edge of `key`, if known.
    pub fn get(&self, key: &EdgeKey) -> Option<&MergedEdge> {
        let at = *self.keys.get(key)?;
        self.entries.get(at as usize).map(|e| &e.merged)
    }

    /// Every merged edge, in slot order.
    pub fn merged(&self) -> impl ExactSizeIterator<Item = &MergedEdge> + '_ {
        self.entries.iter().map(|e| &e.merged)
    }

    /// The merged edges from slot `slot` on, in slot order: the keys inserted since the
    /// index held `slot` keys.
    pub fn merged_from(&self, slot: usize) -> impl ExactSizeIterator<Item = &MergedEdge> + '_ {
        self.entries
            .get(slot..)
            .unwrap_or_default()
            .iter()
            .map(|e| &e.merged)
    }

    /// The merged edges changed (or inserted) since the previous drain, each once with its
    /// slot, in no particular order; their changed flags are cleared when this is called,
    /// whether or not the iterator is consumed.
    pub fn drain_changed(&mut self) -> DrainChanged<'_> {
        let slots = std::mem::take(&mut self.changed);
        for &at in &slots {
            if let Some(entry) = self.entries.get_mut(at as usize) {
                entry.changed = false;
            }
        }
        DrainChanged {
            entries: &self.entries,
            slots: slots.into_iter(),
        }
    }

    /// Number of distinct edges held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the index holds no edge.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The maximum number of distinct edges.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries of new keys dropped because the index was full, since creation.
    pub fn dropped(&self) -> u64 {
        self.totals.dropped
    }

    /// The sum of every [`ApplyStats`] returned so far.
    pub fn totals(&self) -> ApplyStats {
        self.totals
    }

    /// The newest epoch seen from `agent`, if any.
    pub fn agent_epoch(&self, agent: &AgentId) -> Option<u64> {
        let slot = *self.agent_slots.get(agent)?;
        self.agents.get(slot as usize).map(|a| a.epoch)
    }

    /// Number of agents that contributed to `key` (over all their epochs), 0 if unknown.
    pub fn agents_of(&self, key: &EdgeKey) -> usize {
        self.keys
            .get(key)
            .and_then(|&at| self.entries.get(at as usize))
            .map_or(0, Entry::agents)
    }
}

/// The iterator of [`EdgeIndex::drain_changed`].
#[derive(Debug)]
pub struct DrainChanged<'a> {
    entries: &'a [Entry],
    slots: std::vec::IntoIter<u32>,
}

impl<'a> Iterator for DrainChanged<'a> {
    /// A slot and its merged edge.
    type Item = (u32, &'a MergedEdge);

    fn next(&mut self) -> Option<Self::Item> {
        let entries = self.entries;
        self.slots
            .find_map(|at| entries.get(at as usize).map(|e| (at, &e.merged)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.slots.len()))
    }
}

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
