//! What sets one OTLP signal apart (metrics in [`super`], log events in [`crate::logs`]): the
//! infix of its variables, which [`super::config`] reads, and its HTTP path, messages and
//! gRPC call, which [`super::transport`] sends.

use std::future::Future;

use prost::Message;
use tonic::transport::Channel;

/// One OTLP signal: its service, its HTTP path and its variables' infix.
pub(crate) trait Signal {
    /// In variable names: `OTEL_EXPORTER_OTLP_<NAME>_ENDPOINT`, `OTEL_<NAME>_EXPORTER`.
    const NAME: &'static str;
    /// Appended to the generic endpoint for HTTP (`/v1/logs`).
    const HTTP_PATH: &'static str;
    type Request: Message + Send + 'static;
    type Response: Message + Default + Send + 'static;

    /// The gRPC `Export` call.
    fn grpc(
        channel: Channel,
        request: tonic::Request<Self::Request>,
    ) -> impl Future<Output = Result<tonic::Response<Self::Response>, tonic::Status>> + Send;
}
