//! The agent side: [`Encoder`] turns flow table entries into batches for one stream.
//!
//! An entry whose edge the peer knows becomes one row; a new edge first gets its
//! additions planned ([`Part`]), checked against the table limits and the message budget,
//! and only then committed to the tables and the batch ([`Builder`]). An edge's
//! [`EdgeClass`] is part of its identity: the agent's tables have independent serials.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use ne_proto::ingest as pb;

use super::batch::{Builder, append_endpoints, fixed_overhead, push_address, push_code, push_u32};
use super::codes;
use super::intern::Interner;
use super::{EdgeClass, Limits, MIN_MESSAGE_BYTES, TableSizes, cost, uint_len};
use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, Endpoint, EndpointId, Protocol, Str};
use ne_flow::table::EdgeSnapshot;

/// No string (an absent DNS name).
const NO_STRING: u32 = u32::MAX;

/// An edge the peer knows, by its parts in the other tables.
#[derive(Debug)]
struct KnownEdge {
    class: EdgeClass,
    subject: u32,
    peer: u32,
    direction: Direction,
    protocol: Protocol,
    port: u16,
    /// String index of the peer's DNS name, or [`NO_STRING`].
    dns: u32,
    /// String index of the policy the data plane blamed for a denial, or [`NO_STRING`]
    /// (always for a learned edge).
    denied_by: u32,
    serial: u64,
    /// The first_seen of the edge's last row: the reference of its next row.
    first_seen: i64,
}

/// Encodes flow table entries into `Batch` messages for one stream, remembering which
/// strings, endpoints and edges the receiving [`super::Decoder`] already has.
///
/// Create one with the stream ([`Encoder::new`]), send everything it returns, in order,
/// on that stream, and drop it with the stream. Memory: the tables hold each distinct
/// endpoint once and about 40 bytes per edge (strings are shared with the flow table);
/// past [`Limits`] the encoder starts them over with a `reset` batch.
#[derive(Debug)]
pub struct Encoder {
    hasher: RandomState,
    strings: Interner<Str>,
    endpoints: Interner<Endpoint>,
    edges: Interner<KnownEdge>,
    /// What the peer's tables cost, as [`cost`] counts.
    bytes: usize,
    limits: Limits,
    oversized: u64,
    resets: u64,
    /// The message limit of the current call.
    max: usize,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

/// The additions a new edge needs, with their indexes already assigned.
#[derive(Default)]
struct Part {
    strings: Vec<Str>,
    endpoints: Vec<Endpoint>,
    columns: pb::Endpoints,
    edge: Option<KnownEdge>,
    /// Bytes of every element above, as encoded.
    payload: usize,
}

impl Part {
    /// What the additions cost the peer's tables, as [`cost`] counts.
    fn cost(&self) -> usize {
        let strings = self.strings.iter().map(|s| cost::string(s.len()));
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| cost::endpoint(e.labels.len()));
        strings
            .chain(endpoints)
            .fold(cost::EDGE, usize::saturating_add)
    }
}

impl Encoder {
    /// An encoder for a new stream, with the default [`Limits`].
    pub fn new() -> Self {
        Encoder::with_limits(Limits::default())
    }

    /// An encoder for a new stream whose tables stay within `limits` (clamped to
    /// [`Limits::MAX`]).
    pub fn with_limits(limits: Limits) -> Self {
        Encoder {
            hasher: RandomState::default(),
            strings: Interner::default(),
            endpoints: Interner::default(),
            edges: Interner::default(),
            bytes: 0,
            limits: limits.clamped(),
            oversized: 0,
            resets: 0,
            max: MIN_MESSAGE_BYTES,
        }
    }

    /// Encodes `edges` into batches numbered `sequence_start`, `sequence_start + 1`, ...,
    /// each small enough that the `AgentMessage` carrying it encodes to at most
    /// `max_message_bytes` (raised to [`MIN_MESSAGE_BYTES`]). Rows keep the order of
    /// `edges`; every table addition travels in the batch of the first row that uses it,
    /// so any prefix of the batches decodes.
    ///
    /// `snapshot`: `edges` is the whole table for a new stream; every batch is flagged as
    /// part of the snapshot and the last one as its end (an empty table still yields one
    /// batch, to say so). Otherwise an empty `edges` yields no batch.
    ///
    /// An entry too large for one message even alone, or alone beyond the table
    /// [`Limits`], is skipped and counted in [`Encoder::oversized`].
    ///
    /// All entries are learned ones ([`EdgeClass::Learned`]); see
    /// [`Encoder::encode_classes`] for denials.
    pub fn encode(
        &mut self,
        sequence_start: u64,
        snapshot: bool,
        edges: &[EdgeSnapshot],
        max_message_bytes: usize,
    ) -> Vec<pb::Batch> {
        self.encode_classes(
            sequence_start,
            snapshot,
            &[(EdgeClass::Learned, edges)],
            max_message_bytes,
        )
    }

