//! One stage of a controller round, run once on `ne_benches::round::Fixture`: for
//! instruction counts, which repeat exactly where times drift.
//!
//! ```text
//! cargo build --release -p ne-benches --bin ne-round
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*ne_round::stage*' \
//!     target/release/ne-round learn
//! ```
//!
//! Stages: `learn` (every merged edge → proposals, in one go), `learn-changed` (the 1 %
//! of the edges that changed, into what the first round learned), `learn-again` (every
//! edge again into what was learned, as after the resolver changed), `detect` (the edges
//! under a monitor-mode policy checked against it).

use std::hint::black_box;
use std::process::ExitCode;

use ne_benches::round::{EDGES, Fixture};
use ne_leader::ingest::Changes;
use ne_leader::learning::Learning;
use ne_leader::violations::detect::{Traffic, detect};

/// The measured part, alone in its own function so that callgrind can count it; the
/// learning of the first round and the round's changes are made before.
#[inline(never)]
fn stage(fixture: &Fixture, name: &str, learning: &mut Learning, changes: Changes) -> Option<u64> {
    match name {
        "learn" => Some(black_box(fixture.learn()).proposals.len() as u64),
        "learn-changed" => {
            learning.take(changes);
            learning.learn(&fixture.snapshot, 0);
            Some(learning.learned().proposals().len() as u64)
        }
        "learn-again" => {
            learning.learn(&fixture.snapshot, 1);
            Some(learning.learned().proposals().len() as u64)
        }
        "detect" => {
            let traffic = Traffic {
                edges: &fixture.edges,
                ..Traffic::default()
            };
            let detected = detect(
                traffic,
                &fixture.policies,
                &fixture.snapshot,
                ne_crds::Backend::Kubernetes,
            );
            Some(black_box(detected).allowed)
        }
        _ => None,
    }
}

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    let fixture = Fixture::new();
    let mut learning = fixture.learning();
    let changes = fixture.changes(EDGES / 100, 1);
    match stage(&fixture, &name, &mut learning, changes) {
        Some(n) => {
            println!("ne-round {name}: {n}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("usage: ne-round learn|learn-changed|learn-again|detect");
            ExitCode::from(2)
        }
    }
}
