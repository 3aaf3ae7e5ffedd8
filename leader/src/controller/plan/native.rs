//! Native policies: what each WorkloadNetworkPolicy makes exist in the data plane, and the
//! conditions that say so.
//!
//! - Kubernetes backend: `protect` ⇒ a NetworkPolicy of the same name whose spec is
//!   `spec.kubernetes`, controlled by the policy; `monitor` ⇒ none (ours is deleted).
//! - Istio backend: an `ALLOW` AuthorizationPolicy in both modes, annotated
//!   `istio.io/dry-run: "true"` in `monitor`; only when Istio's CRD exists, and only for a
//!   selector Istio can express (`matchLabels`).
//! - An object of the same name that the policy does not control is never touched
//!   (`NativePolicyConflict`, Warning Event).
//! - A policy whose backend is not the active provider's is left alone, with a condition.

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use ne_crds::{
    AuthorizationPolicy, AuthorizationPolicySpec, Backend, ISTIO_DRY_RUN_ANNOTATION, Mode,
    WorkloadNetworkPolicy, WorkloadNetworkPolicyStatus, WorkloadSelector,
};

use super::{
    Action, Config, Event, MANAGED_BY, ObjectKey, Plan, RuleIssues, World, annotation,
    condition_changed, label, name_of, namespace_of, owned_by, owner_reference, set_condition,
    version_key,
};

const POLICY: &str = "WorkloadNetworkPolicy";

/// What happened to one policy's native object this round.
enum Native {
    /// In place and up to date.
    InPlace(String),
    /// Written this round.
    Writing(String),
    /// Not wanted (Kubernetes backend in monitor mode).
    Absent,
    /// A same-named object not controlled by the policy.
    Conflict(String),
    /// Cannot exist: (reason, message).
    Impossible(&'static str, String),
}

pub(super) fn plan(world: &World<'_>, config: &Config, plan: &mut Plan) {
    for w in world.policies {
        let Some(uid) = w.metadata.uid.as_deref() else {
            continue;
        };
        let native = if w.spec.backend != config.backend {
            Native::Impossible(
                "BackendNotActive",
                format!(
                    "spec.backend is {:?} but the active provider uses {:?}: this policy is \
                     neither monitored nor enforced, and its native objects are left alone",
                    w.spec.backend, config.backend
                ),
            )
        } else {
            match w.spec.backend {
                Backend::Kubernetes => network_policy(w, uid, world, plan),
                Backend::Istio => authorization_policy(w, uid, world, plan),
            }
        };
        conditions(w, native, world, plan);
    }
}

fn meta(w: &WorkloadNetworkPolicy, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name_of(w).to_owned()),
        namespace: Some(namespace_of(w).to_owned()),
        labels: Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into()),
        owner_references: Some(vec![owner_reference(
            &WorkloadNetworkPolicy::api_version(&()),
            POLICY,
            name_of(w),
            uid,
            true,
        )]),
        ..ObjectMeta::default()
    }
}

fn conflict_event(w: &WorkloadNetworkPolicy, other: &impl Resource, kind: &str) -> Action {
    Action::Event(Event {
        kind: POLICY,
        regarding: ObjectKey::of(w),
        warning: true,
        reason: "NativePolicyConflict",
        note: format!(
            "{kind} {}/{} exists and is not controlled by this policy: it was not changed",
            namespace_of(w),
            name_of(w)
        ),
        key: format!(
            "{}|{}",
            version_key(w, "conflict"),
            version_key(other, kind)
        ),
    })
}

