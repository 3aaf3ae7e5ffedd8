//! The leader side: [`Decoder`] turns one stream's batches back into flow table entries.
//!
//! Every batch is checked before anything of it is kept: sequence and table offsets,
//! column lengths, indexes, enum codes, ports and address bytes. Additions are appended
//! as the batch is read and taken back (with the rows' first_seen updates) when it turns
//! out malformed, so an error leaves the decoder exactly as it was. Each stored edge keeps
//! its [`EdgeClass`]; rows are handed back sorted by it ([`DecodedBatch`]).

use ne_proto::ingest as pb;

mod columns;

use columns::{Cursor, check_base, check_room, dense, out_of_range, read_ip};

use super::codes;
use super::{DecodedBatch, DeltaError, EdgeClass, Limits, Table, TableBudget, TableSizes, cost};
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Labels, Protocol, Str, Timestamp, WorkloadRef,
};
use ne_flow::table::EdgeSnapshot;
use std::sync::Arc;

/// An edge of the stream's table, by its parts in the other tables.
#[derive(Clone, Debug)]
struct StoredEdge {
    class: EdgeClass,
    subject: u32,
    peer: u32,
    direction: Direction,
    protocol: Protocol,
    port: u16,
    dns: Option<Str>,
    /// The policy the data plane blamed for a denial, as string index + 1, or 0.
    denied_by: u32,
    serial: u64,
    /// The first_seen of the edge's last row, the reference of its next one (none before
    /// its first row).
    first_seen: Option<i64>,
}

/// A batch's rows, by class.
#[derive(Default)]
struct Classes {
    edges: Vec<EdgeSnapshot>,
    denials: Vec<EdgeSnapshot>,
    audits: Vec<EdgeSnapshot>,
}

/// Decodes the batches of one stream, in order, keeping the tables they build.
///
/// Create one per stream and feed it every batch the stream delivers; after an error,
/// end the stream (the agent starts over on a new one, with a snapshot).
///
/// Memory: the tables stay within [`Limits`] (entries and [`cost`] bytes), and within a
/// shared [`TableBudget`] when given one; a decoded batch holds at most `Limits::rows`.
#[derive(Debug, Default)]
pub struct Decoder {
    strings: Vec<Str>,
    endpoints: Vec<Endpoint>,
    edges: Vec<StoredEdge>,
    /// What the tables cost, as [`cost`] counts.
    bytes: usize,
    /// The shared budget, if any.
    budget: Option<Share>,
    /// The sequence the next batch must have (none before the first).
    next_sequence: Option<u64>,
    limits: Limits,
}

/// A decoder's part of a [`TableBudget`]: `held` is its tables' cost after its last
/// batch, given back on drop.
#[derive(Debug)]
struct Share {
    budget: Arc<TableBudget>,
    held: usize,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.budget.give_back(self.held);
    }
}

impl Decoder {
    /// A decoder for a new stream, with the default [`Limits`].
    pub fn new() -> Self {
        Decoder::with_limits(Limits::default())
    }

    /// A decoder for a new stream that rejects batches growing a table beyond `limits`
    /// (clamped to [`Limits::MAX`]).
    pub fn with_limits(limits: Limits) -> Self {
        Decoder {
            limits: limits.clamped(),
            ..Decoder::default()
        }
    }

    /// A decoder whose tables also count against `budget`, shared with other streams.
    pub fn with_budget(limits: Limits, budget: Arc<TableBudget>) -> Self {
        Decoder {
            budget: Some(Share { budget, held: 0 }),
            ..Decoder::with_limits(limits)
        }
    }

    /// What the tables cost, in bytes as [`cost`] counts.
    pub fn table_bytes(&self) -> usize {
        self.bytes
    }

    /// How many entries each table holds.
    pub fn table_sizes(&self) -> TableSizes {
        TableSizes {
            strings: self.strings.len(),
            endpoints: self.endpoints.len(),
            edges: self.edges.len(),
        }
    }

