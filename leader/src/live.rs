//! `ne-leader run`: the live leader. Agents stream their edges, denials and dry-run denials
//! to the ingest service ([`crate::ingest`]); the index's owner task merges them; every
//! `--flush-interval` the leader runs a controller round ([`crate::controller`]: proposals,
//! promotion, native policies, violations and their log events) and renders the proposals
//! (the same code as offline `learn`), also to `--output` when they changed.
//!
//! Leadership: a Lease in `--lease-namespace` (module [`crate::election`]); only the
//! holder accepts streams, a standby answers UNAVAILABLE. `--standalone` skips the
//! election (one replica, no cluster, no controller).
//!
//! Agents authenticate with a ServiceAccount token checked by TokenReview (module
//! [`crate::auth`]); `--insecure-ingest` skips it for development. OpenTelemetry: metrics
//! and violation log events over OTLP, from the standard variables, unless `--otel none`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_policy::allowlist::LearnOptions;
use ne_policy::index::MergedEdge;
use ne_policy::resolve::RecordOnly;
use ne_telemetry::{http, logs, otlp};
use tokio_stream::wrappers::TcpListenerStream;

use crate::auth::{Authenticator, Insecure, TokenReviews};
use crate::cli::{OtelArg, ProviderArg, RunArgs};
use crate::controller::metrics::ControllerMetrics;
use crate::controller::{Controller, Settings};
use crate::election::{self, LeaseLeadership};
use crate::ingest::Leadership;
use crate::ingest::{IndexHandle, IngestServer, IngestService, LeaderMetrics};
use crate::leader_label::{self, PodLabeler};
use crate::violations::detect::Traffic;
use crate::{learning, output};

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
    let metrics = Arc::new(LeaderMetrics::default());
    let (leadership, election) = leadership(args, &metrics).await?;
    let auth: Arc<dyn Authenticator> = if args.insecure_ingest {
        tracing::warn!("--insecure-ingest: agent streams are NOT authenticated (development only)");
        Arc::new(Insecure)
    } else {
        let client = kube::Client::try_default().await.context(
            "agent authentication needs the API server (TokenReview); use --insecure-ingest to run without a cluster",
        )?;
        tracing::info!(service_accounts = ?args.agent_service_accounts, "agent streams need a ServiceAccount token");
        Arc::new(TokenReviews::new(client, &args.agent_service_accounts))
    };
    let controller_metrics = Arc::new(ControllerMetrics::default());
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_address)
        .await
        .with_context(|| {
            format!(
                "cannot listen on --metrics-address {}",
                args.metrics_address
            )
        })?;
    tracing::info!(address = %metrics_listener.local_addr()?, "metrics listening");
    let log_metrics = Arc::new(logs::LogMetrics::default());
    let exposition: Arc<dyn http::Exposition> = Arc::new(Exposed {
        ingest: metrics.clone(),
        controller: controller_metrics.clone(),
        logs: log_metrics.clone(),
    });
    let pod: Vec<(&str, &str)> = args
        .identity
        .as_deref()
        .map(|p| ("k8s.pod.name", p))
        .into_iter()
        .collect();
    let otel = args.otel == OtelArg::Otlp;
    let env = |k: &str| std::env::var(k).ok();
    let otlp = match otel
        .then(|| otlp::OtlpConfig::from_env(env, "ne-leader", &pod))
        .transpose()?
        .flatten()
    {
        Some(config) => {
            tracing::info!(endpoint = %config.export.endpoint, interval = ?config.interval, "exporting metrics over OTLP");
            Some(tokio::spawn(otlp::run(config, exposition.clone())))
        }
        None => None,
    };
    let (log_events, log_exporter) = match otel
        .then(|| logs::LogsConfig::from_env(env, "ne-leader", &pod))
        .transpose()?
        .flatten()
    {
        Some(config) => {
            tracing::info!(endpoint = %config.export.endpoint, "exporting violation log events over OTLP");
            let (sender, task) = logs::start(
                config,
                ne_policy::otel_names::LOG_SCOPE,
                log_metrics.clone(),
            );
            (sender, Some(task))
        }
        None => {
            tracing::info!(
                "violation log events are not exported (no OTLP logs endpoint, or --otel=none)"
            );
            (logs::LogSender::disabled(), None)
        }
    };
    let endpoints = http::Endpoints {
        metrics: exposition,
        ready: Arc::new(AtomicBool::new(true)),
        not_ready: "not leading",
    };
    let metrics_server = tokio::spawn(http::serve(metrics_listener, endpoints));
    let (index, _owner) = IndexHandle::spawn(args.max_edges);
    let epoch = crate::ingest::leader_epoch();
    let service = IngestService::new(
        index.clone(),
        leadership.clone(),
        epoch,
        metrics.clone(),
        auth,
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
    let mut controller = if args.standalone || args.no_controller {
        tracing::warn!("the controller is off: nothing is written to the cluster");
        None
    } else {
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
        };
        Some(
            Controller::start(
                client,
                settings,
                controller_metrics.clone(),
                log_events.clone(),
            )
            .await?,
        )
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
        if !leadership.is_leader() {
            continue;
        }
        let held = index.read().await?;
        let merged = &held.edges;
        let gauge = |v: &[MergedEdge]| i64::try_from(v.len()).unwrap_or(i64::MAX);
        metrics.edges.set(gauge(merged));
        metrics.denied_edges.set(gauge(&held.denials));
        metrics.audit_edges.set(gauge(&held.audits));
        let traffic = Traffic {
            edges: merged,
            denials: &held.denials,
            audits: &held.audits,
        };
        // The round's proposals, resolved against the cluster; without a controller, as
        // the agents resolved them.
        let proposals = match controller.as_mut() {
            Some(controller) => controller.round(traffic, &leadership).await.proposals,
            None => {
                let learned =
                    learning::learn(learning::merged(merged), &RecordOnly, provider, &options);
                for what in &learned.unrendered {
                    tracing::warn!(allow_list = %what, "cannot render a proposal; the others are written");
                }
                learned.proposals
            }
        };
        written = report_proposals(&proposals, merged.len(), &written, args.output.as_deref());
    }
    tracing::info!("shutting down");
    server.abort();
    metrics_server.abort();
    if let Some(otlp) = otlp {
        otlp.abort();
    }
    let _ = server.await;
    drop(controller);
    // Events of the last round go out before the process does.
    if let Some(task) = log_exporter {
        if tokio::time::timeout(std::time::Duration::from_secs(5), log_events.flush())
            .await
            .is_err()
        {
            tracing::warn!("violation log events not exported within 5 s are lost");
        }
        task.abort();
    }
    drop(leadership);
    // Every handle on the Lease is gone: the election task releases it, so a standby takes
    // over at once instead of waiting for the Lease to expire.
    if let Some(election) = election {
        election.logger.abort();
        let _ = election.logger.await;
        if let Some((labeler, task)) = election.label {
            task.abort();
            let _ = task.await;
            // Out of the leader-only Service before the Lease goes to a standby.
            match tokio::time::timeout(std::time::Duration::from_secs(3), labeler.set(false)).await
            {
                Ok(Ok(())) => tracing::info!("pod leader label removed"),
                _ => tracing::warn!("cannot remove the pod's leader label"),
            }
        }
        match tokio::time::timeout(std::time::Duration::from_secs(5), election.task).await {
            Ok(_) => tracing::info!("Lease released"),
            Err(_) => tracing::warn!("the Lease was not released within 5 s; it will expire"),
        }
    }
    Ok(())
}

