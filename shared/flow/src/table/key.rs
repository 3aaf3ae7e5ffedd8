//! The aggregation key of the [`super::FlowTable`] and borrowed views of it: a key borrowed
//! from a record being decoded ([`EdgeKeyRef`]), which the table looks up without building
//! anything owned, and an [`Edge`] seen as a key ([`EdgeView`]), with which a map keyed by
//! [`EdgeKey`] (the leader's index) is searched without cloning into an owned key.
//!
//! The trick: [`EdgeKey`] implements `Borrow<dyn KeyView>`, and both the owned key and a
//! borrowed [`EdgeView`] hash and compare through the same [`KeyView`] accessors, which
//! keeps `Hash` and `Eq` consistent between the two as `Borrow` requires. Identities are
//! hashed as [`IdView`]s, so a key borrowed from undecoded bytes ([`EdgeKeyRef`]) finds
//! the same entry as the owned key.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::edge::Edge;
use crate::flow::{Direction, EndpointId, IdView, Protocol, Str};

/// What makes two edges the same entry: the identities on both sides, the peer's mesh
/// identity, the transport and the server port. Labels, addresses and DNS names are
/// metadata of the first edge seen, not part of the key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EdgeKey {
    pub subject: EndpointId,
    pub direction: Direction,
    pub peer: EndpointId,
    /// The peer's mesh identity (Istio principal), when the record carries one.
    pub peer_identity: Option<Str>,
    pub protocol: Protocol,
    pub port: u16,
}

impl EdgeKey {
    /// The key of `edge` (clones its identities).
    pub fn of(edge: &Edge) -> Self {
        EdgeKey {
            subject: edge.subject.id.clone(),
            direction: edge.direction,
            peer: edge.peer.id.clone(),
            peer_identity: edge.peer.identity.clone(),
            protocol: edge.protocol,
            port: edge.port,
        }
    }
}

impl From<&Edge> for EdgeKey {
    fn from(edge: &Edge) -> Self {
        EdgeKey::of(edge)
    }
}

/// Field access shared by the owned key and the borrowed views: what makes a map keyed by
/// [`EdgeKey`] searchable with a borrowed edge.
pub trait KeyView {
    fn subject(&self) -> IdView<'_>;
    fn direction(&self) -> Direction;
    fn peer(&self) -> IdView<'_>;
    fn peer_identity(&self) -> Option<&str>;
    fn protocol(&self) -> Protocol;
    fn port(&self) -> u16;
}

impl KeyView for EdgeKey {
    fn subject(&self) -> IdView<'_> {
        self.subject.view()
    }
    fn direction(&self) -> Direction {
        self.direction
    }
    fn peer(&self) -> IdView<'_> {
        self.peer.view()
    }
    fn peer_identity(&self) -> Option<&str> {
        self.peer_identity.as_deref()
    }
    fn protocol(&self) -> Protocol {
        self.protocol
    }
    fn port(&self) -> u16 {
        self.port
    }
}

/// An [`Edge`] seen as a key, without copying anything.
#[derive(Debug)]
pub struct EdgeView<'e>(pub &'e Edge);

impl KeyView for EdgeView<'_> {
    fn subject(&self) -> IdView<'_> {
        self.0.subject.id.view()
    }
    fn direction(&self) -> Direction {
        self.0.direction
    }
    fn peer(&self) -> IdView<'_> {
        self.0.peer.id.view()
    }
    fn peer_identity(&self) -> Option<&str> {
        self.0.peer.identity.as_deref()
    }
    fn protocol(&self) -> Protocol {
        self.0.protocol
    }
    fn port(&self) -> u16 {
        self.0.port
    }
}

/// A key borrowed from a record being decoded: the fast path looks it up before it builds
/// anything owned. It hashes and compares exactly like the [`EdgeKey`] with the same
/// fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeKeyRef<'a> {
    pub subject: IdView<'a>,
    pub direction: Direction,
    pub peer: IdView<'a>,
    pub peer_identity: Option<&'a str>,
    pub protocol: Protocol,
    pub port: u16,
}

impl<'a> EdgeKeyRef<'a> {
    /// The key of `edge`, borrowed from it.
    pub fn of(edge: &'a Edge) -> Self {
        EdgeKeyRef {
            subject: edge.subject.id.view(),
            direction: edge.direction,
            peer: edge.peer.id.view(),
            peer_identity: edge.peer.identity.as_deref(),
            protocol: edge.protocol,
            port: edge.port,
        }
    }
}

impl KeyView for EdgeKeyRef<'_> {
    fn subject(&self) -> IdView<'_> {
        self.subject
    }
    fn direction(&self) -> Direction {
        self.direction
    }
    fn peer(&self) -> IdView<'_> {
        self.peer
    }
    fn peer_identity(&self) -> Option<&str> {
        self.peer_identity
    }
    fn protocol(&self) -> Protocol {
        self.protocol
    }
    fn port(&self) -> u16 {
        self.port
    }
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.subject().hash(state);
        self.direction().hash(state);
        self.peer().hash(state);
        self.peer_identity().hash(state);
        self.protocol().hash(state);
        self.port().hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        // Cheap fields first.
        self.port() == other.port()
            && self.protocol() == other.protocol()
            && self.direction() == other.direction()
            && self.subject() == other.subject()
            && self.peer() == other.peer()
            && self.peer_identity() == other.peer_identity()
    }
}

impl Eq for dyn KeyView + '_ {}

impl Hash for EdgeKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn KeyView).hash(state);
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for EdgeKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl EdgeKey {
    /// Whether this key and `key` name the same entry.
    pub(super) fn view_eq(&self, key: &EdgeKeyRef<'_>) -> bool {
        let (a, b): (&dyn KeyView, &dyn KeyView) = (self, key);
        a == b
    }
}