    /// Decodes the stream's next batch into its entries, in the order the agent sent
    /// them. On error nothing changes: not the tables, not the expected sequence.
    pub fn decode(&mut self, batch: &pb::Batch) -> Result<DecodedBatch, DeltaError> {
        let expected = self.next_sequence.unwrap_or(1);
        let in_order = match self.next_sequence {
            Some(next) => batch.sequence == next,
            None => batch.sequence != 0,
        };
        if !in_order {
            return Err(DeltaError::Sequence {
                expected,
                got: batch.sequence,
            });
        }
        if batch.snapshot_end && !batch.snapshot {
            return Err(DeltaError::SnapshotFlags);
        }
        let saved = batch.reset.then(|| {
            (
                std::mem::take(&mut self.strings),
                std::mem::take(&mut self.endpoints),
                std::mem::take(&mut self.edges),
            )
        });
        let (marks, bytes) = (self.table_sizes(), self.bytes);
        if batch.reset {
            self.bytes = 0;
        }
        let mut undo = Vec::new();
        let applied = self
            .apply(batch, &mut undo)
            .and_then(|classes| self.settle_budget().map(|()| classes));
        match applied {
            Ok(Classes {
                edges,
                denials,
                audits,
            }) => {
                self.next_sequence = Some(batch.sequence.wrapping_add(1));
                Ok(DecodedBatch {
                    sequence: batch.sequence,
                    snapshot: batch.snapshot,
                    snapshot_end: batch.snapshot_end,
                    reset: batch.reset,
                    edges,
                    denials,
                    audits,
                })
            }
            Err(error) => {
                for (index, first_seen) in undo.into_iter().rev() {
                    if let Some(edge) = self.edges.get_mut(index) {
                        edge.first_seen = first_seen;
                    }
                }
                self.strings.truncate(marks.strings);
                self.endpoints.truncate(marks.endpoints);
                self.edges.truncate(marks.edges);
                if let Some((strings, endpoints, edges)) = saved {
                    (self.strings, self.endpoints, self.edges) = (strings, endpoints, edges);
                }
                self.bytes = bytes;
                Err(error)
            }
        }
    }

    /// Counts `bytes` more of table memory, unless that passes [`Limits::bytes`] or, by
    /// what the other streams hold now, the shared budget.
    fn grow(&mut self, bytes: usize) -> Result<(), DeltaError> {
        let total = self.bytes.saturating_add(bytes);
        if total > self.limits.bytes {
            return Err(DeltaError::TableBytes {
                limit: self.limits.bytes,
            });
        }
        if let Some(share) = &self.budget {
            let others = share.budget.used().saturating_sub(share.held);
            if others.saturating_add(total) > share.budget.limit() {
                return Err(DeltaError::Budget {
                    limit: share.budget.limit(),
                });
            }
        }
        self.bytes = total;
        Ok(())
    }

    /// Makes the shared budget hold what the tables now cost (after a batch was read).
    fn settle_budget(&mut self) -> Result<(), DeltaError> {
        let bytes = self.bytes;
        let Some(share) = &mut self.budget else {
            return Ok(());
        };
        if bytes > share.held {
            if !share.budget.try_take(bytes - share.held) {
                return Err(DeltaError::Budget {
                    limit: share.budget.limit(),
                });
            }
        } else {
            share.budget.give_back(share.held - bytes);
        }
        share.held = bytes;
        Ok(())
    }

    /// Appends the batch's additions and reads its rows; `undo` collects each row's
    /// previous first_seen reference.
    fn apply(
        &mut self,
        batch: &pb::Batch,
        undo: &mut Vec<(usize, Option<i64>)>,
    ) -> Result<Classes, DeltaError> {
        check_base(Table::Strings, batch.strings_base, self.strings.len())?;
        check_base(Table::Endpoints, batch.endpoints_base, self.endpoints.len())?;
        check_base(Table::Edges, batch.edges_base, self.edges.len())?;
        let limits = self.limits;
        check_room(
            Table::Strings,
            self.strings.len(),
            batch.strings.len(),
            limits.strings,
        )?;
        let rows = batch.rows.as_ref().map_or(0, |r| r.edge.len());
        if rows > limits.rows {
            return Err(DeltaError::TooManyRows {
                rows,
                limit: limits.rows,
            });
        }
        self.grow(
            batch
                .strings
                .iter()
                .map(|s| cost::string(s.len()))
                .fold(0, usize::saturating_add),
        )?;
        self.strings
            .extend(batch.strings.iter().map(|s| Str::from(s.as_str())));
        if let Some(endpoints) = &batch.endpoints {
            let adding = endpoints.kind.len();
            check_room(
                Table::Endpoints,
                self.endpoints.len(),
                adding,
                limits.endpoints,
            )?;
            self.add_endpoints(endpoints)?;
        }
        if let Some(edges) = &batch.edges {
            check_room(
                Table::Edges,
                self.edges.len(),
                edges.subject.len(),
                limits.edges,
            )?;
            self.add_edges(edges)?;
        }
        match &batch.rows {
            Some(rows) => self.read_rows(rows, undo),
            None => Ok(Classes::default()),
        }
    }

    fn string(&self, index: u32) -> Result<Str, DeltaError> {
        self.strings
            .get(index as usize)
            .cloned()
            .ok_or_else(|| out_of_range(Table::Strings, index, self.strings.len()))
    }

