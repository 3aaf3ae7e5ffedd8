//! The real `helm` binary (helm v4, built from the Go module in `tests/control-plane/helm` by
//! `tests/control-plane/build`), and the values the chart tests render: every provider ×
//! collector strategy, the variants that switch other paths on, and values the chart must
//! refuse.

#![allow(dead_code)] // chart.rs and chart_cluster.rs each use part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

pub const PROVIDERS: [&str; 3] = ["cilium", "calico", "istio"];
pub const COLLECTORS: [&str; 3] = ["default", "external", "none"];

/// The release name the offline renders use (`helm template ne ...`).
pub const RELEASE: &str = "ne";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository")
}

pub fn chart_dir() -> PathBuf {
    repo().join("charts/network-enforcer")
}

/// The helm binary, brought up to date once per test process by `tests/control-plane/build`
/// (which needs Go and the Go module proxy the first time, and well under a second after).
pub fn helm_binary() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        let build = repo().join("tests/control-plane/build");
        let output = Command::new(&build)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", build.display()));
        assert!(
            output.status.success(),
            "{} failed; it builds helm from the Go module in tests/control-plane/helm and \
             needs Go on PATH (and the Go module proxy on the first build):\n{}",
            build.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        // Where the script puts its programs.
        let out = std::env::var_os("NE_CONTROL_PLANE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo().join("target/control-plane"));
        let helm = out.join("bin/helm");
        assert!(
            helm.exists(),
            "{} is missing after {} succeeded",
            helm.display(),
            build.display()
        );
        helm
    })
}

/// A helm command with a configuration, cache and data folder of its own (no plugin or
/// repository of the user's), and never the ambient `KUBECONFIG`: commands that talk to a
/// cluster name theirs with `--kubeconfig`.
pub fn helm() -> Command {
    let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    let mut command = Command::new(helm_binary());
    command
        .env_remove("KUBECONFIG")
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null());
    command
}

/// Runs `command`: its stdout when it succeeds, else what it printed (stderr first).
pub fn run(command: &mut Command) -> Result<String, String> {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{}{stdout}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Writes `values` as JSON to a file of its own (named after `name`) for `helm -f`.
pub fn values_file(name: &str, values: &Value) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-values-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!(
        "{}-{name}.json",
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&file, serde_json::to_string_pretty(values).unwrap()).unwrap();
    file
}

/// `helm template <release> charts/network-enforcer -n <namespace> -f values.json`: the
/// manifests (one YAML stream), or helm's error.
pub fn template(
    release: &str,
    namespace: &str,
    name: &str,
    values: &Value,
) -> Result<String, String> {
    let file = values_file(name, values);
    run(helm()
        .arg("template")
        .arg(release)
        .arg(chart_dir())
        .args(["-n", namespace])
        .arg("-f")
        .arg(&file))
}

