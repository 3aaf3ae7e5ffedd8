//! Model-based property test: agents simulated with the real [`FlowTable`] record, drain,
//! re-send, reconnect, expire and restart in any interleaving; the index must equal a
//! model computed from the records alone.
//!
//! The simulated agents keep the agent-side contract of the module docs: an agent expires
//! entries only when everything it drained was delivered, and restarts only after
//! delivering what it drained. Within that, delivery is adversarial: any earlier batch of
//! any agent and epoch may be delivered again at any time.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;

use super::*;
use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, WorkloadKind, WorkloadRef, labels};
use ne_flow::table::FlowTable;

const AGENTS: u8 = 3;

/// A small key space, so that agents and incarnations collide often.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct K {
    subject: u8,
    peer: u8,
    port: u16,
}

/// The edge of key `k` as `agent` records it; `meta` varies the metadata only (labels,
/// address, DNS name), so that which edge the index keeps is visible.
fn edge(k: K, meta: u8, agent: u8) -> Edge {
    let workload = |name: String| {
        EndpointId::Workload(WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: name.into(),
        })
    };
    Edge {
        subject: Endpoint::new(workload(format!("app-{}", k.subject)))
            .with_labels(labels([("version", format!("v{meta}"))])),
        direction: Direction::Egress,
        peer: Endpoint::new(workload(format!("peer-{}", k.peer)))
            .with_ip(Some(IpAddr::V4(Ipv4Addr::new(10, 0, agent, meta)))),
        protocol: Protocol::Tcp,
        port: k.port,
        peer_dns: (meta % 2 == 1).then(|| format!("m{meta}.example").into()),
        denied_by: None,
    }
}

fn agent_id(agent: u8) -> AgentId {
    AgentId::from(format!("node-{agent}"))
}

#[derive(Clone, Debug)]
enum Op {
    /// The agent records `count` connections; `tick` advances the clock first.
    Record {
        agent: u8,
        key: K,
        meta: u8,
        count: u64,
        tick: bool,
    },
    /// The agent drains its dirty entries into batches of `chunk` entries, queued in order.
    Drain { agent: u8, chunk: usize },
    /// The leader receives the agent's next queued batch.
    Deliver { agent: u8 },
    /// The leader receives again an earlier delivered batch (any agent, any epoch).
    Duplicate { pick: usize },
    /// Same process, new stream: hello, a snapshot first, then the unacked batches again.
    Reconnect { agent: u8 },
    /// The agent forgets idle, shipped entries, only when all it drained was delivered;
    /// `ship` first drains and delivers everything.
    Expire { agent: u8, ship: bool },
    /// The agent delivers what it drained, then restarts with a new epoch and an empty
    /// table; `hello` says whether the new stream starts with a hello or just a batch.
    Restart { agent: u8, hello: bool },
    /// The proposal writer reads the changed edges.
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    let agent = || 0..AGENTS;
    let key = (0u8..2, 0u8..3, prop::sample::select(vec![53u16, 443])).prop_map(
        |(subject, peer, port)| K {
            subject,
            peer,
            port,
        },
    );
    prop_oneof![
        8 => (agent(), key, 0u8..3, 0u64..4, any::<bool>()).prop_map(
            |(agent, key, meta, count, tick)| Op::Record { agent, key, meta, count, tick }
        ),
        3 => (agent(), 1usize..4).prop_map(|(agent, chunk)| Op::Drain { agent, chunk }),
        5 => agent().prop_map(|agent| Op::Deliver { agent }),
        3 => any::<usize>().prop_map(|pick| Op::Duplicate { pick }),
        1 => agent().prop_map(|agent| Op::Reconnect { agent }),
        2 => (agent(), any::<bool>()).prop_map(|(agent, ship)| Op::Expire { agent, ship }),
        1 => (agent(), any::<bool>()).prop_map(|(agent, hello)| Op::Restart { agent, hello }),
        1 => Just(Op::Flush),
    ]
}

struct Agent {
    id: AgentId,
    epoch: u64,
    table: FlowTable,
    /// Drained, not yet delivered: (epoch, batch).
    outbox: VecDeque<(u64, Vec<EdgeSnapshot>)>,
}

/// One recorded observation, for the model.
struct Rec {
    key: K,
    edge: Edge,
    count: u64,
    time: i64,
    /// The metadata tie-break of the module docs, with the op index for ties within one
    /// process (the earlier record is in the earlier incarnation).
    rank: (AgentId, u64, usize),
}

struct Sim {
    agents: Vec<Agent>,
    index: EdgeIndex,
    /// Every delivered batch: (agent, epoch, batch).
    delivered: Vec<(AgentId, u64, Vec<EdgeSnapshot>)>,
    records: Vec<Rec>,
    clock: i64,
    /// What the proposal writer has read through `drain_changed`, by slot.
    writer: BTreeMap<u32, MergedEdge>,
}

impl Sim {
    fn new() -> Self {
        Sim {
            agents: (0..AGENTS)
                .map(|a| Agent {
                    id: agent_id(a),
                    epoch: 1,
                    table: FlowTable::new(1_000),
                    outbox: VecDeque::new(),
                })
                .collect(),
            index: EdgeIndex::new(1_000),
            delivered: Vec::new(),
            records: Vec::new(),
            clock: 0,
            writer: BTreeMap::new(),
        }
    }