    /// A string reference stored as index + 1, 0 for none.
    fn optional_string(&self, reference: u32) -> Result<Option<Str>, DeltaError> {
        match reference.checked_sub(1) {
            Some(index) => self.string(index).map(Some),
            None => Ok(None),
        }
    }

    fn add_endpoints(&mut self, c: &pb::Endpoints) -> Result<(), DeltaError> {
        let n = c.kind.len();
        dense("address", &c.address, n)?;
        dense("label_count", &c.label_count, n)?;
        dense("identity", &c.identity, n)?;
        let mut namespaces = Cursor::new("namespace", &c.namespace);
        let mut names = Cursor::new("name", &c.name);
        let mut workload_kinds = Cursor::new("workload_kind", &c.workload_kind);
        let mut reserved = Cursor::new("reserved", &c.reserved);
        let mut external = Cursor::new("external_address", &c.external_address);
        let mut keys = Cursor::new("label_key", &c.label_key);
        let mut values = Cursor::new("label_value", &c.label_value);
        let mut bytes = c.addresses.as_slice();
        for i in 0..n {
            let kind = c.kind[i];
            let id = match pb::EndpointKind::try_from(kind) {
                Ok(pb::EndpointKind::Workload) => {
                    let namespace = self.string(namespaces.next()?)?;
                    let name = self.string(names.next()?)?;
                    let kind = codes::workload_kind(workload_kinds.next()?)?;
                    EndpointId::Workload(WorkloadRef {
                        namespace,
                        kind,
                        name,
                    })
                }
                Ok(pb::EndpointKind::Pod) => EndpointId::Pod {
                    namespace: self.string(namespaces.next()?)?,
                    name: self.string(names.next()?)?,
                },
                Ok(pb::EndpointKind::PodGroup) => EndpointId::PodGroup {
                    namespace: self.string(namespaces.next()?)?,
                    prefix: self.string(names.next()?)?,
                },
                Ok(pb::EndpointKind::External) => {
                    EndpointId::External(read_ip("external_address", external.next()?, &mut bytes)?)
                }
                Ok(pb::EndpointKind::Reserved) => {
                    EndpointId::Reserved(codes::reserved(reserved.next()?)?)
                }
                Ok(pb::EndpointKind::Unspecified) | Err(_) => {
                    return Err(DeltaError::BadValue {
                        column: "kind",
                        value: i64::from(kind),
                    });
                }
            };
            let form = c.address[i];
            let ip = match (pb::AddressForm::try_from(form), &id) {
                (Ok(pb::AddressForm::None), _) => None,
                (Ok(pb::AddressForm::SameAsExternal), EndpointId::External(own)) => Some(*own),
                _ => Some(read_ip("address", form, &mut bytes)?),
            };
            let count = c.label_count[i] as usize;
            // Never trust a count for an allocation: the key column bounds it (and a count
            // beyond it fails below, as a short column).
            let claimed = count.min(keys.left());
            self.grow(cost::endpoint(claimed))?;
            let mut labels = Vec::with_capacity(claimed);
            for _ in 0..count {
                let key = self.string(keys.next()?)?;
                let value = self.string(values.next()?)?;
                labels.push((key, value));
            }
            let identity = self.optional_string(c.identity[i])?;
            self.endpoints.push(Endpoint {
                id,
                ip,
                labels: Labels::from(labels),
                identity,
            });
        }
        for cursor in [namespaces, names, keys, values] {
            cursor.finish()?;
        }
        for cursor in [workload_kinds, reserved, external] {
            cursor.finish()?;
        }
        match bytes.len() {
            0 => Ok(()),
            left => Err(DeltaError::ColumnLeftOver {
                column: "addresses",
                left,
            }),
        }
    }

