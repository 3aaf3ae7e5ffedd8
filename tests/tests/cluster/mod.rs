//! Support for the tests that need a real Kubernetes API server: which cluster they run
//! against ([`kubeconfig`]), a temporary namespace that is deleted whatever happens, the real
//! binaries as child processes that are killed whatever happens, objects a control plane
//! without nodes still accepts (workloads, ReplicaSets and Pods with owner references and a
//! patched `status.podIP`), and polling with deadlines.

#![allow(dead_code)] // each test binary uses part of it

pub mod hubble;
pub mod ztunnel;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::json;

/// The kubeconfig of the cluster under test: the file `NE_TEST_KUBECONFIG` names (any
/// cluster, kind say; never the ambient `KUBECONFIG`, which may be a production cluster's),
/// else the project's own control plane (`tests/control-plane/up`: built and started on first
/// use, left running for the next run; `tests/control-plane/down` stops it).
pub fn kubeconfig() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("NE_TEST_KUBECONFIG") {
            return PathBuf::from(path);
        }
        // `up` prints the kubeconfig's path as its only line on stdout.
        PathBuf::from(control_plane("up", &[]).trim())
    })
}

/// Runs `tests/control-plane/<script> <args>` (`build`, `up`, `down`); its stdout. A failure
/// fails the test with the script's output, which names what failed.
pub fn control_plane(script: &str, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("control-plane")
        .join(script);
    let output = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed (NE_TEST_KUBECONFIG names another cluster to test against):\n{}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Whether the cluster under test is the project's own control plane (which the tests may
/// stop and start), not one `NE_TEST_KUBECONFIG` named.
pub fn own_control_plane() -> bool {
    std::env::var_os("NE_TEST_KUBECONFIG").is_none()
}

/// A client of the cluster under test, as its admin.
pub async fn client() -> Client {
    let path = kubeconfig();
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("kubeconfig {}: {e}", path.display()));
    Client::try_from(config).expect("a client of the cluster under test")
}

/// A command running `binary`, pointed at the cluster under test.
pub fn cluster_command(binary: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(binary);
    command.env("KUBECONFIG", kubeconfig());
    command
}

/// How long any awaited condition may take.
pub const DEADLINE: Duration = Duration::from_secs(90);

/// A namespace of its own, deleted when dropped (also when the test fails).
pub struct TempNamespace {
    pub client: Client,
    pub name: String,
}

impl TempNamespace {
    pub async fn new(client: &Client, prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("{prefix}-{}-{nanos:x}", std::process::id());
        let api: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.clone());
        api.create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
        TempNamespace {
            client: client.clone(),
            name,
        }
    }
}

impl Drop for TempNamespace {
    fn drop(&mut self) {
        let (client, name) = (self.client.clone(), self.name.clone());
        in_drop(async move {
            let api: Api<Namespace> = Api::all(client);
            let _ = api.delete(&name, &DeleteParams::background()).await;
        });
    }
}

/// Runs clean-up `work` to completion from a `Drop` (which cannot await): on a thread with
/// its own runtime, waited for.
pub fn in_drop(work: impl Future<Output = ()> + Send + 'static) {
    let _ = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work);
    })
    .join();
}

/// Waits until CRD `name` is established (served).
pub async fn established(client: &Client, name: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    eventually(&format!("CRD {name} established"), || async {
        let crd = api.get(name).await.ok()?;
        crd.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
}

/// The `app` label a selector matches.
pub fn app_of(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> &str {
    selector
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|m| m.get("app"))
        .map_or("", String::as_str)
}

/// A child process, killed when dropped; its output goes to a file named after it.
pub struct Process {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(name: &str, mut command: Command) -> Self {
        let log = std::env::temp_dir().join(format!("ne-e2e-{}-{name}.log", std::process::id()));
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Process {
            name: name.to_owned(),
            child,
            log,
        }
    }

    /// The process's output so far (for failure messages).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- {} output ----\n{}", self.name, self.output());
        }
    }
}

