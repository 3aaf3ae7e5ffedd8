//! The batch codec of the agent-to-leader stream (docs/architecture.md, "Agent ↔ leader
//! protocol"): flow table entries to `networkenforcer.ingest.v1.Batch` messages and back.
//!
//! Place in the data flow: the agent's shipper drains changed entries from its
//! [`FlowTable`](ne_flow::table::FlowTable) ([`EdgeSnapshot`]s) and hands them to its stream's
//! [`Encoder`], which packs them into batches under the gRPC message limit; the leader's
//! ingest server feeds each received batch to its stream's [`Decoder`] and merges the
//! [`EdgeSnapshot`]s it gets back. No IO happens here.
//!
//! Compactness comes from per-stream tables: strings, whole endpoints (identity, address,
//! labels, mesh identity) and edges are sent once per stream and referred to by index
//! afterwards, so a known edge whose count and times changed costs a handful of varints
//! (`delta::tests` asserts ≤ 16 bytes). The wire format, field by field, is documented in
//! `proto/proto/networkenforcer/ingest/v1/ingest.proto`.
//!
//! Verdicts: the agent keeps learned edges and observed denials in separate tables, and
//! ships them all on its one stream. [`Encoder::encode_classes`] takes entries of several
//! [`EdgeClass`]es at once; the class travels with the edge addition (a sparse column, so a
//! stream without denials costs no byte more, `delta::tests` pins it) and is part of the
//! edge's identity at both ends, since every table has its own serials. A
//! [`DecodedBatch`] hands the classes back apart: `edges`, `denials` and `audits`.
//!
//! Both ends must see the same batches in the same order: an encoder and a decoder belong
//! to one stream and are dropped with it. A decoder checks sequence numbers and table
//! offsets, so a lost or reordered batch is an error, never silently wrong data.

mod batch;
mod codes;
mod decode;
mod encode;
mod intern;

use ne_proto::ingest as pb;
use ne_proto::prost::Message;
use ne_proto::prost::encoding::encoded_len_varint;

use ne_flow::table::EdgeSnapshot;

pub use decode::Decoder;
pub use encode::Encoder;

/// The smallest message size [`Encoder::encode`] works with; smaller limits are raised to
/// it. (Far below any real limit: tonic's default is 4 MiB.)
pub const MIN_MESSAGE_BYTES: usize = 64;

/// tonic's default limit for a decoded message, the usual `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

/// How far one stream's tables and batches may grow. The encoder starts its tables over (a
/// batch with `reset`) rather than exceed a table limit, and closes a batch at `rows`; the
/// decoder rejects a batch that would exceed any of them. Both ends count memory with the
/// same estimate ([`cost`]), so an encoder with the decoder's limits is never refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most interned strings.
    pub strings: usize,
    /// Most interned endpoints.
    pub endpoints: usize,
    /// Most interned edges (live table entries plus expired ones sent earlier).
    pub edges: usize,
    /// Most bytes the three tables may take together, as [`cost`] counts them.
    pub bytes: usize,
    /// Most rows in one batch: what one decoded batch may hold.
    pub rows: usize,
}

impl Limits {
    /// The largest limit a table can have: indexes are `uint32` on the wire, and optional
    /// string references use index + 1.
    pub const MAX: usize = u32::MAX as usize - 1;

    /// These limits with every entry count capped at [`Limits::MAX`], and every value at
    /// least 1.
    pub fn clamped(self) -> Self {
        let clamp = |n: usize| n.clamp(1, Self::MAX);
        Limits {
            strings: clamp(self.strings),
            endpoints: clamp(self.endpoints),
            edges: clamp(self.edges),
            bytes: self.bytes.max(1),
            rows: clamp(self.rows),
        }
    }
}

impl Limits {
    /// Bytes of tables allowed per entry the sender's flow tables can hold, in
    /// [`Limits::for_entries`].
    pub const BYTES_PER_ENTRY: usize = 256;

    /// The [`Default`] limits scaled down to a sender whose flow tables hold at most
    /// `entries` entries together: twice as many table entries (live ones plus expired ones
    /// sent earlier) and [`Limits::BYTES_PER_ENTRY`] bytes each, never more than the
    /// defaults and never less than for 4 096 entries. So the sender's stream tables are
    /// bounded by its own table sizes (`--max-edges`), and an agent at the default
    /// `--max-edges` keeps the defaults.
    pub fn for_entries(entries: usize) -> Self {
        let d = Limits::default();
        let n = entries.max(4096);
        Limits {
            strings: d.strings.min(n.saturating_mul(2)),
            endpoints: d.endpoints.min(n.saturating_mul(2)),
            edges: d.edges.min(n.saturating_mul(2)),
            bytes: d.bytes.min(n.saturating_mul(Self::BYTES_PER_ENTRY)),
            rows: d.rows,
        }
    }
}

