//! The Goldmane source against an in-process tonic `Flows` server with real mTLS
//! (certificates made at test time), fed with the example and real Goldmane records.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ne_dataplanes::{Decoded, Format, decode_line, decode_lines};
use ne_flow::edge::Provider;
use ne_flow::flow::Verdict;
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_proto::goldmane::flows_server::{Flows, FlowsServer};
use ne_proto::goldmane::{
    Action, EndpointType, Flow, FlowKey, FlowResult, PolicyHit, PolicyTrace, Reporter,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

use super::*;
use crate::metrics::{AgentMetrics, DropReason, ReasonLabel, SourceLabel};

const SERVER_NAME: &str = "goldmane.calico-system.svc";

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/goldmane.jsonl")
}

fn real_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/real/goldmane-flows.jsonl")
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------- protojson -> prost

fn int64(v: &Value) -> i64 {
    match v {
        Value::Null => 0,
        Value::Number(n) => n.as_i64().unwrap(),
        Value::String(s) => s.parse().unwrap(),
        other => panic!("not an int64: {other}"),
    }
}

fn string(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(string).collect())
        .unwrap_or_default()
}

fn enum_of(v: &Value, from_name: fn(&str) -> Option<i32>) -> i32 {
    match v {
        Value::Null => 0,
        Value::Number(n) => i32::try_from(n.as_i64().unwrap()).unwrap(),
        Value::String(s) => from_name(s).unwrap_or_else(|| panic!("unknown enum name {s}")),
        other => panic!("not an enum: {other}"),
    }
}

/// A protojson Goldmane `Flow` line as the prost message Goldmane would stream.
fn flow_of_json(line: &str) -> Flow {
    let v: Value = serde_json::from_str(line).unwrap();
    let k = &v["Key"];
    let endpoint_type = |s: &str| EndpointType::from_str_name(s).map(|e| e as i32);
    Flow {
        key: Some(FlowKey {
            source_name: string(&k["sourceName"]),
            source_namespace: string(&k["sourceNamespace"]),
            source_type: enum_of(&k["sourceType"], endpoint_type),
            dest_name: string(&k["destName"]),
            dest_namespace: string(&k["destNamespace"]),
            dest_type: enum_of(&k["destType"], endpoint_type),
            dest_port: int64(&k["destPort"]),
            dest_service_name: string(&k["destServiceName"]),
            dest_service_namespace: string(&k["destServiceNamespace"]),
            dest_service_port_name: string(&k["destServicePortName"]),
            dest_service_port: int64(&k["destServicePort"]),
            proto: string(&k["proto"]),
            reporter: enum_of(&k["reporter"], |s| {
                Reporter::from_str_name(s).map(|e| e as i32)
            }),
            action: enum_of(&k["action"], |s| Action::from_str_name(s).map(|e| e as i32)),
            policies: k.get("policies").map(|p| PolicyTrace {
                enforced_policies: hits(&p["enforcedPolicies"]),
                pending_policies: hits(&p["pendingPolicies"]),
            }),
        }),
        start_time: int64(&v["startTime"]),
        end_time: int64(&v["endTime"]),
        source_labels: strings(&v["sourceLabels"]),
        dest_labels: strings(&v["destLabels"]),
        packets_in: int64(&v["packetsIn"]),
        packets_out: int64(&v["packetsOut"]),
        bytes_in: int64(&v["bytesIn"]),
        bytes_out: int64(&v["bytesOut"]),
        num_connections_started: int64(&v["numConnectionsStarted"]),
        num_connections_completed: int64(&v["numConnectionsCompleted"]),
        num_connections_live: int64(&v["numConnectionsLive"]),
    }
}

