//! The OpenTelemetry log events of violations (docs/architecture.md, "OpenTelemetry"): one
//! attribute set for every provider, named in [`ne_policy::otel_names`].
//!
//! Place in the data flow: the controller's writer turns the records a status write
//! carried ([`crate::controller::plan::Action::ApplyViolations`]) into events once the
//! write succeeded, and the controller turns unattributed observations into events with an
//! empty policy reference; both go to the OTLP logs exporter ([`ne_telemetry::logs`]).
//! [`Reported`] remembers what was already exported, so a record is reported at most once
//! per change, whatever the cache lag or the retries.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ne_crds::{
    AcknowledgedViolation, Mode, PolicyDirection, ViolationReason, ViolationRecord,
    WorkloadEndpointRef,
};
use ne_policy::otel_names as names;
use ne_telemetry::logs::{LogEvent, Severity, Value};

use super::record::Observation;

/// The policy an event is about: namespace and name, or `None` (unattributed: both
/// attributes are empty).
pub type PolicyRef<'a> = Option<(&'a str, &'a str)>;

/// What every violation event says about the traffic.
struct Tuple<'a> {
    source: &'a WorkloadEndpointRef,
    destination: &'a WorkloadEndpointRef,
    protocol: &'a str,
    port: i32,
    direction: PolicyDirection,
    mode: Mode,
    /// 0 for unattributed observations (they have no record).
    id: i64,
    count: i64,
    reason: Option<ViolationReason>,
    denied_by: Option<&'a str>,
}

impl<'a> From<&'a ViolationRecord> for Tuple<'a> {
    fn from(r: &'a ViolationRecord) -> Self {
        Tuple {
            source: &r.source,
            destination: &r.destination,
            protocol: &r.protocol,
            port: r.port,
            direction: r.direction,
            mode: r.mode,
            id: r.id,
            count: r.count,
            reason: r.reason,
            denied_by: r.denied_by.as_deref(),
        }
    }
}

impl<'a> From<&'a Observation> for Tuple<'a> {
    fn from(o: &'a Observation) -> Self {
        Tuple {
            source: &o.source,
            destination: &o.destination,
            protocol: &o.protocol,
            port: o.port,
            direction: o.direction,
            mode: o.mode,
            id: 0,
            count: o.count,
            reason: Some(o.reason),
            denied_by: o.denied_by.as_deref(),
        }
    }
}

fn text(s: impl Into<String>) -> Value {
    Value::Str(s.into())
}

/// `(name, namespace, kind, identity)` of one end: a workload by its name, an address
/// outside the cluster by its address (kind `External`); empty when not known.
fn workload(e: &WorkloadEndpointRef) -> [Value; 4] {
    let name = e.name.as_deref().or(e.ip.as_deref()).unwrap_or_default();
    let kind = match (&e.kind, &e.name, &e.ip) {
        (Some(kind), _, _) => kind.as_str(),
        (None, None, Some(_)) => "External",
        _ => "",
    };
    [
        text(name),
        text(e.namespace.as_deref().unwrap_or_default()),
        text(kind),
        text(e.identity.as_deref().unwrap_or_default()),
    ]
}

