//! Where every source delivers: decode results in, FlowTable edges and metrics out.
//!
//! The hot path: one flow is one counter increment, one lag record, one edge derivation
//! and one `FlowTable::record` — no allocation for a known edge, no lock held across
//! anything but a map shard, no log line. ztunnel lines skip the decoded record
//! altogether ([`FlowSink::record_ztunnel`]): the table reads the edge from the line.
//!
//! Denials never reach the learned table: policy denials go to a denials table
//! ([`FlowSink::with_denials`]) and audit / dry-run denials to an audits table
//! ([`FlowSink::with_audits`]), both bounded; the shipper sends all three to the leader.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use ne_dataplanes::ztunnel::ZtunnelRecorded;
use ne_dataplanes::{DecodeError, Decoded, SkipReason};
use ne_flow::edge::{EdgeSkip, Provider};
use ne_flow::flow::{FlowRecord, Timestamp, Verdict};
use ne_flow::table::{FlowTable, RecordOutcome};
use prometheus_client::metrics::counter::Counter;

use crate::metrics::{AgentMetrics, DropReason, SourceLabel};

/// A source's handle on the agent's FlowTable and metrics.
#[derive(Clone, Debug)]
pub struct FlowSink {
    table: Arc<FlowTable>,
    /// Policy denials, kept apart from learning as protect-mode observations.
    denials: Option<Arc<FlowTable>>,
    /// Audit / dry-run denials, kept apart from learning as monitor-mode observations.
    audits: Option<Arc<FlowTable>>,
    metrics: Arc<AgentMetrics>,
    provider: Provider,
    received: Counter,
}

impl FlowSink {
    /// A sink for flows of `provider` read by source `source` (the metric label).
    pub fn new(
        table: Arc<FlowTable>,
        metrics: Arc<AgentMetrics>,
        provider: Provider,
        source: &'static str,
    ) -> Self {
        let received = metrics
            .flows_received
            .get_or_create(&SourceLabel { source })
            .clone();
        FlowSink {
            table,
            denials: None,
            audits: None,
            metrics,
            provider,
            received,
        }
    }

    /// Also keeps policy denials (as edges of what was denied) in `denials`, for the
    /// violations pipeline.
    pub fn with_denials(mut self, denials: Arc<FlowTable>) -> Self {
        self.denials = Some(denials);
        self
    }

    /// The denials kept, if any.
    pub fn denials(&self) -> Option<&FlowTable> {
        self.denials.as_deref()
    }

    /// Also keeps audit / dry-run denials (Hubble `AUDIT`, ztunnel `dry-run:` deny lines;
    /// edges of what would have been denied, port 0 when the line names none) in
    /// `audits`, for the violations pipeline.
    pub fn with_audits(mut self, audits: Arc<FlowTable>) -> Self {
        self.audits = Some(audits);
        self
    }

    /// The audit denials kept, if any.
    pub fn audits(&self) -> Option<&FlowTable> {
        self.audits.as_deref()
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> &AgentMetrics {
        &self.metrics
    }

    /// The FlowTable flows are recorded in.
    pub fn table(&self) -> &FlowTable {
        &self.table
    }

    /// The provider whose rules flows are learned by.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// Counts one flow received at `time` (and its scraper lag).
    fn received(&self, time: Option<Timestamp>) {
        self.received.inc();
        if let Some(t) = time {
            self.metrics
                .scraper_lag
                .record_nanos(now_nanos().saturating_sub(t.0));
        }
    }

    /// Counts what the table did with a flow, or why it taught no edge.
    fn outcome(&self, outcome: Result<RecordOutcome, EdgeSkip>) {
        match outcome {
            Ok(RecordOutcome::Dropped) => self.metrics.dropped(DropReason::table_full),
            Ok(RecordOutcome::Inserted | RecordOutcome::Updated) => {}
            Err(skip) => self.metrics.dropped(skip.into()),
        }
    }

    /// Records one flow: a forwarded one in the table, a denial in its own table (it
    /// still counts as a flow that taught no edge).
    pub fn record(&self, flow: &FlowRecord) {
        self.received(flow.time);
        match flow.verdict {
            Verdict::PolicyDenied => Self::observe(
                self.denials.as_deref(),
                ne_flow::edge::derive_denial(flow),
                flow,
                || self.metrics.dropped(DropReason::denials_full),
            ),
            Verdict::AuditDenied => Self::observe(
                self.audits.as_deref(),
                ne_flow::edge::derive_audit(flow),
                flow,
                || self.metrics.dropped(DropReason::audits_full),
            ),
            Verdict::Forwarded | Verdict::Dropped | Verdict::Error => {}
        }
        self.outcome(self.table.record_flow(flow, self.provider));
    }

    /// Records a denial's edge in `table`, if kept; `full` counts one the table dropped.
    fn observe(
        table: Option<&FlowTable>,
        edge: Result<ne_flow::edge::Edge, EdgeSkip>,
        flow: &FlowRecord,
        full: impl FnOnce(),
    ) {
        if let Some(table) = table
            && let Ok(edge) = edge
            && table.record(&edge, flow.time.unwrap_or_default(), flow.connections)
                == RecordOutcome::Dropped
        {
            full();
        }
    }

    /// Accounts for one flow a fast path has already recorded in [`FlowSink::table`]
    /// (or skipped): the received count, the scraper lag, the drop reason.
    pub fn recorded(&self, time: Option<Timestamp>, outcome: Result<RecordOutcome, EdgeSkip>) {
        self.received(time);
        self.outcome(outcome);
    }

    /// Accounts for one decode result: records a flow, counts a skip or an error.
    pub fn accept(&self, result: Result<Decoded, DecodeError>) {
        match result {
            Ok(Decoded::Record(flow)) => self.record(&flow),
            Ok(Decoded::Skip(reason)) => self.metrics.skip(reason, 1),
            Ok(Decoded::Partial) => {}
            Err(error) => {
                self.metrics.dropped(DropReason::decode_error);
                tracing::debug!(%error, "undecodable flow");
            }
        }
    }

    /// Decodes and records one ztunnel payload (after CRI framing) through the fast path,
    /// [`ne_dataplanes::ztunnel::record_line`]: the same table entries and metrics as
    /// [`FlowSink::accept`] on `decode_line`'s result.
    pub fn record_ztunnel(&self, payload: &[u8]) {
        self.accept_ztunnel(ne_dataplanes::ztunnel::record_line(
            &self.table,
            payload,
            self.provider,
        ));
    }

    /// Accounts for one fast-path result as [`FlowSink::accept`] does for a decode
    /// result: a flow (already in the table) is received, its lag recorded and a skip or
    /// a full table counted; a policy rejection is recorded here (with its denial).
    pub fn accept_ztunnel(&self, result: Result<ZtunnelRecorded, DecodeError>) {
        match result {
            Ok(ZtunnelRecorded::Flow { time, outcome }) => {
                self.received(time);
                self.outcome(outcome);
            }
            Ok(ZtunnelRecorded::Denial(flow)) => self.record(&flow),
            Ok(ZtunnelRecorded::Skip(reason)) => self.metrics.skip(reason, 1),
            Err(error) => {
                self.metrics.dropped(DropReason::decode_error);
                tracing::debug!(%error, "undecodable flow");
            }
        }
    }

    /// Counts CRI partial lines that never completed.
    pub fn partial_lines_lost(&self, n: u64, reason: SkipReason) {
        self.metrics.drop_n(DropReason::partial_line, n);
        self.metrics.skip(reason, n);
    }
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use ne_dataplanes::{Format, LineDecoder};
    use ne_flow::table::EdgeSnapshot;

    use super::*;

    fn sink() -> FlowSink {
        FlowSink::new(
            Arc::new(FlowTable::new(1000)),
            Arc::new(AgentMetrics::default()),
            Provider::Istio,
            "ztunnel",
        )
        .with_denials(Arc::new(FlowTable::new(1000)))
        .with_audits(Arc::new(FlowTable::new(1000)))
    }

    fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
        let mut s = table.snapshot();
        s.sort_by_key(EdgeSnapshot::key);
        s
    }

