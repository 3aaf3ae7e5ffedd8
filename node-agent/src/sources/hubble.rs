//! `--source hubble`: Cilium Hubble's `observer.Observer/GetFlows` stream, followed from
//! now on (no history: learning starts when the agent starts), into the [`FlowSink`].
//!
//! Two ways to reach Hubble (both serve the same `observer.Observer` service):
//! - **The node's own socket** (default `unix:///var/run/cilium/hubble.sock`): plain gRPC,
//!   no TLS; the DaemonSet mounts `/var/run/cilium` from the host and runs as root (or a
//!   group that may open the socket). The socket only serves this node's flows, so the
//!   work is sharded by construction and no node filter is sent.
//! - **Hubble Relay** (`host:port`): one stream for the whole cluster, TLS or mTLS when
//!   `--hubble-tls-ca` is given. Each agent asks only for its own node's flows (a
//!   `node_name` whitelist from `--node-name`), so N agents split Relay's stream instead of
//!   each reading all of it. Relay names nodes `cluster/node`; the filter lists both `node`
//!   and `*/node`, because older Hubble matches a pattern without a slash literally while
//!   newer Hubble reads it as "this node in any cluster".
//!
//! Both ask Hubble to send only the event types learning uses: drop (1), trace (4) and
//! policy verdict (5), by a `GetFlowsRequest` whitelist on the flow's event type. Leaving L7
//! access logs (129, one per request), socket-LB traces (7) and debug or capture events on
//! the server cuts the volume the agent reads and, above all, what Hubble's ring buffer must
//! hold for this client: a follow-mode reader that falls behind loses events (reported as
//! `lost_events`), it gets no error.
//!
//! The hot path takes each `GetFlowsResponse` undecoded ([`ne_proto::raw`]) and records
//! it with a [`HubbleDecoder`] (one per stream): no prost structs, no copy, no allocation
//! for a flow over a known edge. Per message: a flow is recorded (a policy denial is also
//! kept as a protect-mode observation); a `LostEvents` is counted in `agent_source_lost_events_total{source=
//! "hubble",cause}` and logged at most once per [`LOST_LOG_INTERVAL`]; a Relay node status
//! is logged at debug; undecodable bytes are counted as a `decode_error` drop and the stream
//! goes on.
//!
//! A stream that fails or ends is retried forever with capped exponential backoff and
//! jitter ([`Backoff`]), reset once a stream has delivered a message; nothing here ends the
//! process except shutdown. TLS files are read again at every dial.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use ne_dataplanes::hubble_pb::{HubbleDecoder, HubbleRecorded, LostEventSource};
use ne_proto::flow::{EventTypeFilter, FlowFilter};
use ne_proto::observer::GetFlowsRequest;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

use super::SourceState;
use super::backoff::Backoff;
use super::tls::TlsFiles;
use crate::args::Args;
use crate::metrics::{AgentMetrics, LostLabel};
use crate::sink::FlowSink;

/// Cilium monitor event types learning reads (`EventTypeFilter.type`): drop, trace and
/// policy verdict.
pub const LEARNED_EVENT_TYPES: [i32; 3] = [1, 4, 5];

/// At most one lost-events warning per this interval; the metric counts every event.
pub const LOST_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How long a dial may take (the Hubble CLI's default).
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// HTTP/2 pings on an idle follow stream, so that a Relay that vanished without closing
/// the connection is noticed.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where Hubble is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubbleTarget {
    /// The node's own Hubble server on a unix socket (plain gRPC).
    Unix(PathBuf),
    /// Hubble Relay (or a Hubble server's TCP port) at `host:port`.
    Relay {
        /// `host:port`, as given.
        authority: String,
        /// The host, without IPv6 brackets: the TLS name to verify unless overridden.
        host: String,
    },
}

impl HubbleTarget {
    /// Parses `unix:///path` (or `unix:path`) or `host:port`.
    pub fn parse(address: &str) -> anyhow::Result<Self> {
        let address = address.trim();
        if let Some(rest) = address.strip_prefix("unix:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            anyhow::ensure!(
                !path.is_empty(),
                "--hubble-address {address:?} names no socket path"
            );
            return Ok(HubbleTarget::Unix(PathBuf::from(path)));
        }
        let wrong = || {
            format!("--hubble-address {address:?} is neither unix:///path nor host:port (Relay)")
        };
        anyhow::ensure!(!address.contains("://"), wrong());
        let uri: Uri = format!("http://{address}").parse().with_context(wrong)?;
        let (Some(host), Some(_port)) = (uri.host(), uri.port_u16()) else {
            anyhow::bail!(wrong());
        };
        anyhow::ensure!(uri.path() == "/" && !address.ends_with('/'), wrong());
        Ok(HubbleTarget::Relay {
            authority: address.to_owned(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        })
    }
}

impl fmt::Display for HubbleTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubbleTarget::Unix(path) => write!(f, "unix://{}", path.display()),
            HubbleTarget::Relay { authority, .. } => f.write_str(authority),
        }
    }
}