/// Policy hits as protojson spells them (`kind` and `action` as enum names).
fn hits(v: &Value) -> Vec<PolicyHit> {
    let kind = |s: &str| {
        [
            "",
            "CalicoNetworkPolicy",
            "GlobalNetworkPolicy",
            "StagedNetworkPolicy",
            "StagedGlobalNetworkPolicy",
            "StagedKubernetesNetworkPolicy",
            "NetworkPolicy",
            "AdminNetworkPolicy",
            "BaselineAdminNetworkPolicy",
            "Profile",
            "EndOfTier",
            "ClusterNetworkPolicy",
        ]
        .iter()
        .position(|k| *k == s)
        .map(|i| i as i32)
    };
    v.as_array()
        .into_iter()
        .flatten()
        .map(|h| PolicyHit {
            kind: enum_of(&h["kind"], kind),
            namespace: string(&h["namespace"]),
            name: string(&h["name"]),
            tier: string(&h["tier"]),
            action: enum_of(&h["action"], |s| Action::from_str_name(s).map(|e| e as i32)),
            policy_index: int64(&h["policyIndex"]),
            rule_index: int64(&h["ruleIndex"]),
            trigger: h
                .get("trigger")
                .map(|t| Box::new(hits(&Value::Array(vec![t.clone()])).remove(0))),
        })
        .collect()
}

fn results_of(path: &Path) -> Vec<FlowResult> {
    lines(path)
        .iter()
        .zip(1..)
        .map(|(line, id)| FlowResult {
            id,
            flow: Some(flow_of_json(line)),
        })
        .collect()
}

/// What `ne-leader learn` derives from the same file: its decoder, FlowTable and rules.
fn learned(path: &Path) -> Vec<EdgeSnapshot> {
    let table = FlowTable::new(10_000);
    let bytes = std::fs::read(path).unwrap();
    let stats = decode_lines(Format::GoldmaneJson, &bytes, |flow| {
        let _ = table.record_flow(&flow, Provider::Calico);
    });
    assert_eq!(stats.errors, 0, "{}", path.display());
    sorted(table.snapshot())
}

fn sorted(mut edges: Vec<EdgeSnapshot>) -> Vec<EdgeSnapshot> {
    edges.sort_by_key(EdgeSnapshot::key);
    edges
}

#[test]
fn prost_and_json_paths_build_identical_records() {
    for path in [example_path(), real_path()] {
        let mut denied_with_policy = 0;
        for (n, line) in lines(&path).iter().enumerate() {
            let Ok(Decoded::Record(from_json)) = decode_line(Format::GoldmaneJson, line.as_bytes())
            else {
                panic!("{}:{}: not a record", path.display(), n + 1);
            };
            let from_prost = record_of_flow(&flow_of_json(line)).unwrap();
            if from_prost.policy.is_some() {
                assert_eq!(from_prost.verdict, Verdict::PolicyDenied);
                denied_with_policy += 1;
            }
            assert_eq!(from_prost, from_json, "{}:{}", path.display(), n + 1);
        }
        // The example has one denied flow (data/default-deny), the real record none.
        let expected = if path == example_path() { 1 } else { 0 };
        assert_eq!(denied_with_policy, expected, "{}", path.display());
    }
}

/// Goldmane `Deny` is a policy denial: the real record (an Allow) with its action set to
/// Deny, through the prost path the source uses, lands in the sink's denials and never
/// in the learned table; the record as published is learned and is no denial.
#[test]
fn a_deny_action_becomes_a_denial_and_is_never_learned() {
    let line = &lines(&real_path())[0];
    let sink = |_: ()| {
        crate::sink::FlowSink::new(
            Arc::new(FlowTable::new(100)),
            Arc::new(AgentMetrics::default()),
            Provider::Calico,
            "goldmane",
        )
        .with_denials(Arc::new(FlowTable::new(100)))
        .with_audits(Arc::new(FlowTable::new(100)))
    };
    let allowed = sink(());
    allowed.record(&record_of_flow(&flow_of_json(line)).unwrap());
    assert_eq!(allowed.table().len(), 1);
    assert!(allowed.denials().unwrap().is_empty());

    let mut flow = flow_of_json(line);
    flow.key.as_mut().unwrap().action = Action::Deny as i32;
    let record = record_of_flow(&flow).unwrap();
    assert_eq!(record.verdict, Verdict::PolicyDenied);
    let denied = sink(());
    denied.record(&record);
    assert!(denied.table().is_empty());
    assert!(denied.audits().unwrap().is_empty());
    let kept = denied.denials().unwrap().snapshot();
    let learned = allowed.table().snapshot();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].edge, learned[0].edge,
        "the same edge, kept as a denial"
    );
}

