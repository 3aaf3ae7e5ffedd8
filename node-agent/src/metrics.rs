//! The agent's instruments (docs/architecture.md, "OpenTelemetry": names are a contract),
//! defined once and passed down; no globals. Exposed in the Prometheus text format on
//! `/metrics`.
//!
//! Scraper lag — how long after the data plane saw a flow the agent got it — is recorded
//! in an HDR histogram (constant memory, 3 significant digits, no bucket choice at record
//! time) and exported as a Prometheus histogram with fixed bounds.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hdrhistogram::Histogram as Hdr;
use ne_dataplanes::SkipReason;
use ne_flow::edge::EdgeSkip;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Registry, Unit};

/// Why a flow that reached the agent was not recorded in the FlowTable. Bounded.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum DropReason {
    /// The bytes did not decode.
    decode_error,
    /// Reply traffic.
    reply,
    /// Dropped, denied or failed traffic (kept for violations, not learned).
    not_forwarded,
    /// ICMP and other protocols a policy cannot express.
    unsupported_protocol,
    no_port,
    unknown_direction,
    direction_not_learned,
    no_identity,
    /// The FlowTable is at its edge cap.
    table_full,
    /// A CRI partial line never completed, or a log line was cut by rotation or truncation.
    partial_line,
    /// A log line longer than the limit.
    overlong_line,
    /// A policy denial not kept: the denial table is full.
    denials_full,
    /// An audit / dry-run denial not kept: the audit table is full.
    audits_full,
}

impl From<EdgeSkip> for DropReason {
    fn from(skip: EdgeSkip) -> Self {
        match skip {
            EdgeSkip::Reply => DropReason::reply,
            EdgeSkip::NotForwarded => DropReason::not_forwarded,
            EdgeSkip::Protocol => DropReason::unsupported_protocol,
            EdgeSkip::NoPort => DropReason::no_port,
            EdgeSkip::UnknownDirection => DropReason::unknown_direction,
            EdgeSkip::DirectionNotLearned => DropReason::direction_not_learned,
            EdgeSkip::NoIdentity => DropReason::no_identity,
        }
    }
}

/// Label set `{source}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

/// Label set `{reason}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: DropReason,
}

/// Label set `{reason}` for lines that were skipped on purpose (not flows).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabel {
    pub reason: &'static str,
}

/// Label set `{source, cause}` of lost events (Hubble's `LostEventSource`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LostLabel {
    pub source: &'static str,
    pub cause: &'static str,
}

/// Label set `{reason}` of entries the shipper forgot: `idle` (not seen for
/// `--idle-expiry`) or `pressure` (a table near its capacity shed its least recently seen
/// shipped entries).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExpiryLabel {
    pub reason: &'static str,
}

/// Label set `{reason}` of flush intervals the shipper did not drain its tables, waiting
/// for the leader's acks: `unacked_batches` (`--max-unacked`) or `unacked_bytes`
/// (`--max-unacked-bytes`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabel {
    pub reason: &'static str,
}

/// Label set `{event}` of log-file events (ztunnel source).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FileEventLabel {
    pub event: &'static str,
}

