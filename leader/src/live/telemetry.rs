//! The leader's telemetry: `/metrics` and the health endpoints, OTLP metrics and the
//! violation log events, started from the arguments and stopped last.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ne_telemetry::{http, logs, otlp};

use super::bind;
use crate::cli::{OtelArg, RunArgs};
use crate::controller::metrics::ControllerMetrics;
use crate::ingest::LeaderMetrics;

/// `/metrics` and the health endpoints, OTLP metrics and violation log events.
pub(super) struct Telemetry {
    metrics_server: tokio::task::JoinHandle<()>,
    otlp: Option<tokio::task::JoinHandle<()>>,
    pub(super) log_events: logs::LogSender,
    log_exporter: Option<tokio::task::JoinHandle<()>>,
}

impl Telemetry {
    pub(super) async fn start(
        args: &RunArgs,
        ingest: &Arc<LeaderMetrics>,
        controller: &Arc<ControllerMetrics>,
    ) -> anyhow::Result<Self> {
        let listener = bind(args.metrics_address, "--metrics-address").await?;
        tracing::info!(address = %listener.local_addr()?, "metrics listening");
        let log_metrics = Arc::new(logs::LogMetrics::default());
        let exposition: Arc<dyn http::Exposition> = Arc::new(Exposed {
            ingest: ingest.clone(),
            controller: controller.clone(),
            logs: log_metrics.clone(),
        });
        let pod: Vec<(&str, &str)> = args
            .identity
            .as_deref()
            .map(|p| ("k8s.pod.name", p))
            .into_iter()
            .collect();
        let otel = args.otel == OtelArg::Otlp;
        let env = |k: &str| std::env::var(k).ok();
        let otlp = match otel
            .then(|| otlp::OtlpConfig::from_env(env, "ne-leader", &pod))
            .transpose()?
            .flatten()
        {
            Some(config) => {
                tracing::info!(endpoint = %config.export.endpoint, interval = ?config.interval, "exporting metrics over OTLP");
                Some(tokio::spawn(otlp::run(config, exposition.clone())))
            }
            None => None,
        };
        let (log_events, log_exporter) = match otel
            .then(|| logs::LogsConfig::from_env(env, "ne-leader", &pod))
            .transpose()?
            .flatten()
        {
            Some(config) => {
                tracing::info!(endpoint = %config.export.endpoint, "exporting violation log events over OTLP");
                let (sender, task) =
                    logs::start(config, ne_policy::otel_names::LOG_SCOPE, log_metrics);
                (sender, Some(task))
            }
            None => {
                tracing::info!(
                    "violation log events are not exported (no OTLP logs endpoint, or --otel=none)"
                );
                (logs::LogSender::disabled(), None)
            }
        };
        let endpoints = http::Endpoints {
            metrics: exposition,
            ready: Arc::new(AtomicBool::new(true)),
            not_ready: "not leading",
        };
        Ok(Telemetry {
            metrics_server: tokio::spawn(http::serve(listener, endpoints)),
            otlp,
            log_events,
            log_exporter,
        })
    }

    /// Stops the endpoints and exporters; the events of the last round go out first.
    pub(super) async fn stop(self) {
        self.metrics_server.abort();
        if let Some(otlp) = self.otlp {
            otlp.abort();
        }
        if let Some(task) = self.log_exporter {
            if tokio::time::timeout(Duration::from_secs(5), self.log_events.flush())
                .await
                .is_err()
            {
                tracing::warn!("violation log events not exported within 5 s are lost");
            }
            task.abort();
        }
    }
}

/// The leader's metrics: ingest and controller, one exposition.
struct Exposed {
    ingest: Arc<LeaderMetrics>,
    controller: Arc<ControllerMetrics>,
    logs: Arc<logs::LogMetrics>,
}

impl http::Exposition for Exposed {
    fn encode(&self) -> String {
        http::prometheus_text(|r| {
            self.ingest.register(r);
            self.controller.register(r);
            self.logs.register(r);
        })
    }
}
