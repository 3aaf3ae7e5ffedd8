//! Agent → leader against a real API server (the cluster under test: `cluster::kubeconfig`):
//!
//! - TokenReview: the leader's authenticator accepts a projected-style token of the agent
//!   ServiceAccount (audience `network-enforcer`) and refuses a token for another audience
//!   or another ServiceAccount, with the gRPC status agents see.
//! - Node binding: a token bound to a pod on a node (as kubelet projects it) streams as
//!   that node's agent and is refused, with its own reason, as any other node's.
//! - Failover: two real `ne-leader run` processes on one Lease and two real `ne-agent`
//!   processes (`--leader-address A,B`, tokens minted for the agent ServiceAccount) fed by
//!   test Hubble servers; the Lease holder is killed (SIGKILL) mid-stream; the survivor's
//!   merged index (its proposals, with per-peer counts) equals offline `learn` on everything
//!   the Hubble servers sent: nothing lost, nothing counted twice.
//!
//! Run: `cargo test --workspace --test ingest_cluster`.

mod cluster;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use cluster::hubble::{ScriptedHubble, responses};
use cluster::*;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use ne_leader::auth::{AUDIENCE, Authenticator, Identity, TokenReviews};
use ne_leader::cli::{InputArgs, InputFormat, LearnArgs, SummaryFormat};
use ne_leader::ingest::{IndexHandle, IngestService, LeaderMetrics};
use ne_leader::offline::learn::learn;
use ne_leader::output::write_proposals;
use ne_proto::ingest::ingest_client::IngestClient;
use ne_proto::ingest::{AgentMessage, Hello, agent_message, leader_message};
use tokio_stream::wrappers::ReceiverStream;

const AGENT_SA: &str = "network-enforcer-agent";

/// A token of ServiceAccount `ns/name` for `audience` (the TokenRequest API, as kubelet
/// mints projected tokens).
async fn token(client: &Client, ns: &str, name: &str, audience: &str) -> String {
    token_bound_to(client, ns, name, audience, None).await
}

/// A token as [`token`], bound to pod `ns/pod` when one is given (what kubelet projects).
async fn token_bound_to(
    client: &Client,
    ns: &str,
    name: &str,
    audience: &str,
    pod: Option<&Pod>,
) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(3600),
            bound_object_ref: pod.map(|pod| BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..TokenRequest::default()
    };
    let answer = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("cannot mint a token for {ns}/{name}: {e}"));
    answer.status.expect("a token").token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_review_accepts_only_the_agent_service_account() {
    let client = client().await;
    let ns = TempNamespace::new(&client, "ne-e2e-auth").await;
    service_account(&client, &ns.name, AGENT_SA).await;
    service_account(&client, &ns.name, "other").await;
    let agent = token(&client, &ns.name, AGENT_SA, AUDIENCE).await;
    let wrong_audience = token(&client, &ns.name, AGENT_SA, "someone-else").await;
    let other = token(&client, &ns.name, "other", AUDIENCE).await;
    let auth = TokenReviews::new(client.clone(), &[format!("{}:{AGENT_SA}", ns.name)]);

    let user = auth
        .authenticate(Some(&agent))
        .await
        .expect("the agent's token");
    // A token bound to no pod binds no node.
    assert_eq!(
        user,
        Identity::unbound(format!("system:serviceaccount:{}:{AGENT_SA}", ns.name))
    );
    // Cached: the same answer again.
    assert_eq!(auth.authenticate(Some(&agent)).await.unwrap(), user);

    let refused = auth.authenticate(Some(&wrong_audience)).await.unwrap_err();
    assert_eq!(
        (refused.status.code(), refused.reason),
        (tonic::Code::Unauthenticated, "unauthenticated")
    );
    let refused = auth.authenticate(Some(&other)).await.unwrap_err();
    assert_eq!(
        (refused.status.code(), refused.reason),
        (tonic::Code::PermissionDenied, "forbidden")
    );
    let refused = auth.authenticate(Some("not-a-token")).await.unwrap_err();
    assert_eq!(refused.status.code(), tonic::Code::Unauthenticated);
    let refused = auth.authenticate(None).await.unwrap_err();
    assert_eq!(refused.status.code(), tonic::Code::Unauthenticated);
}

/// Creates `object` from JSON and returns it as the API server stored it.
async fn create<K>(api: &Api<K>, object: serde_json::Value) -> K
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("cannot create {object:?}: {e}"))
}