fn network_policy(
    w: &WorkloadNetworkPolicy,
    uid: &str,
    world: &World<'_>,
    plan: &mut Plan,
) -> Native {
    let existing = world
        .network_policies
        .iter()
        .find(|np| namespace_of(*np) == namespace_of(w) && name_of(*np) == name_of(w));
    let what = format!("NetworkPolicy {}/{}", namespace_of(w), name_of(w));
    if let Some(np) = existing
        && !owned_by(np, uid, true)
    {
        plan.actions.push(conflict_event(w, np, "NetworkPolicy"));
        return Native::Conflict(what);
    }
    match w.spec.mode {
        Mode::Monitor => {
            if let Some(np) = existing {
                plan.actions
                    .push(Action::DeleteNetworkPolicy(ObjectKey::of(np)));
            }
            Native::Absent
        }
        Mode::Protect => {
            let mut metadata = meta(w, uid);
            metadata.uid = existing.and_then(|np| np.metadata.uid.clone());
            let desired = NetworkPolicy {
                metadata,
                spec: w.spec.kubernetes.clone(),
            };
            let current = existing.is_some_and(|np| {
                np.spec.as_ref().map(defaulted) == desired.spec.as_ref().map(defaulted)
                    && label(np, MANAGED_BY.0) == Some(MANAGED_BY.1)
            });
            if current {
                Native::InPlace(what)
            } else {
                plan.actions
                    .push(Action::ApplyNetworkPolicy(Box::new(desired)));
                Native::Writing(what)
            }
        }
    }
}

/// A NetworkPolicy spec as the API server stores it: a port without protocol is TCP, and an
/// empty list or map is the same as none. Comparing stored and desired specs this way keeps
/// a hand-written policy that relies on defaults from being rewritten every round.
fn defaulted(spec: &NetworkPolicySpec) -> NetworkPolicySpec {
    fn selector(s: &Option<LabelSelector>) -> Option<LabelSelector> {
        s.as_ref()
            .map(|s| LabelSelector {
                match_labels: s.match_labels.clone().filter(|m| !m.is_empty()),
                match_expressions: s.match_expressions.clone().filter(|e| !e.is_empty()),
            })
            .filter(|s| s.match_labels.is_some() || s.match_expressions.is_some())
    }
    fn peers(p: &Option<Vec<NetworkPolicyPeer>>) -> Option<Vec<NetworkPolicyPeer>> {
        let out: Vec<NetworkPolicyPeer> = p
            .iter()
            .flatten()
            .map(|p| NetworkPolicyPeer {
                ip_block: p.ip_block.clone(),
                namespace_selector: p
                    .namespace_selector
                    .as_ref()
                    .map(|n| selector(&Some(n.clone())).unwrap_or_default()),
                pod_selector: p
                    .pod_selector
                    .as_ref()
                    .map(|n| selector(&Some(n.clone())).unwrap_or_default()),
            })
            .collect();
        (!out.is_empty()).then_some(out)
    }
    fn ports(p: &Option<Vec<NetworkPolicyPort>>) -> Option<Vec<NetworkPolicyPort>> {
        let out: Vec<NetworkPolicyPort> = p
            .iter()
            .flatten()
            .map(|p| NetworkPolicyPort {
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".to_owned())),
                ..p.clone()
            })
            .collect();
        (!out.is_empty()).then_some(out)
    }
    NetworkPolicySpec {
        pod_selector: selector(&spec.pod_selector),
        policy_types: spec.policy_types.clone().filter(|t| !t.is_empty()),
        ingress: spec
            .ingress
            .as_ref()
            .filter(|r| !r.is_empty())
            .map(|rules| {
                rules
                    .iter()
                    .map(|r| NetworkPolicyIngressRule {
                        from: peers(&r.from),
                        ports: ports(&r.ports),
                    })
                    .collect()
            }),
        egress: spec.egress.as_ref().filter(|r| !r.is_empty()).map(|rules| {
            rules
                .iter()
                .map(|r| NetworkPolicyEgressRule {
                    to: peers(&r.to),
                    ports: ports(&r.ports),
                })
                .collect()
        }),
    }
}