/// Every instrument of the agent.
#[derive(Debug, Default)]
pub struct AgentMetrics {
    pub flows_received: Family<SourceLabel, Counter>,
    pub flows_dropped: Family<ReasonLabel, Counter>,
    pub lines_skipped: Family<SkipLabel, Counter>,
    pub lost_events: Family<LostLabel, Counter>,
    pub scraper_lag: LagHistogram,
    pub edges: Gauge,
    /// Policy-denied edges held (protect-mode observations).
    pub denied_edges: Gauge,
    /// Audit / dry-run denied edges held (monitor-mode observations).
    pub audit_edges: Gauge,
    pub source_connected: Gauge,
    pub source_reconnects: Counter,
    pub file_events: Family<FileEventLabel, Counter>,
    /// Batches sent to the leader.
    pub deltas_sent: Counter,
    /// Bytes of the batches sent to the leader (encoded messages).
    pub delta_bytes_sent: Counter,
    /// Entries sent to the leader (snapshots and deltas).
    pub delta_edges_sent: Counter,
    /// Full snapshots sent (one per new stream).
    pub ship_snapshots: Counter,
    /// Acks received from the leader.
    pub ship_acks: Counter,
    /// Batches the leader rejected (the stream then starts over).
    pub ship_rejects: Counter,
    /// Entries not shipped because one alone exceeds the message or table limits.
    pub ship_oversized: Counter,
    /// Entries forgotten after the leader acked them, by reason.
    pub edges_expired: Family<ExpiryLabel, Counter>,
    /// Batches sent and not yet acked.
    pub ship_unacked: Gauge,
    /// Encoded bytes of the batches sent and not yet acked.
    pub ship_unacked_bytes: Gauge,
    /// Flush intervals not drained while waiting for acks, by reason.
    pub ship_held: Family<HeldLabel, Counter>,
    /// 1 while a stream to the leader is up.
    pub leader_connected: Gauge,
    /// Streams to the leader that ended or failed.
    pub leader_reconnects: Counter,
}

impl AgentMetrics {
    /// Registers every instrument under the `network_enforcer` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("network_enforcer");
        r.register(
            "agent_flows_received",
            "Flows read from the source",
            self.flows_received.clone(),
        );
        r.register(
            "agent_flows_dropped",
            "Flows read but not recorded as edges, by reason",
            self.flows_dropped.clone(),
        );
        r.register(
            "agent_lines_skipped",
            "Source lines that carry no flow (other log targets, status messages)",
            self.lines_skipped.clone(),
        );
        r.register(
            "agent_source_lost_events",
            "Flows the data plane reports it lost before the agent could read them",
            self.lost_events.clone(),
        );
        r.register_with_unit(
            "agent_scraper_lag",
            "Time from the data plane observing a flow to the agent reading it",
            Unit::Seconds,
            self.scraper_lag.clone(),
        );
        r.register(
            "agent_edges",
            "Edges held in the FlowTable",
            self.edges.clone(),
        );
        r.register(
            "agent_denied_edges",
            "Edges of policy-denied traffic held for the leader (protect-mode observations)",
            self.denied_edges.clone(),
        );
        r.register(
            "agent_audit_edges",
            "Edges of traffic a dry-run or audit policy would deny, held for the leader",
            self.audit_edges.clone(),
        );
        r.register(
            "agent_source_connected",
            "1 while the source stream is up",
            self.source_connected.clone(),
        );
        r.register(
            "agent_source_reconnects",
            "Reconnects to the source",
            self.source_reconnects.clone(),
        );
        for (name, help, counter) in [
            (
                "agent_deltas_sent",
                "Batches sent to the leader",
                &self.deltas_sent,
            ),
            (
                "agent_delta_bytes_sent",
                "Bytes of the batches sent to the leader",
                &self.delta_bytes_sent,
            ),
            (
                "agent_delta_edges_sent",
                "Edges sent to the leader, snapshots included",
                &self.delta_edges_sent,
            ),
            (
                "agent_ship_snapshots",
                "Full snapshots sent to the leader (one per new stream)",
                &self.ship_snapshots,
            ),
            (
                "agent_ship_acks",
                "Acks received from the leader",
                &self.ship_acks,
            ),
            (
                "agent_ship_rejects",
                "Batches the leader rejected",
                &self.ship_rejects,
            ),
            (
                "agent_leader_reconnects",
                "Streams to the leader that ended or failed",
                &self.leader_reconnects,
            ),
            (
                "agent_ship_oversized_edges",
                "Edges not shipped because one alone exceeds the message or table limits",
                &self.ship_oversized,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        r.register(
            "agent_edges_expired",
            "Entries forgotten once the leader had them: idle for --idle-expiry, or shed under \
             pressure (a table near its capacity)",
            self.edges_expired.clone(),
        );
        r.register(
            "agent_source_file_events",
            "Log-file events of the ztunnel tailer (opened, rotated, truncated, ...)",
            self.file_events.clone(),
        );
        r.register(
            "agent_ship_unacked_batches",
            "Batches sent to the leader and not yet acknowledged",
            self.ship_unacked.clone(),
        );
        r.register(
            "agent_ship_held_intervals",
            "Flush intervals the shipper did not drain its tables, waiting for the leader's acks \
             (the tables keep aggregating), by reason",
            self.ship_held.clone(),
        );
        r.register(
            "agent_ship_unacked_bytes",
            "Encoded bytes of the batches sent to the leader and not yet acknowledged",
            self.ship_unacked_bytes.clone(),
        );
        r.register(
            "agent_leader_connected",
            "1 while a stream to the leader is up",
            self.leader_connected.clone(),
        );
    }

    /// Counts one dropped flow.
    pub fn dropped(&self, reason: DropReason) {
        self.drop_n(reason, 1);
    }

    /// Counts `n` dropped flows.
    pub fn drop_n(&self, reason: DropReason, n: u64) {
        if n > 0 {
            self.flows_dropped
                .get_or_create(&ReasonLabel { reason })
                .inc_by(n);
        }
    }

    /// Counts `n` skipped lines.
    pub fn skip(&self, reason: SkipReason, n: u64) {
        if n > 0 {
            self.lines_skipped
                .get_or_create(&SkipLabel {
                    reason: reason.as_str(),
                })
                .inc_by(n);
        }
    }

    /// Counts `n` log-file events.
    pub fn file_event(&self, event: &'static str, n: u64) {
        if n > 0 {
            self.file_events
                .get_or_create(&FileEventLabel { event })
                .inc_by(n);
        }
    }

    /// Renders every instrument in the Prometheus text format.
    pub fn encode(&self) -> String {
        ne_telemetry::http::Exposition::encode(self)
    }
}

impl ne_telemetry::http::Exposition for AgentMetrics {
    fn encode(&self) -> String {
        ne_telemetry::http::prometheus_text(|registry| self.register(registry))
    }
}

/// Upper bounds (seconds) of the exported lag buckets.
const LAG_BOUNDS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];
/// Highest lag tracked exactly (one hour, in microseconds); larger values are clamped.
const LAG_MAX_US: u64 = 3_600_000_000;