fn to_time(t: &Time) -> SystemTime {
    let nanos = t.0.as_nanosecond();
    match u64::try_from(nanos) {
        Ok(n) => SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(n),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

fn event(
    name: &'static str,
    severity: Severity,
    time: SystemTime,
    provider: &str,
    policy: PolicyRef<'_>,
    t: &Tuple<'_>,
) -> LogEvent {
    let [sn, sns, sk, si] = workload(t.source);
    let [dn, dns, dk, di] = workload(t.destination);
    let (policy_namespace, policy_name) = policy.unwrap_or_default();
    let mut attributes = vec![
        (names::ENFORCEMENT_PROVIDER, text(provider)),
        (
            names::ACTION,
            text(match t.mode {
                Mode::Monitor => "monitor",
                Mode::Protect => "protect",
            }),
        ),
        (names::SOURCE_WORKLOAD_NAME, sn),
        (names::SOURCE_WORKLOAD_NAMESPACE, sns),
        (names::SOURCE_WORKLOAD_KIND, sk),
        (names::SOURCE_WORKLOAD_IDENTITY, si),
        (names::DESTINATION_WORKLOAD_NAME, dn),
        (names::DESTINATION_WORKLOAD_NAMESPACE, dns),
        (names::DESTINATION_WORKLOAD_KIND, dk),
        (names::DESTINATION_WORKLOAD_IDENTITY, di),
        (
            names::NETWORK_TRANSPORT,
            text(t.protocol.to_ascii_lowercase()),
        ),
        (names::DESTINATION_PORT, Value::Int(i64::from(t.port))),
        (names::POLICY_REF_NAMESPACE, text(policy_namespace)),
        (names::POLICY_REF_NAME, text(policy_name)),
        (names::VIOLATION_ID, Value::Int(t.id)),
        (
            names::NETWORK_DIRECTION,
            text(match t.direction {
                PolicyDirection::Ingress => "ingress",
                PolicyDirection::Egress => "egress",
            }),
        ),
        (names::VIOLATION_COUNT, Value::Int(t.count)),
    ];
    if let Some(reason) = t.reason {
        attributes.push((names::VIOLATION_REASON, text(reason.as_str())));
    }
    if let Some(policy) = t.denied_by {
        attributes.push((names::VIOLATION_DENIED_BY, text(policy)));
    }
    LogEvent {
        name,
        severity,
        time,
        attributes,
    }
}

/// `policy_violation_observed` (WARN) for a record created or changed, carrying its count.
pub fn observed(provider: &str, policy: PolicyRef<'_>, record: &ViolationRecord) -> LogEvent {
    event(
        names::EVENT_VIOLATION_OBSERVED,
        Severity::Warn,
        to_time(&record.last_seen),
        provider,
        policy,
        &record.into(),
    )
}

/// `policy_violation_observed` (WARN) for traffic no policy covers: no record, id 0, an
/// empty policy reference.
pub fn unattributed(provider: &str, observation: &Observation) -> LogEvent {
    event(
        names::EVENT_VIOLATION_OBSERVED,
        Severity::Warn,
        to_time(&observation.last_seen),
        provider,
        None,
        &observation.into(),
    )
}

/// `policy_violation_acknowledged` (INFO), with the user's reason.
pub fn acknowledged(provider: &str, policy: PolicyRef<'_>, a: &AcknowledgedViolation) -> LogEvent {
    let mut e = event(
        names::EVENT_VIOLATION_ACKNOWLEDGED,
        Severity::Info,
        a.acknowledged_at
            .as_ref()
            .map_or_else(SystemTime::now, to_time),
        provider,
        policy,
        &(&a.violation).into(),
    );
    e.attributes
        .push((names::REASON, text(a.reason.as_deref().unwrap_or_default())));
    e
}

/// What was reported, so each change is reported once: per key (a policy's uid and a
/// record id, or an unattributed tuple), the count last reported. Bounded: past
/// `capacity` keys the oldest are forgotten (a forgotten record is reported again at its
/// next change, never lost).
#[derive(Debug)]
pub struct Reported<K> {
    counts: HashMap<K, i64>,
    order: VecDeque<K>,
    capacity: usize,
}

impl<K: std::hash::Hash + Eq + Clone> Reported<K> {
    pub fn new(capacity: usize) -> Self {
        Reported {
            counts: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Whether `count` for `key` is news (first sighting, or a larger count than the last
    /// report); remembers it if so.
    pub fn news(&mut self, key: &K, count: i64) -> bool {
        match self.counts.get_mut(key) {
            Some(last) if *last >= count => false,
            Some(last) => {
                *last = count;
                true
            }
            None => {
                if self.counts.len() >= self.capacity
                    && let Some(oldest) = self.order.pop_front()
                {
                    self.counts.remove(&oldest);
                }
                self.counts.insert(key.clone(), count);
                self.order.push_back(key.clone());
                true
            }
        }
    }

    /// The count last reported for `key`, if remembered.
    pub fn last(&self, key: &K) -> Option<i64> {
        self.counts.get(key).copied()
    }
}
