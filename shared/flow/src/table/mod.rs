//! The agent's pre-aggregation map (docs/architecture.md, "The agent" and "Agent ↔ leader
//! protocol").
//!
//! Decoded flows become [`Edge`]s; the agent records each one here, keyed by [`EdgeKey`],
//! so that a million flows over the same few thousand edges cost a few thousand entries.
//! The shipper periodically calls [`FlowTable::drain_dirty`] to send only the entries that
//! changed since the last send, [`FlowTable::snapshot`] for a new or reconnecting stream,
//! and [`FlowTable::expire_idle`] to forget entries that were shipped and went quiet.
//!
//! Concurrency: 16 shards, each behind a read-write lock and chosen by the subject's hash.
//! Recording an edge that is already known takes only its shard's *read* lock and updates
//! atomics; a new key takes the write lock once. Memory is bounded: past `capacity`
//! entries new keys are dropped and counted, never blocking the source.
//!
//! Memory: a shard interns the endpoints its entries name (module `shard`), so an entry
//! is 48 bytes of handles and statistics, and an endpoint's strings, labels and address
//! are stored once however many edges it has. Interned values are reference-counted and
//! freed with the last entry that uses them.
//!
//! Counts and times are totals since the entry was inserted, not deltas: re-sending an
//! entry is idempotent for the receiver.

mod intern;
mod key;
mod shard;

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::{Deserialize, Serialize};

use shard::{Hashes, Probe, Shard};

use crate::edge::{self, Edge, EdgeSkip, Provider};
use crate::flow::{FlowRecord, Timestamp};

pub use key::{EdgeKey, EdgeKeyRef};
pub use key::{EdgeView, KeyView};

/// What [`FlowTable::record`] did with an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordOutcome {
    /// A new entry was created.
    Inserted,
    /// An existing entry's statistics were updated.
    Updated,
    /// The key is new and the table is full: nothing was stored (counted in
    /// [`FlowTable::dropped`]).
    Dropped,
}

/// One entry as read out of the table: the first edge seen for its key and the totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeSnapshot {
    /// The first edge recorded under this key (its labels, addresses and DNS name).
    pub edge: Edge,
    /// Connections recorded since the entry was inserted.
    pub count: u64,
    /// Earliest observation time recorded.
    pub first_seen: Timestamp,
    /// Latest observation time recorded.
    pub last_seen: Timestamp,
    /// The entry's incarnation: a table-wide number, increasing, given when the entry was
    /// inserted. An entry expired and inserted again gets a new one, so a receiver can
    /// tell a count that restarted from a count it has already seen.
    pub serial: u64,
}

impl EdgeSnapshot {
    /// The key this entry is stored under.
    pub fn key(&self) -> EdgeKey {
        EdgeKey::of(&self.edge)
    }
}

/// The per-entry statistics, updated without the shard write lock.
#[derive(Debug)]
struct Stats {
    /// The entry's incarnation ([`EdgeSnapshot::serial`]) shifted left by one, and the
    /// dirty flag in bit 0: set after every update, cleared by [`FlowTable::drain_dirty`]
    /// before it reads the other fields.
    serial_dirty: AtomicU64,
    count: AtomicU64,
    first_seen: AtomicI64,
    last_seen: AtomicI64,
}

const DIRTY: u64 = 1;

impl Stats {
    fn new(serial: u64, time: Timestamp, count: u64) -> Self {
        Stats {
            serial_dirty: AtomicU64::new(serial << 1 | DIRTY),
            count: AtomicU64::new(count),
            first_seen: AtomicI64::new(time.0),
            last_seen: AtomicI64::new(time.0),
        }
    }

    fn add(&self, time: Timestamp, count: u64) {
        // Times first: the count update below publishes them (see `drain_dirty`). In steady
        // state times only grow, so `first_seen` usually needs no write.
        if time.0 < self.first_seen.load(Ordering::Relaxed) {
            self.first_seen.fetch_min(time.0, Ordering::Relaxed);
        }
        if time.0 > self.last_seen.load(Ordering::Relaxed) {
            self.last_seen.fetch_max(time.0, Ordering::Relaxed);
        }
        if count <= u64::from(u32::MAX) {
            // Cannot realistically wrap: it would take 2^32 records of 2^32 each.
            self.count.fetch_add(count, Ordering::SeqCst);
        } else {
            // Rare huge aggregate: saturate instead of wrapping.
            let _ = self
                .count
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| {
                    Some(c.saturating_add(count))
                });
        }
        // Skip the write when the flag is already set (the hot case between two drains).
        // Sound because the count update, this load and the drainer's clearing and count
        // load are all SeqCst: if this load still sees the flag although a drain cleared
        // it, the drain came later in the single total order, and its count load sees this
        // update.
        if self.serial_dirty.load(Ordering::SeqCst) & DIRTY == 0 {
            self.serial_dirty.fetch_or(DIRTY, Ordering::SeqCst);
        }
    }

    /// Clears the dirty flag; returns whether it was set.
    fn take_dirty(&self) -> bool {
        self.serial_dirty.fetch_and(!DIRTY, Ordering::SeqCst) & DIRTY != 0
    }

    fn is_dirty(&self) -> bool {
        self.serial_dirty.load(Ordering::SeqCst) & DIRTY != 0
    }

    /// Whether the entry was drained since its last update and last seen before `time`,
    /// read under the shard's write lock.
    fn idle_before(&mut self, time: Timestamp) -> bool {
        *self.serial_dirty.get_mut() & DIRTY == 0 && *self.last_seen.get_mut() < time.0
    }

    /// Reads the statistics: the count first (SeqCst, it publishes the times), then the
    /// times.
    fn read(&self, edge: Edge) -> EdgeSnapshot {
        EdgeSnapshot {
            serial: self.serial_dirty.load(Ordering::Relaxed) >> 1,
            edge,
            count: self.count.load(Ordering::SeqCst),
            first_seen: Timestamp(self.first_seen.load(Ordering::Relaxed)),
            last_seen: Timestamp(self.last_seen.load(Ordering::Relaxed)),
        }
    }
}

