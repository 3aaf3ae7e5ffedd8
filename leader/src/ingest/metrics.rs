//! The ingest side's instruments (names as in docs/architecture.md, "OpenTelemetry"; prefix
//! `network_enforcer_`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// Label set `{reason}` of refused streams.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabel {
    pub reason: &'static str,
}

/// Label set `{reason}` of ended streams.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndedLabel {
    pub reason: &'static str,
}

/// Every instrument of the leader.
#[derive(Debug)]
pub struct LeaderMetrics {
    pub streams_opened: Counter,
    pub streams_refused: Family<RefusedLabel, Counter>,
    pub streams_active: Gauge,
    /// Streams that ended, by why.
    pub streams_ended: Family<EndedLabel, Counter>,
    /// Bytes the tables of every open stream hold (the budget's use).
    pub stream_table_bytes: Gauge,
    /// Streams ended because this replica lost the Lease.
    pub streams_lost_lease: Counter,
    /// Failed patches of this replica's Pod label (module `leader_label`).
    pub pod_label_failures: Counter,
    pub batches_received: Counter,
    pub batch_bytes_received: Counter,
    pub edges_received: Counter,
    pub acks_sent: Counter,
    pub rejects_sent: Counter,
    /// Seconds from the newest flow of a batch to the batch's arrival.
    pub ingest_lag: Histogram,
    /// Distinct edges in the merged index.
    pub edges: Gauge,
    /// Distinct policy-denied edges held (protect-mode observations).
    pub denied_edges: Gauge,
    /// Distinct audit / dry-run denied edges held (monitor-mode observations).
    pub audit_edges: Gauge,
    /// Batches held because their agent was over its budget.
    pub paced_batches: Counter,
    /// Time those batches were held, in seconds.
    pub paced_seconds: Counter<f64, AtomicU64>,
    /// Oversize messages that put their address in a cooldown.
    pub cooldowns: Counter,
    /// Connections closed as accepted, their address cooling down.
    pub connections_refused: Counter,
}

impl LeaderMetrics {
    /// The gauges of the merged indexes' sizes, for their owner task to keep.
    pub fn index_gauges(&self) -> super::IndexGauges {
        super::IndexGauges {
            edges: self.edges.clone(),
            denials: self.denied_edges.clone(),
            audits: self.audit_edges.clone(),
        }
    }
}

impl Default for LeaderMetrics {
    fn default() -> Self {
        LeaderMetrics {
            streams_opened: Counter::default(),
            streams_refused: Family::default(),
            streams_active: Gauge::default(),
            streams_ended: Family::default(),
            stream_table_bytes: Gauge::default(),
            streams_lost_lease: Counter::default(),
            pod_label_failures: Counter::default(),
            batches_received: Counter::default(),
            batch_bytes_received: Counter::default(),
            edges_received: Counter::default(),
            acks_sent: Counter::default(),
            rejects_sent: Counter::default(),
            // 10 ms to about 3 h.
            ingest_lag: Histogram::new(exponential_buckets(0.01, 4.0, 10)),
            edges: Gauge::default(),
            denied_edges: Gauge::default(),
            audit_edges: Gauge::default(),
            paced_batches: Counter::default(),
            paced_seconds: Counter::default(),
            cooldowns: Counter::default(),
            connections_refused: Counter::default(),
        }
    }
}

impl LeaderMetrics {
    /// Registers every instrument under the `network_enforcer` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("network_enforcer");
        for (name, help, counter) in [
            (
                "leader_streams_opened",
                "Agent streams accepted",
                &self.streams_opened,
            ),
            (
                "leader_batches_received",
                "Batches received from agents",
                &self.batches_received,
            ),
            (
                "leader_batch_bytes_received",
                "Bytes of the batches received",
                &self.batch_bytes_received,
            ),
            (
                "leader_edges_received",
                "Entries received, snapshots included",
                &self.edges_received,
            ),
            ("leader_acks_sent", "Acks sent to agents", &self.acks_sent),
            (
                "leader_streams_lost_lease",
                "Agent streams ended because this replica lost the Lease",
                &self.streams_lost_lease,
            ),
            (
                "leader_pod_label_failures",
                "Failed updates of this pod's leader label (leader discovery)",
                &self.pod_label_failures,
            ),
            (
                "leader_rejects_sent",
                "Batches rejected (the stream then ends)",
                &self.rejects_sent,
            ),
            (
                "leader_paced_batches",
                "Batches held because their agent was over its budget of bytes per second",
                &self.paced_batches,
            ),
            (
                "leader_address_cooldowns",
                "Oversize messages that made their address cool down (its connections closed)",
                &self.cooldowns,
            ),
            (
                "leader_connections_refused",
                "Agent connections closed as accepted, their address cooling down",
                &self.connections_refused,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        r.register(
            "leader_streams_refused",
            "Agent streams refused, by reason (standby, bad_hello, unauthenticated, forbidden, review_failed, too_many_streams, too_many_streams_from_address, hello_timeout, message_too_large, stale_epoch, too_many_agents, identity_mismatch)",
            self.streams_refused.clone(),
        );
        r.register(
            "leader_streams_ended",
            "Agent streams ended after their hello, by reason (closed, gone, transport, lost_lease, shutting_down, internal, out_of_sequence, bad_message, bad_batch, table_limit, table_budget, message_too_large, ack_timeout)",
            self.streams_ended.clone(),
        );
        r.register_with_unit(
            "leader_stream_table",
            "Memory the per-stream tables of every open agent stream hold together",
            Unit::Bytes,
            self.stream_table_bytes.clone(),
        );
        r.register(
            "leader_streams_active",
            "Agent streams open",
            self.streams_active.clone(),
        );
        r.register_with_unit(
            "leader_ingest_lag",
            "Time from the newest flow of a batch to the batch's arrival at the leader",
            Unit::Seconds,
            self.ingest_lag.clone(),
        );
        r.register_with_unit(
            "leader_paced",
            "Time batches were held because their agent was over its budget of bytes per second",
            Unit::Seconds,
            self.paced_seconds.clone(),
        );
        r.register(
            "leader_edges",
            "Distinct edges in the merged index",
            self.edges.clone(),
        );
        r.register(
            "leader_denied_edges",
            "Distinct edges of policy-denied traffic held (protect-mode observations)",
            self.denied_edges.clone(),
        );
        r.register(
            "leader_audit_edges",
            "Distinct edges of traffic a dry-run or audit policy would deny, held",
            self.audit_edges.clone(),
        );
    }
}

impl ne_telemetry::http::Exposition for LeaderMetrics {
    fn encode(&self) -> String {
        ne_telemetry::http::prometheus_text(|registry| self.register(registry))
    }
}
