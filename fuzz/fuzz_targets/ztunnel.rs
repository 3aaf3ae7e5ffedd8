//! The agent's ztunnel path, differential: `ztunnel::record_line` (the fast path) against
//! `decode_line` + `record_flow`, line by line through the CRI joiner, both tables equal at
//! the end.
//!
//! Input: a provider byte, then text lines (any bytes) separated by `\n`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_dataplanes::ztunnel::{ZtunnelRecorded, record_line};
use ne_dataplanes::{DecodeError, Decoded, Format, LineDecoder, decode_line};
use ne_flow::edge::Provider;
use ne_flow::table::{EdgeSnapshot, FlowTable};

fn exact(
    table: &FlowTable,
    payload: &[u8],
    provider: Provider,
) -> Result<ZtunnelRecorded, DecodeError> {
    Ok(match decode_line(Format::Ztunnel, payload)? {
        Decoded::Record(r) if r.verdict.is_denial() => ZtunnelRecorded::Denial(Box::new(r)),
        Decoded::Record(r) => ZtunnelRecorded::Flow {
            time: r.time,
            outcome: table.record_flow(&r, provider),
        },
        Decoded::Skip(reason) => ZtunnelRecorded::Skip(reason),
        Decoded::Partial => unreachable!("decode_line takes whole payloads"),
    })
}

fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(EdgeSnapshot::key);
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let provider = [Provider::Istio, Provider::Cilium, Provider::Calico][usize::from(selector % 3)];
    let (fast, slow) = (FlowTable::new(1 << 10), FlowTable::new(1 << 10));
    let mut lines = LineDecoder::new(Format::Ztunnel);
    for line in text.split(|&b| b == b'\n') {
        if let Some(payload) = lines.payload(line) {
            assert_eq!(
                record_line(&fast, &payload, provider),
                exact(&slow, &payload, provider),
                "the fast path answers otherwise"
            );
        }
    }
    lines.finish();
    assert_eq!(sorted(&fast), sorted(&slow), "the tables differ");
});
