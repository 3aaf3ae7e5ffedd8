//! The log exporter against real receivers in this process: a tonic `LogsService` and a hyper
//! OTLP/HTTP server, each plaintext and with mTLS (certificates made at test time).

mod config;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use hyper::StatusCode;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use tokio::task::JoinHandle;
use tonic::metadata::MetadataMap;

use super::*;
use crate::otlp::kv;
use crate::test_support::{Pki, env, http_receiver, text};

/// How the gRPC receiver answers one request.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Accept,
    Fail(tonic::Code),
    /// Accepts, but reports this many records rejected.
    Reject(i64),
    /// Never answers (a stuck collector).
    Stall,
}

struct Receiver {
    requests: mpsc::UnboundedSender<(MetadataMap, ExportLogsServiceRequest)>,
    script: Mutex<VecDeque<Answer>>,
}

#[tonic::async_trait]
impl LogsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let (metadata, _, request) = request.into_parts();
        let _ = self.requests.send((metadata, request));
        let answer = self.script.lock().unwrap().pop_front();
        match answer.unwrap_or(Answer::Accept) {
            Answer::Accept => Ok(tonic::Response::new(ExportLogsServiceResponse::default())),
            Answer::Fail(code) => Err(tonic::Status::new(code, "scripted failure")),
            Answer::Stall => std::future::pending().await,
            Answer::Reject(n) => Ok(tonic::Response::new(ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: n,
                    error_message: "scripted rejection".to_owned(),
                }),
            })),
        }
    }
}

/// A running gRPC receiver; stops when dropped.
struct GrpcReceiver {
    addr: SocketAddr,
    requests: mpsc::UnboundedReceiver<(MetadataMap, ExportLogsServiceRequest)>,
    task: JoinHandle<()>,
}

impl Drop for GrpcReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts a receiver on 127.0.0.1 (mTLS when `tls` is given) answering with `script`, then
/// accepting everything.
async fn grpc_receiver(tls: Option<&Pki>, script: &[Answer]) -> GrpcReceiver {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, requests) = mpsc::unbounded_channel();
    let mut server = tonic::transport::Server::builder();
    if let Some(pki) = tls {
        server = server.tls_config(pki.tonic_server()).unwrap();
    }
    let service = LogsServiceServer::new(Receiver {
        requests: tx,
        script: Mutex::new(script.iter().copied().collect()),
    });
    let task = tokio::spawn(async move {
        let _ = server
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    GrpcReceiver {
        addr,
        requests,
        task,
    }
}

/// A configuration from `vars` (plus the leader's pod attribute), with fast retries.
fn config(vars: &[(&str, &str)]) -> LogsConfig {
    let mut c = LogsConfig::from_env(env(vars), "ne-leader", &[("k8s.pod.name", "leader-0")])
        .unwrap()
        .expect("configured");
    c.retry = Retry {
        attempts: 3,
        initial: Duration::from_millis(1),
        max: Duration::from_millis(4),
    };
    c
}

/// An exporter to the plaintext receiver at `addr` (gRPC unless `vars` say otherwise).
fn exporter(
    addr: SocketAddr,
    vars: &[(&str, &str)],
) -> (LogSender, JoinHandle<()>, Arc<LogMetrics>) {
    let endpoint = format!("http://{addr}");
    let mut vars = vars.to_vec();
    vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint));
    let metrics = Arc::new(LogMetrics::default());
    let (sender, task) = start(config(&vars), "network-enforcer", metrics.clone());
    (sender, task, metrics)
}

/// 2023-11-14T22:13:20Z plus `nanos`.
fn at(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(nanos)
}

fn observed(seq: i64) -> LogEvent {
    LogEvent {
        name: "policy_violation_observed",
        severity: Severity::Warn,
        time: at(123),
        attributes: vec![
            ("enforcement.provider", Value::Str("cilium".to_owned())),
            ("destination.port", Value::Int(8080)),
            ("seq", Value::Int(seq)),
        ],
    }
}

