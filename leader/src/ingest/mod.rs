//! The leader's ingest endpoint (docs/architecture.md, "Agent ↔ leader protocol"):
//! `networkenforcer.ingest.v1.Ingest/Stream`.
//!
//! Data flow: agent stream → `Hello` → per-stream [`Decoder`] → [`IndexHandle::apply`]
//! (the indexes' owner task, module `owner`) → `Ack` of the highest sequence applied. An
//! ack is sent only after the batch is in the indexes, so an agent that got an ack can
//! forget the batch.
//!
//! A batch carries learned edges and observed denials (policy and audit / dry-run), told
//! apart by the codec; the owner keeps one index per class, and [`IndexHandle::read`]
//! hands them back apart ([`Merged`]): learning reads `edges`, violations the others.
//!
//! Only the replica that holds the Lease accepts streams ([`Leadership`]); a standby
//! answers `UNAVAILABLE` so agents try the next address, and a leader that loses the Lease
//! ends its open streams the same way (within a quarter of a second, even when the agent
//! is idle). Malformed input (no hello first, a batch out of
//! sequence, a batch the decoder rejects) gets a `Reject` naming the batch and the reason,
//! and the stream ends; the agent starts over with a snapshot.

mod metrics;
mod owner;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ne_delta::Decoder;
use ne_proto::ingest::ingest_server::Ingest;
use ne_proto::ingest::{Ack, AgentMessage, LeaderMessage, Reject, agent_message, leader_message};

use crate::auth::Authenticator;
use ne_policy::index::AgentId;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

pub use metrics::LeaderMetrics;
pub use ne_proto::ingest::ingest_server::IngestServer;
pub use owner::{IndexClosed, IndexHandle, Indexes, Merged};

/// Whether this replica may accept streams (it holds the Lease). Kept behind a trait so
/// tests run election in-process.
pub trait Leadership: Send + Sync + 'static {
    /// True while this replica is the leader.
    fn is_leader(&self) -> bool;
}

impl Leadership for AtomicBool {
    fn is_leader(&self) -> bool {
        self.load(Ordering::Acquire)
    }
}

impl<L: Leadership + ?Sized> Leadership for Arc<L> {
    fn is_leader(&self) -> bool {
        (**self).is_leader()
    }
}

/// The `Ingest` service.
pub struct IngestService<L> {
    index: IndexHandle,
    leadership: L,
    leader_epoch: u64,
    metrics: Arc<LeaderMetrics>,
    auth: Arc<dyn Authenticator>,
}

impl<L: std::fmt::Debug> std::fmt::Debug for IngestService<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IngestService")
            .field("leadership", &self.leadership)
            .field("leader_epoch", &self.leader_epoch)
            .finish_non_exhaustive()
    }
}

impl<L: Leadership> IngestService<L> {
    /// Streams are applied to `index` while `leadership` says this replica leads;
    /// `leader_epoch` (larger at every new leader) is sent in every ack; `metrics` counts
    /// what the streams do; `auth` checks every stream's credentials before its hello.
    pub fn new(
        index: IndexHandle,
        leadership: L,
        leader_epoch: u64,
        metrics: Arc<LeaderMetrics>,
        auth: Arc<dyn Authenticator>,
    ) -> Self {
        IngestService {
            index,
            leadership,
            leader_epoch,
            metrics,
            auth,
        }
    }

    fn refuse(&self, reason: &'static str, status: Status) -> Status {
        self.metrics
            .streams_refused
            .get_or_create(&metrics::RefusedLabel { reason })
            .inc();
        status
    }
}

/// How often an open stream checks that this replica still holds the Lease.
const LEADERSHIP_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

fn standby() -> Status {
    Status::unavailable("this replica is a standby: the leader holds the Lease")
}

type Outbound = Pin<Box<dyn tokio_stream::Stream<Item = Result<LeaderMessage, Status>> + Send>>;

#[tonic::async_trait]
impl<L: Leadership + Clone> Ingest for IngestService<L> {
    type StreamStream = Outbound;

