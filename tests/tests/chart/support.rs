//! Reading a rendered chart: objects by kind and name, pod spec lookups (which volume a file
//! comes from), the binaries' own argument parsers, RBAC rules as triples with the
//! apiserver's aggregation, and CEL evaluation of the admission policy.

#![allow(dead_code)] // chart.rs and chart_cluster.rs each use part of it

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The release namespace the offline renders use (`helm template -n network-enforcer`).
pub const NAMESPACE: &str = "network-enforcer";
/// The label the leader sets on its own pod while it holds the Lease (the leader-only
/// Service selects it).
pub const LEADER_POD_LABEL: &str = ne_leader::leader_label::LEADER_LABEL;

/// One rendered case: its objects (NOTES.txt aside) and NOTES.txt.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub objects: Vec<Value>,
    pub notes: String,
}

impl Case {
    /// A case from what helm rendered: `manifests` (one YAML stream, as `helm template`
    /// prints it) and `notes` (NOTES.txt).
    pub fn parse(name: &str, manifests: &str, notes: String) -> Case {
        let objects: Vec<Value> = serde_saphyr::from_multiple(manifests)
            .unwrap_or_else(|e| panic!("{name}: rendered YAML does not parse: {e}"));
        let objects = objects.into_iter().filter(|o| !o.is_null()).collect();
        Case {
            name: name.to_owned(),
            objects,
            notes,
        }
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.find(kind, name)
            .unwrap_or_else(|| panic!("{}: no {kind} {name}", self.name))
    }

    /// `(kind, name)` of every object; fails on duplicates.
    pub fn inventory(&self) -> BTreeSet<(String, String)> {
        let mut seen = BTreeSet::new();
        for o in &self.objects {
            let key = (
                o["kind"].as_str().unwrap_or_default().to_owned(),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
            assert!(seen.insert(key.clone()), "{}: {key:?} twice", self.name);
        }
        seen
    }
}

pub fn describe(object: &Value) -> String {
    format!("{} {}", object["kind"], object["metadata"]["name"])
}

/// Removes nulls, which mean "absent" in YAML and are dropped by the typed round trip.
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn typed<K: DeserializeOwned + Serialize>(object: &Value) -> Result<Value, String> {
    let parsed: K = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(parsed).map_err(|e| e.to_string())
}

/// Parses `object` as the k8s-openapi type of its kind and checks that serializing it
/// gives the same document: a misspelt or misplaced field (which serde would skip) fails.
pub fn round_trip(object: &Value) -> Result<(), String> {
    use k8s_openapi::api::admissionregistration::v1 as adm;
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::api::{apps::v1 as apps, core::v1 as core, policy::v1 as policy};
    let api = (object["apiVersion"].as_str(), object["kind"].as_str());
    let back = match api {
        (Some("apps/v1"), Some("Deployment")) => typed::<apps::Deployment>(object),
        (Some("apps/v1"), Some("DaemonSet")) => typed::<apps::DaemonSet>(object),
        (Some("v1"), Some("ServiceAccount")) => typed::<core::ServiceAccount>(object),
        (Some("v1"), Some("Service")) => typed::<core::Service>(object),
        (Some("v1"), Some("ConfigMap")) => typed::<core::ConfigMap>(object),
        (Some("policy/v1"), Some("PodDisruptionBudget")) => {
            typed::<policy::PodDisruptionBudget>(object)
        }
        (Some("rbac.authorization.k8s.io/v1"), Some("ClusterRole")) => {
            typed::<rbac::ClusterRole>(object)
        }
        (Some("rbac.authorization.k8s.io/v1"), Some("ClusterRoleBinding")) => {
            typed::<rbac::ClusterRoleBinding>(object)
        }
        (Some("rbac.authorization.k8s.io/v1"), Some("Role")) => typed::<rbac::Role>(object),
        (Some("rbac.authorization.k8s.io/v1"), Some("RoleBinding")) => {
            typed::<rbac::RoleBinding>(object)
        }
        (Some("admissionregistration.k8s.io/v1"), Some("ValidatingAdmissionPolicy")) => {
            typed::<adm::ValidatingAdmissionPolicy>(object)
        }
        (Some("admissionregistration.k8s.io/v1"), Some("ValidatingAdmissionPolicyBinding")) => {
            typed::<adm::ValidatingAdmissionPolicyBinding>(object)
        }
        other => return Err(format!("unexpected object {other:?}")),
    }
    .map_err(|e| format!("{}: {e}", describe(object)))?;
    let original = without_nulls(object);
    match difference(&original, &back, "") {
        None => Ok(()),
        Some(path) => Err(format!(
            "{} changes at `{path}` in a round trip through its type (an unknown or \
             misplaced field?)",
            describe(object)
        )),
    }
}

/// The path of the first place where two documents differ.
fn difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => difference(p, q, &format!("{path}.{k}")),
                    _ => Some(format!("{path}.{k}")),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| difference(p, q, &format!("{path}[{i}]"))),
        _ => (a != b).then(|| path.to_owned()),
    }
}

