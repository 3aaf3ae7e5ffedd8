//! `ne-agent`: the per-node half of Network Enforcer.
//!
//! It reads the node's flows from the data plane that is already there (Hubble's socket,
//! ztunnel's log files, Goldmane's stream, or a capture file), decodes them with
//! [`ne_dataplanes`] and pre-aggregates them in a [`ne_flow::table::FlowTable`]
//! through a [`sink::FlowSink`]. `/metrics`, `/healthz` and `/readyz` are served by
//! [`http`]. All task wiring is in [`run`].

pub mod args;
pub mod metrics;
pub mod ship;
pub mod sink;
pub mod sources;
pub mod tail;

use std::sync::Arc;

use anyhow::Context;
use ne_flow::edge::Provider;
use ne_flow::table::FlowTable;
use ne_telemetry::runtime::shutdown_signal;
use ne_telemetry::{http, otlp};

use args::{Args, SourceKind};
use metrics::AgentMetrics;
use sink::FlowSink;
use sources::SourceState;

/// Runs the agent until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let metrics = Arc::new(AgentMetrics::default());
    let table = Arc::new(FlowTable::new(args.max_edges));
    // Denials are few next to edges: a tenth of the edge cap bounds each kind.
    let denials = Arc::new(FlowTable::new((args.max_edges / 10).max(1)));
    let audits = Arc::new(FlowTable::new((args.max_edges / 10).max(1)));
    let state = SourceState::default();
    let listener = http::bind(args.metrics_address).await.with_context(|| {
        format!(
            "cannot listen on --metrics-address {}",
            args.metrics_address
        )
    })?;
    let address = listener.local_addr().unwrap_or(args.metrics_address);
    tracing::info!(%address, source = args.source.as_str(), "ne-agent started");
    let endpoints = http::Endpoints {
        metrics: metrics.clone(),
        ready: state.ready_flag(),
        not_ready: "source not connected",
    };
    let server = tokio::spawn(http::serve(listener, endpoints));

    let node: Vec<(&str, &str)> = args
        .node_name
        .as_deref()
        .map(|n| ("k8s.node.name", n))
        .into_iter()
        .collect();
    let otlp = match otlp::OtlpConfig::from_env(|k| std::env::var(k).ok(), "ne-agent", &node)? {
        Some(config) => {
            tracing::info!(endpoint = %config.export.endpoint, interval = ?config.interval, "exporting metrics over OTLP");
            Some(tokio::spawn(otlp::run(config, metrics.clone())))
        }
        None => None,
    };
    let sink = |provider: Provider, source: SourceKind| {
        FlowSink::new(table.clone(), metrics.clone(), provider, source.as_str())
            .with_denials(denials.clone())
            .with_audits(audits.clone())
    };
    let source = spawn_source(&args, sink, state.clone())?;
    let shipper = ship_config(&args).map(|config| {
        tracing::info!(leaders = ?config.addresses, agent = %config.agent_id, "shipping edges to the leader");
        let tables = ship::ShipTables {
            learned: table.clone(),
            denials: Some(denials.clone()),
            audits: Some(audits.clone()),
        };
        tokio::spawn(ship::run(config, tables, metrics.clone(), state.clone()))
    });
    if shipper.is_none() {
        tracing::warn!("no --leader-address: edges are aggregated but not shipped");
    }
    let mut ticker = tokio::time::interval(args.flush_interval);
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                metrics.edges.set(i64::try_from(table.len()).unwrap_or(i64::MAX));
                metrics.denied_edges.set(i64::try_from(denials.len()).unwrap_or(i64::MAX));
                metrics.audit_edges.set(i64::try_from(audits.len()).unwrap_or(i64::MAX));
            }
            () = &mut stop => break,
        }
    }
    tracing::info!("shutting down");
    state.shut_down();
    match source.await {
        Ok(Err(error)) => tracing::error!(error = format!("{error:#}"), "source failed"),
        Err(error) => tracing::error!(%error, "source task failed"),
        Ok(Ok(())) => {}
    }
    if let Some(shipper) = shipper {
        let _ = shipper.await;
    }
    server.abort();
    if let Some(otlp) = otlp {
        otlp.abort();
    }
    Ok(())
}

/// The shipper's settings, or `None` without a leader address.
fn ship_config(args: &Args) -> Option<ship::ShipConfig> {
    if args.leader_address.is_empty() {
        return None;
    }
    let agent_id = args
        .agent_id
        .clone()
        .or_else(|| args.node_name.clone())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("agent-{}", std::process::id()));
    Some(ship::ShipConfig {
        addresses: args.leader_address.clone(),
        node: args.node_name.clone().unwrap_or_default(),
        agent_id,
        epoch: ship::ShipConfig::process_epoch(),
        provider: match args.source {
            SourceKind::Hubble => Provider::Cilium,
            SourceKind::Ztunnel => Provider::Istio,
            SourceKind::Goldmane => Provider::Calico,
            SourceKind::File => args
                .file
                .as_deref()
                .and_then(|path| sources::file::format_of(path, &args.file_format).ok())
                .map_or(Provider::Cilium, |format| format.provider()),
        },
        flush_interval: args.flush_interval,
        max_message_bytes: args.max_message_bytes,
        max_unacked: args.max_unacked.max(1),
        max_unacked_bytes: args.max_unacked_bytes.max(1),
        idle_expiry: args.idle_expiry,
        token_file: args.leader_token_file.clone(),
    })
}

fn spawn_source(
    args: &Args,
    sink: impl Fn(Provider, SourceKind) -> FlowSink,
    state: SourceState,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    match args.source {
        SourceKind::File => {
            let path = args.file.clone().context("--source file needs --file")?;
            let format = sources::file::format_of(&path, &args.file_format)?;
            let sink = sink(format.provider(), SourceKind::File);
            let (follow, poll) = (args.follow, args.ztunnel_poll_interval);
            Ok(tokio::task::spawn_blocking(move || {
                let source = sources::file::FileSource {
                    path: &path,
                    format,
                    follow,
                    poll,
                };
                let result = sources::file::run(&source, &sink, &state);
                tracing::info!(edges = sink.table().len(), "capture replayed");
                result
            }))
        }
        SourceKind::Ztunnel => {
            let config = tail::TailConfig {
                root: args.ztunnel_log_root.clone(),
                pods: tail::PodFilter {
                    namespace: args.ztunnel_namespace.clone(),
                    pod_prefix: args.ztunnel_pod_prefix.clone(),
                },
                ..tail::TailConfig::default()
            };
            let sink = sink(Provider::Istio, SourceKind::Ztunnel);
            let poll = args.ztunnel_poll_interval;
            Ok(tokio::task::spawn_blocking(move || {
                sources::ztunnel::run(config, poll, &sink, &state);
                Ok(())
            }))
        }
        SourceKind::Goldmane => {
            let tls = args.goldmane_tls.files();
            let source = sources::goldmane::GoldmaneSource::new(&args.goldmane_address, tls)?;
            tracing::info!(
                address = source.address(),
                "reading Goldmane's cluster-wide stream: run this agent as one replica"
            );
            let sink = sink(Provider::Calico, SourceKind::Goldmane);
            Ok(tokio::spawn(sources::goldmane::run(source, sink, state)))
        }
        SourceKind::Hubble => {
            let config = sources::hubble::HubbleConfig::from_args(args)?;
            let sink = sink(Provider::Cilium, SourceKind::Hubble);
            Ok(tokio::spawn(sources::hubble::run(config, sink, state)))
        }
    }
}
