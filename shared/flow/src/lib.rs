//! Network Enforcer's core: what a flow is, which edge it teaches, and the agent's
//! aggregator. Every other crate builds on it; it depends on nothing of Kubernetes, gRPC or
//! an async runtime.
//!
//! - [`flow`]: the flow model ([`flow::FlowRecord`], endpoints, verdicts), the same for
//!   every data plane;
//! - [`edge`]: the learning rules, from a record to at most one [`edge::Edge`] (subject,
//!   direction, peer, protocol, server port);
//! - [`time`]: timestamps as the data planes write them;
//! - [`table`]: the [`table::FlowTable`], the agent's concurrent aggregator of edges with
//!   dirty flags for delta shipping.
//!
//! Where the data goes next: the data planes' decoders (`ne-dataplanes`) fill the table, the
//! batch codec (`ne-delta`) ships its changed entries, and the leader's logic
//! (`ne-policy`) merges, resolves and renders them (docs/architecture.md).

pub mod edge;
pub mod flow;
pub mod table;
pub mod time;
