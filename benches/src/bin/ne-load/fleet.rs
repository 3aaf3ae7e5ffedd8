//! `fleet`: many simulated node agents in one process, for a leader of a cluster far larger
//! than the machine (issue 19: 5 000 nodes). Each simulated agent is the agent's own
//! shipper (`ship::run`: its own gRPC stream, epoch, acks and deltas) over its own
//! `FlowTable`; only the source is synthetic. Instead of decoding a Hubble stream, every
//! tick puts each agent's flows of that tick into its table as the decoder would after
//! aggregation: its steady edges, each with its share of the flows, and its new edges
//! (egress to an address no agent used before). What reaches the leader is what real
//! agents under that load would ship; what the simulated agents cost is not the point.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef, labels,
};
use ne_flow::table::FlowTable;
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship;
use ne_node_agent::sources::SourceState;

use crate::control::{self, Command, Report};
use crate::hubble::now_nanos;
use crate::roles::{RoleArgs, held};

/// The synthetic load of each simulated agent.
#[derive(Clone, Debug, clap::Args)]
pub struct FleetLoad {
    /// The first simulated agent's number (agents are `node-<n>`).
    #[arg(long)]
    pub first: usize,
    /// Simulated agents in this process.
    #[arg(long)]
    pub count: usize,
    /// Flows per second per agent.
    #[arg(long)]
    pub rate: f64,
    /// New edges per second per agent, within the rate.
    #[arg(long)]
    pub churn: f64,
    /// Steady edges per agent that carry the rest of its flows (each changes every tick).
    #[arg(long)]
    pub steady_edges: usize,
    /// Workloads in the simulated cluster.
    #[arg(long)]
    pub workloads: usize,
}

/// How much nicer the simulated agents are than the leader they load: on a machine of
/// few cores they would take the CPU the leader is measured with.
const NICE: i32 = 10;

/// Lowers this process's priority; called before the runtime starts its threads, which
/// inherit it. Failing to (a system that refuses) only warns: the run's figures then
/// include the competition.
pub fn yield_to_leader() {
    use rustix::process::{getpriority_process, setpriority_process};
    let lowered =
        getpriority_process(None).and_then(|nice| setpriority_process(None, (nice + NICE).min(19)));
    if let Err(error) = lowered {
        eprintln!("warning: the simulated agents keep the leader's priority: {error}");
    }
}

/// How often the synthetic flows are put into the tables.
const TICK: Duration = Duration::from_millis(100);

/// Workload `w`'s pods (labelled `app=app-<w>`), as the decoder names them.
fn workload(w: usize) -> Endpoint {
    let name = format!("app-{w}");
    let labels = labels([("app", name.as_str())]);
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: format!("ns-{}", w % 50).into(),
        kind: WorkloadKind::Deployment,
        name: name.as_str().into(),
    }))
    .with_labels(labels)
}

/// Steady edge `j` of agent `n`: ingress to a workload on the node from another one.
fn steady(load: &FleetLoad, n: usize, j: usize) -> Edge {
    let subject = (n * 7 + j) % load.workloads;
    Edge {
        subject: workload(subject),
        direction: Direction::Ingress,
        peer: workload((subject + 1 + j * 31) % load.workloads),
        protocol: Protocol::Tcp,
        port: 8000 + (j % 50) as u16,
        peer_dns: None,
        denied_by: None,
    }
}

/// New edge `k` of agent `n`: egress from a workload on the node to an address of its own
/// (`100.64.0.0/10` and up, distinct for every (agent, k) below 2^16 agents and 2^16
/// new edges each).
fn new_edge(load: &FleetLoad, n: usize, k: u64) -> Edge {
    let ip = Ipv4Addr::from(0x6440_0000u32.wrapping_add(((n as u32) << 16) | (k as u32 & 0xffff)));
    Edge {
        subject: workload((n * 7 + k as usize) % load.workloads),
        direction: Direction::Egress,
        peer: Endpoint::new(EndpointId::External(ip.into())).with_ip(Some(ip.into())),
        protocol: Protocol::Tcp,
        port: 443,
        peer_dns: None,
        denied_by: None,
    }
}

/// One simulated agent.
struct Simulated {
    n: usize,
    table: Arc<FlowTable>,
    metrics: Arc<AgentMetrics>,
    state: SourceState,
    steady: Vec<Edge>,
    /// New edges made so far.
    made: u64,
}

/// `load.count` simulated agents shipping to `leader`.
pub async fn fleet(leader: String, load: FleetLoad, args: RoleArgs) -> anyhow::Result<()> {
    let mut commands = control::commands();
    let mut agents: Vec<Simulated> = (load.first..load.first + load.count)
        .map(|n| Simulated {
            n,
            table: Arc::new(FlowTable::new(args.max_edges)),
            metrics: Arc::new(AgentMetrics::default()),
            state: SourceState::default(),
            steady: (0..load.steady_edges)
                .map(|j| steady(&load, n, j))
                .collect(),
            made: 0,
        })
        .collect();
    for a in &agents {
        tokio::spawn(ship::run(
            ne_benches::ship::config(leader.clone(), format!("node-{}", a.n), args.flush_interval),
            a.table.clone(),
            a.metrics.clone(),
            a.state.clone(),
        ));
    }
    let ticks_per_second = 1.0 / TICK.as_secs_f64();
    let steady_flows = ((load.rate - load.churn).max(0.0) / ticks_per_second) as u64;
    let per_edge = steady_flows / (load.steady_edges.max(1) as u64);
    let mut flows = 0u64;
    let mut tick = tokio::time::interval(TICK);
    let started = std::time::Instant::now();
    let report = |agents: &[Simulated], flows: u64| {
        let sum = |f: &dyn Fn(&AgentMetrics) -> u64| agents.iter().map(|a| f(&a.metrics)).sum();
        Report {
            flows,
            table_full: agents.iter().map(|a| a.table.dropped()).sum(),
            batch_bytes: sum(&|m| m.delta_bytes_sent.get()),
            batch_edges: sum(&|m| m.delta_edges_sent.get()),
            batches: sum(&|m| m.deltas_sent.get()),
            edges: agents.iter().map(|a| a.table.len() as u64).sum(),
            held: sum(&|m| held(m)),
            ..Report::default()
        }
    };
    control::emit(&Report::default());
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let time = Timestamp(now_nanos());
                let due = (load.churn * started.elapsed().as_secs_f64()) as u64;
                for a in &mut agents {
                    for e in &a.steady {
                        a.table.record(e, time, per_edge);
                    }
                    while a.made < due {
                        a.table.record(&new_edge(&load, a.n, a.made), time, 1);
                        a.made += 1;
                    }
                }
                flows = (load.rate * started.elapsed().as_secs_f64()) as u64 * load.count as u64;
            }
            command = commands.recv() => match command {
                Some(Command::Sample | Command::Mark) => control::emit(&report(&agents, flows)),
                Some(Command::Stop) | None => break,
            },
        }
    }
    for a in &agents {
        a.state.shut_down();
    }
    control::emit(&report(&agents, flows));
    Ok(())
}
