//! OTLP export of a binary's metrics, configured by the standard OpenTelemetry environment
//! variables ([`config`]): off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) is set; over gRPC, or HTTP/protobuf to
//! `/v1/metrics` ([`transport`]).
//!
//! The instruments are defined once, with the code they measure; this module reads the same
//! exposition `/metrics` serves ([`Exposition`]) and turns it into an
//! `ExportMetricsServiceRequest`, so the two views can never disagree: counters become
//! cumulative monotonic sums, gauges gauges, and histograms cumulative explicit-bucket
//! histograms.
//!
//! Supported variables: those of [`ExportConfig`] (endpoint, protocol, headers, timeout,
//! certificates, `OTEL_METRICS_EXPORTER`, `OTEL_SDK_DISABLED`, `OTEL_SERVICE_NAME` — default:
//! the binary's name — and `OTEL_RESOURCE_ATTRIBUTES`), and `OTEL_METRIC_EXPORT_INTERVAL`
//! (ms, default 60000).

pub mod config;
pub(crate) mod signal;
pub(crate) mod transport;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tonic::transport::Channel;

use self::config::Env;
pub use self::config::{ExportConfig, Protocol};
use self::signal::Signal;
use self::transport::Transport;
use crate::http::Exposition;

/// Nanoseconds since the Unix epoch of `time` (0 before it).
pub(crate) fn unix_nanos(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Nanoseconds since the Unix epoch, now.
fn now_nanos() -> i64 {
    i64::try_from(unix_nanos(std::time::SystemTime::now())).unwrap_or(i64::MAX)
}

/// The metrics signal.
pub(crate) struct Metrics;

impl Signal for Metrics {
    const NAME: &'static str = "METRICS";
    const HTTP_PATH: &'static str = "/v1/metrics";
    type Request = ExportMetricsServiceRequest;
    type Response = ExportMetricsServiceResponse;

    async fn grpc(
        channel: Channel,
        request: tonic::Request<Self::Request>,
    ) -> Result<tonic::Response<Self::Response>, tonic::Status> {
        MetricsServiceClient::new(channel).export(request).await
    }
}

/// Where and how often to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpConfig {
    pub export: ExportConfig,
    pub interval: Duration,
}

impl OtlpConfig {
    /// Reads the configuration from `env` (a lookup such as `std::env::var(..).ok()`).
    /// `service` is the default `service.name`; `attributes` are resource attributes the
    /// binary knows (`k8s.node.name`, `k8s.pod.name`), before `OTEL_RESOURCE_ATTRIBUTES`.
    /// `Ok(None)` when export is not configured or disabled.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        service: &str,
        attributes: &[(&str, &str)],
    ) -> anyhow::Result<Option<Self>> {
        let env = Env(env);
        let Some(export) = ExportConfig::from_env::<Metrics>(&env, service, attributes)? else {
            return Ok(None);
        };
        Ok(Some(OtlpConfig {
            export,
            interval: env.millis("OTEL_METRIC_EXPORT_INTERVAL", 60_000)?,
        }))
    }
}

/// Exports every `interval` until the task is dropped. Failures are logged and retried at
/// the next interval (the sums are cumulative, so nothing is lost); they never affect the
/// process.
pub async fn run(config: OtlpConfig, metrics: Arc<dyn Exposition>) {
    let transport = match Transport::new(&config.export) {
        Ok(t) => t,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "OTLP export disabled");
            return;
        }
    };
    let start = now_nanos();
    let mut ticker = tokio::time::interval(config.interval);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let request = to_request(
            &metrics.encode(),
            &config.export.resource,
            start,
            now_nanos(),
        );
        if let Err(error) = transport.export::<Metrics>(request).await {
            tracing::warn!(error = %error.message, endpoint = %config.export.endpoint, "OTLP metrics export failed");
        }
    }
}

/// The resource of every export: string attributes, in order.
pub(crate) fn resource(attributes: &[(String, String)]) -> Resource {
    Resource {
        attributes: attributes.iter().map(|(k, v)| kv(k, v)).collect(),
        ..Default::default()
    }
}

/// The instrumentation scope `name`, at this crate's version.
pub(crate) fn scope(name: &str) -> InstrumentationScope {
    InstrumentationScope {
        name: name.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        ..Default::default()
    }
}

/// A sample's labels, in exposition order.
type LabelPairs = Vec<(String, String)>;

/// One metric family parsed from the exposition.
#[derive(Debug, Default)]
struct Family {
    kind: String,
    unit: String,
    help: String,
    /// (labels, suffix, value) of every sample.
    samples: Vec<(LabelPairs, String, f64)>,
}

