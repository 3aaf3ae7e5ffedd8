//! Wire formats of Network Enforcer: the agent-to-leader ingest API and the subsets of
//! Cilium Hubble's and Calico Goldmane's gRPC APIs the agent reads.
//!
//! The `.proto` files and their generated code arrive with the node-agent and delta
//! issues; the crate exists now so that the workspace layout is the final one.