    fn add_edges(&mut self, c: &pb::Edges) -> Result<(), DeltaError> {
        let n = c.subject.len();
        dense("peer", &c.peer, n)?;
        dense("direction", &c.direction, n)?;
        dense("protocol", &c.protocol, n)?;
        dense("port", &c.port, n)?;
        dense("peer_dns", &c.peer_dns, n)?;
        dense("serial", &c.serial, n)?;
        dense("verdict", &c.verdict, c.verdict_position.len())?;
        // Agents of releases before `denied_by` send none.
        if !c.denied_by.is_empty() {
            dense("denied_by", &c.denied_by, c.verdict_position.len())?;
        }
        let endpoints = self.endpoints.len();
        // The sparse verdicts, in step with the edges: `listed` is the next one.
        let mut listed = 0usize;
        for i in 0..n {
            let (class, denied_by) = match c.verdict_position.get(listed) {
                Some(&at) if at as usize == i => {
                    listed += 1;
                    let class = codes::listed_edge_class(c.verdict[listed - 1])?;
                    let denied_by = c.denied_by.get(listed - 1).copied().unwrap_or(0);
                    self.optional_string(denied_by)?;
                    if let Some(&next) = c.verdict_position.get(listed)
                        && next <= at
                    {
                        return Err(DeltaError::BadValue {
                            column: "verdict_position",
                            value: i64::from(next),
                        });
                    }
                    (class, denied_by)
                }
                _ => (EdgeClass::Learned, 0),
            };
            let (subject, peer) = (c.subject[i], c.peer[i]);
            for index in [subject, peer] {
                if index as usize >= endpoints {
                    return Err(out_of_range(Table::Endpoints, index, endpoints));
                }
            }
            let port = u16::try_from(c.port[i]).map_err(|_| DeltaError::BadValue {
                column: "port",
                value: i64::from(c.port[i]),
            })?;
            let edge = StoredEdge {
                class,
                subject,
                peer,
                direction: codes::direction(c.direction[i])?,
                protocol: codes::protocol(c.protocol[i])?,
                port,
                dns: self.optional_string(c.peer_dns[i])?,
                denied_by,
                serial: c.serial[i],
                first_seen: None,
            };
            self.grow(cost::EDGE)?;
            self.edges.push(edge);
        }
        match c.verdict_position.len() - listed {
            0 => Ok(()),
            // Positions past the batch's edges (or out of order before them).
            left => Err(DeltaError::ColumnLeftOver {
                column: "verdict_position",
                left,
            }),
        }
    }

    fn read_rows(
        &mut self,
        c: &pb::Rows,
        undo: &mut Vec<(usize, Option<i64>)>,
    ) -> Result<Classes, DeltaError> {
        let n = c.edge.len();
        dense("count", &c.count, n)?;
        dense("last_seen", &c.last_seen, n)?;
        dense("first_seen", &c.first_seen, n)?;
        let mut out = Classes {
            edges: Vec::with_capacity(n),
            ..Classes::default()
        };
        let mut prev: i64 = -1;
        for i in 0..n {
            let index = i128::from(prev) + i128::from(c.edge[i]);
            let stored = usize::try_from(index)
                .ok()
                .and_then(|at| self.edges.get_mut(at).map(|edge| (at, edge)));
            let Some((at, edge)) = stored else {
                return Err(out_of_range(Table::Edges, index, self.edges.len()));
            };
            // `at` is a valid index of a Vec, so it fits an i64.
            prev = at as i64;
            let last_seen = c.time_base.wrapping_add(c.last_seen[i]);
            let reference = edge.first_seen.unwrap_or(last_seen);
            let first_seen = reference.wrapping_add(c.first_seen[i]);
            undo.push((at, edge.first_seen));
            edge.first_seen = Some(first_seen);
            // Stored edges refer to endpoints that existed when they were added, and tables
            // only shrink all together (reset) or by a failed batch's own additions.
            let edge = &self.edges[at];
            let class = match edge.class {
                EdgeClass::Learned => &mut out.edges,
                EdgeClass::Denied => &mut out.denials,
                EdgeClass::Audit => &mut out.audits,
            };
            class.push(EdgeSnapshot {
                edge: Edge {
                    subject: self.endpoints[edge.subject as usize].clone(),
                    direction: edge.direction,
                    peer: self.endpoints[edge.peer as usize].clone(),
                    protocol: edge.protocol,
                    port: edge.port,
                    peer_dns: edge.dns.clone(),
                    // Checked when the edge was added; strings leave only with it.
                    denied_by: edge
                        .denied_by
                        .checked_sub(1)
                        .map(|at| self.strings[at as usize].clone()),
                },
                count: c.count[i],
                first_seen: Timestamp(first_seen),
                last_seen: Timestamp(last_seen),
                serial: edge.serial,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod cost_tests {
    use super::{Endpoint, StoredEdge, Str, cost};
    use std::mem::size_of;

    #[test]
    fn the_estimates_are_not_below_the_real_sizes() {
        // An `Arc` allocation carries two counts besides its value.
        let counts = 2 * size_of::<usize>();
        assert!(size_of::<Str>() + counts <= cost::STRING);
        assert!(size_of::<Endpoint>() + counts <= cost::ENDPOINT);
        assert!(size_of::<(Str, Str)>() <= cost::LABEL);
        assert!(size_of::<StoredEdge>() <= cost::EDGE);
    }
}
