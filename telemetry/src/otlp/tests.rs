use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use tokio::sync::mpsc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family as Series;
use prometheus_client::metrics::gauge::Gauge as GaugeMetric;
use prometheus_client::metrics::histogram::Histogram as HistogramMetric;
use prometheus_client::registry::Unit;

use super::*;
use crate::http::prometheus_text;
use crate::test_support::{env, http_receiver};

#[test]
fn configured_only_by_the_standard_variables() {
    assert_eq!(
        OtlpConfig::from_env(env(&[]), "ne-agent", &[]).unwrap(),
        None
    );
    assert_eq!(
        OtlpConfig::from_env(
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_SDK_DISABLED", "true")
            ]),
            "ne-agent",
            &[]
        )
        .unwrap(),
        None
    );
    let c = OtlpConfig::from_env(
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "15000"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "k8s.cluster.name=prod, team=net",
            ),
        ]),
        "ne-agent",
        &[("k8s.node.name", "worker-1")],
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.export.endpoint, "http://collector:4317");
    assert_eq!(c.export.protocol, Protocol::Grpc);
    assert_eq!(c.interval, Duration::from_secs(15));
    assert_eq!(
        c.export.resource,
        [
            ("service.name", "ne-agent"),
            ("k8s.node.name", "worker-1"),
            ("k8s.cluster.name", "prod"),
            ("team", "net")
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let http = OtlpConfig::from_env(
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ]),
        "ne-agent",
        &[],
    )
    .unwrap()
    .unwrap();
    assert_eq!(http.export.endpoint, "http://c:4318/v1/metrics");
    assert_eq!(http.export.protocol, Protocol::HttpProtobuf);
    let off = OtlpConfig::from_env(
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ]),
        "ne-agent",
        &[],
    );
    assert_eq!(off.unwrap(), None);
    let https = OtlpConfig::from_env(
        env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317")]),
        "ne-agent",
        &[],
    );
    assert!(
        https
            .unwrap_err()
            .to_string()
            .contains("OTEL_EXPORTER_OTLP_CERTIFICATE")
    );
    let bad = OtlpConfig::from_env(
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "1m"),
        ]),
        "ne-agent",
        &[],
    );
    assert!(
        format!("{:#}", bad.unwrap_err()).contains("OTEL_METRIC_EXPORT_INTERVAL=1m"),
        "the error names the variable"
    );
}

/// Instruments of every kind, as a binary defines them.
#[derive(Debug)]
struct Sample {
    flows: Series<Vec<(String, String)>, Counter>,
    edges: GaugeMetric,
    duration: Series<Vec<(String, String)>, HistogramMetric>,
}

impl Exposition for Sample {
    fn encode(&self) -> String {
        prometheus_text(|r| {
            let r = r.sub_registry_with_prefix("network_enforcer");
            r.register("agent_flows_received", "Flows", self.flows.clone());
            r.register("agent_edges", "Edges", self.edges.clone());
            r.register_with_unit(
                "leader_reconcile_duration",
                "Rounds",
                Unit::Seconds,
                self.duration.clone(),
            );
        })
    }
}

fn sample_metrics() -> Sample {
    let m = Sample {
        flows: Series::default(),
        edges: GaugeMetric::default(),
        duration: Series::new_with_constructor(|| HistogramMetric::new([0.005, 0.05, 1.0])),
    };
    m.flows
        .get_or_create(&vec![("source".to_owned(), "hubble".to_owned())])
        .inc_by(3);
    m.edges.set(2);
    let label = |c: &str| vec![("controller".to_owned(), c.to_owned())];
    for s in [0.002, 0.03, 0.03] {
        m.duration.get_or_create(&label("proposals")).observe(s);
    }
    m.duration.get_or_create(&label("violations")).observe(2.0);
    m
}

fn metric<'a>(req: &'a ExportMetricsServiceRequest, name: &str) -> &'a Metric {
    req.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name}"))
}

fn point_value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        Some(number_data_point::Value::AsInt(v)) => v as f64,
        None => f64::NAN,
    }
}

