//! The Helm chart (`charts/network-enforcer`), rendered by the real Helm engine and checked
//! against the code it deploys.
//!
//! `charts/network-enforcer/tests/render.py` renders every provider × collector strategy and
//! a few variants with the Helm SDK embedded in `helm-python-sdk` (no helm binary), tries
//! values the schema must refuse, and runs `helm lint --strict`. This test runs it once into
//! a fresh directory (so a render can never be stale), then checks that:
//! - every object parses as its Kubernetes type and loses no field in the round trip;
//! - each provider gets exactly its components, mounts, args and RBAC;
//! - the containers' args are accepted by `ne-agent`'s and `ne-leader`'s own clap parsers and
//!   agree with the Services, volumes and ServiceAccounts they refer to;
//! - the admission policy and the collector config use the names the code uses
//!   (`ne_crds::PROMOTE_LABEL`, `ne_crds::Mode`, `ne_shared::otel_names`).
//!
//! Without Python or the package, the test fails and says how to install it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

#[path = "chart/support.rs"]
mod chart_support;
mod cluster;
use chart_support::*;

const PROVIDERS: [&str; 3] = ["cilium", "calico", "istio"];
const COLLECTORS: [&str; 3] = ["default", "external", "none"];

/// Directory the chart was rendered into, rendering it on first use.
fn rendered() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let script = repo.join("charts/network-enforcer/tests/render.py");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-render");
        let _ = std::fs::remove_dir_all(&out);
        let python = std::env::var("NE_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let how = "Python 3.11+ with pip is needed (NE_PYTHON names another interpreter); the \
                   pinned Helm SDK comes from charts/network-enforcer/tests/requirements.txt";
        let pythonpath = helm_sdk(&python, &repo, how);
        let mut render = Command::new(&python);
        render.arg(&script).arg("--out").arg(&out);
        if let Some(path) = &pythonpath {
            render.env("PYTHONPATH", path);
        }
        let output = render
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{python}` to render the chart ({e}): {how}"));
        assert!(
            output.status.success(),
            "rendering the chart failed: {how}\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        out
    })
}

/// Where the Helm SDK can be imported from: `None` when `python` has it already, else a
/// directory under the target dir, installed there (pinned, with pip) on first use, so the
/// README's test command works on a fresh machine.
fn helm_sdk(python: &str, repo: &Path, how: &str) -> Option<PathBuf> {
    let importable = |path: Option<&Path>| {
        let mut probe = Command::new(python);
        probe.args(["-c", "import helm_python.chart"]);
        if let Some(path) = path {
            probe.env("PYTHONPATH", path);
        }
        probe.output().is_ok_and(|o| o.status.success())
    };
    if importable(None) {
        return None;
    }
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-sdk");
    if !importable(Some(&target)) {
        let requirements = repo.join("charts/network-enforcer/tests/requirements.txt");
        let output = Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("--target")
            .arg(&target)
            .arg("-r")
            .arg(&requirements)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{python} -m pip` ({e}): {how}"));
        assert!(
            output.status.success(),
            "installing the Helm SDK failed: {how}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Some(target)
}

fn case(name: &str) -> Case {
    Case::load(rendered(), name)
}

fn matrix() -> impl Iterator<Item = (&'static str, &'static str, Case)> {
    PROVIDERS.into_iter().flat_map(|p| {
        COLLECTORS
            .into_iter()
            .map(move |c| (p, c, case(&format!("{p}-{c}"))))
    })
}

fn all_cases() -> Vec<Case> {
    let mut names: Vec<_> = std::fs::read_dir(rendered())
        .expect("render directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 9, "too few rendered cases: {names:?}");
    names.iter().map(|n| case(n)).collect()
}

#[test]
fn every_object_parses_as_its_kubernetes_type_and_loses_nothing() {
    for case in all_cases() {
        for object in &case.objects {
            round_trip(object).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let namespaced = !matches!(
                object["kind"].as_str(),
                Some(
                    "ClusterRole"
                        | "ClusterRoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                )
            );
            let ns = object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str);
            if namespaced {
                assert_eq!(ns, Some(NAMESPACE), "{}: {}", case.name, describe(object));
            } else {
                assert_eq!(ns, None, "{}: {}", case.name, describe(object));
            }
        }
    }
}

#[test]
fn each_provider_renders_exactly_its_components() {
    for (provider, collector, case) in matrix() {
        let agent_kind = if provider == "calico" {
            "Deployment"
        } else {
            "DaemonSet"
        };
        let mut expected: BTreeSet<(String, String)> = [
            ("ServiceAccount", "ne-leader"),
            ("Deployment", "ne-leader"),
            ("Service", "ne-leader"),
            ("Service", "ne-leader-metrics"),
            ("PodDisruptionBudget", "ne-leader"),
            ("ClusterRole", "ne-leader"),
            ("ClusterRoleBinding", "ne-leader"),
            ("Role", "ne-leader"),
            ("RoleBinding", "ne-leader"),
            ("ClusterRole", "ne-view"),
            ("ClusterRole", "ne-edit"),
            ("ValidatingAdmissionPolicy", "ne-promote-label"),
            ("ValidatingAdmissionPolicyBinding", "ne-promote-label"),
            ("ServiceAccount", "ne-agent"),
            (agent_kind, "ne-agent"),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_owned(), n.to_owned()))
        .collect();
        if collector == "default" {
            for kind in ["ConfigMap", "ServiceAccount", "Deployment", "Service"] {
                expected.insert((kind.to_owned(), "ne-otel-collector".to_owned()));
            }
        }
        assert_eq!(case.inventory(), expected, "{}", case.name);
    }
}

#[test]
fn agent_reads_its_providers_source_with_only_the_mounts_it_needs() {
    for provider in PROVIDERS {
        let case = case(&format!("{provider}-none"));
        let kind = if provider == "calico" {
            "Deployment"
        } else {
            "DaemonSet"
        };
        let workload = case.get(kind, "ne-agent");
        let pod = &workload["spec"]["template"]["spec"];
        let container = only_container(pod);
        let args = agent_args(pod);
        let host_paths: Vec<(String, String)> = host_path_mounts(pod);
        let security = &container["securityContext"];
        hardened(security, &case.name);
        assert_eq!(pod["automountServiceAccountToken"], json!(false));
        match provider {
            "cilium" => {
                assert_eq!(args.source, ne_node_agent::args::SourceKind::Hubble);
                let socket = args
                    .hubble_address
                    .strip_prefix("unix://")
                    .expect("the node's socket");
                assert_eq!(host_paths.len(), 1, "{host_paths:?}");
                let (host, mount) = &host_paths[0];
                assert_eq!(host, "/var/run/cilium");
                assert_eq!(Path::new(socket).parent(), Some(Path::new(mount)));
                assert_eq!(pod["securityContext"]["runAsUser"], json!(0));
            }
            "istio" => {
                assert_eq!(args.source, ne_node_agent::args::SourceKind::Ztunnel);
                assert_eq!(
                    host_paths,
                    [("/var/log/pods".to_owned(), "/var/log/pods".to_owned())]
                );
                assert_eq!(args.ztunnel_log_root, Path::new("/var/log/pods"));
                assert_eq!(args.ztunnel_namespace.as_deref(), Some("istio-system"));
                assert_eq!(pod["securityContext"]["runAsUser"], json!(0));
            }
            "calico" => {
                assert_eq!(args.source, ne_node_agent::args::SourceKind::Goldmane);
                assert!(host_paths.is_empty(), "{host_paths:?}");
                assert_eq!(workload["spec"]["replicas"], json!(1));
                assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
                assert_eq!(args.goldmane_address, "goldmane.calico-system.svc:7443");
                let tls = &args.goldmane_tls;
                for (file, source) in [
                    (&tls.cert, ("secret", "goldmane-key-pair", "tls.crt")),
                    (&tls.key, ("secret", "goldmane-key-pair", "tls.key")),
                    (
                        &tls.ca,
                        ("configMap", "goldmane-ca-bundle", "tigera-ca-bundle.crt"),
                    ),
                ] {
                    let file = file.as_deref().expect("goldmane TLS file");
                    assert_eq!(file_source(pod, file), source, "{}", file.display());
                }
            }
            _ => unreachable!(),
        }
        if provider != "calico" {
            assert!(
                pod["tolerations"]
                    .as_array()
                    .is_some_and(|t| t.contains(&json!({"operator": "Exists"}))),
                "the agent runs on every node by default"
            );
        }
        // Shipping: the leader-only Service, with a projected token for the leader.
        let leader_service = case.get("Service", "ne-leader");
        let port = named_port(leader_service, "ingest");
        assert_eq!(
            args.leader_address,
            [format!("ne-leader.{NAMESPACE}.svc:{port}")]
        );
        let token = args.leader_token_file.as_deref().expect("token file");
        let projection = projected_token(pod, token);
        assert_eq!(projection["audience"], json!(ne_leader::auth::AUDIENCE));
        assert_eq!(
            env_field(container, "NODE_NAME"),
            Some("spec.nodeName".to_owned())
        );
        assert_eq!(
            args.metrics_address.port(),
            container_port(container, "metrics")
        );
        probes(container);
        assert_eq!(
            pod["serviceAccountName"],
            json!("ne-agent"),
            "the leader's --agent-service-accounts names this account"
        );
    }
}

#[test]
fn cilium_relay_mode_uses_tls_files_from_the_secret_and_no_host_path() {
    let case = case("cilium-relay-tls");
    let pod = &case.get("DaemonSet", "ne-agent")["spec"]["template"]["spec"];
    let args = agent_args(pod);
    assert_eq!(args.hubble_address, "hubble-relay.kube-system.svc:443");
    assert!(host_path_mounts(pod).is_empty());
    assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
    let tls = &args.hubble_tls;
    assert_eq!(
        tls.server_name.as_deref(),
        Some("ui.hubble-relay.cilium.io")
    );
    for (file, key) in [
        (&tls.ca, "ca.crt"),
        (&tls.cert, "tls.crt"),
        (&tls.key, "tls.key"),
    ] {
        let file = file.as_deref().expect("relay TLS file");
        assert_eq!(
            file_source(pod, file),
            ("secret", "hubble-relay-client", key)
        );
    }
    let plain = case_args("cilium-relay-plain");
    assert_eq!(plain.hubble_address, "hubble-relay.kube-system.svc:80");
    assert!(plain.hubble_tls.ca.is_none() && plain.hubble_tls.cert.is_none());
}

fn case_args(name: &str) -> ne_node_agent::args::Args {
    let case = case(name);
    agent_args(&case.get("DaemonSet", "ne-agent")["spec"]["template"]["spec"])
}

#[test]
fn calico_tls_names_are_configurable() {
    let case = case("calico-custom-tls");
    let pod = &case.get("Deployment", "ne-agent")["spec"]["template"]["spec"];
    let args = agent_args(pod);
    let tls = &args.goldmane_tls;
    assert_eq!(
        file_source(pod, tls.ca.as_deref().unwrap()),
        ("configMap", "my-goldmane-ca", "ca.crt")
    );
    assert_eq!(
        file_source(pod, tls.cert.as_deref().unwrap()),
        ("secret", "my-goldmane-client", "tls.crt")
    );
    assert_eq!(
        tls.server_name.as_deref(),
        Some("goldmane.calico-system.svc")
    );
}

#[test]
fn leader_args_parse_and_agree_with_the_release() {
    for (provider, _, case) in matrix() {
        let deployment = case.get("Deployment", "ne-leader");
        assert_eq!(deployment["spec"]["replicas"], json!(2));
        let pod = &deployment["spec"]["template"]["spec"];
        let container = only_container(pod);
        hardened(&container["securityContext"], &case.name);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
        let run = leader_args(container);
        assert_eq!(
            format!("{:?}", run.provider).to_lowercase(),
            provider,
            "{}",
            case.name
        );
        let agent_sa = format!("{NAMESPACE}:ne-agent");
        assert_eq!(run.agent_service_accounts, [agent_sa]);
        // The pod's own namespace, through the downward API.
        assert_eq!(run.lease_namespace, "<metadata.namespace>");
        assert_eq!(run.identity.as_deref(), Some("<metadata.name>"));
        assert!(!run.insecure_ingest && !run.standalone);
        assert_eq!(run.output, None);
        let excluded: BTreeSet<_> = run.exclude_namespaces.iter().map(String::as_str).collect();
        assert_eq!(excluded, BTreeSet::from(["kube-system", NAMESPACE]));
        assert_eq!(
            run.ingest_address.port(),
            container_port(container, "ingest")
        );
        assert_eq!(
            run.metrics_address.port(),
            container_port(container, "metrics")
        );
        probes(container);

        // The ingest Service reaches only the pod holding the Lease.
        let service = case.get("Service", "ne-leader");
        let selector = service["spec"]["selector"].as_object().unwrap();
        assert_eq!(selector.get(LEADER_POD_LABEL), Some(&json!("true")));
        let pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        for (k, v) in selector {
            if k != LEADER_POD_LABEL {
                assert_eq!(pod_labels.get(k), Some(v), "selector {k}");
            }
        }
        assert!(
            !pod_labels.contains_key(LEADER_POD_LABEL),
            "set by the leader only"
        );
        assert_eq!(service["spec"]["ports"][0]["targetPort"], json!("ingest"));
        let pdb = case.get("PodDisruptionBudget", "ne-leader");
        assert_eq!(pdb["spec"]["minAvailable"], json!(1));
        assert_eq!(
            pdb["spec"]["selector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"]
        );
        assert_eq!(
            pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
                [0]["podAffinityTerm"]["labelSelector"]["matchLabels"],
            deployment["spec"]["selector"]["matchLabels"]
        );
    }
    let single = case("istio-one-leader-no-admission");
    assert!(single.find("PodDisruptionBudget", "ne-leader").is_none());
    assert!(
        single
            .find("ValidatingAdmissionPolicy", "ne-promote-label")
            .is_none()
    );
    let run = leader_args(only_container(
        &single.get("Deployment", "ne-leader")["spec"]["template"]["spec"],
    ));
    assert_eq!(
        run.exclude_namespaces,
        ["kube-system", "istio-system", NAMESPACE]
    );
}

#[test]
fn rbac_is_least_privilege_and_split_by_component() {
    let crd_group = ne_crds::GROUP;
    for (provider, _, case) in matrix() {
        let cluster = rules(case.get("ClusterRole", "ne-leader"));
        let mut expected: BTreeSet<Rule> = BTreeSet::new();
        let mut grant = |group: &str, resources: &[&str], verbs: &[&str]| {
            for r in resources {
                for v in verbs {
                    expected.insert((group.to_owned(), (*r).to_owned(), (*v).to_owned()));
                }
            }
        };
        let read = ["get", "list", "watch"];
        let full = [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ];
        grant("", &["pods", "namespaces"], &read);
        grant(
            "apps",
            &["replicasets", "deployments", "statefulsets", "daemonsets"],
            &read,
        );
        // Job → CronJob owners: Jobs are peers, named by their CronJob.
        grant("batch", &["jobs", "cronjobs"], &read);
        let [(_, wnpp), (_, wnp)] = ne_crds::crds();
        let plural = |c: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition| c.spec.names.plural.clone();
        let (wnpp, wnp) = (plural(&wnpp), plural(&wnp));
        grant(crd_group, &[&wnpp, &wnp], &full);
        grant(
            crd_group,
            &[&format!("{wnpp}/status"), &format!("{wnp}/status")],
            &["get", "update", "patch"],
        );
        grant("networking.k8s.io", &["networkpolicies"], &full);
        if provider == "istio" {
            grant("security.istio.io", &["authorizationpolicies"], &full);
        }
        grant("", &["events"], &["create", "patch"]);
        grant("events.k8s.io", &["events"], &["create", "patch"]);
        grant("authentication.k8s.io", &["tokenreviews"], &["create"]);
        assert_eq!(cluster, expected, "{}", case.name);

        let role = rules(case.get("Role", "ne-leader"));
        let mut expected_role = BTreeSet::new();
        for v in ["get", "create", "update", "patch"] {
            expected_role.insert(("coordination.k8s.io".into(), "leases".into(), v.into()));
        }
        for v in ["get", "patch"] {
            expected_role.insert(("".into(), "pods".into(), v.into()));
        }
        assert_eq!(role, expected_role);

        for kind in ["ClusterRoleBinding", "RoleBinding"] {
            let binding = case.get(kind, "ne-leader");
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "ne-leader", "namespace": NAMESPACE}])
            );
            assert_eq!(binding["roleRef"]["name"], json!("ne-leader"));
        }
        // Nothing reads Secrets or ConfigMaps, nothing uses wildcards, nothing binds the agent.
        for object in &case.objects {
            if let Some(list) = object["rules"].as_array() {
                for (group, resource, verb) in rules(object) {
                    assert!(
                        !matches!(resource.as_str(), "secrets" | "configmaps"),
                        "{}: {group}/{resource} {verb}",
                        describe(object)
                    );
                    assert!(group != "*" && resource != "*" && verb != "*");
                }
                assert!(!list.is_empty());
            }
            if let Some(subjects) = object["subjects"].as_array() {
                assert!(subjects.iter().all(|s| s["name"] != json!("ne-agent")));
            }
        }
    }
}

