//! The harness's child processes, each running the product's own library code:
//!
//! - `agent`: one node agent — the node-agent library's Hubble source
//!   (`sources::hubble::run`, the agent's fast protobuf path into its FlowTable through a
//!   `FlowSink`) and shipper (`ship::run`, deltas to the leader over loopback gRPC), wired
//!   as `ne_node_agent::run` wires them (without the `/metrics` HTTP server);
//! - `leader`: the leader library's ingest service (`IngestService` over the index's owner
//!   task, as `ne-leader run` serves it) and, every flush interval, the proposals rendered
//!   from the merged index (`ne_leader::learning::learn`) with a counting sink in place of
//!   the API writes;
//! - `central`: the single-controller design — every raw Hubble flow read by one process
//!   (K Hubble streams, the same fast decoder) and aggregated in one FlowTable, rendered
//!   the same way every flush interval.
//!
//! Each reports [`Report`]s over stdout when the harness asks (module `control`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context as _;
use foldhash::HashSet;
use hdrhistogram::Histogram;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use ne_crds::{Mode, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};
use ne_flow::edge::Provider;
use ne_flow::table::{EdgeKey, FlowTable};
use ne_leader::auth::Insecure;
use ne_leader::controller::plan::{self, Action, Config, Workload, WorkloadKey, World};
use ne_leader::ingest::{Changes, IndexHandle, IngestLimits, IngestService, LeaderMetrics};
use ne_leader::learning::Learning;
use ne_leader::violations::detect::{Traffic, detect};
use ne_node_agent::metrics::AgentMetrics;
use ne_node_agent::ship;
use ne_node_agent::sink::FlowSink;
use ne_node_agent::sources::SourceState;
use ne_node_agent::sources::backoff::Backoff;
use ne_node_agent::sources::hubble::{self, HubbleConfig, HubbleTarget};
use ne_node_agent::sources::tls::TlsFiles;
use ne_policy::allowlist::LearnOptions;
use ne_policy::index::MergedEdge;

use crate::control::{self, Command, Latency, Report, micros_histogram};
use crate::hubble::now_nanos;

/// Settings every role shares.
#[derive(Clone, Debug, clap::Args)]
pub struct RoleArgs {
    /// Ship / render interval.
    #[arg(long, default_value = "1s", value_parser = ne_flow::time::parse_duration)]
    pub flush_interval: Duration,
    /// How often the merged edges are read for new keys (flow → index latency).
    #[arg(long, default_value = "100ms", value_parser = ne_flow::time::parse_duration)]
    pub probe_interval: Duration,
    /// FlowTable / index capacity.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_edges: usize,
}

fn hubble_config(socket: PathBuf) -> HubbleConfig {
    HubbleConfig {
        target: HubbleTarget::Unix(socket),
        tls: TlsFiles::default(),
        node_name: None,
        backoff: Backoff::for_streams(),
    }
}

fn lag(metrics: &AgentMetrics) -> Latency {
    let h = &metrics.scraper_lag;
    Latency {
        count: h.count(),
        p50_ms: h.quantile_seconds(0.5) * 1e3,
        p99_ms: h.quantile_seconds(0.99) * 1e3,
        max_ms: h.quantile_seconds(1.0) * 1e3,
    }
}

fn flows(metrics: &AgentMetrics) -> u64 {
    metrics
        .flows_received
        .get_or_create(&ne_node_agent::metrics::SourceLabel { source: "hubble" })
        .get()
}

fn table_full(metrics: &AgentMetrics) -> u64 {
    metrics
        .flows_dropped
        .get_or_create(&ne_node_agent::metrics::ReasonLabel {
            reason: ne_node_agent::metrics::DropReason::table_full,
        })
        .get()
}

/// Flush intervals the shipper held back, waiting for acks.
pub fn held(metrics: &AgentMetrics) -> u64 {
    ["unacked_batches", "unacked_bytes"]
        .map(|reason| {
            metrics
                .ship_held
                .get_or_create(&ne_node_agent::metrics::HeldLabel { reason })
                .get()
        })
        .iter()
        .sum()
}

