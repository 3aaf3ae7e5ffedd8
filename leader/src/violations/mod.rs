//! Violations (issue 6, in progress): the pure rules of a policy's violation record. The
//! detection that produces observations and the writer that applies the status come next.
//!
//! - [`detect`]: monitor-mode observations from the merged edges, attributed by
//!   `targetRef` + direction.
//! - [`record`]: observations merged into `status.violations` (one record per source,
//!   destination, protocol, port, direction and mode; ids monotonic and never reused; the
//!   100 most recent kept) and acknowledgements moved to `status.acknowledgedViolations`.

pub mod detect;
pub mod record;

#[cfg(test)]
mod tests;
