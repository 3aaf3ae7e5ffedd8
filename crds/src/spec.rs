//! Spec types of both kinds and the schema rules the apiserver enforces on them.
//!
//! The learner writes proposals (`WorkloadNetworkPolicyProposal`), a user promotes one into a
//! `WorkloadNetworkPolicy`, and the leader renders either into a native policy. Both specs share
//! one shape (backend + payload + target + direction) and one set of CEL rules
//! ([`SPEC_RULES`], [`BACKEND_IMMUTABLE_RULE`]) so a promoted policy is valid iff its proposal was.

use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Rule;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::status::{WorkloadNetworkPolicyProposalStatus, WorkloadNetworkPolicyStatus};
use crate::terms::{Mode, PolicyDirection};

/// DNS-subdomain pattern (RFC 1123) for workload names in `targetRef.name`.
pub const DNS_SUBDOMAIN_PATTERN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Pattern of an Istio port string: a port `"N"` or a range `"lo-hi"`, each 1-65535.
/// (`lo <= hi` is not expressible as a pattern; the leader treats an inverted range as empty.)
pub const ISTIO_PORT_PATTERN: &str = concat!(
    "^(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])",
    "(?:-(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$",
);

/// Transition rule on `spec.backend` (with `self` = the backend value).
pub const BACKEND_IMMUTABLE_RULE: (&str, &str) = ("self == oldSelf", "backend is immutable");

/// Rule (b): an Istio policy can only be Ingress.
pub const RULE_ISTIO_INGRESS_ONLY: (&str, &str) = (
    "self.backend != 'istio' || self.direction != 'Egress'",
    "istio backend supports only Ingress: ztunnel enforces inbound",
);

/// Rule (c): a NetworkPolicy covers exactly the spec's direction. Written with `size` and
/// an index rather than list equality, so that its estimated cost stays constant (the
/// apiserver rejects rules whose cost grows with an unbounded list).
pub const RULE_KUBERNETES_POLICY_TYPES: (&str, &str) = (
    "self.backend != 'kubernetes' || (has(self.kubernetes) && has(self.kubernetes.policyTypes) \
     && size(self.kubernetes.policyTypes) == 1 && self.kubernetes.policyTypes[0] == self.direction)",
    "kubernetes backend requires kubernetes.policyTypes to be exactly [direction]",
);

/// Rule (d): exactly the payload matching `backend` is set.
pub const RULE_ONE_BACKEND_PAYLOAD: (&str, &str) = (
    "self.backend == 'kubernetes' ? (has(self.kubernetes) && !has(self.istio)) \
     : (has(self.istio) && !has(self.kubernetes))",
    "backend must match exactly one populated backend spec: backend kubernetes sets only \
     kubernetes, backend istio sets only istio",
);

/// Rule (e): the NetworkPolicy's podSelector is not empty (an empty one selects every pod).
pub const RULE_KUBERNETES_SELECTOR: (&str, &str) = (
    "!has(self.kubernetes) || (has(self.kubernetes.podSelector) \
     && ((has(self.kubernetes.podSelector.matchLabels) && size(self.kubernetes.podSelector.matchLabels) > 0) \
     || (has(self.kubernetes.podSelector.matchExpressions) && size(self.kubernetes.podSelector.matchExpressions) > 0)))",
    "kubernetes.podSelector must not be empty: set at least one matchLabels entry or \
     matchExpressions term",
);

/// Rule (f): the AuthorizationPolicy's selector is not empty (an empty one selects every pod).
pub const RULE_ISTIO_SELECTOR: (&str, &str) = (
    "!has(self.istio) || (has(self.istio.selector) \
     && ((has(self.istio.selector.matchLabels) && size(self.istio.selector.matchLabels) > 0) \
     || (has(self.istio.selector.matchExpressions) && size(self.istio.selector.matchExpressions) > 0)))",
    "istio.selector must not be empty: set at least one matchLabels entry or matchExpressions term",
);

/// The spec-level CEL rules `(rule, message)` of both kinds, with `self` = `spec`.
pub const SPEC_RULES: [(&str, &str); 5] = [
    RULE_ISTIO_INGRESS_ONLY,
    RULE_KUBERNETES_POLICY_TYPES,
    RULE_ONE_BACKEND_PAYLOAD,
    RULE_KUBERNETES_SELECTOR,
    RULE_ISTIO_SELECTOR,
];

