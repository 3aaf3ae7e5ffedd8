//! Network Enforcer core: the pure logic shared by the node agent and the leader.
//!
//! Data flow: a source's bytes are decoded ([`decode`]) into [`flow::FlowRecord`]s; each
//! record teaches at most one [`edge::Edge`]; the agent aggregates edges in a
//! [`table::FlowTable`]; the leader merges what every agent ships in an
//! [`index::EdgeIndex`]; endpoints are resolved to workloads ([`resolve`]); edges become
//! per-workload allow-lists rendered as proposals ([`allowlist`]); and promoted policies
//! are checked against flows with real NetworkPolicy and Istio semantics ([`eval`]).
//!
//! Nothing here does IO beyond reading what it is handed: no kube client, no gRPC.

pub mod allowlist;
pub mod decode;
pub mod edge;
pub mod eval;
pub mod flow;
pub mod index;
pub mod resolve;
pub mod table;
pub mod time;