/// Shards; a power of two. Enough that a few recording threads rarely meet on one lock;
/// few, because an endpoint peer of subjects in several shards is interned in each.
const SHARDS: usize = 16;

/// The concurrent, bounded edge aggregator. All methods take `&self`; share it with an
/// `Arc`.
///
/// Hasher: [`foldhash::fast::RandomState`], seeded per table. Keys carry addresses and
/// names that remote parties influence (external IPs), so a fixed, public seed would let
/// them precompute colliding keys for a shard; nothing depends on iteration order (callers
/// sort what they need sorted), so determinism buys nothing here.
#[derive(Debug)]
pub struct FlowTable {
    shards: Box<[RwLock<Shard>]>,
    hashes: Hashes,
    capacity: usize,
    /// Entries stored or reserved; the capacity check reserves here under the shard write
    /// lock, so the bound holds exactly under concurrency.
    len: AtomicUsize,
    dropped: AtomicU64,
    /// The latest time of a dropped edge (`i64::MIN`: none yet).
    latest_dropped: AtomicI64,
    /// The last serial given to an entry.
    serials: AtomicU64,
}

/// The largest capacity: interned handles and positions are `u32`, and an entry takes at
/// most two references to one interned endpoint.
const MAX_CAPACITY: usize = (u32::MAX / 4) as usize;

impl FlowTable {
    /// An empty table that holds at most `capacity` distinct edges (at most about a
    /// billion).
    pub fn new(capacity: usize) -> Self {
        FlowTable {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            hashes: Hashes::default(),
            capacity: capacity.min(MAX_CAPACITY),
            len: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            latest_dropped: AtomicI64::new(i64::MIN),
            serials: AtomicU64::new(0),
        }
    }

    /// The shard a probe's subject picks. Bits 32.. of the hash: the shard's own tables
    /// use the low bits (bucket) and the top seven (tag).
    fn shard(&self, probe: &Probe<'_>) -> &RwLock<Shard> {
        &self.shards[(probe.subject_hash >> 32) as usize & (SHARDS - 1)]
    }

