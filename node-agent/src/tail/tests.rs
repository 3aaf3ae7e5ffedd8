//! Deterministic tests of the tailer against real files, one behaviour each.

use std::fs::{self, OpenOptions};

use ne_dataplanes::{DecodeStats, Decoded, Format, LineDecoder, SkipReason, decode_lines};

use super::test_support::{Collected, TempRoot, append};
use super::*;

const TS: &str = "2026-03-14T09:26:53.421950312Z";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn first_poll_starts_at_the_end_and_skips_a_cut_line() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"old 1\nold 2\nhalf of a li");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    let first = got.poll(&mut tailer);
    assert_eq!(first.lines, 0);
    assert_eq!(first.files_opened, 1);
    assert_eq!(first.bytes, 0, "nothing before the start is read");

    append(&log, b"ne that began before\nnew 1\n");
    let second = got.poll(&mut tailer);
    assert_eq!(got.lines(&log), strings(&["new 1"]));
    assert_eq!(second.lines, 1);
    assert_eq!(
        second.overlong_dropped, 0,
        "the skipped rest is no overlong line"
    );
}

#[test]
fn start_at_beginning_reads_the_history() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"old 1\nold 2\n");
    let mut tailer = root.tailer(StartAt::Beginning);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    assert_eq!(got.lines(&log), strings(&["old 1", "old 2"]));
}

#[test]
fn files_that_appear_later_are_read_from_their_beginning() {
    let root = TempRoot::new();
    let dir_a = root.ztunnel_dir("a");
    append(&dir_a.join("0.log"), b"before start\n");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);

    // A container restart and a new ztunnel pod, both after the start.
    append(&dir_a.join("1.log"), b"restarted 1\nrestarted 2\n");
    let dir_b = root.ztunnel_dir("b");
    append(&dir_b.join("0.log"), b"new pod\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.files_opened, 2);
    assert_eq!(stats.rotations, 0);
    assert_eq!(
        got.lines(&dir_a.join("1.log")),
        strings(&["restarted 1", "restarted 2"])
    );
    assert_eq!(got.lines(&dir_b.join("0.log")), strings(&["new pod"]));
    assert!(got.lines(&dir_a.join("0.log")).is_empty());
    let ids: Vec<StreamId> = tailer.streams().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.windows(2).all(|w| w[0] != w[1]));
}

#[test]
fn rotation_drains_the_renamed_file_before_the_new_one() {
    let root = TempRoot::new();
    let dir = root.ztunnel_dir("a");
    let log = dir.join("0.log");
    let rotated = dir.join("0.log.20260314-092653");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);

    append(&log, b"a\nb\n");
    got.poll(&mut tailer);
    fs::rename(&log, &rotated).unwrap();
    append(&log, b"d\n");
    // The runtime still had the old file open for a moment.
    append(&rotated, b"c\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.rotations, 1);
    assert_eq!(stats.files_opened, 1);
    assert_eq!(got.lines(&log), strings(&["a", "b", "c", "d"]));
    assert_eq!(
        tailer.streams().count(),
        1,
        "rotated names are no new stream"
    );

    // Still held until a poll after the rotation finds nothing new in it.
    append(&rotated, b"e\n");
    got.poll(&mut tailer);
    got.poll(&mut tailer);
    append(&rotated, b"too late\n");
    append(&log, b"f\n");
    got.poll(&mut tailer);
    assert_eq!(got.lines(&log), strings(&["a", "b", "c", "d", "e", "f"]));
    assert_eq!(tailer.totals().rotations, 1);
    assert_eq!(tailer.totals().unterminated_dropped, 0);
}

#[test]
fn delete_and_recreate_is_a_rotation_and_a_cut_fragment_is_counted() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    append(&log, b"one\nunfinished");
    got.poll(&mut tailer);
    fs::remove_file(&log).unwrap();
    append(&log, b"two\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.rotations, 1);
    got.poll(&mut tailer);
    assert_eq!(got.lines(&log), strings(&["one", "two"]));
    assert_eq!(tailer.totals().unterminated_dropped, 1);
}