fn acknowledged() -> LogEvent {
    LogEvent {
        name: "policy_violation_acknowledged",
        severity: Severity::Info,
        time: at(456),
        attributes: vec![("reason", Value::Str("expected: backup job".to_owned()))],
    }
}

fn int(key: &str, v: i64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Any::IntValue(v)),
        }),
        ..Default::default()
    }
}

fn records(request: &ExportLogsServiceRequest) -> &[LogRecord] {
    &request.resource_logs[0].scope_logs[0].log_records
}

/// The `seq` attribute of every record of `request`.
fn seqs(request: &ExportLogsServiceRequest) -> Vec<i64> {
    records(request)
        .iter()
        .map(|r| match r.attributes.iter().find(|a| a.key == "seq") {
            Some(KeyValue {
                value:
                    Some(AnyValue {
                        value: Some(Any::IntValue(seq)),
                    }),
                ..
            }) => *seq,
            other => panic!("no seq: {other:?}"),
        })
        .collect()
}

/// Checks a request carrying `observed(7)` then `acknowledged()`, emitted within
/// `emitted`, with the resource of [`config`] and `OTEL_RESOURCE_ATTRIBUTES=k8s.cluster.name=prod`.
fn assert_delivered(request: &ExportLogsServiceRequest, emitted: (SystemTime, SystemTime)) {
    assert_eq!(request.resource_logs.len(), 1);
    let resource_logs = &request.resource_logs[0];
    assert_eq!(
        resource_logs.resource.as_ref().unwrap().attributes,
        [
            kv("service.name", "ne-leader"),
            kv("k8s.pod.name", "leader-0"),
            kv("k8s.cluster.name", "prod"),
        ]
    );
    assert_eq!(resource_logs.scope_logs.len(), 1);
    let scope = resource_logs.scope_logs[0].scope.as_ref().unwrap();
    assert_eq!(
        (scope.name.as_str(), scope.version.as_str()),
        ("network-enforcer", env!("CARGO_PKG_VERSION"))
    );
    let [warn, info] = records(request) else {
        panic!("two records: {request:?}")
    };
    let emitted = unix_nanos(emitted.0)..=unix_nanos(emitted.1);
    let expected_warn = Expected {
        name: "policy_violation_observed",
        severity: (13, "WARN"),
        time: 1_700_000_000_000_000_123,
        attributes: vec![
            kv("event.name", "policy_violation_observed"),
            kv("enforcement.provider", "cilium"),
            int("destination.port", 8080),
            int("seq", 7),
        ],
    };
    expected_warn.check(warn, &emitted);
    let expected_info = Expected {
        name: "policy_violation_acknowledged",
        severity: (9, "INFO"),
        time: 1_700_000_000_000_000_456,
        attributes: vec![
            kv("event.name", "policy_violation_acknowledged"),
            kv("reason", "expected: backup job"),
        ],
    };
    expected_info.check(info, &emitted);
}

/// What one received record must hold.
struct Expected {
    name: &'static str,
    severity: (i32, &'static str),
    time: u64,
    attributes: Vec<KeyValue>,
}

impl Expected {
    fn check(&self, r: &LogRecord, emitted: &std::ops::RangeInclusive<u64>) {
        assert_eq!(r.time_unix_nano, self.time);
        assert!(emitted.contains(&r.observed_time_unix_nano));
        assert_eq!((r.severity_number, r.severity_text.as_str()), self.severity);
        assert_eq!(
            r.body.as_ref().unwrap().value,
            Some(Any::StringValue(self.name.to_owned()))
        );
        assert_eq!(r.event_name, self.name);
        assert_eq!(r.attributes, self.attributes);
    }
}

/// The variables every delivery test sets besides the endpoint.
const COMMON: [(&str, &str); 2] = [
    ("OTEL_RESOURCE_ATTRIBUTES", "k8s.cluster.name=prod"),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20s3cr%3Dt, x-tenant=net",
    ),
];