/// Who decides whether this replica leads.
#[derive(Clone)]
enum Leader {
    Always,
    Lease(LeaseLeadership),
}

impl Leadership for Leader {
    fn is_leader(&self) -> bool {
        match self {
            Leader::Always => true,
            Leader::Lease(lease) => lease.is_leader(),
        }
    }
}

/// The election's tasks, kept to release the Lease on shutdown.
struct Election {
    task: tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
    /// Logs leadership changes; holds a handle on the Lease.
    logger: tokio::task::JoinHandle<()>,
    /// Keeps the pod's leader label (also a handle on the Lease).
    label: Option<(PodLabeler, tokio::task::JoinHandle<()>)>,
}

async fn leadership(
    args: &RunArgs,
    metrics: &Arc<LeaderMetrics>,
) -> anyhow::Result<(Leader, Option<Election>)> {
    if args.standalone {
        tracing::warn!("--standalone: leading without a Lease (one replica, development only)");
        return Ok((Leader::Always, None));
    }
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (in-cluster or KUBECONFIG); use --standalone to run without a cluster")?;
    let identity = identity(args);
    let (lease, task) = election::join(
        client.clone(),
        &args.lease_namespace,
        &args.lease_name,
        &identity,
    )
    .await?;
    let pod = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty());
    let in_pod = pod.is_some() && std::env::var("POD_NAMESPACE").is_ok_and(|n| !n.is_empty());
    let label = match (args.label_leader_pod.unwrap_or(in_pod), pod) {
        (true, Some(pod)) => {
            let namespace =
                std::env::var("POD_NAMESPACE").unwrap_or_else(|_| args.lease_namespace.clone());
            let labeler = PodLabeler::new(client, &namespace, &pod);
            tracing::info!(%pod, %namespace, label = leader_label::LEADER_LABEL, "labelling this pod while it leads");
            let task = tokio::spawn(leader_label::follow(
                labeler.clone(),
                lease.receiver(),
                metrics.clone(),
            ));
            Some((labeler, task))
        }
        (true, None) => anyhow::bail!("--label-leader-pod needs the pod's name in env POD_NAME"),
        (false, _) => None,
    };
    tracing::info!(lease = %format!("{}/{}", args.lease_namespace, args.lease_name), %identity, "joined the leader election");
    let mut watch = lease.clone();
    let logger = tokio::spawn(async move {
        while let Some(leading) = watch.changed().await {
            if leading {
                tracing::info!("this replica now holds the Lease: accepting agent streams");
            } else {
                tracing::warn!("this replica lost the Lease: refusing agent streams");
            }
        }
    });
    Ok((
        Leader::Lease(lease),
        Some(Election {
            task,
            logger,
            label,
        }),
    ))
}

