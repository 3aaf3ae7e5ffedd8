//! The Helm chart against a real API server: the project's control plane
//! (`tests/control-plane/up`, started on first use) or the cluster `NE_TEST_KUBECONFIG`
//! names. Rendered and installed with the real helm binary (`chart/helm.rs`).
//!
//! - Every object of every render (each provider × collector strategy, and the variants) is
//!   accepted by a server-side dry-run apply with strict field validation, and the server
//!   keeps every field the chart sets. The chart renders no Istio AuthorizationPolicy (the
//!   leader creates them), so only the Network Enforcer CRDs are installed first, and the
//!   prometheus-operator's (ServiceMonitor, PrometheusRule: the operator's own CRD files) for
//!   the render with monitoring on.
//! - The admission policy and its binding, applied for real, refuse a proposal whose promote
//!   label is not a mode, on create and on a label patch (how users promote), and let
//!   `monitor` and `protect` through.
//! - `helm install`, `helm upgrade` and `helm uninstall` of each provider: the workloads exist,
//!   the controller manager makes their ReplicaSets and Pods (Pending: no scheduler runs),
//!   the upgrade changes the leader Deployment, and the uninstall removes everything the
//!   release made, the ReplicaSets and Pods by garbage collection.
//! - The chart's RBAC is all the leader needs: the real `ne-leader`, with a token of the chart's
//!   leader ServiceAccount and the args of the chart's Deployment, leads, labels its pod,
//!   authenticates the real `ne-agent` (a token of the chart's agent ServiceAccount) and
//!   writes a proposal, a policy and a NetworkPolicy.
//! - Pod Security admission agrees with the chart's README: every pod meets `restricted` but
//!   the agent where it reads root-owned host files (uid 0, hostPath).
//! - The aggregated roles let a namespace `edit` user promote and acknowledge and a `view`
//!   user only read (SubjectAccessReviews).

#[path = "chart/helm.rs"]
mod chart_helm;
#[path = "chart/support.rs"]
mod chart_support;
mod cluster;

use std::collections::BTreeMap;
use std::path::Path;

use chart_helm::{COLLECTORS, PROVIDERS, RELEASE, helm, matrix_values, run, values_file};
use chart_support::{Case, NAMESPACE, describe};
use cluster::{TempNamespace, eventually};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Api, Client};
use ne_crds::{PROMOTE_LABEL, WorkloadNetworkPolicyProposal};
use serde_json::{Value, json};

/// The admission policies of every release apply cluster-wide, and a refusal names the one
/// policy that denied: the admission test, which checks that its own policy refuses, runs
/// alone (write); the installs, each with its own policy, together (read).
static CLUSTER_WIDE_POLICIES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// `helm template` of `values` as release `release` in `namespace`, parsed.
fn render(release: &str, namespace: &str, name: &str, values: &Value) -> Case {
    let manifests = chart_helm::template(release, namespace, name, values)
        .unwrap_or_else(|e| panic!("{name}: helm template failed:\n{e}"));
    Case::parse(name, &manifests, String::new())
}

/// A release name of its own (cluster-scoped objects are named `<release>-...`): the name of
/// the test's namespace, unique per run.
fn release_of(ns: &TempNamespace) -> String {
    ns.name.clone()
}

/// Which resource serves an object's kind, and whether it is namespaced, asked of the server
/// once per kind.
#[derive(Default)]
struct Kinds(BTreeMap<(String, String), (ApiResource, ApiCapabilities)>);

impl Kinds {
    async fn api(&mut self, client: &Client, object: &Value) -> (Api<DynamicObject>, Scope) {
        let api_version = object["apiVersion"].as_str().expect("apiVersion");
        let kind = object["kind"].as_str().expect("kind");
        let key = (api_version.to_owned(), kind.to_owned());
        if !self.0.contains_key(&key) {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let found = kube::discovery::pinned_kind(client, &gvk)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "the API server serves no {api_version} {kind} ({e}): {}",
                        describe(object)
                    )
                });
            self.0.insert(key.clone(), found);
        }
        let (resource, capabilities) = &self.0[&key];
        let api = match capabilities.scope {
            Scope::Namespaced => {
                let ns = object["metadata"]["namespace"].as_str().unwrap_or_else(|| {
                    panic!("{} is namespaced but has no namespace", describe(object))
                });
                Api::namespaced_with(client.clone(), ns, resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), resource),
        };
        (api, capabilities.scope.clone())
    }
}

/// Server-side apply of `object` (strict field validation: an unknown or duplicate field is
/// an error, not a warning), for real or as a dry run.
async fn apply(
    kinds: &mut Kinds,
    client: &Client,
    object: &Value,
    dry_run: bool,
) -> Result<DynamicObject, kube::Error> {
    let (api, _) = kinds.api(client, object).await;
    let mut params = PatchParams::apply("ne-chart-test")
        .force()
        .validation_strict();
    if dry_run {
        params = params.dry_run();
    }
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    api.patch(name, &params, &Patch::Apply(object)).await
}

