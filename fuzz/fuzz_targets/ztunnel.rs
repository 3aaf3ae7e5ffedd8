//! The agent's ztunnel path, differential: `ztunnel::record_line` (the fast path) against
//! `decode_line` + `record_flow`, line by line through the CRI joiner, both tables equal at
//! the end.
//!
//! Input: a provider byte, then text lines (any bytes) separated by `\n`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_dataplanes::ztunnel::{record_line, record_line_exact};
use ne_dataplanes::{Format, LineDecoder};
use ne_flow::edge::Provider;
use ne_flow::table::FlowTable;
use ne_fuzz::entries;

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
                record_line_exact(&slow, &payload, provider),
                "the fast path answers otherwise"
            );
        }
    }
    lines.finish();
    assert_eq!(entries(&fast), entries(&slow), "the tables differ");
});
