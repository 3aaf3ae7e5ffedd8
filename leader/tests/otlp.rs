//! `ne-leader run` exports its metrics over OTLP/gRPC, configured by the standard
//! `OTEL_*` variables: the real binary, a real in-process OTLP receiver.

use std::process::{Command, Stdio};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use tokio::sync::mpsc;

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
async fn the_leader_exports_its_metrics_to_an_otlp_receiver() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut leader = Command::new(env!("CARGO_BIN_EXE_ne-leader"))
        .args([
            "run",
            "--provider",
            "cilium",
            "--standalone",
            "--insecure-ingest",
        ])
        .args([
            "--ingest-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
        ])
        .args(["--identity", "leader-0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .env("OTEL_METRIC_EXPORT_INTERVAL", "100")
        .env("OTEL_RESOURCE_ATTRIBUTES", "k8s.cluster.name=test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let request = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("an export within 30 s")
        .expect("an export");
    leader.kill().unwrap();
    leader.wait().unwrap();
    server.abort();

    let resource = request.resource_metrics[0].resource.as_ref().unwrap();
    let attribute = |key: &str| {
        resource
            .attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.as_str()),
                _ => None,
            })
    };
    assert_eq!(attribute("service.name"), Some("ne-leader"));
    assert_eq!(attribute("k8s.pod.name"), Some("leader-0"));
    assert_eq!(attribute("k8s.cluster.name"), Some("test"));
    let names: Vec<&str> = request.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    // Ingest and controller instruments, from the same exposition as /metrics.
    for name in [
        "network_enforcer_leader_streams_opened",
        "network_enforcer_leader_batches_received",
        "network_enforcer_leader_ingest_lag_seconds",
        "network_enforcer_leader_edges",
        "network_enforcer_leader_api_writes_deferred",
        // Violations and the log exporter's own counters are in the same exposition.
        "network_enforcer_violations_unattributed",
        "network_enforcer_otel_log_events_exported",
    ] {
        assert!(names.contains(&name), "{name} not in {names:?}");
    }
}

/// `ne-leader run` with `args` and the OTLP endpoint `endpoint` (the other OTEL variables
/// cleared); kept running until the caller kills it.
fn leader_with_endpoint(endpoint: &str, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ne-leader"))
        .args([
            "run",
            "--provider",
            "istio",
            "--standalone",
            "--insecure-ingest",
        ])
        .args([
            "--ingest-address",
            "127.0.0.1:0",
            "--metrics-address",
            "127.0.0.1:0",
        ])
        .args(args)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("NE_OTEL")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn otel_none_exports_nothing_and_reads_no_otel_variable() {
    use std::io::{BufRead, BufReader};
    // A malformed endpoint stops a leader that exports, naming the variable...
    let out = leader_with_endpoint("otel:4317", &[])
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{stderr}");
    // ...and is never read with --otel none: the leader runs and says nothing is exported.
    let mut leader = leader_with_endpoint("otel:4317", &["--otel", "none"]);
    let lines = BufReader::new(leader.stderr.take().unwrap()).lines();
    let (mut said_off, mut listening) = (false, false);
    for line in lines {
        let line = line.unwrap();
        said_off |= line.contains("violation log events are not exported");
        if line.contains("ingest listening") {
            listening = true;
            break;
        }
    }
    leader.kill().unwrap();
    leader.wait().unwrap();
    assert!(listening, "the leader runs");
    assert!(said_off, "the leader says its log events are not exported");
}