/// This replica's identity: `--identity` (env `POD_NAME`), else the host name and the
/// process id, so two local leaders never share one.
fn identity(args: &RunArgs) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "ne-leader".to_owned());
        format!("{host}-{}", std::process::id())
    })
}

/// The leader's metrics: ingest and controller, one exposition.
struct Exposed {
    ingest: Arc<LeaderMetrics>,
    controller: Arc<ControllerMetrics>,
    logs: Arc<logs::LogMetrics>,
}

impl http::Exposition for Exposed {
    fn encode(&self) -> String {
        http::prometheus_text(|r| {
            self.ingest.register(r);
            self.controller.register(r);
            self.logs.register(r);
        })
    }
}

/// Logs when the proposals changed and writes them to `output`; returns what they are now
/// (a YAML stream). A proposal that cannot be written is logged; the leader goes on.
fn report_proposals(
    proposals: &[WorkloadNetworkPolicyProposal],
    edges: usize,
    written: &str,
    output: Option<&str>,
) -> String {
    let yaml = match output::to_yaml_stream(proposals) {
        Ok(yaml) => yaml,
        Err(error) => {
            tracing::warn!(
                error = format!("{error:#}"),
                "cannot serialise the proposals"
            );
            return written.to_owned();
        }
    };
    if yaml != written {
        tracing::info!(edges, proposals = proposals.len(), "proposals changed");
        if let Some(output) = output
            && let Err(error) = output::write_proposals(proposals, output)
        {
            tracing::warn!(
                error = format!("{error:#}"),
                "cannot write the proposals to --output"
            );
        }
    }
    yaml
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
