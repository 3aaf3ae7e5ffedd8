//! `--source goldmane`: Calico Goldmane's `goldmane.Flows/Stream` (Calico ≥ 3.30).
//!
//! Place in the data flow: Goldmane (Deployment `goldmane`, namespace `calico-system`)
//! aggregates the flow logs every Felix pushes to it and streams each completed 15 s
//! window as one `FlowResult` per flow key. This source dials it with mTLS, asks for the
//! flows from now on (`start_time_gte = 0`, no backfill), turns each `Flow` into a
//! [`FlowRecord`](ne_flow::flow::FlowRecord) with
//! [`ne_dataplanes::goldmane::record_from_parts`] — the constructor the JSON decoder of
//! `ne-leader learn` uses too, so both read a flow alike — and hands it to the
//! [`FlowSink`].
//!
//! **Deployment: one replica, not per node.** Goldmane's stream is cluster-wide and has no
//! node field to filter on (flows carry names, namespaces and labels, no IPs and no node),
//! so every agent would receive every flow. Run the agent with `--source goldmane` as a
//! one-replica Deployment (any node), not in the DaemonSet. Each connection is reported
//! twice (reporter `Src` on the client's node, `Dst` on the server's); the edge rules learn
//! egress from `Src` and ingress from `Dst`.
//!
//! **mTLS is mandatory** (Goldmane requires and verifies a client certificate signed by the
//! Tigera operator's CA; it checks no name). The agent refuses to start without
//! `--goldmane-tls-ca`, `--goldmane-tls-cert` and `--goldmane-tls-key`. Where to get them
//! (as the Tigera operator sets Goldmane up):
//! - CA: `ca.crt` of Secret `calico-system/goldmane-key-pair`, or ConfigMap
//!   `calico-system/goldmane-ca-bundle` (the operator's trusted bundle);
//! - client certificate and key: `tls.crt`/`tls.key` of Secret `calico-system/node-certs`
//!   (as Goldmane's own README does), or any pair issued by the operator's CA. Mount them
//!   from `calico-system` (the Deployment must run there, or the Secrets be copied).
//! - The server certificate's names are `goldmane`, `goldmane.calico-system`,
//!   `goldmane.calico-system.svc` and `….svc.cluster.local` (default address
//!   `goldmane.calico-system.svc:7443`); `--goldmane-tls-server-name` overrides the name
//!   checked when dialling an IP.
//!
//! The files are read again at every dial, so rotated certificates are used on the next
//! reconnect. No server-side filter is sent: `Filter.policies` changed content between
//! Calico 3.31 and 3.32 and `Filter.reporter` is unknown before 3.32, so any filtering is
//! done client-side (by the edge rules).
//!
//! Failure handling: the stream is expected to run forever. Any error, or the server ending
//! the stream, is logged (warn), counted in `source_reconnects`, and followed by a reconnect
//! after a [`Backoff`] delay (reset once a stream delivered flows). `source_connected` and
//! `/readyz` are up exactly while a stream is open. The source only returns when asked to
//! stop.
//!
//! A denied flow carries the denying policy from `FlowKey.policies` (the first enforced
//! `Deny` hit), as on the JSON path.

use std::time::Duration;

use anyhow::Context;
use ne_dataplanes::goldmane::{GoldmaneFlow, GoldmanePolicyHit, record_from_parts};
use ne_dataplanes::{DecodeError, Decoded};
use ne_flow::flow::{FlowRecord, Timestamp};
use ne_proto::goldmane::flows_client::FlowsClient;
use ne_proto::goldmane::{Flow, FlowResult, FlowStreamRequest};
use tonic::transport::{Channel, Endpoint};

use super::SourceState;
use super::backoff::Backoff;
use super::tls::TlsFiles;
use crate::sink::FlowSink;

/// Goldmane's stream window; the request field must carry it (the server ignores it).
const AGGREGATION_INTERVAL_SECS: i64 = 15;
/// How long a dial (TCP and TLS) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings to notice a dead connection while no flows arrive. Not more often than
/// grpc-go servers allow by default (5 min), or they answer with `GOAWAY too_many_pings`.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(300);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// TCP keepalive, which needs no cooperation from the server.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// A configured Goldmane source.
#[derive(Debug)]
pub struct GoldmaneSource {
    /// `host:port` as given.
    address: String,
    /// The host part, the default name to verify.
    host: String,
    tls: TlsFiles,
    backoff: Backoff,
}

/// Why the agent cannot use the Goldmane configuration it was given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A piece of the mTLS material is missing.
    #[error(
        "mTLS is mandatory for Goldmane: --goldmane-tls-ca, --goldmane-tls-cert and \
         --goldmane-tls-key are all required (missing: {0}); e.g. ca.crt of Secret \
         calico-system/goldmane-key-pair, tls.crt and tls.key of Secret calico-system/node-certs"
    )]
    MissingTls(String),
    /// The address is not `host:port`.
    #[error("--goldmane-address {0:?} is not host:port (e.g. goldmane.calico-system.svc:7443)")]
    BadAddress(String),
}

impl GoldmaneSource {
    /// Checks the configuration: a `host:port` address and all of CA, certificate and key.
    /// The files themselves are read at each dial.
    pub fn new(address: &str, tls: TlsFiles) -> Result<Self, ConfigError> {
        let missing: Vec<&str> = [
            (tls.ca.is_none(), "CA"),
            (tls.cert.is_none(), "client certificate"),
            (tls.key.is_none(), "client key"),
        ]
        .into_iter()
        .filter_map(|(absent, what)| absent.then_some(what))
        .collect();
        if !missing.is_empty() {
            return Err(ConfigError::MissingTls(missing.join(", ")));
        }
        let host = host_of(address).ok_or_else(|| ConfigError::BadAddress(address.to_owned()))?;
        Ok(GoldmaneSource {
            address: address.to_owned(),
            host: host.to_owned(),
            tls,
            backoff: Backoff::for_streams(),
        })
    }