/// The path of the first field `rendered` sets that `stored` lacks or holds differently
/// (the server may add defaults, never drop or change what the chart set).
fn dropped(rendered: &Value, stored: &Value, path: &str) -> Option<String> {
    match (rendered, stored) {
        (Value::Null, _) => None,
        (Value::Object(r), Value::Object(s)) => r.iter().find_map(|(k, v)| match s.get(k) {
            Some(sv) => dropped(v, sv, &format!("{path}.{k}")),
            None if v.is_null() => None,
            None => Some(format!("{path}.{k}")),
        }),
        (Value::Array(r), Value::Array(s)) if r.len() == s.len() => r
            .iter()
            .zip(s)
            .enumerate()
            .find_map(|(i, (rv, sv))| dropped(rv, sv, &format!("{path}[{i}]"))),
        _ => (rendered != stored).then(|| format!("{path}: {rendered} stored as {stored}")),
    }
}

/// Objects applied for real, deleted when dropped (also when the test fails).
struct Applied(Vec<(Api<DynamicObject>, String)>);

impl Drop for Applied {
    fn drop(&mut self) {
        let objects = std::mem::take(&mut self.0);
        cluster::in_drop(async move {
            for (api, name) in objects {
                let _ = api.delete(&name, &DeleteParams::background()).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_is_accepted_by_a_server_side_dry_run_apply() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    cluster::install_monitoring_crds(&client).await;
    // The release namespace exists before anything is applied into it.
    let ns = TempNamespace::new(&client, "ne-chart-dry-run").await;
    let cases = chart_helm::cases();
    for provider in PROVIDERS {
        for collector in COLLECTORS {
            let name = format!("{provider}-{collector}");
            assert!(
                cases.iter().any(|(n, _)| *n == name),
                "{name} is not rendered"
            );
        }
    }
    let mut kinds = Kinds::default();
    let mut refused = Vec::new();
    let mut accepted = 0;
    let mut applied = std::collections::BTreeSet::new();
    for (name, values) in &cases {
        let case = render(RELEASE, &ns.name, name, values);
        assert!(!case.objects.is_empty(), "{name}: nothing rendered");
        for object in &case.objects {
            let what = format!("{name}: {}", describe(object));
            let (_, scope) = kinds.api(&client, object).await;
            let namespace = object["metadata"]["namespace"].as_str();
            match scope {
                Scope::Namespaced => assert_eq!(namespace, Some(ns.name.as_str()), "{what}"),
                Scope::Cluster => assert_eq!(namespace, None, "{what}: cluster-scoped"),
            }
            match apply(&mut kinds, &client, object, true).await {
                Ok(stored) => {
                    let stored = serde_json::to_value(&stored).unwrap();
                    if let Some(path) = dropped(object, &stored, "") {
                        refused.push(format!("{what}: the server does not keep `{path}`"));
                    }
                    accepted += 1;
                    applied.insert(object["kind"].as_str().unwrap_or_default().to_owned());
                }
                Err(e) => refused.push(format!("{what}: {e}")),
            }
        }
    }
    assert!(
        refused.is_empty(),
        "the API server refuses or changes what the chart renders (fix the chart's \
         templates):\n{}",
        refused.join("\n")
    );
    assert!(
        accepted >= cases.len() * 15,
        "only {accepted} objects applied"
    );
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert!(applied.contains(kind), "no {kind} was applied");
    }
}

/// A valid proposal (the CRD's own test fixture) named `name`, with promote label `mode`.
fn proposal(ns: &str, name: &str, mode: Option<&str>) -> WorkloadNetworkPolicyProposal {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/testdata/wnpp-kubernetes.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut value: Value = serde_saphyr::from_str(&text).unwrap();
    value["metadata"] = json!({"name": name, "namespace": ns});
    if let Some(mode) = mode {
        value["metadata"]["labels"] = json!({PROMOTE_LABEL: mode});
    }
    value.as_object_mut().unwrap().remove("status");
    serde_json::from_value(value).unwrap()
}

fn promote_label(mode: &str) -> Value {
    json!({"metadata": {"labels": {PROMOTE_LABEL: mode}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_policy_refuses_a_promote_label_other_than_monitor_or_protect() {
    let _alone = CLUSTER_WIDE_POLICIES.write().await;
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-chart-admission").await;
    let release = release_of(&ns);
    let case = render(
        &release,
        &ns.name,
        "admission",
        &matrix_values("calico", "none"),
    );
    let policy = format!("{release}-promote-label");
    let mut kinds = Kinds::default();
    let mut applied = Applied(Vec::new());
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let object = case.get(kind, &policy);
        apply(&mut kinds, &client, object, false)
            .await
            .unwrap_or_else(|e| panic!("the API server refuses {kind} {policy}: {e}"));
        applied
            .0
            .push((kinds.api(&client, object).await.0, policy.clone()));
    }

    // The server type-checks the expression against the CRD's schema.
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let status = eventually("the API server type-checked the policy", || async {
        let p = policies.get(&policy).await.ok()?;
        let status = p.status?;
        (status.observed_generation.is_some()
            && status.observed_generation == p.metadata.generation)
            .then_some(status)
    })
    .await;
    let warnings = status
        .type_checking
        .and_then(|t| t.expression_warnings)
        .unwrap_or_default();
    assert!(
        warnings.is_empty(),
        "the policy's CEL does not type-check against the CRD (fix templates/admission.yaml): \
         {warnings:?}"
    );

    let proposals: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), &ns.name);
    // Refused by this release's policy, as Invalid (422), with the policy's message.
    let refused_by_policy =
        |result: Result<WorkloadNetworkPolicyProposal, kube::Error>| match result {
            Err(kube::Error::Api(status)) if status.message.contains(&policy) => Some(status),
            _ => None,
        };
    // The binding takes effect a moment after it is created: until then a dry run passes.
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let refusal = eventually(
        "the policy's binding in effect (a proposal labelled enforce refused)",
        || async {
            refused_by_policy(
                proposals
                    .create(&dry_run, &proposal(&ns.name, "probe", Some("enforce")))
                    .await,
            )
        },
    )
    .await;
    assert_eq!(
        (refusal.code, refusal.reason.as_str()),
        (422, "Invalid"),
        "{refusal:?}"
    );
    assert!(
        refusal.message.contains("must be monitor or protect"),
        "{}",
        refusal.message
    );

    // Created with a label.
    for bad in ["enforce", "Monitor", "", "true"] {
        let result = proposals
            .create(
                &PostParams::default(),
                &proposal(&ns.name, "bad", Some(bad)),
            )
            .await;
        assert!(
            refused_by_policy(result).is_some(),
            "a proposal labelled {PROMOTE_LABEL}={bad:?} is not refused by {policy}"
        );
    }
    for mode in ["monitor", "protect"] {
        let name = format!("created-{mode}");
        let created = proposals
            .create(
                &PostParams::default(),
                &proposal(&ns.name, &name, Some(mode)),
            )
            .await
            .unwrap_or_else(|e| {
                panic!("a proposal labelled {PROMOTE_LABEL}={mode} is refused: {e}")
            });
        assert_eq!(
            created
                .metadata
                .labels
                .unwrap_or_default()
                .get(PROMOTE_LABEL)
                .map(String::as_str),
            Some(mode)
        );
    }
    // Promoted as users do, by labelling an existing proposal (an UPDATE).
    proposals
        .create(
            &PostParams::default(),
            &proposal(&ns.name, "labelled-later", None),
        )
        .await
        .expect("a proposal without the label is accepted");
    let label = |mode: &'static str| {
        let proposals = proposals.clone();
        async move {
            proposals
                .patch(
                    "labelled-later",
                    &PatchParams::default(),
                    &Patch::Merge(&promote_label(mode)),
                )
                .await
        }
    };
    assert!(
        refused_by_policy(label("enforce").await).is_some(),
        "labelling a proposal {PROMOTE_LABEL}=enforce is not refused by {policy}"
    );
    for mode in ["monitor", "protect"] {
        let patched = label(mode).await.unwrap_or_else(|e| {
            panic!("labelling a proposal {PROMOTE_LABEL}={mode} is refused: {e}")
        });
        assert_eq!(
            patched
                .metadata
                .labels
                .unwrap_or_default()
                .get(PROMOTE_LABEL)
                .map(String::as_str),
            Some(mode)
        );
    }
}

/// A Node object with no kubelet behind it, so that a DaemonSet has a node to make a pod
/// for (the pod stays Pending: no scheduler binds it); deleted when dropped.
struct TempNode {
    api: Api<Node>,
    name: String,
}

impl TempNode {
    async fn new(client: &Client, name: &str) -> Self {
        let api: Api<Node> = Api::all(client.clone());
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        api.create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("cannot create node {name}: {e}"));
        TempNode {
            api,
            name: name.to_owned(),
        }
    }
}

impl Drop for TempNode {
    fn drop(&mut self) {
        let (api, name) = (self.api.clone(), self.name.clone());
        cluster::in_drop(async move {
            let _ = api.delete(&name, &DeleteParams::default()).await;
        });
    }
}

/// A release of the chart in a namespace of the test's, uninstalled when dropped unless the
/// test did (so no cluster-scoped object outlives a failed test).
struct Release {
    name: String,
    namespace: String,
    uninstalled: bool,
}

impl Release {
    /// `helm VERB <release> -n <namespace> --kubeconfig <the cluster under test>`.
    fn helm(&self, verb: &str) -> std::process::Command {
        let mut command = helm();
        command
            .arg(verb)
            .arg(&self.name)
            .args(["-n", &self.namespace, "--kubeconfig"])
            .arg(cluster::kubeconfig());
        command
    }

    /// `helm install` or `helm upgrade` of the chart with `values`; no `--wait` (no pod
    /// of this control plane ever gets ready): the test waits on the objects instead.
    fn deploy(&self, verb: &str, values: &Value) {
        let file = values_file(&format!("{}-{verb}", self.name), values);
        run(self
            .helm(verb)
            .arg(chart_helm::chart_dir())
            .arg("-f")
            .arg(&file))
        .unwrap_or_else(|e| panic!("helm {verb} {} failed:\n{e}", self.name));
    }

    /// `helm status -o json`: the release's revision and state.
    fn status(&self) -> (i64, String) {
        let out = run(self.helm("status").args(["-o", "json"]))
            .unwrap_or_else(|e| panic!("helm status {} failed:\n{e}", self.name));
        let status: Value = serde_json::from_str(&out).unwrap();
        (
            status["version"].as_i64().unwrap_or_default(),
            status["info"]["status"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    }

    fn uninstall(&mut self) {
        run(&mut self.helm("uninstall"))
            .unwrap_or_else(|e| panic!("helm uninstall {} failed:\n{e}", self.name));
        self.uninstalled = true;
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if !self.uninstalled {
            let _ = run(self.helm("uninstall").arg("--ignore-not-found"));
        }
    }
}

/// Whether `meta` names the object of uid `uid` as its controller.
fn controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// The Pods whose controller is the object of uid `owner` (`None` if the list failed).
async fn pods_of(pods: &Api<Pod>, owner: &str) -> Option<Vec<Pod>> {
    let list = pods.list(&ListParams::default()).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|p| controlled_by(&p.metadata, owner))
            .collect(),
    )
}

/// Unscheduled: no node is bound, nothing runs.
fn pending(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending")
        && pod.spec.as_ref().is_some_and(|s| s.node_name.is_none())
}

/// Waits until the controller manager has made a ReplicaSet of Deployment `name` (owned by
/// it) that `matches`, with at least `min_pods` Pods (owned by the ReplicaSet, Pending).
async fn replica_set_of(
    client: &Client,
    ns: &str,
    name: &str,
    matches: impl Fn(&ReplicaSet) -> bool,
    min_pods: usize,
) -> (ReplicaSet, Vec<Pod>) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deployment = deployments
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("no Deployment {ns}/{name}: {e}"));
    let uid = deployment.metadata.uid.unwrap();
    let (rs, pods) = eventually(
        &format!("a ReplicaSet of Deployment {ns}/{name} with {min_pods} Pods"),
        || async {
            let list = replica_sets.list(&ListParams::default()).await.ok()?;
            for rs in list.items {
                if controlled_by(&rs.metadata, &uid) && matches(&rs) {
                    let owned = pods_of(&pods, rs.metadata.uid.as_deref()?).await?;
                    if owned.len() >= min_pods {
                        return Some((rs, owned));
                    }
                }
            }
            None
        },
    )
    .await;
    for pod in &pods {
        assert!(pending(pod), "{name}: {:?}", pod.status);
    }
    (rs, pods)
}