/// Turns OpenMetrics text (as [`Exposition::encode`] writes it) into an OTLP request.
pub fn to_request(
    text: &str,
    resource: &[(String, String)],
    start_ns: i64,
    now_ns: i64,
) -> ExportMetricsServiceRequest {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (Some(what), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let value = parts.next().unwrap_or_default().to_owned();
            let f = families.entry(name.to_owned()).or_default();
            match what {
                "TYPE" => f.kind = value,
                "UNIT" => f.unit = value,
                "HELP" => f.help = value,
                _ => {}
            }
            continue;
        }
        let Some((series, labels, value)) = parse_sample(line) else {
            continue;
        };
        // The longest family name that prefixes the series owns it (`x_total`, `x_bucket`).
        let Some(name) = families
            .keys()
            .filter(|f| series.starts_with(f.as_str()))
            .max_by_key(|f| f.len())
            .cloned()
        else {
            continue;
        };
        let suffix = series[name.len()..].to_owned();
        if let Some(f) = families.get_mut(&name) {
            f.samples.push((labels, suffix, value));
        }
    }
    let metrics = families
        .into_iter()
        .filter_map(|(name, f)| to_metric(name, f, start_ns, now_ns))
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(self::resource(resource)),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(scope("network-enforcer")),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn to_metric(name: String, f: Family, start: i64, now: i64) -> Option<Metric> {
    let (start, now) = (
        u64::try_from(start).unwrap_or(0),
        u64::try_from(now).unwrap_or(0),
    );
    let attributes =
        |labels: &[(String, String)]| labels.iter().map(|(k, v)| kv(k, v)).collect::<Vec<_>>();
    let number = |labels: &[(String, String)], v: f64| NumberDataPoint {
        attributes: attributes(labels),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    };
    let data = match f.kind.as_str() {
        "counter" => metric::Data::Sum(Sum {
            data_points: f
                .samples
                .iter()
                .filter(|s| s.1 == "_total")
                .map(|(l, _, v)| number(l, *v))
                .collect(),
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        }),
        "gauge" => metric::Data::Gauge(Gauge {
            data_points: f
                .samples
                .iter()
                .filter(|s| s.1.is_empty())
                .map(|(l, _, v)| number(l, *v))
                .collect(),
        }),
        "histogram" => metric::Data::Histogram(histogram(&f, start, now)),
        _ => return None,
    };
    let unit = match f.unit.as_str() {
        "seconds" => "s".to_owned(),
        other => other.to_owned(),
    };
    Some(Metric {
        name,
        description: f.help,
        unit,
        data: Some(data),
        ..Default::default()
    })
}

/// A histogram family: one data point per label set (the labels other than `le`).
fn histogram(f: &Family, start: u64, now: u64) -> Histogram {
    let mut series: BTreeMap<LabelPairs, HistogramDataPoint> = BTreeMap::new();
    // The cumulative count of the previous bucket of each series.
    let mut below: BTreeMap<LabelPairs, u64> = BTreeMap::new();
    for (labels, suffix, v) in &f.samples {
        let le = labels
            .iter()
            .find(|(k, _)| k == "le")
            .map(|(_, v)| v.parse::<f64>().ok());
        let key: LabelPairs = labels.iter().filter(|(k, _)| k != "le").cloned().collect();
        let point = series
            .entry(key.clone())
            .or_insert_with(|| HistogramDataPoint {
                attributes: key.iter().map(|(k, v)| kv(k, v)).collect(),
                start_time_unix_nano: start,
                time_unix_nano: now,
                ..Default::default()
            });
        match suffix.as_str() {
            "_bucket" => {
                let cumulative = *v as u64;
                let previous = below.entry(key).or_default();
                point
                    .bucket_counts
                    .push(cumulative.saturating_sub(*previous));
                *previous = cumulative;
                if let Some(Some(le)) = le
                    && le.is_finite()
                {
                    point.explicit_bounds.push(le);
                }
            }
            "_count" => point.count = *v as u64,
            "_sum" => point.sum = Some(*v),
            _ => {}
        }
    }
    Histogram {
        data_points: series.into_values().collect(),
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
    }
}

/// A string attribute.
pub fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_owned())),
        }),
        ..Default::default()
    }
}

/// `name{a="x",b="y"} 12.5` → (name, labels, value). `None` for anything else.
pub fn parse_sample(line: &str) -> Option<(&str, LabelPairs, f64)> {
    let (series, rest) = match line.find('{') {
        Some(open) => {
            let close = open + line[open..].find("} ")?;
            (
                &line[..open],
                (Some(&line[open + 1..close]), &line[close + 2..]),
            )
        }
        None => {
            let (s, v) = line.split_once(' ')?;
            (s, (None, v))
        }
    };
    let (labels, value) = rest;
    let value = value.split(' ').next()?.parse().ok()?;
    let labels = labels.map(parse_labels).unwrap_or_default();
    Some((series, labels, value))
}

fn parse_labels(s: &str) -> LabelPairs {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            return out;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').to_owned(), value));
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
}

#[cfg(test)]
mod tests;
