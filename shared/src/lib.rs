//! Network Enforcer core: the pure logic shared by the node agent and the leader.
//!
//! Data flow: a source's bytes are decoded ([`decode`]) into [`flow::FlowRecord`]s; each
//! record teaches at most one [`edge::Edge`]; the agent aggregates edges in a
//! [`table::FlowTable`] and ships its changed entries to the leader as compact batches
//! ([`delta`]); the leader merges them in an [`index::EdgeIndex`]; endpoints are resolved
//! to workloads ([`resolve`]); edges become
//! per-workload allow-lists rendered as proposals ([`allowlist`]); and promoted policies
//! are checked against flows with real NetworkPolicy and Istio semantics ([`eval`]).
//!
//! Nothing here does IO beyond reading what it is handed: no kube client, no gRPC (the
//! ingest API's message types come from `ne-proto`; the streams live in the binaries; the
//! metrics endpoints and OTLP export live in `ne-telemetry`).
//! [`otel_names`] holds the OpenTelemetry event and attribute names (docs/architecture.md,
//! "OpenTelemetry").

pub mod allowlist;
pub mod decode;
pub mod delta;
pub mod edge;
pub mod eval;
pub mod flow;
pub mod index;
pub mod otel_names;
pub mod resolve;
pub mod table;
pub mod time;
