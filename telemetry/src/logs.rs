//! TEMPORARY shim of the OTLP logs exporter API (replaced by the real module).
#![allow(missing_docs, dead_code)]
use std::sync::Arc;

pub enum Severity {
    Info,
    Warn,
}
pub enum Value {
    Str(String),
    Int(i64),
}
pub struct LogEvent {
    pub name: &'static str,
    pub severity: Severity,
    pub time: std::time::SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
}
pub struct LogsConfig {
    pub endpoint: String,
}
impl LogsConfig {
    pub fn from_env(
        _env: impl Fn(&str) -> Option<String>,
        _service: &str,
        _attributes: &[(&str, &str)],
    ) -> anyhow::Result<Option<Self>> {
        Ok(None)
    }
}
#[derive(Default)]
pub struct LogMetrics;
impl LogMetrics {
    pub fn register(&self, _registry: &mut prometheus_client::registry::Registry) {}
}
#[derive(Clone)]
pub struct LogSender;
impl LogSender {
    pub fn disabled() -> Self {
        LogSender
    }
    pub fn emit(&self, _event: LogEvent) -> bool {
        false
    }
    pub async fn flush(&self) {}
}
pub fn start(
    _config: LogsConfig,
    _scope: &'static str,
    _metrics: Arc<LogMetrics>,
) -> (LogSender, tokio::task::JoinHandle<()>) {
    (LogSender, tokio::spawn(async {}))
}
