//! The batch being filled by the [`super::Encoder`], and its size accounting.
//!
//! Every element of every column is counted as it is added ([`Builder::payload`]), and
//! [`fixed_overhead`] bounds everything else (tags, length prefixes, scalar fields), so a
//! batch is closed before its `AgentMessage` could pass the limit, without encoding it to
//! find out.

use std::net::IpAddr;

use ne_proto::ingest as pb;
use ne_proto::prost::encoding::encoded_len_varint;

use super::{EdgeClass, TableSizes, codes, sint_len, uint_len};
use ne_flow::table::EdgeSnapshot;

/// One row as it will be written.
pub(super) struct Row {
    index: u32,
    edge: i64,
    count: u64,
    last_seen: i64,
    first_seen: i64,
    /// The batch's time base, when this is its first row.
    base: Option<i64>,
    /// Bytes of the four elements.
    pub(super) len: usize,
}

/// The batch being filled.
#[derive(Default)]
pub(super) struct Builder {
    /// The batch starts the tables over.
    pub(super) reset: bool,
    /// Table sizes when the batch was started.
    bases: TableSizes,
    /// String additions.
    pub(super) strings: Vec<String>,
    /// Endpoint additions.
    pub(super) endpoints: pb::Endpoints,
    /// Edge additions.
    pub(super) edges: pb::Edges,
    rows: pb::Rows,
    /// Edge index of the last row (-1 before the first).
    prev_edge: i64,
    /// Bytes of every column element added.
    pub(super) payload: usize,
    /// Bytes of the tag and length prefix of one length-delimited field, at most.
    delimited: usize,
}

impl Builder {
    /// A batch adding to tables of sizes `bases`, for messages of at most `max` bytes.
    pub(super) fn new(bases: TableSizes, max: usize) -> Self {
        Builder {
            bases,
            prev_edge: -1,
            delimited: 1 + encoded_len_varint(max as u64),
            ..Builder::default()
        }
    }

    /// Bytes the next edge addition's verdict adds: nothing for a learned edge; its
    /// position, code and `denied_by` reference (string index + 1, or 0) otherwise, plus
    /// the three verdict columns' tags and lengths for the batch's first such edge. (They
    /// are not in [`fixed_overhead`]: a batch without denials must split exactly where it
    /// always did.)
    pub(super) fn verdict_len(&self, class: EdgeClass, denied_by: u32) -> usize {
        if class == EdgeClass::Learned {
            return 0;
        }
        let columns = if self.edges.verdict.is_empty() {
            3 * self.delimited
        } else {
            0
        };
        columns
            + uint_len(self.edges.subject.len() as u64)
            + uint_len(codes::edge_class_code(class) as u64)
            + uint_len(u64::from(denied_by))
    }

    /// Marks the next edge addition (not pushed yet) as of `class`, denied by the policy
    /// `denied_by` refers to; `verdict_len` bytes.
    pub(super) fn push_verdict(&mut self, class: EdgeClass, denied_by: u32, verdict_len: usize) {
        if class == EdgeClass::Learned {
            return;
        }
        // Edge additions per batch are bounded by the table limits (below u32::MAX).
        let position = self.edges.subject.len() as u32;
        self.edges.verdict_position.push(position);
        self.edges.verdict.push(codes::edge_class_code(class));
        self.edges.denied_by.push(denied_by);
        self.payload += verdict_len;
    }

    /// Rows added so far.
    pub(super) fn rows(&self) -> usize {
        self.rows.edge.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rows.edge.is_empty()
    }

    pub(super) fn row(&self, index: u32, snap: &EdgeSnapshot, first_reference: i64) -> Row {
        let last = snap.last_seen.0;
        let (time_base, base) = if self.is_empty() {
            (last, Some(last))
        } else {
            (self.rows.time_base, None)
        };
        let edge = i64::from(index) - self.prev_edge;
        let last_seen = last.wrapping_sub(time_base);
        let first_seen = snap.first_seen.0.wrapping_sub(first_reference);
        Row {
            index,
            edge,
            count: snap.count,
            last_seen,
            first_seen,
            base,
            len: sint_len(edge) + uint_len(snap.count) + sint_len(last_seen) + sint_len(first_seen),
        }
    }