fn assert_sample_request(req: &ExportMetricsServiceRequest) {
    let received = metric(req, "network_enforcer_agent_flows_received");
    let Some(metric::Data::Sum(sum)) = &received.data else {
        panic!("not a sum: {received:?}")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.data_points.len(), 1);
    assert_eq!(point_value(&sum.data_points[0]), 3.0);
    assert_eq!(sum.data_points[0].attributes, vec![kv("source", "hubble")]);
    let Some(metric::Data::Gauge(edges)) = &metric(req, "network_enforcer_agent_edges").data else {
        panic!()
    };
    assert_eq!(point_value(&edges.data_points[0]), 2.0);
    let duration = metric(req, "network_enforcer_leader_reconcile_duration_seconds");
    assert_eq!(duration.unit, "s");
    let Some(metric::Data::Histogram(h)) = &duration.data else {
        panic!("not a histogram")
    };
    // One data point per label set, each with its own buckets.
    assert_eq!(h.data_points.len(), 2);
    let point = |c: &str| {
        h.data_points
            .iter()
            .find(|p| p.attributes == vec![kv("controller", c)])
            .unwrap_or_else(|| panic!("no point for {c}"))
    };
    let p = point("proposals");
    assert_eq!(p.count, 3);
    assert_eq!(p.explicit_bounds, [0.005, 0.05, 1.0]);
    // 2 ms in the first bucket (≤ 5 ms), both 30 ms ones in (5 ms, 50 ms].
    assert_eq!(p.bucket_counts, [1, 2, 0, 0]);
    let v = point("violations");
    assert_eq!((v.count, v.sum), (1, Some(2.0)));
    assert_eq!(v.bucket_counts, [0, 0, 0, 1]);
    let resource = req.resource_metrics[0].resource.as_ref().unwrap();
    assert!(
        resource
            .attributes
            .contains(&kv("service.name", "ne-agent"))
    );
}

#[test]
fn the_exposition_becomes_sums_gauges_and_histograms() {
    let req = to_request(
        &sample_metrics().encode(),
        &[("service.name".into(), "ne-agent".into())],
        1,
        2,
    );
    assert_sample_request(&req);
}

#[test]
fn labels_with_escapes_parse() {
    let (series, labels, value) =
        parse_sample(r#"x_total{a="q\"uote",b="back\\slash",c="n\nl"} 7"#).unwrap();
    assert_eq!((series, value), ("x_total", 7.0));
    assert_eq!(
        labels,
        [("a", "q\"uote"), ("b", "back\\slash"), ("c", "n\nl")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    assert!(parse_sample("# EOF").is_none());
    assert!(parse_sample("garbage").is_none());
}

/// A real OTLP/gRPC receiver: every export request is handed to the test.
struct Receiver(mpsc::UnboundedSender<ExportMetricsServiceRequest>);

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_to_a_real_receiver() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let config = OtlpConfig::from_env(
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://{addr}")),
            ("OTEL_METRIC_EXPORT_INTERVAL", "10"),
        ]),
        "ne-agent",
        &[],
    )
    .unwrap()
    .unwrap();
    let exporter = tokio::spawn(run(config, Arc::new(sample_metrics())));
    let req = rx.recv().await.expect("an export arrives");
    assert_sample_request(&req);
    exporter.abort();
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_over_http_protobuf_to_a_real_receiver() {
    let mut receiver = http_receiver(None, &[]).await;
    let config = OtlpConfig::from_env(
        env(&[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &format!("http://{}", receiver.addr),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=net"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "10"),
        ]),
        "ne-agent",
        &[],
    )
    .unwrap()
    .unwrap();
    let exporter = tokio::spawn(run(config, Arc::new(sample_metrics())));
    let req = receiver.requests.recv().await.expect("an export arrives");
    exporter.abort();
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/metrics")
    );
    assert_eq!(req.headers["content-type"], "application/x-protobuf");
    assert_eq!(req.headers["x-tenant"], "net");
    let decoded = <ExportMetricsServiceRequest as prost::Message>::decode(req.body).unwrap();
    assert_sample_request(&decoded);
}
