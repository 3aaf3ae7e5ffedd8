//! Wire formats of Network Enforcer: the agent-to-leader ingest API ([`ingest`]) and the
//! subsets of Cilium Hubble's and Calico Goldmane's gRPC APIs the agent reads.
//!
//! Place in the data flow: the agent's sources open the Hubble and Goldmane streams; the
//! hot Hubble path takes each `GetFlowsResponse` undecoded ([`raw`]) and hands the bytes
//! to `ne_dataplanes::hubble_pb`, while the prost types here serve the request side,
//! the cooler sources (Goldmane), health calls and test servers. The agent then ships its
//! flow table to the leader over [`ingest`]'s stream; `ne-delta` turns table
//! entries into its `Batch` messages and back.
//!
//! The data-plane `.proto` files in `proto/` are our own, written from the field numbers
//! of Hubble's and Goldmane's published APIs (same tags and wire types as upstream, fewer
//! fields); `proto/networkenforcer/ingest/v1/ingest.proto` is this project's own API.
//! The messages need prost alone; the gRPC services (clients, servers and [`raw`]) come
//! with the `grpc` feature, which pulls in tonic, so that the batch codec (`ne-delta`) and
//! the decoders' tests use the messages without an HTTP/2 stack. The `testing` feature adds
//! [`testing`], a Hubble server that writes responses as the bytes given, for tests and the
//! load harness.
//! The generated code in `src/gen/` (services in `src/gen/grpc/`) is committed, so a build needs no `protoc` and no build
//! script; `tests/bootstrap.rs` regenerates it with protox and fails on any difference
//! (`NE_REGEN_PROTO=1 cargo test -p ne-proto --test bootstrap` rewrites it).

#[cfg(feature = "grpc")]
pub mod raw;
#[cfg(feature = "testing")]
pub mod testing;

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
    #[cfg(feature = "grpc")]
    include!("gen/grpc/observer.rs");
}

/// Calico Goldmane's `goldmane` package (subset): the `Flows` stream and Felix's
/// `FlowCollector` (client and server).
pub mod goldmane {
    include!("gen/goldmane.rs");
    #[cfg(feature = "grpc")]
    include!("gen/grpc/goldmane.rs");
}

/// Network Enforcer's agent-to-leader API (`networkenforcer.ingest.v1`): the `Ingest`
/// service (client and server), its `Hello`, columnar `Batch` and `Ack` messages.
// `AgentMessage` holds its `Batch` inline: one per message, boxing it buys nothing.
#[allow(clippy::large_enum_variant)]
pub mod ingest {
    include!("gen/networkenforcer.ingest.v1.rs");
    #[cfg(feature = "grpc")]
    include!("gen/grpc/networkenforcer.ingest.v1.rs");
}

#[cfg(all(test, feature = "grpc"))]
mod tests;
