//! The Kubernetes controller of `ne-leader run` (docs/architecture.md, "The leader"): learned
//! edges become proposals, labelled proposals become policies, policies become native objects,
//! traffic outside a policy becomes its violation record and a log event.
//!
//! - [`state`]: reflectors for every kind read (all replicas keep them warm).
//! - [`plan`]: the pure planner (learned proposals + cluster state + existing objects →
//!   writes), table-tested.
//! - [`write`]: carries a plan out (server-side apply, uid preconditions, Events, a write
//!   budget), only while this replica leads, and reports what a violation write carried as
//!   log events once it succeeded.
//!
//! One round per `--flush-interval` on the leader: resolve the edges that changed in the
//! merged index against the cluster (every edge after the cluster changed; the resolver
//! itself takes only the objects that changed), learn and render the allow-lists they
//! touched, merge proposals, turn the round's traffic, denials and dry-run denials into observations
//! ([`crate::violations`]; unattributed ones are reported here), plan, write. A round whose
//! cluster already matches writes nothing.

mod error;
mod history;
pub mod metrics;
pub mod plan;
mod rules;
pub mod safety;
pub mod state;
mod unattributed;
pub mod write;

use unattributed::Unattributed;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use ne_crds::Backend;
use ne_flow::edge::Provider;
use ne_flow::flow::Timestamp;
use ne_policy::allowlist::{Incremental, LearnOptions, backend_for};
use ne_policy::resolve::{ClusterSnapshot, GonePod};
use ne_telemetry::logs::LogSender;

pub use error::Error;

use crate::ingest::Leadership;
use crate::learning::Learning;
use crate::violations::detect::{self, Detected, Traffic};
use metrics::{ControllerLabel, ReasonLabel};
use ne_crds::WorkloadNetworkPolicy;
use plan::{Config, Plan, World};
use state::{Stores, owned};
use write::{Budget, Outcome, ViolationEvents, Writer, WrittenViolations};

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
    /// How long, and how many, deleted pods are remembered for attribution.
    pub pod_history_retention: Duration,
    pub pod_history_max: usize,
    /// What the data plane does with a node's traffic into its pods (`ProtectSafe`).
    pub host_traffic: safety::HostTraffic,
}