    /// [`Encoder::encode`] for entries of several tables at once: each slice holds the
    /// entries of one [`EdgeClass`], and rows follow the order of `classes`, then of each
    /// slice. A class may appear more than once or not at all. With `snapshot`, the
    /// slices together are the whole of the agent's tables.
    pub fn encode_classes(
        &mut self,
        sequence_start: u64,
        snapshot: bool,
        classes: &[(EdgeClass, &[EdgeSnapshot])],
        max_message_bytes: usize,
    ) -> Vec<pb::Batch> {
        let max = max_message_bytes.max(MIN_MESSAGE_BYTES);
        self.max = max;
        let budget = max.saturating_sub(fixed_overhead(max));
        let mut out = Vec::new();
        let mut builder = Builder::new(self.table_sizes(), max);
        for &(class, edges) in classes {
            for snap in edges {
                self.add(&mut builder, &mut out, class, snap, budget);
            }
        }
        // An empty batch that resets must still go out: the tables were cleared here.
        if !builder.is_empty() || builder.reset || (snapshot && out.is_empty()) {
            out.push(builder.finish());
        }
        let last = out.len().saturating_sub(1);
        for (i, batch) in out.iter_mut().enumerate() {
            batch.sequence = sequence_start.wrapping_add(i as u64);
            batch.snapshot = snapshot;
            batch.snapshot_end = snapshot && i == last;
        }
        out
    }

    /// Entries skipped since creation because they did not fit in one message or in the
    /// table limits on their own.
    pub fn oversized(&self) -> u64 {
        self.oversized
    }

    /// Times the tables were started over (batches sent with `reset`) since creation.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// What the peer's tables cost, as [`cost`] counts (equal to its decoder's
    /// [`super::Decoder::table_bytes`]).
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

    /// Adds one entry to `builder`, closing it into `out` first when it is full.
    fn add(
        &mut self,
        builder: &mut Builder,
        out: &mut Vec<pb::Batch>,
        class: EdgeClass,
        snap: &EdgeSnapshot,
        budget: usize,
    ) {
        if let Some(index) = self.find_edge(class, &snap.edge, snap.serial) {
            let reference = self.edges.get(index).first_seen;
            let mut row = builder.row(index, snap, reference);
            if (builder.payload + row.len > budget || builder.rows() >= self.limits.rows)
                && !builder.is_empty()
            {
                self.flush(builder, out);
                row = builder.row(index, snap, reference);
            }
            if row.len > budget {
                self.oversized += 1;
                return;
            }
            builder.push_row(row);
            self.edges.get_mut(index).first_seen = snap.first_seen.0;
            return;
        }

        let mut part = self.plan(class, snap);
        if !self.within_limits(&part) {
            self.reset(builder, out);
            part = self.plan(class, snap);
            if !self.within_limits(&part) {
                self.oversized += 1;
                return;
            }
        }
        // New edges get the next index; their first row's reference is its own last_seen.
        let index = self.edges.len() as u32;
        let mut row = builder.row(index, snap, snap.last_seen.0);
        let denied_by = part.edge.as_ref().map_or(NO_STRING, |k| k.denied_by);
        let mut verdict = builder.verdict_len(class, denied_by.wrapping_add(1));
        if (builder.payload + part.payload + verdict + row.len > budget
            || builder.rows() >= self.limits.rows)
            && !builder.is_empty()
        {
            self.flush(builder, out);
            row = builder.row(index, snap, snap.last_seen.0);
            verdict = builder.verdict_len(class, denied_by.wrapping_add(1));
        }
        if part.payload + verdict + row.len > budget {
            self.oversized += 1;
            return;
        }
        builder.push_verdict(class, denied_by.wrapping_add(1), verdict);
        self.commit(builder, part, snap);
        builder.push_row(row);
    }

    /// Closes `builder` into `out` and starts the next batch.
    fn flush(&self, builder: &mut Builder, out: &mut Vec<pb::Batch>) {
        let full = std::mem::replace(builder, Builder::new(self.table_sizes(), self.max));
        out.push(full.finish());
    }

