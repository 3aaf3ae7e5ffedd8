//! The leader's ingest endpoint (docs/architecture.md, "Agent ↔ leader protocol"):
//! `networkenforcer.ingest.v1.Ingest/Stream`.
//!
//! Data flow: agent stream → `Hello` → per-stream [`Decoder`] → [`IndexHandle::apply`]
//! (the indexes' owner task, module `owner`) → `Ack` of the highest sequence applied. An
//! ack is sent only after the batch is in the indexes, so an agent that got an ack can
//! forget the batch.
//!
//! A batch carries learned edges and observed denials (policy and audit / dry-run), told
//! apart by the codec; the owner keeps one index per class, and [`IndexHandle::changes`]
//! hands what changed back apart ([`Changes`]): learning reads `edges`, violations the
//! others.
//!
//! Only the replica that holds the Lease accepts streams ([`Leadership`]); a standby
//! answers `UNAVAILABLE` so agents try the next address, and a leader that loses the Lease
//! ends its open streams the same way (within a quarter of a second, even when the agent
//! is idle). Malformed input (no hello first, a batch out of
//! sequence, a batch the decoder rejects) gets a `Reject` naming the batch and the reason,
//! and the stream ends; the agent starts over with a snapshot.
//!
//! A hostile agent holding valid credentials is bounded by [`IngestLimits`]: streams in
//! all and per address, the message size, the hello's deadline, agents known, the tables
//! of every stream together (a shared [`TableBudget`]), rows per batch, batches decoded at
//! once, and how long an ack may wait for an agent that does not read. Every refusal and
//! every stream's end is counted by reason (`leader_streams_refused`,
//! `leader_streams_ended`). Two bounds keep one agent from slowing the others: each agent
//! has a budget of batch bytes per second (module `budget`; past it, its stream is paced),
//! and an address that sends a message over the size limit cools down, its connections
//! closed (module `cooldown`).

mod budget;
mod bulk;
mod cooldown;
mod limits;
mod metrics;
mod owner;

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ne_delta::{Decoder, DeltaError, TableBudget};
use ne_proto::ingest::ingest_server::Ingest;
use ne_proto::ingest::{Ack, AgentMessage, LeaderMessage, Reject, agent_message, leader_message};

use crate::auth::Authenticator;
use budget::AgentBudgets;
use bulk::Bulk;
use cooldown::{Connection, Cooldowns};
use ne_policy::index::{AgentId, Hello};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Request, Response, Status, Streaming};

