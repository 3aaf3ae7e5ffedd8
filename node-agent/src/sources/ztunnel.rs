//! `--source ztunnel`: Istio ambient's access logs, read from ztunnel's container log
//! files on this node (`<root>/<ns>_<ztunnel pod>_<uid>/istio-proxy/N.log`) with the
//! polling [`crate::tail::Tailer`], unframed per file lineage with a CRI-aware
//! [`LineDecoder`] and recorded through the FlowTable's ztunnel fast path
//! ([`FlowSink::record_ztunnel`]).
//!
//! Needs on the node: a read-only hostPath mount of `/var/log/pods` (root, or a group that
//! can read the kubelet's log files). Learning starts now: files already there are read
//! from their end.

use std::collections::HashMap;
use std::time::Duration;

use ne_dataplanes::{Format, LineDecoder, SkipReason};

use super::SourceState;
use crate::metrics::{AgentMetrics, DropReason};
use crate::sink::FlowSink;
use crate::tail::{PollStats, StreamId, TailConfig, Tailer};

/// Tails until shutdown. Blocking: run it on a blocking thread.
pub fn run(config: TailConfig, poll: Duration, sink: &FlowSink, state: &SourceState) {
    let mut tailer = Tailer::new(config);
    let mut decoders: HashMap<StreamId, LineDecoder> = HashMap::new();
    let mut last_error = String::new();
    while !state.stopping() {
        let stats = tailer.poll(&mut |id, line| {
            let decoder = decoders
                .entry(id)
                .or_insert_with(|| LineDecoder::new(Format::Ztunnel));
            // CRI framing (and `P` pieces) as `LineDecoder::feed`; each complete payload
            // goes through the table's fast path.
            if let Some(payload) = decoder.payload(line) {
                sink.record_ztunnel(&payload);
            }
            sink.partial_lines_lost(decoder.take_abandoned(), SkipReason::CriPartialAbandoned);
        });
        for (id, _) in tailer.take_ended() {
            if let Some(mut decoder) = decoders.remove(&id) {
                sink.partial_lines_lost(decoder.finish(), SkipReason::CriPartialAtEof);
            }
        }
        account(sink.metrics(), &stats);
        match tailer.take_last_error() {
            Some((path, error)) => {
                let message = format!("{}: {error}", path.display());
                if message != last_error {
                    tracing::warn!(error = %message, "cannot read ztunnel logs; retrying");
                    last_error = message;
                }
                state.set_ready(false);
            }
            None => {
                last_error.clear();
                state.set_ready(true);
            }
        }
        std::thread::park_timeout(poll);
    }
    for (_, mut decoder) in decoders {
        sink.partial_lines_lost(decoder.finish(), SkipReason::CriPartialAtEof);
    }
}

fn account(metrics: &AgentMetrics, stats: &PollStats) {
    metrics.file_event("opened", stats.files_opened);
    metrics.file_event("rotated", stats.rotations);
    metrics.file_event("truncated", stats.truncations);
    metrics.file_event("ended", stats.streams_ended);
    metrics.file_event("read_error", stats.read_errors);
    metrics.drop_n(DropReason::overlong_line, stats.overlong_dropped);
    metrics.drop_n(DropReason::partial_line, stats.unterminated_dropped);
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use ne_flow::edge::Provider;
    use ne_flow::table::FlowTable;

    use super::*;
    use crate::metrics::SourceLabel;
    use crate::sources::wait_until;

    #[test]
    fn learns_what_is_written_after_the_start_across_a_rotation() {
        let root = std::env::temp_dir().join(format!("ne-agent-ztunnel-{}", std::process::id()));
        let dir = root.join("istio-system_ztunnel-x7k2m_0d6f/istio-proxy");
        std::fs::create_dir_all(&dir).unwrap();
        let example = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/ztunnel.log"),
        )
        .unwrap();
        let lines: Vec<&str> = example.lines().collect();
        let (before, after) = lines.split_at(10);
        // Lines already in the file at the start are history: not learned.
        std::fs::write(
            dir.join("0.log"),
            before.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .unwrap();

        let metrics = Arc::new(AgentMetrics::default());
        let table = Arc::new(FlowTable::new(1000));
        let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Istio, "ztunnel");
        let state = SourceState::default();
        let config = TailConfig {
            root: root.clone(),
            ..TailConfig::default()
        };
        let received = || {
            metrics
                .flows_received
                .get_or_create(&SourceLabel { source: "ztunnel" })
                .get()
        };
        std::thread::scope(|s| {
            let worker = s.spawn(|| run(config, Duration::from_millis(2), &sink, &state));
            wait_until("the first poll", || {
                state
                    .ready_flag()
                    .load(std::sync::atomic::Ordering::Relaxed)
            });
            let (first, second) = after.split_at(after.len() / 2);
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("0.log"))
                .unwrap();
            for l in first {
                writeln!(f, "{l}").unwrap();
            }
            drop(f);
            // kubelet rotation: rename, then the runtime opens a new 0.log.
            std::fs::rename(dir.join("0.log"), dir.join("0.log.20251201-100500")).unwrap();
            std::fs::write(
                dir.join("0.log"),
                second.iter().map(|l| format!("{l}\n")).collect::<String>(),
            )
            .unwrap();
            let want = decode_count(after);
            wait_until("every record written after the start", || {
                received() == want
            });
            state.shut_down();
            worker.join().unwrap();
        });
        // The same lines through the offline pipeline give the same edges.
        let offline = FlowTable::new(1000);
        let text: String = after.iter().map(|l| format!("{l}\n")).collect();
        ne_dataplanes::decode_lines(Format::Ztunnel, text.as_bytes(), |r| {
            let _ = offline.record_flow(&r, Provider::Istio);
        });
        let key = |v: Vec<ne_flow::table::EdgeSnapshot>| {
            let mut v: Vec<_> = v.into_iter().map(|s| (s.key(), s.count)).collect();
            v.sort();
            v
        };
        assert_eq!(key(table.snapshot()), key(offline.snapshot()));
        assert!(!table.is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn decode_count(lines: &[&str]) -> u64 {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        ne_dataplanes::decode_lines(Format::Ztunnel, text.as_bytes(), |_| {}).records
    }
}
