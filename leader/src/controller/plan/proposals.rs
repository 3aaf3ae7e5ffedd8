//! Proposals: promotion of labelled ones, deletion of ones whose backend is no longer the
//! active one, and the learned allow-lists merged into the rest.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use ne_crds::{
    Backend, Mode, PROMOTE_LABEL, PROMOTED_FROM_LABEL, WorkloadNetworkPolicy,
    WorkloadNetworkPolicyProposal, WorkloadNetworkPolicyProposalStatus,
};

use crate::attribution::Targeted;

use super::{
    Action, Config, Event, MANAGED_BY, ObjectKey, Plan, TargetKey, Workload, World, label,
    merge_spec, merge_status, name_of, namespace_of, owned_by, owner_reference, set_condition,
    version_key,
};

const PROPOSAL: &str = "WorkloadNetworkPolicyProposal";

/// The promotion a proposal's label asks for: `None` without the label, `Err(value)` for a
/// value other than `monitor` or `protect`.
pub(crate) fn promotion(p: &WorkloadNetworkPolicyProposal) -> Option<Result<Mode, &str>> {
    label(p, PROMOTE_LABEL).map(|value| match value {
        "monitor" => Ok(Mode::Monitor),
        "protect" => Ok(Mode::Protect),
        other => Err(other),
    })
}

fn target_of_proposal(p: &WorkloadNetworkPolicyProposal) -> TargetKey {
    (
        namespace_of(p).to_owned(),
        p.spec.target_ref.kind,
        p.spec.target_ref.name.clone(),
        p.spec.direction,
    )
}

pub(super) fn plan(world: &World<'_>, config: &Config, plan: &mut Plan) {
    let policies_by_name: BTreeMap<(&str, &str), &WorkloadNetworkPolicy> = world
        .policies
        .iter()
        .map(|w| ((namespace_of(w), name_of(w)), w))
        .collect();
    let policies_by_target: BTreeMap<TargetKey, &WorkloadNetworkPolicy> =
        world.policies.iter().map(|w| (w.target(), w)).collect();

    // Proposals the learned content must not touch this round, and ones it must replace.
    let mut frozen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut replaced: BTreeSet<(&str, &str)> = BTreeSet::new();
    for p in world.proposals {
        let key = (namespace_of(p), name_of(p));
        match promotion(p) {
            Some(Ok(mode)) => {
                frozen.insert(key);
                promote(p, mode, &policies_by_name, &policies_by_target, plan);
                continue;
            }
            Some(Err(value)) => plan.actions.push(Action::Event(Event {
                kind: PROPOSAL,
                regarding: ObjectKey::of(p),
                warning: true,
                reason: "InvalidPromoteLabel",
                note: format!(
                    "label {PROMOTE_LABEL}={value:?} is ignored: use \"monitor\" or \"protect\""
                ),
                key: version_key(p, "invalid-promote"),
            })),
            None => {}
        }
        if p.spec.backend != config.backend {
            plan.actions.push(Action::DeleteProposal {
                key: ObjectKey::of(p),
                reason: "backend_changed",
            });
            replaced.insert(key);
        }
    }

    let existing: BTreeMap<(&str, &str), &WorkloadNetworkPolicyProposal> = world
        .proposals
        .iter()
        .map(|p| ((namespace_of(p), name_of(p)), p))
        .collect();
    for learned in world.learned {
        let key = (namespace_of(learned), name_of(learned));
        let target = target_of_proposal(learned);
        if config.excluded_namespaces.contains(key.0) {
            plan.skip("excluded_namespace");
            continue;
        }
        if policies_by_target.contains_key(&target) {
            plan.skip("policy_exists");
            continue;
        }
        if frozen.contains(&key) {
            plan.skip("promoting");
            continue;
        }
        if learned.spec.backend != config.backend {
            plan.skip("backend_mismatch");
            continue;
        }
        let Some(workload) = world
            .workloads
            .get(&(target.0.clone(), target.1, target.2.clone()))
        else {
            plan.skip("workload_not_found");
            continue;
        };
        let base = existing
            .get(&key)
            .copied()
            .filter(|_| !replaced.contains(&key));
        let desired = desired_proposal(learned, base, workload, world, config);
        let spec = base.is_none_or(|b| {
            b.spec != desired.spec
                || !owned_by(b, &workload.uid, false)
                || label(b, MANAGED_BY.0) != Some(MANAGED_BY.1)
        });
        let status = base.is_none_or(|b| {
            status_changed(
                b.status.as_ref(),
                desired.status.as_ref(),
                config.status_refresh,
            )
        });
        if spec || status {
            plan.actions.push(Action::ApplyProposal {
                object: Box::new(desired),
                spec,
                status,
            });
        }
    }
}

