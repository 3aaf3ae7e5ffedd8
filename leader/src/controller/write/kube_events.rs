//! Kubernetes Events and promotions, written by the [`Writer`].

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::{Api, Resource};
use ne_crds::{WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};

use super::super::plan::{Event, ObjectKey};
use super::{FIELD_MANAGER, Writer};

/// Events remembered (by key) so each is recorded once.
const EVENT_MEMORY: usize = 10_000;

impl Writer {
    pub(super) async fn promote(
        &mut self,
        policy: WorkloadNetworkPolicy,
        proposal: ObjectKey,
    ) -> Result<(), (&'static str, &'static str, kube::Error)> {
        let kind = "WorkloadNetworkPolicy";
        let api: Api<WorkloadNetworkPolicy> =
            Api::namespaced(self.client.clone(), &proposal.namespace);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        self.count(kind, "create");
        match api.create(&params, &policy).await {
            Ok(created) => {
                tracing::info!(policy = %proposal, mode = ?created.spec.mode, "proposal promoted");
                let event = Event {
                    kind,
                    regarding: ObjectKey::of(&created),
                    warning: false,
                    reason: "Promoted",
                    note: format!(
                        "promoted from WorkloadNetworkPolicyProposal {proposal} in {:?} mode",
                        created.spec.mode
                    ),
                    key: format!(
                        "{}:promoted",
                        created.metadata.uid.as_deref().unwrap_or_default()
                    ),
                };
                // The Event is best effort: the promotion itself has happened.
                if let Err((_, _, error)) = self.event(event).await {
                    tracing::warn!(%error, "cannot record the Promoted event");
                }
                let proposals: Api<WorkloadNetworkPolicyProposal> =
                    Api::namespaced(self.client.clone(), &proposal.namespace);
                self.delete(&proposals, "WorkloadNetworkPolicyProposal", &proposal)
                    .await
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let event = Event {
                    kind: "WorkloadNetworkPolicyProposal",
                    regarding: proposal.clone(),
                    warning: true,
                    reason: "PromotionConflict",
                    note: format!(
                        "WorkloadNetworkPolicy {proposal} appeared meanwhile: nothing was \
                         overwritten and the proposal is kept"
                    ),
                    key: format!(
                        "{}:promotion-raced",
                        proposal.uid.as_deref().unwrap_or_default()
                    ),
                };
                self.event(event).await
            }
            Err(error) => Err((kind, "create", error)),
        }
    }

    pub(super) async fn event(
        &mut self,
        e: Event,
    ) -> Result<(), (&'static str, &'static str, kube::Error)> {
        let reference = ObjectReference {
            api_version: Some(ne_crds::WorkloadNetworkPolicy::api_version(&()).into_owned()),
            kind: Some(e.kind.to_owned()),
            name: Some(e.regarding.name.clone()),
            namespace: Some(e.regarding.namespace.clone()),
            uid: e.regarding.uid.clone(),
            ..ObjectReference::default()
        };
        // Created directly rather than through kube's Recorder: the Recorder folds every
        // Event of one reason about one object into a series of the first, so a second
        // warning (another unknown acknowledgement id, say) lost its note. Events are
        // already written once per key here.
        let now = k8s_openapi::jiff::Timestamp::now();
        let event = EventsV1Event {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{}.{:x}", e.regarding.name, now.as_nanosecond())),
                namespace: Some(e.regarding.namespace.clone()),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(if e.warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(e.reason.to_owned()),
            note: Some(e.note),
            action: Some("Reconcile".to_owned()),
            regarding: Some(reference),
            reporting_controller: Some(FIELD_MANAGER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        self.count(e.kind, "event");
        let events: Api<EventsV1Event> =
            Api::namespaced(self.client.clone(), &e.regarding.namespace);
        events
            .create(&PostParams::default(), &event)
            .await
            .map_err(|error| (e.kind, "event", error))?;
        if self.told_order.len() >= EVENT_MEMORY
            && let Some(old) = self.told_order.pop_front()
        {
            self.told.remove(&old);
        }
        self.told.insert(e.key.clone());
        self.told_order.push_back(e.key);
        Ok(())
    }
}
