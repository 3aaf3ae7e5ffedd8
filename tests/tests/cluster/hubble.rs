//! A Hubble server for the end-to-end tests: `observer.Observer/GetFlows` over real gRPC on a
//! unix socket, streaming the flows it is given again and again (a data plane with steady
//! traffic), so an agent that connects or reconnects at any time sees them.

#[path = "../../../node-agent/tests/hubble/flows.rs"]
mod flows;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ne_proto::observer::observer_server::{Observer, ObserverServer};
use ne_proto::observer::{
    GetFlowsRequest, GetFlowsResponse, ServerStatusRequest, ServerStatusResponse,
};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Request, Response, Status};

/// Serves `observer` on a new unix socket at `path` (replacing a stale one) until the
/// runtime ends.
fn serve_observer<O: Observer>(path: &Path, observer: O) {
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(ObserverServer::new(observer))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await
            .unwrap();
    });
}

/// `ServerStatus`: nothing to say.
fn status() -> Result<Response<ServerStatusResponse>, Status> {
    Ok(Response::new(ServerStatusResponse::default()))
}

/// The flows streamed, shared with the test.
#[derive(Clone, Default)]
pub struct Hubble {
    flows: Arc<Mutex<Vec<GetFlowsResponse>>>,
}

impl Hubble {
    /// Serves on a new unix socket at `path` until the runtime ends.
    pub fn serve(path: &Path) -> Self {
        let hubble = Hubble::default();
        serve_observer(path, hubble.clone());
        hubble
    }

    /// Adds Hubble JSON lines (as `hubble observe -o json` prints them) to the stream.
    pub fn add_json(&self, lines: &str) {
        self.flows.lock().unwrap().extend(flows::responses(lines));
    }
}

#[tonic::async_trait]
impl Observer for Hubble {
    type GetFlowsStream = ReceiverStream<Result<GetFlowsResponse, Status>>;

