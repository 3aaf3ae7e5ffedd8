//! `--source file`: replays a capture in any format `ne-leader learn` reads, for demos
//! and tests; with `--follow`, keeps reading as the file grows (and starts over when it is
//! truncated or replaced), like `tail -F`.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use ne_dataplanes::{Format, LineDecoder, SkipReason};

use super::SourceState;
use crate::sink::FlowSink;

/// What the file source needs.
#[derive(Clone, Debug)]
pub struct FileSource<'a> {
    pub path: &'a Path,
    pub format: Format,
    pub follow: bool,
    /// How long to wait for more data when following.
    pub poll: Duration,
}

/// Detects a file's format from its first lines (`auto`), or parses a format name.
pub fn format_of(path: &Path, name: &str) -> anyhow::Result<Format> {
    if name != "auto" {
        return name.parse().map_err(anyhow::Error::from);
    }
    let mut head = Vec::new();
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    for line in BufReader::new(file)
        .split(b'\n')
        .take(Format::DETECT_LINES * 4)
    {
        head.extend(line.with_context(|| format!("cannot read {}", path.display()))?);
        head.push(b'\n');
    }
    Format::detect_input(&head).with_context(|| format!("{}: give --file-format", path.display()))
}

/// Reads the file to its end (and on, when following) into `sink`. Blocking: run it on
/// a blocking thread.
pub fn run(source: &FileSource<'_>, sink: &FlowSink, state: &SourceState) -> anyhow::Result<()> {
    let open = || {
        File::open(source.path).with_context(|| format!("cannot open {}", source.path.display()))
    };
    let mut reader = BufReader::new(open()?);
    let mut inode = reader.get_ref().metadata()?.ino();
    let mut decoder = LineDecoder::new(source.format);
    let mut line = Vec::with_capacity(4096);
    let mut pos = 0u64;
    state.set_ready(true);
    while !state.stopping() {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n > 0 && line.last() == Some(&b'\n') {
            pos += n as u64;
            line.pop();
            sink.accept(decoder.feed(&line));
            sink.partial_lines_lost(decoder.take_abandoned(), SkipReason::CriPartialAbandoned);
            continue;
        }
        // At the end: a partial line without '\n' waits for its rest when following.
        if !source.follow {
            if n > 0 {
                sink.accept(decoder.feed(&line));
            }
            break;
        }
        reader.seek(SeekFrom::Start(pos))?;
        std::thread::park_timeout(source.poll);
        match std::fs::metadata(source.path) {
            Ok(meta) if meta.ino() != inode || meta.len() < pos => {
                // Replaced or truncated: start over on the current file.
                reader = BufReader::new(open()?);
                inode = reader.get_ref().metadata()?.ino();
                pos = 0;
                tracing::info!(path = %source.path.display(), "capture file replaced or truncated; reading it from the start");
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, path = %source.path.display(), "capture file not there; waiting")
            }
        }
    }
    sink.partial_lines_lost(decoder.finish(), SkipReason::CriPartialAtEof);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use ne_flow::table::FlowTable;

    use super::*;
    use crate::metrics::{AgentMetrics, DropReason, ReasonLabel, SourceLabel};
    use crate::sources::wait_until;

    fn example() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/hubble.jsonl")
    }

    fn sink() -> (FlowSink, Arc<AgentMetrics>) {
        let metrics = Arc::new(AgentMetrics::default());
        let table = Arc::new(FlowTable::new(1000));
        (
            FlowSink::new(
                table,
                metrics.clone(),
                ne_flow::edge::Provider::Cilium,
                "file",
            ),
            metrics,
        )
    }

    fn received(m: &AgentMetrics) -> u64 {
        m.flows_received
            .get_or_create(&SourceLabel { source: "file" })
            .get()
    }

    fn dropped(m: &AgentMetrics, reason: DropReason) -> u64 {
        m.flows_dropped.get_or_create(&ReasonLabel { reason }).get()
    }

    #[test]
    fn replays_a_capture_into_the_table() {
        let (sink, metrics) = sink();
        let sink = sink.with_denials(Arc::new(FlowTable::new(10)));
        let path = example();
        let format = format_of(&path, "auto").unwrap();
        let source = FileSource {
            path: &path,
            format,
            follow: false,
            poll: Duration::from_millis(10),
        };
        run(&source, &sink, &SourceState::default()).unwrap();
        // The example: 152 records, 53 replies, 1 policy drop; the rest are 24 edges
        // (ne-leader learn's summary of the same file agrees).
        assert_eq!(received(&metrics), 152);
        assert_eq!(dropped(&metrics, DropReason::reply), 53);
        assert_eq!(dropped(&metrics, DropReason::not_forwarded), 1);
        assert_eq!(sink.table().len(), 24);
        // The one policy drop (report → postgres:5432) is kept as an observation.
        let denials = sink.denials().unwrap().snapshot();
        assert_eq!(denials.len(), 1);
        let d = &denials[0].edge;
        assert_eq!(
            (d.direction, d.port),
            (ne_flow::flow::Direction::Ingress, 5432)
        );
        assert_eq!(d.subject.id.to_string(), "data/StatefulSet/postgres");
    }

    /// Replays a real capture with every table kept; returns the sink.
    fn replay_real(name: &str) -> (FlowSink, Arc<AgentMetrics>) {
        let (sink, metrics) = sink();
        let sink = sink
            .with_denials(Arc::new(FlowTable::new(100)))
            .with_audits(Arc::new(FlowTable::new(100)));
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/real")
            .join(name);
        let format = format_of(&path, "auto").unwrap();
        let source = FileSource {
            path: &path,
            format,
            follow: false,
            poll: Duration::from_millis(10),
        };
        run(&source, &sink, &SourceState::default()).unwrap();
        (sink, metrics)
    }

    fn edges(table: &FlowTable) -> Vec<(String, String, u16)> {
        let mut v: Vec<_> = table
            .snapshot()
            .into_iter()
            .map(|s| {
                (
                    s.edge.subject.id.to_string(),
                    s.edge.peer.id.to_string(),
                    s.edge.port,
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The real Hubble capture's two `DROPPED` flows with a policy-deny reason (line 42:
    /// `POLICY_DENIED` by name, line 43: `drop_reason` 133) are policy denials (the
    /// decoder's tests check both); line 43 becomes the one denied edge. Line 42 was
    /// exported with a field mask that dropped `traffic_direction`: no subject can be
    /// told, so it makes no edge of any kind.
    #[test]
    fn real_hubble_policy_drops_become_denials() {
        let (sink, _) = replay_real("hubble-flows.jsonl");
        let denials = edges(sink.denials().unwrap());
        assert_eq!(
            denials,
            [(
                "namespace-name/Pod/pod-name-nginx-5869cc6967-trl5q".to_owned(),
                "reserved:remote-node".to_owned(),
                8182
            )]
        );
        assert!(edges(sink.audits().unwrap()).is_empty());
        let learned = edges(sink.table());
        assert!(denials.iter().all(|d| !learned.contains(d)));
    }

    /// The real ztunnel capture: the two dry-run lines are audit denials (port 0), the
    /// three policy rejections are denials with their port; none is learned.
    #[test]
    fn real_ztunnel_denials_and_dry_runs_are_kept_apart() {
        let (sink, _) = replay_real("ztunnel-access.log");
        let audits = sink.audits().unwrap().snapshot();
        assert_eq!(audits.len(), 1, "lines 37 and 40: one pod, one peer");
        assert_eq!(audits[0].count, 2);
        assert_eq!(
            edges(sink.audits().unwrap()),
            [(
                "default/Pod/http-server-6cbcc86f5d-lhq82".to_owned(),
                "10.244.0.5".to_owned(),
                0
            )]
        );
        let denials = edges(sink.denials().unwrap());
        assert!(denials.iter().all(|d| d.2 != 0), "{denials:?}");
        assert!(!denials.is_empty());
        assert!(edges(sink.table()).iter().all(|e| e.2 != 0));
    }

    #[test]
    fn follows_appends_and_starts_over_after_truncation() {
        let dir = std::env::temp_dir().join(format!("ne-agent-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("follow.jsonl");
        let lines: Vec<String> = std::fs::read_to_string(example())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        std::fs::write(&path, format!("{}\n", lines[0])).unwrap();
        let (sink, metrics) = sink();
        let state = SourceState::default();
        std::thread::scope(|s| {
            let worker = s.spawn(|| {
                let source = FileSource {
                    path: &path,
                    format: Format::HubbleJson,
                    follow: true,
                    poll: Duration::from_millis(5),
                };
                run(&source, &sink, &state)
            });
            wait_until("the first line", || received(&metrics) == 1);
            // A line written in two pieces is read once, when complete.
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            let (a, b) = lines[1].split_at(40);
            f.write_all(a.as_bytes()).unwrap();
            f.flush().unwrap();
            f.write_all(format!("{b}\n{}\n", lines[2]).as_bytes())
                .unwrap();
            wait_until("the appended lines", || received(&metrics) == 3);
            // Truncated and rewritten: read again from the start.
            std::fs::write(&path, format!("{}\n", lines[3])).unwrap();
            wait_until("the rewritten file", || received(&metrics) == 4);
            state.shut_down();
            worker.join().unwrap().unwrap();
        });
        assert_eq!(
            metrics
                .flows_dropped
                .get_or_create(&ReasonLabel {
                    reason: DropReason::decode_error
                })
                .get(),
            0
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
