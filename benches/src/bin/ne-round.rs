//! One stage of a controller round, run once on `ne_benches::round::Fixture`: for
//! instruction counts, which repeat exactly where times drift.
//!
//! ```text
//! cargo build --release -p ne-benches --bin ne-round
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*ne_round::stage*' \
//!     target/release/ne-round learn
//! ```
//!
//! Stages: `learn` (merged edges → proposals), `detect` (the edges under a monitor-mode
//! policy checked against it).

use std::hint::black_box;
use std::process::ExitCode;

use ne_benches::round::Fixture;
use ne_leader::violations::detect::{Traffic, detect};

/// The measured part, alone in its own function so that callgrind can count it.
#[inline(never)]
fn stage(fixture: &Fixture, name: &str) -> Option<u64> {
    match name {
        "learn" => Some(black_box(fixture.learn()).proposals.len() as u64),
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
    match stage(&fixture, &name) {
        Some(n) => {
            println!("ne-round {name}: {n}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("usage: ne-round learn|detect");
            ExitCode::from(2)
        }
    }
}