    /// Records `count` connections of `edge` observed at `time`.
    ///
    /// An existing key is updated under a shard read lock with atomics only; a new key is
    /// inserted (interning what its endpoints need) unless the table is full, in which
    /// case the edge is dropped and counted.
    pub fn record(&self, edge: &Edge, time: Timestamp, count: u64) -> RecordOutcome {
        let probe = Probe::new(&self.hashes, EdgeKeyRef::of(edge));
        let shard = self.shard(&probe);
        if let Some(entry) = read(shard).find(&probe) {
            entry.stats.add(time, count);
            return RecordOutcome::Updated;
        }
        let mut shard = write(shard);
        // Another thread may have inserted it between our lookup and the write lock.
        if let Some(entry) = shard.find(&probe) {
            entry.stats.add(time, count);
            return RecordOutcome::Updated;
        }
        let reserved = self
            .len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            });
        if reserved.is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.latest_dropped.fetch_max(time.0, Ordering::Relaxed);
            return RecordOutcome::Dropped;
        }
        let serial = self.serials.fetch_add(1, Ordering::Relaxed) + 1;
        shard.insert(&self.hashes, &probe, edge, Stats::new(serial, time, count));
        RecordOutcome::Inserted
    }

    /// Records `count` connections under `key` observed at `time`, building the edge with
    /// `make_edge` only when the key is not in the table yet (the hot path for a record
    /// still in its input bytes: a known edge costs no allocation). `make_edge` must
    /// return an edge whose key equals `key`.
    pub fn record_by_key<E>(
        &self,
        key: &EdgeKeyRef<'_>,
        time: Timestamp,
        count: u64,
        make_edge: impl FnOnce() -> Result<Edge, E>,
    ) -> Result<RecordOutcome, E> {
        let probe = Probe::new(&self.hashes, *key);
        if let Some(entry) = read(self.shard(&probe)).find(&probe) {
            entry.stats.add(time, count);
            return Ok(RecordOutcome::Updated);
        }
        let edge = make_edge()?;
        debug_assert!(EdgeKey::of(&edge).view_eq(key));
        Ok(self.record(&edge, time, count))
    }

    /// Derives the edge `flow` teaches under `provider`'s rules and records it, with
    /// `flow.connections` as the count and `flow.time` (or 0 when unknown) as the time.
    pub fn record_flow(
        &self,
        flow: &FlowRecord,
        provider: Provider,
    ) -> Result<RecordOutcome, EdgeSkip> {
        let edge = edge::derive(flow, provider)?;
        Ok(self.record(&edge, flow.time.unwrap_or_default(), flow.connections))
    }

    /// Number of distinct edges held.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the table holds no edge.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The maximum number of distinct edges.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// New edges dropped because the table was full, since creation.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The latest time of a new edge dropped because the table was full, if any was: the
    /// flows' clock moves on while a full table's entries stand still.
    pub fn latest_dropped(&self) -> Option<Timestamp> {
        let t = self.latest_dropped.load(Ordering::Relaxed);
        (t != i64::MIN).then_some(Timestamp(t))
    }

    /// The entries changed since the previous drain, in no particular order; their dirty
    /// flags are cleared.
    ///
    /// No concurrent update is lost: the flag is cleared *before* the statistics are
    /// read, so an update either is visible in what this drain returns or sets the flag
    /// again after the clearing and shows up in the next drain. (The flag, its clearing
    /// and the count are SeqCst; see `Stats::add`.)
    pub fn drain_dirty(&self) -> Vec<EdgeSnapshot> {
        let mut all = Vec::new();
        self.drain_dirty_chunks(usize::MAX, |chunk| all = chunk);
        all
    }

    /// [`FlowTable::drain_dirty`] in pieces: hands `ship` the changed entries a few shards
    /// at a time, each piece once it holds `chunk` entries or more (the last one whatever it
    /// holds; none when nothing changed), so a drain of a flooded table never holds all of
    /// it at once. Pieces are cut between shards, with no lock held while `ship` runs.
    pub fn drain_dirty_chunks(&self, chunk: usize, mut ship: impl FnMut(Vec<EdgeSnapshot>)) {
        let mut out = Vec::new();
        for shard in &self.shards {
            {
                let shard = read(shard);
                out.extend(
                    shard
                        .entries()
                        .filter(|e| e.stats.take_dirty())
                        .map(|e| shard.read(e)),
                );
            }
            if out.len() >= chunk {
                ship(std::mem::take(&mut out));
            }
        }
        if !out.is_empty() {
            ship(out);
        }
    }

    /// Every entry, in no particular order, leaving dirty flags as they are (for a new or
    /// reconnecting stream).
    pub fn snapshot(&self) -> Vec<EdgeSnapshot> {
        let mut out = Vec::with_capacity(self.len());
        for shard in &self.shards {
            let shard = read(shard);
            out.extend(shard.entries().map(|e| shard.read(e)));
        }
        out
    }

    /// Removes the entries that were drained since their last update (not dirty) and were
    /// last seen before `older_than`; returns how many were removed.
    ///
    /// Each shard is checked under its write lock, so an entry updated concurrently is
    /// either seen dirty (and kept) or updated after its removal (and re-inserted).
    pub fn expire_idle(&self, older_than: Timestamp) -> usize {
        let mut removed = 0;
        for shard in &self.shards {
            removed += write(shard).remove_where(&self.hashes, |s| s.idle_before(older_than));
        }
        self.len.fetch_sub(removed, Ordering::AcqRel);
        removed
    }

    /// Removes drained entries (not dirty) last seen before `before`, least recently seen
    /// first, until at most `keep` entries are left or none such is; returns how many were
    /// removed. Entries last seen at the same time go together, so a few more may go.
    ///
    /// One pass reads the candidates' times (8 bytes each) to find the cutoff, one more
    /// removes them as [`FlowTable::expire_idle`] does.
    pub fn shed_least_recent(&self, keep: usize, before: Timestamp) -> usize {
        let excess = self.len().saturating_sub(keep);
        if excess == 0 {
            return 0;
        }
        let mut times: Vec<i64> = Vec::new();
        for shard in &self.shards {
            times.extend(
                read(shard)
                    .entries()
                    .filter(|e| !e.stats.is_dirty())
                    .map(|e| e.stats.last_seen.load(Ordering::Relaxed))
                    .filter(|&t| t < before.0),
            );
        }
        let cutoff = if times.len() <= excess {
            before.0
        } else {
            let (_, nth, _) = times.select_nth_unstable(excess - 1);
            nth.saturating_add(1)
        };
        self.expire_idle(Timestamp(cutoff))
    }

    /// Interned values held by all shards.
    #[cfg(test)]
    fn interned(&self) -> usize {
        self.shards.iter().map(|s| read(s).interned()).sum()
    }
}

/// A shard's lock for reading. The only panics under a shard's write lock are its
/// consistency checks (bugs); a poisoned lock is used as it is rather than turning every
/// later record into a panic too.
fn read(shard: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
    shard.read().unwrap_or_else(PoisonError::into_inner)
}

/// A shard's lock for writing (see [`read`] on poisoning).
fn write(shard: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
    shard.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
