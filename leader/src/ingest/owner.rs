//! The one task that owns the leader's [`EdgeIndex`]es, so no lock guards them: ingest
//! sessions send it commands; it applies each batch synchronously, in arrival order, and
//! answers when the batch is in the indexes, so an ack always means "applied".
//!
//! One index per [`EdgeClass`]: learned edges (what proposals are made of), policy
//! denials and audit / dry-run denials (what protect- and monitor-mode violations are
//! made of). They never mix: learning reads [`Merged::edges`] only.

use ne_delta::{DecodedBatch, EdgeClass};
use ne_policy::index::{AgentId, ApplyStats, EdgeIndex, Hello, MergedEdge};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, oneshot};

/// What the owner task does.
enum Command {
    Hello {
        agent: AgentId,
        epoch: u64,
        done: oneshot::Sender<Hello>,
    },
    Apply {
        agent: AgentId,
        epoch: u64,
        batch: Box<DecodedBatch>,
        done: oneshot::Sender<ApplyStats>,
    },
    Read {
        done: oneshot::Sender<Merged>,
    },
    Changes {
        done: oneshot::Sender<Changes>,
    },
    InsertedSince {
        slot: usize,
        done: oneshot::Sender<Vec<MergedEdge>>,
    },
}

/// The merged entries of every agent, by class (what [`IndexHandle::read`] returns).
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// Learned edges (forwarded traffic): what proposals are made of.
    pub edges: Vec<MergedEdge>,
    /// Edges of traffic an enforced policy denied: protect-mode observations.
    pub denials: Vec<MergedEdge>,
    /// Edges of traffic a dry-run / audit policy would have denied: monitor-mode
    /// observations (port 0 when the data plane did not say, as ztunnel's dry-run lines).
    pub audits: Vec<MergedEdge>,
}

/// The merged entries changed since the last [`IndexHandle::changes`], each with its slot
/// in its class's index (see `ne_policy::index`), by class.
#[derive(Clone, Debug, Default)]
pub struct Changes {
    pub edges: Vec<(u32, MergedEdge)>,
    pub denials: Vec<(u32, MergedEdge)>,
    pub audits: Vec<(u32, MergedEdge)>,
}

/// The owner task's indexes, one per class (what its task returns when it ends).
#[derive(Debug)]
pub struct Indexes {
    /// Learned edges, at most the capacity given to [`IndexHandle::spawn`].
    pub edges: EdgeIndex,
    /// Policy denials, at most a tenth of it (at least 1).
    pub denials: EdgeIndex,
    /// Audit denials, as `denials`.
    pub audits: EdgeIndex,
}

impl Indexes {
    fn new(capacity: usize, max_agents: usize) -> Self {
        let observations = (capacity / 10).max(1);
        Indexes {
            edges: EdgeIndex::new(capacity).with_max_agents(max_agents),
            denials: EdgeIndex::new(observations).with_max_agents(max_agents),
            audits: EdgeIndex::new(observations).with_max_agents(max_agents),
        }
    }

    fn each_mut(&mut self) -> [(EdgeClass, &mut EdgeIndex); 3] {
        [
            (EdgeClass::Learned, &mut self.edges),
            (EdgeClass::Denied, &mut self.denials),
            (EdgeClass::Audit, &mut self.audits),
        ]
    }

    fn hello(&mut self, agent: &AgentId, epoch: u64) -> Hello {
        // Every index sees every stream, so they agree; the learned one answers.
        let [(_, edges), (_, denials), (_, audits)] = self.each_mut();
        denials.hello(agent, epoch);
        audits.hello(agent, epoch);
        edges.hello(agent, epoch)
    }

    fn apply(&mut self, agent: &AgentId, epoch: u64, batch: &DecodedBatch) -> ApplyStats {
        let mut total = ApplyStats::default();
        for (class, index) in self.each_mut() {
            let entries = batch.class(class);
            if entries.is_empty() {
                continue;
            }
            let s = index.apply(agent, epoch, entries);
            total.inserted += s.inserted;
            total.updated += s.updated;
            total.unchanged += s.unchanged;
            total.stale_serial += s.stale_serial;
            total.stale_epoch += s.stale_epoch;
            total.dropped += s.dropped;
        }
        total
    }

    /// Sets `gauges` to how many entries each index holds now.
    fn measure(&self, gauges: &IndexGauges) {
        let size = |index: &EdgeIndex| i64::try_from(index.len()).unwrap_or(i64::MAX);
        gauges.edges.set(size(&self.edges));
        gauges.denials.set(size(&self.denials));
        gauges.audits.set(size(&self.audits));
    }