/// An HDR histogram of lags in microseconds, shareable and exportable.
#[derive(Clone, Debug)]
pub struct LagHistogram {
    inner: std::sync::Arc<LagInner>,
}

#[derive(Debug)]
struct LagInner {
    hdr: Mutex<Hdr<u64>>,
    /// Sum of recorded lags in microseconds (the HDR histogram keeps no exact sum).
    sum_us: AtomicU64,
}

impl Default for LagHistogram {
    fn default() -> Self {
        let hdr = Hdr::new_with_bounds(1, LAG_MAX_US, 3)
            .expect("1 µs to 1 h at 3 digits are valid bounds");
        LagHistogram {
            inner: std::sync::Arc::new(LagInner {
                hdr: Mutex::new(hdr),
                sum_us: AtomicU64::new(0),
            }),
        }
    }
}

impl LagHistogram {
    /// Records one lag. Negative lags (clock skew between nodes) count as zero.
    pub fn record_nanos(&self, lag_ns: i64) {
        let us = u64::try_from(lag_ns / 1_000)
            .unwrap_or(0)
            .clamp(1, LAG_MAX_US);
        self.inner.sum_us.fetch_add(us, Ordering::Relaxed);
        if let Ok(mut h) = self.inner.hdr.lock() {
            h.saturating_record(us);
        }
    }

    /// Number of recorded lags.
    pub fn count(&self) -> u64 {
        self.inner.hdr.lock().map(|h| h.len()).unwrap_or(0)
    }

    /// The lag at quantile `q` (0..=1), in seconds.
    pub fn quantile_seconds(&self, q: f64) -> f64 {
        self.inner
            .hdr
            .lock()
            .map(|h| h.value_at_quantile(q) as f64 / 1e6)
            .unwrap_or(0.0)
    }

