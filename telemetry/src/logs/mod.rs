//! OTLP export of log events (the leader's `policy_violation_*` events, docs/architecture.md,
//! "OpenTelemetry").
//!
//! The code that notices something builds a [`LogEvent`] and calls [`LogSender::emit`], which
//! never blocks: the event goes into a bounded queue, or is dropped and counted when the queue
//! is full. One background task ([`start`], module `batch`) takes the events in batches and
//! exports each as one `ExportLogsServiceRequest` over gRPC or HTTP/protobuf
//! ([`crate::otlp::transport`]), retrying a busy collector a few times before it gives up.
//!
//! Configured by the standard variables ([`crate::otlp::ExportConfig`], with `LOGS` as the
//! signal: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_LOGS_EXPORTER`, …) and the batch log
//! record processor's `OTEL_BLRP_SCHEDULE_DELAY` (ms, default 1000),
//! `OTEL_BLRP_MAX_QUEUE_SIZE` (2048) and `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` (512).

mod batch;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::bail;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, SeverityNumber};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, oneshot};
use tonic::transport::Channel;

use crate::otlp::config::Env;
use crate::otlp::signal::Signal;
use crate::otlp::{ExportConfig, unix_nanos};

/// How much an event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warn,
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Int(i64),
}

/// One event: its name is the record's body, its `event.name` attribute and its
/// `event_name` field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEvent {
    pub name: &'static str,
    pub severity: Severity,
    /// When it happened (`time_unix_nano`); the emission time is `observed_time_unix_nano`.
    pub time: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
}

/// How a failed export is retried: `attempts` more tries, waiting `initial`, then twice as
/// long each time up to `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 4,
            initial: Duration::from_millis(500),
            max: Duration::from_secs(5),
        }
    }
}

/// Where to export and how to batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsConfig {
    pub export: ExportConfig,
    /// A batch goes out when it is full or this long after its first event.
    pub schedule_delay: Duration,
    /// Events waiting for export; more are dropped.
    pub max_queue_size: usize,
    pub max_export_batch_size: usize,
    /// Not from the environment.
    pub retry: Retry,
}

impl LogsConfig {
    /// Reads the configuration from `env` (a lookup such as `std::env::var(..).ok()`).
    /// `service` is the default `service.name`; `attributes` are resource attributes the
    /// binary knows, before `OTEL_RESOURCE_ATTRIBUTES`. `Ok(None)` when log export is not
    /// configured or disabled. The same shape as [`crate::otlp::OtlpConfig::from_env`].
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        service: &str,
        attributes: &[(&str, &str)],
    ) -> anyhow::Result<Option<Self>> {
        let env = Env(env);
        let Some(export) = ExportConfig::from_env::<Logs>(&env, service, attributes)? else {
            return Ok(None);
        };
        let size = |name: &str, default| -> anyhow::Result<usize> {
            match usize::try_from(env.number(name, default)?) {
                Ok(n) if n > 0 => Ok(n),
                _ => bail!("{name} must be at least 1"),
            }
        };
        let max_queue_size = size("OTEL_BLRP_MAX_QUEUE_SIZE", 2048)?;
        let max_export_batch_size = size("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", 512)?;
        if max_export_batch_size > max_queue_size {
            bail!(
                "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE={max_export_batch_size} is larger than OTEL_BLRP_MAX_QUEUE_SIZE={max_queue_size}"
            );
        }
        Ok(Some(LogsConfig {
            export,
            schedule_delay: env.millis("OTEL_BLRP_SCHEDULE_DELAY", 1000)?,
            max_queue_size,
            max_export_batch_size,
            retry: Retry::default(),
        }))
    }
}

/// The logs signal.
pub(crate) struct Logs;

impl Signal for Logs {
    const NAME: &'static str = "LOGS";
    const HTTP_PATH: &'static str = "/v1/logs";
    type Request = ExportLogsServiceRequest;
    type Response = ExportLogsServiceResponse;

    async fn grpc(
        channel: Channel,
        request: tonic::Request<Self::Request>,
    ) -> Result<tonic::Response<Self::Response>, tonic::Status> {
        LogsServiceClient::new(channel).export(request).await
    }
}

/// Label set `{reason}` of dropped events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

/// Label set `{outcome}` of export requests.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// The exporter's instruments.
#[derive(Debug, Default)]
pub struct LogMetrics {
    /// Events the collector accepted.
    pub exported: Counter,
    /// Events lost: `queue_full`, `export_failed` (given up on, or rejected by the
    /// collector), `exporter_stopped` (emitted after the export task ended).
    pub dropped: Family<ReasonLabel, Counter>,
    /// Export requests: `success`, `retried` (a retryable failure, tried again),
    /// `failed` (given up on).
    pub exports: Family<OutcomeLabel, Counter>,
}