    fn changes(&mut self) -> Changes {
        let drain = |index: &mut EdgeIndex| -> Vec<(u32, MergedEdge)> {
            index
                .drain_changed()
                .map(|(slot, m)| (slot, m.clone()))
                .collect()
        };
        Changes {
            edges: drain(&mut self.edges),
            denials: drain(&mut self.denials),
            audits: drain(&mut self.audits),
        }
    }

    fn merged(&self) -> Merged {
        Merged {
            edges: self.edges.merged().cloned().collect(),
            denials: self.denials.merged().cloned().collect(),
            audits: self.audits.merged().cloned().collect(),
        }
    }
}

/// The gauges the owner task keeps at the size of each index, after every batch and
/// hello: what the index holds is visible even while no round runs.
#[derive(Clone, Debug, Default)]
pub struct IndexGauges {
    pub edges: Gauge,
    pub denials: Gauge,
    pub audits: Gauge,
}

/// A handle on the indexes' owner task; cheap to clone.
#[derive(Clone, Debug)]
pub struct IndexHandle {
    tx: mpsc::Sender<Command>,
}

/// The owner task is gone (the leader is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the edge index is shut down")]
pub struct IndexClosed;

impl IndexHandle {
    /// Starts the owner task of indexes holding at most `capacity` learned edges, and a
    /// tenth of that (at least 1) of each kind of denial.
    pub fn spawn(capacity: usize) -> (IndexHandle, tokio::task::JoinHandle<Indexes>) {
        IndexHandle::spawn_with_max_agents(capacity, u32::MAX as usize)
    }

    /// [`IndexHandle::spawn`], knowing at most `max_agents` agents: a hello of a further
    /// one is answered [`Hello::Full`].
    pub fn spawn_with_max_agents(
        capacity: usize,
        max_agents: usize,
    ) -> (IndexHandle, tokio::task::JoinHandle<Indexes>) {
        IndexHandle::spawn_gauged(capacity, max_agents, IndexGauges::default())
    }

    /// [`IndexHandle::spawn_with_max_agents`], keeping `gauges` at the indexes' sizes.
    pub fn spawn_gauged(
        capacity: usize,
        max_agents: usize,
        gauges: IndexGauges,
    ) -> (IndexHandle, tokio::task::JoinHandle<Indexes>) {
        let (tx, mut rx) = mpsc::channel::<Command>(256);
        let task = tokio::spawn(async move {
            let mut indexes = Indexes::new(capacity, max_agents);
            while let Some(command) = rx.recv().await {
                match command {
                    Command::Hello { agent, epoch, done } => {
                        let _ = done.send(indexes.hello(&agent, epoch));
                        indexes.measure(&gauges);
                    }
                    Command::Apply {
                        agent,
                        epoch,
                        batch,
                        done,
                    } => {
                        let stats = indexes.apply(&agent, epoch, &batch);
                        indexes.measure(&gauges);
                        let _ = done.send(stats);
                    }
                    Command::Read { done } => {
                        let _ = done.send(indexes.merged());
                    }
                    Command::Changes { done } => {
                        let _ = done.send(indexes.changes());
                    }
                    Command::InsertedSince { slot, done } => {
                        let _ = done.send(indexes.edges.merged_from(slot).cloned().collect());
                    }
                }
            }
            indexes
        });
        (IndexHandle { tx }, task)
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, IndexClosed> {
        let (done, answer) = oneshot::channel();
        self.tx.send(make(done)).await.map_err(|_| IndexClosed)?;
        answer.await.map_err(|_| IndexClosed)
    }

    /// A new stream of `agent`'s process `epoch`.
    pub async fn hello(&self, agent: AgentId, epoch: u64) -> Result<Hello, IndexClosed> {
        self.call(|done| Command::Hello { agent, epoch, done })
            .await
    }

    /// Applies one decoded batch, every class to its index; returns once all of it is
    /// in the indexes, with the outcomes of all classes added up.
    pub async fn apply(
        &self,
        agent: AgentId,
        epoch: u64,
        batch: DecodedBatch,
    ) -> Result<ApplyStats, IndexClosed> {
        self.call(|done| Command::Apply {
            agent,
            epoch,
            batch: Box::new(batch),
            done,
        })
        .await
    }

    /// Every merged entry, by class, in slot order.
    pub async fn read(&self) -> Result<Merged, IndexClosed> {
        self.call(|done| Command::Read { done }).await
    }

    /// The merged entries changed since the last call, with their slots, by class: what a
    /// round takes (one consumer only: a call takes the changes it returns from the next).
    pub async fn changes(&self) -> Result<Changes, IndexClosed> {
        self.call(|done| Command::Changes { done }).await
    }

    /// The learned edges inserted since the index held `slot` of them, in slot order.
    pub async fn inserted_since(&self, slot: usize) -> Result<Vec<MergedEdge>, IndexClosed> {
        self.call(|done| Command::InsertedSince { slot, done })
            .await
    }
}

#[cfg(test)]
mod tests {
    use ne_flow::edge::Edge;
    use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, Timestamp};
    use ne_flow::table::EdgeSnapshot;

