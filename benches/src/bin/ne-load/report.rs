//! What the harness prints: the machine and settings, then per mode the throughput per
//! core, CPU and RSS of each process, bytes, latencies and API writes, then the ratios of
//! the two designs measured in the same run.

use ne_flow::flow::Timestamp;

use crate::control::{Latency, Report};
use crate::run::{LoadArgs, Measured, Mode, ModeResult};

const MIB: f64 = 1024.0 * 1024.0;

pub fn header(args: &LoadArgs) {
    let now = Timestamp(crate::hubble::now_nanos());
    let command: Vec<String> = std::env::args().collect();
    println!("ne-load: {}", command.join(" "));
    println!(
        "machine: {}; {}",
        crate::procfs::machine(),
        ne_flow::time::format_rfc3339_nanos(now)
    );
    let rate = if args.rate > 0.0 {
        format!("{} flows/s", args.rate)
    } else {
        "unlimited".to_owned()
    };
    println!(
        "load: {} agents × {rate}, churn {} new edges/s each, {} workloads in {} namespaces, {} peers each, {} external peers, Zipf {}, seed {:#x}",
        args.agents,
        args.churn,
        args.workloads,
        args.namespaces,
        args.peers_per_workload,
        args.external_peers,
        args.zipf,
        args.seed
    );
    println!(
        "window: {:?} after {:?} of warm-up; flush interval {:?}, index probe every {:?}",
        args.duration, args.warmup, args.role.flush_interval, args.role.probe_interval
    );
}

fn delta(m: &Measured, f: impl Fn(&crate::control::Report) -> u64) -> u64 {
    f(&m.after).saturating_sub(f(&m.before))
}

/// The growth of one counter over the window, summed over `processes`.
fn total(processes: &[Measured], f: impl Fn(&crate::control::Report) -> u64) -> u64 {
    processes.iter().map(|m| delta(m, &f)).sum()
}

fn latency(name: &str, l: Option<Latency>) {
    match l {
        Some(l) if l.count > 0 => println!(
            "  {name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples)",
            l.p50_ms, l.p99_ms, l.max_ms, l.count
        ),
        _ => println!("  {name}: no samples"),
    }
}

/// Per agent the worst of each quantile (HDR quantiles do not add up across processes).
fn worst(agents: &[Measured]) -> Option<Latency> {
    agents
        .iter()
        .filter_map(|a| a.last.flow_to_table)
        .reduce(|a, b| Latency {
            count: a.count + b.count,
            p50_ms: a.p50_ms.max(b.p50_ms),
            p99_ms: a.p99_ms.max(b.p99_ms),
            max_ms: a.max_ms.max(b.max_ms),
        })
}

fn writes(m: &Measured) {
    let flushes = delta(m, |r| r.flushes).max(1);
    let last = &m.last;
    println!(
        "  API writes per flush interval (counting sink, {} flushes, {} proposals, promoted at the window's start): proposal spec {:.2} (max {}), proposal status {:.2}, violation records {:.2}",
        flushes,
        last.proposals,
        last.spec_writes as f64 / flushes as f64,
        last.max_spec_writes,
        last.status_writes as f64 / flushes as f64,
        last.violation_writes as f64 / flushes as f64
    );
}

/// The leader's (or the central process's) latencies and writes; `index` names the first.
fn leader_figures(leader: &Measured, index: &str) {
    latency(index, leader.last.flow_to_index);
    latency("one round (read, learn, detect, plan)", leader.last.round);
    latency(
        "flow → violation record (monitor mode, new records)",
        leader.last.flow_to_violation,
    );
    writes(leader);
}

fn process(name: &str, m: &Measured, window: f64, flows: u64) {
    println!(
        "  {name}: CPU {:.2} % of a core, RSS {:.1} MiB (peak {:.1}), {:.0} flows/s per core",
        100.0 * m.cpu_seconds / window,
        m.rss as f64 / MIB,
        m.rss_peak as f64 / MIB,
        per_core(flows, m.cpu_seconds)
    );
}

fn per_core(flows: u64, cpu: f64) -> f64 {
    if cpu > 0.0 {
        flows as f64 / cpu
    } else {
        f64::INFINITY
    }
}

