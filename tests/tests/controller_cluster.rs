//! The controller end to end against a real API server: the real `ne-leader` (out of
//! cluster, with the test cluster's kubeconfig) and a real `ne-agent` fed by a test data
//! plane (a Hubble server; ztunnel log files), on workloads the test creates itself (Deployments whose
//! controllers make the ReplicaSets and Pods; the pods are kept unscheduled and get a
//! patched `status.podIP`, so a control plane without nodes is enough). Each test walks the
//! seed workflow in namespaces of its own:
//!
//! proposal with owner and evidence → promote to monitor (policy, proposal gone) → protect
//! (native object equals the spec, owned by the policy) → back to monitor → delete the policy
//! (a new proposal is learned) → delete the Deployment (its proposals are collected).
//!
//! Run: `cargo test --workspace --test controller_cluster`, against the project's control
//! plane or a cluster without Network Enforcer installed (`NE_TEST_KUBECONFIG`). The tests
//! take a lock, as each leader manages policies cluster-wide.

mod cluster;

use std::path::PathBuf;
use std::process::Command;

use cluster::hubble::{Hubble, Side, denied_tcp_flow_by, remote_node_tcp_flow, tcp_flow};
use cluster::ztunnel::{
    API_IP, WEB_IP, ztunnel_dry_run_line, ztunnel_explicitly_denied_line, ztunnel_line,
};
use cluster::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use ne_crds::{
    AuthorizationPolicy, ISTIO_DRY_RUN_ANNOTATION, Mode, PROMOTE_LABEL, PROMOTED_FROM_LABEL,
    WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_telemetry::testing::{Collector, Received};
use serde_json::json;

/// One leader at a time: each manages policies cluster-wide.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    client: Client,
    /// Where the workloads live.
    app: TempNamespace,
    /// The release namespace (the leader's Lease; never learned).
    _system: TempNamespace,
    api: Deployment,
    /// The pods the Deployments' controllers made.
    api_pod: String,
    web_pod: String,
    leader: Option<Process>,
    /// How the leader is started (again, after [`Setup::stop_leader`]).
    leader_start: LeaderStart,
    _agent: Process,
    dir: PathBuf,
}

/// What a leader of [`setup`] is started with.
struct LeaderStart {
    provider: String,
    what: String,
    ingest: String,
    /// Its `/metrics` (host:port).
    metrics: String,
    lease_namespace: String,
    env: Vec<(String, String)>,
    /// Further arguments of `ne-leader run`.
    args: Vec<String>,
}