#[test]
fn aggregated_roles_let_edit_promote_and_acknowledge_and_view_only_read() {
    let case = case("cilium-none");
    let [(_, wnpp), (_, wnp)] = ne_crds::crds();
    let (wnpp, wnp) = (wnpp.spec.names.plural, wnp.spec.names.plural);
    let group = ne_crds::GROUP;
    let view = aggregated(&case, "view");
    let edit = aggregated(&case, "edit");
    let admin = aggregated(&case, "admin");
    for role in [&view, &edit, &admin] {
        for resource in [&wnpp, &wnp] {
            for verb in ["get", "list", "watch"] {
                assert!(role.contains(&(group.into(), resource.clone(), verb.into())));
            }
        }
    }
    // Promote = label the proposal; acknowledge = annotate the policy; mode = patch; delete.
    for role in [&edit, &admin] {
        assert!(role.contains(&(group.into(), wnpp.clone(), "patch".into())));
        for verb in ["patch", "update", "delete"] {
            assert!(role.contains(&(group.into(), wnp.clone(), verb.into())));
        }
    }
    let writes: Vec<_> = view
        .iter()
        .filter(|(_, _, v)| !matches!(v.as_str(), "get" | "list" | "watch"))
        .collect();
    assert!(writes.is_empty(), "view can write: {writes:?}");
    // Nobody but the leader creates proposals or writes status.
    for role in [&view, &edit, &admin] {
        assert!(
            role.iter()
                .all(|(_, r, v)| v != "create" && !r.ends_with("/status"))
        );
    }
}

