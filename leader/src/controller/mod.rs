//! The Kubernetes controller of `ne-leader run` (ARCHITECTURE §1, §4): learned edges become
//! proposals, labelled proposals become policies, policies become native objects.
//!
//! - [`plan`]: the pure planner (learned proposals + cluster state + existing objects →
//!   writes).

pub mod plan;