pub fn only_container(pod: &Value) -> &Value {
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    assert!(pod.get("initContainers").is_none());
    &containers[0]
}

/// The value of a plain `env` entry.
pub fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

/// The downward API field an `env` entry comes from.
pub fn env_field(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| {
            e["valueFrom"]["fieldRef"]["fieldPath"]
                .as_str()
                .map(str::to_owned)
        })
}

/// The args with `$(VAR)` expanded as the kubelet does: a plain value, or
/// `<fieldPath>` for a downward API field. A reference to an undefined variable fails.
pub fn expanded_args(container: &Value) -> Vec<String> {
    let env = container["env"].as_array().cloned().unwrap_or_default();
    for e in &env {
        let name = e["name"].as_str().unwrap_or_default();
        assert!(
            !name.starts_with("NE_"),
            "{name}: flags are set by args only, so the clap check below sees them"
        );
    }
    let lookup = |name: &str| -> String {
        let entry = env
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("args use $({name}), which is not in env"));
        match entry["value"].as_str() {
            Some(v) => v.to_owned(),
            None => format!(
                "<{}>",
                entry["valueFrom"]["fieldRef"]["fieldPath"]
                    .as_str()
                    .unwrap()
            ),
        }
    };
    container["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| {
            let mut arg = a.as_str().expect("string arg").to_owned();
            while let Some(start) = arg.find("$(") {
                let end = start + arg[start..].find(')').expect("closing )");
                let value = lookup(&arg[start + 2..end]);
                arg.replace_range(start..=end, &value);
            }
            arg
        })
        .collect()
}

/// The agent container's args, parsed by `ne-agent`'s own parser.
pub fn agent_args(pod: &Value) -> ne_node_agent::args::Args {
    let container = only_container(pod);
    let args = expanded_args(container);
    ne_node_agent::args::Args::try_parse_from(std::iter::once("ne-agent".to_owned()).chain(args))
        .unwrap_or_else(|e| panic!("ne-agent rejects the chart's args: {e}"))
}

/// The leader container's args, parsed by `ne-leader`'s own parser (the `run` subcommand).
pub fn leader_args(container: &Value) -> ne_leader::cli::RunArgs {
    let args = expanded_args(container);
    let cli =
        ne_leader::cli::Cli::try_parse_from(std::iter::once("ne-leader".to_owned()).chain(args))
            .unwrap_or_else(|e| panic!("ne-leader rejects the chart's args: {e}"));
    match cli.command {
        ne_leader::cli::Command::Run(run) => *run,
        other => panic!("the leader runs {other:?}, not `run`"),
    }
}

pub fn container_port(container: &Value, name: &str) -> u16 {
    container["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == name))
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port {name}")) as u16
}

pub fn named_port(service: &Value, name: &str) -> u16 {
    service["spec"]["ports"]
        .as_array()
        .and_then(|ports| ports.iter().find(|p| p["name"] == name))
        .and_then(|p| p["port"].as_u64())
        .unwrap_or_else(|| panic!("no service port {name}")) as u16
}

/// Liveness on /healthz and readiness on /readyz, both on the metrics port.
pub fn probes(container: &Value) {
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path);
        assert_eq!(container[probe]["httpGet"]["port"], "metrics");
    }
}