/// The controller: its caches, its writer and what it is told.
pub struct Controller {
    stores: Stores,
    writer: Writer,
    settings: Settings,
    config: Config,
    metrics: Arc<metrics::ControllerMetrics>,
    /// The resolver of the last round.
    resolver: Option<ClusterView>,
    /// Pods deleted since this replica started, for the edges of their lifetime.
    history: history::PodHistory,
    /// Violation fields written and not yet seen in the cache, by policy.
    written: HashMap<(String, String), WrittenViolations>,
    rules: rules::RuleChecks,
    unattributed: Unattributed,
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
        events: LogSender,
    ) -> Result<Self, Error> {
        let backend = backend_for(settings.provider);
        // AuthorizationPolicies are watched for the Istio backend only: the chart grants
        // access to them only then, and a watch refused with 403 kept the caches of a Cilium
        // or Calico leader from ever syncing where Istio's CRD happened to be installed.
        let istio = backend == Backend::Istio;
        let served = istio
            && state::authorization_policies_served(&client)
                .await
                .map_err(Error::Discovery)?;
        if istio && !served {
            tracing::warn!(
                "the AuthorizationPolicy CRD (security.istio.io/v1) is not served: Istio policies \
                 will report AuthorizationPolicyUnavailable"
            );
        }
        let (stores, reflectors) = Stores::start(&client, served);
        tracing::info!("waiting for the cluster caches");
        stores.ready().await.map_err(Error::CacheStopped)?;
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
        metrics
            .pod_history_capacity
            .set(i64::try_from(settings.pod_history_max).unwrap_or(i64::MAX));
        let writer = Writer::new(
            client,
            &settings.identity,
            Budget::new(settings.writes_per_second, settings.write_burst),
            metrics.clone(),
            ViolationEvents::new(settings.provider, events.clone()),
        );
        let history =
            history::PodHistory::new(settings.pod_history_retention, settings.pod_history_max);
        Ok(Controller {
            stores,
            writer,
            unattributed: Unattributed::new(settings.provider, events),
            settings,
            config,
            metrics,
            written: HashMap::new(),
            rules: rules::RuleChecks::default(),
            resolver: None,
            history,
            _reflectors: reflectors,
        })
    }

    /// One round, as a pipeline of stages that each hand data to the next: the cluster as
    /// the resolver sees it → learn (proposals from the merged edges) → detect (the round's
    /// traffic as observations of the policies) → check the policies' rules → plan → write.
    /// A failed write is counted and planned again next round; the round itself cannot
    /// fail.
    pub async fn round(&mut self, learning: &mut Learning, leader: &dyn Leadership) -> Round {
        let started = Instant::now();
        let cluster = self.cluster_view();
        let changed = self.learn(learning, &cluster);
        let learned = learning.learned();
        let mut policies = owned(&self.stores.policies);
        overlay(&mut policies, &mut self.written);
        let detected = self.detect(learning.traffic(), &policies, &cluster.snapshot);
        let rule_issues = self
            .rules
            .check(&policies, &cluster.snapshot, cluster.generation);
        let proposals = owned(&self.stores.proposals);
        let safety = safety::facts(
            &policies,
            proposals.iter().chain(learned.proposals()),
            &cluster.snapshot,
            learned.allow_lists(),
            self.settings.host_traffic,
        );
        let plan = self.plan(learned, &policies, &detected, &rule_issues, &safety);
        let outcome = self.write(plan, leader).await;
        self.resolver = Some(cluster);
        self.metrics
            .reconcile_duration
            .get_or_create(&ControllerLabel {
                controller: "proposals",
            })
            .observe(started.elapsed().as_secs_f64());
        Round { changed, outcome }
    }

    /// The resolver of the cluster's current state and its recent past: the last round's,
    /// with the objects changed since applied to it (a change costs what it touches, see
    /// BENCHMARKS.md "snapshot"), or built again from the stores when they were listed
    /// again. Pods the cluster no longer lists join the history.
    fn cluster_view(&mut self) -> ClusterView {
        // The generation first: a change noted after it is applied now and again next round.
        let generation = self.stores.resolver_generation();
        let now = Timestamp::now();
        let view = match self.resolver.take() {
            Some(cached) if cached.generation == generation => cached,
            Some(mut cached) => match self.stores.changes() {
                Some(changes) => {
                    let gone = cached.snapshot.apply(changes, now);
                    self.remember(gone, now, &mut cached.snapshot);
                    cached.generation = generation;
                    cached
                }
                None => self.rebuild(Some(cached), generation, now),
            },
            None => self.rebuild(None, generation, now),
        };
        self.metrics
            .objects_skipped
            .set(i64::try_from(view.snapshot.skipped()).unwrap_or(i64::MAX));
        view
    }

    /// The resolver built from every cached object and the history; pods `previous` held
    /// alive that the stores no longer list join the history.
    fn rebuild(
        &mut self,
        previous: Option<ClusterView>,
        generation: u64,
        now: Timestamp,
    ) -> ClusterView {
        let mut snapshot = self.stores.snapshot(self.history.pods());
        if let Some(previous) = previous {
            let gone = previous.snapshot.gone_since(&snapshot, now);
            snapshot.add_gone(&gone);
            self.remember(gone, now, &mut snapshot);
        }
        ClusterView {
            generation,
            snapshot,
        }
    }

    /// Adds pods found gone to the history, forgets in `snapshot` those the history
    /// forgot, and exports its size.
    fn remember(&mut self, gone: Vec<GonePod>, now: Timestamp, snapshot: &mut ClusterSnapshot) {
        if !gone.is_empty() {
            tracing::debug!(pods = gone.len(), "pods gone; kept for attribution");
        }
        let evicted = self.history.record(gone, now);
        for (why, _) in &evicted {
            self.metrics
                .pod_history_evicted
                .get_or_create(&ReasonLabel {
                    reason: why.as_str(),
                })
                .inc();
        }
        snapshot.forget(evicted.iter().map(|(_, pod)| pod));
        let m = &self.metrics;
        m.pod_history
            .set(i64::try_from(self.history.len()).unwrap_or(i64::MAX));
        m.pod_history_bytes
            .set(i64::try_from(self.history.bytes()).unwrap_or(i64::MAX));
    }

    /// Learning: the edges changed since the last round (every edge after the cluster
    /// changed), resolved against the cluster, into the proposals; what could not be
    /// resolved or expressed is exported as gauges. Whether anything learned changed.
    fn learn(&self, learning: &mut Learning, cluster: &ClusterView) -> bool {
        let changed = learning.learn(&cluster.snapshot, cluster.generation);
        if !changed {
            return false;
        }
        let learned = learning.learned();
        let summary = learned.counts();
        set_by_reason(
            &self.metrics.unresolved_subjects,
            summary
                .unresolved_subjects
                .iter()
                .map(|(why, t)| (why.as_str(), t.edges)),
        );
        set_by_reason(
            &self.metrics.unexpressible_peers,
            summary
                .unresolved_peers
                .iter()
                .map(|(why, t)| (why.as_str(), t.edges)),
        );
        for what in learned.unrendered() {
            tracing::warn!(allow_list = %what, "cannot render a proposal; the others are written");
        }
        true
    }

    /// Detection: the round's traffic as observations of the policies it concerns;
    /// unattributed denials are reported here.
    fn detect(
        &mut self,
        traffic: Traffic<'_>,
        policies: &[WorkloadNetworkPolicy],
        cluster: &ClusterSnapshot,
    ) -> Detected {
        let detected = detect::detect(traffic, policies, cluster, self.config.backend);
        for ((namespace, name), error) in &detected.errors {
            tracing::warn!(policy = %format!("{namespace}/{name}"), %error, "cannot check traffic against the policy");
        }
        self.unattributed
            .report(&detected.unattributed, &self.metrics);
        set_by_reason(
            &self.metrics.unchecked_peers,
            detected.unresolved_peers.iter().map(|(why, n)| (*why, *n)),
        );
        detected
    }

    /// Planning, against the caches (with the violation fields this replica wrote).
    fn plan(
        &self,
        learned: &Incremental,
        policies: &[WorkloadNetworkPolicy],
        detected: &Detected,
        rule_issues: &BTreeMap<(String, String), plan::RuleIssues>,
        safety: &safety::Safety,
    ) -> Plan {
        let workloads = self.stores.workloads();
        let proposals = owned(&self.stores.proposals);
        let network_policies = owned(&self.stores.network_policies);
        let authorization_policies = self.stores.authorization_policies.as_ref().map(owned);
        let now = now();
        let world = World {
            learned: learned.proposals(),
            workloads: &workloads,
            proposals: &proposals,
            policies,
            network_policies: &network_policies,
            authorization_policies: authorization_policies.as_deref(),
            observations: &detected.observations,
            rule_issues,
            safety,
            now: &now,
        };
        let plan = plan::plan(&world, &self.config);
        let unrendered = u64::try_from(learned.unrendered().count()).unwrap_or(u64::MAX);
        set_by_reason(
            &self.metrics.proposals_skipped,
            plan.skipped
                .iter()
                .map(|(reason, n)| (*reason, *n))
                .chain((unrendered > 0).then_some(("unrenderable", unrendered))),
        );
        plan
    }

    /// Writing, while this replica leads; remembers the violation fields written.
    async fn write(&mut self, plan: Plan, leader: &dyn Leadership) -> Outcome {
        let actions = plan.actions.len();
        let outcome = self.writer.execute(plan, leader).await;
        for w in self.writer.take_written() {
            self.written
                .insert((w.key.namespace.clone(), w.key.name.clone()), w);
        }
        if actions > 0 {
            tracing::info!(
                actions,
                written = outcome.written,
                deferred = outcome.deferred,
                failed = outcome.failed,
                "controller round"
            );
        }
        outcome
    }
}

