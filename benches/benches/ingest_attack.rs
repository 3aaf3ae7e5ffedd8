//! A well-behaved agent's stream while another agent attacks the leader, over real gRPC
//! on loopback, the leader's own ingest service with its default limits (except that an
//! address may open any number of streams, so each attack is as strong as it can be).
//!
//! The good agent behaves like ours, with time compressed: one long-lived stream, a
//! snapshot of 2 000 edges, then every 10 ms (its flush interval, 1 s by default) a delta of
//! 200 changed edges, each timed from send to ack. The rounds keep their schedule whatever
//! the latency (no coordinated omission: a round held up by the one before is timed from
//! when it was due).
//!
//! Attacks, each running for the whole measurement from another loopback address (another
//! node): none (`quiet`, at the start and again at the end, which shows the noise); hellos of
//! new agent ids past `--max-agents` (`hello_flood`); messages over `--max-message-bytes`
//! (`oversize`); eight streams that never read their acks (`stuck_readers`); and streams of
//! new strings until the tables' budget cuts them off (`string_flood`).
//!
//! The attacker is this same program started again as a child process, pinned (`taskset`)
//! to the second CPU while the leader and the good agent keep the first: what the good agent
//! loses is then what the leader pays for the attack, not the cost of making it. With one
//! CPU, or without `taskset`, nothing is pinned and the bench says so.
//!
//! Rounds of the first two seconds of an attack are reported apart (`start`): they include
//! an attacker's burst, before its budget paces it.
//!
//! `cargo bench -p ne-benches --bench ingest_attack` (`-- quiet,oversize` runs only those;
//! `-- --undefended` turns the agents' budgets and the addresses' cooldowns off).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hdrhistogram::Histogram;
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

/// The leader's limits; `undefended`: no agent's budget binds, and no address cools down
/// (to see what those two defences buy).
async fn leader(undefended: bool) -> SocketAddr {
    let mut limits = IngestLimits {
        max_streams_per_address: usize::MAX,
        max_agents: 64,
        ..IngestLimits::default()
    };
    if undefended {
        limits.agent_bytes_per_second = u64::MAX;
        limits.agent_burst_bytes = u64::MAX;
        limits.cooldown = Duration::ZERO;
    }
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
    tokio::spawn(service.serve(listener));
    address
}

/// The attacker's own loopback address: another node's.
const ATTACKER: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

