use std::net::IpAddr;

use super::*;
use crate::resolve::{NamedPort, ResolvedPod};
use ne_flow::flow::{Labels, Protocol, Reserved, labels};

/// One object per entry; the tests join them as multi-document YAML and as a `List`.
const OBJECTS: &[&str] = &[
    r#"apiVersion: v1
kind: Namespace
metadata:
  name: shop
  labels:
    kubernetes.io/metadata.name: shop
    team: payments"#,
    r#"apiVersion: v1
kind: Namespace
metadata:
  name: monitoring"#,
    r#"apiVersion: v1
kind: Namespace
metadata:
  name: ops"#,
    // orders: Deployment -> ReplicaSet -> Pod.
    r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: orders
  namespace: shop
spec:
  selector:
    matchLabels:
      app: orders
  template:
    metadata:
      labels:
        app: orders
        tier: backend
    spec:
      serviceAccountName: orders
      containers:
      - name: app
        image: orders:1
        ports:
        - name: http
          containerPort: 8080"#,
    r#"apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: orders-7d9f8c6b5
  namespace: shop
  ownerReferences:
  - apiVersion: apps/v1
    kind: Deployment
    name: orders
    uid: 11111111-1111-1111-1111-111111111111
    controller: true
    blockOwnerDeletion: true
spec:
  selector:
    matchLabels:
      app: orders
      pod-template-hash: 7d9f8c6b5"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: orders-7d9f8c6b5-x2x4q
  generateName: orders-7d9f8c6b5-
  namespace: shop
  labels:
    app: orders
    tier: backend
    pod-template-hash: 7d9f8c6b5
  ownerReferences:
  - apiVersion: apps/v1
    kind: ReplicaSet
    name: orders-7d9f8c6b5
    uid: 22222222-2222-2222-2222-222222222222
    controller: true
spec:
  serviceAccountName: orders
  containers:
  - name: app
    image: orders:1
    ports:
    - name: http
      containerPort: 8080
      protocol: TCP
    - name: metrics
      containerPort: 9090
    - containerPort: 5000
status:
  phase: Running
  podIP: 10.0.0.10
  podIPs:
  - ip: 10.0.0.10
  - ip: fd00::10"#,
    // orders-db: StatefulSet -> Pod.
    r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: orders-db
  namespace: shop
spec:
  serviceName: orders-db
  selector:
    matchLabels:
      app: orders-db
    matchExpressions:
    - key: role
      operator: In
      values: [primary, replica]
  template:
    metadata:
      labels:
        app: orders-db
        role: primary
    spec:
      containers:
      - name: db
        image: postgres:17"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: orders-db-0
  generateName: orders-db-
  namespace: shop
  labels:
    app: orders-db
    role: primary
    controller-revision-hash: orders-db-5c7b9d
    statefulset.kubernetes.io/pod-name: orders-db-0
    apps.kubernetes.io/pod-index: "0"
  ownerReferences:
  - apiVersion: apps/v1
    kind: StatefulSet
    name: orders-db
    uid: 33333333-3333-3333-3333-333333333333
    controller: true
spec:
  containers:
  - name: db
    image: postgres:17
    ports:
    - name: postgres
      containerPort: 5432
status:
  phase: Running
  podIP: 10.0.0.20"#,
    // orders: a one-off Job whose pods are `orders-*`, next to `orders-db-*`.
    r#"apiVersion: batch/v1
kind: Job
metadata:
  name: orders
  namespace: shop
spec:
  template:
    metadata:
      labels:
        app: orders-migrate
        job-name: orders
        controller-uid: 44444444-4444-4444-4444-444444444444
        batch.kubernetes.io/job-name: orders
        batch.kubernetes.io/controller-uid: 44444444-4444-4444-4444-444444444444
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: orders:1"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: orders-k7v2p
  generateName: orders-
  namespace: shop
  labels:
    app: orders-migrate
    job-name: orders
    controller-uid: 44444444-4444-4444-4444-444444444444
    batch.kubernetes.io/job-name: orders
    batch.kubernetes.io/controller-uid: 44444444-4444-4444-4444-444444444444
  ownerReferences:
  - apiVersion: batch/v1
    kind: Job
    name: orders
    uid: 44444444-4444-4444-4444-444444444444
    controller: true
spec:
  containers:
  - name: migrate
    image: orders:1
status:
  phase: Running
  podIP: 10.0.0.40"#,
    // node-agent: DaemonSet -> Pod, plus a host-network pod of it.
    r#"apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
  namespace: monitoring
spec:
  selector:
    matchLabels:
      app: node-agent
  template:
    metadata:
      labels:
        app: node-agent
    spec:
      containers:
      - name: agent
        image: agent:1"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: node-agent-7xk2p
  generateName: node-agent-
  namespace: monitoring
  labels:
    app: node-agent
    controller-revision-hash: 6d8f7b
    pod-template-generation: "1"
  ownerReferences:
  - apiVersion: apps/v1
    kind: DaemonSet
    name: node-agent
    uid: 55555555-5555-5555-5555-555555555555
    controller: true
spec:
  containers:
  - name: agent
    image: agent:1
status:
  phase: Running
  podIP: 10.0.1.5"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: node-agent-h8q4m
  generateName: node-agent-
  namespace: monitoring
  labels:
    app: node-agent
  ownerReferences:
  - apiVersion: apps/v1
    kind: DaemonSet
    name: node-agent
    uid: 55555555-5555-5555-5555-555555555555
    controller: true
spec:
  hostNetwork: true
  containers:
  - name: agent
    image: agent:1
status:
  phase: Running
  podIP: 172.18.0.2"#,
    // report: CronJob -> Job -> Pod (finished; its address now belongs to `debug`).
    r#"apiVersion: batch/v1
kind: CronJob
metadata:
  name: report
  namespace: ops
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        metadata:
          labels:
            app: report
        spec:
          restartPolicy: OnFailure
          containers:
          - name: report
            image: report:1"#,
    r#"apiVersion: batch/v1
kind: Job
metadata:
  name: report-28900000
  namespace: ops
  ownerReferences:
  - apiVersion: batch/v1
    kind: CronJob
    name: report
    uid: 66666666-6666-6666-6666-666666666666
    controller: true
spec:
  selector:
    matchLabels:
      batch.kubernetes.io/controller-uid: 77777777-7777-7777-7777-777777777777
  template:
    metadata:
      labels:
        app: report
        batch.kubernetes.io/controller-uid: 77777777-7777-7777-7777-777777777777
        batch.kubernetes.io/job-name: report-28900000
        controller-uid: 77777777-7777-7777-7777-777777777777
        job-name: report-28900000
    spec:
      restartPolicy: OnFailure
      containers:
      - name: report
        image: report:1"#,
    r#"apiVersion: v1
kind: Pod
metadata:
  name: report-28900000-q8z7k
  generateName: report-28900000-
  namespace: ops
  labels:
    app: report
    batch.kubernetes.io/controller-uid: 77777777-7777-7777-7777-777777777777
    batch.kubernetes.io/job-name: report-28900000
    controller-uid: 77777777-7777-7777-7777-777777777777
    job-name: report-28900000
  ownerReferences:
  - apiVersion: batch/v1
    kind: Job
    name: report-28900000
    uid: 77777777-7777-7777-7777-777777777777
    controller: true
spec:
  containers:
  - name: report
    image: report:1
status:
  phase: Succeeded
  podIP: 10.0.0.30"#,
    // A bare pod, reusing the finished job pod's address.
    r#"apiVersion: v1
kind: Pod
metadata:
  name: debug
  namespace: ops
  labels:
    run: debug
spec:
  serviceAccount: debugger
  containers:
  - name: debug
    image: busybox
status:
  phase: Running
  podIP: 10.0.0.30"#,
    // A bare pod without labels, in a namespace the snapshot does not hold.
    r#"apiVersion: v1
kind: Pod
metadata:
  name: solo
  namespace: lonely
spec:
  containers:
  - name: solo
    image: busybox"#,
    // A static pod: its controller is the Node.
    r#"apiVersion: v1
kind: Pod
metadata:
  name: etcd-node1
  namespace: kube-system
  labels:
    component: etcd
    tier: control-plane
  ownerReferences:
  - apiVersion: v1
    kind: Node
    name: node1
    uid: 88888888-8888-8888-8888-888888888888
    controller: true
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: etcd:3
status:
  podIP: 172.18.0.2"#,
    // Kinds the resolver does not use.
    r#"apiVersion: v1
kind: Service
metadata:
  name: orders
  namespace: shop
spec:
  ports:
  - port: 80"#,
    r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: shop
data:
  key: value"#,
];