/// What a round did.
#[derive(Debug)]
pub struct Round {
    /// Whether what was learned changed this round (the proposals `run --output` writes
    /// are the `Learning`'s).
    pub changed: bool,
    pub outcome: Outcome,
}

/// The resolver of one state of the cluster.
#[derive(Debug)]
struct ClusterView {
    /// The stores' generation it was built at.
    generation: u64,
    snapshot: ClusterSnapshot,
}

/// Sets a gauge family to exactly `values`, by reason (reasons not listed are removed).
fn set_by_reason(
    family: &prometheus_client::metrics::family::Family<
        ReasonLabel,
        prometheus_client::metrics::gauge::Gauge,
    >,
    values: impl IntoIterator<Item = (&'static str, u64)>,
) {
    family.clear();
    for (reason, n) in values {
        family
            .get_or_create(&ReasonLabel { reason })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Now, in whole seconds as the API server stores times: a condition written now compares
/// equal when read back.
fn now() -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// Puts the violation fields this replica wrote into `policies` whose cached version is
/// still the one they were computed from; forgets the writes the cache has caught up with
/// (or that a deleted or re-created policy made moot).
fn overlay(
    policies: &mut [WorkloadNetworkPolicy],
    written: &mut HashMap<(String, String), WrittenViolations>,
) {
    let mut keep = HashMap::new();
    for w in policies.iter_mut() {
        let key = (
            w.metadata.namespace.clone().unwrap_or_default(),
            w.metadata.name.clone().unwrap_or_default(),
        );
        let Some(mine) = written.remove(&key) else {
            continue;
        };
        if mine.key.uid != w.metadata.uid || mine.resource_version != w.metadata.resource_version {
            continue;
        }
        let status = w.status.get_or_insert_with(Default::default);
        let conditions = std::mem::take(&mut status.conditions);
        let observed_generation = status.observed_generation;
        *status = ne_crds::WorkloadNetworkPolicyStatus {
            conditions,
            observed_generation,
            ..mine.status.clone()
        };
        keep.insert(key, mine);
    }
    *written = keep;
}

#[cfg(test)]
mod tests;
