//! A well-behaved agent's stream while another agent attacks the leader (over real gRPC on
//! loopback, the leader's own ingest service with its default limits, except that every
//! agent may connect from loopback). One iteration: a stream opens, sends a snapshot of
//! 2 000 edges in batches of at most 64 KiB, and waits for every ack.
//!
//! Attacks, each running for the whole measurement: none (`quiet`); hellos of new agent
//! ids past `--max-agents` (`hello_flood`); messages over `--max-message-bytes`
//! (`oversize`); eight streams that never read their acks (`stuck_readers`); and streams
//! of new strings until the tables' budget cuts them off (`string_flood`).
//!
//! The attacker is this same program started again as a child process, pinned (`taskset`)
//! to the second CPU while the leader and the good agent keep the first: what the good agent
//! loses is then what the leader pays to refuse the attack, not the cost of making it. With
//! one CPU, or without `taskset`, nothing is pinned and the bench says so.
//!
//! `cargo bench -p ne-benches --bench ingest_attack`

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use ne_delta::Encoder;
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef,
};
use ne_flow::table::EdgeSnapshot;
use ne_leader::ingest::{IndexHandle, IngestLimits, IngestService, LeaderMetrics};
use ne_proto::ingest::ingest_client::IngestClient;
use ne_proto::ingest::{AgentMessage, Batch, Hello, agent_message, leader_message};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint as GrpcEndpoint};

async fn leader() -> SocketAddr {
    let limits = IngestLimits {
        max_streams_per_address: usize::MAX,
        max_agents: 64,
        ..IngestLimits::default()
    };
    let (index, _owner) = IndexHandle::spawn_with_max_agents(1 << 20, limits.max_agents);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let service = IngestService::new(
        index,
        Arc::new(AtomicBool::new(true)),
        1,
        Arc::new(LeaderMetrics::default()),
        Arc::new(ne_leader::auth::Insecure),
    )
    .with_limits(limits);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(ne_leader::ingest::incoming(listener)),
    );
    address
}

async fn client(address: SocketAddr, window: Option<u32>) -> IngestClient<Channel> {
    let channel = GrpcEndpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .initial_stream_window_size(window)
        .connect()
        .await
        .unwrap();
    IngestClient::new(channel).max_encoding_message_size(64 << 20)
}

fn hello(agent: &str) -> AgentMessage {
    AgentMessage {
        message: Some(agent_message::Message::Hello(Hello {
            node: agent.into(),
            agent_id: agent.into(),
            agent_epoch: 1,
            provider: "cilium".into(),
            capabilities: Vec::new(),
        })),
    }
}

fn batch(batch: Batch) -> AgentMessage {
    AgentMessage {
        message: Some(agent_message::Message::Batch(batch)),
    }
}

fn workload(name: String) -> Endpoint {
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: name.into(),
    }))
}

/// The good agent's snapshot.
fn snapshot() -> Vec<AgentMessage> {
    let edges: Vec<EdgeSnapshot> = (0..2_000u32)
        .map(|i| EdgeSnapshot {
            edge: Edge {
                subject: workload(format!("client-{}", i % 50)),
                direction: Direction::Egress,
                peer: workload(format!("server-{}", i / 50)),
                protocol: Protocol::Tcp,
                port: 8080,
                peer_dns: None,
            },
            count: u64::from(i) + 1,
            first_seen: Timestamp(1_000),
            last_seen: Timestamp(2_000 + i64::from(i)),
            serial: u64::from(i),
        })
        .collect();
    Encoder::new()
        .encode(1, true, &edges, 64 << 10)
        .into_iter()
        .map(batch)
        .collect()
}

