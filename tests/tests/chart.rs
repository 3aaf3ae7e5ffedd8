//! The Helm chart (`charts/network-enforcer`), rendered by the real helm binary and checked
//! against the code it deploys.
//!
//! Every provider × collector strategy and a few variants are rendered with `helm template`
//! (helm v4, built from the Go module in `tests/control-plane/helm` by
//! `tests/control-plane/build` on first use), once per test run, so a render is never stale;
//! values the schema must refuse are tried, and `helm lint --strict` runs. The tests check
//! that:
//! - every object parses as its Kubernetes type and loses no field in the round trip;
//! - each provider gets exactly its components, mounts, args and RBAC;
//! - the containers' args are accepted by `ne-agent`'s and `ne-leader`'s own clap parsers and
//!   agree with the Services, volumes and ServiceAccounts they refer to;
//! - the admission policy and the collector config use the names the code uses
//!   (`ne_crds::PROMOTE_LABEL`, `ne_crds::Mode`, `ne_policy::otel_names`).
//!
//! `tests/chart_cluster.rs` applies the same renders to a real API server.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::OnceLock;

use ne_leader::ingest::IngestLimits;
use serde_json::{Value, json};

#[path = "chart/helm.rs"]
mod chart_helm;
#[path = "chart/support.rs"]
mod chart_support;
use chart_helm::{COLLECTORS, PROVIDERS, RELEASE};
use chart_support::*;

/// Every case of [`chart_helm::cases`], rendered on first use (in parallel: one helm per
/// case).
fn rendered() -> &'static BTreeMap<String, Case> {
    static CASES: OnceLock<BTreeMap<String, Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let cases = chart_helm::cases();
        std::thread::scope(|scope| {
            let renders: Vec<_> = cases
                .iter()
                .map(|(name, values)| {
                    scope.spawn(move || {
                        let manifests = chart_helm::template(RELEASE, NAMESPACE, name, values)
                            .unwrap_or_else(|e| panic!("{name}: helm template failed:\n{e}"));
                        let notes = chart_helm::notes(RELEASE, NAMESPACE, name, values);
                        Case::parse(name, &manifests, notes)
                    })
                })
                .collect();
            renders
                .into_iter()
                .map(|render| {
                    let case = render
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    (case.name.clone(), case)
                })
                .collect()
        })
    })
}

fn case(name: &str) -> &'static Case {
    rendered()
        .get(name)
        .unwrap_or_else(|| panic!("no rendered case {name}"))
}

fn matrix() -> impl Iterator<Item = (&'static str, &'static str, &'static Case)> {
    PROVIDERS.into_iter().flat_map(|p| {
        COLLECTORS
            .into_iter()
            .map(move |c| (p, c, case(&format!("{p}-{c}"))))
    })
}

fn all_cases() -> Vec<&'static Case> {
    let names: Vec<_> = rendered().keys().collect();
    assert!(names.len() >= 9, "too few rendered cases: {names:?}");
    rendered().values().collect()
}

