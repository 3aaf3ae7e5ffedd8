//! `ne-violation-latency`: how long a violating flow takes to become a violation record the
//! controller writes (issue 6: visible in status within 5 s p99 of reaching the leader).
//!
//! In one process, with the real parts between the data plane and the status write:
//! an agent's FlowTable and shipper (real gRPC over loopback) → the leader's ingest service
//! and edge index → every `--flush-interval` the controller's own detection
//! ([`ne_leader::violations::detect`]) and planner ([`ne_leader::controller::plan`]) against
//! an in-memory cluster of `--workloads` Deployments, each with a monitor-mode policy and
//! steady allowed traffic. New violating tuples are recorded into the agent's table at
//! `--rate` per second; a tuple's latency ends when a planned `ApplyViolations` carries its
//! new record. The API server's write time is not included (no API server here).
//!
//! Reported (HDR histograms, milliseconds): flow → planned record (end to end, agent flush
//! included), arrival at the leader's index → planned record (what the 5 s goal is about),
//! and the duration of a round.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ne_crds::{Backend, WorkloadNetworkPolicy};
use ne_flow::edge::Edge;
use ne_flow::flow::{
    Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef, labels,
};
use ne_flow::table::FlowTable;
use ne_leader::auth::Insecure;
use ne_leader::controller::plan::{self, Action, Config, World};
use ne_leader::ingest::{IndexHandle, IngestLimits, IngestService, LeaderMetrics};
use ne_leader::violations::detect::{Traffic, detect};
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship;
use ne_node_agent::sources::SourceState;
use ne_policy::resolve::RecordOnly;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(name = "ne-violation-latency")]
struct Args {
    /// Deployments, each with an ingress policy in monitor mode.
    #[arg(long, default_value_t = 500)]
    workloads: usize,
    /// Violating tuples to inject.
    #[arg(long, default_value_t = 3000)]
    violations: usize,
    /// New violating tuples per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// The agent's and the leader's flush interval.
    #[arg(long, default_value = "1s", value_parser = ne_flow::time::parse_duration)]
    flush_interval: Duration,
    /// How often the leader's index is read to see when a tuple arrived.
    #[arg(long, default_value = "10ms", value_parser = ne_flow::time::parse_duration)]
    probe_interval: Duration,
}

const NS: &str = "load";

fn workload(i: usize) -> Endpoint {
    let name = format!("w{i}");
    Endpoint::new(EndpointId::Workload(WorkloadRef {
        namespace: NS.into(),
        kind: WorkloadKind::Deployment,
        name: name.as_str().into(),
    }))
    .with_labels(labels([("app", name)]))
}

fn edge(subject: usize, peer: usize, port: u16) -> Edge {
    Edge {
        subject: workload(subject),
        direction: Direction::Ingress,
        peer: workload(peer),
        protocol: Protocol::Tcp,
        port,
        peer_dns: None,
        denied_by: None,
    }
}

/// Deployment `w<i>` admits `w<i+1>` on 8080, in monitor mode.
fn policy(i: usize, n: usize) -> WorkloadNetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
        "kind": "WorkloadNetworkPolicy",
        "metadata": {"name": format!("deployment-w{i}-ingress"), "namespace": NS, "uid": format!("uid-{i}")},
        "spec": {
            "backend": "kubernetes", "mode": "monitor", "direction": "Ingress",
            "targetRef": {"kind": "Deployment", "name": format!("w{i}")},
            "kubernetes": {
                "podSelector": {"matchLabels": {"app": format!("w{i}")}},
                "policyTypes": ["Ingress"],
                "ingress": [{
                    "from": [{"podSelector": {"matchLabels": {"app": format!("w{}", (i + 1) % n)}},
                              "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}}],
                    "ports": [{"protocol": "TCP", "port": 8080}],
                }],
            },
        },
    }))
    .expect("a valid policy")
}

