//! `kubectl netenforcer` against the real API server: found by the real `kubectl` on `PATH`,
//! run with a kubeconfig, reading and writing the custom resources as a user would.
//!
//! - `status` lists a proposal with its evidence and a policy with its violations, as a
//!   table and as JSON, in one namespace and in all;
//! - `promote`, `protect`, `monitor` and `ack` make the label, field and annotation changes,
//!   and refuse an unknown object or violation id before writing anything;
//! - `explain` judges each rule of a policy against a record, and the rule it prints, pasted
//!   into the policy, allows the flow; a user who may not read the peer is told what is
//!   missing;
//! - `diff` tells which of a policy's peers and ports a hand-written NetworkPolicy on the
//!   same pods already allows, what protect mode removes, and what was seen and not allowed;
//! - a user whose RBAC allows nothing gets a message that says so.

mod cluster;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use cluster::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use ne_crds::{
    ACKNOWLEDGE_ANNOTATION_PREFIX, Mode, PROMOTE_LABEL, PeerEvidence, WorkloadNetworkPolicy,
    WorkloadNetworkPolicyProposal, WorkloadNetworkPolicyProposalStatus,
};
use serde_json::{Value, json};

/// `kubectl netenforcer ARGS` with `kubeconfig`: the plugin is found on `PATH`.
fn plugin(kubeconfig: &Path, args: &[&str]) -> Output {
    let dir = binary("kubectl-netenforcer")
        .parent()
        .unwrap()
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let mut command = Command::new(kubectl_binary());
    command
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .env_remove("NO_COLOR")
        .arg("netenforcer")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command.output().expect("kubectl runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The plugin's stdout; panics with its stderr when it failed.
fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The plugin's stderr; panics when it succeeded.
fn failed(output: Output) -> String {
    assert!(
        !output.status.success(),
        "expected a failure, got: {}",
        text(&output.stdout)
    );
    text(&output.stderr)
}

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// A proposal with two learned peers and a policy in monitor mode with two violation
/// records, in `ns`.
async fn objects(client: &Client, ns: &str) {
    let spec = |direction: &str| {
        json!({
            "backend": "kubernetes",
            "kubernetes": {"podSelector": {"matchLabels": {"app": "api"}},
                           "policyTypes": [direction]},
            "targetRef": {"kind": "Deployment", "name": "api"},
            "direction": direction,
        })
    };
    let proposals: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), ns);
    let proposal: WorkloadNetworkPolicyProposal = object(json!({
        "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
        "kind": "WorkloadNetworkPolicyProposal",
        "metadata": {"name": "deployment-api-egress"},
        "spec": spec("Egress"),
    }));
    proposals
        .create(&PostParams::default(), &proposal)
        .await
        .unwrap();
    let ago = |hours: i64| Time(Timestamp::now() - SignedDuration::from_hours(hours));
    let row = |peer: &str, protocol: &str, port, first| PeerEvidence {
        peer: peer.to_owned(),
        protocol: protocol.to_owned(),
        port,
        first_seen: ago(first),
        last_seen: ago(1),
        flow_count: 6,
        dns_name: None,
    };
    let mut status = WorkloadNetworkPolicyProposalStatus {
        peers: vec![
            row("ip:203.0.113.10/32", "TCP", 443, 100),
            row("pods:kube-system/k8s-app=kube-dns", "UDP", 53, 72),
        ],
        flow_count: 12,
        ..Default::default()
    };
    status.summarize();
    proposals
        .patch_status(
            "deployment-api-egress",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap();

    let policies: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), ns);
    let mut spec = spec("Ingress");
    spec["mode"] = json!("monitor");
    let policy: WorkloadNetworkPolicy = object(json!({
        "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
        "kind": "WorkloadNetworkPolicy",
        "metadata": {"name": "deployment-api-ingress"},
        "spec": spec,
    }));
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let record = |id: i64, port: i32| {
        json!({
            "id": id, "firstSeen": "2026-12-01T10:00:00Z", "lastSeen": "2026-12-01T11:00:00Z",
            "count": 3, "source": {"namespace": ns, "kind": "Deployment", "name": "web"},
            "destination": {"namespace": ns, "kind": "Deployment", "name": "api"},
            "protocol": "TCP", "port": port, "direction": "Ingress", "mode": "monitor",
            "reason": "PortNotAllowed",
        })
    };
    let status = json!({"status": {
        "violations": [record(2, 9091), record(1, 9090)],
        "activeViolationCount": 2, "violationCount": 6, "lastViolationId": 2,
        "lastViolationTime": "2026-12-01T11:00:00Z",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Monitoring",
                        "message": "", "lastTransitionTime": "2026-12-01T09:00:00Z"}],
    }});
    policies
        .patch_status(
            "deployment-api-ingress",
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_proposals_and_policies_as_table_and_json() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-kubectl-status").await;
    objects(&client, &ns.name).await;

    let table = ok(plugin(kubeconfig(), &["status", "-n", &ns.name]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("NAMESPACE"), "{table}");
    assert!(!table.contains('\x1b'), "no colour when not on a terminal");
    // Sorted by workload and direction: egress (the proposal) first.
    let proposal: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        proposal,
        [
            &ns.name,
            "deployment-api-egress",
            "proposal",
            "-",
            "Deployment/api",
            "Egress",
            "2",
            "TCP/443,UDP/53",
            "12",
            "3d",
            "-",
            "-",
            "-",
            "-"
        ]
    );
    let policy: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        &policy[..7],
        [
            &ns.name,
            "deployment-api-ingress",
            "policy",
            "monitor",
            "Deployment/api",
            "Ingress",
            "-"
        ]
    );
    assert_eq!(policy[10], "2", "active violations: {table}");
    assert_eq!(policy[13..], ["Monitoring", "-"], "{table}");

    let json: Value = serde_json::from_str(&ok(plugin(
        kubeconfig(),
        &["status", "-n", &ns.name, "-o", "json"],
    )))
    .unwrap();
    assert_eq!(json[0]["peers"], 2);
    assert_eq!(json[1]["activeViolations"], 2);
    assert_eq!(json[1]["lastViolation"], "2026-12-01T11:00:00Z");
    let all = ok(plugin(kubeconfig(), &["status", "-A", "-o", "json"]));
    let all: Value = serde_json::from_str(&all).unwrap();
    let ours = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["namespace"] == json!(ns.name))
        .count();
    assert_eq!(ours, 2, "-A lists this namespace's rows too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_protect_monitor_and_ack_write_what_a_user_would() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-kubectl-act").await;
    objects(&client, &ns.name).await;
    let n = ns.name.as_str();
    let proposals: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), n);
    let policies: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), n);

    // No leader runs here: the label stays where the plugin put it.
    ok(plugin(
        kubeconfig(),
        &[
            "promote",
            "deployment-api-egress",
            "--mode",
            "monitor",
            "-n",
            n,
        ],
    ));
    let labels = proposals
        .get("deployment-api-egress")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels.get(PROMOTE_LABEL).map(String::as_str),
        Some("monitor")
    );
    let missing = failed(plugin(
        kubeconfig(),
        &[
            "promote",
            "deployment-api-egres",
            "--mode",
            "protect",
            "-n",
            n,
        ],
    ));
    assert!(
        missing.contains("no proposal \"deployment-api-egres\"")
            && missing.contains("kubectl get workloadnetworkpolicyproposals"),
        "{missing}"
    );

    ok(plugin(
        kubeconfig(),
        &["protect", "deployment-api-ingress", "-n", n],
    ));
    let mode = || async {
        policies
            .get("deployment-api-ingress")
            .await
            .unwrap()
            .spec
            .mode
    };
    assert_eq!(mode().await, Mode::Protect);
    ok(plugin(
        kubeconfig(),
        &["monitor", "deployment-api-ingress", "-n", n],
    ));
    assert_eq!(mode().await, Mode::Monitor);

    // An unknown id: refused, and nothing is written (not even the known one).
    let unknown = failed(plugin(
        kubeconfig(),
        &[
            "ack",
            "deployment-api-ingress",
            "1",
            "7",
            "--reason",
            "expected",
            "-n",
            n,
        ],
    ));
    assert!(
        unknown.contains("no active violation 7")
            && unknown.contains("its active records are 2, 1"),
        "{unknown}"
    );
    let annotations = || async {
        policies
            .get("deployment-api-ingress")
            .await
            .unwrap()
            .metadata
            .annotations
            .unwrap_or_default()
    };
    assert!(
        annotations()
            .await
            .keys()
            .all(|k| !k.starts_with(ACKNOWLEDGE_ANNOTATION_PREFIX))
    );
    ok(plugin(
        kubeconfig(),
        &[
            "ack",
            "deployment-api-ingress",
            "1",
            "2",
            "--reason",
            "web scrapes metrics",
            "-n",
            n,
        ],
    ));
    let annotations = annotations().await;
    for id in ["1", "2"] {
        assert_eq!(
            annotations
                .get(&format!("{ACKNOWLEDGE_ANNOTATION_PREFIX}{id}"))
                .map(String::as_str),
            Some("web scrapes metrics")
        );
    }
}

