//! One shard of the [`super::FlowTable`]: its entries, their index, and the endpoints and
//! strings they name, interned once per shard.
//!
//! An entry is 48 bytes: the key as handles (subject, peer, port, protocol, direction), one
//! handle for what the first edge carried beyond its interned endpoints (rare: other
//! labels or addresses, a DNS name, a blamed policy), and the statistics. Entries live in
//! a vector (freed ones are reused) and the index holds only their positions, hashed
//! from the endpoints' stored hashes: a lookup hashes the borrowed key's two endpoints,
//! probes the index once and compares the candidates' interned endpoints.

use std::hash::BuildHasher;
use std::net::IpAddr;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::intern::Interner;
use super::{EdgeKeyRef, EdgeSnapshot, Stats};
use crate::edge::Edge;
use crate::flow::{Direction, Endpoint, EndpointId, IdView, Labels, Protocol, Str};

/// What an entry's first edge carried beyond its key's interned endpoints.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Extra {
    /// The subject, when it differs from the interned one (other labels, address or
    /// identity).
    subject: Option<Endpoint>,
    /// As `subject`, for the peer.
    peer: Option<Endpoint>,
    peer_dns: Option<Str>,
    denied_by: Option<Str>,
}

/// An interned endpoint: the first one seen under its key, which is its id and, for a
/// peer, its mesh identity. The id is in place, where a lookup compares it; the rest is
/// boxed, and left out when it is what every data plane gives with that id (an external
/// endpoint's own address, nothing for the others).
#[derive(Debug)]
struct Id {
    id: EndpointId,
    rest: Option<Box<Rest>>,
    /// Whether the endpoint's identity is part of the key (peers), or metadata (subjects).
    keyed_identity: bool,
}

#[derive(Debug)]
struct Rest {
    ip: Option<IpAddr>,
    labels: Labels,
    identity: Option<Str>,
}

/// The endpoint an id has when nothing more is known of it.
fn plain(id: &EndpointId) -> Endpoint {
    let ip = match id {
        EndpointId::External(ip) => Some(*ip),
        _ => None,
    };
    Endpoint::new(id.clone()).with_ip(ip)
}

impl Id {
    fn new(endpoint: &Endpoint, keyed_identity: bool) -> Self {
        let rest = (plain(&endpoint.id) != *endpoint).then(|| {
            Box::new(Rest {
                ip: endpoint.ip,
                labels: endpoint.labels.clone(),
                identity: endpoint.identity.clone(),
            })
        });
        Id {
            id: endpoint.id.clone(),
            rest,
            keyed_identity,
        }
    }

    fn key_identity(&self) -> Option<&str> {
        match &self.rest {
            Some(rest) if self.keyed_identity => rest.identity.as_deref(),
            _ => None,
        }
    }

    fn is(&self, id: IdView<'_>, identity: Option<&str>) -> bool {
        self.id.view() == id && self.key_identity() == identity
    }

    /// Whether `endpoint`, id and metadata, is the one stored.
    fn same(&self, endpoint: &Endpoint) -> bool {
        self.id == endpoint.id
            && match &self.rest {
                None => plain(&self.id) == *endpoint,
                Some(rest) => {
                    rest.ip == endpoint.ip
                        && rest.labels == endpoint.labels
                        && rest.identity == endpoint.identity
                }
            }
    }

    fn endpoint(&self) -> Endpoint {
        match &self.rest {
            None => plain(&self.id),
            Some(rest) => Endpoint {
                id: self.id.clone(),
                ip: rest.ip,
                labels: rest.labels.clone(),
                identity: rest.identity.clone(),
            },
        }
    }
}

/// The table's hash functions, one seed for all shards.
#[derive(Debug, Default)]
pub(super) struct Hashes(RandomState);

impl Hashes {
    fn id(&self, id: IdView<'_>, identity: Option<&str>) -> u64 {
        self.0.hash_one((id, identity))
    }

    /// An entry's hash, from its endpoints' hashes.
    fn entry(
        &self,
        subject: u64,
        peer: u64,
        port: u16,
        protocol: Protocol,
        direction: Direction,
    ) -> u64 {
        self.0.hash_one((subject, peer, port, protocol, direction))
    }

    fn extra(&self, extra: &Extra) -> u64 {
        self.0.hash_one(extra)
    }
}

/// A key being looked up, with the hashes of its two endpoints.
#[derive(Debug)]
pub(super) struct Probe<'a> {
    key: EdgeKeyRef<'a>,
    /// Also picks the shard.
    pub(super) subject_hash: u64,
    peer_hash: u64,
    hash: u64,
}

impl<'a> Probe<'a> {
    pub(super) fn new(hashes: &Hashes, key: EdgeKeyRef<'a>) -> Self {
        let subject_hash = hashes.id(key.subject, None);
        let peer_hash = hashes.id(key.peer, key.peer_identity);
        Probe {
            subject_hash,
            peer_hash,
            hash: hashes.entry(
                subject_hash,
                peer_hash,
                key.port,
                key.protocol,
                key.direction,
            ),
            key,
        }
    }
}

/// Marks a freed entry (no interned handle reaches it: the table's capacity is far below).
const FREE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Key {
    subject: u32,
    peer: u32,
    port: u16,
    protocol: Protocol,
    direction: Direction,
}