#[test]
fn copytruncate_restarts_at_zero_and_loses_the_unread_lines() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    append(&log, b"read 1\nread 2\n");
    got.poll(&mut tailer);
    append(&log, b"unread before the truncation\n");
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&log, b"after\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.truncations, 1);
    assert_eq!(got.lines(&log), strings(&["read 1", "read 2", "after"]));
    append(&log, b"more\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.truncations, 0);
    assert_eq!(
        got.lines(&log),
        strings(&["read 1", "read 2", "after", "more"])
    );
}

#[test]
fn truncation_is_detected_when_the_file_grew_back_past_the_offset() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    append(&log, b"first line\n");
    got.poll(&mut tailer);
    OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&log, b"a longer line written after the truncation\nx\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.truncations, 1);
    assert_eq!(
        got.lines(&log),
        strings(&[
            "first line",
            "a longer line written after the truncation",
            "x"
        ])
    );
}

#[test]
fn a_cri_line_split_across_writes_is_emitted_whole() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);

    append(&log, format!("{TS} stdout P first piece, ").as_bytes());
    assert_eq!(got.poll(&mut tailer).lines, 0);
    append(&log, format!("cut here\n{TS} stdout F last ").as_bytes());
    assert_eq!(got.poll(&mut tailer).lines, 1);
    append(&log, b"piece\n");
    assert_eq!(got.poll(&mut tailer).lines, 1);
    let lines = got.lines(&log);
    assert_eq!(
        lines,
        [
            format!("{TS} stdout P first piece, cut here"),
            format!("{TS} stdout F last piece")
        ]
    );

    let mut decoder = LineDecoder::new(Format::Ztunnel);
    assert_eq!(decoder.feed(lines[0].as_bytes()), Ok(Decoded::Partial));
    // The joined payload is no ztunnel line, but it is one complete payload.
    assert!(!matches!(
        decoder.feed(lines[1].as_bytes()),
        Ok(Decoded::Partial)
    ));
    assert_eq!(decoder.finish(), 0);
}

#[test]
fn overlong_lines_are_dropped_and_reading_resyncs() {
    let root = TempRoot::new();
    let log = root.ztunnel_dir("a").join("0.log");
    append(&log, b"");
    let mut tailer = Tailer::new(TailConfig {
        root: root.path().to_owned(),
        max_line: 10,
        read_chunk: 4,
        ..TailConfig::default()
    });
    let mut got = Collected::default();
    got.poll(&mut tailer);
    append(
        &log,
        b"short\nxxxxxxxxxxxxxxxxxxxxxxxxx\nexactly 10\neleven byte\n",
    );
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.overlong_dropped, 2);
    // An overlong line that grows over several polls is counted once.
    append(&log, b"yyyyyyyy");
    got.poll(&mut tailer);
    append(&log, b"yyyyyyyy");
    got.poll(&mut tailer);
    append(&log, b"yy\nok\n");
    got.poll(&mut tailer);
    // A buffered line at the limit waits for its `\n`.
    append(&log, b"0123456789");
    got.poll(&mut tailer);
    append(&log, b"\n");
    got.poll(&mut tailer);
    assert_eq!(
        got.lines(&log),
        strings(&["short", "exactly 10", "ok", "0123456789"])
    );
    assert_eq!(tailer.totals().overlong_dropped, 3);
    assert_eq!(tailer.totals().lines, 4);
}