/// One node agent reading `socket` and shipping to `leader` as `id`.
pub async fn agent(
    socket: PathBuf,
    leader: String,
    id: String,
    args: RoleArgs,
) -> anyhow::Result<()> {
    let mut commands = control::commands();
    let metrics = Arc::new(AgentMetrics::default());
    let table = Arc::new(FlowTable::new(args.max_edges));
    let denials = Arc::new(FlowTable::new((args.max_edges / 10).max(1)));
    let state = SourceState::default();
    let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Cilium, "hubble")
        .with_denials(denials);
    tokio::spawn(hubble::run(hubble_config(socket), sink, state.clone()));
    tokio::spawn(ship::run(
        ne_benches::ship::config(leader, id, args.flush_interval),
        table.clone(),
        metrics.clone(),
        state.clone(),
    ));
    let report = || Report {
        flows: flows(&metrics),
        table_full: table_full(&metrics),
        shed: metrics
            .edges_expired
            .get_or_create(&ne_node_agent::metrics::ExpiryLabel { reason: "pressure" })
            .get(),
        held: held(&metrics),
        batch_bytes: metrics.delta_bytes_sent.get(),
        batch_edges: metrics.delta_edges_sent.get(),
        batches: metrics.deltas_sent.get(),
        edges: table.len() as u64,
        ..Report::default()
    };
    control::emit(&Report::default());
    while let Some(command) = commands.recv().await {
        match command {
            Command::Sample | Command::Mark => control::emit(&report()),
            Command::Stop => break,
        }
    }
    state.shut_down();
    control::emit(&Report {
        flow_to_table: Some(lag(&metrics)),
        ..report()
    });
    Ok(())
}

/// Every flush, renders proposals and plans them with the controller's own planner against
/// an in-memory cluster (what the writes would have made), counting the writes; records how
/// long new keys took to appear. At the mark, every proposal is promoted to a monitor-mode
/// policy; from then on each flush also detects violations (the leader's own `detect`) and
/// plans their records, and the time from a new record's first flow to the flush that
/// plans it is the flow → violation record latency.
struct Flusher {
    provider: Provider,
    options: LearnOptions,
    /// The proposals "in the cluster": what the counted writes made.
    cluster: Vec<WorkloadNetworkPolicyProposal>,
    /// A workload (with a uid) for every proposal target seen.
    workloads: BTreeMap<WorkloadKey, Workload>,
    config: Config,
    seen: HashSet<EdgeKey>,
    new_keys: Histogram<u64>,
    /// The proposals promoted at the mark, with the statuses the counted writes made.
    policies: Vec<WorkloadNetworkPolicy>,
    new_violations: Histogram<u64>,
    /// How long each flush took, from reading the merged edges to the planned writes.
    rounds: Histogram<u64>,
    marked: bool,
    report: Report,
}

impl Flusher {
    fn new() -> Self {
        Flusher {
            provider: Provider::Cilium,
            options: LearnOptions {
                exclude_namespaces: ["kube-system".to_owned()].into_iter().collect(),
            },
            cluster: Vec::new(),
            workloads: BTreeMap::new(),
            config: Config {
                backend: ne_policy::allowlist::backend_for(Provider::Cilium),
                excluded_namespaces: ["kube-system".to_owned()].into_iter().collect(),
                stable_after: std::time::Duration::from_secs(600),
                status_refresh: std::time::Duration::from_secs(60),
            },
            seen: HashSet::default(),
            new_keys: micros_histogram(),
            policies: Vec::new(),
            new_violations: micros_histogram(),
            rounds: micros_histogram(),
            marked: false,
            report: Report::default(),
        }
    }

    /// Starts the window: counts from now on, and promotes every proposal to a monitor-mode
    /// policy, so that new traffic after this is a violation of its workload's policy.
    fn mark(&mut self) {
        self.marked = true;
        self.policies = self
            .cluster
            .iter()
            .map(|p| {
                let mut w = WorkloadNetworkPolicy::new(
                    p.metadata.name.as_deref().unwrap_or_default(),
                    p.spec.promoted(Mode::Monitor),
                );
                w.metadata.namespace = p.metadata.namespace.clone();
                w.metadata.uid = p.metadata.uid.as_ref().map(|uid| format!("{uid}-policy"));
                w
            })
            .collect();
    }

    /// Notes how long one flush took, since the mark.
    fn round_took(&mut self, took: Duration) {
        if self.marked {
            let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
            self.rounds.saturating_record(us);
            self.report.round = Some(Latency::of_micros(&self.rounds));
        }
    }

