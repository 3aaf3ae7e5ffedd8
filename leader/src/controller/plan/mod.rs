//! The planner: from what was learned, what the cluster holds and what Network Enforcer
//! wrote before, to the writes that make the cluster right. Pure: no IO and no clock
//! (`now` is an input), so the same input always gives the same plan, and a cluster that
//! already matches gives no write at all. The writer ([`super::write`]) carries a plan out.
//!
//! - [`proposals`]: learned allow-lists merged into the existing proposals (learning only
//!   ever adds), promotion, backend changes, `Stable` and `SharedIdentity` conditions.
//! - [`native`]: each policy's native object (NetworkPolicy or AuthorizationPolicy) and its
//!   `Ready` / `NativePolicyConflict` conditions.
//! - [`violations`]: each policy's violation record (observations merged, acknowledgements
//!   taken).

mod conditions;
mod merge;
mod native;
mod proposals;
pub mod safety;
#[cfg(test)]
mod tests;
mod violations;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::Resource;
use ne_crds::{
    AcknowledgedViolation, AuthorizationPolicy, Backend, TargetKind, ViolationRecord,
    WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal, WorkloadNetworkPolicyStatus,
};

use crate::violations::record::Observation;

pub use conditions::{condition_changed, set_condition};
pub use merge::{merge_spec, merge_status};

/// The label every object Network Enforcer writes carries.
pub const MANAGED_BY: (&str, &str) = (
    ne_policy::allowlist::MANAGED_BY_LABEL,
    ne_policy::allowlist::MANAGED_BY_VALUE,
);

/// A workload in the cluster: what a proposal's owner reference and the identity checks need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub uid: String,
    /// `spec.template.spec.serviceAccountName` (`None`: the namespace's `default`).
    pub service_account: Option<String>,
}

/// `(namespace, kind, name)` of a workload.
pub type WorkloadKey = (String, TargetKind, String);

/// What the planner is told about the installation.
#[derive(Clone, Debug)]
pub struct Config {
    /// The backend of the active provider (`kubernetes` for Cilium and Calico).
    pub backend: Backend,
    /// Namespaces whose workloads get no proposal (the release namespace among them).
    pub excluded_namespaces: BTreeSet<String>,
    /// A proposal is `Stable` once no new peer or port was added for this long.
    pub stable_after: Duration,
    /// Evidence that only moved (a later last-seen, a larger count) is written once it is
    /// this much newer than what the proposal holds; a new peer, port or condition is
    /// written at once. Without it every proposal with traffic would be rewritten every
    /// round.
    pub status_refresh: Duration,
}

/// Everything the planner reads.
#[derive(Clone, Copy, Debug)]
pub struct World<'a> {
    /// Proposals rendered from the merged edge index (with evidence in their status).
    pub learned: &'a [WorkloadNetworkPolicyProposal],
    pub workloads: &'a BTreeMap<WorkloadKey, Workload>,
    /// Proposals in the cluster.
    pub proposals: &'a [WorkloadNetworkPolicyProposal],
    /// Policies in the cluster.
    pub policies: &'a [WorkloadNetworkPolicy],
    /// NetworkPolicies in the cluster.
    pub network_policies: &'a [NetworkPolicy],
    /// AuthorizationPolicies in the cluster; `None` when Istio's CRD is not installed.
    pub authorization_policies: Option<&'a [AuthorizationPolicy]>,
    /// Violations detected this round, by policy `(namespace, name)`
    /// ([`crate::violations::detect`]).
    pub observations: &'a BTreeMap<(String, String), Vec<Observation>>,
    /// What is wrong with each policy's rules, by policy `(namespace, name)`
    /// ([`crate::controller::rules`]); a policy without an entry has nothing wrong.
    pub rule_issues: &'a BTreeMap<(String, String), RuleIssues>,
    /// What the cluster's pods say of each policy's safety in protect mode, by policy
    /// `(namespace, name)` ([`crate::controller::safety`]).
    pub safety: &'a crate::controller::safety::Safety,
    pub now: &'a Time,
}

/// What is wrong with a policy's rules, found against the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleIssues {
    /// Invalid parts, as `path: problem`: each matches nothing.
    pub invalid: Vec<String>,
    /// Paths of the peers that select no pod and no workload in the cluster.
    pub unselected: Vec<String>,
}

impl RuleIssues {
    pub fn is_empty(&self) -> bool {
        self.invalid.is_empty() && self.unselected.is_empty()
    }
}