#[test]
fn a_deleted_pod_directory_is_drained_then_ended() {
    let root = TempRoot::new();
    let dir = root.ztunnel_dir("a");
    let log = dir.join("0.log");
    append(&log, b"");
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    let (id, _) = tailer.streams().next().unwrap();
    append(&log, b"last words\n");
    fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    let mut lines = Vec::new();
    let stats = tailer.poll(&mut |_, l| lines.push(l.to_vec()));
    assert_eq!(lines, [b"last words".to_vec()]);
    assert_eq!(stats.streams_ended, 0, "held until a quiet poll");
    let stats = tailer.poll(&mut |_, _| {});
    assert_eq!(stats.streams_ended, 1);
    assert_eq!(tailer.take_ended(), [(id, log)]);
    assert_eq!(tailer.streams().count(), 0);
    assert_eq!(tailer.stream_path(id), None);
}

#[test]
fn pod_filter_parses_directory_names() {
    let any = PodFilter::default();
    assert!(any.matches_dir_name("istio-system_ztunnel-x7k2p_0c1d2e3f-aaaa-bbbb"));
    assert!(any.matches_dir_name("kube-system_ztunnel-abcde_uid"));
    assert!(!any.matches_dir_name("istio-system_istiod-5f6d_uid"));
    assert!(!any.matches_dir_name("istio-system_ztunnel-abcde"));
    assert!(!any.matches_dir_name("ztunnel"));
    assert!(!any.matches_dir_name("_ztunnel-a_uid"));
    let ns = PodFilter {
        namespace: Some("istio-system".into()),
        pod_prefix: "ztunnel-".into(),
    };
    assert!(ns.matches_dir_name("istio-system_ztunnel-x_uid"));
    assert!(!ns.matches_dir_name("kube-system_ztunnel-x_uid"));
    assert!(!ns.matches_dir_name("istio-system_ztunnel_uid"));
}

#[test]
fn only_matching_pods_containers_and_restart_logs_are_read() {
    let root = TempRoot::new();
    let mut tailer = root.tailer(StartAt::End);
    let mut got = Collected::default();
    got.poll(&mut tailer);
    let zt = root.ztunnel_dir("a");
    let others = [
        root.container_dir("default", "web-1", "u1", "istio-proxy")
            .join("0.log"),
        root.container_dir("istio-system", "ztunnel-a", "u2", "other")
            .join("0.log"),
        zt.join("0.log.20260314-092653"),
        zt.join("0.log.20260314-082653.gz"),
        zt.join("x.log"),
        zt.join(".log"),
    ];
    for path in &others {
        append(path, b"not for us\n");
    }
    fs::create_dir(zt.join("7.log")).unwrap();
    append(&zt.join("12.log"), b"ours\n");
    let stats = got.poll(&mut tailer);
    assert_eq!(stats.read_errors, 0);
    assert_eq!(got.by_path.len(), 1);
    assert_eq!(got.lines(&zt.join("12.log")), strings(&["ours"]));
}

#[test]
fn io_errors_are_counted_and_retried() {
    let root = TempRoot::new();
    let missing = root.path().join("pods");
    let mut tailer = Tailer::new(TailConfig {
        root: missing.clone(),
        ..TailConfig::default()
    });
    let stats = tailer.poll(&mut |_, _| {});
    assert_eq!(stats.read_errors, 1);
    let (path, error) = tailer.take_last_error().unwrap();
    assert_eq!(path, missing);
    assert_eq!(error.kind(), io::ErrorKind::NotFound);

    // A container "directory" that is a file cannot be listed: counted, the rest goes on.
    fs::create_dir_all(missing.join("istio-system_ztunnel-b_u")).unwrap();
    append(
        &missing.join("istio-system_ztunnel-b_u").join("istio-proxy"),
        b"",
    );
    let dir = missing.join("istio-system_ztunnel-a_u").join("istio-proxy");
    fs::create_dir_all(&dir).unwrap();
    append(&dir.join("0.log"), b"hello\n");
    let mut lines = 0;
    let stats = tailer.poll(&mut |_, _| lines += 1);
    assert_eq!(stats.read_errors, 1);
    assert_eq!(
        lines, 1,
        "the first successful poll is no start: read it all"
    );
    assert_eq!(tailer.totals().read_errors, 2);
}