    async fn get_flows(
        &self,
        _request: Request<GetFlowsRequest>,
    ) -> Result<Response<Self::GetFlowsStream>, Status> {
        let (tx, rx) = mpsc::channel(64);
        let flows = self.flows.clone();
        tokio::spawn(async move {
            loop {
                let batch = flows.lock().unwrap().clone();
                for flow in batch {
                    if tx.send(Ok(flow)).await.is_err() {
                        return;
                    }
                }
                // Traffic pacing, not synchronisation: the same flows again shortly.
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn server_status(
        &self,
        _request: Request<ServerStatusRequest>,
    ) -> Result<Response<ServerStatusResponse>, Status> {
        status()
    }
}

/// One endpoint of a flow: pod name, address, and the workload when Hubble names it.
pub struct Side<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub ip: &'a str,
    pub app: &'a str,
    pub deployment: Option<&'a str>,
}

/// A forwarded TCP connection `src → dst:port` as Hubble reports it: once leaving the source
/// (its egress) and once arriving at the destination (its ingress). Two JSON lines.
pub fn tcp_flow(src: &Side<'_>, dst: &Side<'_>, port: u16) -> String {
    format!(
        "{}\n{}\n",
        observed(src, dst, port, false),
        observed(src, dst, port, true)
    )
}

/// A TCP connection `src → dst:port` a policy at the destination dropped, as Hubble reports
/// it: `DROPPED` with `POLICY_DENIED`, at the destination's ingress. One JSON line.
pub fn denied_tcp_flow(src: &Side<'_>, dst: &Side<'_>, port: u16) -> String {
    denied_tcp_flow_at(src, dst, port, true)
}

/// As [`denied_tcp_flow`], dropped at the destination's ingress when `at_ingress`, else at
/// the source's egress (an egress policy of the source).
pub fn denied_tcp_flow_at(src: &Side<'_>, dst: &Side<'_>, port: u16, at_ingress: bool) -> String {
    let mut line: serde_json::Value =
        serde_json::from_str(&observed(src, dst, port, at_ingress)).unwrap();
    line["flow"]["verdict"] = json!("DROPPED");
    line["flow"]["drop_reason_desc"] = json!("POLICY_DENIED");
    line["flow"]["event_type"] = json!({"type": 1, "sub_type": 133});
    format!("{line}\n")
}

/// As [`denied_tcp_flow`], dropped by a deny rule of the CiliumNetworkPolicy `name` in the
/// destination's namespace, which Hubble names in `ingress_denied_by`.
pub fn denied_tcp_flow_by(src: &Side<'_>, dst: &Side<'_>, port: u16, name: &str) -> String {
    let mut line: serde_json::Value =
        serde_json::from_str(&denied_tcp_flow_at(src, dst, port, true)).unwrap();
    line["flow"]["ingress_denied_by"] = json!([{
        "name": name,
        "namespace": dst.namespace,
        "labels": [
            format!("k8s:io.cilium.k8s.policy.name={name}"),
            format!("k8s:io.cilium.k8s.policy.namespace={}", dst.namespace),
        ],
        "revision": 3,
        "kind": "CiliumNetworkPolicy",
    }]);
    format!("{line}\n")
}

/// A forwarded TCP connection from another node (`reserved:remote-node`, at `ip`) into
/// `dst:port`, as Hubble reports it at the destination's ingress: a peer no NetworkPolicy
/// rule can name. One JSON line.
pub fn remote_node_tcp_flow(ip: &str, dst: &Side<'_>, port: u16) -> String {
    let mut line: serde_json::Value =
        serde_json::from_str(&observed(dst, dst, port, true)).unwrap();
    line["flow"]["IP"]["source"] = json!(ip);
    line["flow"]["source"] = json!({"identity": 6, "labels": ["reserved:remote-node"]});
    format!("{line}\n")
}

/// One observation of `src → dst:port`: at the destination's ingress when `at_ingress`,
/// else at the source's egress.
fn observed(src: &Side<'_>, dst: &Side<'_>, port: u16, at_ingress: bool) -> String {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let endpoint = |s: &Side<'_>| {
        let mut e = json!({
            "namespace": s.namespace,
            "pod_name": s.pod,
            "labels": [
                format!("k8s:app={}", s.app),
                format!("k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name={}", s.namespace),
                format!("k8s:io.kubernetes.pod.namespace={}", s.namespace),
            ],
        });
        if let Some(d) = s.deployment {
            e["workloads"] = json!([{"name": d, "kind": "Deployment"}]);
        }
        e
    };
    let flow = json!({
        "time": now,
        "verdict": "FORWARDED",
        "IP": {"source": src.ip, "destination": dst.ip, "ipVersion": "IPv4"},
        "l4": {"TCP": {"source_port": 40000, "destination_port": port, "flags": {"SYN": true}}},
        "source": endpoint(src),
        "destination": endpoint(dst),
        "Type": "L3_L4",
        "node_name": "e2e/worker-1",
        "event_type": {"type": 4},
        "traffic_direction": if at_ingress { "INGRESS" } else { "EGRESS" },
        "trace_observation_point": if at_ingress { "TO_ENDPOINT" } else { "FROM_ENDPOINT" },
        "is_reply": false,
    });
    json!({"flow": flow, "node_name": "e2e/worker-1", "time": now}).to_string()
}

/// A Hubble server that streams a fixed script once per call: `first`, then (once the gate
/// opens) `rest`, then holds the stream open, as a node's Hubble does between flows.
#[derive(Clone)]
pub struct ScriptedHubble {
    first: Arc<Vec<GetFlowsResponse>>,
    rest: Arc<Vec<GetFlowsResponse>>,
    gate: tokio::sync::watch::Receiver<bool>,
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

impl ScriptedHubble {
    /// Serves on a new unix socket at `path` until the runtime ends. `gate` releases `rest`.
    pub fn serve(
        path: &Path,
        first: Vec<GetFlowsResponse>,
        rest: Vec<GetFlowsResponse>,
        gate: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let hubble = ScriptedHubble {
            first: Arc::new(first),
            rest: Arc::new(rest),
            gate,
            sent: Arc::default(),
        };
        serve_observer(path, hubble.clone());
        hubble
    }

    /// Responses sent so far (over every call).
    pub fn sent(&self) -> usize {
        self.sent.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[tonic::async_trait]
impl Observer for ScriptedHubble {
    type GetFlowsStream = ReceiverStream<Result<GetFlowsResponse, Status>>;

    async fn get_flows(
        &self,
        _request: Request<GetFlowsRequest>,
    ) -> Result<Response<Self::GetFlowsStream>, Status> {
        let (tx, rx) = mpsc::channel(16);
        let script = self.clone();
        tokio::spawn(async move {
            for flow in script.first.iter() {
                if tx.send(Ok(flow.clone())).await.is_err() {
                    return;
                }
                script
                    .sent
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            let mut gate = script.gate.clone();
            if gate.wait_for(|open| *open).await.is_err() {
                return;
            }
            for flow in script.rest.iter() {
                if tx.send(Ok(flow.clone())).await.is_err() {
                    return;
                }
                script
                    .sent
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            // Hold the stream open until the agent goes.
            tx.closed().await;
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn server_status(
        &self,
        _request: Request<ServerStatusRequest>,
    ) -> Result<Response<ServerStatusResponse>, Status> {
        status()
    }
}

/// Every line of Hubble JSON `capture` as the response a Hubble server sends.
pub fn responses(capture: &str) -> Vec<GetFlowsResponse> {
    flows::responses(capture)
}
