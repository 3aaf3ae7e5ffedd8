//! Leader election on a `coordination.k8s.io/v1` Lease, with kube-lease-manager (it fits
//! kube 5, renews with server-side apply and tolerates clock skew; kube-leader-election
//! needs kube 4 and kube-runtime 5 has no election). Every replica runs it; only the
//! holder accepts agent streams ([`crate::ingest::Leadership`]).

use kube_lease_manager::{LeaseCreateMode, LeaseManagerBuilder};
use tokio::sync::watch;

use crate::ingest::Leadership;

/// How long a Lease is held without renewal, and how long before expiry it is renewed.
const DURATION_SECONDS: u64 = 15;
const GRACE_SECONDS: u64 = 5;

/// This replica's view of the Lease: true while it holds it.
#[derive(Clone, Debug)]
pub struct LeaseLeadership {
    holds: watch::Receiver<bool>,
}

impl Leadership for LeaseLeadership {
    fn is_leader(&self) -> bool {
        *self.holds.borrow()
    }
}

impl LeaseLeadership {
    /// Waits until this replica holds the Lease or `false` if the election stopped.
    pub async fn acquired(&mut self) -> bool {
        self.holds.wait_for(|held| *held).await.is_ok()
    }

    /// A receiver of the leadership flag. It is a handle on the Lease like this one: the Lease
    /// is released only once every receiver is dropped.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.holds.clone()
    }

    /// Waits for the next change of leadership; `None` once the election stopped.
    pub async fn changed(&mut self) -> Option<bool> {
        self.holds.changed().await.ok()?;
        Some(*self.holds.borrow())
    }
}

/// Joins the election for Lease `namespace/name` as `identity` (the Lease is created if
/// missing). The returned leadership must be kept: when every clone of it is dropped the
/// Lease is released.
pub async fn join(
    client: kube::Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> anyhow::Result<(
    LeaseLeadership,
    tokio::task::JoinHandle<
        Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>,
    >,
)> {
    let manager = LeaseManagerBuilder::new(client, name)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(DURATION_SECONDS)
        .with_grace(GRACE_SECONDS)
        .with_field_manager("network-enforcer")
        .with_create_mode(LeaseCreateMode::AutoCreate)
        .build()
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot join the election on Lease {namespace}/{name}: {e}")
        })?;
    let (holds, task) = manager.watch().await;
    Ok((LeaseLeadership { holds }, task))
}