/// Emits the two sample events, flushes, and returns when they were emitted.
async fn emit_sample(sender: &LogSender) -> (SystemTime, SystemTime) {
    let from = SystemTime::now();
    assert!(sender.emit(observed(7)));
    assert!(sender.emit(acknowledged()));
    let to = SystemTime::now();
    sender.flush().await;
    (from, to)
}

fn counter(metrics: &LogMetrics, what: &'static str) -> u64 {
    match what {
        "exported" => metrics.exported.get(),
        reason @ ("queue_full" | "export_failed" | "exporter_stopped") => {
            metrics.dropped.get_or_create(&ReasonLabel { reason }).get()
        }
        outcome => metrics
            .exports
            .get_or_create(&OutcomeLabel { outcome })
            .get(),
    }
}

/// Asserts each named counter's value.
fn assert_counters(metrics: &LogMetrics, expected: &[(&'static str, u64)]) {
    for (what, n) in expected {
        assert_eq!(counter(metrics, what), *n, "{what}");
    }
}

async fn grpc_delivery(pki: Option<&Pki>) {
    let mut receiver = grpc_receiver(pki, &[]).await;
    let endpoint = match pki {
        Some(_) => format!("https://{}", receiver.addr),
        None => format!("http://{}", receiver.addr),
    };
    let mut vars = COMMON.to_vec();
    vars.push(("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint));
    if let Some(pki) = pki {
        vars.extend([
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&pki.ca)),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                text(&pki.client_cert),
            ),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", text(&pki.client_key)),
        ]);
    }
    let metrics = Arc::new(LogMetrics::default());
    let (sender, _task) = start(config(&vars), "network-enforcer", metrics.clone());
    let emitted = emit_sample(&sender).await;
    // flush() returned: the request is already there.
    let (metadata, request) = receiver
        .requests
        .try_recv()
        .expect("exported before flush returned");
    assert_delivered(&request, emitted);
    assert_eq!(metadata.get("authorization").unwrap(), "Bearer s3cr=t");
    assert_eq!(metadata.get("x-tenant").unwrap(), "net");
    assert!(receiver.requests.try_recv().is_err(), "one request");
    assert_counters(&metrics, &[("exported", 2), ("success", 1), ("failed", 0)]);
}

#[tokio::test]
async fn grpc_delivers_every_field() {
    grpc_delivery(None).await;
}

#[tokio::test]
async fn grpc_over_mtls_delivers_every_field() {
    let pki = Pki::new("logs-grpc-mtls");
    grpc_delivery(Some(&pki)).await;
}

async fn http_delivery(pki: Option<&Pki>) {
    let mut receiver = http_receiver(pki, &[]).await;
    let endpoint = match pki {
        Some(_) => format!("https://{}/", receiver.addr),
        None => format!("http://{}", receiver.addr),
    };
    let mut vars = COMMON.to_vec();
    vars.extend([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ]);
    if let Some(pki) = pki {
        vars.extend([
            ("OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE", text(&pki.ca)),
            (
                "OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE",
                text(&pki.client_cert),
            ),
            ("OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY", text(&pki.client_key)),
        ]);
    }
    let metrics = Arc::new(LogMetrics::default());
    let (sender, _task) = start(config(&vars), "network-enforcer", metrics.clone());
    let emitted = emit_sample(&sender).await;
    let request = receiver
        .requests
        .try_recv()
        .expect("exported before flush returned");
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/logs")
    );
    assert_eq!(request.headers["content-type"], "application/x-protobuf");
    assert_eq!(request.headers["authorization"], "Bearer s3cr=t");
    assert_eq!(request.headers["x-tenant"], "net");
    assert_delivered(
        &ExportLogsServiceRequest::decode(request.body).unwrap(),
        emitted,
    );
    assert!(receiver.requests.try_recv().is_err(), "one request");
    assert_counters(&metrics, &[("exported", 2), ("success", 1), ("failed", 0)]);
}