fn authorization_policy(
    w: &WorkloadNetworkPolicy,
    uid: &str,
    world: &World<'_>,
    plan: &mut Plan,
) -> Native {
    let Some(aps) = world.authorization_policies else {
        return Native::Impossible(
            "AuthorizationPolicyUnavailable",
            "the AuthorizationPolicy CRD (security.istio.io/v1) is not installed".to_owned(),
        );
    };
    let Some(istio) = &w.spec.istio else {
        return Native::Impossible(
            "InvalidSpec",
            "spec.istio is missing for backend istio".to_owned(),
        );
    };
    if istio
        .selector
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return Native::Impossible(
            "SelectorNotExpressible",
            "spec.istio.selector uses matchExpressions, which an AuthorizationPolicy selector \
             cannot express: use matchLabels only"
                .to_owned(),
        );
    }
    let existing = aps
        .iter()
        .find(|ap| namespace_of(*ap) == namespace_of(w) && name_of(*ap) == name_of(w));
    let what = format!("AuthorizationPolicy {}/{}", namespace_of(w), name_of(w));
    if let Some(ap) = existing
        && !owned_by(ap, uid, true)
    {
        plan.actions
            .push(conflict_event(w, ap, "AuthorizationPolicy"));
        return Native::Conflict(what);
    }
    let monitor = w.spec.mode == Mode::Monitor;
    let mut metadata = meta(w, uid);
    metadata.uid = existing.and_then(|ap| ap.metadata.uid.clone());
    if monitor {
        metadata.annotations =
            Some([(ISTIO_DRY_RUN_ANNOTATION.to_owned(), "true".to_owned())].into());
    }
    let desired = AuthorizationPolicy {
        metadata,
        spec: AuthorizationPolicySpec {
            selector: Some(WorkloadSelector {
                match_labels: istio.selector.match_labels.clone().unwrap_or_default(),
            }),
            action: Some("ALLOW".to_owned()),
            rules: istio.rules.clone(),
        },
    };
    let current = existing.is_some_and(|ap| {
        ap.spec == desired.spec
            && (annotation(ap, ISTIO_DRY_RUN_ANNOTATION) == Some("true")) == monitor
            && label(ap, MANAGED_BY.0) == Some(MANAGED_BY.1)
    });
    if current {
        Native::InPlace(what)
    } else {
        plan.actions
            .push(Action::ApplyAuthorizationPolicy(Box::new(desired)));
        Native::Writing(what)
    }
}

fn conditions(w: &WorkloadNetworkPolicy, native: Native, world: &World<'_>, plan: &mut Plan) {
    let generation = w.metadata.generation;
    let existing = w
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let monitor = w.spec.mode == Mode::Monitor;
    let (ready, reason, message) = match &native {
        Native::InPlace(what) if monitor => (
            true,
            "Monitoring",
            format!("{what} is in dry-run; violations are recorded, nothing is blocked"),
        ),
        Native::InPlace(what) => (true, "Enforced", format!("{what} enforces this policy")),
        Native::Writing(what) => (false, "Applying", format!("{what} is being written")),
        Native::Absent => (
            true,
            "Monitoring",
            "violations are recorded; no NetworkPolicy exists, nothing is blocked".to_owned(),
        ),
        Native::Conflict(what) => (
            false,
            "NativePolicyConflict",
            format!("{what} exists and is not controlled by this policy; nothing is enforced"),
        ),
        Native::Impossible(reason, message) => (false, *reason, message.clone()),
    };
    let conflict = match &native {
        Native::Conflict(what) => (
            true,
            "NotControlled",
            format!("{what} exists and is not controlled by this policy"),
        ),
        _ => (false, "NoConflict", String::new()),
    };
    let key = (namespace_of(w).to_owned(), name_of(w).to_owned());
    let peers = peers_condition(world.rule_issues.get(&key));
    if !peers.0 {
        // Once per spec (generation) and finding: status writes do not repeat it.
        plan.actions.push(Action::Event(Event {
            kind: POLICY,
            regarding: ObjectKey::of(w),
            warning: true,
            reason: peers.1,
            note: peers.2.clone(),
            key: format!(
                "{}@{}:PeersResolved:{}",
                w.metadata.uid.as_deref().unwrap_or_default(),
                generation.unwrap_or_default(),
                peers.2
            ),
        }));
    }
    let quiet = quiet_condition(w.status.as_ref());
    let safe = super::safety::protect_safe(super::safety::Subject::policy(w, world), world);
    let desired = vec![
        set_condition(
            existing, "Ready", ready, reason, message, world.now, generation,
        ),
        set_condition(
            existing,
            "NativePolicyConflict",
            conflict.0,
            conflict.1,
            conflict.2,
            world.now,
            generation,
        ),
        set_condition(
            existing,
            "PeersResolved",
            peers.0,
            peers.1,
            peers.2,
            world.now,
            generation,
        ),
        set_condition(
            existing, "Quiet", quiet.0, quiet.1, quiet.2, world.now, generation,
        ),
        set_condition(
            existing,
            "ProtectSafe",
            safe.0,
            safe.1,
            safe.2,
            world.now,
            generation,
        ),
    ];

    if condition_changed(existing, &desired) {
        plan.actions.push(Action::ApplyPolicyStatus {
            key: ObjectKey::of(w),
            observed_generation: generation,
            conditions: desired,
        });
    }
}