#[test]
fn configuration_is_checked_before_any_dial() {
    let all = TlsFiles {
        ca: Some("ca.pem".into()),
        cert: Some("c.pem".into()),
        key: Some("c.key".into()),
        server_name: None,
    };
    let s = GoldmaneSource::new("goldmane.calico-system.svc:7443", all.clone()).unwrap();
    assert_eq!(s.host, "goldmane.calico-system.svc");
    assert_eq!(
        GoldmaneSource::new("[fd00::7]:7443", all.clone())
            .unwrap()
            .host,
        "fd00::7"
    );
    for bad in [
        "goldmane",
        "goldmane:http",
        ":7443",
        "https://goldmane:7443",
    ] {
        assert_eq!(
            GoldmaneSource::new(bad, all.clone()).unwrap_err(),
            ConfigError::BadAddress(bad.into())
        );
    }
    let no_key = TlsFiles {
        key: None,
        ..all.clone()
    };
    let err = GoldmaneSource::new("goldmane:7443", no_key).unwrap_err();
    assert_eq!(err, ConfigError::MissingTls("client key".into()));
    assert!(err.to_string().contains("mTLS is mandatory for Goldmane"));
    let err = GoldmaneSource::new("goldmane:7443", TlsFiles::default()).unwrap_err();
    assert_eq!(
        err,
        ConfigError::MissingTls("CA, client certificate, client key".into())
    );
}

// ---------------------------------------------------------------- PKI

