//! Custom resources of Network Enforcer (ARCHITECTURE §4): the learned
//! `WorkloadNetworkPolicyProposal` (wnpp) and the promoted `WorkloadNetworkPolicy` (wnp).
//!
//! Group `networkenforcer.kubewarden.io`, version `v1alpha1`, both namespaced with a
//! status subresource. The `crdgen` binary writes the CRD YAML the Helm chart ships.

use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of both kinds.
pub const GROUP: &str = "networkenforcer.kubewarden.io";
/// API version of both kinds.
pub const VERSION: &str = "v1alpha1";
/// Label on a proposal that promotes it (`monitor` or `protect`).
pub const PROMOTE_LABEL: &str = "networkenforcer.kubewarden.io/promote";
/// Label on a policy naming the proposal it was promoted from.
pub const PROMOTED_FROM_LABEL: &str = "networkenforcer.kubewarden.io/promoted-from";
/// Annotation prefix that acknowledges a violation: `<prefix><id>: <reason>`.
pub const ACKNOWLEDGE_ANNOTATION_PREFIX: &str = "networkenforcer.kubewarden.io/acknowledge-";

/// Which native policy a spec renders to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// A `networking.k8s.io/v1` NetworkPolicy (Cilium, Calico).
    Kubernetes,
    /// An Istio `security.istio.io/v1` AuthorizationPolicy (ambient mode).
    Istio,
}

/// Kinds of workload a policy can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TargetKind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

/// Traffic direction, as a Kubernetes NetworkPolicy policyType.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PolicyDirection {
    Ingress,
    Egress,
}

/// Enforcement mode of a WorkloadNetworkPolicy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Record violations, block nothing.
    #[default]
    Monitor,
    /// Create the native policy and record what the data plane blocks.
    Protect,
}

/// The workload a policy is about, in the policy's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TargetRef {
    /// Kind of the workload.
    pub kind: TargetKind,
    /// Name of the workload.
    pub name: String,
}

/// An Istio AuthorizationPolicy (ALLOW) restricted to what ztunnel enforces at L4.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IstioAuthorizationPolicySpec {
    /// Pods the policy applies to.
    pub selector: LabelSelector,
    /// Allowed traffic; a request is allowed when any rule matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<IstioRule>,
}

/// One ALLOW rule: any `from` entry and any `to` entry.
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
    /// `prefix*` and `*suffix` match as in Istio.
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
    /// Ports as strings: `"8080"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<String>,
}

/// Spec of a WorkloadNetworkPolicyProposal.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "networkenforcer.kubewarden.io",
    version = "v1alpha1",
    kind = "WorkloadNetworkPolicyProposal",
    shortname = "wnpp",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicyProposalSpec {
    /// Native policy kind this proposal renders to. Immutable.
    pub backend: Backend,
    /// The NetworkPolicy, when `backend` is `kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<NetworkPolicySpec>,
    /// The AuthorizationPolicy, when `backend` is `istio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioAuthorizationPolicySpec>,
    /// The workload the proposal is for.
    pub target_ref: TargetRef,
    /// The direction the proposal covers.
    pub direction: PolicyDirection,
}

/// Spec of a WorkloadNetworkPolicy.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "networkenforcer.kubewarden.io",
    version = "v1alpha1",
    kind = "WorkloadNetworkPolicy",
    shortname = "wnp",
    namespaced
)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicySpec {
    /// Native policy kind this policy renders to. Immutable.
    pub backend: Backend,
    /// The NetworkPolicy, when `backend` is `kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<NetworkPolicySpec>,
    /// The AuthorizationPolicy, when `backend` is `istio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub istio: Option<IstioAuthorizationPolicySpec>,
    /// The workload the policy is for.
    pub target_ref: TargetRef,
    /// The direction the policy covers.
    pub direction: PolicyDirection,
    /// `monitor` records violations; `protect` also creates the native policy.
    #[serde(default)]
    pub mode: Mode,
}