/// NOTES.txt as helm renders it for an install (`helm template` never prints it):
/// `helm install --dry-run=client`, which talks to no cluster.
pub fn notes(release: &str, namespace: &str, name: &str, values: &Value) -> String {
    let file = values_file(name, values);
    let out = run(helm()
        .arg("install")
        .arg(release)
        .arg(chart_dir())
        .args(["-n", namespace, "--dry-run=client", "-o", "json"])
        .arg("-f")
        .arg(&file))
    .unwrap_or_else(|e| panic!("{name}: helm install --dry-run=client failed:\n{e}"));
    let release: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{name}: helm's release JSON does not parse: {e}"));
    release["info"]["notes"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: the release has no notes"))
        .to_owned()
}

/// `helm lint --strict` (warnings fail) of the chart with `values`, in `namespace`.
pub fn lint(namespace: &str, name: &str, values: &Value) -> Result<String, String> {
    let file = values_file(name, values);
    run(helm()
        .args(["lint", "--strict"])
        .arg(chart_dir())
        .args(["-n", namespace])
        .arg("-f")
        .arg(&file))
}

const EXTERNAL_ENDPOINT: &str = "https://otel.example:4317";

/// The values of one provider × collector strategy.
pub fn matrix_values(provider: &str, collector: &str) -> Value {
    let telemetry = if collector == "external" {
        json!({
            "collector": "external",
            "external": {"endpoint": EXTERNAL_ENDPOINT, "tls": {"existingSecret": "otel-ca"}},
        })
    } else {
        json!({"collector": collector})
    };
    json!({"provider": provider, "telemetry": telemetry})
}

/// Every case the chart tests render, by name: `<provider>-<collector>` for the whole matrix,
/// then the variants that switch other paths on.
pub fn cases() -> Vec<(String, Value)> {
    let mut cases = Vec::new();
    for provider in PROVIDERS {
        for collector in COLLECTORS {
            cases.push((
                format!("{provider}-{collector}"),
                matrix_values(provider, collector),
            ));
        }
    }
    let variants = [
        (
            "cilium-relay-tls",
            json!({
                "provider": "cilium",
                "agent": {"hubble": {
                    "mode": "relay",
                    "relay": {
                        "address": "hubble-relay.kube-system.svc:443",
                        "tls": {
                            "existingSecret": "hubble-relay-client",
                            "clientCertificate": true,
                            "serverName": "ui.hubble-relay.cilium.io",
                        },
                    },
                }},
            }),
        ),
        (
            "cilium-relay-plain",
            json!({
                "provider": "cilium",
                "agent": {"hubble": {"mode": "relay", "relay": {"address": "hubble-relay.kube-system.svc:80"}}},
            }),
        ),
        (
            "calico-custom-tls",
            json!({
                "provider": "calico",
                "agent": {"goldmane": {"tls": {
                    "secretName": "my-goldmane-client",
                    "caConfigMap": "my-goldmane-ca",
                    "caKey": "ca.crt",
                    "serverName": "goldmane.calico-system.svc",
                }}},
            }),
        ),
        (
            "istio-external-mtls",
            json!({
                "provider": "istio",
                "telemetry": {
                    "collector": "external",
                    "external": {
                        "endpoint": EXTERNAL_ENDPOINT,
                        "tls": {"existingSecret": "otel-client", "clientCertificate": true},
                    },
                },
            }),
        ),
        (
            "cilium-external-http",
            json!({
                "provider": "cilium",
                "telemetry": {
                    "collector": "external",
                    "external": {"endpoint": "http://otel.example:4318", "protocol": "http/protobuf"},
                },
            }),
        ),
        (
            "cilium-default-tls",
            json!({
                "provider": "cilium",
                "telemetry": {"collector": "default", "defaultCollector": {"tls": {"existingSecret": "otel-tls"}}},
            }),
        ),
        (
            "istio-one-leader-no-admission",
            json!({
                "provider": "istio",
                "leader": {"replicas": 1},
                "admission": {"enabled": false},
                "learning": {"excludeNamespaces": ["kube-system", "istio-system"]},
            }),
        ),
        (
            "cilium-monitoring",
            json!({
                "provider": "cilium",
                "monitoring": {
                    "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}},
                    "prometheusRule": {"enabled": true, "labels": {"release": "prometheus"}, "protectViolationSeverity": "critical"},
                    "dashboard": {"enabled": true, "annotations": {"grafana_folder": "Network"}},
                },
            }),
        ),
    ];
    cases.extend(variants.map(|(name, values)| (name.to_owned(), values)));
    cases
}

/// Values the chart must refuse: `(case, values, a word helm's error must contain)`.
pub fn rejections() -> Vec<(&'static str, Value, &'static str)> {
    let external_ca = json!({"existingSecret": "otel-ca"});
    vec![
        ("no-provider", json!({}), "provider"),
        (
            "unknown-provider",
            json!({"provider": "flannel"}),
            "provider",
        ),
        (
            "alert-severity-not-known",
            json!({"provider": "cilium", "monitoring": {"prometheusRule": {"enabled": true, "protectViolationSeverity": "page"}}}),
            "protectViolationSeverity",
        ),
        (
            "unknown-top-level-key",
            json!({"provider": "cilium", "replicas": 3}),
            "replicas",
        ),
        (
            "unknown-nested-key",
            json!({"provider": "cilium", "agent": {"hubbel": {}}}),
            "hubbel",
        ),
        (
            "unknown-leader-key",
            json!({"provider": "cilium", "leader": {"replica": 2}}),
            "replica",
        ),
        (
            "external-without-endpoint",
            json!({"provider": "istio", "telemetry": {"collector": "external"}}),
            "endpoint",
        ),
        (
            "external-endpoint-not-a-url",
            json!({"provider": "istio", "telemetry": {"collector": "external", "external": {"endpoint": "otel:4317"}}}),
            "endpoint",
        ),
        (
            "external-https-without-ca",
            json!({"provider": "cilium", "telemetry": {"collector": "external", "external": {"endpoint": EXTERNAL_ENDPOINT}}}),
            "existingSecret",
        ),
        (
            "external-http-json-protocol",
            json!({"provider": "istio", "telemetry": {
                "collector": "external",
                "external": {"endpoint": "https://o:4318", "protocol": "http/json", "tls": external_ca},
            }}),
            "protocol",
        ),
        (
            "unknown-collector-strategy",
            json!({"provider": "calico", "telemetry": {"collector": "jaeger"}}),
            "collector",
        ),
        (
            "zero-leader-replicas",
            json!({"provider": "cilium", "leader": {"replicas": 0}}),
            "replicas",
        ),
        (
            "replicas-not-a-number",
            json!({"provider": "cilium", "leader": {"replicas": "two"}}),
            "replicas",
        ),
        (
            "bad-hubble-mode",
            json!({"provider": "cilium", "agent": {"hubble": {"mode": "grpc"}}}),
            "mode",
        ),
        (
            "bad-log-format",
            json!({"provider": "cilium", "agent": {"logFormat": "xml"}}),
            "logFormat",
        ),
        (
            "bad-flush-interval",
            json!({"provider": "cilium", "agent": {"flushInterval": "soon"}}),
            "flushInterval",
        ),
        (
            "bad-exclude-namespace",
            json!({"provider": "cilium", "learning": {"excludeNamespaces": ["Kube_System"]}}),
            "excludeNamespaces",
        ),
        (
            "relative-socket-dir",
            json!({"provider": "cilium", "agent": {"hubble": {"socketDir": "run/cilium"}}}),
            "socketDir",
        ),
        (
            "goldmane-address-without-port",
            json!({"provider": "calico", "agent": {"goldmane": {"address": "goldmane"}}}),
            "address",
        ),
        (
            "empty-goldmane-secret",
            json!({"provider": "calico", "agent": {"goldmane": {"tls": {"secretName": ""}}}}),
            "secretName",
        ),
    ]
}