/// No privilege escalation, read-only root, every capability dropped, none added.
pub fn hardened(security: &Value, case: &str) {
    assert_eq!(security["allowPrivilegeEscalation"], false, "{case}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{case}");
    assert_eq!(security["privileged"], false, "{case}");
    assert_eq!(
        security["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{case}"
    );
    assert!(security["capabilities"].get("add").is_none(), "{case}");
}

fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// The mount a file lies under, and the file's path inside it.
fn mount_of<'a>(pod: &'a Value, file: &Path) -> (&'a Value, PathBuf) {
    let container = only_container(pod);
    container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|m| {
            let rest = file.strip_prefix(m["mountPath"].as_str()?).ok()?;
            Some((m, rest.to_path_buf()))
        })
        .unwrap_or_else(|| panic!("{} is on no mounted volume", file.display()))
}

/// Where a file in the container comes from: a key of a Secret or a ConfigMap. Compares
/// with `(kind, name, key)`.
#[derive(Debug, PartialEq, Eq)]
pub struct FileSource {
    pub kind: &'static str,
    pub name: String,
    pub key: String,
}

impl PartialEq<(&str, &str, &str)> for FileSource {
    fn eq(&self, (kind, name, key): &(&str, &str, &str)) -> bool {
        self.kind == *kind && self.name == *name && self.key == *key
    }
}

/// The Secret or ConfigMap key a file in the container comes from (volumes with or without
/// `items`).
pub fn file_source(pod: &Value, file: &Path) -> FileSource {
    let (mount, rest) = mount_of(pod, file);
    assert_eq!(mount["readOnly"], true, "{}", file.display());
    let volume = volume(pod, mount["name"].as_str().unwrap());
    let rest = rest.to_string_lossy().into_owned();
    let (kind, source, name) = if volume.get("secret").is_some() {
        ("secret", &volume["secret"], &volume["secret"]["secretName"])
    } else if volume.get("configMap").is_some() {
        (
            "configMap",
            &volume["configMap"],
            &volume["configMap"]["name"],
        )
    } else {
        panic!("{} is not from a Secret or ConfigMap", file.display())
    };
    let key = match source["items"].as_array() {
        Some(items) => items
            .iter()
            .find(|i| i["path"] == rest.as_str())
            .and_then(|i| i["key"].as_str())
            .unwrap_or_else(|| panic!("{rest} is not among the volume's items"))
            .to_owned(),
        None => rest,
    };
    FileSource {
        kind,
        name: name.as_str().unwrap().to_owned(),
        key,
    }
}

/// The projected ServiceAccount token source a token file comes from.
pub fn projected_token<'a>(pod: &'a Value, file: &Path) -> &'a Value {
    let (mount, rest) = mount_of(pod, file);
    assert_eq!(mount["readOnly"], true);
    let volume = volume(pod, mount["name"].as_str().unwrap());
    let token = volume["projected"]["sources"]
        .as_array()
        .and_then(|s| s.iter().find_map(|s| s.get("serviceAccountToken")))
        .expect("a projected serviceAccountToken");
    assert_eq!(token["path"].as_str(), rest.to_str());
    token
}