#[derive(Debug)]
pub(super) struct Entry {
    key: Key,
    /// 0: nothing beyond the key's endpoints; else 1 + a handle of `Shard::extras`.
    extra: u32,
    pub(super) stats: Stats,
}

#[derive(Debug, Default)]
pub(super) struct Shard {
    ids: Interner<Id>,
    extras: Interner<Extra>,
    /// Positions in `entries`, hashed by [`Hashes::entry`].
    index: HashTable<u32>,
    entries: Vec<Entry>,
    /// Freed positions in `entries`.
    free: Vec<u32>,
}

impl Shard {
    /// The entry of `probe`'s key.
    pub(super) fn find(&self, probe: &Probe<'_>) -> Option<&Entry> {
        let k = &probe.key;
        let &at = self.index.find(probe.hash, |&i| {
            let e = &self.entries[i as usize].key;
            e.port == k.port
                && e.protocol == k.protocol
                && e.direction == k.direction
                && self.ids.get(e.subject).is(k.subject, None)
                && self.ids.get(e.peer).is(k.peer, k.peer_identity)
        })?;
        Some(&self.entries[at as usize])
    }

    /// Stores `edge` (whose key `probe` is, and which is not stored yet) with `stats`.
    pub(super) fn insert(&mut self, hashes: &Hashes, probe: &Probe<'_>, edge: &Edge, stats: Stats) {
        let k = &probe.key;
        let subject = self.ids.acquire(
            probe.subject_hash,
            |id| id.is(k.subject, None),
            || Id::new(&edge.subject, false),
        );
        let peer = self.ids.acquire(
            probe.peer_hash,
            |id| id.is(k.peer, k.peer_identity),
            || Id::new(&edge.peer, true),
        );
        let extra = Extra {
            subject: (!self.ids.get(subject).same(&edge.subject)).then(|| edge.subject.clone()),
            peer: (!self.ids.get(peer).same(&edge.peer)).then(|| edge.peer.clone()),
            peer_dns: edge.peer_dns.clone(),
            denied_by: edge.denied_by.clone(),
        };
        let extra = if extra == Extra::default() {
            0
        } else {
            let hash = hashes.extra(&extra);
            1 + self.extras.acquire(hash, |e| *e == extra, || extra.clone())
        };
        let entry = Entry {
            key: Key {
                subject,
                peer,
                port: k.port,
                protocol: k.protocol,
                direction: k.direction,
            },
            extra,
            stats,
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.entries[at as usize] = entry;
                at
            }
            None => {
                let at = u32::try_from(self.entries.len())
                    .expect("the table's capacity bounds a shard's entries below u32::MAX");
                self.entries.push(entry);
                at
            }
        };
        let (ids, entries) = (&self.ids, &self.entries);
        self.index.insert_unique(probe.hash, at, |&i| {
            entry_hash(hashes, ids, &entries[i as usize].key)
        });
    }

    /// Live entries.
    pub(super) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.key.subject != FREE)
    }

    /// Removes the entries `remove` selects; returns how many.
    pub(super) fn remove_where(
        &mut self,
        hashes: &Hashes,
        mut remove: impl FnMut(&mut Stats) -> bool,
    ) -> usize {
        let mut removed = 0;
        for at in 0..self.entries.len() {
            let entry = &mut self.entries[at];
            if entry.key.subject == FREE || !remove(&mut entry.stats) {
                continue;
            }
            let (key, extra) = (entry.key, entry.extra);
            entry.key.subject = FREE;
            let at = at as u32;
            let hash = entry_hash(hashes, &self.ids, &key);
            match self.index.find_entry(hash, |&i| i == at) {
                Ok(found) => {
                    found.remove();
                }
                Err(_) => unreachable!("a live entry is indexed under its key"),
            }
            self.free.push(at);
            if extra != 0 {
                self.extras.release(extra - 1);
            }
            self.ids.release(key.subject);
            self.ids.release(key.peer);
            removed += 1;
        }
        removed
    }

    /// The entry as an owned edge with its statistics.
    pub(super) fn read(&self, entry: &Entry) -> EdgeSnapshot {
        let none = Extra::default();
        let extra = match entry.extra {
            0 => &none,
            e => self.extras.get(e - 1),
        };
        let endpoint = |id: u32, own: &Option<Endpoint>| match own {
            Some(e) => e.clone(),
            None => self.ids.get(id).endpoint(),
        };
        let edge = Edge {
            subject: endpoint(entry.key.subject, &extra.subject),
            direction: entry.key.direction,
            peer: endpoint(entry.key.peer, &extra.peer),
            protocol: entry.key.protocol,
            port: entry.key.port,
            peer_dns: extra.peer_dns.clone(),
            denied_by: extra.denied_by.clone(),
        };
        entry.stats.read(edge)
    }

    /// Interned values held (endpoints and extras).
    #[cfg(test)]
    pub(super) fn interned(&self) -> usize {
        self.ids.len() + self.extras.len()
    }
}

/// An entry's hash from its interned endpoints' stored hashes: what [`Probe::new`] computes
/// from the borrowed key.
fn entry_hash(hashes: &Hashes, ids: &Interner<Id>, key: &Key) -> u64 {
    hashes.entry(
        ids.hash(key.subject),
        ids.hash(key.peer),
        key.port,
        key.protocol,
        key.direction,
    )
}