impl LeaderStart {
    fn spawn(&self) -> Process {
        let mut leader = cluster_command(binary("ne-leader"));
        leader
            .args(["run", "--provider", &self.provider, "--insecure-ingest"])
            .args(["--ingest-address", &self.ingest])
            .args(["--metrics-address", &self.metrics])
            .args(["--lease-namespace", &self.lease_namespace])
            .args(["--identity", "e2e-leader"])
            .args(["--flush-interval", "1s", "--stable-after", "1h"])
            .args(&self.args)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        Process::spawn(&format!("leader-{}", self.what), leader)
    }
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ne-e2e-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Namespaces, workloads, the leader for `provider`, and an agent started by `agent_args`.
async fn setup(
    provider: &str,
    what: &str,
    leader_env: &[(&str, String)],
    agent_args: impl FnOnce(&PathBuf) -> Vec<String>,
) -> Setup {
    let client = client().await;
    install_crds(&client).await;
    let system = TempNamespace::new(&client, "ne-e2e-sys").await;
    let app = TempNamespace::new(&client, "ne-e2e-app").await;
    let (api, api_pod) = deployment(&client, &app.name, "api", "api", API_IP).await;
    let (_, web_pod) = deployment(&client, &app.name, "web", "web", WEB_IP).await;
    let dir = temp_dir(what);
    let ingest = free_address();
    let leader_start = LeaderStart {
        provider: provider.to_owned(),
        what: what.to_owned(),
        ingest: ingest.clone(),
        metrics: free_address(),
        lease_namespace: system.name.clone(),
        env: leader_env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        args: Vec::new(),
    };
    let leader = leader_start.spawn();
    let mut agent = Command::new(binary("ne-agent"));
    agent
        .args(agent_args(&dir))
        .args(["--node-name", "worker-1", "--leader-address", &ingest])
        .args([
            "--metrics-address",
            "127.0.0.1:0",
            "--flush-interval",
            "200ms",
        ]);
    let agent = Process::spawn(&format!("agent-{what}"), agent);
    Setup {
        client,
        app,
        _system: system,
        api,
        api_pod,
        web_pod,
        leader: Some(leader),
        leader_start,
        _agent: agent,
        dir,
    }
}

/// A test Hubble server on a socket of its own and the [`setup`] of a Cilium leader with an
/// agent reading it; the Hubble server's folder is removed with the returned guard.
async fn with_hubble(what: &str, leader_env: &[(&str, String)]) -> (Setup, Hubble, TempDir) {
    let dir = TempDir(temp_dir(&format!("hubble-{what}")));
    let socket = dir.0.join("hubble.sock");
    let hubble = Hubble::serve(&socket);
    let s = setup("cilium", what, leader_env, |_| {
        vec![
            "--source".into(),
            "hubble".into(),
            "--hubble-address".into(),
            format!("unix://{}", socket.display()),
        ]
    })
    .await;
    (s, hubble, dir)
}

/// A folder removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Setup {
    /// `web`'s pod as a flow's endpoint, named with its Deployment.
    fn web(&self) -> Side<'_> {
        Side {
            namespace: &self.app.name,
            pod: &self.web_pod,
            ip: WEB_IP,
            app: "web",
            deployment: Some("web"),
        }
    }

    /// `api`'s pod as a flow's endpoint, named with its Deployment.
    fn api(&self) -> Side<'_> {
        Side {
            namespace: &self.app.name,
            pod: &self.api_pod,
            ip: API_IP,
            app: "api",
            deployment: Some("api"),
        }
    }

    /// Stops the leader (SIGKILL: nothing of it runs on).
    fn stop_leader(&mut self) {
        if let Some(mut leader) = self.leader.take() {
            leader.kill();
        }
    }

    /// Starts the leader again, with the arguments it had.
    fn start_leader(&mut self) {
        assert!(self.leader.is_none(), "the leader runs already");
        self.leader = Some(self.leader_start.spawn());
    }

    /// The leader's metrics exposition (Prometheus text), once it answers.
    async fn metrics(&self) -> String {
        let address = self.leader_start.metrics.clone();
        eventually("the leader's /metrics", || {
            let address = address.clone();
            async move { http_get(&address, "/metrics") }
        })
        .await
    }

    /// Waits until the leader has finished `n` more proposal rounds than now; returns its
    /// metrics then.
    async fn rounds(&self, n: f64) -> String {
        let rounds = |text: &str| {
            metric_sum(
                text,
                "network_enforcer_leader_reconcile_duration_seconds_count",
            )
        };
        let from = rounds(&self.metrics().await);
        eventually(&format!("{n} more controller rounds"), || async {
            let text = self.metrics().await;
            (rounds(&text) >= from + n).then_some(text)
        })
        .await
    }

    fn proposals(&self) -> Api<WorkloadNetworkPolicyProposal> {
        Api::namespaced(self.client.clone(), &self.app.name)
    }

    fn policies(&self) -> Api<WorkloadNetworkPolicy> {
        Api::namespaced(self.client.clone(), &self.app.name)
    }

    /// Waits for proposal `name` with evidence, owned by the `api` Deployment.
    async fn learned(&self, name: &str) -> WorkloadNetworkPolicyProposal {
        let api_uid = self.api.metadata.uid.clone().unwrap();
        cluster::learned(&self.proposals(), name, &api_uid).await
    }

    /// Labels the proposal and waits for the policy it becomes (the proposal gone).
    async fn promote(&self, name: &str, mode: &str) -> WorkloadNetworkPolicy {
        let patch = json!({"metadata": {"labels": {PROMOTE_LABEL: mode}}});
        self.proposals()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let policy = eventually(&format!("policy {name}"), || async {
            self.policies().get_opt(name).await.ok()?
        })
        .await;
        self.proposal_gone(name, "promoted").await;
        policy
    }

    /// Waits until proposal `name` no longer exists.
    async fn proposal_gone(&self, name: &str, why: &str) {
        eventually(&format!("proposal {name} gone ({why})"), || async {
            self.proposals()
                .get_opt(name)
                .await
                .ok()
                .and_then(|p| p.is_none().then_some(()))
        })
        .await;
    }

    async fn set_mode(&self, name: &str, mode: &str) {
        let patch = json!({"spec": {"mode": mode}});
        self.policies()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Waits until the policy's `Ready` condition has `reason`.
    async fn ready(&self, name: &str, reason: &str) {
        eventually(&format!("policy {name} Ready reason {reason}"), || async {
            let w = self.policies().get(name).await.ok()?;
            w.status?
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == reason)
                .then_some(())
        })
        .await;
    }

    /// Waits for the policy's `ProtectSafe` condition to have `status` and `reason`;
    /// returns it.
    async fn protect_safe(
        &self,
        name: &str,
        status: &str,
        reason: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        eventually(
            &format!("policy {name} ProtectSafe {status} ({reason})"),
            || async {
                let w = self.policies().get(name).await.ok()?;
                w.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "ProtectSafe" && c.status == status && c.reason == reason)
            },
        )
        .await
    }

    /// Waits for the policy's `Quiet` condition to have `status` and `reason`; returns it.
    async fn quiet(
        &self,
        name: &str,
        status: &str,
        reason: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        eventually(
            &format!("policy {name} Quiet {status} ({reason})"),
            || async {
                let w = self.policies().get(name).await.ok()?;
                w.status?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Quiet" && c.status == status && c.reason == reason)
            },
        )
        .await
    }

    /// Deletes the policy; waits for learning to make a new proposal of that name.
    async fn delete_policy_and_relearn(&self, name: &str, old: &WorkloadNetworkPolicyProposal) {
        self.policies()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
        let old_uid = old.metadata.uid.clone();
        eventually(&format!("a new proposal {name}"), || async {
            let p = self.proposals().get_opt(name).await.ok()??;
            (p.metadata.uid != old_uid).then_some(())
        })
        .await;
    }

    /// Deletes the `api` Deployment; waits until its proposals are collected.
    async fn delete_workload(&self, name: &str) {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.app.name);
        deployments
            .delete("api", &DeleteParams::background())
            .await
            .unwrap();
        self.proposal_gone(name, "collected with its Deployment")
            .await;
    }

    /// The notes of the Warning Events with `reason` about object `name`.
    async fn warnings(&self, name: &str, reason: &str) -> Vec<String> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.app.name);
        let list = events.list(&ListParams::default()).await.unwrap();
        list.items
            .into_iter()
            .filter(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .map(|e| e.note.unwrap_or_default())
            .collect()
    }

    /// Waits for a Warning Event with `reason` about object `name`; its note.
    async fn warning(&self, name: &str, reason: &str) -> String {
        eventually(&format!("a {reason} warning about {name}"), || async {
            self.warnings(name, reason).await.pop()
        })
        .await
    }

    /// A `Promoted` Event on the policy.
    async fn promoted_event(&self, name: &str) {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.app.name);
        eventually(&format!("a Promoted event on {name}"), || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("Promoted")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                })
                .then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_workflow_with_network_policies() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (s, hubble, _hubble_dir) = with_hubble("cilium", &[]).await;
    let web = s.web();
    // Hubble names the destination's pod only: the leader resolves it through the cluster.
    let api = Side {
        deployment: None,
        ..s.api()
    };
    hubble.add_json(&tcp_flow(&web, &api, 8080));

    let name = "deployment-api-ingress";
    let proposal = s.learned(name).await;
    let spec = proposal
        .spec
        .kubernetes
        .clone()
        .expect("a NetworkPolicy spec");
    let rule = &spec.ingress.as_ref().unwrap()[0];
    let peer = &rule.from.as_ref().unwrap()[0];
    assert_eq!(app_of(peer.pod_selector.as_ref()), "web");
    assert_eq!(
        app_of(spec.pod_selector.as_ref()),
        "api",
        "the Deployment's own selector"
    );

    let policy = s.promote(name, "monitor").await;
    assert_eq!(policy.spec.mode, Mode::Monitor);
    assert_eq!(
        policy.metadata.labels.as_ref().unwrap()[PROMOTED_FROM_LABEL],
        name
    );
    assert_eq!(policy.spec.kubernetes.as_ref(), Some(&spec));
    s.promoted_event(name).await;
    s.ready(name, "Monitoring").await;

    // Before protect: nothing known would break, until a hand-written NetworkPolicy selects
    // the same pods; deleted, the condition clears.
    s.protect_safe(name, "True", "NoKnownHazard").await;
    let policies: Api<NetworkPolicy> = Api::namespaced(s.client.clone(), &s.app.name);
    let theirs: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "allow-scrapes"},
        "spec": {"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"ports": [{"protocol": "TCP", "port": 9090}]}]},
    }))
    .unwrap();
    policies
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let overlap = s.protect_safe(name, "False", "OtherPolicies").await;
    assert!(
        overlap.message.contains("NetworkPolicy allow-scrapes"),
        "{}",
        overlap.message
    );
    policies
        .delete("allow-scrapes", &DeleteParams::default())
        .await
        .unwrap();
    s.protect_safe(name, "True", "NoKnownHazard").await;
    // Traffic from another node into api: no NetworkPolicy rule can name that peer, so
    // protect mode would block it.
    hubble.add_json(&remote_node_tcp_flow("172.18.0.3", &api, 8080));
    let unexpressible = s.protect_safe(name, "False", "UnexpressiblePeers").await;
    assert!(
        unexpressible.message.contains("remote-node on TCP 8080"),
        "{}",
        unexpressible.message
    );

    s.set_mode(name, "protect").await;
    let policy_uid = policy.metadata.uid.clone().unwrap();
    let native = eventually("the NetworkPolicy", || async {
        policies.get_opt(name).await.ok()?
    })
    .await;
    assert_eq!(native.spec.as_ref(), Some(&spec));
    let owner = &native.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("WorkloadNetworkPolicy", policy_uid.as_str(), Some(true))
    );
    s.ready(name, "Enforced").await;

    s.set_mode(name, "monitor").await;
    eventually("the NetworkPolicy removed in monitor mode", || async {
        policies
            .get_opt(name)
            .await
            .ok()
            .and_then(|np| np.is_none().then_some(()))
    })
    .await;
    s.ready(name, "Monitoring").await;

    s.delete_policy_and_relearn(name, &proposal).await;
    s.delete_workload(name).await;
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Garbage collection is the controller manager's, through the owner references the leader
/// writes: with the leader stopped, deleting a protect-mode policy removes its NetworkPolicy
/// and deleting a Deployment its proposals; started again, the leader learns a new proposal
/// for the policy's workload. Deleting the whole namespace then leaves the leader without an
/// error loop: once the namespace is gone, rounds go by with no write and no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_manager_collects_what_the_leader_owns() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut s, hubble, _hubble_dir) = with_hubble("gc", &[]).await;
    let (web, api) = (s.web(), s.api());
    // web → api (api's ingress, web's egress), and api → web (api's egress, web's ingress).
    hubble.add_json(&tcp_flow(&web, &api, 8080));
    hubble.add_json(&tcp_flow(&api, &web, 8080));

    let name = "deployment-api-ingress";
    let proposal = s.learned(name).await;
    let policy = s.promote(name, "protect").await;
    let nps: Api<NetworkPolicy> = Api::namespaced(s.client.clone(), &s.app.name);
    eventually("the NetworkPolicy", || async {
        nps.get_opt(name).await.ok()?
    })
    .await;

    s.stop_leader();
    s.policies()
        .delete(name, &DeleteParams::background())
        .await
        .unwrap();
    eventually("the NetworkPolicy collected with its policy", || async {
        nps.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
    s.start_leader();
    eventually(&format!("a new proposal {name}"), || async {
        let p = s.proposals().get_opt(name).await.ok()??;
        (p.metadata.uid != proposal.metadata.uid && p.metadata.uid != policy.metadata.uid)
            .then_some(())
    })
    .await;
    let egress = s.learned("deployment-api-egress").await;

    s.stop_leader();
    s.delete_workload(name).await;
    let proposals = s.proposals();
    eventually(
        "the egress proposal collected with its Deployment",
        || async {
            proposals
                .get_opt("deployment-api-egress")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    drop(egress);
    s.start_leader();
    eventually("web's proposal, learned again", || async {
        proposals.get_opt("deployment-web-ingress").await.ok()?
    })
    .await;

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(s.client.clone());
    namespaces
        .delete(&s.app.name, &DeleteParams::background())
        .await
        .unwrap();
    eventually("the namespace gone", || async {
        namespaces
            .get_opt(&s.app.name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let errors = "network_enforcer_leader_reconcile_errors_total";
    let writes = "network_enforcer_leader_api_writes_total";
    let before = s.rounds(2.0).await;
    let after = s.rounds(5.0).await;
    assert_eq!(
        (metric_sum(&after, errors), metric_sum(&after, writes)),
        (metric_sum(&before, errors), metric_sum(&before, writes)),
        "errors and writes after the namespace was gone (an error loop)"
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// Bad input from users, on the real server: a promote label with an invalid value (here
/// the admission policy is not installed, so it gets in) gets a Warning Event and promotes
/// nothing; a proposal edited by hand keeps the edit while learning goes on; acknowledge
/// annotations with an unknown and a malformed id get a Warning each and acknowledge
/// nothing, beside a good one, and one repeated after its record was acknowledged is removed
/// without a warning. Every annotation is removed and nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_warning_and_changes_nothing_else() {
    use ne_crds::ACKNOWLEDGE_ANNOTATION_PREFIX as ACK;
    let _one = ONE_AT_A_TIME.lock().await;
    let (s, hubble, _hubble_dir) = with_hubble("bad-input", &[]).await;
    let (web, api) = (s.web(), s.api());
    hubble.add_json(&tcp_flow(&web, &api, 8080));
    let name = "deployment-api-ingress";
    let proposal = s.learned(name).await;

    let label = json!({"metadata": {"labels": {PROMOTE_LABEL: "enforce"}}});
    s.proposals()
        .patch(name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let note = s.warning(name, "InvalidPromoteLabel").await;
    assert!(note.contains("enforce"), "{note}");
    assert!(
        s.policies().get_opt(name).await.unwrap().is_none(),
        "an invalid label promoted the proposal"
    );

    // The reviewer allows one more port by hand; learning keeps it.
    let mut spec = proposal.spec.kubernetes.clone().unwrap();
    let rule = &mut spec.ingress.as_mut().unwrap()[0];
    let mut extra = rule.ports.as_ref().unwrap()[0].clone();
    extra.port = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9443));
    rule.ports.as_mut().unwrap().push(extra);
    let edit = json!({"spec": {"kubernetes": spec}});
    s.proposals()
        .patch(name, &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    hubble.add_json(&tcp_flow(&web, &api, 8081));
    let kept = eventually("the learned port beside the one added by hand", || async {
        let p = s.proposals().get(name).await.ok()?;
        let ports: Vec<_> = p.spec.kubernetes?.ingress?[0]
            .ports
            .iter()
            .flatten()
            .filter_map(|port| port.port.clone())
            .collect();
        let has =
            |n| ports.contains(&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n));
        (has(8081) && has(9443) && has(8080)).then_some(())
    });
    kept.await;

    let fix = json!({"metadata": {"labels": {PROMOTE_LABEL: "monitor"}}});
    s.proposals()
        .patch(name, &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    eventually(&format!("policy {name}"), || async {
        s.policies().get_opt(name).await.ok()?
    })
    .await;
    hubble.add_json(&tcp_flow(&web, &api, 7070));
    violations_when(&s, name, "the record of port 7070", |st| {
        st.violations.iter().any(|r| r.id == 1 && r.port == 7070)
    })
    .await;

    let annotate = |pairs: &[(&str, &str)]| {
        let annotations: serde_json::Map<_, _> = pairs
            .iter()
            .map(|(id, reason)| (format!("{ACK}{id}"), json!(reason)))
            .collect();
        json!({"metadata": {"annotations": annotations}})
    };
    s.policies()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&annotate(&[
                ("1", "known"),
                ("999", "never assigned"),
                ("abc", "not a number"),
            ])),
        )
        .await
        .unwrap();
    for id in ["999", "abc"] {
        let key = format!("{ACK}{id}");
        let note = eventually(&format!("a warning about {key}"), || async {
            s.warnings(name, "UnknownViolation")
                .await
                .into_iter()
                .find(|note| note.contains(&key))
        })
        .await;
        assert!(note.contains("nothing was acknowledged"), "{note}");
    }
    let unannotated = |w: &WorkloadNetworkPolicy| {
        !w.metadata
            .annotations
            .iter()
            .flatten()
            .any(|(k, _)| k.starts_with(ACK))
    };
    let status = eventually(
        "record 1 acknowledged and the annotations removed",
        || async {
            let w = s.policies().get(name).await.ok()?;
            let status = w.status.clone()?;
            (unannotated(&w)
                && status
                    .acknowledged_violations
                    .iter()
                    .any(|a| a.violation.id == 1))
            .then_some(status)
        },
    )
    .await;
    assert_eq!(status.acknowledged_violations.len(), 1, "{status:#?}");
    assert_eq!(
        status.acknowledged_violations[0].reason.as_deref(),
        Some("known")
    );

    // The same id again, after its record was acknowledged: removed, no warning, no change.
    let warned = s.warnings(name, "UnknownViolation").await.len();
    s.policies()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&annotate(&[("1", "again")])),
        )
        .await
        .unwrap();
    let again = eventually("the repeated annotation removed", || async {
        let w = s.policies().get(name).await.ok()?;
        unannotated(&w).then_some(w)
    })
    .await;
    let again = again.status.unwrap();
    assert_eq!(
        again.acknowledged_violations,
        status.acknowledged_violations
    );
    s.rounds(2.0).await;
    assert_eq!(s.warnings(name, "UnknownViolation").await.len(), warned);

    // An id trimmed past the 100-record cap: a warning, nothing acknowledged. 101 new ports
    // make records 2 to 102, and one of them (the least recently seen) is trimmed.
    for port in 7100..7201 {
        hubble.add_json(&tcp_flow(&web, &api, port));
    }
    let full = violations_when(&s, name, "records up to id 102", |st| {
        st.violations.iter().any(|r| r.id == 102)
    })
    .await;
    assert_eq!(full.violations.len(), 100, "the record is capped");
    let trimmed_id = (2..=102)
        .find(|id| full.violations.iter().all(|r| r.id != *id))
        .expect("one record trimmed");
    let trimmed = format!("{ACK}{trimmed_id}");
    s.policies()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&annotate(&[(&trimmed_id.to_string(), "too late")])),
        )
        .await
        .unwrap();
    let note = eventually("a warning about the trimmed id", || async {
        s.warnings(name, "UnknownViolation")
            .await
            .into_iter()
            .find(|note| note.contains(&trimmed))
    })
    .await;
    assert!(note.contains("nothing was acknowledged"), "{note}");
    let after = eventually("the trimmed id's annotation removed", || async {
        let w = s.policies().get(name).await.ok()?;
        unannotated(&w).then_some(w.status?)
    })
    .await;
    assert_eq!(
        after.acknowledged_violations,
        status.acknowledged_violations
    );
    assert_eq!(after.active_violation_count, 100);

    // A rule edited by hand whose peer selects no pod (a typo in a label): the policy says
    // which peer in a condition and a Warning, and keeps the rule as written.
    let policy = s.policies().get(name).await.unwrap();
    let generation = policy.metadata.generation;
    let mut spec = policy.spec.kubernetes.clone().unwrap();
    let mut typo = spec.ingress.as_ref().unwrap()[0].clone();
    typo.from = Some(vec![k8s_openapi::api::networking::v1::NetworkPolicyPeer {
        pod_selector: Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("app".to_owned(), "wbe".to_owned())].into()),
                match_expressions: None,
            },
        ),
        ..Default::default()
    }]);
    spec.ingress.as_mut().unwrap().push(typo);
    s.policies()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"kubernetes": spec}})),
        )
        .await
        .unwrap();
    let peers_resolved = |w: &WorkloadNetworkPolicy| {
        w.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "PeersResolved")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (_, _, message) = eventually("PeersResolved False for the typo", || async {
        let w = s.policies().get(name).await.ok()?;
        peers_resolved(&w)
            .filter(|(status, reason, _)| status == "False" && reason == "PeerSelectsNothing")
    })
    .await;
    assert!(
        message.contains("spec.kubernetes.ingress[1].from[0]") && !message.contains("ingress[0]"),
        "only the typo selects nothing: {message}"
    );
    let note = s.warning(name, "PeerSelectsNothing").await;
    assert_eq!(note, message);
    let edited = s.policies().get(name).await.unwrap();
    assert_eq!(
        edited.spec.kubernetes,
        Some(spec.clone()),
        "the rule is kept as written"
    );
    assert_ne!(edited.metadata.generation, generation);
    let ready = edited
        .status
        .iter()
        .flat_map(|st| &st.conditions)
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Monitoring")
    );

    // Fixed: the condition says so, no further warning.
    spec.ingress.as_mut().unwrap().pop();
    s.policies()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"kubernetes": spec}})),
        )
        .await
        .unwrap();
    eventually("PeersResolved True again", || async {
        let w = s.policies().get(name).await.ok()?;
        peers_resolved(&w).filter(|(status, _, _)| status == "True")
    })
    .await;
    assert_eq!(s.warnings(name, "PeerSelectsNothing").await.len(), 1);
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// How long the API server is away in [`the_leader_rides_out_an_api_server_outage`].
const OUTAGE: std::time::Duration = std::time::Duration::from_secs(60);

