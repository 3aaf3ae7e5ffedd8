//! The controller's instruments (names as in docs/architecture.md, "OpenTelemetry"; prefix
//! `network_enforcer_`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// `{kind, verb}` of an API write.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: &'static str,
    pub verb: &'static str,
}

/// `{controller, error_type}` of a failed step.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error_type: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// `{policy_namespace, mode}` of violation observations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceModeLabels {
    /// Named apart from `namespace`, which scrapers set to the scraped pod's.
    pub policy_namespace: String,
    pub mode: &'static str,
}

/// `{provider, action}` of violation observations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViolationLabels {
    pub provider: &'static str,
    pub action: &'static str,
}

/// The controller's metrics.
#[derive(Debug)]
pub struct ControllerMetrics {
    pub api_writes: Family<WriteLabels, Counter>,
    pub api_writes_deferred: Counter,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabel, Histogram>,
    /// Learned proposals left out in the last round, by reason.
    pub proposals_skipped: Family<ReasonLabel, Gauge>,
    /// Cluster objects the resolver left out in the last round (no name, bad address).
    pub objects_skipped: Gauge,
    /// Edges whose subject could not be resolved to a workload, by reason (last round).
    pub unresolved_subjects: Family<ReasonLabel, Gauge>,
    /// Edges whose peer a policy cannot express, by reason (last round).
    pub unexpressible_peers: Family<ReasonLabel, Gauge>,
    /// Edges under a monitored NetworkPolicy left unchecked: the peer is not resolved at
    /// their time, by reason (last round).
    pub unchecked_peers: Family<ReasonLabel, Gauge>,
    /// Flows of violation records (growth of their counts as reported), by provider and
    /// action.
    pub violations_observed: Family<ViolationLabels, Counter>,
    /// The same flows by the policy's namespace and mode (one series per namespace with a
    /// violating policy and mode: as many as the cluster has namespaces, at most twice).
    pub violations_by_namespace: Family<NamespaceModeLabels, Counter>,
    /// Flows of denials and dry-run denials no policy covers.
    pub violations_unattributed: Counter,
    /// Violation log events handed to the exporter, by event name.
    pub violation_events: Family<EventLabel, Counter>,
    /// Deleted pods remembered for attribution, their estimated bytes, the cap, and the
    /// ones forgotten by reason (expired, capacity).
    pub pod_history: Gauge,
    pub pod_history_bytes: Gauge,
    pub pod_history_capacity: Gauge,
    pub pod_history_evicted: Family<ReasonLabel, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabel {
    pub event: &'static str,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics {
            api_writes: Family::default(),
            api_writes_deferred: Counter::default(),
            reconcile_errors: Family::default(),
            // 1 ms to about 65 s.
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 9))
            }),
            proposals_skipped: Family::default(),
            objects_skipped: Gauge::default(),
            unresolved_subjects: Family::default(),
            unexpressible_peers: Family::default(),
            unchecked_peers: Family::default(),
            violations_observed: Family::default(),
            violations_by_namespace: Family::default(),
            violations_unattributed: Counter::default(),
            violation_events: Family::default(),
            pod_history: Gauge::default(),
            pod_history_bytes: Gauge::default(),
            pod_history_capacity: Gauge::default(),
            pod_history_evicted: Family::default(),
        }
    }
}

impl ControllerMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("network_enforcer");
        r.register(
            "leader_api_writes",
            "Writes to the API server, by kind and verb (apply, create, delete, event)",
            self.api_writes.clone(),
        );
        r.register(
            "leader_api_writes_deferred",
            "Writes left for the next round by the client-side rate limit",
            self.api_writes_deferred.clone(),
        );
        r.register(
            "leader_reconcile_errors",
            "Failed reconcile steps, by controller and error type",
            self.reconcile_errors.clone(),
        );
        r.register_with_unit(
            "leader_reconcile_duration",
            "Duration of a reconcile round (plan and writes), by controller",
            Unit::Seconds,
            self.reconcile_duration.clone(),
        );
        r.register(
            "leader_proposals_skipped",
            "Learned proposals not written in the last round, by reason",
            self.proposals_skipped.clone(),
        );
        r.register(
            "leader_cluster_objects_skipped",
            "Cluster objects the resolver left out in the last round (no name, bad address)",
            self.objects_skipped.clone(),
        );
        r.register(
            "leader_unresolved_subjects",
            "Merged edges whose subject is not a known workload, by reason (no_owner_info, not_found, ambiguous, no_selector, pod_not_listed, address_not_held, address_reused)",
            self.unresolved_subjects.clone(),
        );
        r.register(
            "leader_unexpressible_peers",
            "Merged edges whose peer a policy cannot express, by reason",
            self.unexpressible_peers.clone(),
        );
        r.register(
            "leader_monitor_unchecked_peers",
            "Merged edges under a monitored NetworkPolicy whose peer is not resolved at their time (so whether the policy allows them is unknown), by reason",
            self.unchecked_peers.clone(),
        );
        r.register(
            "violations_observed",
            "Flows that violate a WorkloadNetworkPolicy, as recorded in its status, by provider and action (monitor, protect)",
            self.violations_observed.clone(),
        );
        r.register(
            "violations_by_namespace",
            "Flows that violate a WorkloadNetworkPolicy, as recorded in its status, by the policy's namespace and mode (monitor, protect)",
            self.violations_by_namespace.clone(),
        );
        r.register(
            "violations_unattributed",
            "Flows denied by the data plane (or by a dry-run policy) whose workload no WorkloadNetworkPolicy of that mode covers",
            self.violations_unattributed.clone(),
        );
        r.register(
            "leader_violation_events",
            "Violation log events handed to the OTLP exporter, by event",
            self.violation_events.clone(),
        );
        r.register(
            "leader_pod_history_pods",
            "Deleted pods remembered so that the edges of their lifetime keep resolving to them",
            self.pod_history.clone(),
        );
        r.register_with_unit(
            "leader_pod_history",
            "Estimated memory held by the remembered deleted pods",
            Unit::Bytes,
            self.pod_history_bytes.clone(),
        );
        r.register(
            "leader_pod_history_capacity",
            "Most deleted pods remembered (--pod-history-max)",
            self.pod_history_capacity.clone(),
        );
        r.register(
            "leader_pod_history_evicted",
            "Deleted pods forgotten, by reason (expired: older than --pod-history-retention; capacity: pushed out at --pod-history-max)",
            self.pod_history_evicted.clone(),
        );
    }
}