#[tokio::test]
async fn http_protobuf_delivers_every_field() {
    http_delivery(None).await;
}

#[tokio::test]
async fn http_protobuf_over_mtls_delivers_every_field() {
    let pki = Pki::new("logs-http-mtls");
    http_delivery(Some(&pki)).await;
}

#[tokio::test]
async fn mtls_without_a_client_certificate_is_refused_and_counted() {
    let pki = Pki::new("logs-no-client-cert");
    let grpc = grpc_receiver(Some(&pki), &[]).await;
    let http = http_receiver(Some(&pki), &[]).await;
    for vars in [
        vec![(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("https://{}", grpc.addr),
        )],
        vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", http.addr),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        ],
    ] {
        let mut vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        vars.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", text(&pki.ca)));
        let metrics = Arc::new(LogMetrics::default());
        let (sender, _task) = start(config(&vars), "network-enforcer", metrics.clone());
        assert!(sender.emit(observed(1)));
        sender.flush().await;
        assert_counters(
            &metrics,
            &[("exported", 0), ("export_failed", 1), ("failed", 1)],
        );
    }
}

#[tokio::test]
async fn batches_hold_at_most_the_batch_size_and_every_event_once() {
    let mut receiver = grpc_receiver(None, &[]).await;
    let (sender, _task, metrics) = exporter(
        receiver.addr,
        &[
            ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "3"),
            ("OTEL_BLRP_SCHEDULE_DELAY", "3600000"),
        ],
    );
    for seq in 0..10 {
        assert!(sender.emit(observed(seq)));
    }
    sender.flush().await;
    let mut sizes = Vec::new();
    let mut seen = Vec::new();
    while let Ok((_, request)) = receiver.requests.try_recv() {
        sizes.push(records(&request).len());
        seen.extend(seqs(&request));
    }
    assert_eq!(sizes, [3, 3, 3, 1]);
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
    assert_counters(&metrics, &[("exported", 10), ("success", 4)]);
}