/// A kubeconfig for the cluster under test with a token of ServiceAccount `ns/name` (made
/// if missing) instead of the admin's certificate.
async fn kubeconfig_of(client: &Client, ns: &str, name: &str) -> std::path::PathBuf {
    service_account(client, ns, name).await;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(600),
            bound_object_ref: None,
        },
        ..TokenRequest::default()
    };
    let token = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut config =
        kube::config::Kubeconfig::from_yaml(&std::fs::read_to_string(kubeconfig()).unwrap())
            .unwrap();
    for user in &mut config.auth_infos {
        let auth = user.auth_info.get_or_insert_with(Default::default);
        *auth = kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        };
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{ns}"));
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_judges_each_rule_and_its_rule_to_add_allows_the_flow() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let client = client().await;
    install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-kubectl-explain").await;
    objects(&client, &ns.name).await;
    let n = ns.name.as_str();
    // The peer of the records: Deployment web, whose selector is narrower than its pods'
    // labels.
    let web: Deployment = object(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            },
        },
    }));
    Api::<Deployment>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &web)
        .await
        .unwrap();
    // The policy admits web's pods on 8080 only: record 1 (TCP 9090) is PortNotAllowed.
    let policies: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), n);
    let rule_for_web = json!({
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}},
                  "podSelector": {"matchLabels": {"tier": "front"}}}],
        "ports": [{"protocol": "TCP", "port": 8080}],
    });
    let set_rules = |rules: Value| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    "deployment-api-ingress",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"kubernetes": {"ingress": rules}}})),
                )
                .await
                .unwrap();
        }
    };
    set_rules(json!([rule_for_web])).await;

    let text = ok(plugin(
        kubeconfig(),
        &["explain", "deployment-api-ingress", "1", "-n", n],
    ));
    assert!(text.contains("reason: PortNotAllowed"), "{text}");
    assert!(
        text.contains("[0] peer: yes  port: no   protocol: -    <- nearest: same peer, other port"),
        "{text}"
    );
    assert!(
        text.contains("To allow it, add this rule to spec.kubernetes.ingress:"),
        "{text}"
    );
    let json: Value = serde_json::from_str(&ok(plugin(
        kubeconfig(),
        &[
            "explain",
            "deployment-api-ingress",
            "1",
            "-n",
            n,
            "-o",
            "json",
        ],
    )))
    .unwrap();
    let rule = json["ruleToAdd"].clone();
    // Web's pods by web's own selector, in web's namespace, on the record's port.
    assert_eq!(
        rule["from"][0]["podSelector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(rule["ports"], json!([{"protocol": "TCP", "port": 9090}]));
    assert_eq!(json["decision"], "PortNotAllowed");

    // Pasted into the policy, the rule allows the flow (the leader's engine says so).
    set_rules(json!([rule_for_web, rule])).await;
    let json: Value = serde_json::from_str(&ok(plugin(
        kubeconfig(),
        &[
            "explain",
            "deployment-api-ingress",
            "1",
            "-n",
            n,
            "-o",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(json["decision"], "Allowed by rule 1");

    // An unknown id is refused with the ones there are.
    let unknown = failed(plugin(
        kubeconfig(),
        &["explain", "deployment-api-ingress", "7", "-n", n],
    ));
    assert!(
        unknown.contains("no violation record 7 (active: 2, 1)"),
        "{unknown}"
    );

    // A user who may read the policy but not the peer's Deployment nor the namespace: the
    // explanation still comes, saying what it could not read.
    let role: Role = object(json!({
        "metadata": {"name": "wnp-reader"},
        "rules": [{"apiGroups": ["networkenforcer.kubewarden.io"],
                   "resources": ["workloadnetworkpolicies"], "verbs": ["get"]}],
    }));
    Api::<Role>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = object(json!({
        "metadata": {"name": "wnp-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "wnp-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": n}],
    }));
    Api::<RoleBinding>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let reader = kubeconfig_of(&client, n, "reader").await;
    let text = ok(plugin(
        &reader,
        &["explain", "deployment-api-ingress", "2", "-n", n],
    ));
    assert!(
        text.contains(&format!("cannot read Deployment {n}/web (forbidden)")),
        "{text}"
    );
    assert!(
        text.contains(&format!("cannot read namespace {n} (forbidden)")),
        "{text}"
    );
    assert!(text.contains("narrow its podSelector"), "{text}");
    let _ = std::fs::remove_file(&reader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_compares_with_the_native_policies_on_the_same_pods() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let client = client().await;
    install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-kubectl-diff").await;
    objects(&client, &ns.name).await;
    let n = ns.name.as_str();
    let api: Deployment = object(json!({
        "metadata": {"name": "api"},
        "spec": {
            "selector": {"matchLabels": {"app": "api"}},
            "template": {
                "metadata": {"labels": {"app": "api"}},
                "spec": {"containers": [{"name": "api", "image": "api:1"}]},
            },
        },
    }));
    Api::<Deployment>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &api)
        .await
        .unwrap();
    let pods = |ns: &str, app: &str| {
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
               "podSelector": {"matchLabels": {"app": app}}})
    };
    Api::<WorkloadNetworkPolicy>::namespaced(client.clone(), n)
        .patch(
            "deployment-api-ingress",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"kubernetes": {"ingress": [
                {"from": [pods(n, "web")], "ports": [{"protocol": "TCP", "port": 8080}]},
                {"from": [pods("monitoring", "prometheus")], "ports": [{"protocol": "TCP", "port": 9090}]},
            ]}}})),
        )
        .await
        .unwrap();
    // A hand-written NetworkPolicy already lets Prometheus scrape the api pods.
    let scrapes: NetworkPolicy = object(json!({
        "metadata": {"name": "allow-scrapes"},
        "spec": {"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [pods("monitoring", "prometheus")],
                              "ports": [{"protocol": "TCP", "port": 9090}]}]},
    }));
    Api::<NetworkPolicy>::namespaced(client.clone(), n)
        .create(&PostParams::default(), &scrapes)
        .await
        .unwrap();

    let d: Value = serde_json::from_str(&ok(plugin(
        kubeconfig(),
        &["diff", "deployment-api-ingress", "-n", n, "-o", "json"],
    )))
    .unwrap();
    assert_eq!(d["native"], json!(["NetworkPolicy allow-scrapes"]));
    let statuses: Vec<&str> = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["new", "allowed"]);
    assert_eq!(
        d["entries"][1]["by"],
        json!(["NetworkPolicy allow-scrapes"])
    );
    assert_eq!(d["seenNotAllowed"].as_array().unwrap().len(), 2);
    let text = ok(plugin(
        kubeconfig(),
        &["diff", "deployment-api-ingress", "-n", n],
    ));
    assert!(
        text.contains("Seen since promotion and not allowed (2 active violations)"),
        "{text}"
    );

    // The egress proposal: nothing restricts the pods' egress today, so protect mode would
    // take all of it away (the proposal learned no egress rule).
    let d: Value = serde_json::from_str(&ok(plugin(
        kubeconfig(),
        &["diff", "wnpp/deployment-api-egress", "-n", n, "-o", "json"],
    )))
    .unwrap();
    assert_eq!(d["native"], json!([]));
    assert!(
        d["removes"]
            .as_str()
            .unwrap()
            .starts_with("every egress connection"),
        "{d}"
    );
    let missing = failed(plugin(
        kubeconfig(),
        &["diff", "deployment-db-ingress", "-n", n],
    ));
    assert!(missing.contains("no proposal or policy"), "{missing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_rights_is_told_so() {
    let client = client().await;
    install_crds(&client).await;
    let ns = TempNamespace::new(&client, "ne-kubectl-rbac").await;
    objects(&client, &ns.name).await;
    let path = kubeconfig_of(&client, &ns.name, "nobody").await;
    let listing = failed(plugin(&path, &["status", "-n", &ns.name]));
    assert!(
        listing.contains("your permissions do not allow you to list"),
        "{listing}"
    );
    let promoting = failed(plugin(
        &path,
        &[
            "promote",
            "deployment-api-egress",
            "--mode",
            "monitor",
            "-n",
            &ns.name,
        ],
    ));
    assert!(
        promoting.contains("your permissions do not allow you to read"),
        "{promoting}"
    );
    let _ = std::fs::remove_file(&path);
}