fn now_ns() -> Timestamp {
    Timestamp(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
    )
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

fn summary(h: &Histogram<u64>) -> serde_json::Value {
    let ms = |v: u64| v as f64 / 1e3;
    json!({
        "count": h.len(),
        "p50_ms": ms(h.value_at_quantile(0.5)),
        "p99_ms": ms(h.value_at_quantile(0.99)),
        "max_ms": ms(h.max()),
    })
}

/// A violating tuple: (destination workload, source workload, port).
type Tuple = (String, String, i32);

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let n = args.workloads.max(2);

    // The leader's ingest and index.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let (index, _owner) = IndexHandle::spawn(1 << 22);
    let service = IngestService::new(
        index.clone(),
        Arc::new(AtomicBool::new(true)),
        ne_leader::ingest::leader_epoch(),
        Arc::new(LeaderMetrics::default()),
        Arc::new(Insecure),
    )
    // Every agent connects from loopback here.
    .with_limits(IngestLimits {
        max_streams_per_address: usize::MAX,
        ..IngestLimits::default()
    });
    tokio::spawn(service.serve(listener));

    // One agent: its table and shipper.
    let table = Arc::new(FlowTable::new(1 << 22));
    let state = SourceState::default();
    let config = ne_benches::ship::config(address, "node-0".to_owned(), args.flush_interval);
    tokio::spawn(ship::run(
        config,
        table.clone(),
        Arc::new(AgentMetrics::default()),
        state.clone(),
    ));
    // Steady allowed traffic to every workload.
    for i in 0..n {
        table.record(&edge(i, (i + 1) % n, 8080), now_ns(), 1);
    }

    // Violations: tuple k is w<k+2> → w<k> on a port of its own.
    let injected: Arc<std::sync::Mutex<HashMap<Tuple, Instant>>> = Arc::default();
    let injector = {
        let (table, injected) = (table.clone(), injected.clone());
        let (count, rate) = (args.violations, args.rate);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            for k in 0..count {
                tick.tick().await;
                let (dst, src) = (k % n, (k + 2) % n);
                let port = 9000 + u16::try_from(k / n).unwrap_or(u16::MAX - 9000);
                injected.lock().expect("not poisoned").insert(
                    (format!("w{dst}"), format!("w{src}"), i32::from(port)),
                    Instant::now(),
                );
                table.record(&edge(dst, src, port), now_ns(), 1);
                // The allowed traffic keeps flowing too.
                table.record(&edge(dst, (dst + 1) % n, 8080), now_ns(), 1);
            }
        })
    };

    // The leader's rounds: detect and plan against the in-memory cluster.
    let mut policies: Vec<WorkloadNetworkPolicy> = (0..n).map(|i| policy(i, n)).collect();
    let workloads = BTreeMap::new();
    let plan_config = Config {
        backend: Backend::Kubernetes,
        excluded_namespaces: Default::default(),
        stable_after: Duration::from_secs(600),
        status_refresh: Duration::from_secs(60),
    };
    let (mut end_to_end, mut from_arrival, mut rounds) = (histogram(), histogram(), histogram());
    let mut arrived: HashMap<Tuple, Instant> = HashMap::new();
    let mut done = 0usize;
    let mut probe = tokio::time::interval(args.probe_interval);
    let mut flush = tokio::time::interval(args.flush_interval);
    let deadline =
        Instant::now() + Duration::from_secs_f64(args.violations as f64 / args.rate + 60.0);
    while done < args.violations && Instant::now() < deadline {
        tokio::select! {
            _ = probe.tick() => {
                let merged = index.read().await?.edges;
                let now = Instant::now();
                for m in merged.iter().filter(|m| m.edge.port >= 9000) {
                    let key = tuple_of(&m.edge);
                    arrived.entry(key).or_insert(now);
                }
            }
            _ = flush.tick() => {
                let started = Instant::now();
                let merged = index.read().await?.edges;
                // Arrivals the probe has not seen yet arrived now, at this read.
                for m in merged.iter().filter(|m| m.edge.port >= 9000) {
                    arrived.entry(tuple_of(&m.edge)).or_insert(started);
                }
                let traffic = Traffic { edges: &merged, ..Traffic::default() };
                let detected = detect(traffic, &policies, &RecordOnly, Backend::Kubernetes);
                let now = Time(k8s_openapi::jiff::Timestamp::now());
                let world = World {
                    learned: &[],
                    workloads: &workloads,
                    proposals: &[],
                    policies: &policies,
                    network_policies: &[],
                    authorization_policies: None,
                    observations: &detected.observations,
                    rule_issues: &BTreeMap::new(),
                    safety: &Default::default(),
                    now: &now,
                };
                let planned = plan::plan(&world, &plan_config);
                let planned_at = Instant::now();
                rounds.record(micros(planned_at - started))?;
                let injected = injected.lock().expect("not poisoned");
                for action in planned.actions {
                    let Action::ApplyViolations { key, status, observed, .. } = action else {
                        continue;
                    };
                    for r in observed.iter().filter(|r| r.count > 0) {
                        let tuple = (
                            r.destination.name.clone().unwrap_or_default(),
                            r.source.name.clone().unwrap_or_default(),
                            r.port,
                        );
                        // Only a record's first report is its latency.
                        if status.violations.iter().any(|v| v.id == r.id)
                            && let Some(t) = injected.get(&tuple)
                            && !policy_has(&policies, &key.name, r.id)
                        {
                            end_to_end.record(micros(planned_at - *t))?;
                            if let Some(a) = arrived.get(&tuple) {
                                from_arrival.record(micros(planned_at.saturating_duration_since(*a)))?;
                            }
                            done += 1;
                        }
                    }
                    // The write "succeeds": the cluster now holds the status.
                    if let Some(w) = policies.iter_mut().find(|w| w.metadata.name.as_deref() == Some(key.name.as_str())) {
                        w.status = Some(*status);
                    }
                }
            }
        }
    }
    state.shut_down();
    injector.abort();
    let report = json!({
        "workloads": n,
        "violations": args.violations,
        "recorded": done,
        "rate_per_s": args.rate,
        "flush_interval_ms": args.flush_interval.as_millis(),
        "flow_to_planned_record": summary(&end_to_end),
        "leader_arrival_to_planned_record": summary(&from_arrival),
        "round": summary(&rounds),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    if done < args.violations {
        anyhow::bail!(
            "only {done} of {} violations were recorded in time",
            args.violations
        );
    }
    Ok(())
}

fn tuple_of(edge: &Edge) -> Tuple {
    let name = |e: &Endpoint| match &e.id {
        EndpointId::Workload(w) => w.name.to_string(),
        _ => String::new(),
    };
    (name(&edge.subject), name(&edge.peer), i32::from(edge.port))
}

/// Whether policy `name` already holds record `id` (reported in an earlier round).
fn policy_has(policies: &[WorkloadNetworkPolicy], name: &str, id: i64) -> bool {
    policies
        .iter()
        .find(|w| w.metadata.name.as_deref() == Some(name))
        .and_then(|w| w.status.as_ref())
        .is_some_and(|s| s.violations.iter().any(|v| v.id == id))
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}
