//! Status conditions: one per type, `lastTransitionTime` moved only when the status flips,
//! so an unchanged state plans no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition `type_` as it should be now, given the `existing` ones.
pub fn set_condition(
    existing: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    now: &Time,
    observed_generation: Option<i64>,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let since = existing
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
        observed_generation,
    }
}

/// Whether writing `desired` would change any of the `existing` conditions (every desired
/// type is compared; types the planner does not own are left alone).
pub fn condition_changed(existing: &[Condition], desired: &[Condition]) -> bool {
    desired.iter().any(|d| {
        existing
            .iter()
            .find(|e| e.type_ == d.type_)
            .is_none_or(|e| {
                (&e.status, &e.reason, &e.message, e.observed_generation)
                    != (&d.status, &d.reason, &d.message, d.observed_generation)
            })
    })
}
