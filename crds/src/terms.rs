//! The terms that both the spec and the status use: a policy's traffic direction and its
//! enforcement mode (a violation record carries both).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Traffic direction, as a Kubernetes NetworkPolicy policyType.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum PolicyDirection {
    /// Traffic arriving at the target workload.
    Ingress,
    /// Traffic leaving the target workload.
    Egress,
}

/// Enforcement mode of a WorkloadNetworkPolicy (`monitor` or `protect`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Record violations, block nothing.
    #[default]
    Monitor,
    /// Create the native policy and record what the data plane blocks.
    Protect,
}
