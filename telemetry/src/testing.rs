//! A real OTLP/gRPC logs receiver for other crates' tests (feature `testing`): the collector
//! the leader's violation events go to, in process (`opentelemetry-proto`'s tonic server).

use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, any_value};
use serde_json::{Map, Value};

/// One received log record: its event name (the body), severity text, scope name, and
/// attributes as JSON values (strings and integers).
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    pub body: String,
    pub event_name: String,
    pub severity: String,
    pub scope: String,
    pub attributes: Map<String, Value>,
}

/// The receiver and what it received so far.
#[derive(Clone, Debug, Default)]
pub struct Collector {
    received: Arc<Mutex<Vec<Received>>>,
}

fn json(v: Option<&AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::from(s.as_str()),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::BoolValue(b)) => Value::from(*b),
        Some(other) => Value::from(format!("{other:?}")),
        None => Value::Null,
    }
}

#[tonic::async_trait]
impl LogsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let mut received = self.received.lock().unwrap();
        for resource in request.into_inner().resource_logs {
            for scope in resource.scope_logs {
                let scope_name = scope.scope.map(|s| s.name).unwrap_or_default();
                for record in scope.log_records {
                    let body = match json(record.body.as_ref()) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    received.push(Received {
                        body,
                        event_name: record.event_name.clone(),
                        severity: record.severity_text.clone(),
                        scope: scope_name.clone(),
                        attributes: record
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), json(kv.value.as_ref())))
                            .collect(),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

impl Collector {
    /// Serves on 127.0.0.1 until the runtime ends; returns it and its `http://` endpoint.
    pub async fn serve() -> (Self, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let collector = Collector::default();
        let service = LogsServiceServer::new(collector.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        (collector, endpoint)
    }

    /// Every record received, in arrival order.
    pub fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The records received with event name `name`, in arrival order.
    pub fn events(&self, name: &str) -> Vec<Received> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.body == name)
            .cloned()
            .collect()
    }
}