/// An object by namespace and name, with the UID a delete must match.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl ObjectKey {
    pub fn of<K: Resource>(object: &K) -> Self {
        let meta = object.meta();
        ObjectKey {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A Kubernetes Event to record about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Kind of the object (`WorkloadNetworkPolicyProposal`, `WorkloadNetworkPolicy`).
    pub kind: &'static str,
    pub regarding: ObjectKey,
    pub warning: bool,
    /// CamelCase, bounded.
    pub reason: &'static str,
    pub note: String,
    /// Events with the same key are recorded once (the writer remembers them): the key
    /// names the object's version, so a changed object can be told again.
    pub key: String,
}

/// One write.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Server-side apply of a proposal: its spec and metadata when `spec`, its status when
    /// `status`.
    ApplyProposal {
        object: Box<WorkloadNetworkPolicyProposal>,
        spec: bool,
        status: bool,
    },
    DeleteProposal {
        key: ObjectKey,
        reason: &'static str,
    },
    /// Create `policy` (never overwrite one), record a `Promoted` Event on it, then delete
    /// the proposal; a policy that appeared meanwhile is a conflict (Warning Event on the
    /// proposal, which is kept).
    Promote {
        policy: Box<WorkloadNetworkPolicy>,
        proposal: ObjectKey,
    },
    /// Server-side apply of a policy's conditions (nothing else of its status).
    ApplyPolicyStatus {
        key: ObjectKey,
        observed_generation: Option<i64>,
        conditions: Vec<Condition>,
    },
    /// Server-side apply of a policy's violation fields (its own field manager), then removal
    /// of the acknowledgement annotations it consumed (only once the status is written).
    ///
    /// Once the status is written, the writer emits one `policy_violation_observed` log
    /// event per record in `observed` and one `policy_violation_acknowledged` per entry of
    /// `acknowledged`; a failed write emits nothing (the next round plans it again).
    ApplyViolations {
        key: ObjectKey,
        /// The `resourceVersion` the status was computed from: the controller keeps what it
        /// wrote until its cache has moved past this version.
        resource_version: Option<String>,
        status: Box<WorkloadNetworkPolicyStatus>,
        remove_annotations: Vec<String>,
        /// Records created or changed by this round's observations, as written.
        observed: Vec<ViolationRecord>,
        /// Records this round moved to `acknowledgedViolations`.
        acknowledged: Vec<AcknowledgedViolation>,
    },
    ApplyNetworkPolicy(Box<NetworkPolicy>),
    DeleteNetworkPolicy(ObjectKey),
    ApplyAuthorizationPolicy(Box<AuthorizationPolicy>),
    DeleteAuthorizationPolicy(ObjectKey),
    Event(Event),
}

/// The writes of one round, and what was left out (by bounded reason).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub skipped: BTreeMap<&'static str, u64>,
}

impl Plan {
    fn skip(&mut self, reason: &'static str) {
        *self.skipped.entry(reason).or_default() += 1;
    }
}

/// Plans one round.
pub fn plan(world: &World<'_>, config: &Config) -> Plan {
    let mut plan = Plan::default();
    // Violations first: the write budget must not hold back the records users watch
    // (visible within seconds of the flow), whatever else a round has to write.
    violations::plan(world, config, &mut plan);
    proposals::plan(world, config, &mut plan);
    native::plan(world, config, &mut plan);
    plan
}

pub(crate) use crate::attribution::TargetKey;

fn namespace_of<K: Resource>(object: &K) -> &str {
    object.meta().namespace.as_deref().unwrap_or_default()
}

fn name_of<K: Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or_default()
}

fn label<'a, K: Resource>(object: &'a K, key: &str) -> Option<&'a str> {
    object.meta().labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a, K: Resource>(object: &'a K, key: &str) -> Option<&'a str> {
    object
        .meta()
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The event key of an object's current version.
fn version_key<K: Resource>(object: &K, what: &str) -> String {
    let meta = object.meta();
    format!(
        "{}/{}@{}:{what}",
        meta.uid.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        meta.resource_version.as_deref().unwrap_or_default()
    )
}

/// Whether `object` lists `uid` among its owners (as the controller when `controller`).
fn owned_by<K: Resource>(object: &K, uid: &str, controller: bool) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid && (!controller || o.controller == Some(true)))
}

fn owner_reference(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
    controller: bool,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        name: name.to_owned(),
        uid: uid.to_owned(),
        controller: controller.then_some(true),
        block_owner_deletion: None,
    }
}