    /// Notes the keys of `merged` not seen before; their first flow's age is the latency.
    /// The index holds `held` keys.
    fn probe<'m>(&mut self, merged: impl IntoIterator<Item = &'m MergedEdge>, held: usize) {
        let now = now_nanos();
        for m in merged {
            if self.seen.insert(m.key()) && self.marked {
                let us = (now.saturating_sub(m.first_seen.0) / 1_000).max(1) as u64;
                self.new_keys.saturating_record(us);
            }
        }
        self.report.edges = held as u64;
    }

    /// A learner as the leader's rounds start with.
    fn learning(&self) -> Learning {
        Learning::new(self.provider, self.options.clone())
    }

    /// One flush interval: learns what `learning` took in since the last flush, and carries
    /// out the writes the controller would make (`ApplyProposal` spec and status) on the
    /// in-memory cluster.
    fn flush(&mut self, learning: &mut Learning) -> anyhow::Result<()> {
        // A resolver that never changes: generation 0.
        learning.learn(&ne_policy::resolve::RecordOnly, 0);
        let proposals = learning.learned().proposals();
        for p in proposals {
            let namespace = p.metadata.namespace.clone().unwrap_or_default();
            let target = &p.spec.target_ref;
            let key = (namespace, target.kind, target.name.clone());
            let uid = format!("uid-{}-{}", key.0, key.2);
            self.workloads.entry(key).or_insert(Workload {
                uid,
                service_account: None,
            });
        }
        let now = Time(
            jiff::Timestamp::from_second(now_nanos() / 1_000_000_000)
                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        );
        let detected = detect(
            Traffic {
                edges: learning.traffic().edges,
                ..Traffic::default()
            },
            &self.policies,
            &ne_policy::resolve::RecordOnly,
            self.config.backend,
        );
        let world = World {
            learned: proposals,
            workloads: &self.workloads,
            proposals: &self.cluster,
            policies: &self.policies,
            network_policies: &[],
            authorization_policies: None,
            observations: &detected.observations,
            rule_issues: &BTreeMap::new(),
            safety: &Default::default(),
            now: &now,
        };
        let plan = plan::plan(&world, &self.config);
        let planned_at = now_nanos();
        let (mut spec_writes, mut status_writes) = (0, 0);
        for action in plan.actions {
            if let Action::ApplyViolations {
                key,
                status,
                observed,
                ..
            } = &action
                && let Some(w) = self.policies.iter_mut().find(|w| {
                    w.metadata.name.as_ref() == Some(&key.name)
                        && w.metadata.namespace.as_ref() == Some(&key.namespace)
                })
            {
                let known = |id| {
                    w.status
                        .as_ref()
                        .is_some_and(|s| s.violations.iter().any(|v| v.id == id))
                };
                for r in observed.iter().filter(|r| !known(r.id)) {
                    let first = r.first_seen.0.as_nanosecond();
                    let us = (i128::from(planned_at) - first).max(1_000) / 1_000;
                    self.new_violations
                        .saturating_record(u64::try_from(us).unwrap_or(u64::MAX));
                }
                // The write "succeeds": the policy now holds the status.
                w.status = Some((**status).clone());
                self.report.violation_writes += u64::from(self.marked);
            }
            if let Action::ApplyProposal {
                object,
                spec,
                status,
            } = action
            {
                spec_writes += u64::from(spec);
                status_writes += u64::from(status);
                let mut stored = *object;
                let name = stored.metadata.name.clone();
                let namespace = stored.metadata.namespace.clone();
                stored
                    .metadata
                    .uid
                    .get_or_insert_with(|| format!("uid-{}", name.as_deref().unwrap_or_default()));
                self.cluster
                    .retain(|p| (&p.metadata.namespace, &p.metadata.name) != (&namespace, &name));
                self.cluster.push(stored);
            }
        }
        self.report.flushes += 1;
        self.report.proposals = proposals.len() as u64;
        self.report.flow_to_violation = Some(Latency::of_micros(&self.new_violations));
        if self.marked {
            self.report.spec_writes += spec_writes;
            self.report.status_writes += status_writes;
            self.report.max_spec_writes = self.report.max_spec_writes.max(spec_writes);
        }
        Ok(())
    }
}

