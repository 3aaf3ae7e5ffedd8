//! Each policy's violation record: this round's observations merged in and its
//! acknowledgement annotations taken ([`crate::violations::record`]); one write per policy
//! whose record changed, never one per flow, carrying the records its log events report.

use ne_crds::WorkloadNetworkPolicyStatus;

use super::{Action, Config, Event, ObjectKey, Plan, World, name_of, namespace_of, version_key};
use crate::violations::record;

/// The violation fields of a status (what [`Action::ApplyViolations`] owns).
fn violation_fields(
    s: &WorkloadNetworkPolicyStatus,
) -> (
    &[ne_crds::ViolationRecord],
    i64,
    i64,
    i64,
    &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    &[ne_crds::AcknowledgedViolation],
) {
    (
        &s.violations,
        s.active_violation_count,
        s.violation_count,
        s.last_violation_id,
        &s.last_violation_time,
        &s.acknowledged_violations,
    )
}

pub(super) fn plan(world: &World<'_>, config: &Config, plan: &mut Plan) {
    for w in world.policies {
        if w.spec.backend != config.backend {
            continue;
        }
        let key = (namespace_of(w).to_owned(), name_of(w).to_owned());
        let observations = world
            .observations
            .get(&key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let status = w.status.clone().unwrap_or_default();
        let merged = record::merge(&status, observations);
        let acks = record::acknowledgements(w.metadata.annotations.iter().flatten());
        let done = record::acknowledge(&merged.status, &acks, world.now);
        for annotation in &done.unknown {
            plan.actions.push(Action::Event(Event {
                kind: "WorkloadNetworkPolicy",
                regarding: ObjectKey::of(w),
                warning: true,
                reason: "UnknownViolation",
                note: format!(
                    "{annotation} names no current violation record: nothing was acknowledged, \
                     and the annotation is removed"
                ),
                key: version_key(w, annotation),
            }));
        }
        if violation_fields(&done.status) != violation_fields(&status)
            || !done.annotations.is_empty()
        {
            let observed = merged
                .status
                .violations
                .iter()
                .filter(|r| merged.new.contains(&r.id) || merged.updated.contains(&r.id))
                .cloned()
                .collect();
            plan.actions.push(Action::ApplyViolations {
                key: ObjectKey::of(w),
                resource_version: w.metadata.resource_version.clone(),
                status: Box::new(done.status),
                remove_annotations: done.annotations,
                observed,
                acknowledged: done.moved,
            });
        }
    }
}