/// `(host path, mount path)` of every hostPath volume, each checked read-only.
pub fn host_path_mounts(pod: &Value) -> Vec<(String, String)> {
    let container = only_container(pod);
    let mut found = Vec::new();
    for v in pod["volumes"].as_array().into_iter().flatten() {
        let Some(host) = v["hostPath"]["path"].as_str() else {
            continue;
        };
        let mount = container["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == v["name"]))
            .expect("hostPath volume is mounted");
        assert_eq!(mount["readOnly"], true, "hostPath {host} must be read-only");
        found.push((
            host.to_owned(),
            mount["mountPath"].as_str().unwrap().to_owned(),
        ));
    }
    found
}

/// Pod specs of the chart's own components (leader and agent).
pub fn component_pods(case: &Case) -> Vec<&Value> {
    case.objects
        .iter()
        .filter(|o| {
            matches!(o["kind"].as_str(), Some("Deployment" | "DaemonSet"))
                && matches!(
                    o["metadata"]["name"].as_str(),
                    Some("ne-leader" | "ne-agent")
                )
        })
        .map(|o| &o["spec"]["template"]["spec"])
        .collect()
}

pub fn component_containers(case: &Case) -> Vec<&Value> {
    let pods = component_pods(case);
    assert_eq!(pods.len(), 2, "{}: leader and agent", case.name);
    pods.into_iter().map(only_container).collect()
}

/// An RBAC grant: `(api group, resource, verb)`.
pub type Rule = (String, String, String);

pub fn rules(role: &Value) -> BTreeSet<Rule> {
    let mut out = BTreeSet::new();
    for rule in role["rules"].as_array().into_iter().flatten() {
        assert!(rule.get("resourceNames").is_none() && rule.get("nonResourceURLs").is_none());
        let strings = |key: &str| -> Vec<String> {
            rule[key]
                .as_array()
                .unwrap_or_else(|| panic!("rule without {key}"))
                .iter()
                .map(|s| s.as_str().unwrap().to_owned())
                .collect()
        };
        for group in strings("apiGroups") {
            for resource in strings("resources") {
                for verb in strings("verbs") {
                    out.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    out
}

/// What the chart adds to a built-in role (`view`, `edit`, `admin`) through the
/// `rbac.authorization.k8s.io/aggregate-to-<role>` labels, as the apiserver's aggregation
/// controller does.
pub fn aggregated(case: &Case, builtin: &str) -> BTreeSet<Rule> {
    let label = format!("rbac.authorization.k8s.io/aggregate-to-{builtin}");
    case.objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" && o["metadata"]["labels"][&label] == "true")
        .flat_map(rules)
        .collect()
}

/// Evaluates an admission-policy expression with `object` bound, as the apiserver does.
pub fn cel_allows(expression: &str, object: &Value) -> bool {
    use kube_cel::cel::{Context, Program, Value as Cel};
    let program = Program::compile(expression).unwrap_or_else(|e| panic!("`{expression}`: {e}"));
    let mut context = Context::default();
    context
        .add_variable("object", object)
        .expect("object converts to CEL");
    match program.execute(&context) {
        Ok(Cel::Bool(b)) => b,
        other => panic!("`{expression}` on {object}: {other:?}"),
    }
}

/// Every component a pipeline names is defined, the count connector sits between the logs
/// and the metrics pipelines, and metrics leave through Prometheus.
pub fn check_pipelines(config: &Value) {
    let pipelines = config["service"]["pipelines"]
        .as_object()
        .expect("pipelines");
    for (name, pipeline) in pipelines {
        for (role, section) in [
            ("receivers", "receivers"),
            ("processors", "processors"),
            ("exporters", "exporters"),
        ] {
            for component in pipeline[role].as_array().into_iter().flatten() {
                let component = component.as_str().unwrap();
                let defined = config[section].get(component).is_some()
                    || (role != "processors" && config["connectors"].get(component).is_some());
                assert!(defined, "pipeline {name} uses undefined {role} {component}");
            }
        }
    }
    let names = |pipeline: &str, role: &str| -> Vec<String> {
        pipelines[pipeline][role]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    assert!(names("logs", "exporters").contains(&"count".to_owned()));
    assert!(names("metrics", "receivers").contains(&"count".to_owned()));
    assert!(names("metrics", "receivers").contains(&"otlp".to_owned()));
    assert!(names("metrics", "exporters").contains(&"prometheus".to_owned()));
    for extension in config["service"]["extensions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert!(
            config["extensions"]
                .get(extension.as_str().unwrap())
                .is_some()
        );
    }
}
