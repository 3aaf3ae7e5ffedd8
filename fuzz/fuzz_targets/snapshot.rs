//! The cluster inputs of `learn --cluster`: YAML and JSON snapshots and watch streams, one
//! or two inputs. No input panics; a snapshot that builds answers lookups.
//!
//! Input: text; a `\0` splits it into two inputs (a history).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ne_flow::flow::{Endpoint, EndpointId};
use ne_policy::resolve::{ClusterSnapshot, Resolver, Seen};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let inputs: Vec<&str> = text.splitn(2, '\0').collect();
    let Ok(snapshot) = ClusterSnapshot::from_inputs(inputs) else {
        return;
    };
    for endpoint in snapshot.endpoints().take(8).cloned().collect::<Vec<_>>() {
        if let Some(owner) = endpoint.owner {
            let id = EndpointId::Workload(owner);
            let _ = snapshot.resolve_at(&Endpoint::new(id), Seen::UNKNOWN);
        }
    }
});