    /// The metrics, sorted (label sets come in hash order), without the lag histogram's
    /// sum and buckets (they depend on when each line was read).
    fn counters(metrics: &AgentMetrics) -> Vec<String> {
        let mut lines: Vec<String> = metrics
            .encode()
            .lines()
            .filter(|l| !l.starts_with("network_enforcer_agent_scraper_lag"))
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    /// The fast path's accounting is `accept`'s: the same tables (edges, denials, audits),
    /// received flows, drops and skips by reason, and lag records, over the bundled
    /// example (CRI-framed, partial lines, a policy rejection, an `xds` line), the real
    /// captures and a few broken lines.
    #[test]
    fn record_ztunnel_accounts_like_accept() {
        let read = |path: &str| {
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
                .unwrap()
        };
        let mut input = read("../examples/flows/ztunnel.log");
        input += &read("../testdata/real/ztunnel-access.log");
        input += &read("../testdata/real/ztunnel-access-json.log");
        input += "\n   \ninfo access connection complete dst.addr=1.2.3.4:5\nnot a log line\n";
        let (slow, fast) = (sink(), sink());
        let (mut slow_lines, mut fast_lines) = (
            LineDecoder::new(Format::Ztunnel),
            LineDecoder::new(Format::Ztunnel),
        );
        for line in input.lines() {
            slow.accept(slow_lines.feed(line.as_bytes()));
            if let Some(payload) = fast_lines.payload(line.as_bytes()) {
                fast.record_ztunnel(&payload);
            }
        }
        assert_eq!(sorted(fast.table()), sorted(slow.table()));
        assert_eq!(
            sorted(fast.denials().unwrap()),
            sorted(slow.denials().unwrap())
        );
        assert_eq!(
            sorted(fast.audits().unwrap()),
            sorted(slow.audits().unwrap())
        );
        assert!(!fast.table().is_empty() && !fast.denials().unwrap().is_empty());
        // The dry-run denials of both real captures: two pods, one peer each, port 0.
        let audits = sorted(fast.audits().unwrap());
        let audit_edges: Vec<_> = audits
            .iter()
            .map(|s| (s.edge.subject.id.to_string(), s.edge.port, s.count))
            .collect();
        assert_eq!(audit_edges.len(), 2, "{audit_edges:?}");
        assert!(audits.iter().all(|s| s.edge.port == 0 && s.count == 2));
        assert!(fast.table().snapshot().iter().all(|s| s.edge.port != 0));
        assert_eq!(counters(fast.metrics()), counters(slow.metrics()));
        assert_eq!(
            fast.metrics().scraper_lag.count(),
            slow.metrics().scraper_lag.count()
        );
        let text = counters(fast.metrics()).join("\n");
        for want in [
            "reason=\"decode_error\"",
            "reason=\"direction_not_learned\"",
            "reason=\"not_forwarded\"",
            "reason=\"ztunnel_non_access\"",
            "reason=\"empty_line\"",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }
}
