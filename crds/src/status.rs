//! Status types: what the leader writes back after learning (proposal evidence) and after
//! monitoring (policy violations).
//!
//! Lists are always serialized, even when empty, so a JSON merge patch of the status clears
//! them; optional scalars are omitted when unset.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::terms::{Mode, PolicyDirection, ViolationReason};

/// Most records kept in `violations` and in `acknowledgedViolations`.
pub const MAX_VIOLATION_RECORDS: usize = 100;

/// Status of a WorkloadNetworkPolicyProposal: the evidence behind the learned rules.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicyProposalStatus {
    /// When learning for this workload and direction started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_since: Option<Time>,
    /// Latest observations of the proposal's state, one per condition type.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Evidence per peer, protocol and port: each entry backs one allowed connection in the spec.
    #[serde(default)]
    pub peers: Vec<PeerEvidence>,
    /// Total flows merged into this proposal since `learningSince`.
    #[serde(default)]
    pub flow_count: i64,
    /// Distinct peers in `peers` (a summary for `kubectl get`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub peer_count: i64,
    /// The protocols and ports of `peers`, e.g. `TCP/8080,UDP/53`: the first
    /// eight, then `+N` for the rest; `*` is a rule for any port.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ports: String,
    /// The latest `lastSeen` of `peers`: when traffic of the proposal was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,
    /// The latest `firstSeen` of `peers`: when a peer, protocol or port was last added.
    /// Stable since then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_learned: Option<Time>,
}

/// How many protocol/port pairs [`WorkloadNetworkPolicyProposalStatus::ports`] names.
const PORTS_SHOWN: usize = 8;

impl WorkloadNetworkPolicyProposalStatus {
    /// Sets the summary fields (`peerCount`, `ports`, `lastSeen`, `lastLearned`) from
    /// `peers`.
    pub fn summarize(&mut self) {
        let peers: std::collections::BTreeSet<&str> =
            self.peers.iter().map(|p| p.peer.as_str()).collect();
        self.peer_count = i64::try_from(peers.len()).unwrap_or(i64::MAX);
        let ports: std::collections::BTreeSet<(&str, i32)> = self
            .peers
            .iter()
            .map(|p| (p.protocol.as_str(), p.port))
            .collect();
        let mut shown: Vec<String> = ports
            .iter()
            .take(PORTS_SHOWN)
            .map(|&(protocol, port)| match port {
                0 => format!("{protocol}/*"),
                port => format!("{protocol}/{port}"),
            })
            .collect();
        if ports.len() > PORTS_SHOWN {
            shown.push(format!("+{}", ports.len() - PORTS_SHOWN));
        }
        self.ports = shown.join(",");
        self.summarize_times();
    }

    /// Sets the summary fields that follow the rows' times (`lastSeen`, `lastLearned`),
    /// for rows whose peers, protocols and ports did not change since
    /// [`WorkloadNetworkPolicyProposalStatus::summarize`].
    pub fn summarize_times(&mut self) {
        self.last_seen = self
            .peers
            .iter()
            .map(|p| &p.last_seen)
            .max_by_key(|t| t.0)
            .cloned();
        self.last_learned = self
            .peers
            .iter()
            .map(|p| &p.first_seen)
            .max_by_key(|t| t.0)
            .cloned();
    }
}