/// Everything the Hubble source needs.
#[derive(Clone, Debug)]
pub struct HubbleConfig {
    /// The server.
    pub target: HubbleTarget,
    /// TLS for a Relay target (ignored on the unix socket).
    pub tls: TlsFiles,
    /// This node's name: the Relay stream is filtered to it.
    pub node_name: Option<String>,
    /// Delays between reconnects.
    pub backoff: Backoff,
}

impl HubbleConfig {
    /// The configuration `--hubble-*` and `--node-name` describe.
    pub fn from_args(args: &Args) -> anyhow::Result<Self> {
        let config = HubbleConfig {
            target: HubbleTarget::parse(&args.hubble_address)?,
            tls: args.hubble_tls.files(),
            node_name: args.node_name.clone(),
            backoff: Backoff::for_streams(),
        };
        // Fail at start, not at every dial, on a name Hubble would refuse as a pattern.
        config.request()?;
        Ok(config)
    }

    /// The `GetFlows` request: from now on, learned event types only, and on Relay only
    /// this node's flows.
    pub fn request(&self) -> anyhow::Result<GetFlowsRequest> {
        let node_name = match (&self.target, &self.node_name) {
            (HubbleTarget::Relay { .. }, Some(node)) => node_patterns(node)?,
            (HubbleTarget::Relay { .. }, None) | (HubbleTarget::Unix(_), _) => Vec::new(),
        };
        let event_type = LEARNED_EVENT_TYPES
            .iter()
            .map(|&t| EventTypeFilter {
                r#type: t,
                ..EventTypeFilter::default()
            })
            .collect();
        Ok(GetFlowsRequest {
            number: 0,
            follow: true,
            // Inside one filter the fields are ANDed and each list is ORed: (drop OR trace
            // OR policy verdict) AND (this node).
            whitelist: vec![FlowFilter {
                event_type,
                node_name,
                ..FlowFilter::default()
            }],
            ..GetFlowsRequest::default()
        })
    }
}

/// The `node_name` patterns that select `node` behind Relay: `node` and `*/node` (a name
/// that already has a cluster part, `cluster/node`, is used as it is). Kubernetes node
/// names are DNS names; anything else Hubble would refuse as a pattern.
pub fn node_patterns(node: &str) -> anyhow::Result<Vec<String>> {
    let node = node.trim().to_ascii_lowercase();
    let valid_part = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    let ok = match node.split_once('/') {
        Some((cluster, name)) => valid_part(cluster) && valid_part(name),
        None => valid_part(&node),
    };
    anyhow::ensure!(
        ok,
        "--node-name {node:?} is not a node name Hubble can filter on (lowercase letters, digits, '-', '.')"
    );
    Ok(if node.contains('/') {
        vec![node]
    } else {
        vec![node.clone(), format!("*/{node}")]
    })
}

/// Streams flows until shutdown, reconnecting forever. Returns `Ok` once stopped.
pub async fn run(config: HubbleConfig, sink: FlowSink, state: SourceState) -> anyhow::Result<()> {
    let request = config.request()?;
    match (&config.target, &config.node_name) {
        (HubbleTarget::Unix(_), _) if config.tls.enabled() => {
            tracing::warn!("--hubble-tls-* is ignored: the node's Hubble socket is plain gRPC");
        }
        (HubbleTarget::Relay { .. }, None) => {
            tracing::warn!(
                "--node-name is not set: this agent reads every node's flows from Relay"
            );
        }
        _ => {}
    }
    let mut backoff = config.backoff.clone();
    let mut lost = LostLog::default();
    let metrics = sink.metrics();
    while !state.stopping() {
        let mut delivered = 0u64;
        let result = tokio::select! {
            result = stream(&config, &request, &sink, &state, &mut delivered, &mut lost) => result,
            () = state.stopped() => Ok(()),
        };
        metrics.source_connected.set(0);
        state.set_ready(false);
        if state.stopping() {
            break;
        }
        let address = config.target.to_string();
        match result {
            Ok(()) => {
                tracing::warn!(%address, delivered, "Hubble ended the flow stream; reconnecting")
            }
            Err(error) => tracing::warn!(
                %address,
                delivered,
                error = format!("{error:#}"),
                "Hubble flow stream failed; reconnecting"
            ),
        }
        if delivered > 0 {
            backoff.reset();
        }
        metrics.source_reconnects.inc();
        tokio::select! {
            () = tokio::time::sleep(backoff.next_delay()) => {}
            () = state.stopped() => break,
        }
    }
    tracing::info!("Hubble source stopped");
    Ok(())
}

