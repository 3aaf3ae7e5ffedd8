//! One key of the [`super::EdgeIndex`]: the merged edge and the per-agent contributions
//! it is the sum of.
//!
//! A contribution is the current incarnation `(epoch, serial)` of the key in one agent's
//! `FlowTable`, with the largest cumulative count seen for it. The merged count is kept
//! up to date incrementally: it is the sum of every count ever folded in, so a retired
//! contribution (replaced by a newer incarnation or epoch) stays in the total without
//! being stored.

use std::cmp::Ordering;

use super::{AgentState, MergedEdge};
use ne_flow::table::EdgeSnapshot;

/// One agent's current incarnation of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Contribution {
    /// The agent's slot in [`super::EdgeIndex`]'s agent table.
    agent: u32,
    epoch: u64,
    serial: u64,
    /// The largest cumulative count seen for this incarnation.
    count: u64,
}

/// The incarnation whose edge metadata an entry shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Source {
    agent: u32,
    epoch: u64,
    serial: u64,
}

/// What merging one [`EdgeSnapshot`] into an entry did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Merge {
    /// The merged edge changed (count, times or metadata).
    Changed,
    /// Accepted, but nothing the merged edge shows changed (a duplicate).
    Unchanged,
    /// The entry's serial is older than the agent's current one for the key: ignored.
    StaleSerial,
}

/// One key: what readers see, plus the bookkeeping behind it.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) merged: MergedEdge,
    /// Where `merged.edge` comes from.
    source: Source,
    /// The first agent's contribution, inline: most keys are seen by one node only.
    first: Contribution,
    /// Further agents' contributions, sorted by agent slot (empty: no allocation).
    rest: Vec<Contribution>,
    /// Set when `merged` changes, cleared by [`super::EdgeIndex::drain_changed`].
    pub(super) changed: bool,
}

impl Entry {
    /// A new key, seen first in `snap` from `agent` in `epoch`.
    pub(super) fn new(agent: u32, epoch: u64, snap: &EdgeSnapshot) -> Self {
        Entry {
            merged: MergedEdge {
                edge: snap.edge.clone(),
                count: snap.count,
                first_seen: snap.first_seen,
                last_seen: snap.last_seen,
            },
            source: Source {
                agent,
                epoch,
                serial: snap.serial,
            },
            first: Contribution {
                agent,
                epoch,
                serial: snap.serial,
                count: snap.count,
            },
            rest: Vec::new(),
            changed: true,
        }
    }

    /// Number of agents that contributed to this key (current or retired incarnations
    /// alike; one slot per agent).
    pub(super) fn agents(&self) -> usize {
        1 + self.rest.len()
    }

    /// The contribution of `agent`, created empty (count 0, the incoming epoch and
    /// serial) when the agent never sent this key.
    fn contribution(&mut self, agent: u32, epoch: u64, serial: u64) -> &mut Contribution {
        if self.first.agent == agent {
            return &mut self.first;
        }
        let at = match self.rest.binary_search_by_key(&agent, |c| c.agent) {
            Ok(at) => at,
            Err(at) => {
                let empty = Contribution {
                    agent,
                    epoch,
                    serial,
                    count: 0,
                };
                self.rest.insert(at, empty);
                at
            }
        };
        &mut self.rest[at]
    }

    /// Merges one entry sent by `agent` (slot) in `epoch`, the agent's current epoch.
    /// `agents` resolves slots to agent ids for the metadata tie-break.
    pub(super) fn merge(
        &mut self,
        agent: u32,
        epoch: u64,
        snap: &EdgeSnapshot,
        agents: &[AgentState],
    ) -> Merge {
        let c = self.contribution(agent, epoch, snap.serial);
        let added = match (epoch.cmp(&c.epoch), snap.serial.cmp(&c.serial)) {
            // A newer epoch, or a newer incarnation in this epoch: the stored count is
            // retired (it stays in the merged total) and the incoming one becomes current.
            (Ordering::Greater, _) | (Ordering::Equal, Ordering::Greater) => {
                *c = Contribution {
                    agent,
                    epoch,
                    serial: snap.serial,
                    count: snap.count,
                };
                snap.count
            }
            // The same incarnation: counts are cumulative, keep the largest.
            (Ordering::Equal, Ordering::Equal) => {
                let added = snap.count.saturating_sub(c.count);
                c.count = c.count.max(snap.count);
                added
            }
            // An older incarnation, or (cannot happen after the epoch gate in `apply`) an
            // older epoch than the contribution's.
            (Ordering::Equal, Ordering::Less) | (Ordering::Less, _) => {
                return Merge::StaleSerial;
            }
        };

        let m = &mut self.merged;
        let mut changed = added > 0;
        m.count = m.count.saturating_add(added);
        // Metadata: the incarnation with the smallest (first_seen, agent id, epoch,
        // serial) wins; `m.first_seen` is always the current source's first_seen.
        let incoming = Source {
            agent,
            epoch,
            serial: snap.serial,
        };
        let takes_over = match snap.first_seen.cmp(&m.first_seen) {
            Ordering::Less => incoming != self.source,
            Ordering::Equal => {
                incoming != self.source && ranks_before(incoming, self.source, agents)
            }
            Ordering::Greater => false,
        };
        if takes_over {
            // An incarnation's edge never changes, so only another source needs a copy.
            if m.edge != snap.edge {
                m.edge = snap.edge.clone();
                changed = true;
            }
            self.source = incoming;
        }
        if snap.first_seen < m.first_seen {
            m.first_seen = snap.first_seen;
            changed = true;
        }
        if snap.last_seen > m.last_seen {
            m.last_seen = snap.last_seen;
            changed = true;
        }
        if changed {
            Merge::Changed
        } else {
            Merge::Unchanged
        }
    }
}

/// Whether incarnation `a` ranks before `b` given equal first_seen: by agent id, then
/// epoch, then serial.
fn ranks_before(a: Source, b: Source, agents: &[AgentState]) -> bool {
    let id = |s: Source| agents.get(s.agent as usize).map(|state| &state.id);
    id(a)
        .cmp(&id(b))
        .then(a.epoch.cmp(&b.epoch))
        .then(a.serial.cmp(&b.serial))
        == Ordering::Less
}
