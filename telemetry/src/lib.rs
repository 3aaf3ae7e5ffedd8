//! Telemetry plumbing shared by `ne-agent` and `ne-leader`: the HTTP endpoints that serve
//! their metrics and health ([`http`]), the OTLP export of the same metrics ([`otlp`]) and of
//! the leader's log events ([`logs`]), over gRPC or HTTP/protobuf, and client TLS from PEM
//! files ([`tls`], also used by the agent's sources), and the logging set-up and shutdown
//! signal of both binaries ([`runtime`]).
//! Instruments live with the code they measure; this crate only carries them out.

pub mod http;
pub mod logs;
pub mod otlp;
pub mod runtime;
pub mod tls;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(test)]
mod test_support;
