//! Owner resolution: from what a flow record says about an endpoint to the workload it
//! belongs to, its selector and its labels.
//!
//! One trait, [`Resolver`], with two offline implementations here: [`RecordOnly`] (what the
//! record carries, nothing guessed) and [`ClusterSnapshot`] (a `kubectl get -o yaml` dump,
//! resolved exactly as in a cluster). The leader's in-cluster resolver implements the same
//! trait over its reflector stores.

use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::{Deserialize, Serialize};

use crate::flow::{Endpoint, Labels, Reserved, Str, WorkloadRef};

/// A named container port of a pod, for NetworkPolicy named ports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedPort {
    pub name: Str,
    pub protocol: crate::flow::Protocol,
    pub port: u16,
}

/// An in-cluster endpoint after resolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedPod {
    pub namespace: Str,
    /// The owning workload, when known. Jobs, CronJobs, bare pods and ReplicaSets without
    /// a Deployment have their own kind here; only Deployments, StatefulSets and DaemonSets
    /// can be subjects.
    pub owner: Option<WorkloadRef>,
    /// A selector for the owner's pods: the workload's `.spec.selector` when the cluster is
    /// known, else the template labels the record carries. `None` when it cannot be
    /// determined (such a subject is reported, never invented).
    pub selector: Option<LabelSelector>,
    /// The pod's labels (for evaluating selectors).
    pub labels: Labels,
    /// The namespace's labels; always holds `kubernetes.io/metadata.name`.
    pub namespace_labels: Labels,
    /// Named container ports, when the pod spec is known.
    pub named_ports: Vec<NamedPort>,
    /// The pod's ServiceAccount, when known.
    pub service_account: Option<Str>,
}

/// Why an endpoint could not be resolved. Bounded, so it can label a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Unresolved {
    /// The record names a pod but not its owner, and no cluster state is known.
    NoOwnerInfo,
    /// The pod (or workload) is not in the cluster state.
    NotFound,
    /// Several workloads could own the endpoint (`orders-*` vs `orders-db-*`).
    Ambiguous,
    /// The owner is known but its selector is not.
    NoSelector,
}

impl Unresolved {
    pub fn as_str(self) -> &'static str {
        match self {
            Unresolved::NoOwnerInfo => "no_owner_info",
            Unresolved::NotFound => "not_found",
            Unresolved::Ambiguous => "ambiguous",
            Unresolved::NoSelector => "no_selector",
        }
    }
}

/// The result of resolving one endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Resolution {
    Pod(ResolvedPod),
    External(IpAddr),
    Reserved(Reserved),
    Unresolved(Unresolved),
}

/// Resolves endpoints to workloads. Implementations must be cheap to call per edge.
pub trait Resolver {
    fn resolve(&self, endpoint: &Endpoint) -> Resolution;
}