    fn drain(&mut self, agent: usize, chunk: usize) {
        let a = &mut self.agents[agent];
        for batch in a.table.drain_dirty().chunks(chunk) {
            a.outbox.push_back((a.epoch, batch.to_vec()));
        }
    }

    fn deliver(&mut self, agent: usize) {
        let a = &mut self.agents[agent];
        if let Some((epoch, batch)) = a.outbox.pop_front() {
            self.index.apply(&a.id, epoch, &batch);
            self.delivered.push((a.id.clone(), epoch, batch));
        }
    }

    fn deliver_all(&mut self, agent: usize) {
        self.drain(agent, 2);
        while !self.agents[agent].outbox.is_empty() {
            self.deliver(agent);
        }
    }

    fn flush(&mut self) {
        self.writer.extend(
            self.index
                .drain_changed()
                .map(|(slot, m)| (slot, m.clone())),
        );
    }

    fn run(&mut self, at: usize, op: &Op) {
        match *op {
            Op::Record {
                agent,
                key,
                meta,
                count,
                tick,
            } => {
                self.clock += i64::from(tick);
                let edge = edge(key, meta, agent);
                let a = &self.agents[usize::from(agent)];
                a.table.record(&edge, Timestamp(self.clock), count);
                self.records.push(Rec {
                    key,
                    edge,
                    count,
                    time: self.clock,
                    rank: (a.id.clone(), a.epoch, at),
                });
            }
            Op::Drain { agent, chunk } => self.drain(usize::from(agent), chunk),
            Op::Deliver { agent } => self.deliver(usize::from(agent)),
            Op::Duplicate { pick } => {
                if !self.delivered.is_empty() {
                    let (id, epoch, batch) = &self.delivered[pick % self.delivered.len()];
                    self.index.apply(id, *epoch, batch);
                }
            }
            Op::Reconnect { agent } => {
                let a = &mut self.agents[usize::from(agent)];
                let hello = self.index.hello(&a.id, a.epoch);
                // Restarted when the restart's stream began without a hello.
                assert_ne!(hello, Hello::Stale);
                a.outbox.push_front((a.epoch, a.table.snapshot()));
            }
            Op::Expire { agent, ship } => {
                if ship {
                    self.deliver_all(usize::from(agent));
                }
                let a = &self.agents[usize::from(agent)];
                if a.outbox.is_empty() {
                    a.table.expire_idle(Timestamp(self.clock + 1));
                }
            }
            Op::Restart { agent, hello } => {
                self.deliver_all(usize::from(agent));
                let a = &mut self.agents[usize::from(agent)];
                a.epoch += 1;
                a.table = FlowTable::new(1_000);
                if hello {
                    let hello = self.index.hello(&a.id, a.epoch);
                    assert!(matches!(hello, Hello::New | Hello::Restarted), "{hello:?}");
                }
            }
            Op::Flush => self.flush(),
        }
    }
}

/// The expected index, from the records alone: totals over every record, metadata of
/// the record with the smallest (time, agent id, epoch, op index).
fn model(records: &[Rec]) -> BTreeMap<EdgeKey, MergedEdge> {
    let mut best: BTreeMap<K, &Rec> = BTreeMap::new();
    let mut totals: BTreeMap<K, (u64, i64, i64)> = BTreeMap::new();
    for r in records {
        let t = totals.entry(r.key).or_insert((0, r.time, r.time));
        *t = (t.0 + r.count, t.1.min(r.time), t.2.max(r.time));
        let b = best.entry(r.key).or_insert(r);
        if (r.time, &r.rank) < (b.time, &b.rank) {
            *b = r;
        }
    }
    totals
        .into_iter()
        .map(|(k, (count, first, last))| {
            let edge = best[&k].edge.clone();
            let merged = MergedEdge {
                edge,
                count,
                first_seen: Timestamp(first),
                last_seen: Timestamp(last),
            };
            (merged.key(), merged)
        })
        .collect()
}

fn by_key(index: &EdgeIndex) -> BTreeMap<EdgeKey, MergedEdge> {
    index.merged().map(|m| (m.key(), m.clone())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_interleaving_converges_to_the_model(ops in prop::collection::vec(op(), 0..150)) {
        let mut sim = Sim::new();
        for (at, op) in ops.iter().enumerate() {
            sim.run(at, op);
        }
        for agent in 0..usize::from(AGENTS) {
            sim.deliver_all(agent);
        }
        sim.flush();

        let merged = by_key(&sim.index);
        prop_assert_eq!(&merged, &model(&sim.records));
        // The writer, reading only changes, has seen every final value, each key under
        // the slot it holds in the index.
        let read: Vec<&MergedEdge> = sim.writer.values().collect();
        prop_assert_eq!(read, sim.index.merged().collect::<Vec<_>>());
        prop_assert_eq!(sim.writer.keys().copied().collect::<Vec<_>>(), (0..sim.index.len() as u32).collect::<Vec<_>>());
        prop_assert_eq!(sim.index.dropped(), 0);

        // Every delivered batch again, newest first: nothing changes.
        let delivered = std::mem::take(&mut sim.delivered);
        for (id, epoch, batch) in delivered.iter().rev() {
            let s = sim.index.apply(id, *epoch, batch);
            prop_assert_eq!((s.inserted, s.updated), (0, 0));
        }
        prop_assert_eq!(by_key(&sim.index), merged);
        prop_assert_eq!(sim.index.drain_changed().count(), 0);
    }
}
