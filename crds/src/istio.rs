//! Istio's `security.istio.io/v1` AuthorizationPolicy, reduced to what Network Enforcer
//! writes: an `ALLOW` policy with a `matchLabels` selector and L4 rules. Not one of our
//! CRDs (Istio installs it; `crdgen` never writes it): the type exists so the leader can
//! read and apply these objects with the typed API.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::spec::IstioRule;

/// The annotation that makes Istio evaluate a policy without enforcing it (monitor mode).
pub const ISTIO_DRY_RUN_ANNOTATION: &str = "istio.io/dry-run";

/// Spec of an Istio AuthorizationPolicy, as far as L4 ALLOW policies go.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "security.istio.io",
    version = "v1",
    kind = "AuthorizationPolicy",
    plural = "authorizationpolicies",
    namespaced,
    derive = "PartialEq"
)]
pub struct AuthorizationPolicySpec {
    /// The pods the policy applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<WorkloadSelector>,
    /// `ALLOW`, `DENY`, `AUDIT` or `CUSTOM`; Network Enforcer writes `ALLOW`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Allowed traffic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<IstioRule>,
}

/// Istio's workload selector: labels only (no expressions).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}