/// The real ztunnel access lines, CRI-framed as containerd writes them (some split into
/// `P` + `F` pieces, some physical lines written in two parts), through rotations, a
/// `P`/`F` pair cut by a rotation and a container restart: the records decoded from the
/// tailer's lines equal those decoded from the capture itself.
#[test]
fn real_ztunnel_lines_decode_to_the_same_records_after_rotations() {
    let capture = fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/real/ztunnel-access.log"
    ))
    .expect("read the ztunnel capture");
    let mut expected = Vec::new();
    let direct: DecodeStats = decode_lines(Format::Ztunnel, capture.as_bytes(), |r| {
        expected.push(r);
    });
    // testdata/real/ORIGINS.md: 47 access lines and 6 `state` lines, 2 of them dry-run denials.
    assert_eq!(direct.records, 49);
    assert_eq!(direct.skips(SkipReason::ZtunnelNonAccess), 4);

    let root = TempRoot::new();
    let dir = root.ztunnel_dir("node1");
    append(
        &dir.join("0.log"),
        format!("{TS} stdout F before the start\n").as_bytes(),
    );
    let mut tailer = root.tailer(StartAt::End);
    let mut decoders: BTreeMap<StreamId, LineDecoder> = BTreeMap::new();
    let mut records = Vec::new();
    let mut stats = DecodeStats::default();
    let mut poll = |tailer: &mut Tailer| {
        tailer.poll(&mut |id, line| {
            let decoder = decoders
                .entry(id)
                .or_insert_with(|| LineDecoder::new(Format::Ztunnel));
            if let Some(r) = stats.account(0, decoder.feed(line)) {
                records.push(r);
            }
        });
        (records.len(), stats.skips(SkipReason::ZtunnelNonAccess))
    };
    poll(&mut tailer);

    let mut log = dir.join("0.log");
    let mut rotations = 0u64;
    for (n, line) in capture.lines().enumerate() {
        let bytes = line.as_bytes();
        let cut = bytes.len() / 2;
        match n % 4 {
            0 => {
                if n == 40 {
                    log = dir.join("1.log"); // the container restarted
                }
                append(&log, format!("{TS} stdout F {line}\n").as_bytes());
            }
            1 => {
                // A P piece whose physical line is written in two parts, with a poll between.
                append(&log, format!("{TS} stdout P ").as_bytes());
                append(&log, &bytes[..cut]);
                poll(&mut tailer);
                append(&log, b"\n");
                append(&log, format!("{TS} stdout F ").as_bytes());
                append(&log, &bytes[cut..]);
                append(&log, b"\n");
            }
            2 => {
                // The P piece goes to the file that is rotated away, the F piece to the new one.
                append(&log, format!("{TS} stdout P ").as_bytes());
                append(&log, &bytes[..cut]);
                append(&log, b"\n");
                rotations += 1;
                let rotated = log.with_extension(format!("log.20260314-0926{rotations:02}"));
                fs::rename(&log, rotated).unwrap();
                append(&log, format!("{TS} stdout F ").as_bytes());
                append(&log, &bytes[cut..]);
                append(&log, b"\n");
            }
            _ => {
                append(&log, format!("{TS} stdout F {line}\n").as_bytes());
                poll(&mut tailer);
            }
        }
    }
    poll(&mut tailer);
    let (got, non_access) = poll(&mut tailer);
    assert_eq!(stats.errors, 0, "{:?}", stats.first_errors);
    assert_eq!(got, 49);
    assert_eq!(non_access, 4);
    assert_eq!(records, expected);
    assert_eq!(rotations, 13);
    assert_eq!(tailer.totals().rotations, rotations);
    assert_eq!(tailer.totals().unterminated_dropped, 0);
    assert_eq!(decoders.len(), 2, "0.log and 1.log");
    let unfinished: u64 = decoders.values_mut().map(LineDecoder::finish).sum();
    assert_eq!(unfinished, 0);
}