/// Observed traffic between the target workload and one peer on one protocol and port.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeerEvidence {
    /// The peer as the rule names it: pods `pods:<namespace>/<selector>`, an address
    /// `ip:<cidr>`, or a mesh identity `principal:<SPIFFE principal>`.
    pub peer: String,
    /// Transport protocol: `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Destination port of the traffic (0 when the data plane does not report it).
    #[schemars(range(min = 0, max = 65535))]
    pub port: i32,
    /// When a flow with this peer, protocol and port was first seen.
    pub first_seen: Time,
    /// When a flow with this peer, protocol and port was last seen.
    pub last_seen: Time,
    /// Number of flows seen with this peer, protocol and port.
    pub flow_count: i64,
    /// DNS names the data plane saw for the peer address (comma-separated), for peers
    /// outside the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Status of a WorkloadNetworkPolicy: violations seen in monitor or protect mode.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadNetworkPolicyStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Violations neither cleared by a rule nor acknowledged, newest first (at most 100; the
    /// oldest are dropped).
    #[serde(default)]
    #[schemars(length(max = MAX_VIOLATION_RECORDS))]
    pub violations: Vec<ViolationRecord>,
    /// Number of entries in `violations`.
    #[serde(default)]
    pub active_violation_count: i64,
    /// Every observation ever merged into `violations`, repeats included; never decremented.
    #[serde(default)]
    pub violation_count: i64,
    /// The highest violation `id` ever given (ids are never reused, even once a record is
    /// trimmed or acknowledged). Omitted while none was given.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub last_violation_id: i64,
    /// When a violation was last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_violation_time: Option<Time>,
    /// Violations acknowledged through a `networkenforcer.kubewarden.io/acknowledge-<id>`
    /// annotation, newest acknowledgement first (at most 100).
    #[serde(default)]
    #[schemars(length(max = MAX_VIOLATION_RECORDS))]
    pub acknowledged_violations: Vec<AcknowledgedViolation>,
    /// Latest observations of the policy's state (Ready, NativePolicyConflict, ...), one per
    /// condition type.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Traffic the policy denies (protect) or would deny (monitor), merged per endpoint pair,
/// protocol, port, direction and mode.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ViolationRecord {
    /// Identifier, unique within the policy: small, increasing, never reused. Acknowledge the
    /// record with the annotation `networkenforcer.kubewarden.io/acknowledge-<id>: <reason>`.
    pub id: i64,
    /// When this violation was first seen.
    pub first_seen: Time,
    /// When this violation was last seen.
    pub last_seen: Time,
    /// Number of times this violation was seen.
    pub count: i64,
    /// The side that opened the connection.
    pub source: WorkloadEndpointRef,
    /// The side that received the connection.
    pub destination: WorkloadEndpointRef,
    /// Transport protocol: `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Destination port (0 when unknown, e.g. from Istio ztunnel logs).
    #[schemars(range(min = 0, max = 65535))]
    pub port: i32,
    /// Direction relative to the policy's target: `Ingress` or `Egress`.
    pub direction: PolicyDirection,
    /// Mode in force when seen: `monitor` (allowed, recorded) or `protect` (blocked).
    pub mode: Mode,
    /// Why the traffic is a violation: `NoRuleForPeer`, `PortNotAllowed`,
    /// `ProtocolNotAllowed` (the policy's rules, checked in monitor mode) or
    /// `DeniedByDataPlane`. Absent on records written before reasons were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ViolationReason>,
    /// The reason in words, for this record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For `DeniedByDataPlane`: the policy the data plane blamed, as it names it
    /// (`namespace/name`, or `name` for a cluster-wide policy), when it says (Cilium
    /// Hubble and Calico Goldmane usually do, Istio ztunnel for explicit deny policies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denied_by: Option<String>,
}

/// One end of a violating connection; every field is optional because data planes report
/// different subsets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadEndpointRef {
    /// Namespace of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Kind of the pod's owning workload (`Deployment`, `StatefulSet`, `DaemonSet`, `Pod`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the pod's owning workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// SPIFFE identity without `spiffe://` (`<trust-domain>/ns/<ns>/sa/<sa>`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// IP address, when the endpoint is not a known pod or as reported by the data plane.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
}

/// A violation a user acknowledged; it no longer counts as active.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AcknowledgedViolation {
    /// The record as it was when acknowledged.
    pub violation: ViolationRecord,
    /// The annotation's value: why the traffic is acceptable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the acknowledgement was processed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acknowledged_at: Option<Time>,
}
