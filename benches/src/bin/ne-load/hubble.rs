//! The load harness's Hubble servers: `observer.Observer/GetFlows` over real gRPC on a
//! unix socket (one per simulated node, as Cilium serves `/var/run/cilium/hubble.sock`),
//! streaming generated flows ([`ne_benches::Generator::hubble_response`]) at a set rate.
//!
//! Each flow is stamped with the wall clock when it is encoded, so the reader's lag is the
//! real delay from this server to its FlowTable. The server is ne-proto's raw Hubble server
//! (`ne_proto::testing::HubbleServer`, which writes each message's bytes as given), the one
//! the node agent's scripted test server (`node-agent/tests/hubble/server.rs`) uses to
//! replay a fixed script: this one generates an endless paced stream instead.
//! Bytes are counted as they go on the wire: each message plus its 5-byte gRPC frame header.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ne_benches::{Config, Generator};
use ne_flow::flow::Timestamp;
use ne_proto::observer::{GetFlowsRequest, GetFlowsResponse};
use ne_proto::prost::Message;
use ne_proto::testing::{GetFlows, HubbleServer};
use tokio::sync::{mpsc, watch};
use tonic::Status;

/// Pre-generated flows per node, cycled (generating a flow costs more than reading it).
const POOL: usize = 4096;
/// How often a paced stream tops up to its rate.
const TICK: Duration = Duration::from_millis(5);

/// What one simulated node streams.
#[derive(Clone, Debug)]
pub struct Stream {
    /// The cluster and key distribution (the same for every node).
    pub config: Config,
    /// This node's draws.
    pub seed: u64,
    /// Node name carried by each flow.
    pub node: String,
    /// Flows per second; `None` sends as fast as the reader takes them.
    pub rate: Option<f64>,
    /// New edges per second (flows to a never-seen external address), part of `rate`.
    pub churn: f64,
    /// First churn peer number: nodes use disjoint ranges.
    pub churn_base: u64,
}

/// What a server has sent so far.
#[derive(Debug, Default)]
pub struct Sent {
    pub flows: AtomicU64,
    pub bytes: AtomicU64,
}

/// One node's Hubble server.
#[derive(Clone, Debug)]
pub struct LoadHubble {
    stream: Arc<Stream>,
    pub sent: Arc<Sent>,
    stop: watch::Sender<bool>,
}

impl LoadHubble {
    pub fn new(stream: Stream) -> Self {
        LoadHubble {
            stream: Arc::new(stream),
            sent: Arc::default(),
            stop: watch::Sender::new(false),
        }
    }

    /// Serves on a new unix socket at `path` until [`LoadHubble::stop`].
    pub fn serve_unix(&self, path: &Path) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let mut stop = self.stop.subscribe();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let serve = HubbleServer::new(self.clone()).serve_unix(path, stopped)?;
        Ok(tokio::spawn(async move {
            if let Err(error) = serve.await {
                eprintln!("hubble server failed: {error}");
            }
        }))
    }

    /// Ends the streams and stops accepting.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

/// The wall clock in nanoseconds since the epoch.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Streams `stream`'s flows into `tx` until the reader leaves or `stop` is set.
async fn produce(
    stream: Arc<Stream>,
    sent: Arc<Sent>,
    tx: mpsc::Sender<Result<Bytes, Status>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut generator = Generator::new(&stream.config);
    generator.reseed(stream.seed);
    let placeholder = Timestamp(0);
    let mut pool: Vec<GetFlowsResponse> = (0..POOL)
        .map(|_| generator.hubble_response(placeholder, &stream.node))
        .collect();
    let start = Instant::now();
    let (mut flows, mut churned, mut next) = (0u64, 0u64, 0usize);
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        let due = match stream.rate {
            Some(rate) => (rate * elapsed) as u64,
            None => flows + 256,
        };
        let churn_due = (stream.churn * elapsed) as u64;
        while flows < due {
            let time = Timestamp(now_nanos());
            let bytes: Bytes = if churned < churn_due {
                let n = stream.churn_base + churned;
                churned += 1;
                generator
                    .hubble_new_peer(n, time, &stream.node)
                    .encode_to_vec()
                    .into()
            } else {
                let response = &mut pool[next % POOL];
                next += 1;
                stamp(response, time);
                response.encode_to_vec().into()
            };
            let len = bytes.len() as u64 + 5;
            tokio::select! {
                sent = tx.send(Ok(bytes)) => if sent.is_err() { return },
                _ = stop.wait_for(|s| *s) => return,
            }
            flows += 1;
            sent.flows.fetch_add(1, Ordering::Relaxed);
            sent.bytes.fetch_add(len, Ordering::Relaxed);
        }
        if stream.rate.is_some() {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

/// Sets both times of a response (the flow's and the response's) to `time`.
fn stamp(response: &mut GetFlowsResponse, time: Timestamp) {
    let t = ne_proto::prost_types::Timestamp {
        seconds: time.0.div_euclid(1_000_000_000),
        nanos: time.0.rem_euclid(1_000_000_000) as i32,
    };
    if let Some(ne_proto::observer::get_flows_response::ResponseTypes::Flow(flow)) =
        &mut response.response_types
    {
        flow.time = Some(t);
    }
    response.time = Some(t);
}

impl GetFlows for LoadHubble {
    fn get_flows(
        &self,
        _request: GetFlowsRequest,
    ) -> Result<mpsc::Receiver<Result<Bytes, Status>>, Status> {
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(produce(
            self.stream.clone(),
            self.sent.clone(),
            tx,
            self.stop.subscribe(),
        ));
        Ok(rx)
    }
}