#[tokio::test]
async fn a_full_batch_or_the_schedule_delay_sends_without_a_flush() {
    let mut receiver = grpc_receiver(None, &[]).await;
    let endpoint = format!("http://{}", receiver.addr);
    let deadline = Duration::from_secs(10);
    // A full batch goes out at once, long before its hour-long delay.
    let (full, _task) = start(
        config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "2"),
            ("OTEL_BLRP_SCHEDULE_DELAY", "3600000"),
        ]),
        "network-enforcer",
        Arc::new(LogMetrics::default()),
    );
    full.emit(observed(1));
    full.emit(observed(2));
    let (_, request) = tokio::time::timeout(deadline, receiver.requests.recv())
        .await
        .expect("a full batch is sent")
        .unwrap();
    assert_eq!(seqs(&request), [1, 2]);
    // A partial batch goes out after the delay.
    let (partial, _task) = start(
        config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BLRP_SCHEDULE_DELAY", "20"),
        ]),
        "network-enforcer",
        Arc::new(LogMetrics::default()),
    );
    partial.emit(observed(3));
    let (_, request) = tokio::time::timeout(deadline, receiver.requests.recv())
        .await
        .expect("a partial batch is sent after the delay")
        .unwrap();
    assert_eq!(seqs(&request), [3]);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let mut receiver = grpc_receiver(None, &[]).await;
    let (sender, _task, metrics) = exporter(
        receiver.addr,
        &[
            ("OTEL_BLRP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "4"),
        ],
    );
    // The export task has not run yet (one thread, no await): the queue only fills.
    let accepted: Vec<bool> = (0..6).map(|seq| sender.emit(observed(seq))).collect();
    assert_eq!(accepted, [true, true, true, true, false, false]);
    sender.flush().await;
    let (_, request) = receiver.requests.try_recv().unwrap();
    assert_eq!(seqs(&request), [0, 1, 2, 3]);
    assert_counters(&metrics, &[("queue_full", 2), ("exported", 4)]);
    let text = crate::http::prometheus_text(|r| metrics.register(r));
    for line in [
        "network_enforcer_otel_log_events_dropped_total{reason=\"queue_full\"} 2",
        "network_enforcer_otel_log_events_dropped_total{reason=\"export_failed\"} 0",
        "network_enforcer_otel_log_events_exported_total 4",
        "network_enforcer_otel_log_exports_total{outcome=\"success\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_collector_never_blocks_emitters_and_its_losses_are_counted() {
    // Every request of the first events stalls; after them the collector answers again.
    let stalls = 8;
    let mut receiver = grpc_receiver(None, &vec![Answer::Stall; stalls]).await;
    let (sender, _task, metrics) = exporter(
        receiver.addr,
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "100"),
            ("OTEL_BLRP_MAX_QUEUE_SIZE", "16"),
            ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "4"),
        ],
    );
    // Emitting is synchronous and never waits for the exporter: with the collector stuck,
    // the queue fills and the rest is dropped and counted.
    let emitted = 10_000;
    let accepted = (0..emitted)
        .filter(|&seq| sender.emit(observed(seq)))
        .count() as u64;
    sender.flush().await;
    let sent = counter(&metrics, "exported") + counter(&metrics, "export_failed");
    assert_eq!(
        sent, accepted,
        "every accepted event is exported or counted"
    );
    assert_eq!(counter(&metrics, "queue_full"), emitted as u64 - accepted);
    assert!(
        accepted < 1_000,
        "the queue is bounded: {accepted} accepted"
    );
    assert!(counter(&metrics, "export_failed") > 0);
    assert!(
        receiver.requests.try_recv().is_ok(),
        "the collector was tried"
    );
    // The collector answers again once its stalls are used up (each flush uses one at
    // least): a new event then gets through.
    let mut recovered = false;
    for seq in emitted..emitted + stalls as i64 {
        let before = counter(&metrics, "exported");
        assert!(sender.emit(observed(seq)));
        sender.flush().await;
        if counter(&metrics, "exported") == before + 1 {
            recovered = true;
            break;
        }
    }
    assert!(recovered, "no export after the collector recovered");
}

#[tokio::test]
async fn busy_collectors_are_retried_and_get_the_batch_once() {
    use tonic::Code;
    let mut grpc = grpc_receiver(
        None,
        &[
            Answer::Fail(Code::Unavailable),
            Answer::Fail(Code::ResourceExhausted),
        ],
    )
    .await;
    let (sender, _task, metrics) = exporter(grpc.addr, &[]);
    sender.emit(observed(1));
    sender.flush().await;
    for _ in 0..3 {
        assert_eq!(seqs(&grpc.requests.try_recv().unwrap().1), [1]);
    }
    assert!(grpc.requests.try_recv().is_err());
    assert_counters(
        &metrics,
        &[
            ("retried", 2),
            ("success", 1),
            ("exported", 1),
            ("export_failed", 0),
        ],
    );

    let busy = [
        StatusCode::SERVICE_UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::BAD_GATEWAY,
    ];
    let mut http = http_receiver(None, &busy).await;
    let (sender, _task, metrics) = exporter(
        http.addr,
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
    );
    sender.emit(observed(2));
    sender.flush().await;
    for _ in 0..4 {
        let body = http.requests.try_recv().unwrap().body;
        assert_eq!(seqs(&ExportLogsServiceRequest::decode(body).unwrap()), [2]);
    }
    assert!(http.requests.try_recv().is_err());
    assert_counters(&metrics, &[("retried", 3), ("success", 1), ("exported", 1)]);
}