/// The `Quiet` condition: (status, reason, message). True while no violation is active
/// (every record acknowledged, or none seen); its last transition is when the policy became
/// quiet, and the message says when the last violation was seen, so that a user can tell
/// how long it has been quiet before switching to protect. Follows the records one round
/// behind (they are written in the same round, by their own writer).
fn quiet_condition(status: Option<&WorkloadNetworkPolicyStatus>) -> (bool, &'static str, String) {
    let active = status.map_or(0, |s| s.active_violation_count);
    let last = status.and_then(|s| s.last_violation_time.as_ref());
    match (active, last) {
        (0, None) => (
            true,
            "NoActiveViolations",
            "no violation has been seen".to_owned(),
        ),
        (0, Some(t)) => (
            true,
            "NoActiveViolations",
            format!("no active violation; the last was seen at {}", t.0),
        ),
        (n, last) => (
            false,
            "ActiveViolations",
            format!(
                "{n} active violation(s), the last seen at {}: add rules for what is expected, \
                 then acknowledge",
                last.map_or_else(|| "an unknown time".to_owned(), |t| t.0.to_string())
            ),
        ),
    }
}

/// How many paths a condition message lists before it says how many more there are.
const LISTED_PATHS: usize = 5;

fn listed(paths: &[String]) -> String {
    let mut text = paths
        .iter()
        .take(LISTED_PATHS)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if paths.len() > LISTED_PATHS {
        text.push_str(&format!(" and {} more", paths.len() - LISTED_PATHS));
    }
    text
}

/// The `PeersResolved` condition: (status, reason, message). Rules are applied as written
/// whatever it says; it tells the user why a rule allows less than it seems to.
fn peers_condition(issues: Option<&RuleIssues>) -> (bool, &'static str, String) {
    let Some(issues) = issues.filter(|i| !i.is_empty()) else {
        return (
            true,
            "PeersResolved",
            "every rule is valid and each of its peers selects something in the cluster".to_owned(),
        );
    };
    let unselected = (!issues.unselected.is_empty()).then(|| {
        format!(
            "these peers select no pod or workload in the cluster, so they allow nothing \
             (check their labels, namespaces or service accounts): {}",
            listed(&issues.unselected)
        )
    });
    if issues.invalid.is_empty() {
        return (false, "PeerSelectsNothing", unselected.unwrap_or_default());
    }
    let mut message = format!(
        "invalid parts of the rules match nothing: {}",
        listed(&issues.invalid)
    );
    if let Some(unselected) = unselected {
        message.push_str(". Also, ");
        message.push_str(&unselected);
    }
    (false, "InvalidRule", message)
}
