//! Decoder throughput, alone and inside the agent's pipeline (docs/architecture.md,
//! "Performance goals": decode + normalise + aggregate ≥ 50 % of the speed of decoding
//! alone, same input, same run).
//!
//! One group per format, on [`ne_benches::generate`]d lines (default [`Config`]: 200
//! workloads, Zipf-distributed conversations). In each group `decode/*` runs
//! [`LineDecoder::feed`] (the agent's entry point) and drops the records; `pipeline/*`
//! runs the same calls and records every record with [`FlowTable::record_flow`] (edge
//! derivation + aggregation) into a table that the warm-up has already filled, i.e. the
//! steady state. `record/*` runs only the `record_flow` calls on the same input decoded
//! beforehand: the pipeline's extra cost measured on its own, which is a few per cent of
//! decoding and so easily lost in the noise of two separate decode runs on a shared
//! machine. The lines are split before measuring, so no case pays for the newline search.
//! The ztunnel text group also compares CRI-framed with unframed input, and `decode_line`
//! with `LineDecoder::feed`; its `fast/*` cases are the agent's ztunnel path, which
//! records each line through [`ztunnel::record_line`] without decoding a record (to
//! compare with `pipeline/*`; the bench first checks that both learn the same table).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ne_benches::{Config, Shape, generate};
use ne_dataplanes::ztunnel::{self, ZtunnelRecorded};
use ne_dataplanes::{Decoded, Format, LineDecoder, decode_line, decode_lines};
use ne_flow::edge::Provider;
use ne_flow::flow::FlowRecord;
use ne_flow::table::{EdgeSnapshot, FlowTable};

/// Lines per measured iteration.
const LINES: usize = 4_096;

fn split(input: &[u8]) -> Vec<&[u8]> {
    input
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect()
}

/// Decodes every line with `LineDecoder::feed`; returns the number of records.
fn decode(format: Format, lines: &[&[u8]]) -> usize {
    let mut decoder = LineDecoder::new(format);
    let mut records = 0;
    for line in lines {
        if let Ok(Decoded::Record(r)) = decoder.feed(line) {
            black_box(r);
            records += 1;
        }
    }
    records
}

/// As [`decode`], with `decode_line` (no CRI detection).
fn decode_unframed(format: Format, lines: &[&[u8]]) -> usize {
    let mut records = 0;
    for line in lines {
        if let Ok(Decoded::Record(r)) = decode_line(format, line) {
            black_box(r);
            records += 1;
        }
    }
    records
}

/// Decodes and records every line; returns the number of edges recorded.
fn pipeline(format: Format, lines: &[&[u8]], table: &FlowTable) -> usize {
    let mut decoder = LineDecoder::new(format);
    let provider = format.provider();
    let mut edges = 0;
    for line in lines {
        if let Ok(Decoded::Record(r)) = decoder.feed(line) {
            edges += usize::from(black_box(table.record_flow(&r, provider)).is_ok());
        }
    }
    edges
}

/// The agent's ztunnel path: CRI framing as `LineDecoder::feed`, then
/// [`ztunnel::record_line`] on each payload (no record for a known edge); returns the
/// number of edges recorded.
fn fast(lines: &[&[u8]], table: &FlowTable) -> usize {
    let mut decoder = LineDecoder::new(Format::Ztunnel);
    let mut edges = 0;
    for line in lines {
        if let Some(payload) = decoder.payload(line) {
            let recorded = black_box(ztunnel::record_line(table, &payload, Provider::Istio));
            edges += usize::from(matches!(
                recorded,
                Ok(ZtunnelRecorded::Flow { outcome: Ok(_), .. })
            ));
        }
    }
    edges
}

/// The table's entries, sorted by key.
fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(EdgeSnapshot::key);
    s
}

/// Records already decoded records: the pipeline's cost beyond decoding, measured alone.
fn record(provider: Provider, records: &[FlowRecord], table: &FlowTable) -> usize {
    records
        .iter()
        .filter(|r| black_box(table.record_flow(r, provider)).is_ok())
        .count()
}

/// Prints what one input holds, for `BENCHMARKS.md`.
fn describe(shape: Shape, input: &[u8], lines: &[&[u8]]) {
    let format = shape.format();
    let table = FlowTable::new(1 << 20);
    let records = decode(format, lines);
    let edges = pipeline(format, lines, &table);
    eprintln!(
        "{}: {} lines, {} bytes ({} B/line), {records} records, {edges} edges, {} distinct keys",
        shape.name(),
        lines.len(),
        input.len(),
        input.len() / lines.len(),
        table.len()
    );
}

fn formats(c: &mut Criterion) {
    let config = Config::default();
    let groups: [(&str, &[Shape]); 4] = [
        ("hubble_json", &[Shape::HubbleJson]),
        ("ztunnel_text", &[Shape::ZtunnelText, Shape::ZtunnelTextCri]),
        ("ztunnel_json", &[Shape::ZtunnelJson]),
        ("goldmane_json", &[Shape::GoldmaneJson]),
    ];
    for (name, shapes) in groups {
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(LINES as u64));
        // One iteration is thousands of lines: 20 samples fit a few seconds.
        group.sample_size(20);
        for &shape in shapes {
            let input = generate(&config, shape, LINES);
            let lines = split(&input);
            assert_eq!(lines.len(), LINES);
            describe(shape, &input, &lines);
            let format = shape.format();
            let framing = if shape == Shape::ZtunnelTextCri {
                "cri"
            } else {
                "unframed"
            };
            if shape == Shape::ZtunnelText {
                group.bench_with_input(
                    BenchmarkId::new("decode_line", framing),
                    &lines,
                    |b, lines| b.iter(|| decode_unframed(format, lines)),
                );
            }
            group.bench_with_input(BenchmarkId::new("decode", framing), &lines, |b, lines| {
                b.iter(|| decode(format, lines))
            });
            let table = FlowTable::new(1 << 20);
            group.bench_with_input(BenchmarkId::new("pipeline", framing), &lines, |b, lines| {
                b.iter(|| pipeline(format, lines, &table))
            });
            assert_eq!(table.dropped(), 0);
            if matches!(shape, Shape::ZtunnelText | Shape::ZtunnelTextCri) {
                // Before measuring: the fast path learns what the pipeline learns.
                let (want, got) = (FlowTable::new(1 << 20), FlowTable::new(1 << 20));
                assert_eq!(pipeline(format, &lines, &want), fast(&lines, &got));
                assert_eq!(sorted(&want), sorted(&got));
                let table = FlowTable::new(1 << 20);
                group.bench_with_input(BenchmarkId::new("fast", framing), &lines, |b, lines| {
                    b.iter(|| fast(lines, &table))
                });
                assert_eq!(table.dropped(), 0);
            }
            if shape == Shape::ZtunnelTextCri {
                continue; // the same records as the unframed input
            }
            let mut records = Vec::with_capacity(LINES);
            decode_lines(format, &input, |r| records.push(r));
            let table = FlowTable::new(1 << 20);
            group.bench_with_input(BenchmarkId::new("record", framing), &records, |b, recs| {
                b.iter(|| record(format.provider(), recs, &table))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, formats);
criterion_main!(benches);
