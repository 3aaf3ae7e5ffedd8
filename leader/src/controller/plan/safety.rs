//! The `ProtectSafe` condition of a policy: what switching it to protect mode would break,
//! recomputed every round as learning, the cluster and other policies change. True when
//! nothing known would; else False, the first hazard's reason, and every hazard in the
//! message:
//!
//! - `DenyAll`: the direction has no rule, so protect mode blocks all of it;
//! - `NoDns`: an egress policy lets the pods reach none of the cluster's DNS pods on UDP 53
//!   while learning shows the workload resolving names (flows to port 53, or peers learned
//!   with a DNS name);
//! - `OtherPolicies`: another NetworkPolicy (or AuthorizationPolicy) already selects the
//!   same pods for this direction: what either allows passes, and a DENY policy wins;
//! - `SharedIdentity`: a principal the rules allow is shared by several workloads, so
//!   allowing it allows them all;
//! - `UnexpressiblePeers`: learning saw the workload talk in this direction with peers no
//!   rule can name (remote-node, kube-apiserver, host, ...): protect mode blocks them. The
//!   node's own traffic into its pods (kubelet probes) counts only where the data plane
//!   applies policies to it (`--host-traffic enforced`).

use ne_crds::{
    Backend, PolicyDirection, TargetRef, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_flow::flow::Str;
use ne_policy::eval::{PolicyRef, selector};

use super::{World, name_of, namespace_of, owned_by};
use crate::controller::safety::SafetyFacts;

/// One thing protect mode would break.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hazard {
    pub reason: &'static str,
    pub message: String,
}

/// What the check reads of a policy or a proposal.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub namespace: &'a str,
    /// The object's uid: native policies it controls are its own, not others.
    pub uid: &'a str,
    pub policy: PolicyRef<'a>,
    pub target: &'a TargetRef,
    pub facts: Option<&'a SafetyFacts>,
}

impl<'a> Subject<'a> {
    pub fn policy(w: &'a WorkloadNetworkPolicy, world: &World<'a>) -> Self {
        Subject {
            namespace: namespace_of(w),
            uid: w.metadata.uid.as_deref().unwrap_or_default(),
            policy: PolicyRef::from(&w.spec),
            target: &w.spec.target_ref,
            facts: world
                .safety
                .policies
                .get(&(namespace_of(w).to_owned(), name_of(w).to_owned())),
        }
    }

    pub fn proposal(p: &'a WorkloadNetworkPolicyProposal, world: &World<'a>) -> Self {
        Subject {
            namespace: namespace_of(p),
            uid: p.metadata.uid.as_deref().unwrap_or_default(),
            policy: PolicyRef::from(&p.spec),
            target: &p.spec.target_ref,
            facts: world
                .safety
                .proposals
                .get(&(namespace_of(p).to_owned(), name_of(p).to_owned())),
        }
    }
}

