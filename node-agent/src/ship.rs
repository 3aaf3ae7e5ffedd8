//! Shipping the FlowTable to the leader (docs/architecture.md, "Agent ↔ leader protocol"):
//! the agent's end of the `networkenforcer.ingest.v1.Ingest/Stream` protocol.
//!
//! One stream at a time, to the first address of `--leader-address` that accepts it (a
//! standby answers `UNAVAILABLE`; the next address is tried). On every new stream the
//! agent says `Hello` (node, agent id, process epoch), waits for the leader's first ack,
//! sends its whole table as a snapshot, then every `--flush-interval` the entries that
//! changed ([`FlowTable::drain_dirty_chunks`], a few thousand at a time), encoded by
//! [`ne_delta::Encoder`]. Counts
//! and times are totals, so a batch delivered twice changes nothing at the leader.
//!
//! Denials travel on the same stream: the agent's three tables ([`ShipTables`]: learned
//! edges, policy denials, audit / dry-run denials) are snapshotted, drained and expired
//! together, and [`Encoder::encode_classes`] tags each edge with its class, so the leader
//! keeps them apart. A stream without denials costs exactly what a learned-only one does.
//!
//! Nothing here blocks the source: the source only writes into the FlowTable. When
//! `max_unacked` batches, or `max_unacked_bytes` of them, wait for an ack, the shipper stops
//! draining and the table keeps aggregating (its dirty flags keep what changed), so what a
//! slow leader leaves queued stays bounded. Batches in flight when a stream
//! breaks are not re-sent: the next stream starts with a snapshot of the current totals,
//! which covers them. Idle entries (not seen for `idle_expiry` before the latest flow
//! time shipped, or dropped for want of room) are expired only while every drained batch is acked, so the leader holds
//! an entry's last value before the agent forgets it. A leader elected later gets only
//! what agents still hold: the expiry bounds agent memory at that price, until the leader
//! reloads its proposals from the cluster.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use ne_delta::{EdgeClass, Encoder, Limits, agent_message_len};
use ne_flow::edge::Provider;
use ne_flow::flow::Timestamp;
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_proto::ingest::ingest_client::IngestClient;
use ne_proto::ingest::{AgentMessage, Batch, Hello, agent_message, leader_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::transport::Endpoint;

use crate::metrics::{AgentMetrics, HeldLabel};
use crate::sources::SourceState;
use crate::sources::backoff::Backoff;

/// Where and how to ship.
#[derive(Clone, Debug)]
pub struct ShipConfig {
    /// Leader addresses (`host:port`), tried in turn.
    pub addresses: Vec<String>,
    /// This node's name.
    pub node: String,
    /// This agent's stable id (the node name, or the host name).
    pub agent_id: String,
    /// This process's epoch: larger than any earlier process of the same agent.
    pub epoch: u64,
    /// The provider whose rules the edges were learned by.
    pub provider: Provider,
    /// How often changed entries are sent.
    pub flush_interval: Duration,
    /// The largest message sent (tonic's default receive limit is 4 MiB).
    pub max_message_bytes: usize,
    /// Batches sent and not yet acknowledged before the shipper stops draining.
    pub max_unacked: usize,
    /// Bytes of batches sent and not yet acknowledged before the shipper stops draining.
    pub max_unacked_bytes: usize,
    /// Entries neither updated for this long nor waiting for an ack are forgotten.
    pub idle_expiry: Duration,
    /// A ServiceAccount token sent as `authorization: Bearer …`, read at every connect.
    pub token_file: Option<PathBuf>,
}

impl ShipConfig {
    /// An epoch for this process: the start time in nanoseconds, so a restarted agent
    /// always has a larger one.
    pub fn process_epoch() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The tables the agent ships: its learned edges and, when kept, its denials.
#[derive(Clone, Debug)]
pub struct ShipTables {
    /// Edges of forwarded traffic ([`EdgeClass::Learned`]).
    pub learned: Arc<FlowTable>,
    /// Edges of policy-denied traffic ([`EdgeClass::Denied`]).
    pub denials: Option<Arc<FlowTable>>,
    /// Edges of traffic an audit / dry-run policy would deny ([`EdgeClass::Audit`]).
    pub audits: Option<Arc<FlowTable>>,
}

impl From<Arc<FlowTable>> for ShipTables {
    /// Learned edges only.
    fn from(learned: Arc<FlowTable>) -> Self {
        ShipTables {
            learned,
            denials: None,
            audits: None,
        }
    }
}

impl ShipTables {
    /// Every table kept, with its class.
    fn each(&self) -> impl Iterator<Item = (EdgeClass, &FlowTable)> {
        [
            Some((EdgeClass::Learned, &*self.learned)),
            self.denials.as_deref().map(|t| (EdgeClass::Denied, t)),
            self.audits.as_deref().map(|t| (EdgeClass::Audit, t)),
        ]
        .into_iter()
        .flatten()
    }

    /// The entries every table can hold, together.
    fn capacity(&self) -> usize {
        self.each().map(|(_, t)| t.capacity()).sum()
    }

    /// Drains the changed entries of every table (their dirty flags cleared) and hands
    /// them to `send` by class, in pieces of about [`SHIP_CHUNK`] entries with the classes
    /// together, so that a flooded table's drain is never held whole. Returns the latest
    /// flow time drained, if anything was.
    fn drain_in_chunks(
        &self,
        mut send: impl FnMut(&[(EdgeClass, Vec<EdgeSnapshot>)]),
    ) -> Option<i64> {
        let mut pending = Vec::new();
        let mut newest = None;
        let mut flush = |pending: &mut Vec<(EdgeClass, Vec<EdgeSnapshot>)>| {
            newest = newest.max(latest(pending));
            send(pending);
            pending.clear();
        };
        for (class, table) in self.each() {
            table.drain_dirty_chunks(SHIP_CHUNK, |piece| {
                pending.push((class, piece));
                if entries(&pending) >= SHIP_CHUNK {
                    flush(&mut pending);
                }
            });
        }
        if !pending.is_empty() {
            flush(&mut pending);
        }
        newest
    }

    /// Every entry of every table, by class.
    fn snapshot(&self) -> Vec<(EdgeClass, Vec<EdgeSnapshot>)> {
        self.each().map(|(c, t)| (c, t.snapshot())).collect()
    }
}

/// Ships `tables` (one [`FlowTable`] converts: learned edges only) until `state` is shut
/// down, reconnecting with capped backoff.
pub async fn run(
    config: ShipConfig,
    tables: impl Into<ShipTables>,
    metrics: Arc<AgentMetrics>,
    state: SourceState,
) {
    let tables = tables.into();
    let mut backoff = Backoff::for_streams();
    let mut next = 0usize;
    loop {
        if state.stopping() || config.addresses.is_empty() {
            return;
        }
        let address = &config.addresses[next % config.addresses.len()];
        next += 1;
        let result = tokio::select! {
            r = stream(&config, address, &tables, &metrics) => r,
            () = state.stopped() => return,
        };
        metrics.leader_connected.set(0);
        metrics.ship_unacked.set(0);
        metrics.ship_unacked_bytes.set(0);
        match result {
            Ok(Delivered::Some) => backoff.reset(),
            Ok(Delivered::Nothing) => {}
            Err(error) => {
                tracing::warn!(
                    address,
                    error = format!("{error:#}"),
                    "leader stream failed"
                );
            }
        }
        metrics.leader_reconnects.inc();
        // Try the other addresses at once; back off after a full round.
        if next.is_multiple_of(config.addresses.len()) {
            let delay = backoff.next_delay();
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = state.stopped() => return,
            }
        }
    }
}

/// Whether a stream got as far as an accepted hello.
enum Delivered {
    Some,
    Nothing,
}

/// One stream: hello, snapshot, deltas, until it breaks.
async fn stream(
    config: &ShipConfig,
    address: &str,
    tables: &ShipTables,
    metrics: &AgentMetrics,
) -> anyhow::Result<Delivered> {
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .with_context(|| format!("invalid leader address {address}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("cannot connect to the leader at {address}"))?;
    let mut client = IngestClient::new(channel)
        .max_encoding_message_size(config.max_message_bytes.saturating_add(1024))
        .max_decoding_message_size(1 << 20);
    // Unbounded, so that the shipper never waits on a slow leader: it goes on reading acks
    // and ticking, while `--max-unacked` and `--max-unacked-bytes` bound what is queued.
    let (tx, rx) = mpsc::unbounded_channel::<AgentMessage>();
    let hello = Hello {
        node: config.node.clone(),
        agent_id: config.agent_id.clone(),
        agent_epoch: config.epoch,
        provider: config.provider.as_str().to_owned(),
        capabilities: Vec::new(),
    };
    send(&tx, agent_message::Message::Hello(hello))?;
    let mut request = tonic::Request::new(UnboundedReceiverStream::new(rx));
    if let Some(path) = &config.token_file {
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the token file {}", path.display()))?;
        let value = format!("Bearer {}", token.trim())
            .parse()
            .context("the token is not a valid header value")?;
        request.metadata_mut().insert("authorization", value);
    }
    let mut inbound = client
        .stream(request)
        .await
        .with_context(|| format!("the leader at {address} refused the stream"))?
        .into_inner();
    match inbound.message().await.context("no answer to hello")? {
        Some(m) => match m.message {
            Some(leader_message::Message::Ack(_)) => {}
            Some(leader_message::Message::Reject(r)) => {
                anyhow::bail!("the leader rejected the hello: {}", r.reason)
            }
            None => anyhow::bail!("the leader answered the hello with an empty message"),
        },
        None => return Ok(Delivered::Nothing),
    }
    metrics.leader_connected.set(1);
    tracing::info!(address, "shipping edges to the leader");

    // The stream's tables are bounded by the agent's own (`--max-edges`).
    let mut encoder = Encoder::with_limits(Limits::for_entries(tables.capacity()));
    let mut unacked = Unacked::default();
    let mut next_sequence = 1u64;
    // Clear the dirty flags first: whatever changes after this shows up in a delta.
    tables.drain_in_chunks(|_| {});
    let all = tables.snapshot();
    // Idleness is measured on the flows' own clock (the latest flow time shipped), not the
    // wall clock: a replayed capture, or a data plane whose clock is off, does not make
    // every entry look idle at once.
    let mut flow_clock = latest(&all).unwrap_or(i64::MIN);
    let batches = encoder.encode_classes(
        next_sequence,
        true,
        &by_class(&all),
        config.max_message_bytes,
    );
    let mut oversized = count_oversized(&encoder, 0, metrics);
    metrics.ship_snapshots.inc();
    ship(
        &tx,
        batches,
        &mut next_sequence,
        &mut unacked,
        entries(&all),
        metrics,
    )?;

    let mut ticker = tokio::time::interval(config.flush_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                // Expire before draining: with every batch shipped so far acked, the leader
                // holds the last value of every drained entry (the table spares the dirty
                // ones). After the drain, a busy table would always have a batch in flight.
                if unacked.is_empty() {
                    // A full table flooded with new edges ships nothing, yet its flows'
                    // clock moves on: the drops tell it, or nothing would ever turn idle.
                    flow_clock = tables
                        .each()
                        .filter_map(|(_, t)| t.latest_dropped())
                        .fold(flow_clock, |c, t| c.max(t.0));
                    for (_, table) in tables.each() {
                        expire(table, flow_clock, config, metrics);
                    }
                }
                if let Some(reason) = unacked.held_by(config) {
                    metrics.ship_held.get_or_create(&HeldLabel { reason }).inc();
                } else {
                    let mut failed = None;
                    let drained = tables.drain_in_chunks(|changed| {
                        if failed.is_some() {
                            return; // the stream is gone; the next one starts with a snapshot
                        }
                        let batches = encoder.encode_classes(next_sequence, false, &by_class(changed), config.max_message_bytes);
                        oversized = count_oversized(&encoder, oversized, metrics);
                        let n = entries(changed);
                        failed = ship(&tx, batches, &mut next_sequence, &mut unacked, n, metrics).err();
                    });
                    if let Some(error) = failed {
                        return Err(error);
                    }
                    if let Some(latest) = drained {
                        flow_clock = flow_clock.max(latest);
                    }
                }
            }
            message = inbound.message() => {
                let Some(message) = message.context("the leader stream broke")? else {
                    return Ok(Delivered::Some);
                };
                match message.message {
                    Some(leader_message::Message::Ack(ack)) => {
                        metrics.ship_acks.inc();
                        unacked.ack(ack.sequence);
                    }
                    Some(leader_message::Message::Reject(r)) => {
                        metrics.ship_rejects.inc();
                        anyhow::bail!("the leader rejected batch {}: {}", r.sequence, r.reason);
                    }
                    None => {}
                }
            }
        }
        unacked.export(metrics);
    }
}

/// The entries of every class, as [`Encoder::encode_classes`] takes them.
fn by_class(entries: &[(EdgeClass, Vec<EdgeSnapshot>)]) -> Vec<(EdgeClass, &[EdgeSnapshot])> {
    entries.iter().map(|(c, e)| (*c, e.as_slice())).collect()
}

/// Entries of every class.
fn entries(entries: &[(EdgeClass, Vec<EdgeSnapshot>)]) -> usize {
    entries.iter().map(|(_, e)| e.len()).sum()
}

/// The latest last_seen of any entry.
fn latest(entries: &[(EdgeClass, Vec<EdgeSnapshot>)]) -> Option<i64> {
    entries
        .iter()
        .flat_map(|(_, e)| e.iter().map(|s| s.last_seen.0))
        .max()
}

/// Counts the entries the encoder skipped since `before` (its running total), and logs
/// them: an entry too large for one message is never shipped. Returns the new total.
fn count_oversized(encoder: &Encoder, before: u64, metrics: &AgentMetrics) -> u64 {
    let now = encoder.oversized();
    if now > before {
        metrics.ship_oversized.inc_by(now - before);
        tracing::warn!(
            skipped = now - before,
            "edges too large for one message were not shipped (raise --max-message-bytes)"
        );
    }
    now
}

/// Sends encoded batches and remembers them until acked.
fn ship(
    tx: &mpsc::UnboundedSender<AgentMessage>,
    batches: Vec<Batch>,
    next_sequence: &mut u64,
    unacked: &mut Unacked,
    edges: usize,
    metrics: &AgentMetrics,
) -> anyhow::Result<()> {
    metrics.delta_edges_sent.inc_by(edges as u64);
    for batch in batches {
        *next_sequence = batch.sequence + 1;
        let bytes = agent_message_len(&batch);
        unacked.push(batch.sequence, bytes);
        metrics.deltas_sent.inc();
        metrics.delta_bytes_sent.inc_by(bytes as u64);
        send(tx, agent_message::Message::Batch(batch))?;
    }
    Ok(())
}

/// The batches sent on a stream and not yet acknowledged, and their bytes.
#[derive(Debug, Default)]
struct Unacked {
    /// Sequence and encoded size of each, oldest first.
    batches: std::collections::VecDeque<(u64, usize)>,
    bytes: usize,
}

impl Unacked {
    fn push(&mut self, sequence: u64, bytes: usize) {
        self.batches.push_back((sequence, bytes));
        self.bytes += bytes;
    }

    /// The leader holds every batch up to `sequence`.
    fn ack(&mut self, sequence: u64) {
        while let Some(&(s, bytes)) = self.batches.front()
            && s <= sequence
        {
            self.batches.pop_front();
            self.bytes -= bytes;
        }
    }

    fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Why the next drain must wait for acks, if it must: `config`'s batches or bytes are
    /// waiting already. (A drain admitted below the byte limit may pass it.)
    fn held_by(&self, config: &ShipConfig) -> Option<&'static str> {
        if self.batches.len() >= config.max_unacked {
            Some("unacked_batches")
        } else if self.bytes >= config.max_unacked_bytes {
            Some("unacked_bytes")
        } else {
            None
        }
    }

    fn export(&self, metrics: &AgentMetrics) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        metrics.ship_unacked.set(gauge(self.batches.len()));
        metrics.ship_unacked_bytes.set(gauge(self.bytes));
    }
}