impl Default for Limits {
    /// 2 Mi entries per table (twice the agent's default `--max-edges`), 256 MiB of tables
    /// (a node at the default `--max-edges` needs about a third of it) and 64 Ki rows per
    /// batch (a decoded batch of at most about 20 MB).
    fn default() -> Self {
        Limits {
            strings: 1 << 21,
            endpoints: 1 << 21,
            edges: 1 << 21,
            bytes: 256 << 20,
            rows: 1 << 16,
        }
    }
}

/// The memory estimate of the per-stream tables, in bytes, that [`Limits::bytes`] and
/// [`TableBudget`] count. Fixed numbers rather than `size_of`, so that an agent and a
/// leader built for different targets agree; a test checks that they are not below the
/// real sizes here.
pub mod cost {
    /// One interned string, besides its bytes: the shared pointer and its counts.
    pub const STRING: usize = 32;
    /// One interned endpoint without labels, its label set's allocation included.
    pub const ENDPOINT: usize = 128;
    /// One label of an endpoint: two shared string pointers.
    pub const LABEL: usize = 32;
    /// One interned edge.
    pub const EDGE: usize = 64;

    /// A string of `len` bytes.
    pub fn string(len: usize) -> usize {
        STRING.saturating_add(len)
    }

    /// An endpoint with `labels` labels.
    pub fn endpoint(labels: usize) -> usize {
        ENDPOINT.saturating_add(labels.saturating_mul(LABEL))
    }
}

/// Memory shared by the decoders of many streams (the leader's): each decoder made with
/// [`Decoder::with_budget`] holds as much of it as its tables cost, and gives it back when
/// its tables shrink or it is dropped. A batch that would take the total past the limit is
/// rejected ([`DeltaError::Budget`]).
#[derive(Debug)]
pub struct TableBudget {
    limit: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl TableBudget {
    /// A budget of `limit` bytes, as [`cost`] counts them.
    pub fn new(limit: usize) -> Self {
        TableBudget {
            limit,
            used: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by every decoder together.
    pub fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `n` bytes, unless that would pass the limit.
    fn try_take(&self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken earlier.
    fn give_back(&self, n: usize) {
        self.used.fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Which of the agent's tables an entry comes from: what the data plane did with its
/// traffic (`ingest.proto`'s `EdgeVerdict`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeClass {
    /// Forwarded traffic: a learned edge.
    Learned,
    /// Traffic an enforced policy denied (`Verdict::PolicyDenied`): a protect-mode
    /// observation.
    Denied,
    /// Traffic a dry-run / audit policy would have denied (`Verdict::AuditDenied`): a
    /// monitor-mode observation.
    Audit,
}

impl EdgeClass {
    /// Every class, in wire-code order.
    pub const ALL: [EdgeClass; 3] = [EdgeClass::Learned, EdgeClass::Denied, EdgeClass::Audit];

    /// `learned`, `denied` or `audit` (a bounded metric label value).
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeClass::Learned => "learned",
            EdgeClass::Denied => "denied",
            EdgeClass::Audit => "audit",
        }
    }
}

/// How many entries each per-stream table holds (for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableSizes {
    /// Interned strings.
    pub strings: usize,
    /// Interned endpoints.
    pub endpoints: usize,
    /// Interned edges.
    pub edges: usize,
}

/// The three per-stream tables, to name one in an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    /// The string table.
    Strings,
    /// The endpoint table.
    Endpoints,
    /// The edge table.
    Edges,
}

impl Table {
    /// `string`, `endpoint` or `edge`.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Strings => "string",
            Table::Endpoints => "endpoint",
            Table::Edges => "edge",
        }
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a batch could not be decoded. The decoder's tables are unchanged after any of
/// these; the stream should be ended (the agent then reconnects with a snapshot).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The batch does not follow the previous one (a batch was lost, repeated or
    /// reordered), or its sequence number is 0.
    #[error("batch sequence {got} out of order (expected {expected})")]
    Sequence {
        /// The sequence the decoder expected (1 or more for a first batch).
        expected: u64,
        /// The batch's sequence.
        got: u64,
    },
    /// The batch appends to a table at another offset than the receiver's table size.
    #[error("{table} table out of step: batch adds at {got}, receiver holds {expected}")]
    OutOfStep {
        /// The table.
        table: Table,
        /// The receiver's table size.
        expected: u64,
        /// The batch's `*_base`.
        got: u64,
    },
    /// The batch would grow a table beyond the decoder's [`Limits`].
    #[error("{table} table full ({limit} entries)")]
    TableFull {
        /// The table.
        table: Table,
        /// Its limit.
        limit: usize,
    },
    /// A column that needs one element per item has another number of elements.
    #[error("column {column} has {got} elements, expected {expected}")]
    ColumnLength {
        /// The column (proto field name).
        column: &'static str,
        /// Items that need an element.
        expected: usize,
        /// Elements present.
        got: usize,
    },
    /// A sparse column ran out before every item that needs an element got one.
    #[error("column {column} ends early")]
    ColumnShort {
        /// The column (proto field name).
        column: &'static str,
    },
    /// A sparse column has elements no item used.
    #[error("column {column} has {left} unused elements")]
    ColumnLeftOver {
        /// The column (proto field name).
        column: &'static str,
        /// Elements (for `addresses`: bytes) left.
        left: usize,
    },
    /// A reference to a table entry that does not exist.
    #[error("{table} index {index} out of range (table holds {len})")]
    IndexOutOfRange {
        /// The table.
        table: Table,
        /// The index referred to.
        index: i128,
        /// The table's size.
        len: usize,
    },
    /// A value outside its field's range: an unknown enum value, a port over 65535, an
    /// address form where it is not allowed.
    #[error("column {column} holds invalid value {value}")]
    BadValue {
        /// The column (proto field name).
        column: &'static str,
        /// The value.
        value: i64,
    },
    /// The batch would take the stream's tables past [`Limits::bytes`].
    #[error("the stream's tables would take more than {limit} bytes")]
    TableBytes {
        /// The limit.
        limit: usize,
    },
    /// The batch would take the tables of every stream together past their
    /// [`TableBudget`]; the stream may try again later.
    #[error("the tables of all streams would take more than {limit} bytes (the leader's budget)")]
    Budget {
        /// The budget's limit.
        limit: usize,
    },
    /// The batch has more rows than [`Limits::rows`].
    #[error("batch has {rows} rows, more than the limit of {limit}")]
    TooManyRows {
        /// The batch's rows.
        rows: usize,
        /// The limit.
        limit: usize,
    },
    /// `snapshot_end` is set on a batch that is not part of a snapshot.
    #[error("snapshot_end set on a batch that is not part of a snapshot")]
    SnapshotFlags,
}