/// One stream of the good agent: hello, the snapshot, every ack.
async fn good_round(client: &mut IngestClient<Channel>, batches: &[AgentMessage]) {
    let (tx, rx) = mpsc::channel(batches.len() + 1);
    tx.send(hello("node-good")).await.unwrap();
    for b in batches {
        tx.send(b.clone()).await.unwrap();
    }
    let mut inbound = client
        .stream(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let last = batches.len() as u64;
    loop {
        match inbound.message().await.unwrap().and_then(|m| m.message) {
            Some(leader_message::Message::Ack(a)) if a.sequence == last => break,
            Some(leader_message::Message::Ack(_)) => {}
            other => panic!("the good agent got {other:?}"),
        }
    }
}

/// Opens a stream sending `first` then `rest`, and reads it to its end.
async fn attack_stream(
    client: &mut IngestClient<Channel>,
    first: AgentMessage,
    rest: Vec<AgentMessage>,
) {
    let (tx, rx) = mpsc::channel(rest.len() + 1);
    tx.send(first).await.unwrap();
    for m in rest {
        tx.send(m).await.unwrap();
    }
    if let Ok(response) = client.stream(ReceiverStream::new(rx)).await {
        let mut inbound = response.into_inner();
        while let Ok(Some(_)) = inbound.message().await {}
    }
}

/// Starts `attack` in the background; it runs until the returned tasks are aborted.
async fn start(address: SocketAddr, attack: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    match attack {
        "quiet" => {}
        "hello_flood" => {
            let mut c = client(address, None).await;
            // Fill the agents the leader may know, then keep asking with new ids.
            tasks.push(tokio::spawn(async move {
                for i in 0u64.. {
                    attack_stream(&mut c, hello(&format!("flood-{i}")), Vec::new()).await;
                }
            }));
        }
        "oversize" => {
            let mut c = client(address, None).await;
            let big = batch(Batch {
                sequence: 1,
                strings: vec!["x".repeat(5 << 20)],
                ..Batch::default()
            });
            tasks.push(tokio::spawn(async move {
                loop {
                    attack_stream(&mut c, hello("oversize"), vec![big.clone()]).await;
                }
            }));
        }
        "stuck_readers" => {
            for s in 0..8 {
                let mut c = client(address, Some(1024)).await;
                let (tx, rx) = mpsc::channel(1 << 14);
                tx.send(hello(&format!("stuck-{s}"))).await.unwrap();
                for sequence in 1..=10_000 {
                    tx.send(batch(Batch {
                        sequence,
                        ..Batch::default()
                    }))
                    .await
                    .unwrap();
                }
                let inbound = c.stream(ReceiverStream::new(rx)).await.unwrap();
                // Never read: hold the stream (and its sender) until aborted.
                tasks.push(tokio::spawn(async move {
                    let _held = (inbound, tx);
                    std::future::pending::<()>().await;
                }));
            }
        }
        "string_flood" => {
            let mut c = client(address, None).await;
            let batches: Vec<AgentMessage> = (0..60u64)
                .map(|b| {
                    batch(Batch {
                        sequence: b + 1,
                        strings_base: (b * 50_000) as u32,
                        strings: (0..50_000u64)
                            .map(|i| format!("{:016}", b * 50_000 + i))
                            .collect(),
                        ..Batch::default()
                    })
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                loop {
                    attack_stream(&mut c, hello("strings"), batches.clone()).await;
                }
            }));
        }
        other => panic!("unknown attack {other}"),
    }
    tasks
}

/// The environment variables that make this program the attacker: the attack, and the
/// leader's address.
const ATTACK: &str = "NE_BENCH_ATTACK";
const LEADER: &str = "NE_BENCH_LEADER";

/// The attacker process: starts the attack, says `ready` on stdout, and attacks until its
/// parent kills it.
fn attacker(attack: &str) {
    let address: SocketAddr = std::env::var(LEADER)
        .expect("the leader's address")
        .parse()
        .expect("an address");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let _tasks = start(address, attack).await;
        println!("ready");
        std::future::pending::<()>().await;
    });
}

/// Whether this process and its attackers run on CPUs of their own: `taskset` pins every
/// thread of this process to CPU 0 (threads started later inherit it).
fn pin_to_first_cpu() -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = cpus >= 2
        && Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if pinned {
        eprintln!("ingest_attack: leader and good agent on CPU 0, the attacker on CPU 1");
    } else {
        eprintln!(
            "ingest_attack: not pinned ({cpus} CPUs, or no taskset): the attacker shares the leader's CPUs"
        );
    }
    pinned
}

/// Starts the attacker process for `attack` (on CPU 1 when `pinned`) and waits until it is
/// ready.
fn spawn_attacker(attack: &str, address: SocketAddr, pinned: bool) -> Child {
    let exe = std::env::current_exe().unwrap();
    let mut command = if pinned {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    let mut child = command
        .env(ATTACK, attack)
        .env(LEADER, address.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the attacker process");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the attacker did not start");
    child
}

fn attacks(c: &mut Criterion) {
    let pinned = pin_to_first_cpu();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let batches = snapshot();
    let mut group = c.benchmark_group("ingest_attack");
    group.sample_size(30);
    group.measurement_time(Duration::from_secs(6));
    for attack in [
        "quiet",
        "hello_flood",
        "oversize",
        "stuck_readers",
        "string_flood",
    ] {
        let address = rt.block_on(leader());
        let mut attacker = spawn_attacker(attack, address, pinned);
        let mut good = rt.block_on(client(address, None));
        group.bench_function(attack, |b| {
            b.iter(|| rt.block_on(good_round(&mut good, &batches)));
        });
        let _ = attacker.kill();
        let _ = attacker.wait();
    }
    group.finish();
}

criterion_group!(benches, attacks);

fn main() {
    if let Ok(attack) = std::env::var(ATTACK) {
        attacker(&attack);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