pub use limits::IngestLimits;
pub use metrics::LeaderMetrics;
use ne_proto::ingest::ingest_server::IngestServer;
pub use owner::{Changes, IndexClosed, IndexGauges, IndexHandle, Indexes, Merged};

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
    limits: IngestLimits,
    /// One permit per open stream.
    streams: Arc<Semaphore>,
    /// Open streams per remote address.
    per_address: Arc<OpenByAddress>,
    /// The tables of every stream.
    budget: Arc<TableBudget>,
    /// One permit per batch being decoded and applied.
    decoding: Arc<Semaphore>,
    /// Each agent's budget of batch bytes.
    budgets: Arc<AgentBudgets>,
    /// Addresses that sent oversize messages.
    cooldowns: Arc<Cooldowns>,
    /// Threads for large batches and tables.
    bulk: Arc<Bulk>,
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
    /// Limits are the defaults until [`IngestService::with_limits`].
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
            limits: IngestLimits::default(),
            streams: Arc::new(Semaphore::new(0)),
            per_address: Arc::default(),
            budget: Arc::new(TableBudget::new(0)),
            decoding: Arc::new(Semaphore::new(0)),
            budgets: Arc::new(AgentBudgets::new(0, 0, 0)),
            cooldowns: Arc::new(Cooldowns::new(Duration::ZERO)),
            bulk: Bulk::start(0),
        }
        .with_limits(IngestLimits::default())
    }

    /// This service with `limits` (the index's own, agents known, are given to
    /// [`IndexHandle::spawn_with_max_agents`]).
    pub fn with_limits(mut self, limits: IngestLimits) -> Self {
        self.streams = Arc::new(Semaphore::new(
            limits.max_streams.min(Semaphore::MAX_PERMITS),
        ));
        self.budget = Arc::new(TableBudget::new(limits.table_bytes));
        self.decoding = Arc::new(Semaphore::new(
            limits.decoding.clamp(1, Semaphore::MAX_PERMITS),
        ));
        self.budgets = Arc::new(AgentBudgets::new(
            limits.agent_bytes_per_second,
            limits.agent_burst_bytes,
            limits.max_agents,
        ));
        self.cooldowns = Arc::new(Cooldowns::new(limits.cooldown));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.bulk = Bulk::start(limits.decoding.clamp(1, cpus));
        self.limits = limits;
        self
    }

    /// The gRPC server of this service, with its message size limit.
    fn into_server(self) -> IngestServer<Self> {
        let max = self.limits.max_message_bytes;
        IngestServer::new(self)
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    }

    /// Serves this service on `listener` until the future is dropped: connections with
    /// Nagle's algorithm off (an ack is a few bytes, and held back it would wait for the
    /// agent's delayed ACK, 40 ms on Linux, at every round trip), and none from an address
    /// cooling down.
    pub fn serve(
        self,
        listener: tokio::net::TcpListener,
    ) -> impl std::future::Future<Output = Result<(), tonic::transport::Error>> + Send
    where
        L: Clone,
    {
        let incoming = incoming(listener, self.cooldowns.clone(), self.metrics.clone());
        tonic::transport::Server::builder()
            .add_service(self.into_server())
            .serve_with_incoming(incoming)
    }

    /// A slot among the streams of `address` (none known: always), given back on drop;
    /// `None` when the address has all it may.
    fn address_slot(&self, address: Option<IpAddr>) -> Option<AddressSlot> {
        let Some(address) = address else {
            return Some(AddressSlot(None));
        };
        let mut open = self.per_address.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(address).or_insert(0);
        if *n >= self.limits.max_streams_per_address {
            return None;
        }
        *n += 1;
        Some(AddressSlot(Some((address, self.per_address.clone()))))
    }

    /// `address` sent a message over the size limit: it cools down.
    fn cool_down(&self, address: Option<IpAddr>) {
        cool_down(&self.cooldowns, &self.metrics, address);
    }

    fn refuse(&self, reason: &'static str, status: Status) -> Status {
        self.metrics
            .streams_refused
            .get_or_create(&metrics::RefusedLabel { reason })
            .inc();
        status
    }
}

