//! The agent's Hubble path, differential: `HubbleDecoder::record` (the fast path, one
//! decoder for the whole stream) against `decode_response` + `record_flow` (the exact
//! path). On every message both give the same answer, and the two tables end up equal.
//!
//! Input: a provider byte, then messages, each behind a 2-byte little-endian length (the
//! last one takes what is left).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_dataplanes::DecodeError;
use ne_dataplanes::hubble_pb::{HubbleDecoder, HubbleMessage, HubbleRecorded, decode_response};
use ne_flow::edge::Provider;
use ne_flow::table::{EdgeSnapshot, FlowTable};

fn exact(
    table: &FlowTable,
    bytes: &[u8],
    provider: Provider,
) -> Result<HubbleRecorded, DecodeError> {
    Ok(match decode_response(bytes)? {
        HubbleMessage::Flow(f) if f.verdict.is_denial() => HubbleRecorded::Denial(Box::new(f)),
        HubbleMessage::Flow(f) => HubbleRecorded::Flow {
            time: f.time,
            outcome: table.record_flow(&f, provider),
        },
        HubbleMessage::LostEvents { source, count } => HubbleRecorded::LostEvents { source, count },
        HubbleMessage::NodeStatus(s) => HubbleRecorded::NodeStatus(s),
        HubbleMessage::Other => HubbleRecorded::Other,
    })
}

fn sorted(table: &FlowTable) -> Vec<EdgeSnapshot> {
    let mut s = table.snapshot();
    s.sort_by_key(EdgeSnapshot::key);
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, mut rest)) = data.split_first() else {
        return;
    };
    let provider = [Provider::Cilium, Provider::Calico, Provider::Istio][usize::from(selector % 3)];
    // A tiny capacity now and then, so that full tables and drops are compared too.
    let capacity = if selector & 0x80 != 0 { 2 } else { 1 << 10 };
    let (fast, slow) = (FlowTable::new(capacity), FlowTable::new(capacity));
    let mut decoder = HubbleDecoder::new();
    while !rest.is_empty() {
        let message = match rest {
            [lo, hi, tail @ ..] => {
                let len = usize::from(u16::from_le_bytes([*lo, *hi])).min(tail.len());
                let (message, after) = tail.split_at(len);
                rest = after;
                message
            }
            _ => std::mem::take(&mut rest),
        };
        assert_eq!(
            decoder.record(&fast, message, provider),
            exact(&slow, message, provider),
            "the fast path answers otherwise"
        );
    }
    assert_eq!(sorted(&fast), sorted(&slow), "the tables differ");
    assert_eq!(fast.dropped(), slow.dropped());
});