#[test]
fn every_object_parses_as_its_kubernetes_type_and_loses_nothing() {
    for case in all_cases() {
        for object in &case.objects {
            // The prometheus-operator's kinds have no Rust types here: the API server checks
            // them against the operator's own CRDs (`chart_cluster`).
            if object["apiVersion"] != "monitoring.coreos.com/v1" {
                round_trip(object).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            }
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
        // The chart's ingest limits are the binary's defaults, and the leader takes the
        // largest message an agent sends.
        assert_eq!(
            run.ingest_limits(),
            IngestLimits::default(),
            "{}",
            case.name
        );
        // The agent: a DaemonSet, or one Deployment (Calico reads Goldmane centrally).
        let agent = case
            .find("DaemonSet", "ne-agent")
            .unwrap_or_else(|| case.get("Deployment", "ne-agent"));
        let agent = agent_args(&agent["spec"]["template"]["spec"]);
        assert!(run.max_message_bytes >= agent.max_message_bytes);

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
    let view = aggregated(case, "view");
    let edit = aggregated(case, "edit");
    let admin = aggregated(case, "admin");
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
    use ne_policy::otel_names as names;
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
        for container in component_containers(case) {
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
        for container in component_containers(case) {
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
    for container in component_containers(http) {
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
        for pod in component_pods(external) {
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
    for pod in component_pods(mtls) {
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
    for pod in component_pods(tls) {
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

/// Every sample name the binaries export, as their own registries encode them (`# TYPE`
/// lines). A labelled family is encoded only once it has a series: those the monitoring
/// reads get one here (which names nothing: an unregistered family still stays out).
fn exported_metrics() -> BTreeSet<String> {
    use ne_leader::controller::metrics as leader;
    use ne_node_agent::metrics as agent;
    let agent_metrics = agent::AgentMetrics::default();
    let source = "hubble";
    drop(
        agent_metrics
            .flows_received
            .get_or_create(&agent::SourceLabel { source }),
    );
    drop(
        agent_metrics
            .flows_dropped
            .get_or_create(&agent::ReasonLabel {
                reason: agent::DropReason::reply,
            }),
    );
    drop(agent_metrics.lost_events.get_or_create(&agent::LostLabel {
        source,
        cause: "hubble_ring_buffer",
    }));
    let controller = leader::ControllerMetrics::default();
    let (kind, verb) = ("WorkloadNetworkPolicy", "patch");
    drop(
        controller
            .api_writes
            .get_or_create(&leader::WriteLabels { kind, verb }),
    );
    drop(
        controller
            .reconcile_errors
            .get_or_create(&leader::ErrorLabels {
                controller: "policy",
                error_type: "api",
            }),
    );
    drop(
        controller
            .violations_by_namespace
            .get_or_create(&leader::NamespaceModeLabels {
                policy_namespace: "shop".into(),
                mode: "protect",
            }),
    );
    let agent = ne_telemetry::http::Exposition::encode(&agent_metrics);
    let leader = ne_telemetry::http::prometheus_text(|r| {
        ne_leader::ingest::LeaderMetrics::default().register(r);
        controller.register(r);
        ne_telemetry::logs::LogMetrics::default().register(r);
    });
    let mut names = BTreeSet::new();
    for line in agent.lines().chain(leader.lines()) {
        let Some(declared) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = declared.split_once(' ').unwrap();
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// The metric names a PromQL expression reads.
fn metrics_read(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("network_enforcer_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.insert(name);
    }
    names
}

#[test]
fn monitoring_is_off_by_default_and_reads_only_metrics_the_binaries_export() {
    for (provider, collector, case) in matrix() {
        for kind in ["ServiceMonitor", "PrometheusRule"] {
            assert!(
                case.objects.iter().all(|o| o["kind"] != kind),
                "{provider}-{collector}: a {kind} by default"
            );
        }
    }
    let case = case("cilium-monitoring");
    let exported = exported_metrics();
    assert!(exported.contains("network_enforcer_agent_scraper_lag_seconds_bucket"));
    assert!(exported.contains("network_enforcer_violations_by_namespace_total"));

    // The ServiceMonitor selects the leader's and the agents' metrics Services, and only
    // them, on the port named in its endpoint.
    let monitor = case.get("ServiceMonitor", RELEASE);
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    let wanted = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap();
    let port = monitor["spec"]["endpoints"][0]["port"].as_str().unwrap();
    let selected: BTreeSet<&str> = case
        .objects
        .iter()
        .filter(|o| o["kind"] == "Service")
        .filter(|s| wanted.iter().all(|(k, v)| &s["metadata"]["labels"][k] == v))
        .map(|s| {
            assert_eq!(named_port(s, port), 9090, "{}", describe(s));
            s["metadata"]["name"].as_str().unwrap()
        })
        .collect();
    let leader_metrics = format!("{RELEASE}-leader-metrics");
    let agent_metrics = format!("{RELEASE}-agent-metrics");
    assert_eq!(
        selected,
        BTreeSet::from([leader_metrics.as_str(), agent_metrics.as_str()])
    );
    // Each Service reaches its component's pods on the port the binary serves /metrics on.
    for (service, component) in [(&leader_metrics, "leader"), (&agent_metrics, "agent")] {
        let service = case.get("Service", service);
        let workload = case
            .objects
            .iter()
            .find(|o| {
                matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet"))
                    && o["metadata"]["name"] == format!("{RELEASE}-{component}")
            })
            .unwrap();
        let template = &workload["spec"]["template"];
        for (k, v) in service["spec"]["selector"].as_object().unwrap() {
            assert_eq!(&template["metadata"]["labels"][k], v, "{component}: {k}");
        }
        let target = service["spec"]["ports"][0]["targetPort"].as_str().unwrap();
        let container = only_container(&template["spec"]);
        assert_eq!(container_port(container, target), 9090);
        let metrics_address = expanded_args(container)
            .into_iter()
            .find_map(|a| a.strip_prefix("--metrics-address=").map(str::to_owned));
        assert_eq!(
            metrics_address.as_deref(),
            Some("0.0.0.0:9090"),
            "{component}"
        );
    }

    // Alerts: the ones the README lists, each reading exported metrics only.
    let rule = case.get("PrometheusRule", RELEASE);
    let mut alerts = BTreeSet::new();
    for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
        let alert = r["alert"].as_str().unwrap();
        let read = metrics_read(r["expr"].as_str().unwrap());
        assert!(!read.is_empty(), "{alert} reads no metric");
        for name in &read {
            assert!(
                exported.contains(name),
                "{alert} reads {name}, which nothing exports"
            );
        }
        assert!(r["annotations"]["summary"].is_string(), "{alert}");
        assert!(r["annotations"]["description"].is_string(), "{alert}");
        alerts.insert(alert.to_owned());
        if alert == "NetworkEnforcerProtectModeViolations" {
            assert_eq!(r["labels"]["severity"], "critical");
        }
    }
    assert_eq!(
        alerts,
        BTreeSet::from(
            [
                "NetworkEnforcerScraperLagHigh",
                "NetworkEnforcerFlowsLost",
                "NetworkEnforcerAgentDisconnected",
                "NetworkEnforcerWriteErrors",
                "NetworkEnforcerProtectModeViolations",
            ]
            .map(str::to_owned)
        )
    );

    // The dashboard parses, is labelled for the Grafana sidecar, and every query reads
    // exported metrics: flows per node, scraper lag, edges, violations, API writes among them.
    let config_map = case.get("ConfigMap", &format!("{RELEASE}-dashboard"));
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        config_map["metadata"]["annotations"]["grafana_folder"],
        "Network"
    );
    let dashboard: Value = serde_json::from_str(
        config_map["data"]["network-enforcer.json"]
            .as_str()
            .unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut read = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let names = metrics_read(target["expr"].as_str().unwrap());
            assert!(
                !names.is_empty(),
                "{}: a query reads no metric",
                panel["title"]
            );
            read.extend(names);
        }
    }
    let unknown: Vec<_> = read.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard reads metrics nothing exports: {unknown:?}"
    );
    for needed in [
        "network_enforcer_agent_flows_received_total",
        "network_enforcer_agent_scraper_lag_seconds_bucket",
        "network_enforcer_agent_edges",
        "network_enforcer_violations_by_namespace_total",
        "network_enforcer_leader_api_writes_total",
    ] {
        assert!(
            read.contains(needed),
            "the dashboard does not show {needed}"
        );
    }
}

#[test]
fn values_schema_rejects_what_it_should() {
    let rejections = chart_helm::rejections();
    assert!(
        rejections.len() >= 15,
        "{} rejection cases",
        rejections.len()
    );
    let results: Vec<_> = std::thread::scope(|scope| {
        let runs: Vec<_> = rejections
            .iter()
            .map(|(name, values, word)| {
                scope.spawn(move || {
                    let result = chart_helm::template(RELEASE, NAMESPACE, name, values);
                    (*name, *word, result)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (name, word, result) in results {
        let error = match result {
            Ok(_) => panic!("{name} was accepted: values.schema.json must refuse it"),
            Err(error) => error,
        };
        // Refused by values.schema.json, not by a template that failed on the way.
        assert!(
            error.contains("values don't meet the specifications of the schema"),
            "{name}: not a schema error: {error}"
        );
        assert!(error.contains(word), "{name}: `{word}` not in {error}");
    }
}

#[test]
fn helm_lint_strict_passes() {
    for provider in PROVIDERS {
        let values = json!({"provider": provider});
        let report = chart_helm::lint(NAMESPACE, &format!("lint-{provider}"), &values)
            .unwrap_or_else(|e| panic!("{provider}: helm lint --strict fails:\n{e}"));
        assert!(
            report.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{provider}: {report}"
        );
        // [INFO] (e.g. "icon is recommended") is fine; a [WARNING] or [ERROR] fails --strict,
        // and is looked for here too.
        for line in report.lines().filter(|l| l.starts_with('[')) {
            assert!(line.starts_with("[INFO]"), "{provider}: {line}");
        }
    }
}

#[test]
fn notes_tell_the_next_commands() {
    for provider in PROVIDERS {
        let notes = &case(&format!("{provider}-default")).notes;
        assert!(notes.contains("kubectl get wnpp -A"));
        assert!(notes.contains(&format!("{}=monitor", ne_crds::PROMOTE_LABEL)));
        assert!(notes.contains(ne_crds::ACKNOWLEDGE_ANNOTATION_PREFIX));
        assert!(notes.contains("port-forward svc/ne-otel-collector"));
        assert_eq!(notes.contains("goldmane-key-pair"), provider == "calico");
    }
}
