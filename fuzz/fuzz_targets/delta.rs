//! The leader's side of the agent stream: `ne_delta::Decoder` fed a hostile agent's
//! batches. No batch panics; a batch refused leaves the decoder exactly as it was (its
//! tables and the sequence it expects), and the tables never outgrow their limits (entries
//! and bytes).
//!
//! Input: batches as protobuf `Batch` messages, each behind a 2-byte little-endian
//! length (the last one takes what is left); bytes that are not a `Batch` are skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_delta::{Decoder, Limits};
use ne_fuzz::frames;
use ne_proto::ingest::Batch;
use ne_proto::prost::Message;

/// Small, so that the limits are reached by inputs of a few KiB (`fuzz/run` caps this
/// target's inputs at 8 KiB: the state is compared after every batch, and longer inputs of
/// many small batches ran at a few hundred a second).
const LIMITS: Limits = Limits {
    strings: 64,
    endpoints: 32,
    edges: 32,
    bytes: 4 << 10,
    rows: 64,
};

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::with_limits(LIMITS);
    for message in frames(data) {
        let Ok(batch) = Batch::decode(message) else {
            continue;
        };
        let before = format!("{decoder:?}");
        match decoder.decode(&batch) {
            Ok(_) => {
                let sizes = decoder.table_sizes();
                assert!(
                    sizes.strings <= LIMITS.strings
                        && sizes.endpoints <= LIMITS.endpoints
                        && sizes.edges <= LIMITS.edges
                        && decoder.table_bytes() <= LIMITS.bytes,
                    "tables beyond their limits: {sizes:?}, {} bytes",
                    decoder.table_bytes()
                );
            }
            Err(e) => assert_eq!(
                format!("{decoder:?}"),
                before,
                "a refused batch ({e}) changed the decoder"
            ),
        }
    }
});