/// The containers' args of a ReplicaSet's pod template.
fn template_args(rs: &ReplicaSet) -> Vec<String> {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .and_then(|t| t.spec.as_ref())
        .map(|s| {
            s.containers
                .iter()
                .flat_map(|c| c.args.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The one DaemonSet pod for `node`: owned by the DaemonSet, with the node affinity the
/// DaemonSet controller gives it, Pending.
async fn daemon_pod(client: &Client, ns: &str, name: &str, node: &str) -> Pod {
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let ds = daemon_sets
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("no DaemonSet {ns}/{name}: {e}"));
    let uid = ds.metadata.uid.unwrap();
    let for_node = |pod: &Pod| {
        let affinity = serde_json::to_value(pod.spec.as_ref().map(|s| &s.affinity)).unwrap();
        affinity.to_string().contains(&format!("\"{node}\""))
    };
    let pod = eventually(
        &format!("the pod of DaemonSet {ns}/{name} for node {node}"),
        || async { pods_of(&pods, &uid).await?.into_iter().find(for_node) },
    )
    .await;
    assert!(pending(&pod), "{name}: {:?}", pod.status);
    pod
}

async fn install_upgrade_uninstall(provider: &str) {
    let _with_other_installs = CLUSTER_WIDE_POLICIES.read().await;
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TempNamespace::new(&client, &format!("ne-helm-{provider}")).await;
    let mut release = Release {
        name: release_of(&ns),
        namespace: ns.name.clone(),
        uninstalled: false,
    };
    let node = TempNode::new(&client, &format!("{}-node", release.name)).await;
    let (ns, name) = (ns.name.as_str(), release.name.clone());
    let leader = format!("{name}-leader");
    let agent = format!("{name}-agent");
    let collector = format!("{name}-otel-collector");

    // Install (the default collector too).
    release.deploy("install", &json!({"provider": provider}));
    assert_eq!(release.status(), (1, "deployed".to_owned()));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let installed = deployments
        .get(&leader)
        .await
        .expect("the leader Deployment");
    let labels = installed.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("Helm")
    );
    let annotations = installed.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("meta.helm.sh/release-name"), Some(&name));
    let (leader_rs, leader_pods) = replica_set_of(&client, ns, &leader, |_| true, 2).await;
    assert_eq!(leader_pods.len(), 2, "leader.replicas is 2");
    let first_template =
        leader_rs.metadata.labels.clone().unwrap_or_default()["pod-template-hash"].clone();
    if provider == "calico" {
        let (_, agent_pods) = replica_set_of(&client, ns, &agent, |_| true, 1).await;
        assert_eq!(agent_pods.len(), 1, "one Goldmane reader");
    } else {
        daemon_pod(&client, ns, &agent, &node.name).await;
    }
    replica_set_of(&client, ns, &collector, |_| true, 1).await;

    // Upgrade: one more leader replica and another flush interval.
    release.deploy(
        "upgrade",
        &json!({"provider": provider, "leader": {"replicas": 3, "flushInterval": "2s"}}),
    );
    assert_eq!(release.status(), (2, "deployed".to_owned()));
    let upgraded = deployments
        .get(&leader)
        .await
        .expect("the leader Deployment");
    let spec = upgraded.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    let args = spec.template.spec.as_ref().unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--flush-interval=2s".to_owned()), "{args:?}");
    // A new template: the controller manager starts a ReplicaSet of it (the old pods never
    // get ready here, so the rollout itself goes no further than its surge).
    let (new_rs, _) = replica_set_of(
        &client,
        ns,
        &leader,
        |rs| template_args(rs).contains(&"--flush-interval=2s".to_owned()),
        1,
    )
    .await;
    assert_ne!(
        new_rs.metadata.labels.unwrap_or_default()["pod-template-hash"],
        first_template
    );

    // Uninstall: helm deletes what it made; the garbage collector the ReplicaSets and Pods.
    release.uninstall();
    let selector = format!("app.kubernetes.io/instance={name}");
    let by_release = ListParams::default().labels(&selector);
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut kinds = Kinds::default();
    let case = render(&name, ns, provider, &json!({"provider": provider}));
    let mut apis = Vec::new();
    for object in &case.objects {
        let (api, _) = kinds.api(&client, object).await;
        apis.push((api, object["metadata"]["name"].as_str().unwrap().to_owned()));
    }
    eventually(
        &format!(
            "every object of release {name} gone after helm uninstall (what helm made, and the \
             ReplicaSets and Pods, by garbage collection)"
        ),
        || async {
            for (api, object) in &apis {
                if api.get_opt(object).await.ok()?.is_some() {
                    return None;
                }
            }
            let none = deployments.list(&by_release).await.ok()?.items.is_empty()
                && daemon_sets.list(&by_release).await.ok()?.items.is_empty()
                && replica_sets.list(&by_release).await.ok()?.items.is_empty()
                && pods.list(&by_release).await.ok()?.items.is_empty();
            none.then_some(())
        },
    )
    .await;
    // The CRDs stay (Helm never deletes crds/), and with them the proposals and policies.
    cluster::established(
        &client,
        "workloadnetworkpolicyproposals.networkenforcer.kubewarden.io",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_uninstall_cilium() {
    install_upgrade_uninstall("cilium").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_uninstall_calico() {
    install_upgrade_uninstall("calico").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_install_upgrade_uninstall_istio() {
    install_upgrade_uninstall("istio").await;
}

/// Against a real API server: the chart's ClusterRoles, aggregated by the cluster into the
/// built-in `view` and `edit` roles, let a namespace `edit` user promote a proposal (patch),
/// change and acknowledge a policy (patch) and delete it, and a `view` user only read.
/// Answered by SubjectAccessReviews for ServiceAccounts bound in a temporary namespace.
/// Whether ServiceAccount `ns/name` may `verb` `resource` of API `group` in `ns`, as a
/// SubjectAccessReview answers (with the groups every ServiceAccount token carries).
async fn service_account_may(
    client: &Client,
    ns: &str,
    name: &str,
    verb: &str,
    group: &str,
    resource: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{ns}:{name}")),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = reviews
        .create(&kube::api::PostParams::default(), &review)
        .await
        .unwrap_or_else(|e| panic!("SubjectAccessReview for {ns}/{name}: {e}"));
    answer.status.is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_edit_users_promote_and_acknowledge_and_view_users_only_read() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    /// Deletes the ClusterRoles the test applied, whatever happens.
    struct Installed(Api<ClusterRole>, Vec<&'static str>);
    impl Drop for Installed {
        fn drop(&mut self) {
            let (api, names) = (self.0.clone(), std::mem::take(&mut self.1));
            cluster::in_drop(async move {
                for name in names {
                    let _ = api.delete(name, &DeleteParams::default()).await;
                }
            });
        }
    }

    let client = cluster::client().await;
    let case = render(
        RELEASE,
        NAMESPACE,
        "cilium-none",
        &matrix_values("cilium", "none"),
    );
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let mut installed = Installed(roles.clone(), Vec::new());
    for name in ["ne-view", "ne-edit"] {
        let role: ClusterRole =
            serde_json::from_value(case.get("ClusterRole", name).clone()).unwrap();
        roles
            .patch(
                name,
                &PatchParams::apply("ne-e2e").force(),
                &Patch::Apply(&role),
            )
            .await
            .unwrap();
        installed.1.push(name);
    }
    let ns = cluster::TempNamespace::new(&client, "ne-e2e-rbac").await;
    let ns_name = ns.name.clone();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns_name);
    for (user, role) in [("editor", "edit"), ("viewer", "view")] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": ns_name}],
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let allowed = |user: &'static str, verb: &'static str, resource: &'static str| {
        let (client, ns_name) = (client.clone(), ns_name.clone());
        async move { service_account_may(&client, &ns_name, user, verb, ne_crds::GROUP, resource).await }
    };
    let (wnpp, wnp) = ("workloadnetworkpolicyproposals", "workloadnetworkpolicies");
    // Aggregation is asynchronous (the cluster-role aggregation controller): poll.
    cluster::eventually(
        "the chart's roles aggregated into the built-in edit and view roles",
        || async {
            (allowed("editor", "patch", wnpp).await && allowed("viewer", "list", wnp).await)
                .then_some(())
        },
    )
    .await;
    for (verb, resource) in [
        ("get", wnpp),
        ("list", wnpp),
        ("patch", wnpp),
        ("get", wnp),
        ("patch", wnp),
        ("delete", wnp),
    ] {
        assert!(
            allowed("editor", verb, resource).await,
            "editor {verb} {resource}"
        );
    }
    for (verb, resource) in [("get", wnpp), ("list", wnpp), ("watch", wnp), ("get", wnp)] {
        assert!(
            allowed("viewer", verb, resource).await,
            "viewer {verb} {resource}"
        );
    }
    for (verb, resource) in [
        ("patch", wnpp),
        ("update", wnpp),
        ("patch", wnp),
        ("delete", wnp),
        ("create", wnp),
    ] {
        assert!(
            !allowed("viewer", verb, resource).await,
            "viewer may not {verb} {resource}"
        );
    }
    // Only the leader creates proposals.
    assert!(!allowed("editor", "create", wnpp).await);
}

/// A token of ServiceAccount `ns/name` (TokenRequest), for `audience` (else the API server's).
async fn token(client: &Client, ns: &str, name: &str, audience: Option<&str>) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.map(|a| vec![a.to_owned()]).unwrap_or_default(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    api.create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("no token for ServiceAccount {ns}/{name}: {e}"))
        .status
        .expect("the token")
        .token
}

/// A kubeconfig (JSON, which is YAML) of the cluster under test whose only user is `token`.
fn kubeconfig_of(token: &str, file: &Path) {
    let path = cluster::kubeconfig();
    let text = std::fs::read_to_string(path).unwrap();
    let admin: Value =
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let current = admin["current-context"].as_str().expect("current-context");
    let context = admin["contexts"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == current))
        .expect("the current context");
    let cluster = admin["clusters"]
        .as_array()
        .and_then(|c| {
            c.iter()
                .find(|c| c["name"] == context["context"]["cluster"])
        })
        .expect("the current context's cluster");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": cluster["name"], "user": "token"}}],
        "current-context": "token",
    });
    std::fs::write(file, config.to_string()).unwrap();
}