/// A built binary of the workspace, next to this test executable. The workspace's test
/// build is brought up to date once per process (`cargo test --workspace --no-run`: a no-op
/// under `cargo test --workspace`, which builds the binaries with the same features, so
/// nothing is built twice).
pub fn binary(name: &str) -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        // Without the variables cargo sets for this test (CARGO_MANIFEST_DIR, CARGO_PKG_*,
        // ...): build scripts that track them (ring's) would see them change and rebuild
        // half the tree here and again in the next `cargo test`.
        let mut cargo = Command::new(env!("CARGO"));
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            let set_for_the_test = [
                "CARGO_MANIFEST_",
                "CARGO_PKG_",
                "CARGO_BIN_",
                "CARGO_CRATE_",
            ]
            .iter()
            .any(|prefix| key.starts_with(prefix))
                || matches!(
                    &*key,
                    "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "CARGO_RUSTC_CURRENT_DIR"
                );
            if set_for_the_test {
                cargo.env_remove(&*key);
            }
        }
        let status = cargo
            .args(["test", "--workspace", "--no-run", "--quiet"])
            .stdout(Stdio::null())
            .status()
            .expect("cannot run cargo");
        assert!(status.success(), "cannot build the workspace's binaries");
    });
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let path = exe.parent().unwrap().parent().unwrap().join(name);
    assert!(
        path.exists(),
        "{} is missing after the build",
        path.display()
    );
    path
}

/// A loopback address on a port free right now.
pub fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", listener.local_addr().unwrap().port())
}

/// Polls `check` every 250 ms until it gives `Some`, or fails the test after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn owner<K: Resource<DynamicType = ()>>(object: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: object.meta().name.clone().unwrap(),
        uid: object.meta().uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// A Deployment `name` (pods labelled `app=<name>`, ServiceAccount `sa`), its ReplicaSet and
/// one Pod as their controllers would make them, the pod's address `ip`, owner references
/// with placeholder uids.
pub fn workload_objects(ns: &str, name: &str, sa: &str, ip: &str) -> (Deployment, ReplicaSet, Pod) {
    let hash = "5c8b7d9f6c";
    let labels = BTreeMap::from([("app".to_owned(), name.to_owned())]);
    let template = json!({
        "metadata": {"labels": labels},
        "spec": {"serviceAccountName": sa, "containers": [{"name": "app", "image": "registry.invalid/app:1", "ports": [{"name": "http", "containerPort": 8080}]}]}
    });
    let mut deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }))
    .unwrap();
    deployment.metadata.uid = Some(format!("uid-deployment-{name}"));
    let mut pod_labels = labels.clone();
    pod_labels.insert("pod-template-hash".to_owned(), hash.to_owned());
    let rs_name = format!("{name}-{hash}");
    let mut rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs_name, "namespace": ns, "labels": pod_labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": pod_labels},
                 "template": {"metadata": {"labels": pod_labels}, "spec": template["spec"]}},
    }))
    .unwrap();
    rs.metadata.owner_references = Some(vec![owner(&deployment)]);
    rs.metadata.uid = Some(format!("uid-replicaset-{name}"));
    let mut pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(name), "namespace": ns, "labels": pod_labels},
        "spec": template["spec"],
        "status": {"podIP": ip, "podIPs": [{"ip": ip}], "phase": "Running"},
    }))
    .unwrap();
    pod.metadata.owner_references = Some(vec![owner(&rs)]);
    (deployment, rs, pod)
}

/// A pod selector no node satisfies: the Deployment's pods stay Pending and unscheduled,
/// so no kubelet owns their status and no image is ever pulled.
pub const NO_NODE: (&str, &str) = ("networkenforcer.kubewarden.io/e2e", "no-such-node");

