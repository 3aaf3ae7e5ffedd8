//! The Kubernetes controller of `ne-leader run` (ARCHITECTURE §1, §4): learned edges become
//! proposals, labelled proposals become policies, policies become native objects.
//!
//! - [`state`]: reflectors for every kind read (all replicas keep them warm).
//! - [`plan`]: the pure planner (learned proposals + cluster state + existing objects →
//!   writes), table-tested.
//! - [`write`]: carries a plan out (server-side apply, uid preconditions, Events, a write
//!   budget), only while this replica leads.
//!
//! One round per `--flush-interval` on the leader: resolve the merged edge index against
//! the cluster, render and merge proposals, check the traffic of monitored policies
//! ([`crate::violations`]), plan, write. A round whose cluster already
//! matches writes nothing.

pub mod metrics;
pub mod plan;
pub mod state;
pub mod write;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use ne_crds::Backend;
use ne_shared::allowlist::{LearnOptions, backend_for};
use ne_shared::edge::Provider;
use ne_shared::index::MergedEdge;

use crate::ingest::Leadership;
use metrics::{ControllerLabel, ReasonLabel};
use plan::{Config, World};
use state::{Stores, owned};
use write::{Budget, Outcome, Writer};

/// How the controller is set up.
#[derive(Clone, Debug)]
pub struct Settings {
    pub provider: Provider,
    pub options: LearnOptions,
    /// The release namespace (never learned).
    pub release_namespace: String,
    pub stable_after: Duration,
    pub status_refresh: Duration,
    pub writes_per_second: f64,
    pub write_burst: u32,
    /// This replica's identity (Events name it).
    pub identity: String,
}

/// The controller: its caches, its writer and what it is told.
pub struct Controller {
    stores: Stores,
    writer: Writer,
    settings: Settings,
    config: Config,
    metrics: Arc<metrics::ControllerMetrics>,
    _reflectors: Vec<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Controller")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        for task in &self._reflectors {
            task.abort();
        }
    }
}

impl Controller {
    /// Starts the reflectors and waits for their first lists.
    pub async fn start(
        client: Client,
        settings: Settings,
        metrics: Arc<metrics::ControllerMetrics>,
    ) -> anyhow::Result<Self> {
        let backend = backend_for(settings.provider);
        let istio = state::authorization_policies_served(&client).await?;
        if backend == Backend::Istio && !istio {
            tracing::warn!(
                "the AuthorizationPolicy CRD (security.istio.io/v1) is not served: Istio policies \
                 will report AuthorizationPolicyUnavailable"
            );
        }
        let (stores, reflectors) = Stores::start(&client, istio);
        tracing::info!("waiting for the cluster caches");
        stores.ready().await?;
        tracing::info!("cluster caches ready");
        let mut excluded: BTreeSet<String> = settings
            .options
            .exclude_namespaces
            .iter()
            .cloned()
            .collect();
        excluded.insert(settings.release_namespace.clone());
        let config = Config {
            backend,
            excluded_namespaces: excluded,
            stable_after: settings.stable_after,
            status_refresh: settings.status_refresh,
        };
        let writer = Writer::new(
            client,
            &settings.identity,
            Budget::new(settings.writes_per_second, settings.write_burst),
            metrics.clone(),
        );
        Ok(Controller {
            stores,
            writer,
            settings,
            config,
            metrics,
            _reflectors: reflectors,
        })
    }

    /// One round: learned proposals from `merged`, planned against the caches, written.
    pub async fn round(
        &mut self,
        merged: &[MergedEdge],
        leader: &dyn Leadership,
    ) -> anyhow::Result<Outcome> {
        let started = Instant::now();
        let (snapshot, skipped_objects) = self.stores.snapshot();
        self.metrics
            .objects_skipped
            .set(i64::try_from(skipped_objects).unwrap_or(i64::MAX));
        let (summary, learned) = crate::live::learn_merged(
            merged,
            &snapshot,
            self.settings.provider,
            &self.settings.options,
        )?;
        self.metrics.unresolved_subjects.clear();
        for (why, tally) in &summary.unresolved_subjects {
            self.metrics
                .unresolved_subjects
                .get_or_create(&ReasonLabel {
                    reason: why.as_str(),
                })
                .set(i64::try_from(tally.edges).unwrap_or(i64::MAX));
        }
        self.metrics.unexpressible_peers.clear();
        for (why, tally) in &summary.unresolved_peers {
            self.metrics
                .unexpressible_peers
                .get_or_create(&ReasonLabel {
                    reason: why.as_str(),
                })
                .set(i64::try_from(tally.edges).unwrap_or(i64::MAX));
        }
        let workloads = self.stores.workloads();
        let proposals = owned(&self.stores.proposals);
        let policies = owned(&self.stores.policies);
        let network_policies = owned(&self.stores.network_policies);
        let authorization_policies = self.stores.authorization_policies.as_ref().map(owned);
        // Whole seconds, as the API server stores times: a condition written now compares
        // equal when read back.
        let detected =
            crate::violations::detect::detect(merged, &policies, &snapshot, self.config.backend);
        for ((namespace, name), error) in &detected.errors {
            tracing::warn!(policy = %format!("{namespace}/{name}"), %error, "cannot check traffic against the policy");
        }
        let now = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second(),
            )
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        let world = World {
            learned: &learned,
            workloads: &workloads,
            proposals: &proposals,
            policies: &policies,
            network_policies: &network_policies,
            authorization_policies: authorization_policies.as_deref(),
            observations: &detected.observations,
            now: &now,
        };
        let plan = plan::plan(&world, &self.config);
        self.metrics.proposals_skipped.clear();
        for (reason, n) in &plan.skipped {
            self.metrics
                .proposals_skipped
                .get_or_create(&ReasonLabel { reason })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let actions = plan.actions.len();
        let outcome = self.writer.execute(plan, leader).await;
        if actions > 0 {
            tracing::info!(
                actions,
                written = outcome.written,
                deferred = outcome.deferred,
                failed = outcome.failed,
                "controller round"
            );
        }
        self.metrics
            .reconcile_duration
            .get_or_create(&ControllerLabel {
                controller: "proposals",
            })
            .observe(started.elapsed().as_secs_f64());
        Ok(outcome)
    }
}