/// A CA with a server and a client certificate, and a client certificate of another CA,
/// as PEM files in a temporary directory.
struct Pki {
    dir: PathBuf,
    ca: String,
    server_cert: String,
    server_key: String,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, "leaf");
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("ne-goldmane-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ca_pem, issuer) = ca("tigera-operator-signer");
        let (server_cert, server_key) = leaf(
            &issuer,
            &["localhost", SERVER_NAME],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) =
            leaf(&issuer, &["ne-agent"], ExtendedKeyUsagePurpose::ClientAuth);
        let (_, other) = ca("some-other-ca");
        let (foreign_cert, foreign_key) =
            leaf(&other, &["ne-agent"], ExtendedKeyUsagePurpose::ClientAuth);
        for (file, pem) in [
            ("ca.pem", &ca_pem),
            ("client.pem", &client_cert),
            ("client.key", &client_key),
            ("foreign.pem", &foreign_cert),
            ("foreign.key", &foreign_key),
        ] {
            std::fs::write(dir.join(file), pem).unwrap();
        }
        Pki {
            dir,
            ca: ca_pem,
            server_cert,
            server_key,
        }
    }

    /// The agent's TLS files with client identity `who` (`client`, `foreign` or none).
    fn client(&self, who: Option<&str>) -> TlsFiles {
        TlsFiles {
            ca: Some(self.dir.join("ca.pem")),
            cert: who.map(|w| self.dir.join(format!("{w}.pem"))),
            key: who.map(|w| self.dir.join(format!("{w}.key"))),
            server_name: Some(SERVER_NAME.to_owned()),
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------- test server

/// How a scripted stream ends after its items.
enum End {
    /// Stays open, like Goldmane's stream between windows.
    Hold,
    /// Fails with this status.
    Fail(Status),
}

/// The answers to successive `Stream` calls; calls beyond the script are refused.
struct Script {
    calls: Mutex<VecDeque<(Vec<FlowResult>, End)>>,
    requests: Mutex<Vec<(i64, bool)>>,
}

impl Script {
    fn new(calls: Vec<(Vec<FlowResult>, End)>) -> Arc<Self> {
        Arc::new(Script {
            calls: Mutex::new(calls.into()),
            requests: Mutex::new(Vec::new()),
        })
    }
}

type FlowStream = Pin<Box<dyn Stream<Item = Result<FlowResult, Status>> + Send>>;

#[tonic::async_trait]
impl Flows for Script {
    type StreamStream = FlowStream;

    async fn stream(
        &self,
        request: Request<ne_proto::goldmane::FlowStreamRequest>,
    ) -> Result<Response<FlowStream>, Status> {
        let r = request.into_inner();
        self.requests
            .lock()
            .unwrap()
            .push((r.start_time_gte, r.filter.is_some()));
        let Some((items, end)) = self.calls.lock().unwrap().pop_front() else {
            return Err(Status::unavailable("no more streams in this script"));
        };
        let items = tokio_stream::iter(items.into_iter().map(Ok));
        Ok(Response::new(match end {
            End::Hold => Box::pin(items.chain(tokio_stream::pending())),
            End::Fail(status) => Box::pin(items.chain(tokio_stream::once(Err(status)))),
        }))
    }
}

struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// Serves `script` on `listener` with TLS that requires a client certificate of `pki`'s CA.
fn serve(pki: &Pki, listener: TcpListener, script: Arc<Script>) -> Running {
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&pki.server_cert, &pki.server_key))
        .client_ca_root(Certificate::from_pem(&pki.ca));
    let (stop, stopped) = oneshot::channel::<()>();
    let router = Server::builder()
        .tls_config(tls)
        .unwrap()
        .add_service(FlowsServer::from_arc(script));
    let task = tokio::spawn(async move {
        router
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Running { stop, task }
}

async fn listen(addr: &str) -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

// ---------------------------------------------------------------- agent side

struct Agent {
    metrics: Arc<AgentMetrics>,
    table: Arc<FlowTable>,
    state: SourceState,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Agent {
    fn start(source: GoldmaneSource) -> Self {
        // Logs are shown for failing tests.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("ne_node_agent=debug")
            .try_init();
        let metrics = Arc::new(AgentMetrics::default());
        let table = Arc::new(FlowTable::new(10_000));
        let state = SourceState::default();
        let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Calico, "goldmane");
        // Short delays, so that retries happen within the test.
        let source = source.with_backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
        let task = tokio::spawn(run(source, sink, state.clone()));
        Agent {
            metrics,
            table,
            state,
            task,
        }
    }

    fn dial(pki: &Pki, addr: SocketAddr, who: Option<&str>) -> Self {
        // Built directly: `GoldmaneSource::new` would refuse a missing identity.
        Agent::start(GoldmaneSource {
            address: addr.to_string(),
            host: addr.ip().to_string(),
            tls: pki.client(who),
            backoff: Backoff::for_streams(),
        })
    }

    fn received(&self) -> u64 {
        self.metrics
            .flows_received
            .get_or_create(&SourceLabel { source: "goldmane" })
            .get()
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        self.metrics
            .flows_dropped
            .get_or_create(&ReasonLabel { reason })
            .get()
    }

    fn reconnects(&self) -> u64 {
        self.metrics.source_reconnects.get()
    }

    fn connected(&self) -> i64 {
        self.metrics.source_connected.get()
    }

    /// Stops the source; it must end cleanly, and the table is then complete.
    async fn stop(self) -> (Arc<AgentMetrics>, Vec<EdgeSnapshot>) {
        self.state.shut_down();
        self.task.await.unwrap().unwrap();
        assert_eq!(self.metrics.source_connected.get(), 0);
        assert!(!self.state.is_ready());
        (self.metrics, sorted(self.table.snapshot()))
    }
}

/// Waits for a condition without sleeping: yields to the runtime until it holds; fails
/// after 20 s.
async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::task::yield_now().await;
    }
}

// ---------------------------------------------------------------- cases

#[tokio::test]
async fn every_streamed_flow_reaches_the_table() {
    let pki = Pki::new("all");
    let (listener, addr) = listen("127.0.0.1:0").await;
    let flows = results_of(&example_path());
    let n = flows.len() as u64;
    let script = Script::new(vec![(flows, End::Hold)]);
    let server = serve(&pki, listener, script.clone());
    let agent = Agent::dial(&pki, addr, Some("client"));
    wait_until("all flows", || agent.received() == n).await;
    assert_eq!(agent.connected(), 1);
    assert!(agent.state.is_ready());
    assert_eq!(agent.reconnects(), 0);
    let (metrics, edges) = agent.stop().await;
    assert_eq!(edges, learned(&example_path()));
    assert!(!edges.is_empty());
    assert_eq!(
        metrics
            .flows_dropped
            .get_or_create(&ReasonLabel {
                reason: DropReason::decode_error
            })
            .get(),
        0
    );
    // From now on, and no server-side filter (3.32 type trap).
    assert_eq!(*script.requests.lock().unwrap(), vec![(0, false)]);
    server.stop().await;
}

