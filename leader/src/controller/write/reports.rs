//! Violation log events: what a successful status write carried, reported once per
//! record change.

use ne_crds::{AcknowledgedViolation, Mode, ViolationRecord};
use ne_flow::edge::Provider;
use ne_telemetry::logs::LogSender;

use super::super::metrics::{ControllerMetrics, EventLabel, NamespaceModeLabels, ViolationLabels};
use super::ObjectKey;
use crate::violations::events::{self, Reported};

/// Records reported, remembered per policy uid and record id.
const REPORTED_MEMORY: usize = 100_000;

/// Where violation log events go, and what was reported already.
pub struct ViolationEvents {
    provider: &'static str,
    sender: LogSender,
    observed: Reported<(String, i64)>,
    acknowledged: Reported<(String, i64)>,
}

impl std::fmt::Debug for ViolationEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViolationEvents")
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl ViolationEvents {
    pub fn new(provider: Provider, sender: LogSender) -> Self {
        ViolationEvents {
            provider: provider.as_str(),
            sender,
            observed: Reported::new(REPORTED_MEMORY),
            acknowledged: Reported::new(REPORTED_MEMORY),
        }
    }

    /// Reports what a successful status write of `key` carried: each record's growth once
    /// (to the metrics and as an event), each acknowledgement once.
    pub(super) fn written(
        &mut self,
        key: &ObjectKey,
        observed: &[ViolationRecord],
        acknowledged: &[AcknowledgedViolation],
        metrics: &ControllerMetrics,
    ) {
        let uid = key.uid.clone().unwrap_or_default();
        let policy = Some((key.namespace.as_str(), key.name.as_str()));
        for r in observed {
            let id = (uid.clone(), r.id);
            let before = self.observed.last(&id).unwrap_or(0);
            if !self.observed.news(&id, r.count) {
                continue;
            }
            let flows = u64::try_from(r.count - before).unwrap_or(0);
            metrics
                .violations_observed
                .get_or_create(&ViolationLabels {
                    provider: self.provider,
                    action: action(r.mode),
                })
                .inc_by(flows);
            metrics
                .violations_by_namespace
                .get_or_create(&NamespaceModeLabels {
                    policy_namespace: key.namespace.clone(),
                    mode: action(r.mode),
                })
                .inc_by(flows);
            self.emit(events::observed(self.provider, policy, r), metrics);
        }
        for a in acknowledged {
            if self.acknowledged.news(&(uid.clone(), a.violation.id), 1) {
                self.emit(events::acknowledged(self.provider, policy, a), metrics);
            }
        }
    }

    fn emit(&self, event: ne_telemetry::logs::LogEvent, metrics: &ControllerMetrics) {
        let name = event.name;
        if self.sender.is_enabled() && self.sender.emit(event) {
            metrics
                .violation_events
                .get_or_create(&EventLabel { event: name })
                .inc();
        }
    }
}

fn action(mode: Mode) -> &'static str {
    match mode {
        Mode::Monitor => "monitor",
        Mode::Protect => "protect",
    }
}