/// Builds a [`Rule`] from a `(rule, message)` pair.
fn rule((expr, message): (&str, &str)) -> Rule {
    Rule::new(expr).message(message)
}

/// Which native policy a spec renders to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A `networking.k8s.io/v1` NetworkPolicy (Cilium, Calico).
    Kubernetes,
    /// An Istio `security.istio.io/v1` AuthorizationPolicy (ambient mode).
    Istio,
}

/// Kinds of workload a policy can target.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum TargetKind {
    /// An `apps/v1` Deployment.
    Deployment,
    /// An `apps/v1` StatefulSet.
    StatefulSet,
    /// An `apps/v1` DaemonSet.
    DaemonSet,
}

/// The workload a policy is about, in the policy's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct TargetRef {
    /// Kind of the workload: `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: TargetKind,
    /// Name of the workload (a DNS subdomain, 1-253 characters).
    #[schemars(length(min = 1, max = 253), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
}

/// An Istio AuthorizationPolicy (ALLOW) restricted to what ztunnel enforces at L4.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IstioAuthorizationPolicySpec {
    /// Pods the policy applies to; must not be empty.
    pub selector: LabelSelector,
    /// Allowed traffic; a connection is allowed when any rule matches. Empty allows nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<IstioRule>,
}

/// One ALLOW rule: matches when any `from` entry and any `to` entry match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IstioRule {
    /// Allowed sources; empty allows every source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<IstioFrom>,
    /// Allowed operations; empty allows every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<IstioTo>,
}

/// A source clause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IstioFrom {
    /// The source.
    pub source: IstioSource,
}

/// Source identities.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IstioSource {
    /// SPIFFE principals without `spiffe://` (`<trust-domain>/ns/<ns>/sa/<sa>`); `*`,
    /// `prefix*` and `*suffix` match as in Istio. Empty allows every principal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<String>,
}

/// An operation clause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IstioTo {
    /// The operation.
    pub operation: IstioOperation,
}

/// Destination ports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IstioOperation {
    /// Destination ports as strings: a port `"8080"` or a range `"8000-8080"` (1-65535).
    /// Empty allows every port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(pattern(ISTIO_PORT_PATTERN)))]
    pub ports: Vec<String>,
}

/// Spec of a WorkloadNetworkPolicyProposal: a native policy learned from observed flows for
/// one workload and direction.
// Each `printcolumn(...)` repeats `type_ = ...`; that is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "networkenforcer.kubewarden.io",
    version = "v1alpha1",
    kind = "WorkloadNetworkPolicyProposal",
    plural = "workloadnetworkpolicyproposals",
    shortname = "wnpp",
    category = "networkenforcer",
    namespaced,
    status = "WorkloadNetworkPolicyProposalStatus",
    derive = "PartialEq",
    doc = "A network policy learned from observed flows for one workload and direction. \
           Label it networkenforcer.kubewarden.io/promote=monitor|protect to promote it \
           into a WorkloadNetworkPolicy.",
    printcolumn(
        name = "Backend",
        type_ = "string",
        json_path = ".spec.backend",
        description = "Native policy kind: kubernetes or istio"
    ),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.targetRef.name",
        description = "Name of the target workload"
    ),
    printcolumn(
        name = "Direction",
        type_ = "string",
        json_path = ".spec.direction",
        description = "Ingress or Egress"
    ),
    printcolumn(
        name = "Peers",
        type_ = "integer",
        json_path = ".status.peerCount",
        description = "Distinct peers learned"
    ),
    printcolumn(
        name = "Ports",
        type_ = "string",
        json_path = ".status.ports",
        description = "Protocols and ports learned"
    ),
    printcolumn(
        name = "Flows",
        type_ = "integer",
        json_path = ".status.flowCount",
        description = "Flows merged since learning started"
    ),
    printcolumn(
        name = "Stable",
        type_ = "date",
        json_path = ".status.lastLearned",
        description = "Time since a peer, protocol or port was last added"
    ),
    printcolumn(
        name = "Last Seen",
        type_ = "date",
        json_path = ".status.lastSeen",
        description = "Time since traffic of the proposal was last seen"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the object was created"
    )
)]
#[x_kube(
    validation = rule(RULE_ISTIO_INGRESS_ONLY),
    validation = rule(RULE_KUBERNETES_POLICY_TYPES),
    validation = rule(RULE_ONE_BACKEND_PAYLOAD),
    validation = rule(RULE_KUBERNETES_SELECTOR),
    validation = rule(RULE_ISTIO_SELECTOR)
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicyProposalSpec {
    /// Native policy kind this proposal renders to: `kubernetes` (NetworkPolicy) or `istio`
    /// (AuthorizationPolicy). Immutable.
    #[x_kube(validation = rule(BACKEND_IMMUTABLE_RULE))]
    pub backend: Backend,
    /// The NetworkPolicy spec; set iff `backend` is `kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<NetworkPolicySpec>,
    /// The AuthorizationPolicy spec; set iff `backend` is `istio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioAuthorizationPolicySpec>,
    /// The workload the proposal is for, in the proposal's namespace.
    pub target_ref: TargetRef,
    /// The direction the proposal covers: `Ingress` or `Egress` (`istio` supports only Ingress).
    pub direction: PolicyDirection,
}

