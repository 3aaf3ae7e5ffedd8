//! `ne-leader run`: the live leader, and the one place where its parts are wired: this
//! module parses nothing itself (see [`crate::cli`]), builds every part from the arguments,
//! starts it, runs the rounds until SIGINT or SIGTERM, and stops everything in order.
//!
//! - Agents stream their edges, denials and dry-run denials to the ingest service
//!   ([`crate::ingest`]); the index's owner task merges them. Agents authenticate with a
//!   ServiceAccount token checked by TokenReview ([`crate::auth`]); `--insecure-ingest`
//!   skips it for development.
//! - [`leadership`]: a Lease in `--lease-namespace` ([`crate::election`]); only the holder
//!   accepts streams (a standby answers UNAVAILABLE) and runs rounds. `--standalone` skips
//!   the election (one replica, no cluster, no controller).
//! - [`rounds`]: every `--flush-interval`, the controller's pipeline ([`crate::controller`]:
//!   learn, detect, plan, write), whose proposals also go to `--output` when they changed.
//! - [`telemetry`]: `/metrics`, health, OTLP metrics and violation log events, from the
//!   standard variables unless `--otel none`.

use std::sync::Arc;

use anyhow::Context as _;
use ne_flow::edge::Provider;
use ne_policy::allowlist::LearnOptions;
use ne_telemetry::runtime;

mod leadership;
mod rounds;
mod telemetry;

use leadership::leadership;
use rounds::Rounds;
use telemetry::Telemetry;

use crate::auth::{Authenticator, Insecure, TokenReviews};
use crate::cli::{ProviderArg, RunArgs};
use crate::controller::metrics::ControllerMetrics;
use crate::controller::{Controller, Settings};
use crate::ingest::{IndexHandle, IngestService, LeaderMetrics};
use crate::learning::Learning;

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
    runtime::init_logging(runtime::LogFormat::Text);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(serve(args))
}

/// The wiring: every part built from the arguments and started, the rounds run until a
/// signal, then everything stopped in order.
async fn serve(args: &RunArgs) -> anyhow::Result<()> {
    let ingest_listener = bind(args.ingest_address, "--ingest-address").await?;
    let metrics = Arc::new(LeaderMetrics::default());
    let (leadership, election) = leadership(args, &metrics).await?;
    let auth = authenticator(args).await?;
    let controller_metrics = Arc::new(ControllerMetrics::default());
    let telemetry = Telemetry::start(args, &metrics, &controller_metrics).await?;
    let (index, _owner) =
        IndexHandle::spawn_gauged(args.max_edges, args.max_agents, metrics.index_gauges());
    let address = ingest_listener.local_addr()?;
    let service = IngestService::new(
        index.clone(),
        leadership.clone(),
        crate::ingest::leader_epoch(),
        metrics.clone(),
        auth,
    )
    .with_limits(args.ingest_limits());
    let server = tokio::spawn(service.serve(ingest_listener));
    tracing::info!(%address, "ingest listening");
    let provider = Provider::from(args.provider);
    let options = LearnOptions {
        exclude_namespaces: args.exclude_namespaces.iter().cloned().collect(),
    };
    let controller = controller(args, provider, &options, &controller_metrics, &telemetry).await?;
    let mut rounds = Rounds {
        index,
        controller,
        learning: Learning::new(provider, options),
        output: args.output.clone(),
    };
    rounds
        .run(args.flush_interval, &leadership, runtime::shutdown_signal())
        .await?;
    tracing::info!("shutting down");
    server.abort();
    let _ = server.await;
    drop(rounds);
    telemetry.stop().await;
    drop(leadership);
    if let Some(election) = election {
        election.release().await;
    }
    Ok(())
}

async fn bind(
    address: std::net::SocketAddr,
    flag: &str,
) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {flag} {address}"))
}

/// How agent streams are authenticated: TokenReview, unless `--insecure-ingest`.
async fn authenticator(args: &RunArgs) -> anyhow::Result<Arc<dyn Authenticator>> {
    if args.insecure_ingest {
        tracing::warn!("--insecure-ingest: agent streams are NOT authenticated (development only)");
        return Ok(Arc::new(Insecure));
    }
    let client = kube::Client::try_default().await.context(
        "agent authentication needs the API server (TokenReview); use --insecure-ingest to run without a cluster",
    )?;
    tracing::info!(service_accounts = ?args.agent_service_accounts, "agent streams need a ServiceAccount token");
    Ok(Arc::new(TokenReviews::new(
        client,
        &args.agent_service_accounts,
    )))
}

/// The controller, unless `--standalone` or `--no-controller`.
async fn controller(
    args: &RunArgs,
    provider: Provider,
    options: &LearnOptions,
    metrics: &Arc<ControllerMetrics>,
    telemetry: &Telemetry,
) -> anyhow::Result<Option<Controller>> {
    if args.standalone || args.no_controller {
        tracing::warn!("the controller is off: nothing is written to the cluster");
        return Ok(None);
    }
    let client = kube::Client::try_default()
        .await
        .context("the controller needs the API server; use --no-controller to run without")?;
    let settings = Settings {
        provider,
        options: options.clone(),
        release_namespace: args.lease_namespace.clone(),
        stable_after: args.stable_after,
        status_refresh: args.status_refresh,
        writes_per_second: args.api_writes_per_second,
        write_burst: args.api_write_burst,
        identity: identity(args),
        pod_history_retention: args.pod_history_retention,
        pod_history_max: args.pod_history_max,
        host_traffic: args.host_traffic,
    };
    let controller = Controller::start(
        client,
        settings,
        metrics.clone(),
        telemetry.log_events.clone(),
    )
    .await?;
    Ok(Some(controller))
}

/// This replica's identity: `--identity` (env `POD_NAME`), else the host name and the
/// process id, so two local leaders never share one.
fn identity(args: &RunArgs) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ne-leader".to_owned());
        format!("{host}-{}", std::process::id())
    })
}