/// kube-apiserver stops for a minute while the agent keeps streaming, and starts again. The
/// leader neither exits nor gives up its Lease for good: it holds the Lease afterwards, the
/// proposal catches up with the port learned during the outage, the failed rounds are
/// counted, and once caught up rounds go by without a write. Stops the API server of the
/// project's own control plane, so it cannot run against a cluster `NE_TEST_KUBECONFIG`
/// names (skip it there with `--skip the_leader_rides_out`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_rides_out_an_api_server_outage() {
    assert!(
        own_control_plane(),
        "this test stops and starts kube-apiserver of tests/control-plane; against another \
         cluster, run the others with `-- --skip the_leader_rides_out`"
    );
    let _one = ONE_AT_A_TIME.lock().await;
    let (mut s, hubble, _hubble_dir) = with_hubble("outage", &[]).await;
    // Traffic goes on all the time; its moving evidence is written only hourly, so that any
    // write after the catch-up is one for nothing.
    s.stop_leader();
    s.leader_start.args = vec!["--status-refresh".into(), "1h".into()];
    s.start_leader();
    let (web, api) = (s.web(), s.api());
    hubble.add_json(&tcp_flow(&web, &api, 8080));
    let name = "deployment-api-ingress";
    s.learned(name).await;
    let errors = "network_enforcer_leader_reconcile_errors_total";
    let before = s.rounds(1.0).await;

    control_plane("down", &["kube-apiserver"]);
    let gone = tokio::time::Instant::now();
    hubble.add_json(&tcp_flow(&web, &api, 9090));
    // The outage is the stimulus, not a synchronisation: it lasts OUTAGE, during which the
    // leader must stay up and count its failures.
    let counted = eventually("the leader counting failed rounds", || async {
        let text = s.metrics().await;
        (metric_sum(&text, errors) > metric_sum(&before, errors)).then_some(())
    });
    counted.await;
    tokio::time::sleep_until(gone + OUTAGE).await;
    let leader = s.leader.as_mut().expect("the leader process");
    assert!(
        leader.child.try_wait().unwrap().is_none(),
        "the leader exited during the outage:\n{}",
        leader.output()
    );
    control_plane("up", &[]);

    let port = eventually(
        "the port learned during the outage in the proposal",
        || async {
            let p = s.proposals().get_opt(name).await.ok()??;
            let ports: Vec<_> = p.status?.peers.iter().map(|peer| peer.port).collect();
            ports.contains(&9090).then_some(ports)
        },
    )
    .await;
    assert!(port.contains(&8080), "{port:?}");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(s.client.clone(), &s._system.name);
    let holder = eventually("the Lease held again", || async {
        let lease = leases
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .pop()?;
        lease.spec?.holder_identity
    })
    .await;
    assert_eq!(holder, "e2e-leader");
    // Caught up, the writes stop (rounds come in bursts while the caches refill): three
    // rounds in a row without one, then five more.
    let writes = "network_enforcer_leader_api_writes_total";
    let settled = eventually("the leader's writes settling", || async {
        let from = s.rounds(1.0).await;
        let to = s.rounds(3.0).await;
        (metric_sum(&to, writes) == metric_sum(&from, writes)).then_some(to)
    })
    .await;
    let later = s.rounds(5.0).await;
    let lines = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with(writes))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        metric_sum(&later, writes),
        metric_sum(&settled, writes),
        "writes repeated after the outage:\n{}\nthen\n{}",
        lines(&settled),
        lines(&later),
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// A TCP proxy in front of the API server that can stop forwarding: connections stay open
/// and bytes wait, as with an API server too loaded to answer (not one that is gone).
struct StallingProxy {
    address: std::net::SocketAddr,
    stalled: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl StallingProxy {
    async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stalled, gate) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let (upstream, gate) = (upstream.clone(), gate.clone());
                tokio::spawn(async move {
                    let Ok(up) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let ((down_r, down_w), (up_r, up_w)) = (down.into_split(), up.into_split());
                    tokio::join!(pipe(down_r, up_w, gate.clone()), pipe(up_r, down_w, gate));
                });
            }
        });
        StallingProxy {
            address,
            stalled,
            task,
        }
    }

    fn stall(&self, stalled: bool) {
        self.stalled.send_replace(stalled);
    }
}

