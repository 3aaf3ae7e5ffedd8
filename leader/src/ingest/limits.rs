//! What one leader accepts from its agents, so that a hostile agent holding valid
//! credentials cannot make it use unbounded memory or starve the others.

use std::time::Duration;

use ne_delta::Limits;

/// The ingest limits (the `--max-agent-*`, `--max-message-bytes`, `--max-stream-table-bytes`,
/// `--agent-bytes-per-second`, `--agent-burst-bytes` and `--ack-timeout` flags).
///
/// Memory of the ingest side, at most: `max_streams` × `max_message_bytes` of messages
/// being received, plus `table_bytes` of per-stream tables, plus `decoding` decoded
/// batches of `tables.rows` rows each; the merged index is bounded by `--max-edges`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngestLimits {
    /// Most agent streams open at once; more are refused (`RESOURCE_EXHAUSTED`).
    pub max_streams: usize,
    /// Most streams open at once from one remote address (an agent needs one, two while
    /// it reconnects).
    pub max_streams_per_address: usize,
    /// Most distinct agents the index knows; streams of further agents are refused.
    pub max_agents: usize,
    /// Largest message accepted, in bytes; a larger one ends its stream
    /// (`RESOURCE_EXHAUSTED`). At least the agents' own `--max-message-bytes`.
    pub max_message_bytes: usize,
    /// How long a new stream may take to send its hello.
    pub hello_timeout: Duration,
    /// How long a message to the agent (an ack) may wait because the agent does not read
    /// its stream; the stream then ends.
    pub ack_timeout: Duration,
    /// Per-stream table limits (entries, bytes, rows per batch).
    pub tables: Limits,
    /// Bytes the tables of every stream may hold together; a batch that would pass it is
    /// rejected and the agent tries again with a snapshot.
    pub table_bytes: usize,
    /// Batches decoded and applied at once, over all streams.
    pub decoding: usize,
    /// Batch bytes per second each agent may send before its stream is paced.
    pub agent_bytes_per_second: u64,
    /// Batch bytes an agent may send at once after a quiet spell (a snapshot).
    pub agent_burst_bytes: u64,
    /// How long an address that sent a message over `max_message_bytes` has its
    /// connections closed; twice as long at each further offence, up to 64 times this.
    pub cooldown: Duration,
}

impl Default for IngestLimits {
    /// Sized for the largest clusters Kubernetes supports (5 000 nodes, one agent each).
    /// An agent's budget, 1 MiB/s after a 32 MiB burst, is some ten times what a node of
    /// 5 000 new edges a second ships, and the burst holds a snapshot of several hundred
    /// thousand edges.
    fn default() -> Self {
        IngestLimits {
            max_streams: 10_000,
            max_streams_per_address: 4,
            max_agents: 50_000,
            max_message_bytes: ne_delta::DEFAULT_MAX_MESSAGE_BYTES,
            hello_timeout: Duration::from_secs(10),
            ack_timeout: Duration::from_secs(30),
            tables: Limits::default(),
            table_bytes: 512 << 20,
            decoding: 4,
            agent_bytes_per_second: 1 << 20,
            agent_burst_bytes: 32 << 20,
            cooldown: Duration::from_secs(1),
        }
    }
}
