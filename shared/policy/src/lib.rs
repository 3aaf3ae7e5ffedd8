//! Network Enforcer's leader logic, pure: what the leader does with the edges agents ship.
//!
//! - [`index`]: the merged [`index::EdgeIndex`] of every agent's batches;
//! - [`resolve`]: endpoints to workloads ([`resolve::Resolver`]: from the record alone, or a
//!   [`resolve::ClusterSnapshot`] of the cluster);
//! - [`allowlist`]: edges to per-workload allow-lists, rendered as proposals;
//! - [`eval`]: does a promoted policy allow a flow, with real NetworkPolicy and Istio
//!   semantics;
//! - [`otel_names`]: the OpenTelemetry event and attribute names of violations
//!   (docs/architecture.md, "OpenTelemetry").
//!
//! The only crate of the core that knows the CRD types (`ne-crds`); no IO, no kube client.

pub mod allowlist;
pub mod eval;
pub mod index;
pub mod otel_names;
pub mod resolve;