/// The condition: (status, reason, message).
pub(super) fn protect_safe(
    subject: Subject<'_>,
    world: &World<'_>,
) -> (bool, &'static str, String) {
    let hazards = hazards(subject, world);
    match hazards.first() {
        None => (
            true,
            "NoKnownHazard",
            "nothing known would break in protect mode (rules, DNS, other policies on these \
             pods, shared identities and peers no rule can name were checked)"
                .to_owned(),
        ),
        Some(first) => (
            false,
            first.reason,
            hazards
                .iter()
                .map(|h| h.message.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// Every hazard of `subject`, in the order of the module's list.
pub fn hazards(subject: Subject<'_>, world: &World<'_>) -> Vec<Hazard> {
    let policy = subject.policy;
    let direction = match policy.direction {
        PolicyDirection::Ingress => "ingress",
        PolicyDirection::Egress => "egress",
    };
    // ztunnel authorizes inbound connections only: an Istio egress policy blocks nothing.
    if policy.backend == Backend::Istio && policy.direction == PolicyDirection::Egress {
        return Vec::new();
    }
    let facts = subject.facts.cloned().unwrap_or_default();
    let mut hazards = Vec::new();
    let rules = match policy.backend {
        Backend::Kubernetes => policy.kubernetes.map_or(0, |k| match policy.direction {
            PolicyDirection::Ingress => k.ingress.as_ref().map_or(0, Vec::len),
            PolicyDirection::Egress => k.egress.as_ref().map_or(0, Vec::len),
        }),
        Backend::Istio => policy.istio.map_or(0, |i| i.rules.len()),
    };
    if rules == 0 {
        hazards.push(Hazard {
            reason: "DenyAll",
            message: format!(
                "the policy has no {direction} rule: protect mode blocks all {direction} traffic"
            ),
        });
    }
    if facts.dns_denied && resolves_names(subject, world.learned) {
        hazards.push(Hazard {
            reason: "NoDns",
            message: format!(
                "no rule allows UDP port 53 to the cluster's DNS pods ({}/{}={}), and the \
                 workload resolves names: in protect mode its lookups fail",
                crate::controller::safety::DNS_NAMESPACE,
                crate::controller::safety::DNS_LABEL.0,
                crate::controller::safety::DNS_LABEL.1
            ),
        });
    }
    if let Some(labels) = &facts.target_labels {
        let others = other_policies(subject, labels, world);
        if !others.is_empty() {
            hazards.push(Hazard {
                reason: "OtherPolicies",
                message: format!(
                    "{} also select these pods for {direction}: traffic any of them allows \
                     passes whatever this policy says (and a DENY AuthorizationPolicy wins)",
                    others.join(", ")
                ),
            });
        }
    }
    if !facts.shared_principals.is_empty() {
        hazards.push(Hazard {
            reason: "SharedIdentity",
            message: format!(
                "these principals are shared by several workloads, so allowing one allows them \
                 all: {}",
                facts.shared_principals.join("; ")
            ),
        });
    }
    if !facts.unexpressible.is_empty() {
        hazards.push(Hazard {
            reason: "UnexpressiblePeers",
            message: format!(
                "learning saw {direction} traffic with peers no rule can name, which protect \
                 mode blocks: {}",
                facts.unexpressible.join(", ")
            ),
        });
    }
    hazards
}

/// Learning shows the workload resolving names: its learned egress has flows to port 53 or
/// peers learned with a DNS name.
fn resolves_names(subject: Subject<'_>, learned: &[WorkloadNetworkPolicyProposal]) -> bool {
    learned
        .iter()
        .filter(|p| {
            namespace_of(*p) == subject.namespace
                && p.spec.target_ref == *subject.target
                && p.spec.direction == PolicyDirection::Egress
        })
        .flat_map(|p| p.status.iter().flat_map(|s| &s.peers))
        .any(|e| e.port == 53 || e.dns_name.is_some())
}

/// The native policies, other than `w`'s own, that select pods labelled `labels` in `w`'s
/// namespace for its direction.
fn other_policies(
    subject: Subject<'_>,
    labels: &[(String, String)],
    world: &World<'_>,
) -> Vec<String> {
    let uid = subject.uid;
    let labels: Vec<(Str, Str)> = labels
        .iter()
        .map(|(k, v)| (Str::from(k.as_str()), Str::from(v.as_str())))
        .collect();
    let mut found = Vec::new();
    for np in world.network_policies {
        if namespace_of(np) != subject.namespace || owned_by(np, uid, true) {
            continue;
        }
        let Some(spec) = &np.spec else { continue };
        let types = spec.policy_types.clone().unwrap_or_else(|| {
            let mut t = vec!["Ingress".to_owned()];
            if spec.egress.is_some() {
                t.push("Egress".to_owned());
            }
            t
        });
        let direction = match subject.policy.direction {
            PolicyDirection::Ingress => "Ingress",
            PolicyDirection::Egress => "Egress",
        };
        let selects = spec
            .pod_selector
            .as_ref()
            .map_or(Ok(true), |s| selector::matches(s, &labels))
            .unwrap_or(false);
        if selects && types.iter().any(|t| t == direction) {
            found.push(format!("NetworkPolicy {}", name_of(np)));
        }
    }
    if subject.policy.direction == PolicyDirection::Ingress {
        for ap in world.authorization_policies.into_iter().flatten() {
            if namespace_of(ap) != subject.namespace || owned_by(ap, uid, true) {
                continue;
            }
            let selects = ap.spec.selector.as_ref().is_none_or(|s| {
                s.match_labels
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(lk, lv)| **lk == **k && **lv == **v))
            });
            if selects {
                let action = ap.spec.action.as_deref().unwrap_or("ALLOW");
                found.push(format!("AuthorizationPolicy {} ({action})", name_of(ap)));
            }
        }
    }
    found
}

#[cfg(test)]
pub(super) fn facts_for(labels: &[(&str, &str)]) -> SafetyFacts {
    SafetyFacts {
        target_labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..SafetyFacts::default()
    }
}