#[test]
fn admission_policy_allows_only_the_modes_the_code_knows() {
    let case = case("calico-default");
    let policy = case.get("ValidatingAdmissionPolicy", "ne-promote-label");
    let binding = case.get("ValidatingAdmissionPolicyBinding", "ne-promote-label");
    assert_eq!(binding["spec"]["policyName"], json!("ne-promote-label"));
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let [(_, wnpp), _] = ne_crds::crds();
    assert_eq!(
        policy["spec"]["matchConstraints"]["resourceRules"],
        json!([{
            "apiGroups": [ne_crds::GROUP],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": [wnpp.spec.names.plural],
        }])
    );
    let validations = policy["spec"]["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 1);
    let expression = validations[0]["expression"].as_str().unwrap();
    assert!(expression.contains(ne_crds::PROMOTE_LABEL));
    let modes: Vec<String> = [ne_crds::Mode::Monitor, ne_crds::Mode::Protect]
        .iter()
        .map(|m| {
            serde_json::to_value(m)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let with_labels = |labels: Value| json!({"metadata": {"name": "x", "labels": labels}});
    let label = ne_crds::PROMOTE_LABEL;
    assert!(cel_allows(expression, &json!({"metadata": {"name": "x"}})));
    assert!(cel_allows(expression, &with_labels(json!({"app": "web"}))));
    for mode in &modes {
        assert!(
            cel_allows(expression, &with_labels(json!({label: mode}))),
            "{mode}"
        );
    }
    for bad in ["enforce", "Monitor", "", "true"] {
        assert!(
            !cel_allows(expression, &with_labels(json!({label: bad}))),
            "{bad:?}"
        );
    }
    assert!(validations[0]["message"].as_str().unwrap().contains(label));
}

#[test]
fn collector_counts_violation_events_by_the_fixed_attributes() {
    use ne_shared::otel_names as names;
    for provider in PROVIDERS {
        let case = case(&format!("{provider}-default"));
        let config_map = case.get("ConfigMap", "ne-otel-collector");
        let text = config_map["data"]["config.yaml"].as_str().unwrap();
        let config: Value = serde_saphyr::from_str(text).expect("collector config is YAML");
        let counters = config["connectors"]["count"]["logs"].as_object().unwrap();
        assert_eq!(
            counters.keys().collect::<Vec<_>>(),
            [names::COLLECTOR_VIOLATION_COUNTER]
        );
        let counter = &counters[names::COLLECTOR_VIOLATION_COUNTER];
        assert_eq!(
            counter["conditions"],
            json!([format!(
                "attributes[\"{}\"] == \"{}\"",
                names::EVENT_NAME_ATTRIBUTE,
                names::EVENT_VIOLATION_OBSERVED
            )])
        );
        let keys: Vec<&str> = counter["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            names::violation_counter_dimensions().collect::<Vec<_>>()
        );
        check_pipelines(&config);

        // The components export to this collector's OTLP port, in plain text.
        let grpc = config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
            .as_str()
            .unwrap();
        let service = case.get("Service", "ne-otel-collector");
        let port = named_port(service, "otlp-grpc");
        assert!(grpc.ends_with(&format!(":{port}")), "{grpc}");
        let prometheus = config["exporters"]["prometheus"]["endpoint"]
            .as_str()
            .unwrap();
        assert!(prometheus.ends_with(&format!(":{}", named_port(service, "prometheus"))));
        for container in component_containers(&case) {
            assert_eq!(
                env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT").as_deref(),
                Some(format!("http://ne-otel-collector.{NAMESPACE}.svc:{port}").as_str())
            );
            assert_eq!(env_value(container, "OTEL_SDK_DISABLED"), None);
        }
        let deployment = case.get("Deployment", "ne-otel-collector");
        assert!(
            deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                .is_string(),
            "config changes roll the collector"
        );
    }
}

#[test]
fn exporters_follow_the_collector_strategy() {
    for (_, collector, case) in matrix() {
        for container in component_containers(&case) {
            let endpoint = env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT");
            match collector {
                "none" => {
                    assert_eq!(endpoint, None);
                    assert_eq!(
                        env_value(container, "OTEL_SDK_DISABLED").as_deref(),
                        Some("true")
                    );
                }
                "external" => {
                    assert_eq!(endpoint.as_deref(), Some("https://otel.example:4317"));
                }
                _ => assert!(endpoint.is_some()),
            }
            if collector != "none" {
                assert_eq!(
                    env_value(container, "OTEL_EXPORTER_OTLP_PROTOCOL").as_deref(),
                    Some("grpc"),
                    "gRPC unless asked otherwise"
                );
            }
        }
    }
    // HTTP/protobuf to an external collector: both binaries get the protocol, and their own
    // parser of the variables accepts what the chart renders.
    let http = case("cilium-external-http");
    for container in component_containers(&http) {
        let env = |k: &str| env_value(container, k);
        assert_eq!(
            env("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref(),
            Some("http/protobuf")
        );
        let config = ne_telemetry::otlp::OtlpConfig::from_env(env, "ne", &[])
            .unwrap()
            .expect("metrics exported");
        assert_eq!(
            config.export.endpoint,
            "http://otel.example:4318/v1/metrics"
        );
        let logs = ne_telemetry::logs::LogsConfig::from_env(env, "ne", &[])
            .unwrap()
            .expect("logs exported");
        assert_eq!(logs.export.endpoint, "http://otel.example:4318/v1/logs");
    }
    // TLS: the CA (and the client pair, when asked) come from the mounted Secret; an https
    // endpoint without a CA is refused by the schema (external-https-without-ca).
    for provider in PROVIDERS {
        let external = case(&format!("{provider}-external"));
        for pod in component_pods(&external) {
            let container = only_container(pod);
            let ca = env_value(container, "OTEL_EXPORTER_OTLP_CERTIFICATE").expect("CA");
            assert_eq!(
                file_source(pod, Path::new(&ca)),
                ("secret", "otel-ca", "ca.crt")
            );
            assert_eq!(
                env_value(container, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
                None
            );
        }
    }
    let mtls = case("istio-external-mtls");
    for pod in component_pods(&mtls) {
        let container = only_container(pod);
        for (var, key) in [
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "ca.crt"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "tls.crt"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "tls.key"),
        ] {
            let file = env_value(container, var).unwrap_or_else(|| panic!("{var}"));
            assert_eq!(
                file_source(pod, Path::new(&file)),
                ("secret", "otel-client", key)
            );
        }
    }
    let tls = case("cilium-default-tls");
    let config: Value = serde_saphyr::from_str(
        tls.get("ConfigMap", "ne-otel-collector")["data"]["config.yaml"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let served = &config["receivers"]["otlp"]["protocols"]["grpc"]["tls"];
    let collector_pod = &tls.get("Deployment", "ne-otel-collector")["spec"]["template"]["spec"];
    for (field, key) in [("cert_file", "tls.crt"), ("key_file", "tls.key")] {
        let file = served[field].as_str().unwrap();
        assert_eq!(
            file_source(collector_pod, Path::new(file)),
            ("secret", "otel-tls", key)
        );
    }
    for pod in component_pods(&tls) {
        let container = only_container(pod);
        let endpoint = env_value(container, "OTEL_EXPORTER_OTLP_ENDPOINT").unwrap();
        assert!(endpoint.starts_with("https://"), "{endpoint}");
        let ca = env_value(container, "OTEL_EXPORTER_OTLP_CERTIFICATE").unwrap();
        assert_eq!(
            file_source(pod, Path::new(&ca)),
            ("secret", "otel-tls", "ca.crt")
        );
        assert_eq!(env_value(container, "OTEL_EXPORTER_OTLP_CLIENT_KEY"), None);
    }
}

#[test]
fn values_schema_rejects_what_it_should() {
    let text = std::fs::read_to_string(rendered().join("rejections.json")).unwrap();
    let results: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    assert!(results.len() >= 15, "{} rejection cases", results.len());
    for (name, result) in &results {
        let error = result["error"].as_str().unwrap_or_default();
        assert_eq!(result["rejected"], json!(true), "{name} was accepted");
        assert!(error.contains("HelmValuesError"), "{name}: {error}");
        let word = result["expect"].as_str().unwrap();
        assert!(error.contains(word), "{name}: `{word}` not in {error}");
    }
}

#[test]
fn helm_lint_strict_passes() {
    let text = std::fs::read_to_string(rendered().join("lint.json")).unwrap();
    let lint: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(
        lint.keys().map(String::as_str).collect::<Vec<_>>(),
        ["calico", "cilium", "istio"]
    );
    for (provider, report) in lint {
        assert_eq!(report["errors"], json!([]), "{provider}");
        for message in report["messages"].as_array().unwrap() {
            // 1 = info (e.g. "icon is recommended"); 2 = warning and 3 = error fail --strict.
            assert!(
                message["severity"].as_i64() < Some(2),
                "{provider}: {message}"
            );
        }
    }
}

#[test]
fn notes_tell_the_next_commands() {
    for provider in PROVIDERS {
        let notes = case(&format!("{provider}-default")).notes;
        assert!(notes.contains("kubectl get wnpp -A"));
        assert!(notes.contains(&format!("{}=monitor", ne_crds::PROMOTE_LABEL)));
        assert!(notes.contains(ne_crds::ACKNOWLEDGE_ANNOTATION_PREFIX));
        assert!(notes.contains("port-forward svc/ne-otel-collector"));
        assert_eq!(notes.contains("goldmane-key-pair"), provider == "calico");
    }
}

/// Against a real API server: the chart's ClusterRoles, aggregated by the cluster into the
/// built-in `view` and `edit` roles, let a namespace `edit` user promote a proposal (patch),
/// change and acknowledge a policy (patch) and delete it, and a `view` user only read.
/// Answered by SubjectAccessReviews for ServiceAccounts bound in a temporary namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_edit_users_promote_and_acknowledge_and_view_users_only_read() {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
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
    let case = case("cilium-none");
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
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let allowed = |user: &'static str, verb: &'static str, resource: &'static str| {
        let reviews = reviews.clone();
        let ns_name = ns_name.clone();
        async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(format!("system:serviceaccount:{ns_name}:{user}")),
                    groups: Some(vec!["system:serviceaccounts".to_owned()]),
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(ns_name.clone()),
                        group: Some(ne_crds::GROUP.to_owned()),
                        resource: Some(resource.to_owned()),
                        verb: Some(verb.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap();
            answer.status.is_some_and(|s| s.allowed)
        }
    };
    let (wnpp, wnp) = ("workloadnetworkpolicyproposals", "workloadnetworkpolicies");
    // Aggregation is asynchronous (the cluster-role aggregation controller): poll.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(allowed("editor", "patch", wnpp).await && allowed("viewer", "list", wnp).await) {
        assert!(
            std::time::Instant::now() < deadline,
            "the roles were not aggregated in 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
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
