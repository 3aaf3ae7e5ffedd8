//! The OpenTelemetry names (docs/architecture.md, "OpenTelemetry"), in one place: the leader
//! emits its violation log events with these, and the Helm chart's collector config (a
//! counter per `policy_violation_observed` event, dimensioned by the fixed attributes) is
//! tested against them (`tests/tests/chart.rs`). Renaming one here without the chart fails
//! that test.

/// Instrumentation scope of the log events.
pub const LOG_SCOPE: &str = "network-enforcer";

/// Log event for a flow a `WorkloadNetworkPolicy` does not allow.
pub const EVENT_VIOLATION_OBSERVED: &str = "policy_violation_observed";
/// Log event for a violation a user acknowledged (adds [`REASON`]).
pub const EVENT_VIOLATION_ACKNOWLEDGED: &str = "policy_violation_acknowledged";
/// The log attribute carrying the event name, for receivers that read events by attribute
/// rather than by the log record's `EventName` field. Emitters set both.
pub const EVENT_NAME_ATTRIBUTE: &str = "event.name";

/// `cilium`, `calico` or `istio`.
pub const ENFORCEMENT_PROVIDER: &str = "enforcement.provider";
/// `monitor` or `protect`.
pub const ACTION: &str = "action";
pub const SOURCE_WORKLOAD_NAME: &str = "source.workload.name";
pub const SOURCE_WORKLOAD_NAMESPACE: &str = "source.workload.namespace";
pub const SOURCE_WORKLOAD_KIND: &str = "source.workload.kind";
pub const SOURCE_WORKLOAD_IDENTITY: &str = "source.workload.identity";
pub const DESTINATION_WORKLOAD_NAME: &str = "destination.workload.name";
pub const DESTINATION_WORKLOAD_NAMESPACE: &str = "destination.workload.namespace";
pub const DESTINATION_WORKLOAD_KIND: &str = "destination.workload.kind";
pub const DESTINATION_WORKLOAD_IDENTITY: &str = "destination.workload.identity";
/// `tcp`, `udp` or `sctp`.
pub const NETWORK_TRANSPORT: &str = "network.transport";
pub const DESTINATION_PORT: &str = "destination.port";
pub const POLICY_REF_NAMESPACE: &str = "policy.ref.namespace";
pub const POLICY_REF_NAME: &str = "policy.ref.name";
/// The violation record's id in the policy's status (monotonic per policy).
pub const VIOLATION_ID: &str = "violation.id";
/// `ingress` or `egress`.
pub const NETWORK_DIRECTION: &str = "network.direction";
/// Flows of the tuple seen so far (the record's count; for unattributed traffic, the
/// data plane's total). Not one of the fixed [`VIOLATION_ATTRIBUTES`]: an addition every
/// event has.
pub const VIOLATION_COUNT: &str = "violation.count";
/// Why a violation was acknowledged (acknowledged event only).
pub const REASON: &str = "reason";
/// Why the traffic is a violation (`NoRuleForPeer`, `PortNotAllowed`, `ProtocolNotAllowed`,
/// `DeniedByDataPlane`), as the record says; absent when the record has none. Like
/// [`VIOLATION_COUNT`], an addition to the fixed attributes.
pub const VIOLATION_REASON: &str = "violation.reason";
/// For `DeniedByDataPlane`: the policy the data plane blamed (`namespace/name`, or `name`
/// for a cluster-wide policy), as the record says; absent when the data plane named none.
/// An addition to the fixed attributes.
pub const VIOLATION_DENIED_BY: &str = "violation.denied_by";

/// The attributes every violation event carries, for every provider.
pub const VIOLATION_ATTRIBUTES: [&str; 16] = [
    ENFORCEMENT_PROVIDER,
    ACTION,
    SOURCE_WORKLOAD_NAME,
    SOURCE_WORKLOAD_NAMESPACE,
    SOURCE_WORKLOAD_KIND,
    SOURCE_WORKLOAD_IDENTITY,
    DESTINATION_WORKLOAD_NAME,
    DESTINATION_WORKLOAD_NAMESPACE,
    DESTINATION_WORKLOAD_KIND,
    DESTINATION_WORKLOAD_IDENTITY,
    NETWORK_TRANSPORT,
    DESTINATION_PORT,
    POLICY_REF_NAMESPACE,
    POLICY_REF_NAME,
    VIOLATION_ID,
    NETWORK_DIRECTION,
];

/// The dimensions of the collector's violation counter: every fixed attribute but
/// [`VIOLATION_ID`], which is different on every record and would make one series per
/// violation.
pub fn violation_counter_dimensions() -> impl Iterator<Item = &'static str> {
    VIOLATION_ATTRIBUTES
        .into_iter()
        .filter(|key| *key != VIOLATION_ID)
}

/// Name of the counter the chart's default collector derives from
/// [`EVENT_VIOLATION_OBSERVED`] events (Prometheus: `network_enforcer_policy_violation_events_total`).
/// It differs from the leader's own `network_enforcer_violations_observed_total` so the two
/// never collide in one Prometheus.
pub const COLLECTOR_VIOLATION_COUNTER: &str = "network_enforcer.policy_violation_events";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_are_distinct_and_dotted_lowercase() {
        let mut seen = std::collections::BTreeSet::new();
        for key in VIOLATION_ATTRIBUTES
            .into_iter()
            .chain([REASON, VIOLATION_COUNT])
        {
            assert!(seen.insert(key), "{key} is listed twice");
            assert!(
                key.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_'),
                "{key} is not a lower-case dotted name"
            );
        }
    }

    #[test]
    fn counter_dimensions_leave_out_only_the_violation_id() {
        let dims: Vec<_> = violation_counter_dimensions().collect();
        assert_eq!(dims.len(), VIOLATION_ATTRIBUTES.len() - 1);
        assert!(!dims.contains(&VIOLATION_ID));
        assert!(dims.contains(&ENFORCEMENT_PROVIDER) && dims.contains(&ACTION));
    }
}
