//! Denials no policy covers: counted in `violations_unattributed_total` and reported as
//! `policy_violation_observed` events with an empty policy reference, each tuple's growth
//! once.

use ne_telemetry::logs::LogSender;

use super::metrics;
use crate::violations::events::{self, Reported};
use crate::violations::record::Observation;

/// Unattributed observations reported so far, by tuple.
const UNATTRIBUTED_MEMORY: usize = 10_000;

/// Reports denials no policy covers: each tuple's growth once, as an event with an empty
/// policy reference and in `violations_unattributed_total`.
pub(super) struct Unattributed {
    provider: &'static str,
    sender: LogSender,
    reported: Reported<String>,
}

impl Unattributed {
    pub(super) fn new(provider: ne_flow::edge::Provider, sender: LogSender) -> Self {
        Unattributed {
            provider: provider.as_str(),
            sender,
            reported: Reported::new(UNATTRIBUTED_MEMORY),
        }
    }

    pub(super) fn report(
        &mut self,
        observations: &[Observation],
        metrics: &metrics::ControllerMetrics,
    ) {
        for o in observations {
            let key = format!(
                "{:?}|{:?}|{}|{}|{:?}|{:?}",
                o.source, o.destination, o.protocol, o.port, o.direction, o.mode
            );
            let before = self.reported.last(&key).unwrap_or(0);
            if !self.reported.news(&key, o.count) {
                continue;
            }
            metrics
                .violations_unattributed
                .inc_by(u64::try_from(o.count - before).unwrap_or(0));
            if self.sender.is_enabled() && self.sender.emit(events::unattributed(self.provider, o))
            {
                metrics
                    .violation_events
                    .get_or_create(&metrics::EventLabel {
                        event: ne_policy::otel_names::EVENT_VIOLATION_OBSERVED,
                    })
                    .inc();
            }
        }
    }
}