/// One connection: dial, start `GetFlows`, hand every message to the sink. `Ok` when the
/// server ends the stream; `delivered` counts the messages received.
async fn stream(
    config: &HubbleConfig,
    request: &GetFlowsRequest,
    sink: &FlowSink,
    state: &SourceState,
    delivered: &mut u64,
    lost: &mut LostLog,
) -> anyhow::Result<()> {
    let channel = connect(config).await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    let mut messages = ne_proto::raw::hubble_get_flows(&mut grpc, request.clone())
        .await
        .context("the GetFlows call failed")?
        .into_inner();
    sink.metrics().source_connected.set(1);
    state.set_ready(true);
    tracing::info!(address = %config.target, "streaming flows from Hubble");
    let mut decoder = HubbleDecoder::new();
    while let Some(bytes) = messages.message().await.context("the flow stream broke")? {
        *delivered += 1;
        match decoder.record(sink.table(), &bytes, sink.provider()) {
            Ok(HubbleRecorded::Flow { time, outcome }) => sink.recorded(time, outcome),
            Ok(HubbleRecorded::Denial(flow)) => sink.record(&flow),
            Ok(HubbleRecorded::LostEvents { source, count }) => {
                lost.record(sink.metrics(), source, count, Instant::now());
            }
            Ok(HubbleRecorded::NodeStatus(status)) => tracing::debug!(
                state = ?status.state,
                nodes = ?status.node_names,
                message = ?status.message,
                "Hubble Relay node status"
            ),
            Ok(HubbleRecorded::Other) => {}
            Err(error) => sink.accept(Err(error)),
        }
    }
    Ok(())
}

/// Opens a channel to the target: the unix socket, or `host:port` with TLS when a CA is
/// configured (the files are read now, so rotated certificates are picked up).
async fn connect(config: &HubbleConfig) -> anyhow::Result<Channel> {
    match &config.target {
        HubbleTarget::Unix(path) => {
            // The URI only fills the `:authority` header; the connector ignores it.
            let endpoint = Endpoint::from_static("http://localhost").connect_timeout(DIAL_TIMEOUT);
            unix::connect(endpoint, path.clone().into())
                .await
                .with_context(|| format!("cannot connect to {}", config.target))
        }
        HubbleTarget::Relay { authority, host } => {
            let scheme = if config.tls.enabled() {
                "https"
            } else {
                "http"
            };
            let mut endpoint = Endpoint::from_shared(format!("{scheme}://{authority}"))
                .with_context(|| format!("invalid Hubble address {authority}"))?
                .connect_timeout(DIAL_TIMEOUT)
                .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
                .keep_alive_timeout(KEEPALIVE_TIMEOUT)
                .keep_alive_while_idle(true);
            if config.tls.enabled() {
                endpoint = endpoint
                    .tls_config(config.tls.load(host)?)
                    .context("invalid Hubble TLS configuration")?;
            }
            endpoint
                .connect()
                .await
                .with_context(|| format!("cannot connect to {authority}"))
        }
    }
}

#[cfg(unix)]
mod unix {
    //! A tonic connector that dials a unix socket.

    use std::path::Path;
    use std::sync::Arc;

    use hyper_util::rt::TokioIo;
    use tokio::net::UnixStream;
    use tonic::codegen::{Context, Future, Pin, Poll, Service};
    use tonic::transport::{Channel, Endpoint, Uri};

    /// Dials `path` for every connection the channel opens.
    #[derive(Clone, Debug)]
    struct UnixConnector(Arc<Path>);

    impl Service<Uri> for UnixConnector {
        type Response = TokioIo<UnixStream>;
        type Error = std::io::Error;
        type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Uri) -> Self::Future {
            let path = self.0.clone();
            Box::pin(async move { UnixStream::connect(&*path).await.map(TokioIo::new) })
        }
    }

    pub(super) async fn connect(
        endpoint: Endpoint,
        path: Arc<Path>,
    ) -> Result<Channel, tonic::transport::Error> {
        endpoint.connect_with_connector(UnixConnector(path)).await
    }
}

#[cfg(not(unix))]
mod unix {
    //! Unix sockets need a unix platform.

    use std::path::Path;
    use std::sync::Arc;

    use tonic::transport::{Channel, Endpoint};

    pub(super) async fn connect(_: Endpoint, path: Arc<Path>) -> anyhow::Result<Channel> {
        anyhow::bail!("{}: unix sockets need a unix platform", path.display())
    }
}

/// Counts lost events and rate-limits the warning about them.
#[derive(Debug, Default)]
struct LostLog {
    /// When the last warning was logged.
    last_logged: Option<Instant>,
    /// Events lost since then.
    unlogged: u64,
}

impl LostLog {
    /// Counts `count` events lost at `source`; warns unless a warning was logged less than
    /// [`LOST_LOG_INTERVAL`] before `now`. Returns the number the warning reported, if one
    /// was logged.
    fn record(
        &mut self,
        metrics: &AgentMetrics,
        source: LostEventSource,
        count: u64,
        now: Instant,
    ) -> Option<u64> {
        metrics
            .lost_events
            .get_or_create(&LostLabel {
                source: "hubble",
                cause: source.as_str(),
            })
            .inc_by(count);
        self.unlogged = self.unlogged.saturating_add(count);
        if self
            .last_logged
            .is_some_and(|t| now.saturating_duration_since(t) < LOST_LOG_INTERVAL)
        {
            return None;
        }
        let lost = std::mem::take(&mut self.unlogged);
        self.last_logged = Some(now);
        tracing::warn!(
            lost,
            cause = source.as_str(),
            "Hubble lost flow events before the agent read them: learning has a gap \
             (network_enforcer_agent_source_lost_events_total)"
        );
        Some(lost)
    }
}

#[cfg(test)]
mod tests;
