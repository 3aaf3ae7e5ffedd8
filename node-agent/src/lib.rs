//! `ne-agent`: the per-node half of Network Enforcer.
//!
//! It reads the node's flows from the data plane that is already there (Hubble's socket,
//! ztunnel's log files, Goldmane's stream, or a capture file), decodes them with
//! [`ne_shared::decode`] and pre-aggregates them in a [`ne_shared::table::FlowTable`].

pub mod tail;