    /// Starts the tables over: what `builder` holds goes out first, the next batch resets.
    fn reset(&mut self, builder: &mut Builder, out: &mut Vec<pb::Batch>) {
        if !builder.is_empty() {
            self.flush(builder, out);
        }
        self.strings.clear();
        self.endpoints.clear();
        self.edges.clear();
        self.bytes = 0;
        self.resets += 1;
        *builder = Builder::new(TableSizes::default(), self.max);
        builder.reset = true;
    }

    fn within_limits(&self, part: &Part) -> bool {
        self.strings.len() + part.strings.len() <= self.limits.strings
            && self.endpoints.len() + part.endpoints.len() <= self.limits.endpoints
            && self.edges.len() < self.limits.edges
            && self.bytes.saturating_add(part.cost()) <= self.limits.bytes
    }

    /// The index of `edge` (incarnation `serial` of a `class` table) in the peer's edge
    /// table.
    fn find_edge(&self, class: EdgeClass, edge: &Edge, serial: u64) -> Option<u32> {
        let (endpoints, strings) = (&self.endpoints, &self.strings);
        self.edges.find(self.hasher.hash_one(serial), |k| {
            k.serial == serial
                && k.class == class
                && k.port == edge.port
                && k.protocol == edge.protocol
                && k.direction == edge.direction
                && endpoints.get(k.subject) == &edge.subject
                && endpoints.get(k.peer) == &edge.peer
                && same_string(strings, k.dns, edge.peer_dns.as_ref())
                && (class == EdgeClass::Learned
                    || same_string(strings, k.denied_by, edge.denied_by.as_ref()))
        })
    }

    /// The additions a new edge needs (nothing is changed yet).
    fn plan(&self, class: EdgeClass, snap: &EdgeSnapshot) -> Part {
        let edge = &snap.edge;
        let mut part = Part::default();
        let subject = self.endpoint_ref(&edge.subject, &mut part);
        let peer = self.endpoint_ref(&edge.peer, &mut part);
        let dns = match &edge.peer_dns {
            Some(dns) => self.string_ref(dns, &mut part),
            None => NO_STRING,
        };
        // Only denials name a policy; the verdict's own bytes count it
        // (`Builder::verdict_len`).
        let denied_by = match (&edge.denied_by, class) {
            (Some(policy), EdgeClass::Denied | EdgeClass::Audit) => {
                self.string_ref(policy, &mut part)
            }
            _ => NO_STRING,
        };
        part.payload += uint_len(u64::from(subject))
            + uint_len(u64::from(peer))
            + uint_len(codes::direction_code(edge.direction) as u64)
            + uint_len(codes::protocol_code(edge.protocol) as u64)
            + uint_len(u64::from(edge.port))
            + uint_len(u64::from(dns.wrapping_add(1)))
            + uint_len(snap.serial);
        part.edge = Some(KnownEdge {
            class,
            subject,
            peer,
            direction: edge.direction,
            protocol: edge.protocol,
            port: edge.port,
            dns,
            denied_by,
            serial: snap.serial,
            first_seen: snap.first_seen.0,
        });
        part
    }

    /// The index `s` has or will have in the string table, adding it to `part` if new.
    fn string_ref(&self, s: &Str, part: &mut Part) -> u32 {
        let hash = self.hasher.hash_one(&**s);
        if let Some(index) = self.strings.find(hash, |known| known == s) {
            return index;
        }
        let base = self.strings.len();
        if let Some(pos) = part.strings.iter().position(|p| p == s) {
            return (base + pos) as u32;
        }
        part.strings.push(s.clone());
        part.payload += 1 + uint_len(s.len() as u64) + s.len();
        (base + part.strings.len() - 1) as u32
    }

    /// The index `e` has or will have in the endpoint table, adding it to `part` if new.
    fn endpoint_ref(&self, e: &Endpoint, part: &mut Part) -> u32 {
        let hash = endpoint_hash(&self.hasher, e);
        if let Some(index) = self.endpoints.find(hash, |known| known == e) {
            return index;
        }
        let base = self.endpoints.len();
        if let Some(pos) = part.endpoints.iter().position(|p| p == e) {
            return (base + pos) as u32;
        }
        self.put_endpoint(e, part);
        part.endpoints.push(e.clone());
        (base + part.endpoints.len() - 1) as u32
    }

