//! Every text format the agent and `learn` read (Hubble JSON, ztunnel, Goldmane JSON,
//! Calico flow logs), through the stream decoder with its CRI joining: no input panics, and
//! every line is accounted for (a record, a skip, a buffered piece or an error).
//!
//! Input: a format byte, then lines separated by `\n`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_dataplanes::{Decoded, Format, LineDecoder};

const FORMATS: [Format; 4] = [
    Format::HubbleJson,
    Format::Ztunnel,
    Format::GoldmaneJson,
    Format::CalicoFlowLog,
];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let format = FORMATS[usize::from(selector) % FORMATS.len()];
    // Detection reads untrusted first lines too.
    let _ = Format::detect_input(text);
    let mut decoder = LineDecoder::new(format);
    let mut partial = 0u64;
    for line in text.split(|&b| b == b'\n') {
        if let Ok(Decoded::Partial) = decoder.feed(line) {
            partial += 1;
        }
    }
    // Pieces still waiting or abandoned never outnumber the pieces buffered.
    let dropped = decoder.take_abandoned() + decoder.finish();
    assert!(
        dropped <= partial,
        "{dropped} partial lines dropped of {partial} buffered"
    );
});
