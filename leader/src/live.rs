//! `ne-leader run`: the live leader. Agents stream their edges to the ingest service
//! ([`crate::ingest`]); the index's owner task merges them; every `--flush-interval` the
//! merged edges are learned and rendered as proposals (the same code as offline `learn`)
//! and written to `--output` when they changed.
//!
//! Not built yet, and refused rather than faked: Lease election (`--standalone` is
//! required: one replica leads unconditionally), agent authentication (`--insecure-ingest`
//! is required) and writing proposals to the cluster (`--output` is where they go).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use ne_crds::WorkloadNetworkPolicyProposal;
use ne_shared::allowlist::{AggregatedEdge, LearnOptions};
use ne_shared::edge::Provider;
use ne_shared::index::MergedEdge;
use ne_shared::resolve::RecordOnly;
use ne_shared::telemetry::http;
use tokio_stream::wrappers::TcpListenerStream;

use crate::cli::{ProviderArg, RunArgs};
use crate::ingest::{IndexHandle, IngestServer, IngestService, LeaderMetrics};
use crate::offline::learn::{proposals, to_yaml_stream, write_proposals};

impl From<ProviderArg> for Provider {
    fn from(p: ProviderArg) -> Self {
        match p {
            ProviderArg::Cilium => Provider::Cilium,
            ProviderArg::Calico => Provider::Calico,
            ProviderArg::Istio => Provider::Istio,
        }
    }
}

/// Runs the live leader until SIGINT or SIGTERM.
pub fn main(args: &RunArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.standalone,
        "Lease election is not built yet: run one replica with --standalone"
    );
    anyhow::ensure!(
        args.insecure_ingest,
        "agent authentication (TokenReview) is not built yet: pass --insecure-ingest (development only)"
    );
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(args))
}

async fn serve(args: &RunArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.ingest_address)
        .await
        .with_context(|| format!("cannot listen on --ingest-address {}", args.ingest_address))?;
    let address = listener.local_addr()?;
    tracing::warn!("--insecure-ingest: agent streams are NOT authenticated (development only)");
    tracing::warn!("--standalone: leading without a Lease (one replica, development only)");
    let metrics = Arc::new(LeaderMetrics::default());
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_address)
        .await
        .with_context(|| {
            format!(
                "cannot listen on --metrics-address {}",
                args.metrics_address
            )
        })?;
    tracing::info!(address = %metrics_listener.local_addr()?, "metrics listening");
    let endpoints = http::Endpoints {
        metrics: metrics.clone(),
        ready: Arc::new(AtomicBool::new(true)),
        not_ready: "not leading",
    };
    let metrics_server = tokio::spawn(http::serve(metrics_listener, endpoints));
    let (index, _owner) = IndexHandle::spawn(args.max_edges);
    let epoch = crate::ingest::leader_epoch();
    let service = IngestService::new(
        index.clone(),
        Arc::new(AtomicBool::new(true)),
        epoch,
        metrics.clone(),
    );
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(IngestServer::new(service))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    tracing::info!(%address, "ingest listening");
    let provider = Provider::from(args.provider);
    let options = LearnOptions {
        exclude_namespaces: args.exclude_namespaces.iter().cloned().collect(),
    };
    let mut written = String::new();
    let mut ticker = tokio::time::interval(args.flush_interval);
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = &mut stop => break,
        }
        let merged = index.read().await?;
        metrics
            .edges
            .set(i64::try_from(merged.len()).unwrap_or(i64::MAX));
        let proposals = render(&merged, provider, &options)?;
        let yaml = to_yaml_stream(&proposals)?;
        if yaml != written {
            tracing::info!(
                edges = merged.len(),
                proposals = proposals.len(),
                "proposals changed"
            );
            if let Some(output) = &args.output {
                write_proposals(&proposals, output)?;
            }
            written = yaml;
        }
    }
    tracing::info!("shutting down");
    server.abort();
    metrics_server.abort();
    Ok(())
}

/// The proposals of the merged edges (workloads as the agents resolved them).
pub fn render(
    merged: &[MergedEdge],
    provider: Provider,
    options: &LearnOptions,
) -> anyhow::Result<Vec<WorkloadNetworkPolicyProposal>> {
    let edges = merged.iter().map(|m| AggregatedEdge {
        edge: &m.edge,
        count: m.count,
        first_seen: m.first_seen,
        last_seen: m.last_seen,
    });
    Ok(proposals(edges, &RecordOnly, provider, options)?.1)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
