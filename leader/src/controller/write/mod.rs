//! Carries a [`Plan`] out against the API server: server-side apply with one field manager
//! for objects the controller already wrote (their uid a precondition), create for new
//! ones (an object that appeared meanwhile is never taken over), deletes with a uid
//! precondition, Events once per object version. A client-side token bucket bounds the
//! write rate; what it holds back is planned again next round. Leadership is checked
//! before every write, so a replica that lost the Lease writes nothing more.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, Resource};
use ne_crds::{AuthorizationPolicy, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::Error;
use super::metrics::{ControllerMetrics, ErrorLabels, WriteLabels};
use super::plan::{Action, ObjectKey, Plan};
use crate::ingest::Leadership;

/// The field manager of every write but the violation record's.
pub const FIELD_MANAGER: &str = "network-enforcer";
/// The field manager of a policy's violation fields: apart from [`FIELD_MANAGER`], which
/// owns the conditions, so neither apply removes the other's fields.
pub const VIOLATIONS_FIELD_MANAGER: &str = "network-enforcer-violations";

/// What one round of writes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub written: usize,
    pub deferred: usize,
    pub failed: usize,
}

pub struct Writer {
    client: Client,
    /// This replica's identity: the Events' reporting instance.
    instance: String,
    told: HashSet<String>,
    told_order: VecDeque<String>,
    budget: Budget,
    metrics: Arc<ControllerMetrics>,
    events: ViolationEvents,
    written: Vec<WrittenViolations>,
}

/// A policy's violation fields as this writer last wrote them, and the version they were
/// computed from: until the cache moves past that version, the controller plans from
/// these (a lagging cache must neither re-assign ids nor report a record twice).
#[derive(Clone, Debug, PartialEq)]
pub struct WrittenViolations {
    pub key: ObjectKey,
    pub resource_version: Option<String>,
    pub status: ne_crds::WorkloadNetworkPolicyStatus,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

fn is_code(result: &Result<(), kube::Error>, code: u16) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == code)
}

impl Writer {
    /// `instance`: this replica's identity (the Events' reporting instance).
    pub fn new(
        client: Client,
        instance: &str,
        budget: Budget,
        metrics: Arc<ControllerMetrics>,
        events: ViolationEvents,
    ) -> Self {
        Writer {
            instance: instance.to_owned(),
            client,
            told: HashSet::new(),
            told_order: VecDeque::new(),
            budget,
            metrics,
            events,
            written: Vec::new(),
        }
    }

    /// The violation fields written since the last call.
    pub fn take_written(&mut self) -> Vec<WrittenViolations> {
        std::mem::take(&mut self.written)
    }

    /// Carries out `plan` in order while this replica leads.
    pub async fn execute(&mut self, plan: Plan, leader: &dyn Leadership) -> Outcome {
        let mut outcome = Outcome::default();
        for action in plan.actions {
            if let Action::Event(e) = &action
                && self.told.contains(&e.key)
            {
                continue;
            }
            if !leader.is_leader() {
                tracing::warn!("lost the Lease: the rest of this round is not written");
                break;
            }
            if !self.budget.take() {
                outcome.deferred += 1;
                self.metrics.api_writes_deferred.inc();
                continue;
            }
            match self.one(action).await {
                Ok(()) => outcome.written += 1,
                Err((kind, verb, source)) => {
                    outcome.failed += 1;
                    tracing::warn!(kind, verb, error = %source, "API write failed; planned again next round");
                    let error = Error::Write { kind, verb, source };
                    self.metrics
                        .reconcile_errors
                        .get_or_create(&ErrorLabels {
                            controller: "writer",
                            error_type: error.error_type(),
                        })
                        .inc();
                }
            }
        }
        outcome
    }

    fn count(&self, kind: &'static str, verb: &'static str) {
        self.metrics
            .api_writes
            .get_or_create(&WriteLabels { kind, verb })
            .inc();
    }