impl LogMetrics {
    /// Registers every instrument under the `network_enforcer` prefix (pass the root
    /// registry, as for the binaries' own metrics).
    pub fn register(&self, registry: &mut Registry) {
        for reason in ["queue_full", "export_failed", "exporter_stopped"] {
            let _ = self.dropped.get_or_create(&ReasonLabel { reason });
        }
        for outcome in ["success", "retried", "failed"] {
            let _ = self.exports.get_or_create(&OutcomeLabel { outcome });
        }
        let r = registry.sub_registry_with_prefix("network_enforcer");
        r.register(
            "otel_log_events_exported",
            "Log events the OTLP collector accepted",
            self.exported.clone(),
        );
        r.register(
            "otel_log_events_dropped",
            "Log events not exported, by reason (queue_full, export_failed, exporter_stopped)",
            self.dropped.clone(),
        );
        r.register(
            "otel_log_exports",
            "OTLP log export requests, by outcome (success, retried, failed)",
            self.exports.clone(),
        );
    }

    fn drop_events(&self, reason: &'static str, n: u64) {
        self.dropped
            .get_or_create(&ReasonLabel { reason })
            .inc_by(n);
    }

    fn export_outcome(&self, outcome: &'static str) {
        self.exports.get_or_create(&OutcomeLabel { outcome }).inc();
    }
}

/// The handle that emits events; cheap to clone.
#[derive(Clone, Debug)]
pub struct LogSender {
    inner: Option<Arc<Channels>>,
}

#[derive(Debug)]
struct Channels {
    events: mpsc::Sender<LogRecord>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    metrics: Arc<LogMetrics>,
}

impl LogSender {
    /// A sender whose events go nowhere (`--otel=none`, or export not configured).
    pub fn disabled() -> Self {
        LogSender { inner: None }
    }

    /// Whether events go to an exporter (not [`LogSender::disabled`]).
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Queues `event` for export without blocking. `false` when it was dropped (queue full,
    /// or the export task has ended) and counted; a disabled sender always says `true`.
    pub fn emit(&self, event: LogEvent) -> bool {
        let Some(inner) = &self.inner else {
            return true;
        };
        match inner.events.try_send(record(event, SystemTime::now())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                inner.metrics.drop_events("queue_full", 1);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                inner.metrics.drop_events("exporter_stopped", 1);
                false
            }
        }
    }

    /// Returns once every event emitted before the call has been exported or given up on;
    /// at once when disabled or when the export task has ended.
    pub async fn flush(&self) {
        let Some(inner) = &self.inner else {
            return;
        };
        let (done, exported) = oneshot::channel();
        if inner.flushes.send(done).await.is_ok() {
            let _ = exported.await;
        }
    }
}

/// Starts the background batch exporter; `scope` is the instrumentation scope's name. The
/// task ends once every [`LogSender`] is dropped and the queued events have been exported
/// (await it at shutdown).
pub fn start(
    config: LogsConfig,
    scope: &'static str,
    metrics: Arc<LogMetrics>,
) -> (LogSender, tokio::task::JoinHandle<()>) {
    let (events_tx, events) = mpsc::channel(config.max_queue_size);
    let (flushes_tx, flushes) = mpsc::channel(16);
    let sender = LogSender {
        inner: Some(Arc::new(Channels {
            events: events_tx,
            flushes: flushes_tx,
            metrics: metrics.clone(),
        })),
    };
    let exporter = batch::Exporter::new(config, scope, metrics);
    (sender, tokio::spawn(exporter.run(events, flushes)))
}

/// The OTLP record of `event`, observed at `observed`.
fn record(event: LogEvent, observed: SystemTime) -> LogRecord {
    let string = |s: String| AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    };
    let (severity_number, severity_text) = match event.severity {
        Severity::Info => (SeverityNumber::Info, "INFO"),
        Severity::Warn => (SeverityNumber::Warn, "WARN"),
    };
    let mut attributes = Vec::with_capacity(event.attributes.len() + 1);
    attributes.push(KeyValue {
        key: "event.name".to_owned(),
        value: Some(string(event.name.to_owned())),
        ..Default::default()
    });
    for (key, value) in event.attributes {
        let value = match value {
            Value::Str(s) => string(s),
            Value::Int(i) => AnyValue {
                value: Some(any_value::Value::IntValue(i)),
            },
        };
        attributes.push(KeyValue {
            key: key.to_owned(),
            value: Some(value),
            ..Default::default()
        });
    }
    LogRecord {
        time_unix_nano: unix_nanos(event.time),
        observed_time_unix_nano: unix_nanos(observed),
        severity_number: severity_number as i32,
        severity_text: severity_text.to_owned(),
        body: Some(string(event.name.to_owned())),
        attributes,
        event_name: event.name.to_owned(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