    /// Replaces the reconnect delays (tests use short ones).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The address dialled.
    pub fn address(&self) -> &str {
        &self.address
    }

    async fn dial(&self) -> anyhow::Result<Channel> {
        let tls = self.tls.load(&self.host)?;
        let endpoint = Endpoint::from_shared(format!("https://{}", self.address))
            .with_context(|| format!("bad Goldmane address {}", self.address))?
            .tls_config(tls)
            .context("bad TLS configuration for Goldmane")?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .tcp_keepalive(Some(TCP_KEEPALIVE));
        endpoint
            .connect()
            .await
            .with_context(|| format!("cannot connect to Goldmane at {}", self.address))
    }

    /// One connection: dial, open the stream, read it until it fails or ends. `delivered`
    /// counts the messages received.
    async fn stream_once(
        &self,
        sink: &FlowSink,
        state: &SourceState,
        delivered: &mut u64,
    ) -> anyhow::Result<()> {
        let mut client = FlowsClient::new(self.dial().await?);
        let request = FlowStreamRequest {
            start_time_gte: 0,
            filter: None,
            aggregation_interval: AGGREGATION_INTERVAL_SECS,
        };
        let mut stream = client
            .stream(request)
            .await
            .context("Goldmane refused Flows/Stream")?
            .into_inner();
        let _up = Connected::new(sink, state);
        tracing::info!(address = %self.address, "Goldmane stream open");
        while let Some(result) = stream.message().await.context("Goldmane stream broken")? {
            *delivered += 1;
            sink.accept(record_of(&result).map(Decoded::Record));
        }
        Ok(())
    }
}

/// Runs the source until `state` is told to stop; network errors only cause reconnects.
pub async fn run(
    mut source: GoldmaneSource,
    sink: FlowSink,
    state: SourceState,
) -> anyhow::Result<()> {
    while !state.stopping() {
        let mut delivered = 0;
        let outcome = tokio::select! {
            outcome = source.stream_once(&sink, &state, &mut delivered) => outcome,
            () = state.stopped() => break,
        };
        let error = match outcome {
            Ok(()) => "the server ended the stream".to_owned(),
            Err(error) => format!("{error:#}"),
        };
        sink.metrics().source_reconnects.inc();
        if delivered > 0 {
            source.backoff.reset();
        }
        let delay = source.backoff.next_delay();
        tracing::warn!(
            address = %source.address,
            error,
            flows = delivered,
            retry_in_ms = delay.as_millis() as u64,
            "Goldmane stream down; reconnecting"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = state.stopped() => break,
        }
    }
    tracing::info!(address = %source.address, "Goldmane source stopped");
    Ok(())
}

/// `source_connected` = 1 and ready while alive; back to 0 when dropped (stream ended,
/// failed or cancelled by the shutdown).
struct Connected<'a> {
    sink: &'a FlowSink,
    state: &'a SourceState,
}

impl<'a> Connected<'a> {
    fn new(sink: &'a FlowSink, state: &'a SourceState) -> Self {
        sink.metrics().source_connected.set(1);
        state.set_ready(true);
        Connected { sink, state }
    }
}

impl Drop for Connected<'_> {
    fn drop(&mut self) {
        self.sink.metrics().source_connected.set(0);
        self.state.set_ready(false);
    }
}

/// The flow record of one streamed `FlowResult`.
pub fn record_of(result: &FlowResult) -> Result<FlowRecord, DecodeError> {
    record_of_flow(
        result
            .flow
            .as_ref()
            .ok_or(DecodeError::MissingField("flow"))?,
    )
}

/// The flow record of one Goldmane `Flow`, as the JSON decoder builds it for the same flow.
pub fn record_of_flow(flow: &Flow) -> Result<FlowRecord, DecodeError> {
    let key = flow.key.as_ref().ok_or(DecodeError::MissingField("Key"))?;
    let parts = GoldmaneFlow {
        source_name: &key.source_name,
        source_namespace: &key.source_namespace,
        source_type: key.source_type,
        dest_name: &key.dest_name,
        dest_namespace: &key.dest_namespace,
        dest_type: key.dest_type,
        dest_port: key.dest_port,
        proto: &key.proto,
        reporter: key.reporter,
        action: key.action,
        // proto3: 0 is "not set".
        start_time: (flow.start_time != 0).then(|| Timestamp::from_secs(flow.start_time)),
        num_connections_started: flow.num_connections_started,
        enforced_policies: key
            .policies
            .iter()
            .flat_map(|t| &t.enforced_policies)
            .map(|hit| GoldmanePolicyHit {
                kind: hit.kind,
                namespace: &hit.namespace,
                name: &hit.name,
                action: hit.action,
                trigger_namespace: hit.trigger.as_ref().map_or("", |t| t.namespace.as_str()),
                trigger_name: hit.trigger.as_ref().map_or("", |t| t.name.as_str()),
            }),
    };
    record_from_parts(parts, &flow.source_labels, &flow.dest_labels)
}

/// The host of `host:port` or `[v6]:port`; `None` when the port is missing or invalid.
fn host_of(address: &str) -> Option<&str> {
    let (host, port) = address.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty() && !host.contains('/')).then_some(host)
}

#[cfg(test)]
mod tests;