impl WorkloadNetworkPolicyProposalSpec {
    /// The spec of the policy this proposal is promoted to, in `mode`.
    pub fn promoted(&self, mode: Mode) -> WorkloadNetworkPolicySpec {
        WorkloadNetworkPolicySpec {
            backend: self.backend,
            kubernetes: self.kubernetes.clone(),
            istio: self.istio.clone(),
            target_ref: self.target_ref.clone(),
            direction: self.direction,
            mode,
        }
    }
}

/// Spec of a WorkloadNetworkPolicy: a policy in force for one workload and direction.
// Each `printcolumn(...)` repeats `type_ = ...`; that is not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "networkenforcer.kubewarden.io",
    version = "v1alpha1",
    kind = "WorkloadNetworkPolicy",
    plural = "workloadnetworkpolicies",
    shortname = "wnp",
    category = "networkenforcer",
    namespaced,
    status = "WorkloadNetworkPolicyStatus",
    derive = "PartialEq",
    doc = "A network policy for one workload and direction. In monitor mode Network Enforcer \
           records traffic the policy would deny; in protect mode it also creates the native \
           policy and records what the data plane blocks.",
    printcolumn(
        name = "Mode",
        type_ = "string",
        json_path = ".spec.mode",
        description = "monitor or protect"
    ),
    printcolumn(
        name = "Backend",
        type_ = "string",
        json_path = ".spec.backend",
        description = "Native policy kind: kubernetes or istio"
    ),
    printcolumn(
        name = "Active Violations",
        type_ = "integer",
        json_path = ".status.activeViolationCount",
        description = "Violations neither cleared nor acknowledged"
    ),
    printcolumn(
        name = "Last Violation",
        type_ = "date",
        json_path = ".status.lastViolationTime",
        description = "When a violation was last seen"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the object was created"
    )
)]
#[x_kube(
    validation = rule(RULE_ISTIO_INGRESS_ONLY),
    validation = rule(RULE_KUBERNETES_POLICY_TYPES),
    validation = rule(RULE_ONE_BACKEND_PAYLOAD),
    validation = rule(RULE_KUBERNETES_SELECTOR),
    validation = rule(RULE_ISTIO_SELECTOR)
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicySpec {
    /// Native policy kind this policy renders to: `kubernetes` (NetworkPolicy) or `istio`
    /// (AuthorizationPolicy). Immutable.
    #[x_kube(validation = rule(BACKEND_IMMUTABLE_RULE))]
    pub backend: Backend,
    /// The NetworkPolicy spec; set iff `backend` is `kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<NetworkPolicySpec>,
    /// The AuthorizationPolicy spec; set iff `backend` is `istio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioAuthorizationPolicySpec>,
    /// The workload the policy is for, in the policy's namespace.
    pub target_ref: TargetRef,
    /// The direction the policy covers: `Ingress` or `Egress` (`istio` supports only Ingress).
    pub direction: PolicyDirection,
    /// `monitor` records traffic the policy would deny; `protect` also creates the native
    /// policy and records what the data plane blocks.
    #[serde(default)]
    pub mode: Mode,
}