    pub(super) fn push_row(&mut self, row: Row) {
        if let Some(base) = row.base {
            self.rows.time_base = base;
        }
        self.rows.edge.push(row.edge);
        self.rows.count.push(row.count);
        self.rows.last_seen.push(row.last_seen);
        self.rows.first_seen.push(row.first_seen);
        self.prev_edge = i64::from(row.index);
        self.payload += row.len;
    }

    pub(super) fn finish(mut self) -> pb::Batch {
        // No denial names a policy: the column is left out (its bytes were counted, so the
        // batch only gets smaller).
        if self.edges.denied_by.iter().all(|&d| d == 0) {
            self.edges.denied_by.clear();
        }
        pb::Batch {
            sequence: 0,
            snapshot: false,
            snapshot_end: false,
            reset: self.reset,
            // The bases are table sizes, below `Limits::MAX`.
            strings_base: self.bases.strings as u32,
            strings: self.strings,
            endpoints_base: self.bases.endpoints as u32,
            endpoints: (!self.endpoints.kind.is_empty()).then_some(self.endpoints),
            edges_base: self.bases.edges as u32,
            edges: (!self.edges.subject.is_empty()).then_some(self.edges),
            rows: (!self.rows.edge.is_empty()).then_some(self.rows),
        }
    }
}

/// An upper bound of the bytes an `AgentMessage` holding a batch spends outside column
/// elements, when it is at most `max` bytes long: a tag (all field numbers are below 16,
/// so one byte) and a length prefix of at most `max`'s varint length per
/// length-delimited field, and the widest encoding of every scalar field.
pub(super) fn fixed_overhead(max: usize) -> usize {
    let delimited = 1 + encoded_len_varint(max as u64);
    // AgentMessage.batch; Batch.{endpoints, edges, rows}; the 12 fields of Endpoints;
    // the 7 of Edges; the 4 columns of Rows.
    let delimited_fields = 1 + 3 + 12 + 7 + 4;
    // sequence and time_base (64-bit varints), three flags, three uint32 bases.
    let scalars = 2 * (1 + 10) + 3 * 2 + 3 * (1 + 5);
    delimited_fields * delimited + scalars
}

pub(super) fn push_u32(column: &mut Vec<u32>, value: u32, payload: &mut usize) {
    column.push(value);
    *payload += uint_len(u64::from(value));
}

pub(super) fn push_code(column: &mut Vec<i32>, code: i32, payload: &mut usize) {
    column.push(code);
    // Codes are small and non-negative.
    *payload += uint_len(code as u64);
}

pub(super) fn push_address(columns: &mut pb::Endpoints, ip: IpAddr, payload: &mut usize) -> i32 {
    match ip {
        IpAddr::V4(v4) => {
            columns.addresses.extend_from_slice(&v4.octets());
            *payload += 4;
            pb::AddressForm::Ipv4 as i32
        }
        IpAddr::V6(v6) => {
            columns.addresses.extend_from_slice(&v6.octets());
            *payload += 16;
            pb::AddressForm::Ipv6 as i32
        }
    }
}

pub(super) fn append_endpoints(to: &mut pb::Endpoints, from: pb::Endpoints) {
    to.kind.extend(from.kind);
    to.namespace.extend(from.namespace);
    to.name.extend(from.name);
    to.workload_kind.extend(from.workload_kind);
    to.reserved.extend(from.reserved);
    to.external_address.extend(from.external_address);
    to.address.extend(from.address);
    to.addresses.extend(from.addresses);
    to.label_count.extend(from.label_count);
    to.label_key.extend(from.label_key);
    to.label_value.extend(from.label_value);
    to.identity.extend(from.identity);
}