/// The leader: ingest on loopback, a counting sink for proposals.
pub async fn leader(args: RoleArgs) -> anyhow::Result<()> {
    let mut commands = control::commands();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot listen on loopback")?;
    let port = listener.local_addr()?.port();
    let metrics = Arc::new(LeaderMetrics::default());
    let (index, _owner) = IndexHandle::spawn(args.max_edges);
    let service = IngestService::new(
        index.clone(),
        Arc::new(AtomicBool::new(true)),
        ne_leader::ingest::leader_epoch(),
        metrics.clone(),
        Arc::new(Insecure),
    )
    // Every agent connects from loopback here.
    .with_limits(IngestLimits {
        max_streams_per_address: usize::MAX,
        ..IngestLimits::default()
    });
    tokio::spawn(service.serve(listener));
    control::emit(&Report {
        port: Some(port),
        ..Report::default()
    });
    let mut flusher = Flusher::new();
    let mut learning = flusher.learning();
    let mut probe = tokio::time::interval(args.probe_interval);
    let mut flush = tokio::time::interval(args.flush_interval);
    // Keys take slots in insertion order: the probe reads the keys inserted since it last
    // looked, the rounds what changed.
    let mut probed = 0;
    let report = |flusher: &Flusher| Report {
        batch_bytes: metrics.batch_bytes_received.get(),
        batch_edges: metrics.edges_received.get(),
        batches: metrics.batches_received.get(),
        paced: metrics.paced_batches.get(),
        streams: u64::try_from(metrics.streams_active.get()).unwrap_or_default(),
        rejected: metrics.rejects_sent.get(),
        ..flusher.report.clone()
    };
    loop {
        tokio::select! {
            _ = probe.tick() => {
                let new = index.inserted_since(probed).await?;
                probed += new.len();
                flusher.probe(&new, probed);
            }
            _ = flush.tick() => {
                let started = std::time::Instant::now();
                learning.take(index.changes().await?);
                let new = index.inserted_since(probed).await?;
                probed += new.len();
                flusher.probe(&new, probed);
                flusher.flush(&mut learning)?;
                flusher.round_took(started.elapsed());
            }
            command = commands.recv() => match command {
                Some(Command::Sample) => control::emit(&report(&flusher)),
                Some(Command::Mark) => {
                    flusher.mark();
                    control::emit(&report(&flusher));
                }
                Some(Command::Stop) | None => break,
            },
        }
    }
    control::emit(&Report {
        flow_to_index: Some(Latency::of_micros(&flusher.new_keys)),
        ..report(&flusher)
    });
    Ok(())
}

/// The central design: every node's raw flows into one process and one FlowTable.
pub async fn central(sockets: Vec<PathBuf>, args: RoleArgs) -> anyhow::Result<()> {
    let mut commands = control::commands();
    let metrics = Arc::new(AgentMetrics::default());
    let table = Arc::new(FlowTable::new(args.max_edges));
    let state = SourceState::default();
    for socket in sockets {
        let sink = FlowSink::new(table.clone(), metrics.clone(), Provider::Cilium, "hubble");
        tokio::spawn(hubble::run(hubble_config(socket), sink, state.clone()));
    }
    control::emit(&Report::default());
    let merged = |table: &FlowTable| -> Vec<MergedEdge> {
        table
            .snapshot()
            .into_iter()
            .map(|s| MergedEdge {
                edge: s.edge,
                count: s.count,
                first_seen: s.first_seen,
                last_seen: s.last_seen,
            })
            .collect()
    };
    let mut flusher = Flusher::new();
    let mut probe = tokio::time::interval(args.probe_interval);
    let mut flush = tokio::time::interval(args.flush_interval);
    let report = |flusher: &Flusher| Report {
        flows: flows(&metrics),
        table_full: table_full(&metrics),
        ..flusher.report.clone()
    };
    loop {
        tokio::select! {
            _ = probe.tick() => {
                let merged = merged(&table);
                flusher.probe(&merged, merged.len());
            }
            _ = flush.tick() => {
                // Every flow into one table, and every edge learned again each flush, as
                // the central design does.
                let started = std::time::Instant::now();
                let merged = merged(&table);
                flusher.probe(&merged, merged.len());
                let mut learning = flusher.learning();
                learning.take(Changes {
                    edges: (0..).zip(merged).collect(),
                    ..Changes::default()
                });
                flusher.flush(&mut learning)?;
                flusher.round_took(started.elapsed());
            }
            command = commands.recv() => match command {
                Some(Command::Sample) => control::emit(&report(&flusher)),
                Some(Command::Mark) => {
                    flusher.mark();
                    control::emit(&report(&flusher));
                }
                Some(Command::Stop) | None => break,
            },
        }
    }
    state.shut_down();
    control::emit(&Report {
        flow_to_table: Some(lag(&metrics)),
        flow_to_index: Some(Latency::of_micros(&flusher.new_keys)),
        ..report(&flusher)
    });
    Ok(())
}
