//! Wire formats of Network Enforcer: the subsets of Cilium Hubble's and Calico Goldmane's
//! gRPC APIs the agent reads (the agent-to-leader ingest API arrives with the delta issue).
//!
//! Place in the data flow: the agent's sources open these streams; the hot Hubble path
//! takes each `GetFlowsResponse` undecoded ([`raw`]) and hands the bytes to
//! `ne_shared::decode::hubble_pb`, while the prost types here serve the request side, the
//! cooler sources (Goldmane), health calls and test servers.
//!
//! The `.proto` files in `proto/` are our own, written from the field numbers in
//! `shared/reference/dataplanes.md` (same tags and wire types as upstream, fewer fields).
//! The generated code in `src/gen/` is committed, so a build needs no `protoc` and no build
//! script; `tests/bootstrap.rs` regenerates it with protox and fails on any difference
//! (`NE_REGEN_PROTO=1 cargo test -p ne-proto --test bootstrap` rewrites it).

pub mod raw;

pub use prost;
pub use prost_types;

/// Hubble's `flow` package (subset): `Flow`, its parts, filters and lost events.
pub mod flow {
    include!("gen/flow.rs");
}

/// Hubble Relay's `relay` package (subset): node status events.
pub mod relay {
    include!("gen/relay.rs");
}

/// Hubble's `observer` package (subset): the `Observer` service (client and server).
// The `GetFlowsResponse` oneof holds a `Flow` inline; boxing it would cost an allocation
// per flow.
#[allow(clippy::large_enum_variant)]
pub mod observer {
    include!("gen/observer.rs");
}

/// Calico Goldmane's `goldmane` package (subset): the `Flows` stream and Felix's
/// `FlowCollector` (client and server).
pub mod goldmane {
    include!("gen/goldmane.rs");
}

#[cfg(test)]
mod tests;
