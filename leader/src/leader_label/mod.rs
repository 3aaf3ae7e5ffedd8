//! Leader discovery for agents: the Lease holder labels its own Pod
//! `networkenforcer.kubewarden.io/leader: "true"`, and the Helm chart's Service
//! `<release>-leader` selects that label, so agents (`--leader-address
//! <release>-leader.<namespace>.svc:9443`) always reach the leader. The agents need no API
//! access at all, and the API server sees one label change per leadership change rather than
//! a watch per node.
//!
//! The label is cleared once at start (a restarted container keeps its pod's labels), set
//! when the Lease is gained and removed when it is lost or at shutdown. A failed patch is
//! logged, counted and retried with backoff; a standby that is still labelled only refuses
//! streams (`UNAVAILABLE`), so agents retry and meet the leader.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

use crate::ingest::LeaderMetrics;

/// The label the leader-only Service selects.
pub const LEADER_LABEL: &str = "networkenforcer.kubewarden.io/leader";

/// Patches one pod's leader label.
#[derive(Clone)]
pub struct PodLabeler {
    pods: Api<Pod>,
    name: String,
}

impl std::fmt::Debug for PodLabeler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodLabeler")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PodLabeler {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        PodLabeler {
            pods: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    /// Sets the label (`leading`) or removes it.
    pub async fn set(&self, leading: bool) -> Result<(), kube::Error> {
        let value = if leading { json!("true") } else { json!(null) };
        let patch = json!({"metadata": {"labels": {LEADER_LABEL: value}}});
        self.pods
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
    }
}

/// Keeps the label equal to `leadership` until the task is dropped: cleared first, then
/// following every change; failures retried with backoff (1 s doubling to 30 s).
pub async fn follow(
    labeler: PodLabeler,
    mut leadership: watch::Receiver<bool>,
    metrics: Arc<LeaderMetrics>,
) {
    let mut labelled: Option<bool> = None;
    let mut backoff = Duration::from_secs(1);
    loop {
        // Cleared at start, whatever the Lease says: a fresh start never inherits a label.
        let want = labelled.is_some() && *leadership.borrow_and_update();
        if labelled != Some(want) {
            match labeler.set(want).await {
                Ok(()) => {
                    tracing::info!(label = LEADER_LABEL, leading = want, "pod label updated");
                    labelled = Some(want);
                    backoff = Duration::from_secs(1);
                }
                Err(error) => {
                    metrics.pod_label_failures.inc();
                    tracing::warn!(%error, retry_in = ?backoff, "cannot update the pod's leader label");
                    tokio::select! {
                        changed = leadership.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            }
            // The first pass only cleared: now follow the Lease.
            if want != *leadership.borrow() {
                continue;
            }
        }
        if leadership.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
