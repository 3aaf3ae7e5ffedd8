//! The test data plane of the controller's cluster tests, checked without a cluster: the
//! Hubble flows and ztunnel lines those tests send teach exactly the proposals they wait
//! for and make exactly the violation records they expect (the same pipeline, resolved
//! against the objects the tests create), denials of every provider land on the policy of
//! the side that saw them, and the Hubble server reaches a real leader through a real agent.

mod cluster;

use std::path::PathBuf;
use std::process::Command;

use cluster::hubble::{
    Hubble, Side, denied_tcp_flow, denied_tcp_flow_at, denied_tcp_flow_by, tcp_flow,
};
use cluster::ztunnel::{
    API_IP, WEB_IP, ztunnel_denied_line, ztunnel_dry_run_line, ztunnel_explicitly_denied_line,
    ztunnel_line,
};
use cluster::*;
use ne_crds::{Mode, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};
use serde_json::json;

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ne-data-plane-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The objects the cluster tests create in namespace `ns` (Deployments `api` and `web`, their
/// ReplicaSets and Pods), as the leader's resolver sees them.
fn e2e_cluster(ns: &str) -> ne_policy::resolve::ClusterSnapshot {
    use ne_policy::resolve::{ClusterObjects, ClusterSnapshot};
    let mut objects = ClusterObjects::default();
    let mut namespace = k8s_openapi::api::core::v1::Namespace::default();
    namespace.metadata.name = Some(ns.to_owned());
    objects.namespaces.push(namespace.into());
    for (name, ip) in [("api", API_IP), ("web", WEB_IP)] {
        let (d, rs, pod) = workload_objects(ns, name, name, ip);
        objects.deployments.push(d.into());
        objects.replicasets.push(rs.into());
        objects.pods.push(pod.into());
    }
    let (snapshot, skipped) = ClusterSnapshot::from_objects(objects, []);
    assert_eq!(skipped, 0);
    snapshot
}

/// Without a cluster: the test data plane's records, resolved against the very objects the
/// cluster tests create, teach the proposals those tests wait for.
#[test]
fn the_test_data_plane_teaches_what_the_cluster_tests_expect() {
    use ne_dataplanes::{Format, decode_lines};
    use ne_flow::edge::Provider;
    use ne_flow::table::FlowTable;
    use ne_policy::allowlist::LearnOptions;

    let ns = "ne-e2e-app-1";
    let snapshot = e2e_cluster(ns);
    let (web_pod, api_pod) = (pod_name("web"), pod_name("api"));
    let side = |pod, ip, app, deployment| Side {
        namespace: ns,
        pod,
        ip,
        app,
        deployment,
    };
    let hubble = tcp_flow(
        &side(&web_pod, WEB_IP, "web", Some("web")),
        &side(&api_pod, API_IP, "api", None),
        8080,
    );
    for (format, provider, line) in [
        (Format::HubbleJson, Provider::Cilium, hubble),
        (
            Format::Ztunnel,
            Provider::Istio,
            ztunnel_line(ns, &web_pod, &api_pod, 8080),
        ),
    ] {
        let table = FlowTable::new(1000);
        let stats = decode_lines(format, line.as_bytes(), |record| {
            table.record_flow(&record, provider).unwrap();
        });
        let records = if provider == Provider::Istio { 1 } else { 2 };
        assert_eq!((stats.records, stats.errors), (records, 0), "{format:?}");
        let merged: Vec<_> = table
            .snapshot()
            .into_iter()
            .map(|e| ne_policy::index::MergedEdge {
                edge: e.edge,
                count: e.count,
                first_seen: e.first_seen,
                last_seen: e.last_seen,
            })
            .collect();
        let proposals = ne_leader::learning::learn(
            ne_leader::learning::merged(&merged),
            &snapshot,
            provider,
            &LearnOptions::default(),
        )
        .proposals;
        let names: Vec<_> = proposals
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        let want: &[&str] = match provider {
            Provider::Istio => &["deployment-api-ingress"],
            _ => &["deployment-api-ingress", "deployment-web-egress"],
        };
        assert_eq!(names, want, "{format:?}");
        let api = &proposals[0];
        match provider {
            Provider::Istio => assert_eq!(
                api.spec.istio.as_ref().unwrap().rules[0].from[0]
                    .source
                    .principals,
                [format!("cluster.local/ns/{ns}/sa/web")]
            ),
            _ => {
                let spec = api.spec.kubernetes.as_ref().unwrap();
                let peer = &spec.ingress.as_ref().unwrap()[0].from.as_ref().unwrap()[0];
                assert_eq!(app_of(peer.pod_selector.as_ref()), "web");
            }
        }
    }
}

/// What an agent makes of data-plane `lines`: learned edges, denials and dry-run denials,
/// each merged as the leader's index would hold them.
fn agent_tables(
    format: ne_dataplanes::Format,
    provider: ne_flow::edge::Provider,
    lines: &str,
) -> (
    Vec<ne_policy::index::MergedEdge>,
    Vec<ne_policy::index::MergedEdge>,
    Vec<ne_policy::index::MergedEdge>,
) {
    use ne_flow::edge::{derive_audit, derive_denial};
    use ne_flow::table::FlowTable;
    let (edges, denials, audits) = (
        FlowTable::new(100),
        FlowTable::new(100),
        FlowTable::new(100),
    );
    let stats = ne_dataplanes::decode_lines(format, lines.as_bytes(), |record| {
        let _ = edges.record_flow(&record, provider);
        let time = record.time.unwrap_or_default();
        if let Ok(edge) = derive_denial(&record) {
            denials.record(&edge, time, 1);
        }
        if let Ok(edge) = derive_audit(&record) {
            audits.record(&edge, time, 1);
        }
    });
    assert_eq!(stats.errors, 0, "{lines}");
    let merged = |t: FlowTable| {
        t.snapshot()
            .into_iter()
            .map(|e| ne_policy::index::MergedEdge {
                edge: e.edge,
                count: e.count,
                first_seen: e.first_seen,
                last_seen: e.last_seen,
            })
            .collect()
    };
    (merged(edges), merged(denials), merged(audits))
}

/// The policy promoting the `api` ingress proposal learned from `learned`, in `mode`.
fn promoted(
    learned: &[ne_policy::index::MergedEdge],
    snapshot: &ne_policy::resolve::ClusterSnapshot,
    provider: ne_flow::edge::Provider,
    ns: &str,
    mode: Mode,
) -> WorkloadNetworkPolicy {
    let proposal = ne_leader::learning::learn(
        ne_leader::learning::merged(learned),
        snapshot,
        provider,
        &ne_policy::allowlist::LearnOptions::default(),
    )
    .proposals
    .into_iter()
    .find(|p| p.metadata.name.as_deref() == Some("deployment-api-ingress"))
    .unwrap();
    let mut w = WorkloadNetworkPolicy::new("deployment-api-ingress", proposal.spec.promoted(mode));
    w.metadata.namespace = Some(ns.to_owned());
    w
}

/// A Calico Goldmane flow (protojson, as Goldmane's API returns it) `web → api:port` that
/// a policy denied, reported by the source (`Src`, its egress) or the destination (`Dst`).
fn goldmane_denied(ns: &str, web: &str, api: &str, port: u16, reporter: &str) -> String {
    let line = json!({
        "Key": {
            "sourceName": web, "sourceNamespace": ns, "sourceType": "WorkloadEndpoint",
            "destName": api, "destNamespace": ns, "destType": "WorkloadEndpoint",
            "destPort": port.to_string(), "proto": "tcp", "reporter": reporter, "action": "Deny",
            "destServiceName": "-", "destServiceNamespace": "-", "destServicePortName": "-",
            "policies": {"enforcedPolicies": [{"kind": "NetworkPolicy", "namespace": ns, "name": "deny-all", "tier": "default", "action": "Deny"}]},
        },
        "startTime": "1764970845", "endTime": "1764970860",
        "sourceLabels": ["app=web"], "destLabels": ["app=api"],
        "numConnectionsStarted": "1", "numConnectionsCompleted": "0", "numConnectionsLive": "0",
    });
    format!("{line}\n")
}

/// Without a cluster, per provider: a denial reported by each data plane, in its own
/// format, lands on the protect policy of the workload and direction that saw it, and on no
/// other, although each workload's two policies share one selector (the reference
/// implementation's known failure: it attributed by selector).
#[test]
fn denials_of_every_provider_land_on_the_policy_of_the_side_that_saw_them() {
    use ne_dataplanes::Format;
    use ne_flow::edge::Provider;
    use ne_leader::violations::detect::{Traffic, detect};

    let ns = "ne-e2e-app-1";
    let snapshot = e2e_cluster(ns);
    let (web_pod, api_pod) = (pod_name("web"), pod_name("api"));
    let side = |pod, ip, app, deployment| Side {
        namespace: ns,
        pod,
        ip,
        app,
        deployment,
    };
    let (web, api) = (
        side(&web_pod, WEB_IP, "web", Some("web")),
        side(&api_pod, API_IP, "api", None),
    );
    // A protect policy per workload and direction; a workload's two share its selector.
    let policies = |backend: &str| -> Vec<WorkloadNetworkPolicy> {
        let mut out = Vec::new();
        for app in ["api", "web"] {
            for direction in ["Ingress", "Egress"] {
                let payload = if backend == "istio" {
                    json!({"istio": {"selector": {"matchLabels": {"app": app}}}})
                } else {
                    json!({"kubernetes": {"podSelector": {"matchLabels": {"app": app}}, "policyTypes": [direction]}})
                };
                let mut spec = json!({
                    "backend": backend, "mode": "protect", "direction": direction,
                    "targetRef": {"kind": "Deployment", "name": app},
                });
                spec.as_object_mut()
                    .unwrap()
                    .extend(payload.as_object().unwrap().clone());
                out.push(
                    serde_json::from_value(json!({
                        "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
                        "kind": "WorkloadNetworkPolicy",
                        "metadata": {"name": format!("deployment-{app}-{}", direction.to_lowercase()), "namespace": ns},
                        "spec": spec,
                    }))
                    .unwrap(),
                );
            }
        }
        out
    };
    let deny_all = format!("{ns}/deny-all");
    let deny_web = format!("{ns}/deny-web");
    let cases = [
        (
            "cilium, dropped at api's ingress",
            Format::HubbleJson,
            Provider::Cilium,
            denied_tcp_flow(&web, &api, 7070),
            "deployment-api-ingress",
            None,
        ),
        (
            "cilium, dropped at api's ingress by a named deny policy",
            Format::HubbleJson,
            Provider::Cilium,
            denied_tcp_flow_by(&web, &api, 7070, "deny-web"),
            "deployment-api-ingress",
            Some(deny_web.as_str()),
        ),
        (
            "cilium, dropped at web's egress",
            Format::HubbleJson,
            Provider::Cilium,
            denied_tcp_flow_at(&web, &api, 7070, false),
            "deployment-web-egress",
            None,
        ),
        (
            "calico, denied as reported by the source",
            Format::GoldmaneJson,
            Provider::Calico,
            goldmane_denied(ns, &web_pod, &api_pod, 7070, "Src"),
            "deployment-web-egress",
            Some(deny_all.as_str()),
        ),
        (
            "calico, denied as reported by the destination",
            Format::GoldmaneJson,
            Provider::Calico,
            goldmane_denied(ns, &web_pod, &api_pod, 7070, "Dst"),
            "deployment-api-ingress",
            Some(deny_all.as_str()),
        ),
        (
            "istio, rejected by ztunnel at api",
            Format::Ztunnel,
            Provider::Istio,
            ztunnel_denied_line(ns, &web_pod, &api_pod, 7070),
            "deployment-api-ingress",
            None,
        ),
        (
            "istio, rejected by ztunnel at api by a named deny policy",
            Format::Ztunnel,
            Provider::Istio,
            ztunnel_explicitly_denied_line(ns, &web_pod, &api_pod, 7070, "deny-web"),
            "deployment-api-ingress",
            Some(deny_web.as_str()),
        ),
    ];
    for (case, format, provider, line, want, denied_by) in cases {
        let (learned, denials, _) = agent_tables(format, provider, &line);
        assert!(learned.is_empty(), "{case}: a denial teaches nothing");
        assert_eq!(denials.len(), 1, "{case}: {denials:?}");
        let backend = if provider == Provider::Istio {
            ne_crds::Backend::Istio
        } else {
            ne_crds::Backend::Kubernetes
        };
        let policies = policies(if provider == Provider::Istio {
            "istio"
        } else {
            "kubernetes"
        });
        let found = detect(
            Traffic {
                denials: &denials,
                ..Traffic::default()
            },
            &policies,
            &snapshot,
            backend,
        );
        let landed: Vec<&str> = found.observations.keys().map(|(_, n)| n.as_str()).collect();
        assert_eq!(landed, [want], "{case}");
        let o = &found.observations[&(ns.to_owned(), want.to_owned())][0];
        assert_eq!(
            (
                o.mode,
                o.port,
                o.source.name.as_deref(),
                o.destination.name.as_deref()
            ),
            (Mode::Protect, 7070, Some("web"), Some("api")),
            "{case}"
        );
        assert_eq!(
            o.denied_by.as_deref(),
            denied_by,
            "{case}: the blamed policy"
        );
        assert!(found.unattributed.is_empty(), "{case}");
    }
}

/// Without a cluster: the Istio violation test's ztunnel lines (an access line and a
/// dry-run line for the same connection to 9090, a policy rejection to 7070) make the one
/// monitor record and the protect record it waits for.
#[test]
fn the_ztunnel_lines_make_the_violations_the_istio_cluster_test_expects() {
    use ne_dataplanes::Format;
    use ne_flow::edge::Provider;
    use ne_leader::violations::detect::{Traffic, detect};
    use ne_leader::violations::record::merge;

    let ns = "ne-e2e-app-1";
    let snapshot = e2e_cluster(ns);
    let (web_pod, api_pod) = (pod_name("web"), pod_name("api"));
    let tables = |lines: &str| agent_tables(Format::Ztunnel, Provider::Istio, lines);
    let (learned, _, _) = tables(&ztunnel_line(ns, &web_pod, &api_pod, 8080));
    let monitor = [promoted(
        &learned,
        &snapshot,
        Provider::Istio,
        ns,
        Mode::Monitor,
    )];
    let key = (ns.to_owned(), "deployment-api-ingress".to_owned());

    let (_, _, audits) = tables(&ztunnel_dry_run_line(ns, &api_pod));
    assert_eq!((audits.len(), audits[0].edge.port), (1, 0), "{audits:?}");
    let (edges, _, _) = tables(&ztunnel_line(ns, &web_pod, &api_pod, 9090));
    let found = detect(
        Traffic {
            edges: &edges,
            audits: &audits,
            ..Traffic::default()
        },
        &monitor,
        &snapshot,
        ne_crds::Backend::Istio,
    );
    assert!(found.unattributed.is_empty(), "{:?}", found.unattributed);
    let observations = &found.observations[&key];
    assert_eq!(observations.len(), 2, "the check and the dry-run line");
    let record = merge(&Default::default(), observations);
    assert_eq!(record.status.violations.len(), 1, "one record, not two");
    let r = &record.status.violations[0];
    assert_eq!(
        (r.port, r.source.name.as_deref(), r.source.identity.clone()),
        (
            9090,
            Some("web"),
            Some(format!("cluster.local/ns/{ns}/sa/web"))
        )
    );

    let (forwarded, denials, _) = tables(&ztunnel_denied_line(ns, &web_pod, &api_pod, 7070));
    assert!(forwarded.is_empty(), "a rejection teaches nothing");
    let protect = [promoted(
        &learned,
        &snapshot,
        Provider::Istio,
        ns,
        Mode::Protect,
    )];
    let found = detect(
        Traffic {
            denials: &denials,
            ..Traffic::default()
        },
        &protect,
        &snapshot,
        ne_crds::Backend::Istio,
    );
    let o = &found.observations[&key];
    assert_eq!(
        (o.len(), o[0].port, o[0].mode, o[0].source.name.as_deref()),
        (1, 7070, Mode::Protect, Some("web"))
    );
}

/// Without a cluster: the violation test's flows, resolved against the objects it creates
/// and checked against the policy its promotion makes, are the records it waits for (a
/// monitor record for 9090, a protect record for the denied 7070, nothing for 8080).
#[test]
fn the_test_data_plane_makes_the_violations_the_cluster_test_expects() {
    use ne_dataplanes::Format;
    use ne_flow::edge::Provider;
    use ne_leader::violations::detect::{Traffic, detect};

    let ns = "ne-e2e-app-1";
    let snapshot = e2e_cluster(ns);
    let (web_pod, api_pod) = (pod_name("web"), pod_name("api"));
    let web = Side {
        namespace: ns,
        pod: &web_pod,
        ip: WEB_IP,
        app: "web",
        deployment: Some("web"),
    };
    let api = Side {
        namespace: ns,
        pod: &api_pod,
        ip: API_IP,
        app: "api",
        deployment: None,
    };
    let tables = |lines: &str| agent_tables(Format::HubbleJson, Provider::Cilium, lines);
    let (learned, _, _) = tables(&tcp_flow(&web, &api, 8080));
    let policy = |mode| promoted(&learned, &snapshot, Provider::Cilium, ns, mode);
    let key = (ns.to_owned(), "deployment-api-ingress".to_owned());

    let (mut edges, _, _) = tables(&tcp_flow(&web, &api, 9090));
    edges.extend(learned.iter().cloned());
    let found = detect(
        Traffic {
            edges: &edges,
            ..Traffic::default()
        },
        &[policy(Mode::Monitor)],
        &snapshot,
        ne_crds::Backend::Kubernetes,
    );
    let monitor = &found.observations[&key];
    assert_eq!(monitor.len(), 1, "{monitor:?}");
    assert_eq!(
        (
            monitor[0].port,
            monitor[0].mode,
            monitor[0].source.name.as_deref(),
            monitor[0].source.kind.as_deref()
        ),
        (9090, Mode::Monitor, Some("web"), Some("Deployment"))
    );
    assert_eq!(monitor[0].destination.name.as_deref(), Some("api"));

    let (forwarded, denials, _) = tables(&denied_tcp_flow(&web, &api, 7070));
    assert!(forwarded.is_empty(), "a denial teaches nothing");
    let found = detect(
        Traffic {
            denials: &denials,
            ..Traffic::default()
        },
        &[policy(Mode::Protect)],
        &snapshot,
        ne_crds::Backend::Kubernetes,
    );
    let protect = &found.observations[&key];
    assert_eq!(
        (
            protect.len(),
            protect[0].port,
            protect[0].mode,
            protect[0].source.name.as_deref()
        ),
        (1, 7070, Mode::Protect, Some("web"))
    );
    assert!(found.unattributed.is_empty());
}

/// Without a cluster: the same data plane, agent and leader processes the cluster tests
/// start (the leader standalone, writing proposals to a directory) carry the test's flows to
/// the proposals the cluster tests wait for, so the harness itself is known to work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_data_plane_reaches_a_real_leader_through_a_real_agent() {
    let dir = temp_dir("harness");
    let socket = dir.join("hubble.sock");
    let hubble = Hubble::serve(&socket);
    let (web_pod, api_pod) = (pod_name("web"), pod_name("api"));
    // Without a cluster the destination must name its workload: nothing resolves the pod.
    hubble.add_json(&tcp_flow(
        &Side {
            namespace: "shop",
            pod: &web_pod,
            ip: WEB_IP,
            app: "web",
            deployment: Some("web"),
        },
        &Side {
            namespace: "shop",
            pod: &api_pod,
            ip: API_IP,
            app: "api",
            deployment: Some("api"),
        },
        8080,
    ));
    let ingest = free_address();
    let output = dir.join("proposals");
    let mut leader = Command::new(binary("ne-leader"));
    leader
        .args([
            "run",
            "--provider",
            "cilium",
            "--standalone",
            "--insecure-ingest",
        ])
        .args([
            "--ingest-address",
            &ingest,
            "--metrics-address",
            "127.0.0.1:0",
        ])
        .args(["--flush-interval", "200ms", "--output"])
        .arg(&output);
    let _leader = Process::spawn("harness-leader", leader);
    let mut agent = Command::new(binary("ne-agent"));
    agent
        .args(["--source", "hubble", "--hubble-address"])
        .arg(format!("unix://{}", socket.display()))
        .args(["--node-name", "worker-1", "--leader-address", &ingest])
        .args([
            "--metrics-address",
            "127.0.0.1:0",
            "--flush-interval",
            "200ms",
        ]);
    let _agent = Process::spawn("harness-agent", agent);
    for name in ["deployment-api-ingress", "deployment-web-egress"] {
        let path = output.join(format!("{name}.yaml"));
        let text = eventually(&format!("{name} written by the leader"), || {
            let path = path.clone();
            async move { std::fs::read_to_string(&path).ok() }
        })
        .await;
        let p: WorkloadNetworkPolicyProposal = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(p.metadata.namespace.as_deref(), Some("shop"));
        assert!(p.status.is_some_and(|s| s.flow_count > 0), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