fn multi_doc() -> String {
    OBJECTS.iter().map(|o| format!("---\n{o}\n")).collect()
}

fn indent_item(object: &str) -> String {
    let mut out = String::new();
    for (i, line) in object.lines().enumerate() {
        out.push_str(if i == 0 { "- " } else { "  " });
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn list(objects: &[&str]) -> String {
    let items: String = objects.iter().map(|o| indent_item(o)).collect();
    format!("apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\nitems:\n{items}")
}

fn snapshot() -> ClusterSnapshot {
    match ClusterSnapshot::from_yaml(&list(OBJECTS)) {
        Ok(s) => s,
        Err(e) => panic!("fixture does not parse: {e}"),
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn pod_id(ns: &str, name: &str) -> Endpoint {
    Endpoint::new(EndpointId::Pod {
        namespace: ns.into(),
        name: name.into(),
    })
}

fn group(ns: &str, prefix: &str) -> Endpoint {
    Endpoint::new(EndpointId::PodGroup {
        namespace: ns.into(),
        prefix: prefix.into(),
    })
}

fn workload(ns: &str, kind: WorkloadKind, name: &str) -> WorkloadRef {
    WorkloadRef {
        namespace: ns.into(),
        kind,
        name: name.into(),
    }
}

fn pod(r: Resolution) -> ResolvedPod {
    match r {
        Resolution::Pod(p) => p,
        other => panic!("expected a pod, got {other:?}"),
    }
}

fn match_labels(p: &ResolvedPod) -> Vec<(String, String)> {
    let m = p
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    m.into_iter().collect()
}

fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ns_labels(pairs: &[(&str, &str)]) -> Labels {
    labels(pairs.iter().copied())
}

#[test]
fn deployment_pods_resolve_through_their_replicaset() {
    let s = snapshot();
    let p = pod(s.resolve(&pod_id("shop", "orders-7d9f8c6b5-x2x4q")));
    assert_eq!(
        p.owner,
        Some(workload("shop", WorkloadKind::Deployment, "orders"))
    );
    // The Deployment's selector, not the pod's labels (which also hold `tier`).
    assert_eq!(match_labels(&p), kv(&[("app", "orders")]));
    assert_eq!(
        p.labels,
        labels([
            ("app", "orders"),
            ("pod-template-hash", "7d9f8c6b5"),
            ("tier", "backend")
        ])
    );
    assert_eq!(
        p.namespace_labels,
        ns_labels(&[
            ("kubernetes.io/metadata.name", "shop"),
            ("team", "payments")
        ])
    );
    assert_eq!(
        p.named_ports,
        vec![
            NamedPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080
            },
            NamedPort {
                name: "metrics".into(),
                protocol: Protocol::Tcp,
                port: 9090
            },
        ]
    );
    assert_eq!(p.service_account.as_deref(), Some("orders"));

    // The same pod by either of its addresses.
    for addr in ["10.0.0.10", "fd00::10"] {
        let by_ip = s.resolve(&Endpoint::new(EndpointId::External(ip(addr))));
        assert_eq!(by_ip, Resolution::Pod(p.clone()), "{addr}");
    }
}

#[test]
fn workload_ids_look_up_the_object_and_follow_its_owner() {
    let s = snapshot();
    let orders = workload("shop", WorkloadKind::Deployment, "orders");
    let from_template = pod(s.resolve(&Endpoint::new(EndpointId::Workload(orders.clone()))));
    assert_eq!(from_template.owner, Some(orders.clone()));
    assert_eq!(match_labels(&from_template), kv(&[("app", "orders")]));
    assert_eq!(
        from_template.labels,
        labels([("app", "orders"), ("tier", "backend")])
    );
    assert_eq!(from_template.named_ports.len(), 1);

    // With the address of one of its pods, the real pod's labels and ports are used.
    let at_pod = Endpoint::new(EndpointId::Workload(orders.clone())).with_ip(Some(ip("10.0.0.10")));
    let real = pod(s.resolve(&at_pod));
    assert!(real.labels.iter().any(|(k, _)| &**k == "pod-template-hash"));
    assert_eq!(real.named_ports.len(), 2);
    // ... but not another workload's pod.
    let elsewhere =
        Endpoint::new(EndpointId::Workload(orders.clone())).with_ip(Some(ip("10.0.0.20")));
    assert_eq!(pod(s.resolve(&elsewhere)), from_template);

    let rs = workload("shop", WorkloadKind::ReplicaSet, "orders-7d9f8c6b5");
    assert_eq!(
        pod(s.resolve(&Endpoint::new(EndpointId::Workload(rs)))).owner,
        Some(orders)
    );
    let job = workload("ops", WorkloadKind::Job, "report-28900000");
    let p = pod(s.resolve(&Endpoint::new(EndpointId::Workload(job))));
    assert_eq!(
        p.owner,
        Some(workload("ops", WorkloadKind::CronJob, "report"))
    );
    let bare = workload("ops", WorkloadKind::Pod, "debug");
    assert_eq!(
        pod(s.resolve(&Endpoint::new(EndpointId::Workload(bare.clone())))).owner,
        Some(bare)
    );

    for missing in [
        workload("shop", WorkloadKind::Deployment, "payments"),
        workload("shop", WorkloadKind::DaemonSet, "orders"),
        workload("ops", WorkloadKind::Pod, "gone"),
    ] {
        let r = s.resolve(&Endpoint::new(EndpointId::Workload(missing.clone())));
        assert_eq!(r, Resolution::Unresolved(Unresolved::NotFound), "{missing}");
    }
}

#[test]
fn statefulset_keeps_its_full_selector() {
    let s = snapshot();
    let p = pod(s.resolve(&pod_id("shop", "orders-db-0")));
    assert_eq!(
        p.owner,
        Some(workload("shop", WorkloadKind::StatefulSet, "orders-db"))
    );
    let selector = p.selector.as_ref().unwrap();
    assert_eq!(match_labels(&p), kv(&[("app", "orders-db")]));
    let exprs = selector.match_expressions.as_ref().unwrap();
    assert_eq!(
        (exprs[0].key.as_str(), exprs[0].operator.as_str()),
        ("role", "In")
    );
    assert_eq!(p.service_account.as_deref(), Some("default"));
    assert_eq!(
        p.named_ports,
        vec![NamedPort {
            name: "postgres".into(),
            protocol: Protocol::Tcp,
            port: 5432
        }]
    );
}

#[test]
fn pod_groups_match_generate_name_exactly() {
    let s = snapshot();
    let owner = |ns, prefix| pod(s.resolve(&group(ns, prefix))).owner;
    assert_eq!(
        owner("shop", "orders-"),
        Some(workload("shop", WorkloadKind::Job, "orders"))
    );
    assert_eq!(
        owner("shop", "orders-db-"),
        Some(workload("shop", WorkloadKind::StatefulSet, "orders-db"))
    );
    assert_eq!(
        owner("shop", "orders-7d9f8c6b5-"),
        Some(workload("shop", WorkloadKind::Deployment, "orders"))
    );
    assert_eq!(
        owner("monitoring", "node-agent-"),
        Some(workload(
            "monitoring",
            WorkloadKind::DaemonSet,
            "node-agent"
        ))
    );
    // The one-off Job's selector is its template labels without the controller's.
    assert_eq!(
        match_labels(&pod(s.resolve(&group("shop", "orders-")))),
        kv(&[("app", "orders-migrate")])
    );
    for (ns, prefix) in [
        ("shop", "order"),
        ("shop", "orders"),
        ("shop", "orders-d"),
        ("ops", "orders-"),
    ] {
        assert_eq!(
            s.resolve(&group(ns, prefix)),
            Resolution::Unresolved(Unresolved::PodNotListed),
            "{ns}/{prefix}"
        );
    }
}

#[test]
fn daemonset_namespace_without_labels_gets_its_name_label() {
    let s = snapshot();
    let p = pod(s.resolve(&pod_id("monitoring", "node-agent-7xk2p")));
    assert_eq!(match_labels(&p), kv(&[("app", "node-agent")]));
    assert_eq!(
        p.namespace_labels,
        ns_labels(&[("kubernetes.io/metadata.name", "monitoring")])
    );
}

#[test]
fn cronjob_chain_and_bare_pods() {
    let s = snapshot();
    let p = pod(s.resolve(&pod_id("ops", "report-28900000-q8z7k")));
    assert_eq!(
        p.owner,
        Some(workload("ops", WorkloadKind::CronJob, "report"))
    );
    assert_eq!(match_labels(&p), kv(&[("app", "report")]));

    let debug = pod(s.resolve(&pod_id("ops", "debug")));
    assert_eq!(
        debug.owner,
        Some(workload("ops", WorkloadKind::Pod, "debug"))
    );
    assert_eq!(match_labels(&debug), kv(&[("run", "debug")]));
    assert_eq!(debug.service_account.as_deref(), Some("debugger"));
    // The finished job pod no longer holds its address.
    assert_eq!(
        s.resolve(&Endpoint::new(EndpointId::External(ip("10.0.0.30")))),
        Resolution::Pod(debug)
    );

    let solo = pod(s.resolve(&pod_id("lonely", "solo")));
    assert_eq!(
        (solo.owner, solo.selector),
        (Some(workload("lonely", WorkloadKind::Pod, "solo")), None)
    );
    assert_eq!(
        solo.namespace_labels,
        ns_labels(&[("kubernetes.io/metadata.name", "lonely")])
    );

    let etcd = pod(s.resolve(&pod_id("kube-system", "etcd-node1")));
    assert_eq!(etcd.owner, None);
    assert_eq!(
        match_labels(&etcd),
        kv(&[("component", "etcd"), ("tier", "control-plane")])
    );
}

#[test]
fn addresses_stay_external_unless_a_pod_owns_them() {
    let s = snapshot();
    // Host-network pods share the node's address: never a pod identity.
    for addr in ["172.18.0.2", "203.0.113.9"] {
        let r = s.resolve(&Endpoint::new(EndpointId::External(ip(addr))));
        assert_eq!(r, Resolution::External(ip(addr)));
    }
    let r = s.resolve(&Endpoint::new(EndpointId::Reserved(Reserved::Host)));
    assert_eq!(r, Resolution::Reserved(Reserved::Host));
}

#[test]
fn a_named_pod_is_never_found_by_its_address() {
    let s = snapshot();
    // 10.0.0.20 is orders-db-0's: a record naming another pod is not that pod.
    for id in [pod_id("shop", "gone"), pod_id("ops", "gone")] {
        let with_ip = id.with_ip(Some(ip("10.0.0.20")));
        assert_eq!(
            s.resolve(&with_ip),
            Resolution::Unresolved(Unresolved::PodNotListed)
        );
    }
}

/// Endpoints of every kind that the fixture resolves to pods.
fn fixture_endpoints() -> [Endpoint; 8] {
    [
        pod_id("shop", "orders-7d9f8c6b5-x2x4q"),
        pod_id("shop", "orders-db-0"),
        pod_id("ops", "report-28900000-q8z7k"),
        pod_id("lonely", "solo"),
        group("shop", "orders-"),
        group("monitoring", "node-agent-"),
        Endpoint::new(EndpointId::External(ip("10.0.0.30"))),
        Endpoint::new(EndpointId::Workload(workload(
            "shop",
            WorkloadKind::Deployment,
            "orders",
        ))),
    ]
}

#[test]
fn list_and_multi_document_forms_agree_and_unknown_kinds_are_counted() {
    let from_list = snapshot();
    // Multi-document, with a nested List in the middle.
    let mixed = format!("{}---\n{}{}", multi_doc(), list(&OBJECTS[..2]), "---\n");
    let from_docs = ClusterSnapshot::from_yaml(&multi_doc()).unwrap();
    let from_mixed = ClusterSnapshot::from_yaml(&mixed).unwrap();
    let endpoints = fixture_endpoints();
    for e in &endpoints {
        assert!(
            matches!(from_list.resolve(e), Resolution::Pod(_)),
            "{}",
            e.id
        );
        assert_eq!(from_list.resolve(e), from_docs.resolve(e), "{}", e.id);
        assert_eq!(from_list.resolve(e), from_mixed.resolve(e), "{}", e.id);
    }
    for s in [&from_list, &from_docs] {
        assert_eq!(
            (s.pod_count(), s.workload_count(), s.namespace_count()),
            (9, 7, 3)
        );
        let ignored: Vec<(&str, usize)> = s
            .ignored_kinds()
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        assert_eq!(ignored, [("ConfigMap", 1), ("Service", 1)]);
    }
}

#[test]
fn typed_lists_without_item_kinds_are_read() {
    let yaml = "apiVersion: v1\nkind: PodList\nitems:\n- metadata:\n    name: a\n    namespace: shop\n  spec:\n    containers: []\n  status:\n    podIP: 10.9.0.1\n";
    let s = ClusterSnapshot::from_yaml(yaml).unwrap();
    assert_eq!(
        pod(s.resolve(&pod_id("shop", "a"))).owner,
        Some(workload("shop", WorkloadKind::Pod, "a"))
    );
}

const AMBIGUOUS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  generateName: web-
  namespace: shop
  labels: {app: web}
  ownerReferences:
  - {apiVersion: apps/v1, kind: StatefulSet, name: web, uid: u1, controller: true}
spec: {containers: []}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata: {name: web-x7k2q, generateName: web-, namespace: shop, labels: {app: scratch}}
spec: {containers: []}
status: {podIP: 10.0.0.1}
---
apiVersion: v1
kind: Pod
metadata:
  name: api-0
  namespace: shop
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: api-5f6d7c8b9, uid: u2, controller: true}
spec: {containers: []}
"#;

#[test]
fn groups_with_different_owners_and_shared_addresses_are_ambiguous() {
    let s = ClusterSnapshot::from_yaml(AMBIGUOUS).unwrap();
    assert_eq!(
        s.resolve(&group("shop", "web-")),
        Resolution::Unresolved(Unresolved::Ambiguous)
    );
    let at = Endpoint::new(EndpointId::External(ip("10.0.0.1")));
    assert_eq!(
        s.resolve(&at),
        Resolution::Unresolved(Unresolved::Ambiguous)
    );
    // By name, each pod is still itself.
    assert_eq!(
        pod(s.resolve(&pod_id("shop", "web-0"))).owner,
        Some(workload("shop", WorkloadKind::StatefulSet, "web"))
    );
    // An owner missing from the snapshot breaks the chain: not found, never guessed.
    assert_eq!(
        s.resolve(&pod_id("shop", "api-0")),
        Resolution::Unresolved(Unresolved::NotFound)
    );
}

fn error(yaml: &str) -> SnapshotError {
    match ClusterSnapshot::from_yaml(yaml) {
        Ok(_) => panic!("expected an error for:\n{yaml}"),
        Err(e) => e,
    }
}

#[test]
fn malformed_items_are_named_in_errors() {
    // A Deployment with a field of the wrong type, inside a List.
    let bad_deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: broken\n  namespace: shop\nspec:\n  replicas: many\n  template: {}";
    let e = error(&list(&[OBJECTS[0], bad_deployment]));
    assert!(matches!(e, SnapshotError::Decode { .. }), "{e}");
    let item = e.item().unwrap();
    assert_eq!(
        (
            item.kind.as_str(),
            item.namespace.as_deref(),
            item.name.as_deref()
        ),
        ("Deployment", Some("shop"), Some("broken"))
    );
    assert_eq!(
        item.location,
        Location {
            document: 1,
            index: Some(1)
        }
    );
    let message = e.to_string();
    assert!(
        message.starts_with("Deployment shop/broken (document 1, items[1]): "),
        "{message}"
    );
    assert!(message.contains("many"), "{message}");

    let bad_ip = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nstatus: {podIP: 10.0.0.999}\n";
    let e = error(&format!("{}{bad_ip}", multi_doc()));
    assert!(matches!(e, SnapshotError::Invalid { .. }), "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("Pod shop/p (document {}): ", OBJECTS.len() + 1)),
        "{e}"
    );
    assert!(e.to_string().contains("10.0.0.999"), "{e}");

    let e = error("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n");
    assert_eq!(
        e.to_string(),
        "Pod p (document 1): metadata.namespace is missing"
    );
    let e = error("apiVersion: v1\nkind: Pod\nmetadata: {namespace: shop}\n");
    assert_eq!(
        e.to_string(),
        "Pod shop/<unnamed> (document 1): metadata.name is missing"
    );

    let wrong_version = "apiVersion: v1\nkind: Deployment\nmetadata: {name: d, namespace: shop}\nspec: {selector: {}, template: {}}\n";
    let e = error(wrong_version);
    assert!(
        e.to_string()
            .starts_with("Deployment shop/d (document 1): "),
        "{e}"
    );

    let wrong_shape = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: shop}\nspec: {containers: oops}\n";
    assert!(
        error(wrong_shape)
            .to_string()
            .starts_with("Pod shop/p (document 1): ")
    );

    let e = error("apiVersion: v1\nkind: List\nitems:\n- metadata: {name: x}\n");
    assert_eq!(e.to_string(), "document 1, items[0]: object has no kind");
    let e = error("apiVersion: v1\nkind: List\nitems:\n- just a string\n");
    assert_eq!(
        e.to_string(),
        "document 1, items[0]: not a kubernetes object"
    );
    assert!(matches!(error("kind: [unclosed"), SnapshotError::Yaml(_)));
    assert_eq!(error("- a\n- b\n").error_type(), "not_an_object");
}

#[test]
fn an_empty_workload_selector_is_no_selector() {
    // k8s-openapi fills a missing required selector with an empty one, which would select
    // every pod in the namespace: it must not stand for the workload.
    let yaml = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: shop}
spec: {template: {metadata: {labels: {app: api}}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: api-5f6d7c8b9
  namespace: shop
  ownerReferences:
  - {apiVersion: apps/v1, kind: Deployment, name: api, uid: u1, controller: true}
spec: {selector: {matchLabels: {app: api}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: api-5f6d7c8b9-abcde
  namespace: shop
  labels: {app: api}
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: api-5f6d7c8b9, uid: u2, controller: true}
"#;
    let s = ClusterSnapshot::from_yaml(yaml).unwrap();
    let p = pod(s.resolve(&pod_id("shop", "api-5f6d7c8b9-abcde")));
    assert_eq!(
        (p.owner, p.selector),
        (
            Some(workload("shop", WorkloadKind::Deployment, "api")),
            None
        )
    );
}

#[test]
fn live_objects_resolve_exactly_as_their_yaml_does() {
    let from_yaml = snapshot();
    let mut live = ClusterObjects::default();
    for text in OBJECTS {
        let value: serde_json::Value = serde_saphyr::from_str(text).unwrap();
        let kind = value["kind"].as_str().unwrap_or_default().to_owned();
        let v = value.clone();
        match kind.as_str() {
            "Namespace" => live.namespaces.push(serde_json::from_value(v).unwrap()),
            "Pod" => live.pods.push(serde_json::from_value(v).unwrap()),
            "ReplicaSet" => live.replicasets.push(serde_json::from_value(v).unwrap()),
            "Deployment" => live.deployments.push(serde_json::from_value(v).unwrap()),
            "StatefulSet" => live.statefulsets.push(serde_json::from_value(v).unwrap()),
            "DaemonSet" => live.daemonsets.push(serde_json::from_value(v).unwrap()),
            "Job" => live.jobs.push(serde_json::from_value(v).unwrap()),
            "CronJob" => live.cronjobs.push(serde_json::from_value(v).unwrap()),
            _ => {}
        }
    }
    // A pod without a namespace and an address that does not parse are counted, not fatal.
    let mut broken: k8s_openapi::api::core::v1::Pod = (*live.pods[0]).clone();
    broken.metadata.namespace = None;
    live.pods.push(std::sync::Arc::new(broken));
    std::sync::Arc::make_mut(&mut live.pods[0])
        .status
        .get_or_insert_default()
        .pod_ips = Some(vec![k8s_openapi::api::core::v1::PodIP {
        ip: "not-an-ip".to_owned(),
    }]);
    let (from_live, skipped) = ClusterSnapshot::from_objects(live, []);
    assert_eq!(skipped, 2);
    assert_eq!(
        (
            from_live.pod_count(),
            from_live.workload_count(),
            from_live.namespace_count()
        ),
        (
            from_yaml.pod_count(),
            from_yaml.workload_count(),
            from_yaml.namespace_count()
        )
    );
    let endpoints = fixture_endpoints();
    for e in &endpoints {
        assert!(
            matches!(from_live.resolve(e), Resolution::Pod(_)),
            "{}",
            e.id
        );
        assert_eq!(from_live.resolve(e), from_yaml.resolve(e), "{}", e.id);
    }
}
