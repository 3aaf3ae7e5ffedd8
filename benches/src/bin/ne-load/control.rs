//! How the harness talks to its child processes: one command per line on the child's
//! stdin (`sample`, `mark`, `stop`), one JSON [`Report`] per line on its stdout.

use std::io::{BufRead, Write};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// A command from the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Report the counters now.
    Sample,
    /// The measurement window starts: latencies recorded from now on.
    Mark,
    /// Report everything, latencies included, and exit.
    Stop,
}

/// Reads commands from stdin on a thread of its own; stdin closing means `Stop`.
pub fn commands() -> mpsc::Receiver<Command> {
    let (tx, rx) = mpsc::channel(8);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let command = match line.as_deref().map(str::trim) {
                Ok("sample") => Command::Sample,
                Ok("mark") => Command::Mark,
                Ok("stop") | Err(_) => break,
                Ok(_) => continue,
            };
            if tx.blocking_send(command).is_err() {
                return;
            }
        }
        let _ = tx.blocking_send(Command::Stop);
    });
    rx
}

/// Writes one report line on stdout.
pub fn emit(report: &Report) {
    let line = serde_json::to_string(report).unwrap_or_else(|_| "{}".to_owned());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// What a child reports. Counters are totals since it started; latencies are only in the
/// final report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// The ingest port (leader, first report only).
    pub port: Option<u16>,
    /// Flows read from Hubble (agents, central).
    pub flows: u64,
    /// Flows not recorded because the table was full.
    pub table_full: u64,
    /// Entries shed under pressure (a table near its capacity), agents only.
    pub shed: u64,
    /// Flush intervals the shipper held back, waiting for acks (agents).
    pub held: u64,
    /// Agent streams open (leader only).
    pub streams: u64,
    /// Batches the leader paced (an agent over its byte budget), leader only.
    pub paced: u64,
    /// Batches the leader rejected (the agent resends a snapshot), leader only.
    pub rejected: u64,
    /// Bytes of the batches sent to the leader (agents) or received (leader).
    pub batch_bytes: u64,
    /// Entries sent (agents) or received (leader), snapshots included.
    pub batch_edges: u64,
    /// Batches sent (agents) or received (leader).
    pub batches: u64,
    /// Entries in the FlowTable (agents, central) or the merged index (leader).
    pub edges: u64,
    /// Flush intervals rendered (leader, central).
    pub flushes: u64,
    /// Proposals whose spec changed at a flush (an API write each), since the mark.
    pub spec_writes: u64,
    /// Proposals whose status (evidence, counts) changed at a flush, since the mark.
    pub status_writes: u64,
    /// The most spec writes one flush made, since the mark.
    pub max_spec_writes: u64,
    /// Policies whose violation records changed at a flush (an API write each), since the
    /// mark.
    pub violation_writes: u64,
    /// Proposals at the last flush.
    pub proposals: u64,
    /// Flow (stamped by the Hubble server) → FlowTable.
    pub flow_to_table: Option<Latency>,
    /// Flow → first seen in the leader's merged index (new edges only).
    pub flow_to_index: Option<Latency>,
    /// Flow → the violation record the planner writes for it (records new since the mark,
    /// with the proposals promoted to monitor-mode policies at the mark).
    pub flow_to_violation: Option<Latency>,
    /// One flush interval's work (leader, central): reading the merged edges, learning,
    /// detecting and planning.
    pub round: Option<Latency>,
}

/// A latency summary in milliseconds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    /// From an HDR histogram of microseconds.
    pub fn of_micros(h: &Histogram<u64>) -> Self {
        Latency {
            count: h.len(),
            p50_ms: h.value_at_quantile(0.5) as f64 / 1e3,
            p99_ms: h.value_at_quantile(0.99) as f64 / 1e3,
            max_ms: h.max() as f64 / 1e3,
        }
    }
}

/// An HDR histogram of 1 µs to 1 h at 3 significant digits.
pub fn micros_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}