/// Whether the status must be written: anything but moved evidence differs, or some
/// evidence moved by `refresh` or more.
fn status_changed(
    old: Option<&WorkloadNetworkPolicyProposalStatus>,
    new: Option<&WorkloadNetworkPolicyProposalStatus>,
    refresh: std::time::Duration,
) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return old != new;
    };
    if old.learning_since != new.learning_since
        || old.peers.len() != new.peers.len()
        || crate::controller::plan::condition_changed(&old.conditions, &new.conditions)
    {
        return true;
    }
    old.peers.iter().zip(&new.peers).any(|(a, b)| {
        let moved = b.last_seen.0.duration_since(a.last_seen.0);
        (&a.peer, &a.protocol, a.port, &a.first_seen, &a.dns_name)
            != (&b.peer, &b.protocol, b.port, &b.first_seen, &b.dns_name)
            || (b.flow_count != a.flow_count || moved.is_positive())
                && moved.unsigned_abs() >= refresh
    })
}

/// The learned proposal merged into `base`, with owner, labels and conditions.
fn desired_proposal(
    learned: &WorkloadNetworkPolicyProposal,
    base: Option<&WorkloadNetworkPolicyProposal>,
    workload: &Workload,
    world: &World<'_>,
    config: &Config,
) -> WorkloadNetworkPolicyProposal {
    let spec = match base {
        Some(b) => merge_spec(&b.spec, &learned.spec),
        None => learned.spec.clone(),
    };
    let learned_status = learned.status.clone().unwrap_or_default();
    let mut status = merge_status(base.and_then(|b| b.status.as_ref()), &learned_status);
    status.conditions = proposal_conditions(&status, learned, workload, world, config);
    let mut object = WorkloadNetworkPolicyProposal::new(name_of(learned), spec);
    object.metadata.namespace = Some(namespace_of(learned).to_owned());
    object.metadata.labels = Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into());
    let target = &object.spec.target_ref;
    object.metadata.owner_references = Some(vec![owner_reference(
        "apps/v1",
        &format!("{:?}", target.kind),
        &target.name,
        &workload.uid,
        false,
    )]);
    object.status = Some(status);
    // The writer updates an object it knows (its uid is a precondition) and creates one it
    // does not (never taking over an object that appeared meanwhile).
    object.metadata.uid = base.and_then(|b| b.metadata.uid.clone());
    let safe = super::safety::protect_safe(super::safety::Subject::proposal(&object, world), world);
    if let Some(status) = object.status.as_mut() {
        let condition = set_condition(
            &base
                .and_then(|b| b.status.as_ref())
                .map(|s| s.conditions.clone())
                .unwrap_or_default(),
            "ProtectSafe",
            safe.0,
            safe.1,
            safe.2,
            world.now,
            None,
        );
        status.conditions.push(condition);
    }
    object
}

