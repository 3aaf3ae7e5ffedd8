//! Violations (docs/architecture.md, "Violations" and "OpenTelemetry"): what the leader
//! merged becomes observations of the policies it concerns, observations become each
//! policy's violation record, and changes of the record become OpenTelemetry log events.
//!
//! - [`detect`]: observations from the merged edges (monitor checks), denials (protect)
//!   and dry-run denials, attributed by `targetRef` + direction.
//! - [`record`]: observations merged into `status.violations` (one record per source,
//!   destination, protocol, port, direction and mode; ids monotonic and never reused; the
//!   100 most recent kept) and acknowledgements moved to `status.acknowledgedViolations`.
//! - [`events`]: the log events of new, changed and acknowledged records and of
//!   unattributed traffic, and the memory that reports each change once.

pub mod detect;
pub mod events;
pub mod record;

#[cfg(test)]
mod tests;