#[tokio::test]
async fn failures_that_last_or_cannot_pass_are_dropped_and_counted() {
    use tonic::Code;
    // (script, requests the receiver sees, retries)
    let grpc_cases = [
        (vec![Answer::Fail(Code::InvalidArgument)], 1, 0),
        (vec![Answer::Fail(Code::Unavailable); 4], 4, 3),
    ];
    for (script, requests, retries) in grpc_cases {
        let mut receiver = grpc_receiver(None, &script).await;
        let endpoint = format!("http://{}", receiver.addr);
        let metrics = Arc::new(LogMetrics::default());
        let (sender, _task) = start(
            config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]),
            "network-enforcer",
            metrics.clone(),
        );
        sender.emit(observed(1));
        sender.emit(observed(2));
        sender.flush().await;
        let mut seen = 0;
        while receiver.requests.try_recv().is_ok() {
            seen += 1;
        }
        assert_eq!(seen, requests, "{script:?}");
        assert_counters(
            &metrics,
            &[
                ("export_failed", 2),
                ("failed", 1),
                ("retried", retries),
                ("exported", 0),
            ],
        );
    }
    let http_cases = [
        (vec![StatusCode::BAD_REQUEST], 1, 0),
        (vec![StatusCode::INTERNAL_SERVER_ERROR], 1, 0),
        (vec![StatusCode::GATEWAY_TIMEOUT; 4], 4, 3),
    ];
    for (script, requests, retries) in http_cases {
        let mut receiver = http_receiver(None, &script).await;
        let endpoint = format!("http://{}/v1/logs", receiver.addr);
        let metrics = Arc::new(LogMetrics::default());
        let (sender, _task) = start(
            config(&[
                ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &endpoint),
                ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/protobuf"),
            ]),
            "network-enforcer",
            metrics.clone(),
        );
        sender.emit(observed(1));
        sender.flush().await;
        let mut seen = 0;
        while receiver.requests.try_recv().is_ok() {
            seen += 1;
        }
        assert_eq!(seen, requests, "{script:?}");
        assert_counters(
            &metrics,
            &[
                ("export_failed", 1),
                ("failed", 1),
                ("retried", retries),
                ("exported", 0),
            ],
        );
    }
}

#[tokio::test]
async fn records_the_collector_rejects_are_counted_as_dropped() {
    let receiver = grpc_receiver(None, &[Answer::Reject(1)]).await;
    let (sender, _task, metrics) = exporter(receiver.addr, &[]);
    sender.emit(observed(1));
    sender.emit(observed(2));
    sender.flush().await;
    assert_counters(
        &metrics,
        &[("exported", 1), ("export_failed", 1), ("success", 1)],
    );
}

#[tokio::test]
async fn dropping_every_sender_exports_what_is_queued_then_ends() {
    let mut receiver = grpc_receiver(None, &[]).await;
    let (sender, task, metrics) =
        exporter(receiver.addr, &[("OTEL_BLRP_SCHEDULE_DELAY", "3600000")]);
    let clone = sender.clone();
    sender.emit(observed(1));
    clone.emit(observed(2));
    drop((sender, clone));
    task.await.unwrap();
    assert_eq!(seqs(&receiver.requests.try_recv().unwrap().1), [1, 2]);
    assert_counters(&metrics, &[("exported", 2), ("success", 1)]);
}

#[tokio::test]
async fn events_after_the_task_ended_are_counted() {
    let receiver = grpc_receiver(None, &[]).await;
    let (sender, task, metrics) = exporter(receiver.addr, &[]);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(!sender.emit(observed(1)));
    // Nothing can be exported any more: flush does not wait.
    sender.flush().await;
    assert_counters(&metrics, &[("exporter_stopped", 1), ("queue_full", 0)]);
}

#[tokio::test]
async fn a_disabled_sender_does_nothing() {
    let sender = LogSender::disabled();
    assert!(sender.emit(observed(1)));
    sender.flush().await;
    assert!(sender.inner.is_none());
}
