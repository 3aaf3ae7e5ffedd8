//! Who leads: the Lease election (or `--standalone`), the pod's leader label, and leaving
//! both on shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::identity;
use crate::cli::RunArgs;
use crate::election::{self, LeaseLeadership};
use crate::ingest::{LeaderMetrics, Leadership};
use crate::leader_label::{self, PodLabeler};

/// Who decides whether this replica leads.
#[derive(Clone)]
pub(super) enum Leader {
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
pub(super) struct Election {
    task: tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
    /// Logs leadership changes; holds a handle on the Lease.
    logger: tokio::task::JoinHandle<()>,
    /// Keeps the pod's leader label (also a handle on the Lease).
    label: Option<(PodLabeler, tokio::task::JoinHandle<()>)>,
}

impl Election {
    /// Leaves the election once every other handle on the Lease is gone: the pod leaves the
    /// leader-only Service, then the Lease is released, so a standby takes over at once
    /// instead of waiting for the Lease to expire.
    pub(super) async fn release(self) {
        self.logger.abort();
        let _ = self.logger.await;
        if let Some((labeler, task)) = self.label {
            task.abort();
            let _ = task.await;
            match tokio::time::timeout(Duration::from_secs(3), labeler.set(false)).await {
                Ok(Ok(())) => tracing::info!("pod leader label removed"),
                _ => tracing::warn!("cannot remove the pod's leader label"),
            }
        }
        match tokio::time::timeout(Duration::from_secs(5), self.task).await {
            Ok(_) => tracing::info!("Lease released"),
            Err(_) => tracing::warn!("the Lease was not released within 5 s; it will expire"),
        }
    }
}

pub(super) async fn leadership(
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
