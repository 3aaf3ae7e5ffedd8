//! Attribution: which policy an edge concerns, and what that policy decides about it. The
//! one place for both `ne-leader check` (captured flows against policy files) and the
//! controller's detection (the merged index against the cluster's policies).
//!
//! An edge concerns the policy whose `targetRef` is the edge's subject workload (a
//! Deployment, StatefulSet or DaemonSet, after owner resolution) and whose `direction` is
//! the edge's, never a policy whose selector happens to match: a workload's ingress and
//! egress policies share one selector and must each see only their own traffic. The
//! decision is [`ne_policy::eval`]'s, with real NetworkPolicy or Istio semantics.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use ne_crds::{PolicyDirection, TargetKind, WorkloadNetworkPolicy};
use ne_flow::edge::Edge;
use ne_flow::flow::{Direction, WorkloadKind, WorkloadRef};
use ne_policy::eval::{self, Decision, EvalError, PolicyRef};
use ne_policy::resolve::{Resolution, Resolver, Seen};

/// `(namespace, kind, name, direction)`: what a policy targets.
pub type TargetKey = (String, TargetKind, String, PolicyDirection);

/// A policy as attribution needs it.
pub trait Targeted {
    /// The namespace the policy lives in (and its subject with it).
    fn namespace(&self) -> &str;
    fn spec(&self) -> PolicyRef<'_>;
    fn target(&self) -> TargetKey;
}

impl Targeted for WorkloadNetworkPolicy {
    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    fn spec(&self) -> PolicyRef<'_> {
        PolicyRef::from(&self.spec)
    }

    fn target(&self) -> TargetKey {
        (
            self.namespace().to_owned(),
            self.spec.target_ref.kind,
            self.spec.target_ref.name.clone(),
            self.spec.direction,
        )
    }
}

/// Policies by the workload and direction they target.
#[derive(Debug)]
pub struct Targets<'p, P> {
    by_target: BTreeMap<TargetKey, Covered<'p, P>>,
}

/// A policy with its rules, compiled on first use for the checks of many edges
/// ([`eval::Compiled`]: a policy of thousands of rules costs a check no more than one of a
/// few).
#[derive(Debug)]
pub struct Covered<'p, P> {
    pub policy: &'p P,
    rules: OnceLock<eval::Compiled<'p>>,
}

impl<'p, P: Targeted> Covered<'p, P> {
    fn new(policy: &'p P) -> Self {
        Covered {
            policy,
            rules: OnceLock::new(),
        }
    }

    /// What the policy decides about `edge`, its ends resolved.
    pub fn decide(
        &self,
        edge: &Edge,
        subject: &Resolution,
        peer: &Resolution,
    ) -> Result<Decision, EvalError> {
        let rules = self
            .rules
            .get_or_init(|| eval::Compiled::new(self.policy.spec(), self.policy.namespace()));
        rules.evaluate(&eval::flow_view(edge, subject, peer))
    }
}

impl<'p, P: Targeted> Targets<'p, P> {
    /// Indexes `policies`; two policies of one target are an error naming both.
    pub fn new(policies: impl IntoIterator<Item = &'p P>) -> Result<Self, (&'p P, &'p P)> {
        let mut by_target = BTreeMap::new();
        for p in policies {
            if let Some(other) = by_target.insert(p.target(), Covered::new(p)) {
                return Err((other.policy, p));
            }
        }
        Ok(Targets { by_target })
    }

    /// Indexes `policies`; of two policies of one target, the later is kept.
    pub fn latest(policies: impl IntoIterator<Item = &'p P>) -> Self {
        Targets {
            by_target: policies
                .into_iter()
                .map(|p| (p.target(), Covered::new(p)))
                .collect(),
        }
    }

    /// The policy for `key`, if any.
    pub fn get(&self, key: &TargetKey) -> Option<&'p P> {
        self.by_target.get(key).map(|c| c.policy)
    }

    /// Every policy with its target.
    pub fn iter(&self) -> impl Iterator<Item = (&TargetKey, &'p P)> + '_ {
        self.by_target.iter().map(|(k, c)| (k, c.policy))
    }

    /// What `edge` concerns, its subject resolved by `resolver` as it was while `seen` (the
    /// peer is resolved only by the caller that needs it: most edges concern no policy).
    pub fn attribute<'r>(
        &self,
        edge: &Edge,
        seen: Seen,
        resolver: &'r dyn Resolver,
    ) -> (Cow<'r, Resolution>, Target<'_, 'p, P>) {
        let subject = resolver.resolve_shared(&edge.subject, seen);
        let target = match subject_workload(&subject) {
            None => Target::NotASubject,
            Some(owner) => {
                let key = target_key(owner, edge.direction);
                match self.by_target.get(&key) {
                    Some(covered) => Target::Policy(key, covered),
                    None => Target::Uncovered(key),
                }
            }
        };
        (subject, target)
    }
}

/// What an edge concerns.
#[derive(Debug)]
pub enum Target<'t, 'p, P> {
    /// The subject is no Deployment, StatefulSet or DaemonSet, or its owner is not known.
    NotASubject,
    /// A subject workload no policy targets in the edge's direction.
    Uncovered(TargetKey),
    /// The policy that targets the subject in the edge's direction.
    Policy(TargetKey, &'t Covered<'p, P>),
}

/// The workload a resolved endpoint belongs to, when it can be a policy's subject.
pub fn subject_workload(res: &Resolution) -> Option<&WorkloadRef> {
    match res {
        Resolution::Pod(p) => p.owner.as_ref().filter(|o| o.kind.is_subject()),
        _ => None,
    }
}

/// `(namespace, kind, name)` of a subject workload (see [`subject_workload`]).
pub fn workload_key(w: &WorkloadRef) -> (String, TargetKind, String) {
    let kind = match w.kind {
        WorkloadKind::StatefulSet => TargetKind::StatefulSet,
        WorkloadKind::DaemonSet => TargetKind::DaemonSet,
        _ => TargetKind::Deployment,
    };
    (w.namespace.to_string(), kind, w.name.to_string())
}

/// The target key of a subject workload and an edge direction.
pub fn target_key(w: &WorkloadRef, direction: Direction) -> TargetKey {
    let (namespace, kind, name) = workload_key(w);
    let direction = match direction {
        Direction::Ingress => PolicyDirection::Ingress,
        Direction::Egress => PolicyDirection::Egress,
    };
    (namespace, kind, name, direction)
}