/// The connections `listener` accepts, with Nagle's algorithm off; those from an address
/// cooling down are closed at once and counted.
fn incoming(
    listener: tokio::net::TcpListener,
    cooldowns: Arc<Cooldowns>,
    metrics: Arc<LeaderMetrics>,
) -> impl tokio_stream::Stream<Item = std::io::Result<Connection>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |accepted| {
        let accepted = accepted.and_then(|stream| {
            stream.set_nodelay(true)?;
            Ok(stream)
        });
        match accepted {
            Ok(stream) => {
                let connection = Connection::accept(stream, cooldowns.clone());
                if connection.is_none() {
                    metrics.connections_refused.inc();
                }
                connection.map(Ok)
            }
            // A failed accept (out of descriptors, say) is the server's to log and retry.
            Err(error) => Some(Err(error)),
        }
    })
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
        let identity = match self.auth.authenticate(bearer).await {
            Ok(identity) => identity,
            Err(refusal) => return Err(self.refuse(refusal.reason, refusal.status)),
        };
        let Ok(stream_permit) = self.streams.clone().try_acquire_owned() else {
            let status = Status::resource_exhausted(format!(
                "the leader has {} agent streams open, its limit (--max-agent-streams)",
                self.limits.max_streams
            ));
            return Err(self.refuse("too_many_streams", status));
        };
        let address = request.remote_addr().map(|a| a.ip());
        let Some(address_slot) = self.address_slot(address) else {
            let status = Status::resource_exhausted(format!(
                "{} streams are open from this address, the limit (--max-agent-streams-per-address)",
                self.limits.max_streams_per_address
            ));
            return Err(self.refuse("too_many_streams_from_address", status));
        };
        let mut inbound = request.into_inner();
        let first = match tokio::time::timeout(self.limits.hello_timeout, inbound.message()).await {
            Ok(first) => first,
            Err(_) => {
                let status = Status::deadline_exceeded(format!(
                    "no Hello within {:?}",
                    self.limits.hello_timeout
                ));
                return Err(self.refuse("hello_timeout", status));
            }
        };
        let hello = match first {
            Ok(Some(AgentMessage {
                message: Some(agent_message::Message::Hello(hello)),
            })) => hello,
            Err(status) => {
                let (reason, status) = inbound_error(status, self.limits.max_message_bytes);
                return Err(match reason {
                    "message_too_large" => {
                        self.cool_down(address);
                        self.refuse(reason, status)
                    }
                    _ => status,
                });
            }
            Ok(_) => {
                let status = Status::invalid_argument("the first message must be a Hello");
                return Err(self.refuse("bad_hello", status));
            }
        };
        if hello.agent_id.is_empty() {
            let status = Status::invalid_argument("Hello.agent_id is empty");
            return Err(self.refuse("bad_hello", status));
        }
        if let Err(why) = identity.admits(&hello.node, &hello.agent_id) {
            let status = Status::permission_denied(why);
            return Err(self.refuse("identity_mismatch", status));
        }
        let agent = AgentId::from(hello.agent_id.as_str());
        match self.index.hello(agent.clone(), hello.agent_epoch).await {
            Err(IndexClosed) => return Err(Status::unavailable("the leader is shutting down")),
            Ok(Hello::Stale) => {
                let status = Status::failed_precondition(format!(
                    "agent {} has a newer process than epoch {}",
                    hello.agent_id, hello.agent_epoch
                ));
                return Err(self.refuse("stale_epoch", status));
            }
            Ok(Hello::Full) => {
                let status = Status::resource_exhausted(format!(
                    "the leader knows {} agents, its limit (--max-agents); agent {} is not one of them",
                    self.limits.max_agents, hello.agent_id
                ));
                return Err(self.refuse("too_many_agents", status));
            }
            Ok(Hello::New | Hello::Resumed | Hello::Restarted) => {}
        }
        self.metrics.streams_opened.inc();
        let (tx, rx) = mpsc::channel(16);
        let session = Session {
            agent,
            epoch: hello.agent_epoch,
            index: self.index.clone(),
            leadership: self.leadership.clone(),
            leader_epoch: self.leader_epoch,
            metrics: self.metrics.clone(),
            limits: self.limits.clone(),
            budget: self.budget.clone(),
            decoding: self.decoding.clone(),
            budgets: self.budgets.clone(),
            cooldowns: self.cooldowns.clone(),
            bulk: self.bulk.clone(),
            address,
            _permits: (stream_permit, address_slot),
            tx,
        };
        tracing::info!(agent = %hello.agent_id, node = %hello.node, epoch = hello.agent_epoch, user = %identity.user, "agent stream opened");
        tokio::spawn(session.run(inbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Open streams per remote address.
type OpenByAddress = Mutex<std::collections::HashMap<IpAddr, usize>>;

/// A stream's place among its address's streams, given back on drop.
struct AddressSlot(Option<(IpAddr, Arc<OpenByAddress>)>);

impl Drop for AddressSlot {
    fn drop(&mut self) {
        if let Some((address, open)) = &self.0 {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = open.get_mut(address) {
                *n -= 1;
                if *n == 0 {
                    open.remove(address);
                }
            }
        }
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
    limits: IngestLimits,
    budget: Arc<TableBudget>,
    decoding: Arc<Semaphore>,
    budgets: Arc<AgentBudgets>,
    cooldowns: Arc<Cooldowns>,
    bulk: Arc<Bulk>,
    /// The agent's address, when known.
    address: Option<IpAddr>,
    /// Held while the stream is open.
    _permits: (OwnedSemaphorePermit, AddressSlot),
    tx: mpsc::Sender<Result<LeaderMessage, Status>>,
}

impl<L: Leadership> Session<L> {
    async fn run(self, mut inbound: Streaming<AgentMessage>) {
        self.metrics.streams_active.inc();
        let mut decoder = Some(Decoder::with_budget(
            self.limits.tables,
            self.budget.clone(),
        ));
        let end = self.serve(&mut inbound, &mut decoder).await;
        if let Some(decoder) = decoder
            && decoder.table_bytes() >= bulk::LARGE_TABLES
        {
            // Millions of strings take tens of milliseconds to free.
            self.bulk.run(move || drop(decoder)).await;
        }
        self.metrics
            .stream_table_bytes
            .set(self.budget.used() as i64);
        self.metrics.streams_active.dec();
        let reason = match &end {
            Ok(()) => "closed",
            Err(End::Rejected(reason, _)) => reason,
            Err(End::Status(reason, _)) => reason,
            Err(End::AckTimeout) => "ack_timeout",
            Err(End::Gone) => "gone",
        };
        self.metrics
            .streams_ended
            .get_or_create(&metrics::EndedLabel { reason })
            .inc();
        match end {
            Ok(()) => tracing::info!(agent = %self.agent, "agent stream closed"),
            Err(End::Rejected(_, message)) => {
                tracing::warn!(agent = %self.agent, reason = message, "agent stream rejected")
            }
            Err(End::Status(_, status)) => {
                tracing::info!(agent = %self.agent, %status, "agent stream ended");
                // An agent that reads nothing must not hold this task: never wait here.
                let _ = self.tx.try_send(Err(status));
            }
            Err(End::AckTimeout) => tracing::warn!(
                agent = %self.agent,
                timeout = ?self.limits.ack_timeout,
                "agent stream ended: the agent does not read its acks"
            ),
            Err(End::Gone) => {}
        }
    }

    /// Serves the stream; `decoder` is `None` only after a decode that panicked.
    async fn serve(
        &self,
        inbound: &mut Streaming<AgentMessage>,
        decoder: &mut Option<Decoder>,
    ) -> Result<(), End> {
        self.ack(0).await?;
        let mut expected = 1u64;
        // An idle agent sends nothing: the Lease is also checked on a timer, so a replica
        // that lost it ends its streams and the agents move on to the new leader.
        let mut check = tokio::time::interval(LEADERSHIP_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let message = tokio::select! {
                message = inbound.message() => message.map_err(|status| {
                    let (reason, status) = inbound_error(status, self.limits.max_message_bytes);
                    if reason == "message_too_large" {
                        cool_down(&self.cooldowns, &self.metrics, self.address);
                    }
                    End::Status(reason, status)
                })?,
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
                        .reject(expected, "bad_message", "only batches may follow the Hello")
                        .await;
                }
            };
            self.metrics.batches_received.inc();
            let bytes = ne_delta::agent_message_len(&batch);
            self.metrics.batch_bytes_received.inc_by(bytes as u64);
            if batch.sequence != expected {
                let reason = format!(
                    "batch {} out of sequence, expected {expected}",
                    batch.sequence
                );
                return self
                    .reject(batch.sequence, "out_of_sequence", &reason)
                    .await;
            }
            // An agent past its budget waits here, before its batch costs anything.
            let wait = self
                .budgets
                .charge(&self.agent, bytes, tokio::time::Instant::now());
            if !wait.is_zero() {
                self.pace(wait, &mut check).await?;
            }
            // Few batches are decoded and applied at once: what they hold in memory is
            // bounded, and the index's owner is shared fairly (the semaphore is FIFO).
            let _decoding = self.decoding.acquire().await.map_err(|_| {
                End::Status(
                    "shutting_down",
                    Status::unavailable("the leader is shutting down"),
                )
            })?;
            let sequence = batch.sequence;
            let decoded = self.decode(decoder, batch, bytes).await?;
            self.metrics
                .stream_table_bytes
                .set(self.budget.used() as i64);
            let decoded = match decoded {
                Ok(decoded) => decoded,
                Err(error) => {
                    let reason = match error {
                        DeltaError::Budget { .. } => "table_budget",
                        DeltaError::TableFull { .. }
                        | DeltaError::TableBytes { .. }
                        | DeltaError::TooManyRows { .. } => "table_limit",
                        _ => "bad_batch",
                    };
                    return self.reject(sequence, reason, &error.to_string()).await;
                }
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
                .map_err(|_| {
                    End::Status(
                        "shutting_down",
                        Status::unavailable("the leader is shutting down"),
                    )
                })?;
            drop(_decoding);
            self.ack(sequence).await?;
            expected += 1;
        }
        Ok(())
    }

    /// Decodes `batch` (of `bytes`), a large one on a bulk thread.
    async fn decode(
        &self,
        decoder: &mut Option<Decoder>,
        batch: ne_proto::ingest::Batch,
        bytes: usize,
    ) -> Result<Result<ne_delta::DecodedBatch, DeltaError>, End> {
        let lost = || {
            End::Status(
                "internal",
                Status::internal("the leader failed to decode a batch"),
            )
        };
        let mut taken = decoder.take().ok_or_else(lost)?;
        if bytes < bulk::LARGE_BATCH {
            let decoded = taken.decode(&batch);
            *decoder = Some(taken);
            return Ok(decoded);
        }
        let (taken, decoded) = self
            .bulk
            .run(move || {
                let decoded = taken.decode(&batch);
                (taken, decoded)
            })
            .await
            .ok_or_else(lost)?;
        *decoder = Some(taken);
        Ok(decoded)
    }

    /// Holds the stream for `wait` (the agent is over its budget), still ending it when
    /// this replica loses the Lease.
    async fn pace(&self, wait: Duration, check: &mut tokio::time::Interval) -> Result<(), End> {
        self.metrics.paced_batches.inc();
        self.metrics.paced_seconds.inc_by(wait.as_secs_f64());
        let until = tokio::time::sleep(wait);
        tokio::pin!(until);
        loop {
            tokio::select! {
                () = &mut until => return Ok(()),
                _ = check.tick() => {
                    if !self.leadership.is_leader() {
                        return Err(self.lost_lease());
                    }
                }
            }
        }
    }

    /// This replica no longer holds the Lease: the stream ends with `UNAVAILABLE`.
    fn lost_lease(&self) -> End {
        self.metrics.streams_lost_lease.inc();
        End::Status(
            "lost_lease",
            Status::unavailable("this replica lost the Lease: reconnect to the new leader"),
        )
    }

    async fn ack(&self, sequence: u64) -> Result<(), End> {
        self.metrics.acks_sent.inc();
        self.send(leader_message::Message::Ack(Ack {
            sequence,
            leader_epoch: self.leader_epoch,
        }))
        .await
    }

    /// Sends a Reject of batch `sequence`; `kind` is the metric's reason, `reason` the
    /// agent's.
    async fn reject(&self, sequence: u64, kind: &'static str, reason: &str) -> Result<(), End> {
        self.metrics.rejects_sent.inc();
        self.send(leader_message::Message::Reject(Reject {
            sequence,
            reason: reason.to_owned(),
            leader_epoch: self.leader_epoch,
        }))
        .await?;
        Err(End::Rejected(kind, reason.to_owned()))
    }

    /// Queues `message` for the agent; an agent that leaves it unread for the ack timeout
    /// (its stream's flow-control window and this queue full) loses the stream.
    async fn send(&self, message: leader_message::Message) -> Result<(), End> {
        let message = Ok(LeaderMessage {
            message: Some(message),
        });
        match tokio::time::timeout(self.limits.ack_timeout, self.tx.send(message)).await {
            Ok(sent) => sent.map_err(|_| End::Gone),
            Err(_) => Err(End::AckTimeout),
        }
    }
}

/// What a failed read of the agent's stream means: a message over the size limit (tonic
/// says `OUT_OF_RANGE`; the agent is told `RESOURCE_EXHAUSTED`, with the limit and its
/// flag), or a broken transport.
fn inbound_error(status: Status, max_message_bytes: usize) -> (&'static str, Status) {
    if status.code() == Code::OutOfRange && status.message().contains("too large") {
        let status = Status::resource_exhausted(format!(
            "message larger than the leader's limit of {max_message_bytes} bytes \
             (--max-message-bytes): {}",
            status.message()
        ));
        ("message_too_large", status)
    } else {
        ("transport", status)
    }
}

/// `address` (when known) sent a message over the size limit: it cools down, counted and
/// logged.
fn cool_down(cooldowns: &Cooldowns, metrics: &LeaderMetrics, address: Option<IpAddr>) {
    let Some(address) = address else { return };
    if let Some(cooldown) = cooldowns.offence(address, tokio::time::Instant::now()) {
        metrics.cooldowns.inc();
        tracing::warn!(%address, ?cooldown, "an oversize message: the address cools down, its connections closed");
    }
}

/// Why a session ended early (with the `leader_streams_ended` reason).
enum End {
    /// A Reject was sent.
    Rejected(&'static str, String),
    /// The stream ends with this status.
    Status(&'static str, Status),
    /// The agent read none of the leader's messages for the ack timeout.
    AckTimeout,
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

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::Arc;

    use tokio_stream::StreamExt;

    use super::*;

    /// A connection to `address` from the loopback address `from`.
    async fn connect_from(from: Ipv4Addr, address: SocketAddr) -> tokio::net::TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(address).await.unwrap()
    }

    /// Regression: with Nagle's algorithm on, every ack waited for the agent's delayed ACK
    /// (a 2 000-edge snapshot took 44 ms instead of 0.8 ms; BENCHMARKS.md).
    #[tokio::test]
    async fn accepted_connections_send_small_messages_at_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let metrics = Arc::new(LeaderMetrics::default());
        let cooldowns = Arc::new(Cooldowns::new(Duration::from_secs(1)));
        let mut incoming = std::pin::pin!(incoming(listener, cooldowns, metrics));
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[tokio::test]
    async fn connections_from_an_address_cooling_down_are_closed_and_counted() {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let address =
            SocketAddr::from((Ipv4Addr::LOCALHOST, listener.local_addr().unwrap().port()));
        let cooldowns = Arc::new(Cooldowns::new(Duration::from_secs(1)));
        let metrics = Arc::new(LeaderMetrics::default());
        let mut incoming = std::pin::pin!(incoming(listener, cooldowns.clone(), metrics.clone()));
        let offender = Ipv4Addr::new(127, 0, 0, 2);
        cooldowns.offence(offender.into(), tokio::time::Instant::now());

        let mut refused = connect_from(offender, address).await;
        let _other = connect_from(Ipv4Addr::new(127, 0, 0, 3), address).await;
        let accepted = incoming.next().await.unwrap().unwrap();
        assert_eq!(
            accepted.peer_addr().unwrap().ip(),
            std::net::IpAddr::from([127, 0, 0, 3])
        );
        assert_eq!(metrics.connections_refused.get(), 1);
        // The offender's connection was closed by the leader: it reads its end.
        let mut byte = [0u8; 1];
        let read = tokio::io::AsyncReadExt::read(&mut refused, &mut byte).await;
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