impl Drop for StallingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to`, holding every chunk while the gate says stalled.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut stalled: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0; 1 << 14];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        if stalled.wait_for(|s| !*s).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The API server answers nothing for a while (a stalled proxy in front of it) while the
/// agent keeps streaming. Ingest goes on: the leader's merged index takes the new edge at
/// once, though no write reaches the cluster; when the API server answers again the proposal
/// catches up with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_goes_on_while_the_api_server_stalls() {
    let _one = ONE_AT_A_TIME.lock().await;
    // The leader's kubeconfig: the test's, with the server behind the proxy.
    let text = std::fs::read_to_string(kubeconfig()).unwrap();
    let config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let server = config.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .expect("the kubeconfig's server");
    let authority = server
        .strip_prefix("https://")
        .expect("an https server")
        .trim_end_matches('/')
        .to_owned();
    let proxy = StallingProxy::start(authority.clone()).await;
    let dir = TempDir(temp_dir("stall-kubeconfig"));
    let path = dir.0.join("kubeconfig");
    let proxied = format!("https://{}", proxy.address);
    std::fs::write(&path, text.replace(&server, &proxied)).unwrap();
    let env = [("KUBECONFIG", path.display().to_string())];
    let (s, hubble, _hubble_dir) = with_hubble("stall", &env).await;

    let (web, api) = (s.web(), s.api());
    hubble.add_json(&tcp_flow(&web, &api, 8080));
    let name = "deployment-api-ingress";
    s.learned(name).await;
    let edges = "network_enforcer_leader_edges";
    let before = metric_sum(&s.metrics().await, edges);

    proxy.stall(true);
    hubble.add_json(&tcp_flow(&web, &api, 9090));
    eventually(
        "the new edge in the leader's index, the API stalled",
        || async { (metric_sum(&s.metrics().await, edges) > before).then_some(()) },
    )
    .await;
    // The stall is real: the proposal (read directly, not through the proxy) lacks it.
    let ports: Vec<_> = s
        .learned(name)
        .await
        .status
        .unwrap()
        .peers
        .iter()
        .map(|p| p.port)
        .collect();
    assert!(!ports.contains(&9090), "{ports:?}");

    proxy.stall(false);
    let ports = eventually("the proposal catching up", || async {
        let p = s.proposals().get_opt(name).await.ok()??;
        let ports: Vec<_> = p.status?.peers.iter().map(|peer| peer.port).collect();
        ports.contains(&9090).then_some(ports)
    })
    .await;
    assert!(ports.contains(&8080), "{ports:?}");
    let _ = std::fs::remove_dir_all(&s.dir);
}

/// The policy's violation state, once `done` says it is what the test waits for.
async fn violations_when(
    s: &Setup,
    name: &str,
    what: &str,
    done: impl Fn(&ne_crds::WorkloadNetworkPolicyStatus) -> bool,
) -> ne_crds::WorkloadNetworkPolicyStatus {
    eventually(what, || async {
        let status = s.policies().get(name).await.ok()?.status?;
        done(&status).then_some(status)
    })
    .await
}

/// The first received event `event` whose attributes include every pair of `with`.
async fn event_with(
    collector: &Collector,
    event: &str,
    with: &[(&str, serde_json::Value)],
) -> Received {
    eventually(&format!("a {event} event with {with:?}"), || async {
        collector
            .events(event)
            .into_iter()
            .find(|e| with.iter().all(|(k, v)| e.attributes.get(*k) == Some(v)))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_in_monitor_and_protect_mode_with_network_policies() {
    use ne_policy::otel_names as otel;
    let _one = ONE_AT_A_TIME.lock().await;
    let (collector, endpoint) = Collector::serve().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", endpoint),
        ("OTEL_BLRP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let (s, hubble, _hubble_dir) = with_hubble("violations", &env).await;
    let ns = s.app.name.clone();
    let (web_pod, api_pod) = (s.web_pod.clone(), s.api_pod.clone());
    let web = Side {
        namespace: &ns,
        pod: &web_pod,
        ip: WEB_IP,
        app: "web",
        deployment: Some("web"),
    };
    let api = Side {
        namespace: &ns,
        pod: &api_pod,
        ip: API_IP,
        app: "api",
        deployment: None,
    };
    hubble.add_json(&tcp_flow(&web, &api, 8080));
    let name = "deployment-api-ingress";
    let learned = s.learned(name).await.status.unwrap();
    // What `kubectl get wnpp` shows of it.
    assert_eq!(
        (learned.peer_count, learned.ports.as_str()),
        (1, "TCP/8080")
    );
    assert_eq!(
        (learned.last_learned.as_ref(), learned.last_seen.as_ref()),
        (
            learned.peers.first().map(|p| &p.first_seen),
            learned.peers.first().map(|p| &p.last_seen)
        )
    );
    let policy = s.promote(name, "monitor").await;
    s.ready(name, "Monitoring").await;

    // Monitor: web → api:9090 is outside the policy (it allows 8080 only).
    hubble.add_json(&tcp_flow(&web, &api, 9090));
    let status = violations_when(&s, name, "one violation record", |st| {
        st.violations.len() == 1 && st.active_violation_count == 1
    })
    .await;
    let record = &status.violations[0];
    assert_eq!(
        (
            record.id,
            record.port,
            record.protocol.as_str(),
            record.mode,
            record.direction
        ),
        (
            1,
            9090,
            "TCP",
            Mode::Monitor,
            ne_crds::PolicyDirection::Ingress
        )
    );
    assert_eq!(
        (
            record.source.namespace.as_deref(),
            record.source.kind.as_deref(),
            record.source.name.as_deref()
        ),
        (Some(ns.as_str()), Some("Deployment"), Some("web"))
    );
    assert_eq!(record.destination.name.as_deref(), Some("api"));
    assert!(record.count >= 1 && status.violation_count >= 1);
    assert!(status.last_violation_time.is_some());
    // The policy admits web, on 8080 only: the record says so.
    assert_eq!(
        record.reason,
        Some(ne_crds::ViolationReason::PortNotAllowed)
    );
    assert_eq!(
        record.message.as_deref(),
        Some("ingress rules admit this peer, but not on TCP port 9090")
    );
    let observed = event_with(
        &collector,
        otel::EVENT_VIOLATION_OBSERVED,
        &[(otel::VIOLATION_ID, json!(1))],
    )
    .await;
    assert_eq!(
        (
            observed.severity.as_str(),
            observed.scope.as_str(),
            observed.event_name.as_str()
        ),
        ("WARN", otel::LOG_SCOPE, otel::EVENT_VIOLATION_OBSERVED)
    );
    let want = [
        (otel::ENFORCEMENT_PROVIDER, json!("cilium")),
        (otel::ACTION, json!("monitor")),
        (otel::SOURCE_WORKLOAD_NAME, json!("web")),
        (otel::SOURCE_WORKLOAD_NAMESPACE, json!(ns)),
        (otel::SOURCE_WORKLOAD_KIND, json!("Deployment")),
        (otel::SOURCE_WORKLOAD_IDENTITY, json!("")),
        (otel::DESTINATION_WORKLOAD_NAME, json!("api")),
        (otel::DESTINATION_WORKLOAD_NAMESPACE, json!(ns)),
        (otel::DESTINATION_WORKLOAD_KIND, json!("Deployment")),
        (otel::DESTINATION_WORKLOAD_IDENTITY, json!("")),
        (otel::NETWORK_TRANSPORT, json!("tcp")),
        (otel::DESTINATION_PORT, json!(9090)),
        (otel::POLICY_REF_NAMESPACE, json!(ns)),
        (otel::POLICY_REF_NAME, json!(name)),
        (otel::VIOLATION_ID, json!(1)),
        (otel::NETWORK_DIRECTION, json!("ingress")),
        (otel::VIOLATION_REASON, json!("PortNotAllowed")),
    ];
    for (key, value) in &want {
        assert_eq!(observed.attributes.get(*key), Some(value), "{key}");
    }
    assert_eq!(
        observed.attributes.get(otel::EVENT_NAME_ATTRIBUTE),
        Some(&json!(otel::EVENT_VIOLATION_OBSERVED))
    );

    // The seed's workflow: allow 9090, then acknowledge the record.
    let mut rules = policy.spec.kubernetes.clone().unwrap().ingress.unwrap();
    let mut widened = rules[0].clone();
    widened.ports = Some(vec![k8s_openapi::api::networking::v1::NetworkPolicyPort {
        port: Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9090)),
        protocol: Some("TCP".to_owned()),
        ..Default::default()
    }]);
    rules.push(widened);
    let patch = json!({"spec": {"kubernetes": {"ingress": rules}}});
    s.policies()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    s.quiet(name, "False", "ActiveViolations").await;
    let ack = format!("{}1", ne_crds::ACKNOWLEDGE_ANNOTATION_PREFIX);
    let patch = json!({"metadata": {"annotations": {&ack: "web scrapes metrics on 9090"}}});
    s.policies()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let status = violations_when(&s, name, "the record acknowledged", |st| {
        st.active_violation_count == 0 && !st.acknowledged_violations.is_empty()
    })
    .await;
    let acknowledged = &status.acknowledged_violations[0];
    assert_eq!(acknowledged.violation.id, 1);
    let quiet = s.quiet(name, "True", "NoActiveViolations").await;
    assert!(
        quiet
            .message
            .starts_with("no active violation; the last was seen at"),
        "{}",
        quiet.message
    );
    assert_eq!(
        acknowledged.reason.as_deref(),
        Some("web scrapes metrics on 9090")
    );
    eventually("the acknowledgement annotation removed", || async {
        let w = s.policies().get(name).await.ok()?;
        (!w.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(&ack))
        .then_some(())
    })
    .await;
    let event = event_with(
        &collector,
        otel::EVENT_VIOLATION_ACKNOWLEDGED,
        &[(otel::VIOLATION_ID, json!(1))],
    )
    .await;
    assert_eq!(
        event.attributes.get(otel::REASON),
        Some(&json!("web scrapes metrics on 9090"))
    );
    assert_eq!(event.severity, "INFO");

    // Protect: the data plane denies web → api:7070 by a deny rule it names; the denial is
    // a protect record that names it too.
    s.set_mode(name, "protect").await;
    s.ready(name, "Enforced").await;
    hubble.add_json(&denied_tcp_flow_by(&web, &api, 7070, "deny-web"));
    let status = violations_when(&s, name, "a protect record", |st| {
        st.violations.iter().any(|r| r.mode == Mode::Protect)
    })
    .await;
    let protect: Vec<_> = status
        .violations
        .iter()
        .filter(|r| r.mode == Mode::Protect)
        .collect();
    assert_eq!(protect.len(), 1);
    assert_eq!(
        (
            protect[0].port,
            protect[0].source.name.as_deref(),
            protect[0].reason
        ),
        (
            7070,
            Some("web"),
            Some(ne_crds::ViolationReason::DeniedByDataPlane)
        )
    );
    assert!(protect[0].id > 1, "ids are never reused");
    let deny_web = format!("{ns}/deny-web");
    assert_eq!(protect[0].denied_by.as_deref(), Some(deny_web.as_str()));
    assert_eq!(
        protect[0].message.as_deref(),
        Some(format!("the data plane denied the connection: policy {deny_web}").as_str())
    );
    assert!(
        status.violations.iter().all(|r| r.port != 9090),
        "the widened rule allows 9090: no new record for it"
    );
    event_with(
        &collector,
        otel::EVENT_VIOLATION_OBSERVED,
        &[
            (otel::ACTION, json!("protect")),
            (otel::DESTINATION_PORT, json!(7070)),
            (otel::VIOLATION_DENIED_BY, json!(deny_web)),
        ],
    )
    .await;
    assert_eq!(
        collector.events(otel::EVENT_VIOLATION_ACKNOWLEDGED).len(),
        1,
        "acknowledged exactly once"
    );
    let _ = std::fs::remove_dir_all(&s.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_in_monitor_and_protect_mode_with_authorization_policies() {
    use ne_policy::otel_names as otel;
    let _one = ONE_AT_A_TIME.lock().await;
    let client = client().await;
    let installed = authorization_policy_crd(&client).await;
    let (collector, endpoint) = Collector::serve().await;
    let logs = temp_dir("ztunnel-violations");
    let env = [
        ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", endpoint),
        ("OTEL_BLRP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let s = setup("istio", "istio-violations", &env, |_| {
        vec![
            "--source".into(),
            "ztunnel".into(),
            "--ztunnel-log-root".into(),
            logs.display().to_string(),
        ]
    })
    .await;
    let ns = s.app.name.clone();
    let log = ZtunnelLog::write(&logs);
    log.add(ztunnel_line(&ns, &s.web_pod, &s.api_pod, 8080));
    let name = "deployment-api-ingress";
    s.learned(name).await;
    s.promote(name, "monitor").await;
    s.ready(name, "Monitoring").await;

    // Monitor: a connection to 9090, outside the policy. ztunnel reports it twice (the
    // dry-run line when the policy is evaluated, the access line when it closes): one record.
    log.add(ztunnel_dry_run_line(&ns, &s.api_pod));
    log.add(ztunnel_line(&ns, &s.web_pod, &s.api_pod, 9090));
    let status = violations_when(&s, name, "the record of 9090", |st| {
        st.violations.iter().any(|r| r.port == 9090)
    })
    .await;
    assert_eq!(
        status.violations.len(),
        1,
        "the dry-run line and the check are one record: {:?}",
        status.violations
    );
    let record = &status.violations[0];
    assert_eq!(
        (
            record.id,
            record.mode,
            record.source.name.as_deref(),
            record.reason
        ),
        (
            1,
            Mode::Monitor,
            Some("web"),
            Some(ne_crds::ViolationReason::PortNotAllowed)
        )
    );
    assert_eq!(
        record.source.identity.as_deref(),
        Some(format!("cluster.local/ns/{ns}/sa/web").as_str())
    );
    let event = event_with(
        &collector,
        otel::EVENT_VIOLATION_OBSERVED,
        &[(otel::DESTINATION_PORT, json!(9090))],
    )
    .await;
    for (key, value) in [
        (otel::ENFORCEMENT_PROVIDER, json!("istio")),
        (otel::ACTION, json!("monitor")),
        (otel::SOURCE_WORKLOAD_NAME, json!("web")),
        (
            otel::SOURCE_WORKLOAD_IDENTITY,
            json!(format!("cluster.local/ns/{ns}/sa/web")),
        ),
        (otel::DESTINATION_WORKLOAD_NAME, json!("api")),
        (otel::NETWORK_TRANSPORT, json!("tcp")),
        (otel::POLICY_REF_NAME, json!(name)),
        (otel::VIOLATION_ID, json!(1)),
        (otel::NETWORK_DIRECTION, json!("ingress")),
        (otel::VIOLATION_REASON, json!("PortNotAllowed")),
    ] {
        assert_eq!(event.attributes.get(key), Some(&value), "{key}");
    }

    // Protect: ztunnel refuses web → api:7070 by a DENY policy, which it names.
    s.set_mode(name, "protect").await;
    s.ready(name, "Enforced").await;
    log.add(ztunnel_explicitly_denied_line(
        &ns, &s.web_pod, &s.api_pod, 7070, "deny-web",
    ));
    let status = violations_when(&s, name, "a protect record", |st| {
        st.violations.iter().any(|r| r.mode == Mode::Protect)
    })
    .await;
    let protect = status
        .violations
        .iter()
        .find(|r| r.mode == Mode::Protect)
        .unwrap();
    assert_eq!((protect.port, protect.id), (7070, 2));
    assert_eq!(
        protect.denied_by.as_deref(),
        Some(format!("{ns}/deny-web").as_str())
    );
    event_with(
        &collector,
        otel::EVENT_VIOLATION_OBSERVED,
        &[
            (otel::ACTION, json!("protect")),
            (otel::ENFORCEMENT_PROVIDER, json!("istio")),
            (otel::DESTINATION_PORT, json!(7070)),
        ],
    )
    .await;
    drop(log);
    drop(s);
    if let Some(crd) = installed {
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let _ = api.delete(&crd, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&logs);
}

/// Istio's AuthorizationPolicy CRD, reduced (no schema): installed when the cluster has none,
/// removed again afterwards.
async fn authorization_policy_crd(client: &Client) -> Option<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "authorizationpolicies.security.istio.io";
    if api.get_opt(name).await.unwrap().is_some() {
        return None;
    }
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": "security.istio.io",
            "names": {"kind": "AuthorizationPolicy", "plural": "authorizationpolicies", "singular": "authorizationpolicy", "listKind": "AuthorizationPolicyList"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &crd).await.unwrap();
    established(client, name).await;
    Some(name.to_owned())
}

/// A ztunnel pod's log under a test `--ztunnel-log-root`, written as traffic flows: every
/// line added is written again every 300 ms (steady traffic), so the tailer sees each
/// whenever it starts reading. Stops when dropped.
struct ZtunnelLog {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    writer: tokio::task::JoinHandle<()>,
}

impl ZtunnelLog {
    fn write(root: &std::path::Path) -> Self {
        let container = root.join("istio-system_ztunnel-e2e_uid-1/istio-proxy");
        std::fs::create_dir_all(&container).unwrap();
        let path = container.join("0.log");
        let lines: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let shared = lines.clone();
        let writer = tokio::spawn(async move {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .unwrap();
            loop {
                let batch = shared.lock().unwrap().concat();
                file.write_all(batch.as_bytes()).unwrap();
                // Traffic pacing, not synchronisation.
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
        });
        ZtunnelLog { lines, writer }
    }

    fn add(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }
}

impl Drop for ZtunnelLog {
    fn drop(&mut self) {
        self.writer.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_workflow_with_authorization_policies() {
    let _one = ONE_AT_A_TIME.lock().await;
    let client = client().await;
    let installed = authorization_policy_crd(&client).await;
    let logs = temp_dir("ztunnel-logs");
    let s = setup("istio", "istio", &[], |_| {
        vec![
            "--source".into(),
            "ztunnel".into(),
            "--ztunnel-log-root".into(),
            logs.display().to_string(),
        ]
    })
    .await;
    let log = ZtunnelLog::write(&logs);
    log.add(ztunnel_line(&s.app.name, &s.web_pod, &s.api_pod, 8080));

    let name = "deployment-api-ingress";
    let proposal = s.learned(name).await;
    let istio = proposal
        .spec
        .istio
        .clone()
        .expect("an AuthorizationPolicy spec");
    assert_eq!(
        istio.rules[0].from[0].source.principals,
        [format!("cluster.local/ns/{}/sa/web", s.app.name)]
    );
    assert_eq!(istio.rules[0].to[0].operation.ports, ["8080"]);

    let policy = s.promote(name, "monitor").await;
    let aps: Api<AuthorizationPolicy> = Api::namespaced(s.client.clone(), &s.app.name);
    let dry_run = |ap: &AuthorizationPolicy| {
        ap.meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(ISTIO_DRY_RUN_ANNOTATION))
            .is_some_and(|v| v == "true")
    };
    let ap = eventually("a dry-run AuthorizationPolicy", || async {
        aps.get_opt(name).await.ok()?.filter(|ap| dry_run(ap))
    })
    .await;
    assert_eq!(ap.spec.action.as_deref(), Some("ALLOW"));
    assert_eq!(ap.spec.rules, istio.rules);
    assert_eq!(
        ap.spec.selector.as_ref().unwrap().match_labels["app"],
        "api"
    );
    let owner = &ap.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, policy.metadata.uid.clone().unwrap());
    s.ready(name, "Monitoring").await;

    s.set_mode(name, "protect").await;
    eventually("the AuthorizationPolicy enforced (no dry-run)", || async {
        aps.get_opt(name).await.ok()?.filter(|ap| !dry_run(ap))
    })
    .await;
    s.ready(name, "Enforced").await;

    s.set_mode(name, "monitor").await;
    eventually("the AuthorizationPolicy in dry-run again", || async {
        aps.get_opt(name).await.ok()?.filter(|ap| dry_run(ap))
    })
    .await;

    s.delete_policy_and_relearn(name, &proposal).await;
    s.delete_workload(name).await;
    drop(log);
    drop(s);
    if let Some(crd) = installed {
        let api: Api<CustomResourceDefinition> = Api::all(client);
        let _ = api.delete(&crd, &DeleteParams::default()).await;
    }
    let _ = std::fs::remove_dir_all(&logs);
}

/// `(app, port)` of every egress rule of a NetworkPolicy proposal, sorted.
fn egress_rules(p: &WorkloadNetworkPolicyProposal) -> Vec<(String, String)> {
    let spec = p.spec.kubernetes.as_ref().expect("a NetworkPolicy spec");
    let mut rules: Vec<(String, String)> = spec
        .egress
        .iter()
        .flatten()
        .flat_map(|rule| {
            let peers = rule.to.iter().flatten();
            let ports: Vec<String> = rule
                .ports
                .iter()
                .flatten()
                .map(|p| format!("{:?}", p.port))
                .collect();
            peers.flat_map(move |peer| {
                let app = app_of(peer.pod_selector.as_ref()).to_owned();
                ports
                    .clone()
                    .into_iter()
                    .map(move |port| (app.clone(), port))
            })
        })
        .collect();
    rules.sort();
    rules
}

/// Pod churn: alpha's pod is deleted and its address handed to a pod of beta while the
/// agent still holds alpha's edges. Each workload keeps its own flows: in the proposals,
/// and in monitor mode, where only beta's traffic outside the policy is a violation, named
/// as beta's (alpha's allowed traffic never becomes beta's violation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_address_never_moves_flows_to_the_next_pod() {
    const REUSED: &str = "10.244.9.9";
    let _one = ONE_AT_A_TIME.lock().await;
    let (s, hubble, _hubble_dir) = with_hubble("churn", &[]).await;
    let ns = s.app.name.clone();
    let api_pod = s.api_pod.clone();
    // Hubble names the pods only: the leader resolves them through the cluster.
    let side = |pod, ip, app| Side {
        namespace: ns.as_str(),
        pod,
        ip,
        app,
        deployment: None,
    };
    let (alpha, alpha_pod) = deployment(&s.client, &ns, "alpha", "alpha", REUSED).await;
    hubble.add_json(&tcp_flow(
        &side(&alpha_pod, REUSED, "alpha"),
        &side(&api_pod, API_IP, "api"),
        8080,
    ));
    let name = "deployment-api-ingress";
    s.learned(name).await;
    let alpha_uid = alpha.metadata.uid.clone().unwrap();
    cluster::learned(&s.proposals(), "deployment-alpha-egress", &alpha_uid).await;
    s.promote(name, "monitor").await;
    s.ready(name, "Monitoring").await;

    // alpha scaled to zero: its controllers delete its pod.
    let deployments: Api<Deployment> = Api::namespaced(s.client.clone(), &ns);
    let scale = json!({"spec": {"replicas": 0}});
    deployments
        .patch("alpha", &PatchParams::default(), &Patch::Merge(&scale))
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(s.client.clone(), &ns);
    eventually("alpha's pod deleted", || async {
        pods.get_opt(&alpha_pod)
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;
    s.rounds(2.0).await;
    // Its address goes to beta's pod, which talks on another port.
    let (beta, beta_pod) = deployment(&s.client, &ns, "beta", "beta", REUSED).await;
    hubble.add_json(&tcp_flow(
        &side(&beta_pod, REUSED, "beta"),
        &side(&api_pod, API_IP, "api"),
        9090,
    ));
    let beta_uid = beta.metadata.uid.clone().unwrap();
    let beta_egress = cluster::learned(&s.proposals(), "deployment-beta-egress", &beta_uid).await;
    violations_when(&s, name, "beta's violation", |st| !st.violations.is_empty()).await;
    // Rounds after both pods' edges were merged: nothing else appears.
    s.rounds(3.0).await;

    let status = s.policies().get(name).await.unwrap().status.unwrap();
    let records: Vec<(i32, Option<&str>)> = status
        .violations
        .iter()
        .map(|r| (r.port, r.source.name.as_deref()))
        .collect();
    assert_eq!(
        records,
        [(9090, Some("beta"))],
        "only beta's traffic, as beta's"
    );
    let alpha_egress = s.proposals().get("deployment-alpha-egress").await.unwrap();
    let beta_egress = s
        .proposals()
        .get("deployment-beta-egress")
        .await
        .unwrap_or(beta_egress);
    let port = |n: i32| format!("{:?}", Some(IntOrString::Int(n)));
    assert_eq!(
        egress_rules(&alpha_egress),
        [("api".to_owned(), port(8080))]
    );
    assert_eq!(egress_rules(&beta_egress), [("api".to_owned(), port(9090))]);
    let _ = std::fs::remove_dir_all(&s.dir);
}