    use super::*;

    fn snap(port: u16, serial: u64, count: u64) -> EdgeSnapshot {
        let pod = |name: &str| {
            Endpoint::new(EndpointId::Pod {
                namespace: "shop".into(),
                name: name.into(),
            })
        };
        EdgeSnapshot {
            edge: Edge {
                subject: pod("web"),
                direction: Direction::Ingress,
                peer: pod("client"),
                protocol: Protocol::Tcp,
                port,
                peer_dns: None,
                denied_by: None,
            },
            count,
            first_seen: Timestamp(10),
            last_seen: Timestamp(20),
            serial,
        }
    }

    fn batch(
        sequence: u64,
        edges: Vec<EdgeSnapshot>,
        denials: Vec<EdgeSnapshot>,
        audits: Vec<EdgeSnapshot>,
    ) -> DecodedBatch {
        DecodedBatch {
            sequence,
            snapshot: false,
            snapshot_end: false,
            reset: false,
            edges,
            denials,
            audits,
        }
    }

    /// The same edge and serial in every class stays three entries, each in its own
    /// index; learning (`edges`) never sees a denial; the denial indexes are a tenth of
    /// the learned capacity.
    #[tokio::test]
    async fn every_class_lands_in_its_own_index() {
        let (index, owner) = IndexHandle::spawn(20);
        let agent = AgentId::from("node-a");
        index.hello(agent.clone(), 1).await.unwrap();
        let stats = index
            .apply(
                agent.clone(),
                1,
                batch(
                    1,
                    vec![snap(80, 1, 3)],
                    vec![snap(80, 1, 5)],
                    vec![snap(0, 1, 7)],
                ),
            )
            .await
            .unwrap();
        assert_eq!(stats.inserted, 3);
        let merged = index.read().await.unwrap();
        let counts =
            |m: &[MergedEdge]| m.iter().map(|e| (e.edge.port, e.count)).collect::<Vec<_>>();
        assert_eq!(counts(&merged.edges), [(80, 3)]);
        assert_eq!(counts(&merged.denials), [(80, 5)]);
        assert_eq!(counts(&merged.audits), [(0, 7)]);

        // Denials only: the learned index is untouched. Past the denial capacity (2),
        // new denial keys are dropped and counted; learned keys are not.
        let denials: Vec<EdgeSnapshot> = (1..=4).map(|p| snap(p, 1, 1)).collect();
        let stats = index
            .apply(agent.clone(), 1, batch(2, Vec::new(), denials, Vec::new()))
            .await
            .unwrap();
        assert_eq!((stats.inserted, stats.dropped), (1, 3));
        let merged = index.read().await.unwrap();
        assert_eq!(counts(&merged.edges), [(80, 3)]);
        assert_eq!(merged.denials.len(), 2);
        drop(index);
        let indexes = owner.await.unwrap();
        assert_eq!(
            (
                indexes.edges.len(),
                indexes.denials.len(),
                indexes.audits.len()
            ),
            (1, 2, 1)
        );
    }

    /// The gauges follow every batch as it is applied: no read of the indexes (no round)
    /// is needed for them to show what ingest took in.
    #[tokio::test]
    async fn the_gauges_follow_every_batch_without_a_read() {
        let gauges = IndexGauges::default();
        let (index, _owner) = IndexHandle::spawn_gauged(20, 8, gauges.clone());
        let agent = AgentId::from("node-a");
        index.hello(agent.clone(), 1).await.unwrap();
        let sizes = || {
            (
                gauges.edges.get(),
                gauges.denials.get(),
                gauges.audits.get(),
            )
        };
        assert_eq!(sizes(), (0, 0, 0));
        let edges = vec![snap(80, 1, 1), snap(81, 1, 1)];
        index
            .apply(
                agent.clone(),
                1,
                batch(1, edges, vec![snap(80, 1, 1)], Vec::new()),
            )
            .await
            .unwrap();
        assert_eq!(sizes(), (2, 1, 0));
        index
            .apply(
                agent.clone(),
                1,
                batch(2, vec![snap(82, 1, 1)], Vec::new(), vec![snap(0, 1, 1)]),
            )
            .await
            .unwrap();
        assert_eq!(sizes(), (3, 1, 1));
    }
}