/// A container of the cluster's copy of a workload, to run out of the cluster as the pod
/// `pod` would: its args with `$(VAR)` expanded and its environment (downward API fields of
/// the pod resolved; `spec.nodeName` is `worker-1`, as no pod here is bound), the flags in
/// `replace` given other values.
fn as_pod_would(
    container: &k8s_openapi::api::core::v1::Container,
    pod: &Pod,
    replace: &[(&str, String)],
) -> (Vec<String>, Vec<(String, String)>) {
    let field = |path: &str| match path {
        "metadata.name" => pod.metadata.name.clone().unwrap(),
        "metadata.namespace" => pod.metadata.namespace.clone().unwrap(),
        "spec.nodeName" => "worker-1".to_owned(),
        other => panic!("no value for the downward API field {other}"),
    };
    let env: Vec<(String, String)> = container
        .env
        .iter()
        .flatten()
        .map(|e| {
            let value = match (&e.value, &e.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(from)) => {
                    field(&from.field_ref.as_ref().expect("a fieldRef").field_path)
                }
                (None, None) => String::new(),
            };
            (e.name.clone(), value)
        })
        .collect();
    let args = container
        .args
        .iter()
        .flatten()
        .map(|arg| {
            let mut arg = arg.clone();
            for (name, value) in &env {
                arg = arg.replace(&format!("$({name})"), value);
            }
            for (flag, value) in replace {
                if arg.starts_with(&format!("{flag}=")) {
                    arg = format!("{flag}={value}");
                }
            }
            arg
        })
        .collect();
    (args, env)
}