/// Opens an ingest stream with `token` and says `hello`: the leader's first answer (the
/// hello's ack), or the status it refused the stream with.
async fn say_hello(
    address: std::net::SocketAddr,
    token: &str,
    node: &str,
    agent_id: &str,
) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = IngestClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let hello = Hello {
        node: node.to_owned(),
        agent_id: agent_id.to_owned(),
        agent_epoch: 1,
        provider: "cilium".to_owned(),
        capabilities: Vec::new(),
    };
    tx.send(AgentMessage {
        message: Some(agent_message::Message::Hello(hello)),
    })
    .await
    .unwrap();
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let mut inbound = client.stream(request).await?.into_inner();
    match inbound.message().await?.and_then(|m| m.message) {
        Some(leader_message::Message::Ack(ack)) if ack.sequence == 0 => Ok(()),
        other => panic!("expected the hello's ack, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_token_streams_only_as_its_own_node() {
    let client = client().await;
    let ns = TempNamespace::new(&client, "ne-e2e-binding").await;
    service_account(&client, &ns.name, AGENT_SA).await;
    // The agent's node and pod, as the DaemonSet would have them (no kubelet runs them).
    let node_name = format!("{}-worker", ns.name);
    let nodes: Api<Node> = Api::all(client.clone());
    create(&nodes, serde_json::json!({"metadata": {"name": node_name}})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = create(
        &pods,
        serde_json::json!({
            "metadata": {"name": "network-enforcer-agent-x7k2p"},
            "spec": {
                "serviceAccountName": AGENT_SA,
                "nodeName": node_name,
                "containers": [{"name": "agent", "image": "ne-agent"}],
            },
        }),
    )
    .await;
    let bound = token_bound_to(&client, &ns.name, AGENT_SA, AUDIENCE, Some(&pod)).await;
    let auth = Arc::new(TokenReviews::new(
        client.clone(),
        &[format!("{}:{AGENT_SA}", ns.name)],
    ));

    // The API server's review names the pod and its node.
    let identity = auth.authenticate(Some(&bound)).await.expect("the token");
    assert_eq!(identity.node.as_deref(), Some(node_name.as_str()));
    assert_eq!(
        identity.pod.as_deref(),
        Some("network-enforcer-agent-x7k2p")
    );

    // A leader authenticating with the API server, over real gRPC.
    let (index, _owner) = IndexHandle::spawn(1 << 10);
    let metrics = Arc::new(LeaderMetrics::default());
    let service = IngestService::new(
        index,
        Arc::new(AtomicBool::new(true)),
        1,
        metrics.clone(),
        auth,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(service.serve(listener));

    let other_node = say_hello(address, &bound, "worker-2", "worker-2")
        .await
        .unwrap_err();
    assert_eq!(other_node.code(), tonic::Code::PermissionDenied);
    assert!(
        other_node.message().contains(&node_name) && other_node.message().contains("worker-2"),
        "{other_node}"
    );
    // Its own node, but another agent's id.
    let other_agent = say_hello(address, &bound, &node_name, "worker-2")
        .await
        .unwrap_err();
    assert_eq!(other_agent.code(), tonic::Code::PermissionDenied);
    let refused = ne_telemetry::http::Exposition::encode(&*metrics);
    assert!(
        refused.contains("leader_streams_refused_total{reason=\"identity_mismatch\"} 2"),
        "{refused}"
    );

    // As itself, under its node's name or its pod's, the agent streams.
    say_hello(address, &bound, &node_name, &node_name)
        .await
        .expect("the node's own agent");
    say_hello(address, &bound, &node_name, "network-enforcer-agent-x7k2p")
        .await
        .expect("the agent under its pod name");

    server.abort();
    let _ = nodes.delete(&node_name, &DeleteParams::default()).await;
}

fn capture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/flows/hubble.jsonl")
}

/// A directory's files and their contents.
fn files(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    (e.file_name().to_string_lossy().into_owned(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What offline `learn` writes for the capture: the expected merged index, as proposals.
fn learned_offline(dir: &Path) -> BTreeMap<String, String> {
    let args = LearnArgs {
        input: InputArgs {
            input: vec![capture()],
            cluster: Vec::new(),
            format: InputFormat::Auto,
            strict: false,
        },
        output: "-".to_owned(),
        exclude_namespaces: vec!["kube-system".to_owned()],
        summary: SummaryFormat::Table,
    };
    write_proposals(&learn(&args).unwrap().proposals, dir.to_str().unwrap()).unwrap();
    let out = files(dir);
    assert!(!out.is_empty());
    out
}

/// The value of an unlabelled sample in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

struct Leader {
    identity: &'static str,
    ingest: String,
    metrics: String,
    output: PathBuf,
    process: Process,
}

fn start_leader(identity: &'static str, ns: &str, dir: &Path) -> Leader {
    let (ingest, metrics) = (free_address(), free_address());
    let output = dir.join(identity);
    let mut command = cluster_command(binary("ne-leader"));
    command
        .args(["run", "--provider", "cilium", "--no-controller"])
        .args(["--lease-namespace", ns, "--identity", identity])
        .args(["--agent-service-accounts", &format!("{ns}:{AGENT_SA}")])
        .args(["--ingest-address", &ingest, "--metrics-address", &metrics])
        .args(["--flush-interval", "200ms", "--output"])
        .arg(&output)
        .env("RUST_LOG", "info");
    Leader {
        identity,
        ingest,
        metrics,
        output,
        process: Process::spawn(identity, command),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_lease_holder_mid_stream_loses_nothing_and_counts_nothing_twice() {
    let client = client().await;
    let ns = TempNamespace::new(&client, "ne-e2e-failover").await;
    let dir = std::env::temp_dir().join(format!("ne-e2e-failover-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let expected = learned_offline(&dir.join("expected"));

    service_account(&client, &ns.name, AGENT_SA).await;
    let token_file = dir.join("token");
    std::fs::write(
        &token_file,
        token(&client, &ns.name, AGENT_SA, AUDIENCE).await,
    )
    .unwrap();

    let mut leaders = vec![
        start_leader("leader-a", &ns.name, &dir),
        start_leader("leader-b", &ns.name, &dir),
    ];
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns.name);
    let holder = eventually("a Lease holder", || async {
        let lease = leases.get_opt("network-enforcer-leader").await.ok()??;
        lease.spec?.holder_identity
    })
    .await;

    // Two nodes, each with half of the capture; each stream pauses halfway until the gate.
    let all = responses(&std::fs::read_to_string(capture()).unwrap());
    let (gate, gated) = tokio::sync::watch::channel(false);
    let mut hubbles = Vec::new();
    let mut agents = Vec::new();
    let addresses = format!("{},{}", leaders[0].ingest, leaders[1].ingest);
    for node in 0..2 {
        let mine: Vec<_> = all.iter().skip(node).step_by(2).cloned().collect();
        let half = mine.len() / 2;
        let socket = dir.join(format!("hubble-{node}.sock"));
        hubbles.push(ScriptedHubble::serve(
            &socket,
            mine[..half].to_vec(),
            mine[half..].to_vec(),
            gated.clone(),
        ));
        let mut agent = Command::new(binary("ne-agent"));
        agent
            .args(["--source", "hubble", "--hubble-address"])
            .arg(format!("unix://{}", socket.display()))
            .args(["--node-name", &format!("worker-{node}")])
            .args(["--leader-address", &addresses, "--leader-token-file"])
            .arg(&token_file)
            .args([
                "--metrics-address",
                "127.0.0.1:0",
                "--flush-interval",
                "200ms",
            ]);
        agents.push(Process::spawn(&format!("agent-{node}"), agent));
    }

    // Mid-stream: both agents stream to the holder, the second halves not sent yet.
    let active = leaders
        .iter()
        .position(|l| l.identity == holder)
        .expect("the holder is one of ours");
    let holder_metrics = leaders[active].metrics.clone();
    eventually("both agents streaming to the Lease holder", || {
        let address = holder_metrics.clone();
        async move {
            let text = http_get(&address, "/metrics")?;
            let streams = sample(&text, "network_enforcer_leader_streams_active")?;
            let batches = sample(&text, "network_enforcer_leader_batches_received_total")?;
            (streams >= 2.0 && batches >= 2.0).then_some(())
        }
    })
    .await;
    let sent_before: usize = hubbles.iter().map(ScriptedHubble::sent).sum();
    assert!(sent_before < all.len(), "the kill must come mid-stream");
    leaders[active].process.kill();
    gate.send(true).unwrap();

    let survivor = &leaders[1 - active];
    eventually("the survivor holds the Lease", || async {
        let lease = leases.get_opt("network-enforcer-leader").await.ok()??;
        (lease.spec?.holder_identity.as_deref() == Some(survivor.identity)).then_some(())
    })
    .await;
    let output = survivor.output.clone();
    let got = eventually("the survivor's index equals everything sent", || {
        let output = output.clone();
        let expected = expected.clone();
        async move {
            let got = files(&output);
            (got == expected).then_some(got)
        }
    })
    .await;
    assert_eq!(got.len(), expected.len());
    assert_eq!(
        hubbles.iter().map(ScriptedHubble::sent).sum::<usize>(),
        all.len()
    );
    drop(agents);
    leaders.clear();
    let _ = std::fs::remove_dir_all(&dir);
}