/// A Deployment `name` (pods labelled `app=<name>`, ServiceAccount `sa`, created unless it
/// exists: the ServiceAccount admission plugin refuses pods of a missing one) created in the
/// cluster, whose controllers then make its ReplicaSet and Pod as they always do; the pod
/// is never scheduled ([`NO_NODE`]), and its address is set to `ip` with a status patch.
/// Works on a control plane without nodes. Returns the Deployment and its pod's name.
pub async fn deployment(
    client: &Client,
    ns: &str,
    name: &str,
    sa: &str,
    ip: &str,
) -> (Deployment, String) {
    service_account(client, ns, sa).await;
    let (mut deployment, _, _) = workload_objects(ns, name, sa, ip);
    deployment.metadata.uid = None;
    if let Some(spec) = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    {
        spec.node_selector = Some(BTreeMap::from([(
            NO_NODE.0.to_owned(),
            NO_NODE.1.to_owned(),
        )]));
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("app={name}");
    let pod = eventually(&format!("the pod of Deployment {name}"), || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move {
            let list = pods
                .list(&kube::api::ListParams::default().labels(&selector))
                .await
                .ok()?;
            list.items.into_iter().find_map(|p| p.metadata.name)
        }
    })
    .await;
    let status = json!({"status": {"podIP": ip, "podIPs": [{"ip": ip}]}});
    pods.patch_status(&pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("cannot set the address of pod {pod}: {e}"));
    (deployment, pod)
}

/// Creates ServiceAccount `ns/name` unless it exists.
pub async fn service_account(client: &Client, ns: &str, name: &str) {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(name.to_owned());
    match api.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("cannot create ServiceAccount {ns}/{name}: {e}"),
    }
}

/// The pod name [`deployment`] gives workload `name`.
pub fn pod_name(name: &str) -> String {
    format!("{name}-5c8b7d9f6c-h7j2k")
}

/// Installs (server-side apply) the Network Enforcer CRDs, and waits until they are served.
pub async fn install_crds(client: &Client) {
    for (_, crd) in ne_crds::crds() {
        apply_crd(client, &crd).await;
    }
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Server-side applies `crd` and waits until it is served.
async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().unwrap();
    api.patch(
        &name,
        &PatchParams::apply("ne-e2e").force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    established(client, &name).await;
}

/// `GET path` on a loopback HTTP server (a binary's /metrics), the body; `None` while it
/// does not answer.
pub fn http_get(address: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text.split_once("\r\n\r\n")?.1.to_owned())
}

/// The sum of the samples of metric `name` over all its label sets, in Prometheus text (0
/// when there is none).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.split(' ').next()?.parse::<f64>().ok()
        })
        .sum()
}

/// What `tests/control-plane/build` made (run first, once per process: in seconds when all
/// is up to date).
pub fn control_plane_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        control_plane("build", &[]);
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::env::var_os("NE_CONTROL_PLANE_DIR")
            .map_or_else(|| manifest.join("../target/control-plane"), PathBuf::from)
    })
}

/// The `kubectl` binary of the project's control plane, built when it is not up to date.
pub fn kubectl_binary() -> PathBuf {
    control_plane_dir().join("bin/kubectl")
}

/// Installs the prometheus-operator's ServiceMonitor and PrometheusRule CRDs (the
/// operator's own files, which `tests/control-plane/build` downloads) and waits until
/// they are served.
pub async fn install_monitoring_crds(client: &Client) {
    for kind in ["servicemonitors", "prometheusrules"] {
        let path = control_plane_dir().join(format!("crds/monitoring.coreos.com_{kind}.yaml"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        apply_crd(client, &crd).await;
    }
}

/// `kubectl` of the project's control plane (`tests/control-plane/build` makes it, in seconds
/// when it is up to date), pointed at the cluster under test, with a discovery cache of this
/// test process's own: a cache another run left behind could hide a change to the CRDs.
pub fn kubectl() -> Command {
    let bin = kubectl_binary();
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kubectl-cache-{}", std::process::id()));
    let mut command = cluster_command(bin);
    command.arg("--cache-dir").arg(cache).stdin(Stdio::null());
    command
}

/// Waits for proposal `name` of `proposals` with evidence (peers and flows), owned by the
/// Deployment whose uid is `owner`.
pub async fn learned(
    proposals: &Api<ne_crds::WorkloadNetworkPolicyProposal>,
    name: &str,
    owner: &str,
) -> ne_crds::WorkloadNetworkPolicyProposal {
    eventually(
        &format!("proposal {name} with evidence, owned by Deployment uid {owner}"),
        || async {
            let p = proposals.get_opt(name).await.ok()??;
            let owned = p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Deployment" && o.uid == owner);
            let evidence = p
                .status
                .as_ref()
                .is_some_and(|s| !s.peers.is_empty() && s.flow_count > 0);
            (owned && evidence).then_some(p)
        },
    )
    .await
}