    async fn one(
        &mut self,
        action: Action,
    ) -> Result<(), (&'static str, &'static str, kube::Error)> {
        match action {
            Action::ApplyProposal {
                object,
                spec,
                status,
            } => {
                let kind = "WorkloadNetworkPolicyProposal";
                let api: Api<WorkloadNetworkPolicyProposal> =
                    Api::namespaced(self.client.clone(), ns(&*object));
                if spec {
                    let mut body = (*object).clone();
                    body.status = None;
                    self.upsert(&api, kind, &body).await?;
                }
                if status {
                    self.apply_status(&api, kind, &*object, &object.status)
                        .await?;
                }
                Ok(())
            }
            Action::DeleteProposal { key, reason } => {
                tracing::info!(proposal = %key, reason, "deleting proposal");
                let api: Api<WorkloadNetworkPolicyProposal> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                self.delete(&api, "WorkloadNetworkPolicyProposal", &key)
                    .await
            }
            Action::Promote { policy, proposal } => self.promote(*policy, proposal).await,
            Action::ApplyPolicyStatus {
                key,
                observed_generation,
                conditions,
            } => {
                let api: Api<WorkloadNetworkPolicy> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                let body = serde_json::json!({
                    "apiVersion": WorkloadNetworkPolicy::api_version(&()),
                    "kind": WorkloadNetworkPolicy::kind(&()),
                    "metadata": { "name": key.name, "namespace": key.namespace },
                    "status": { "observedGeneration": observed_generation, "conditions": conditions },
                });
                self.count("WorkloadNetworkPolicy", "apply_status");
                api.patch_status(&key.name, &apply_params(), &Patch::Apply(&body))
                    .await
                    .map(drop)
                    .map_err(|e| ("WorkloadNetworkPolicy", "apply_status", e))
            }
            Action::ApplyViolations {
                key,
                resource_version,
                status,
                remove_annotations,
                observed,
                acknowledged,
            } => {
                let result = self
                    .apply_violations(&key, &status, &remove_annotations)
                    .await;
                // The status is written even when only the annotations' removal failed:
                // what it carried is reported now, and only now.
                if !matches!(result, Err((_, "apply_violations", _))) {
                    self.events
                        .written(&key, &observed, &acknowledged, &self.metrics);
                    self.written.push(WrittenViolations {
                        key,
                        resource_version,
                        status: *status,
                    });
                }
                result
            }
            Action::ApplyNetworkPolicy(np) => {
                let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), ns(&*np));
                self.upsert(&api, "NetworkPolicy", &*np).await
            }
            Action::DeleteNetworkPolicy(key) => {
                let api: Api<NetworkPolicy> = Api::namespaced(self.client.clone(), &key.namespace);
                self.delete(&api, "NetworkPolicy", &key).await
            }
            Action::ApplyAuthorizationPolicy(ap) => {
                let api: Api<AuthorizationPolicy> = Api::namespaced(self.client.clone(), ns(&*ap));
                self.upsert(&api, "AuthorizationPolicy", &*ap).await
            }
            Action::DeleteAuthorizationPolicy(key) => {
                let api: Api<AuthorizationPolicy> =
                    Api::namespaced(self.client.clone(), &key.namespace);
                self.delete(&api, "AuthorizationPolicy", &key).await
            }
            Action::Event(e) => self.event(e).await,
        }
    }

    /// The policy's violation fields with their own field manager (the conditions are the
    /// other manager's), then, once written, the removal of the acknowledgement annotations.
    async fn apply_violations(
        &self,
        key: &ObjectKey,
        status: &ne_crds::WorkloadNetworkPolicyStatus,
        remove_annotations: &[String],
    ) -> Result<(), (&'static str, &'static str, kube::Error)> {
        let kind = "WorkloadNetworkPolicy";
        let api: Api<WorkloadNetworkPolicy> = Api::namespaced(self.client.clone(), &key.namespace);
        let body = serde_json::json!({
            "apiVersion": WorkloadNetworkPolicy::api_version(&()),
            "kind": kind,
            "metadata": { "name": key.name, "namespace": key.namespace },
            "status": {
                "violations": status.violations,
                "activeViolationCount": status.active_violation_count,
                "violationCount": status.violation_count,
                "lastViolationId": status.last_violation_id,
                "lastViolationTime": status.last_violation_time,
                "acknowledgedViolations": status.acknowledged_violations,
            },
        });
        self.count(kind, "apply_violations");
        api.patch_status(
            &key.name,
            &PatchParams::apply(VIOLATIONS_FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(|e| (kind, "apply_violations", e))?;
        if remove_annotations.is_empty() {
            return Ok(());
        }
        let annotations: serde_json::Map<String, serde_json::Value> = remove_annotations
            .iter()
            .map(|a| (a.clone(), serde_json::Value::Null))
            .collect();
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        self.count(kind, "patch");
        api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(|e| (kind, "patch", e))
    }

    /// Apply when the object carries the uid of the one we wrote (a precondition), create
    /// otherwise.
    async fn upsert<K>(
        &self,
        api: &Api<K>,
        kind: &'static str,
        object: &K,
    ) -> Result<(), (&'static str, &'static str, kube::Error)>
    where
        K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let written = if object.meta().uid.is_some() {
            self.count(kind, "apply");
            api.patch(&name, &apply_params(), &Patch::Apply(object))
                .await
                .map_err(|e| (kind, "apply", e))?
        } else {
            self.count(kind, "create");
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            };
            api.create(&params, object)
                .await
                .map_err(|e| (kind, "create", e))?
        };
        self.own_created_fields(api, kind, &written).await
    }

    /// Makes the fields a create recorded for [`FIELD_MANAGER`] (operation `Update`) part of
    /// its `Apply` entry, so that a later apply that omits one removes it ([`managed`]).
    /// Checked after every create and apply, which also mends objects created before this
    /// was done. The patch carries the written resourceVersion (a concurrent change makes it
    /// fail, and the next apply tries again) and no field manager, so that it records no
    /// `Update` of its own.
    async fn own_created_fields<K>(
        &self,
        api: &Api<K>,
        kind: &'static str,
        written: &K,
    ) -> Result<(), (&'static str, &'static str, kube::Error)>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let meta = written.meta();
        let entries = meta.managed_fields.as_deref().unwrap_or_default();
        let Some(entries) = managed::as_applied(entries, FIELD_MANAGER) else {
            return Ok(());
        };
        let patch = serde_json::json!({
            "metadata": { "resourceVersion": meta.resource_version, "managedFields": entries },
        });
        self.count(kind, "own_fields");
        api.patch(
            meta.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(drop)
        .map_err(|e| (kind, "own_fields", e))
    }

    async fn apply_status<K, S: Serialize>(
        &self,
        api: &Api<K>,
        kind: &'static str,
        object: &K,
        status: &S,
    ) -> Result<(), (&'static str, &'static str, kube::Error)>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": { "name": name, "namespace": object.meta().namespace },
            "status": status,
        });
        self.count(kind, "apply_status");
        api.patch_status(&name, &apply_params(), &Patch::Apply(&body))
            .await
            .map(drop)
            .map_err(|e| (kind, "apply_status", e))
    }

    async fn delete<K>(
        &self,
        api: &Api<K>,
        kind: &'static str,
        key: &ObjectKey,
    ) -> Result<(), (&'static str, &'static str, kube::Error)>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        self.count(kind, "delete");
        let params = DeleteParams {
            preconditions: key.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let result = api.delete(&key.name, &params).await.map(drop);
        if is_code(&result, 404) {
            return Ok(());
        }
        result.map_err(|e| (kind, "delete", e))
    }
}

fn ns<K: Resource>(object: &K) -> &str {
    object.meta().namespace.as_deref().unwrap_or_default()
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

mod budget;
mod kube_events;
mod managed;
mod reports;

pub use budget::Budget;
pub use reports::ViolationEvents;
#[cfg(test)]
mod tests;
