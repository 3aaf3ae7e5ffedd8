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

/// Why traffic is a violation of a WorkloadNetworkPolicy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ViolationReason {
    /// No rule of the direction admits the peer.
    NoRuleForPeer,
    /// A rule admits the peer, but not on this port.
    PortNotAllowed,
    /// A rule admits the peer on this port, but over another protocol.
    ProtocolNotAllowed,
    /// The data plane denied the connection (protect mode), or the dry-run policy of a
    /// monitored workload would have.
    DeniedByDataPlane,
}

impl ViolationReason {
    /// The reason's name, as the record and the OpenTelemetry event carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationReason::NoRuleForPeer => "NoRuleForPeer",
            ViolationReason::PortNotAllowed => "PortNotAllowed",
            ViolationReason::ProtocolNotAllowed => "ProtocolNotAllowed",
            ViolationReason::DeniedByDataPlane => "DeniedByDataPlane",
        }
    }
}