fn send(
    tx: &mpsc::UnboundedSender<AgentMessage>,
    message: agent_message::Message,
) -> anyhow::Result<()> {
    tx.send(AgentMessage {
        message: Some(message),
    })
    .map_err(|_| anyhow::anyhow!("the stream to the leader closed"))
}

/// Changed entries encoded and sent at a time ([`ShipTables::drain_in_chunks`]): some
/// 450 KiB of batches for entries all new, one message at the default `--max-message-bytes`.
const SHIP_CHUNK: usize = 16_384;

/// A table holding more than this share of its capacity after the idle expiry sheds
/// entries under pressure ([`expire`]) ...
pub const PRESSURE_HIGH: f64 = 0.9;
/// ... down to this share.
pub const PRESSURE_TARGET: f64 = 0.75;

/// Forgets entries not seen for `idle_expiry` before `flow_clock`, the latest flow time
/// shipped (every drained batch is acked when this runs, so the leader holds what is
/// forgotten). Then, should the table still be over [`PRESSURE_HIGH`] of its capacity (a
/// flood of new edges, a port scan), it sheds the shipped entries seen least recently,
/// down to [`PRESSURE_TARGET`], sparing those seen within the last flush interval. New
/// edges then find room again once the flood stops, instead of being dropped until the
/// flood's entries turn idle; an entry shed and seen again is a new incarnation, which the
/// leader adds to the old one.
fn expire(table: &FlowTable, flow_clock: i64, config: &ShipConfig, metrics: &AgentMetrics) {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let count = |reason, n: usize| {
        if n > 0 {
            metrics
                .edges_expired
                .get_or_create(&crate::metrics::ExpiryLabel { reason })
                .inc_by(n as u64);
        }
    };
    let idle = table.expire_idle(Timestamp(
        flow_clock.saturating_sub(nanos(config.idle_expiry)),
    ));
    count("idle", idle);
    let capacity = table.capacity() as f64;
    let shed = if table.len() as f64 > capacity * PRESSURE_HIGH {
        table.shed_least_recent(
            (capacity * PRESSURE_TARGET) as usize,
            Timestamp(flow_clock.saturating_sub(nanos(config.flush_interval))),
        )
    } else {
        0
    };
    count("pressure", shed);
    if idle + shed > 0 {
        tracing::debug!(idle, shed, "expired edges");
    }
}