    /// Writes `e`'s column elements into `part`.
    fn put_endpoint(&self, e: &Endpoint, part: &mut Part) {
        // String references first: they may add strings to `part`.
        let names = match &e.id {
            EndpointId::Workload(w) => Some((&w.namespace, &w.name)),
            EndpointId::Pod { namespace, name } => Some((namespace, name)),
            EndpointId::PodGroup { namespace, prefix } => Some((namespace, prefix)),
            EndpointId::External(_) | EndpointId::Reserved(_) => None,
        };
        let names =
            names.map(|(ns, name)| (self.string_ref(ns, part), self.string_ref(name, part)));
        let labels: Vec<(u32, u32)> = e
            .labels
            .iter()
            .map(|(k, v)| (self.string_ref(k, part), self.string_ref(v, part)))
            .collect();
        let identity = match &e.identity {
            Some(id) => self.string_ref(id, part) + 1,
            None => 0,
        };

        let (c, payload) = (&mut part.columns, &mut part.payload);
        let kind = match &e.id {
            EndpointId::Workload(_) => pb::EndpointKind::Workload,
            EndpointId::Pod { .. } => pb::EndpointKind::Pod,
            EndpointId::PodGroup { .. } => pb::EndpointKind::PodGroup,
            EndpointId::External(_) => pb::EndpointKind::External,
            EndpointId::Reserved(_) => pb::EndpointKind::Reserved,
        };
        push_code(&mut c.kind, kind as i32, payload);
        if let Some((namespace, name)) = names {
            push_u32(&mut c.namespace, namespace, payload);
            push_u32(&mut c.name, name, payload);
        }
        match &e.id {
            EndpointId::Workload(w) => {
                push_code(
                    &mut c.workload_kind,
                    codes::workload_kind_code(w.kind),
                    payload,
                );
            }
            EndpointId::Reserved(r) => {
                push_code(&mut c.reserved, codes::reserved_code(*r), payload);
            }
            EndpointId::External(ip) => {
                let form = push_address(c, *ip, payload);
                push_code(&mut c.external_address, form, payload);
            }
            EndpointId::Pod { .. } | EndpointId::PodGroup { .. } => {}
        }
        let form = match (e.ip, &e.id) {
            (None, _) => pb::AddressForm::None as i32,
            (Some(ip), EndpointId::External(own)) if ip == *own => {
                pb::AddressForm::SameAsExternal as i32
            }
            (Some(ip), _) => push_address(c, ip, payload),
        };
        push_code(&mut c.address, form, payload);
        // Label counts fit: a label set longer than u32::MAX cannot be in memory twice.
        push_u32(&mut c.label_count, labels.len() as u32, payload);
        for (k, v) in labels {
            push_u32(&mut c.label_key, k, payload);
            push_u32(&mut c.label_value, v, payload);
        }
        push_u32(&mut c.identity, identity, payload);
    }

    /// Makes `part`'s additions part of `builder` and of the tables.
    fn commit(&mut self, builder: &mut Builder, part: Part, snap: &EdgeSnapshot) {
        self.bytes = self.bytes.saturating_add(part.cost());
        for s in part.strings {
            builder.strings.push(s.to_string());
            let hash = self.hasher.hash_one(&*s);
            self.strings.push(hash, s);
        }
        for e in part.endpoints {
            let hash = endpoint_hash(&self.hasher, &e);
            self.endpoints.push(hash, e);
        }
        append_endpoints(&mut builder.endpoints, part.columns);
        if let Some(k) = part.edge {
            let c = &mut builder.edges;
            c.subject.push(k.subject);
            c.peer.push(k.peer);
            c.direction.push(codes::direction_code(k.direction));
            c.protocol.push(codes::protocol_code(k.protocol));
            c.port.push(u32::from(k.port));
            c.peer_dns.push(k.dns.wrapping_add(1));
            c.serial.push(k.serial);
            self.edges.push(self.hasher.hash_one(snap.serial), k);
        }
        builder.payload += part.payload;
    }
}

/// Whether the string at `index` (or [`NO_STRING`]) is `s`.
fn same_string(strings: &Interner<Str>, index: u32, s: Option<&Str>) -> bool {
    match s {
        None => index == NO_STRING,
        Some(s) => index != NO_STRING && strings.get(index) == s,
    }
}

/// Hash of everything that makes two endpoints equal.
fn endpoint_hash(hasher: &RandomState, e: &Endpoint) -> u64 {
    hasher.hash_one((&e.id, &e.ip, &*e.labels, &e.identity))
}
