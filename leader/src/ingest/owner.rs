//! The one task that owns the leader's [`EdgeIndex`] (STYLE 3): ingest sessions send it
//! commands; it applies each batch synchronously, in arrival order, and answers when the
//! batch is in the index, so an ack always means "applied".

use ne_shared::index::{AgentId, ApplyStats, EdgeIndex, Hello, MergedEdge};
use ne_shared::table::EdgeSnapshot;
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
        edges: Vec<EdgeSnapshot>,
        done: oneshot::Sender<ApplyStats>,
    },
    Read {
        done: oneshot::Sender<Vec<MergedEdge>>,
    },
}

/// A handle on the index's owner task; cheap to clone.
#[derive(Clone, Debug)]
pub struct IndexHandle {
    tx: mpsc::Sender<Command>,
}

/// The owner task is gone (the leader is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the edge index is shut down")]
pub struct IndexClosed;

impl IndexHandle {
    /// Starts the owner task of an index holding at most `capacity` edges.
    pub fn spawn(capacity: usize) -> (IndexHandle, tokio::task::JoinHandle<EdgeIndex>) {
        let (tx, mut rx) = mpsc::channel::<Command>(256);
        let task = tokio::spawn(async move {
            let mut index = EdgeIndex::new(capacity);
            while let Some(command) = rx.recv().await {
                match command {
                    Command::Hello { agent, epoch, done } => {
                        let _ = done.send(index.hello(&agent, epoch));
                    }
                    Command::Apply {
                        agent,
                        epoch,
                        edges,
                        done,
                    } => {
                        let _ = done.send(index.apply(&agent, epoch, &edges));
                    }
                    Command::Read { done } => {
                        let _ = done.send(index.merged().cloned().collect());
                    }
                }
            }
            index
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

    /// Applies one decoded batch; returns once it is in the index.
    pub async fn apply(
        &self,
        agent: AgentId,
        epoch: u64,
        edges: Vec<EdgeSnapshot>,
    ) -> Result<ApplyStats, IndexClosed> {
        self.call(|done| Command::Apply {
            agent,
            epoch,
            edges,
            done,
        })
        .await
    }

    /// Every merged edge, in no particular order.
    pub async fn read(&self) -> Result<Vec<MergedEdge>, IndexClosed> {
        self.call(|done| Command::Read { done }).await
    }
}
