//! The agent's Hubble path, differential: `HubbleDecoder::record` (the fast path, one
//! decoder for the whole stream) against `decode_response` + `record_flow` (the exact
//! path). On every message both give the same answer, and the two tables end up equal.
//!
//! Input: a provider byte, then messages, each behind a 2-byte little-endian length (the
//! last one takes what is left).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_dataplanes::hubble_pb::{HubbleDecoder, record_exact};
use ne_flow::edge::Provider;
use ne_flow::table::FlowTable;
use ne_fuzz::{entries, frames};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let provider = [Provider::Cilium, Provider::Calico, Provider::Istio][usize::from(selector % 3)];
    // A tiny capacity now and then, so that full tables and drops are compared too.
    let capacity = if selector & 0x80 != 0 { 2 } else { 1 << 10 };
    let (fast, slow) = (FlowTable::new(capacity), FlowTable::new(capacity));
    let mut decoder = HubbleDecoder::new();
    for message in frames(rest) {
        assert_eq!(
            decoder.record(&fast, message, provider),
            record_exact(&slow, message, provider),
            "the fast path answers otherwise"
        );
    }
    assert_eq!(entries(&fast), entries(&slow), "the tables differ");
    assert_eq!(fast.dropped(), slow.dropped());
});