    /// Per-bucket (non-cumulative) counts for [`LAG_BOUNDS`] and `+Inf`.
    fn buckets(&self) -> (u64, Vec<(f64, u64)>) {
        let Ok(h) = self.inner.hdr.lock() else {
            return (0, Vec::new());
        };
        let mut out = Vec::with_capacity(LAG_BOUNDS.len() + 1);
        let mut below = 0u64;
        for bound in LAG_BOUNDS {
            let upto = h.count_between(0, (bound * 1e6) as u64);
            out.push((bound, upto.saturating_sub(below)));
            below = upto;
        }
        out.push((f64::INFINITY, h.len().saturating_sub(below)));
        (h.len(), out)
    }
}

impl TypedMetric for LagHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LagHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (count, buckets) = self.buckets();
        let sum = self.inner.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        encoder
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_carries_the_contract_names() {
        let m = AgentMetrics::default();
        m.flows_received
            .get_or_create(&SourceLabel { source: "file" })
            .inc_by(3);
        m.dropped(DropReason::reply);
        m.dropped(DropReason::reply);
        m.lost_events
            .get_or_create(&LostLabel {
                source: "hubble",
                cause: "hubble_ring_buffer",
            })
            .inc_by(7);
        m.edges.set(4);
        m.denied_edges.set(2);
        m.audit_edges.set(1);
        m.dropped(DropReason::audits_full);
        m.ship_oversized.inc_by(2);
        m.file_event("rotated", 1);
        let text = m.encode();
        for line in [
            "network_enforcer_agent_flows_received_total{source=\"file\"} 3",
            "network_enforcer_agent_flows_dropped_total{reason=\"reply\"} 2",
            "network_enforcer_agent_source_lost_events_total{source=\"hubble\",cause=\"hubble_ring_buffer\"} 7",
            "network_enforcer_agent_edges 4",
            "network_enforcer_agent_denied_edges 2",
            "network_enforcer_agent_audit_edges 1",
            "network_enforcer_agent_flows_dropped_total{reason=\"audits_full\"} 1",
            "network_enforcer_agent_ship_oversized_edges_total 2",
            "network_enforcer_agent_source_file_events_total{event=\"rotated\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn lag_histogram_exports_cumulative_buckets_in_seconds() {
        let lag = LagHistogram::default();
        for ms in [2, 3, 40, 700, 700, 90_000] {
            lag.record_nanos(ms * 1_000_000);
        }
        lag.record_nanos(-5_000_000); // clock skew: counted as (almost) zero
        let m = AgentMetrics {
            scraper_lag: lag.clone(),
            ..AgentMetrics::default()
        };
        let text = m.encode();
        let bucket = |le: &str| -> u64 {
            let key = format!("network_enforcer_agent_scraper_lag_seconds_bucket{{le=\"{le}\"}} ");
            let line = text
                .lines()
                .find(|l| l.starts_with(&key))
                .unwrap_or_else(|| panic!("no {key} in\n{text}"));
            line[key.len()..].parse().unwrap()
        };
        assert_eq!(bucket("0.005"), 3, "2 ms, 3 ms and the skewed one");
        assert_eq!(bucket("0.05"), 4);
        assert_eq!(bucket("1.0"), 6);
        assert_eq!(bucket("60.0"), 6);
        assert_eq!(bucket("+Inf"), 7);
        assert!(text.contains("network_enforcer_agent_scraper_lag_seconds_count 7"));
        assert_eq!(lag.count(), 7);
        assert!((lag.quantile_seconds(0.5) - 0.04).abs() < 0.001);
        // The same exposition, exported over OTLP: a histogram in seconds.
        let request = ne_telemetry::otlp::to_request(&text, &[], 0, 1);
        let metrics = &request.resource_metrics[0].scope_metrics[0].metrics;
        let exported = metrics
            .iter()
            .find(|m| m.name == "network_enforcer_agent_scraper_lag_seconds")
            .expect("the lag histogram is exported");
        assert_eq!(exported.unit, "s");
        let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Histogram(h)) =
            &exported.data
        else {
            panic!("not a histogram: {exported:?}")
        };
        assert_eq!(h.data_points[0].count, 7);
        assert_eq!(h.data_points[0].bucket_counts.iter().sum::<u64>(), 7);
    }
}