/// The chart's RBAC is all the leader needs. The real `ne-leader`, run out of the cluster with
/// a token of the chart's leader ServiceAccount and the args and environment of the chart's
/// Deployment as one of its (Pending) pods, takes the chart's Lease, labels that pod for the
/// leader-only Service, accepts the real `ne-agent`'s stream (TokenReview of a token of the
/// chart's agent ServiceAccount, with the audience of the agent's projected volume), learns a
/// proposal for a Deployment of the cluster, and turns it, promoted to protect, into a
/// NetworkPolicy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_learns_and_protects_with_only_the_charts_rbac() {
    use cluster::hubble::{Hubble, Side, tcp_flow};

    let _with_other_installs = CLUSTER_WIDE_POLICIES.read().await;
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let system = TempNamespace::new(&client, "ne-helm-rbac").await;
    let app = TempNamespace::new(&client, "ne-chart-app").await;
    let release = Release {
        name: release_of(&system),
        namespace: system.name.clone(),
        uninstalled: false,
    };
    let (ns, name) = (system.name.as_str(), release.name.as_str());
    release.deploy(
        "install",
        &json!({"provider": "cilium", "telemetry": {"collector": "none"}}),
    );
    let leader_name = format!("{name}-leader");
    let (_, leader_pods) = replica_set_of(&client, ns, &leader_name, |_| true, 2).await;
    let pod = &leader_pods[0];
    let pod_name = pod.metadata.name.clone().unwrap();
    let (api_ip, web_ip) = ("10.250.1.21", "10.250.1.11");
    let (api, api_pod) = cluster::deployment(&client, &app.name, "api", "api", api_ip).await;
    let (_, web_pod) = cluster::deployment(&client, &app.name, "web", "web", web_ip).await;

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-rbac-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("hubble.sock");
    let hubble = Hubble::serve(&socket);
    let web = Side {
        namespace: &app.name,
        pod: &web_pod,
        ip: web_ip,
        app: "web",
        deployment: Some("web"),
    };
    let api_side = Side {
        namespace: &app.name,
        pod: &api_pod,
        ip: api_ip,
        app: "api",
        deployment: None,
    };
    hubble.add_json(&tcp_flow(&web, &api_side, 8080));

    // The leader, as the chart deploys it (on loopback instead of every address).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments.get(&leader_name).await.unwrap();
    let pod_spec = deployment.spec.unwrap().template.spec.unwrap();
    let leader_sa = pod_spec
        .service_account_name
        .clone()
        .expect("a ServiceAccount");
    let ingest = cluster::free_address();
    let (args, env) = as_pod_would(
        &pod_spec.containers[0],
        pod,
        &[
            ("--ingest-address", ingest.clone()),
            ("--metrics-address", "127.0.0.1:0".to_owned()),
        ],
    );
    let leader_kubeconfig = dir.join("leader.kubeconfig");
    kubeconfig_of(
        &token(&client, ns, &leader_sa, None).await,
        &leader_kubeconfig,
    );
    let mut command = std::process::Command::new(cluster::binary("ne-leader"));
    command
        .args(&args)
        .envs(env)
        .env("KUBECONFIG", &leader_kubeconfig)
        .env("RUST_LOG", "info");
    let leader = cluster::Process::spawn(&format!("chart-leader-{name}"), command);

    // The agent, as the chart's DaemonSet runs it, with a token of its ServiceAccount.
    let daemon_sets: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let agent_spec = daemon_sets
        .get(&format!("{name}-agent"))
        .await
        .unwrap()
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let agent_sa = agent_spec
        .service_account_name
        .clone()
        .expect("a ServiceAccount");
    let audience = agent_spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .find_map(|s| s.service_account_token.as_ref())
        .and_then(|t| t.audience.clone())
        .expect("the agent's projected token has an audience");
    let token_file = dir.join("agent.token");
    std::fs::write(
        &token_file,
        token(&client, ns, &agent_sa, Some(&audience)).await,
    )
    .unwrap();
    let (args, env) = as_pod_would(
        &agent_spec.containers[0],
        pod,
        &[
            ("--hubble-address", format!("unix://{}", socket.display())),
            ("--leader-address", ingest.clone()),
            ("--leader-token-file", token_file.display().to_string()),
            ("--metrics-address", "127.0.0.1:0".to_owned()),
        ],
    );
    let mut command = std::process::Command::new(cluster::binary("ne-agent"));
    command.args(&args).envs(env).env("RUST_LOG", "info");
    let _agent = cluster::Process::spawn(&format!("chart-agent-{name}"), command);

    // The Lease, held for the pod; the pod labelled for the leader-only Service.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), ns);
    eventually(
        &format!("Lease {ns}/{leader_name} held by {pod_name}"),
        || async {
            let lease = leases.get_opt(&leader_name).await.ok()??;
            (lease.spec?.holder_identity? == pod_name).then_some(())
        },
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(
        &format!("pod {pod_name} labelled as the leader"),
        || async {
            let labels = pods.get(&pod_name).await.ok()?.metadata.labels?;
            (labels.get(chart_support::LEADER_POD_LABEL)? == "true").then_some(())
        },
    )
    .await;

    // Learned from the agent's stream, owned by the workload.
    let proposals: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), &app.name);
    let proposal = "deployment-api-ingress";
    let api_uid = api.metadata.uid.clone().unwrap();
    cluster::learned(&proposals, proposal, &api_uid).await;

    // Promoted to protect: a policy, and the NetworkPolicy it owns.
    proposals
        .patch(
            proposal,
            &PatchParams::default(),
            &Patch::Merge(&promote_label("protect")),
        )
        .await
        .expect("promoting the proposal");
    let policies: Api<ne_crds::WorkloadNetworkPolicy> = Api::namespaced(client.clone(), &app.name);
    let policy = eventually(&format!("policy {proposal}"), || async {
        policies.get_opt(proposal).await.ok()?
    })
    .await;
    assert_eq!(policy.spec.mode, ne_crds::Mode::Protect);
    let natives: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(client.clone(), &app.name);
    let policy_uid = policy.metadata.uid.clone().unwrap();
    eventually(
        &format!("NetworkPolicy {proposal}, owned by the policy"),
        || async {
            let native = natives.get_opt(proposal).await.ok()??;
            controlled_by(&native.metadata, &policy_uid).then_some(())
        },
    )
    .await;
    // Back to monitor: the NetworkPolicy goes; traffic outside the policy is recorded.
    policies
        .patch(
            proposal,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"mode": "monitor"}})),
        )
        .await
        .expect("switching to monitor");
    eventually(&format!("NetworkPolicy {proposal} deleted"), || async {
        natives
            .get_opt(proposal)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    hubble.add_json(&tcp_flow(&web, &api_side, 7070));
    eventually("a violation record of port 7070", || async {
        let status = policies.get(proposal).await.ok()?.status?;
        status
            .violations
            .iter()
            .any(|r| r.port == 7070)
            .then_some(())
    })
    .await;

    // Deleted: learning starts a new proposal (none exists while the policy does).
    assert!(proposals.get_opt(proposal).await.unwrap().is_none());
    policies
        .delete(proposal, &DeleteParams::default())
        .await
        .expect("deleting the policy");
    eventually(&format!("a new proposal {proposal}"), || async {
        proposals.get_opt(proposal).await.ok()?.map(|_| ())
    })
    .await;

    // Every call the leader made was permitted: no watch, read or write was refused.
    let output = leader.output();
    assert!(
        !output.contains("Forbidden") && !output.contains("forbidden"),
        "the chart's RBAC refused the leader something:\n{output}"
    );

    // The agent's ServiceAccount may do nothing with the API.
    let attempts = [
        ("get", "", "pods"),
        ("list", "", "pods"),
        ("watch", "", "nodes"),
        ("get", "", "secrets"),
        ("get", "coordination.k8s.io", "leases"),
        ("create", "authentication.k8s.io", "tokenreviews"),
        (
            "list",
            "networkenforcer.kubewarden.io",
            "workloadnetworkpolicyproposals",
        ),
        (
            "patch",
            "networkenforcer.kubewarden.io",
            "workloadnetworkpolicies",
        ),
        ("create", "networking.k8s.io", "networkpolicies"),
    ];
    for (verb, group, resource) in attempts {
        assert!(
            !service_account_may(&client, ns, &agent_sa, verb, group, resource).await,
            "the agent's ServiceAccount may {verb} {resource} ({group})"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the chart's README says of the security context is what Pod Security admission
/// finds: in a namespace enforcing the `restricted` standard, a pod of every workload of
/// every render is admitted (a dry run), except the agent where it must run as uid 0 with a
/// hostPath (Cilium's node socket, Istio's pod logs), which `restricted` refuses for those
/// two reasons.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_meet_the_restricted_pod_security_standard_but_the_root_agents() {
    let client = cluster::client().await;
    let ns = TempNamespace::new(&client, "ne-chart-psa").await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let enforce = json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    namespaces
        .patch(&ns.name, &PatchParams::default(), &Patch::Merge(&enforce))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut kinds = Kinds::default();
    let mut wrong = Vec::new();
    let (mut admitted, mut refused, mut root_agents) = (0, 0, 0);
    let cases = chart_helm::cases();
    for (name, values) in &cases {
        let case = render(RELEASE, &ns.name, name, values);
        // The ServiceAccount admission refuses pods of a missing ServiceAccount.
        for account in case
            .objects
            .iter()
            .filter(|o| o["kind"] == "ServiceAccount")
        {
            apply(&mut kinds, &client, account, false)
                .await
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", describe(account)));
        }
        let provider = values["provider"].as_str().unwrap();
        let socket = values.pointer("/agent/hubble/mode").and_then(Value::as_str) != Some("relay");
        let root_agent = provider == "istio" || (provider == "cilium" && socket);
        root_agents += usize::from(root_agent);
        for workload in case
            .objects
            .iter()
            .filter(|o| matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet")))
        {
            let workload_name = workload["metadata"]["name"].as_str().unwrap();
            let template = &workload["spec"]["template"];
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-{workload_name}"), "labels": template["metadata"]["labels"]},
                "spec": template["spec"],
            }))
            .unwrap();
            let what = format!("{name}: {}", describe(workload));
            let root = root_agent && workload_name == "ne-agent";
            match (pods.create(&dry_run, &pod).await, root) {
                (Ok(_), false) => admitted += 1,
                (Err(kube::Error::Api(status)), true)
                    if status.message.contains("hostPath")
                        && status.message.contains("runAsUser=0") =>
                {
                    refused += 1
                }
                (result, root) => wrong.push(format!(
                    "{what}: {} by `restricted` ({})",
                    if root {
                        "expected refused for hostPath and runAsUser=0"
                    } else {
                        "refused"
                    },
                    match result {
                        Ok(_) => "admitted".to_owned(),
                        Err(e) => e.to_string(),
                    }
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "Pod Security admission disagrees with the chart's README (fix the templates' \
         securityContext, or the README):\n{}",
        wrong.join("\n")
    );
    // Every leader and non-root agent admitted (and the collectors), every root agent refused.
    assert!(
        admitted >= cases.len() * 2 - root_agents,
        "only {admitted} pods admitted"
    );
    assert_eq!(refused, root_agents);
}