async fn client(
    address: SocketAddr,
    from: Option<std::net::IpAddr>,
    window: Option<u32>,
) -> IngestClient<Channel> {
    let channel = GrpcEndpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .local_address(from)
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

/// The good agent's edges, the `round`th time they changed.
fn edges(round: u64) -> Vec<EdgeSnapshot> {
    (0..2_000u32)
        .map(|i| EdgeSnapshot {
            edge: Edge {
                subject: workload(format!("client-{}", i % 50)),
                direction: Direction::Egress,
                peer: workload(format!("server-{}", i / 50)),
                protocol: Protocol::Tcp,
                port: 8080,
                peer_dns: None,
                denied_by: None,
            },
            count: u64::from(i) + 1 + round,
            first_seen: Timestamp(1_000),
            last_seen: Timestamp(2_000 + i64::from(i) + round as i64),
            serial: u64::from(i),
        })
        .collect()
}

/// Edges changed in each delta.
const DELTA: usize = 200;
/// Time between two deltas.
const FLUSH: Duration = Duration::from_millis(10);
/// Rounds of the first two seconds, reported apart.
const START: Duration = Duration::from_secs(2);
/// Rounds after those.
const STEADY: Duration = Duration::from_secs(8);

/// The good agent's messages: its hello, a snapshot, then one delta batch per round.
struct GoodAgent {
    snapshot: Vec<AgentMessage>,
    deltas: Vec<AgentMessage>,
}

impl GoodAgent {
    fn new(rounds: usize) -> Self {
        let mut encoder = Encoder::new();
        let snapshot: Vec<AgentMessage> = encoder
            .encode(1, true, &edges(0), 64 << 10)
            .into_iter()
            .map(batch)
            .collect();
        let mut sequence = snapshot.len() as u64 + 1;
        let deltas = (1..=rounds as u64)
            .map(|round| {
                let all = edges(round);
                let first = (round as usize * DELTA) % all.len();
                let changed = &all[first..first + DELTA];
                let mut batches = encoder.encode(sequence, false, changed, 64 << 10);
                assert_eq!(batches.len(), 1, "a delta is one batch");
                sequence += 1;
                batch(batches.remove(0))
            })
            .collect();
        GoodAgent { snapshot, deltas }
    }

    /// Bytes of the snapshot and of one delta.
    fn sizes(&self) -> (usize, usize) {
        let len = |m: &AgentMessage| match &m.message {
            Some(agent_message::Message::Batch(b)) => ne_delta::agent_message_len(b),
            _ => 0,
        };
        (self.snapshot.iter().map(len).sum(), len(&self.deltas[0]))
    }

    /// Runs the stream: hello and snapshot, then the deltas on schedule; the latencies of
    /// the rounds in the first [`START`] and after it, in microseconds.
    async fn run(&self, client: &mut IngestClient<Channel>) -> (Histogram<u64>, Histogram<u64>) {
        let (tx, rx) = mpsc::channel(self.deltas.len() + self.snapshot.len() + 1);
        tx.send(hello("node-good")).await.unwrap();
        let mut inbound = client
            .stream(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        acked(&mut inbound).await;
        for b in &self.snapshot {
            tx.send(b.clone()).await.unwrap();
        }
        let snapshot_end = self.snapshot.len() as u64;
        while acked(&mut inbound).await < snapshot_end {}

        let mut start = Histogram::new(3).unwrap();
        let mut steady = Histogram::new(3).unwrap();
        let began = tokio::time::Instant::now();
        for (round, delta) in self.deltas.iter().enumerate() {
            // A round on time is timed from its send (the timer wakes up to a millisecond
            // late); one held up by the round before, from when it was due.
            let due = began + FLUSH * round as u32;
            let sent = if tokio::time::Instant::now() < due {
                tokio::time::sleep_until(due).await;
                tokio::time::Instant::now()
            } else {
                due
            };
            tx.send(delta.clone()).await.unwrap();
            acked(&mut inbound).await;
            let latency = sent.elapsed().as_micros() as u64;
            let into = if due - began < START {
                &mut start
            } else {
                &mut steady
            };
            into.record(latency.max(1)).unwrap();
        }
        (start, steady)
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
            let mut c = client(address, Some(ATTACKER), None).await;
            // Fill the agents the leader may know, then keep asking with new ids.
            tasks.push(tokio::spawn(async move {
                for i in 0u64.. {
                    attack_stream(&mut c, hello(&format!("flood-{i}")), Vec::new()).await;
                }
            }));
        }
        "oversize" => {
            let mut c = client(address, Some(ATTACKER), None).await;
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
                let mut c = client(address, Some(ATTACKER), Some(1024)).await;
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
            let mut c = client(address, Some(ATTACKER), None).await;
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

/// The sequence of the next ack on `inbound` (anything else is a failure).
async fn acked(inbound: &mut tonic::Streaming<ne_proto::ingest::LeaderMessage>) -> u64 {
    match inbound.message().await.unwrap().and_then(|m| m.message) {
        Some(leader_message::Message::Ack(a)) => a.sequence,
        other => panic!("the good agent got {other:?}"),
    }
}

/// One line of the report.
struct Row {
    attack: &'static str,
    start: Histogram<u64>,
    steady: Histogram<u64>,
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

fn report(rows: &[Row]) {
    let base = &rows[0].steady;
    println!(
        "| attack | p50 | p90 | p99 | max | p50 vs quiet | p99 vs quiet | start: p99 | start: max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {:.2} | {:.2} | {:.3} ms | {:.3} ms |",
            r.attack,
            ms(&r.steady, 0.5),
            ms(&r.steady, 0.9),
            ms(&r.steady, 0.99),
            r.steady.max() as f64 / 1e3,
            ms(&r.steady, 0.5) / ms(base, 0.5),
            ms(&r.steady, 0.99) / ms(base, 0.99),
            ms(&r.start, 0.99),
            r.start.max() as f64 / 1e3,
        );
    }
}

fn attacks(only: Option<&str>, undefended: bool) {
    let pinned = pin_to_first_cpu();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rounds = ((START + STEADY).as_millis() / FLUSH.as_millis()) as usize;
    let good = GoodAgent::new(rounds);
    let (snapshot, delta) = good.sizes();
    eprintln!(
        "ingest_attack: a snapshot of {snapshot} bytes, then {rounds} deltas of {delta} bytes, one every {FLUSH:?}"
    );
    // A first run against a quiet leader warms the process up (allocator, page faults,
    // clock); it is not reported.
    rt.block_on(async {
        let address = leader(undefended).await;
        good.run(&mut client(address, None, None).await).await
    });
    let mut rows = Vec::new();
    for attack in [
        "quiet",
        "hello_flood",
        "oversize",
        "stuck_readers",
        "string_flood",
        "quiet",
    ] {
        if only.is_some_and(|o| !o.split(',').any(|a| a == attack)) {
            continue;
        }
        let address = rt.block_on(leader(undefended));
        let mut attacker = spawn_attacker(attack, address, pinned);
        let (start, steady) = rt.block_on(async {
            let mut client = client(address, None, None).await;
            good.run(&mut client).await
        });
        let _ = attacker.kill();
        let _ = attacker.wait();
        eprintln!(
            "ingest_attack/{attack}: p50 {:.3} ms, p99 {:.3} ms",
            ms(&steady, 0.5),
            ms(&steady, 0.99)
        );
        rows.push(Row {
            attack,
            start,
            steady,
        });
    }
    report(&rows);
}

fn main() {
    if let Ok(attack) = std::env::var(ATTACK) {
        attacker(&attack);
        return;
    }
    // `cargo bench` passes `--bench`; a word that is not a flag names the attacks to run,
    // and `--undefended` turns the agents' budgets and the cooldowns off.
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let undefended = std::env::args().any(|a| a == "--undefended");
    if undefended {
        eprintln!("ingest_attack: undefended (no agent budget, no cooldown)");
    }
    attacks(only.as_deref(), undefended);
}