pub fn mode(args: &LoadArgs, mode: Mode, r: &ModeResult) {
    let w = r.window;
    println!();
    match mode {
        Mode::Central => {
            let flows = delta(&r.leader, |x| x.flows);
            println!(
                "== central: one process reads every raw flow ({} Hubble streams) ==",
                args.agents
            );
            println!(
                "  flows: {flows} read in {w:.1} s = {:.0}/s (servers sent {})",
                flows as f64 / w,
                r.source_flows
            );
            process("central", &r.leader, w, flows);
            println!(
                "  bytes into the central process: {} ({:.1} B/flow)",
                r.source_bytes,
                r.source_bytes as f64 / flows.max(1) as f64
            );
            latency("flow → FlowTable", r.leader.last.flow_to_table);
            leader_figures(&r.leader, "flow → central index (new edges)");
            println!("  edges: {}", r.leader.after.edges);
        }
        Mode::Fleet => {
            let flows = total(&r.agents, |x| x.flows);
            let received = delta(&r.leader, |x| x.batch_edges);
            println!(
                "== fleet: {} simulated agents ({} processes) × {} flows/s, {} new edges/s each, into one leader ==",
                args.agents, args.fleet_processes, args.rate, args.churn
            );
            for (i, a) in r.agents.iter().enumerate() {
                process(&format!("fleet process {i}"), a, w, delta(a, |x| x.flows));
            }
            process("leader", &r.leader, w, flows);
            println!(
                "  simulated agents sent: {:.0} batches/s, {:.0} edges/s",
                total(&r.agents, |x| x.batches) as f64 / w,
                total(&r.agents, |x| x.batch_edges) as f64 / w,
            );
            println!(
                "  leader received: {:.0} batches/s, {:.0} edges/s, {:.0} B/s",
                delta(&r.leader, |x| x.batches) as f64 / w,
                received as f64 / w,
                delta(&r.leader, |x| x.batch_bytes) as f64 / w
            );
            leader_figures(&r.leader, "flow → leader index (new edges)");
            println!(
                "  edges: leader index {}, simulated agents' tables {}, dropped (table full) {}",
                r.leader.after.edges,
                r.agents.iter().map(|a| a.after.edges).sum::<u64>(),
                r.agents.iter().map(|a| a.after.table_full).sum::<u64>(),
            );
            println!(
                "  agent streams open at the leader: {} at the window's start, {} at its end",
                r.leader.before.streams, r.leader.after.streams
            );
            println!(
                "  in the window: batches paced {}, rejected {}; flush intervals held back for acks {}",
                delta(&r.leader, |x| x.paced),
                delta(&r.leader, |x| x.rejected),
                total(&r.agents, |x| x.held),
            );
        }
        _ => {
            let flows = total(&r.agents, |x| x.flows);
            let cpu: f64 = r.agents.iter().map(|a| a.cpu_seconds).sum();
            println!(
                "== agents: {} agents pre-aggregate and ship deltas to the leader ==",
                args.agents
            );
            println!(
                "  flows: {flows} read in {w:.1} s = {:.0}/s (servers sent {})",
                flows as f64 / w,
                r.source_flows
            );
            for (i, a) in r.agents.iter().enumerate() {
                process(&format!("agent {i}"), a, w, delta(a, |x| x.flows));
            }
            println!(
                "  agents together: CPU {:.2} % of a core, {:.0} flows/s per core",
                100.0 * cpu / w,
                per_core(flows, cpu)
            );
            process("leader", &r.leader, w, flows);
            let shipped = total(&r.agents, |x| x.batch_bytes);
            let edges = total(&r.agents, |x| x.batch_edges);
            println!(
                "  bytes: read from sources {}, shipped {} ({:.3} %), {:.1} B per changed edge ({edges} edges); leader received {}",
                r.source_bytes,
                shipped,
                100.0 * shipped as f64 / r.source_bytes.max(1) as f64,
                shipped as f64 / edges.max(1) as f64,
                delta(&r.leader, |x| x.batch_bytes)
            );
            latency("flow → FlowTable (worst agent)", worst(&r.agents));
            leader_figures(&r.leader, "flow → leader index (new edges)");
            let sum = |f: fn(&Report) -> u64| -> u64 { r.agents.iter().map(|a| f(&a.after)).sum() };
            println!(
                "  edges: leader index {}, agent tables {:?}, dropped (table full) {}, shed under \
                 pressure {}; flush intervals held back for acks {}",
                r.leader.after.edges,
                r.agents.iter().map(|a| a.after.edges).collect::<Vec<_>>(),
                sum(|a| a.table_full),
                sum(|a| a.shed),
                sum(|a| a.held),
            );
        }
    }
    println!(
        "  harness Hubble servers: CPU {:.2} % of a core",
        100.0 * r.servers_cpu / w
    );
}

pub fn compare(agents: &ModeResult, central: &ModeResult) {
    let a_flows = total(&agents.agents, |x| x.flows);
    let c_flows = delta(&central.leader, |x| x.flows);
    let per_flow = |cpu: f64, flows: u64| cpu / flows.max(1) as f64;
    let leader = per_flow(agents.leader.cpu_seconds, a_flows);
    let agents_cpu: f64 = agents.agents.iter().map(|a| a.cpu_seconds).sum();
    let total = per_flow(agents_cpu + agents.leader.cpu_seconds, a_flows);
    let central_cpu = per_flow(central.leader.cpu_seconds, c_flows);
    let shipped: u64 = agents
        .agents
        .iter()
        .map(|a| delta(a, |x| x.batch_bytes))
        .sum();
    println!();
    println!("== pre-aggregation vs central, same load, same run ==");
    println!(
        "  leader CPU per flow: central / leader = {:.1}× ({:.0} ns vs {:.0} ns)",
        central_cpu / leader.max(f64::MIN_POSITIVE),
        central_cpu * 1e9,
        leader * 1e9
    );
    println!(
        "  bytes into the leader per flow: central / leader = {:.0}× ({:.1} B vs {:.3} B)",
        (central.source_bytes as f64 / c_flows.max(1) as f64)
            / (shipped as f64 / a_flows.max(1) as f64).max(f64::MIN_POSITIVE),
        central.source_bytes as f64 / c_flows.max(1) as f64,
        shipped as f64 / a_flows.max(1) as f64
    );
    println!(
        "  leader RSS: central / leader = {:.2}× ({:.1} MiB vs {:.1} MiB)",
        central.leader.rss as f64 / agents.leader.rss.max(1) as f64,
        central.leader.rss as f64 / MIB,
        agents.leader.rss as f64 / MIB
    );
    println!(
        "  all processes' CPU per flow (agents + leader vs central): {:.2}× ({:.0} ns vs {:.0} ns)",
        total / central_cpu.max(f64::MIN_POSITIVE),
        total * 1e9,
        central_cpu * 1e9
    );
}
