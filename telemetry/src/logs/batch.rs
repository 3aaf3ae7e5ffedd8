//! The background task behind [`super::LogSender`]: it takes queued records in batches of at
//! most `max_export_batch_size`, exports a batch when it is full or `schedule_delay` after its
//! first record, retries busy collectors with capped backoff, and answers flushes once
//! everything queued before them is done.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{LogMetrics, Logs, LogsConfig, Retry};
use crate::otlp::transport::Transport;
use crate::otlp::{resource, scope};

pub(super) struct Exporter {
    /// `None` when the transport could not be built: every batch is dropped and counted.
    transport: Option<Transport>,
    endpoint: String,
    resource: Resource,
    scope: InstrumentationScope,
    schedule_delay: Duration,
    max_batch: usize,
    retry: Retry,
    metrics: Arc<LogMetrics>,
}

impl Exporter {
    pub(super) fn new(config: LogsConfig, scope_name: &str, metrics: Arc<LogMetrics>) -> Self {
        let transport = Transport::new(&config.export)
            .inspect_err(|error| {
                tracing::error!(
                    error = format!("{error:#}"),
                    endpoint = %config.export.endpoint,
                    "OTLP log export cannot start: events will be dropped"
                );
            })
            .ok();
        Exporter {
            transport,
            endpoint: config.export.endpoint,
            resource: resource(&config.export.resource),
            scope: scope(scope_name),
            schedule_delay: config.schedule_delay,
            max_batch: config.max_export_batch_size,
            retry: config.retry,
            metrics,
        }
    }

    /// Runs until every sender is gone and the last records are exported.
    pub(super) async fn run(
        self,
        mut records: mpsc::Receiver<LogRecord>,
        mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    ) {
        let mut batch = Vec::with_capacity(self.max_batch);
        // When the current batch is due; `None` while it is empty.
        let mut due: Option<Instant> = None;
        loop {
            // Only polled while a batch is waiting.
            let deadline = due.unwrap_or_else(Instant::now);
            tokio::select! {
                biased;
                Some(done) = flushes.recv() => {
                    // Everything emitted before the flush is queued by now.
                    for _ in 0..records.len() {
                        match records.try_recv() {
                            Ok(record) => batch.push(record),
                            Err(_) => break,
                        }
                    }
                    self.export_all(&mut batch).await;
                    due = None;
                    let _ = done.send(());
                }
                record = records.recv() => match record {
                    Some(record) => {
                        batch.push(record);
                        due.get_or_insert_with(|| Instant::now() + self.schedule_delay);
                        if batch.len() >= self.max_batch {
                            self.export_all(&mut batch).await;
                            due = None;
                        }
                    }
                    None => {
                        self.export_all(&mut batch).await;
                        return;
                    }
                },
                () = tokio::time::sleep_until(deadline), if due.is_some() => {
                    self.export_all(&mut batch).await;
                    due = None;
                }
            }
        }
    }

    /// Exports `batch` in requests of at most `max_batch` records, leaving it empty.
    async fn export_all(&self, batch: &mut Vec<LogRecord>) {
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(self.max_batch));
            let chunk = std::mem::replace(batch, rest);
            self.export(chunk).await;
        }
    }

    /// One request, retried while the collector is busy.
    async fn export(&self, records: Vec<LogRecord>) {
        let n = records.len() as u64;
        let Some(transport) = &self.transport else {
            self.metrics.drop_events("export_failed", n);
            self.metrics.export_outcome("failed");
            return;
        };
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(self.scope.clone()),
                    log_records: records,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let mut backoff = self.retry.initial;
        let mut retries = 0;
        loop {
            match transport.export::<Logs>(request.clone()).await {
                Ok(response) => {
                    self.metrics.export_outcome("success");
                    let rejected = response.partial_success.map_or(0, |p| {
                        if p.rejected_log_records > 0 {
                            tracing::warn!(
                                rejected = p.rejected_log_records,
                                message = %p.error_message,
                                endpoint = %self.endpoint,
                                "OTLP collector rejected log events"
                            );
                        }
                        u64::try_from(p.rejected_log_records).unwrap_or(0).min(n)
                    });
                    self.metrics.exported.inc_by(n - rejected);
                    if rejected > 0 {
                        self.metrics.drop_events("export_failed", rejected);
                    }
                    return;
                }
                Err(error) if error.retryable && retries < self.retry.attempts => {
                    self.metrics.export_outcome("retried");
                    tracing::debug!(error = %error.message, endpoint = %self.endpoint, ?backoff, "OTLP log export will be retried");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.retry.max);
                    retries += 1;
                }
                Err(error) => {
                    self.metrics.export_outcome("failed");
                    self.metrics.drop_events("export_failed", n);
                    tracing::warn!(
                        error = %error.message,
                        endpoint = %self.endpoint,
                        events = n,
                        retries,
                        "OTLP log export failed: events dropped"
                    );
                    return;
                }
            }
        }
    }
}