/// A decoded batch: its flags and the entries it carried, in the agent's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedBatch {
    /// The batch's sequence number.
    pub sequence: u64,
    /// Part of the stream's initial full snapshot.
    pub snapshot: bool,
    /// Last batch of the snapshot: the leader now holds the agent's whole table.
    pub snapshot_end: bool,
    /// The tables were started over before this batch (informational: it changes nothing
    /// about the entries).
    pub reset: bool,
    /// The learned entries ([`EdgeClass::Learned`]): counts and times are totals since the
    /// agent created the entry.
    pub edges: Vec<EdgeSnapshot>,
    /// The policy denials ([`EdgeClass::Denied`]), as `edges`.
    pub denials: Vec<EdgeSnapshot>,
    /// The audit / dry-run denials ([`EdgeClass::Audit`]), as `edges`.
    pub audits: Vec<EdgeSnapshot>,
}

impl DecodedBatch {
    /// The entries of `class`.
    pub fn class(&self, class: EdgeClass) -> &[EdgeSnapshot] {
        match class {
            EdgeClass::Learned => &self.edges,
            EdgeClass::Denied => &self.denials,
            EdgeClass::Audit => &self.audits,
        }
    }

    /// Entries of every class.
    pub fn len(&self) -> usize {
        self.edges.len() + self.denials.len() + self.audits.len()
    }

    /// No entry of any class.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The encoded size of the `AgentMessage` that carries `batch`: what tonic compares with
/// its message limit.
pub fn agent_message_len(batch: &pb::Batch) -> usize {
    let len = batch.encoded_len();
    1 + encoded_len_varint(len as u64) + len
}

/// Protobuf's zigzag mapping of a signed value (`sint64`).
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bytes of a `sint64` element of a packed column.
fn sint_len(v: i64) -> usize {
    encoded_len_varint(zigzag(v))
}

/// Bytes of an unsigned element of a packed column.
fn uint_len(v: u64) -> usize {
    encoded_len_varint(v)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod proptests;