#[tokio::test]
async fn reconnects_after_a_broken_stream_and_a_server_restart() {
    let pki = Pki::new("restart");
    let (listener, addr) = listen("127.0.0.1:0").await;
    let mut flows = results_of(&example_path());
    let total = flows.len() as u64;
    let rest = flows.split_off(20);
    let first = serve(
        &pki,
        listener,
        Script::new(vec![(
            flows,
            End::Fail(Status::internal("bucket rollover failed")),
        )]),
    );
    let agent = Agent::dial(&pki, addr, Some("client"));
    wait_until("the broken stream", || agent.reconnects() >= 1).await;
    assert_eq!(agent.received(), 20);
    // Goldmane restarts (Recreate): down for a while, back on the same port.
    first.stop().await;
    let before_restart = agent.reconnects();
    wait_until("failed dials while the server is down", || {
        agent.reconnects() >= before_restart + 2
    })
    .await;
    assert_eq!(agent.connected(), 0);
    let (listener, _) = listen(&addr.to_string()).await;
    let second = serve(&pki, listener, Script::new(vec![(rest, End::Hold)]));
    wait_until("the rest of the flows", || agent.received() == total).await;
    assert_eq!(agent.connected(), 1);
    let (_, edges) = agent.stop().await;
    assert_eq!(edges, learned(&example_path()));
    second.stop().await;
}

#[tokio::test]
async fn clients_the_server_does_not_trust_keep_retrying() {
    let pki = Pki::new("refused");
    let (listener, addr) = listen("127.0.0.1:0").await;
    let flows = results_of(&real_path());
    // Streams enough for every attempt: none may get through.
    let script = Script::new((0..1000).map(|_| (flows.clone(), End::Hold)).collect());
    let server = serve(&pki, listener, script.clone());
    for who in [None, Some("foreign")] {
        let agent = Agent::dial(&pki, addr, who);
        wait_until("several refused attempts", || agent.reconnects() >= 5).await;
        assert_eq!(agent.connected(), 0, "{who:?}");
        assert!(!agent.state.is_ready());
        assert!(!agent.task.is_finished(), "the source gave up");
        assert_eq!(agent.received(), 0);
        let (_, edges) = agent.stop().await;
        assert!(edges.is_empty());
    }
    assert!(script.requests.lock().unwrap().is_empty());
    // The same server accepts the right client.
    let agent = Agent::dial(&pki, addr, Some("client"));
    wait_until("the trusted client's flows", || agent.received() == 1).await;
    assert_eq!(agent.stop().await.1, learned(&real_path()));
    server.stop().await;
}

#[tokio::test]
async fn malformed_flows_are_counted_and_the_stream_goes_on() {
    let pki = Pki::new("malformed");
    let (listener, addr) = listen("127.0.0.1:0").await;
    let good = results_of(&real_path()).remove(0);
    let broken = |edit: fn(&mut FlowKey)| {
        let mut r = good.clone();
        edit(r.flow.as_mut().unwrap().key.as_mut().unwrap());
        r
    };
    let flows = vec![
        broken(|k| k.dest_port = 70_000),
        broken(|k| k.action = 9),
        FlowResult { id: 3, flow: None },
        broken(|k| k.reporter = 7),
        good.clone(),
    ];
    let server = serve(&pki, listener, Script::new(vec![(flows, End::Hold)]));
    let agent = Agent::dial(&pki, addr, Some("client"));
    wait_until("the flows after the broken ones", || agent.received() == 2).await;
    assert_eq!(agent.dropped(DropReason::decode_error), 3);
    // An unknown reporter decodes (as the JSON path does) but teaches no direction.
    assert_eq!(agent.dropped(DropReason::unknown_direction), 1);
    assert_eq!(agent.reconnects(), 0);
    assert_eq!(agent.connected(), 1);
    let (_, edges) = agent.stop().await;
    assert_eq!(edges, learned(&real_path()));
    server.stop().await;
}