fn proposal_conditions(
    status: &WorkloadNetworkPolicyProposalStatus,
    learned: &WorkloadNetworkPolicyProposal,
    workload: &Workload,
    world: &World<'_>,
    config: &Config,
) -> Vec<Condition> {
    let existing = &status.conditions;
    let mut out = vec![stable(status, config, world.now)];
    if learned.spec.backend == Backend::Istio {
        let namespace = namespace_of(learned);
        let own = workload.service_account.as_deref().unwrap_or("default");
        let sharing: Vec<String> = world
            .workloads
            .iter()
            .filter(|((ns, _, _), w)| {
                ns == namespace
                    && w.uid != workload.uid
                    && w.service_account.as_deref().unwrap_or("default") == own
            })
            .map(|((_, kind, name), _)| format!("{kind:?}/{name}"))
            .collect();
        let (shared, reason, message) = if own == "default" {
            (
                true,
                "DefaultServiceAccount",
                "the workload runs as the namespace's default ServiceAccount: every workload \
                 that does so has the same identity"
                    .to_owned(),
            )
        } else if !sharing.is_empty() {
            (
                true,
                "SharedServiceAccount",
                format!(
                    "ServiceAccount {own} is also used by {}: they share one identity",
                    sharing.join(", ")
                ),
            )
        } else {
            (
                false,
                "UniqueServiceAccount",
                format!("ServiceAccount {own} is used by this workload only"),
            )
        };
        out.push(set_condition(
            existing,
            "SharedIdentity",
            shared,
            reason,
            message,
            world.now,
            None,
        ));
    }
    out
}

/// `Stable` once no peer or port was added for `config.stable_after`: the newest addition is
/// the latest first-seen of any evidence row.
fn stable(status: &WorkloadNetworkPolicyProposalStatus, config: &Config, now: &Time) -> Condition {
    let newest = status.peers.iter().map(|p| p.first_seen.0).max();
    // A first-seen ahead of our clock (another node's clock) counts as just now.
    let quiet = newest.map(|t| {
        let d = now.0.duration_since(t);
        if d.is_negative() {
            std::time::Duration::ZERO
        } else {
            d.unsigned_abs()
        }
    });
    let after = config.stable_after;
    let (is_stable, reason, message) = match (newest, quiet) {
        (Some(_), Some(q)) if q >= after => (
            true,
            "NoNewPeers",
            format!("no new peer or port for at least {}s", after.as_secs()),
        ),
        (Some(t), _) => (
            false,
            "Learning",
            format!("a new peer or port was added at {t}"),
        ),
        _ => (false, "Learning", "nothing learned yet".to_owned()),
    };
    set_condition(
        &status.conditions,
        "Stable",
        is_stable,
        reason,
        message,
        now,
        None,
    )
}

fn promote(
    p: &WorkloadNetworkPolicyProposal,
    mode: Mode,
    by_name: &BTreeMap<(&str, &str), &WorkloadNetworkPolicy>,
    by_target: &BTreeMap<TargetKey, &WorkloadNetworkPolicy>,
    plan: &mut Plan,
) {
    let (namespace, name) = (namespace_of(p), name_of(p));
    let conflict = |note: String| {
        Action::Event(Event {
            kind: PROPOSAL,
            regarding: ObjectKey::of(p),
            warning: true,
            reason: "PromotionConflict",
            note,
            key: version_key(p, "promotion-conflict"),
        })
    };
    if let Some(w) = by_name.get(&(namespace, name)) {
        if label(*w, PROMOTED_FROM_LABEL) == Some(name) {
            // Promoted before; the proposal's delete did not happen yet.
            plan.actions.push(Action::DeleteProposal {
                key: ObjectKey::of(p),
                reason: "promoted",
            });
        } else {
            plan.actions.push(conflict(format!(
                "WorkloadNetworkPolicy {namespace}/{name} already exists and was not promoted \
                 from this proposal: nothing was overwritten; delete or rename it to promote"
            )));
        }
        return;
    }
    if let Some(w) = by_target.get(&target_of_proposal(p)) {
        plan.actions.push(conflict(format!(
            "WorkloadNetworkPolicy {namespace}/{} already covers {:?}/{} {:?}: nothing was \
             created",
            name_of(*w),
            p.spec.target_ref.kind,
            p.spec.target_ref.name,
            p.spec.direction
        )));
        return;
    }
    let mut policy = WorkloadNetworkPolicy::new(name, p.spec.promoted(mode));
    policy.metadata.namespace = Some(namespace.to_owned());
    policy.metadata.labels = Some(
        [
            (PROMOTED_FROM_LABEL.to_owned(), name.to_owned()),
            (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
        ]
        .into(),
    );
    plan.actions.push(Action::Promote {
        policy: Box::new(policy),
        proposal: ObjectKey::of(p),
    });
}
