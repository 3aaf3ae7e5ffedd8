//! How the harnesses' agents ship: the shipper's own defaults for one agent on loopback.

use std::time::Duration;

use ne_flow::edge::Provider;
use ne_node_agent::ship::ShipConfig;

/// The shipper of node `id` (its agent id too) to `leader` every `flush_interval`, with the
/// agent's defaults, and no expiry within a run.
pub fn config(leader: String, id: String, flush_interval: Duration) -> ShipConfig {
    ShipConfig {
        addresses: vec![leader],
        node: id.clone(),
        agent_id: id,
        epoch: ShipConfig::process_epoch(),
        provider: Provider::Cilium,
        flush_interval,
        max_message_bytes: 1 << 20,
        max_unacked: 64,
        max_unacked_bytes: 8 << 20,
        idle_expiry: Duration::from_secs(3600),
        token_file: None,
    }
}