    async fn stream(
        &self,
        request: Request<Streaming<AgentMessage>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        if !self.leadership.is_leader() {
            return Err(self.refuse("standby", standby()));
        }
        let bearer = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let user = match self.auth.authenticate(bearer).await {
            Ok(user) => user,
            Err(refusal) => return Err(self.refuse(refusal.reason, refusal.status)),
        };
        let mut inbound = request.into_inner();
        let hello = match inbound.message().await? {
            Some(AgentMessage {
                message: Some(agent_message::Message::Hello(hello)),
            }) => hello,
            _ => {
                let status = Status::invalid_argument("the first message must be a Hello");
                return Err(self.refuse("bad_hello", status));
            }
        };
        if hello.agent_id.is_empty() {
            let status = Status::invalid_argument("Hello.agent_id is empty");
            return Err(self.refuse("bad_hello", status));
        }
        self.metrics.streams_opened.inc();
        let (tx, rx) = mpsc::channel(16);
        let session = Session {
            agent: AgentId::from(hello.agent_id.as_str()),
            epoch: hello.agent_epoch,
            index: self.index.clone(),
            leadership: self.leadership.clone(),
            leader_epoch: self.leader_epoch,
            metrics: self.metrics.clone(),
            tx,
        };
        tracing::info!(agent = %hello.agent_id, node = %hello.node, epoch = hello.agent_epoch, %user, "agent stream opened");
        tokio::spawn(session.run(inbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// One agent stream, after its hello.
struct Session<L> {
    agent: AgentId,
    epoch: u64,
    index: IndexHandle,
    leadership: L,
    leader_epoch: u64,
    metrics: Arc<LeaderMetrics>,
    tx: mpsc::Sender<Result<LeaderMessage, Status>>,
}

impl<L: Leadership> Session<L> {
    async fn run(self, mut inbound: Streaming<AgentMessage>) {
        self.metrics.streams_active.inc();
        let end = self.serve(&mut inbound).await;
        self.metrics.streams_active.dec();
        match end {
            Ok(()) => tracing::info!(agent = %self.agent, "agent stream closed"),
            Err(End::Rejected(reason)) => {
                tracing::warn!(agent = %self.agent, reason, "agent stream rejected")
            }
            Err(End::Status(status)) => {
                tracing::info!(agent = %self.agent, %status, "agent stream ended");
                let _ = self.tx.send(Err(status)).await;
            }
            Err(End::Gone) => {}
        }
    }

    async fn serve(&self, inbound: &mut Streaming<AgentMessage>) -> Result<(), End> {
        self.index
            .hello(self.agent.clone(), self.epoch)
            .await
            .map_err(|_| End::Status(Status::unavailable("the leader is shutting down")))?;
        self.ack(0).await?;
        let mut decoder = Decoder::new();
        let mut expected = 1u64;
        // An idle agent sends nothing: the Lease is also checked on a timer, so a replica
        // that lost it ends its streams and the agents move on to the new leader.
        let mut check = tokio::time::interval(LEADERSHIP_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let message = tokio::select! {
                message = inbound.message() => message.map_err(End::Status)?,
                _ = check.tick() => {
                    if self.leadership.is_leader() {
                        continue;
                    }
                    return Err(self.lost_lease());
                }
            };
            let Some(message) = message else {
                break;
            };
            if !self.leadership.is_leader() {
                return Err(self.lost_lease());
            }
            let batch = match message.message {
                Some(agent_message::Message::Batch(batch)) => batch,
                _ => {
                    return self
                        .reject(expected, "only batches may follow the Hello")
                        .await;
                }
            };
            self.metrics.batches_received.inc();
            self.metrics
                .batch_bytes_received
                .inc_by(ne_delta::agent_message_len(&batch) as u64);
            if batch.sequence != expected {
                let reason = format!(
                    "batch {} out of sequence, expected {expected}",
                    batch.sequence
                );
                return self.reject(batch.sequence, &reason).await;
            }
            let decoded = match decoder.decode(&batch) {
                Ok(decoded) => decoded,
                Err(error) => return self.reject(batch.sequence, &error.to_string()).await,
            };
            self.metrics.edges_received.inc_by(decoded.len() as u64);
            let newest = [&decoded.edges, &decoded.denials, &decoded.audits]
                .into_iter()
                .flatten()
                .map(|e| e.last_seen.0)
                .max();
            if let Some(newest) = newest {
                let now = i64::try_from(leader_epoch()).unwrap_or(i64::MAX);
                self.metrics
                    .ingest_lag
                    .observe(now.saturating_sub(newest).max(0) as f64 / 1e9);
            }
            self.index
                .apply(self.agent.clone(), self.epoch, decoded)
                .await
                .map_err(|_| End::Status(Status::unavailable("the leader is shutting down")))?;
            self.ack(batch.sequence).await?;
            expected += 1;
        }
        Ok(())
    }

    /// This replica no longer holds the Lease: the stream ends with `UNAVAILABLE`.
    fn lost_lease(&self) -> End {
        self.metrics.streams_lost_lease.inc();
        End::Status(Status::unavailable(
            "this replica lost the Lease: reconnect to the new leader",
        ))
    }

    async fn ack(&self, sequence: u64) -> Result<(), End> {
        self.metrics.acks_sent.inc();
        self.send(leader_message::Message::Ack(Ack {
            sequence,
            leader_epoch: self.leader_epoch,
        }))
        .await
    }

    async fn reject(&self, sequence: u64, reason: &str) -> Result<(), End> {
        self.metrics.rejects_sent.inc();
        self.send(leader_message::Message::Reject(Reject {
            sequence,
            reason: reason.to_owned(),
            leader_epoch: self.leader_epoch,
        }))
        .await?;
        Err(End::Rejected(reason.to_owned()))
    }

    async fn send(&self, message: leader_message::Message) -> Result<(), End> {
        self.tx
            .send(Ok(LeaderMessage {
                message: Some(message),
            }))
            .await
            .map_err(|_| End::Gone)
    }
}

/// Why a session ended early.
enum End {
    /// A Reject was sent.
    Rejected(String),
    /// The stream ends with this status.
    Status(Status),
    /// The agent is gone.
    Gone,
}

/// A leader epoch for this process: its start time in nanoseconds (so larger at every new
/// leader); also the leader's clock for the ingest lag.
pub fn leader_epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
