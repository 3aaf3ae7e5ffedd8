//! The CRDs against a real API server (the project's control plane, or the cluster
//! `NE_TEST_KUBECONFIG` names): every CEL rule accepted and refused with its own message, the
//! names discovery reports, the printer columns of the server's Table response, the CRDs as
//! the server stores them, a description for every field as the server publishes the schema
//! and as `kubectl explain` prints it, and the status subresource.

mod cluster;

use std::collections::BTreeMap;

use cluster::TempNamespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::{Api, Client};
use ne_crds::{
    BACKEND_IMMUTABLE_RULE, GROUP, PeerEvidence, RULE_ISTIO_INGRESS_ONLY, RULE_ISTIO_SELECTOR,
    RULE_KUBERNETES_POLICY_TYPES, RULE_KUBERNETES_SELECTOR, RULE_ONE_BACKEND_PAYLOAD, SPEC_RULES,
    VERSION, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
    WorkloadNetworkPolicyProposalStatus,
};
use serde_json::{Value, json};

/// What a client sends to get a list as the server's Table (what `kubectl get` prints).
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// The proposal kind and the policy kind.
fn proposals() -> ApiResource {
    ApiResource::erase::<WorkloadNetworkPolicyProposal>(&())
}

fn policies() -> ApiResource {
    ApiResource::erase::<WorkloadNetworkPolicy>(&())
}

/// A client, the CRDs installed and served, and a namespace of the test's own.
async fn setup(prefix: &str) -> (Client, TempNamespace) {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let ns = TempNamespace::new(&client, prefix).await;
    (client, ns)
}

fn api(ns: &TempNamespace, kind: &ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, kind)
}

/// An object of `kind` named `name` with `spec`.
fn object(kind: &ApiResource, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// A valid spec of backend `kubernetes` for `direction`.
fn kubernetes_spec(direction: &str) -> Value {
    json!({
        "backend": "kubernetes",
        "kubernetes": {
            "podSelector": {"matchLabels": {"app": "api"}},
            "policyTypes": [direction],
        },
        "targetRef": {"kind": "Deployment", "name": "api"},
        "direction": direction,
    })
}

/// A valid spec of backend `istio` (which is Ingress only).
fn istio_spec() -> Value {
    json!({
        "backend": "istio",
        "istio": {
            "selector": {"matchLabels": {"app": "db"}},
            "rules": [{"to": [{"operation": {"ports": ["5432"]}}]}],
        },
        "targetRef": {"kind": "StatefulSet", "name": "db"},
        "direction": "Ingress",
    })
}

/// A time as the API writes it (RFC 3339, whole seconds).
fn rfc3339(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `spec` with `edit` applied.
fn with(mut spec: Value, edit: impl FnOnce(&mut Value)) -> Value {
    edit(&mut spec);
    spec
}

/// The server's refusal of a request as invalid (422), or a failed test.
fn refusal<T>(result: kube::Result<T>, what: &str, expected: &str) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (422, "Invalid"),
                "{what}: refused, but not as invalid: {status:?}"
            );
            status
        }
        Err(e) => panic!("{what}: failed instead of being refused with {expected:?}: {e}"),
        Ok(_) => panic!("{what}: accepted, but it should be refused with {expected:?}"),
    }
}

/// `(reason, field, message)` of each cause the server gave.
fn causes(status: &Status) -> Vec<(&str, &str, &str)> {
    status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .map(|c| (c.reason.as_str(), c.field.as_str(), c.message.as_str()))
        .collect()
}

/// Asserts that `result` is a refusal by one CEL rule alone: one cause, on `field`, with the
/// rule's `message`, which also ends the status message.
fn assert_refused_by_rule<T>(result: kube::Result<T>, field: &str, message: &str, what: &str) {
    let status = refusal(result, what, message);
    assert!(
        status.message.ends_with(&format!(": {message}")),
        "{what}: refused with {:?}, not with the rule's message {message:?}",
        status.message
    );
    let causes = causes(&status);
    assert!(
        matches!(causes[..], [(_, f, m)] if f == field && m.ends_with(&format!(": {message}"))),
        "{what}: expected one cause, on {field}, with {message:?}; the server gave {causes:?}"
    );
}

/// One CEL rule of the spec: specs it accepts and specs it alone refuses.
struct SpecRule {
    message: &'static str,
    accepted: Vec<(&'static str, Value)>,
    refused: Vec<(&'static str, Value)>,
}

fn spec_rules() -> Vec<SpecRule> {
    vec![
        SpecRule {
            message: RULE_ISTIO_INGRESS_ONLY.1,
            accepted: vec![
                ("istio ingress", istio_spec()),
                ("kubernetes egress", kubernetes_spec("Egress")),
            ],
            refused: vec![(
                "istio egress",
                with(istio_spec(), |s| s["direction"] = json!("Egress")),
            )],
        },
        SpecRule {
            message: RULE_KUBERNETES_POLICY_TYPES.1,
            accepted: vec![
                (
                    "policyTypes [Ingress] for Ingress",
                    kubernetes_spec("Ingress"),
                ),
                ("policyTypes [Egress] for Egress", kubernetes_spec("Egress")),
            ],
            refused: vec![
                (
                    "policyTypes [Egress] for Ingress",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["kubernetes"]["policyTypes"] = json!(["Egress"])
                    }),
                ),
                (
                    "policyTypes [Ingress, Egress] for Ingress",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["kubernetes"]["policyTypes"] = json!(["Ingress", "Egress"])
                    }),
                ),
                (
                    "empty policyTypes",
                    with(kubernetes_spec("Egress"), |s| {
                        s["kubernetes"]["policyTypes"] = json!([])
                    }),
                ),
                (
                    "no policyTypes",
                    with(kubernetes_spec("Egress"), |s| {
                        s["kubernetes"]
                            .as_object_mut()
                            .unwrap()
                            .remove("policyTypes");
                    }),
                ),
            ],
        },
        SpecRule {
            message: RULE_ONE_BACKEND_PAYLOAD.1,
            accepted: vec![
                ("kubernetes payload only", kubernetes_spec("Ingress")),
                ("istio payload only", istio_spec()),
                (
                    "kubernetes payload and istio null (null is unset)",
                    with(kubernetes_spec("Ingress"), |s| s["istio"] = Value::Null),
                ),
            ],
            refused: vec![
                (
                    "backend kubernetes with both payloads",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["istio"] = istio_spec()["istio"].clone()
                    }),
                ),
                (
                    "backend istio with both payloads",
                    with(istio_spec(), |s| {
                        s["kubernetes"] = kubernetes_spec("Ingress")["kubernetes"].clone()
                    }),
                ),
                (
                    "backend istio without a payload",
                    with(istio_spec(), |s| {
                        s.as_object_mut().unwrap().remove("istio");
                    }),
                ),
                (
                    "backend istio with an istio null",
                    with(istio_spec(), |s| s["istio"] = Value::Null),
                ),
            ],
        },
        SpecRule {
            message: RULE_KUBERNETES_SELECTOR.1,
            accepted: vec![
                ("a matchLabels entry", kubernetes_spec("Ingress")),
                (
                    "a matchExpressions term only",
                    with(
                        kubernetes_spec("Ingress"),
                        |s| {
                            s["kubernetes"]["podSelector"] =
                                json!({"matchExpressions": [{"key": "app", "operator": "Exists"}]})
                        },
                    ),
                ),
            ],
            refused: vec![
                (
                    "empty podSelector",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["kubernetes"]["podSelector"] = json!({})
                    }),
                ),
                (
                    "podSelector with empty matchLabels and matchExpressions",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["kubernetes"]["podSelector"] =
                            json!({"matchLabels": {}, "matchExpressions": []})
                    }),
                ),
                (
                    "no podSelector",
                    with(kubernetes_spec("Ingress"), |s| {
                        s["kubernetes"]
                            .as_object_mut()
                            .unwrap()
                            .remove("podSelector");
                    }),
                ),
            ],
        },
        SpecRule {
            message: RULE_ISTIO_SELECTOR.1,
            accepted: vec![
                ("a matchLabels entry", istio_spec()),
                (
                    "a matchExpressions term only",
                    with(istio_spec(), |s| {
                        s["istio"]["selector"] = json!({"matchExpressions": [
                            {"key": "app", "operator": "In", "values": ["db"]}
                        ]})
                    }),
                ),
            ],
            refused: vec![
                (
                    "empty selector",
                    with(istio_spec(), |s| s["istio"]["selector"] = json!({})),
                ),
                (
                    "selector with empty matchLabels and matchExpressions",
                    with(istio_spec(), |s| {
                        s["istio"]["selector"] = json!({"matchLabels": {}, "matchExpressions": []})
                    }),
                ),
            ],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spec_rule_accepts_and_refuses_with_its_message_on_both_kinds() {
    let (_client, ns) = setup("ne-crds-rules").await;
    let rules = spec_rules();
    let covered: Vec<&str> = rules.iter().map(|r| r.message).collect();
    let all: Vec<&str> = SPEC_RULES.iter().map(|(_, message)| *message).collect();
    assert_eq!(covered, all, "every spec rule has its cases here");

    for kind in [proposals(), policies()] {
        let api = api(&ns, &kind);
        let mut created = 0;
        for rule in &rules {
            for (what, spec) in &rule.accepted {
                created += 1;
                let name = format!("accepted-{created}");
                let stored = api
                    .create(&PostParams::default(), &object(&kind, &name, spec.clone()))
                    .await
                    .unwrap_or_else(|e| panic!("{} with {what}: refused: {e}", kind.kind));
                assert_eq!(stored.data["spec"]["backend"], spec["backend"]);
            }
            for (what, spec) in &rule.refused {
                let result = api
                    .create(
                        &PostParams::default(),
                        &object(&kind, "refused", spec.clone()),
                    )
                    .await;
                let what = format!("{} with {what}", kind.kind);
                assert_refused_by_rule(result, "spec", rule.message, &what);
            }
        }
        let stored = api.list(&Default::default()).await.unwrap().items.len();
        assert_eq!(
            stored, created,
            "{}: exactly the accepted are stored",
            kind.kind
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_is_immutable_on_a_stored_object_of_both_kinds() {
    let (_client, ns) = setup("ne-crds-immutable").await;
    let message = BACKEND_IMMUTABLE_RULE.1;
    for kind in [proposals(), policies()] {
        let api = api(&ns, &kind);
        let what = |change: &str| format!("{}: {change}", kind.kind);
        let params = PostParams::default();

        let mut stored = api
            .create(
                &params,
                &object(&kind, "kubernetes", kubernetes_spec("Ingress")),
            )
            .await
            .unwrap();
        // An update that keeps the backend is accepted.
        stored.data["spec"]["targetRef"]["name"] = json!("api-v2");
        let mut stored = api.replace("kubernetes", &params, &stored).await.unwrap();
        assert_eq!(stored.data["spec"]["targetRef"]["name"], "api-v2");

        // An update to a spec valid in itself, but of the other backend, is refused.
        stored.data["spec"] = istio_spec();
        let result = api.replace("kubernetes", &params, &stored).await;
        assert_refused_by_rule(result, "spec.backend", message, &what("replace to istio"));
        let patch = json!({"spec": {
            "backend": "istio", "kubernetes": null, "istio": istio_spec()["istio"],
        }});
        let result = api
            .patch("kubernetes", &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        assert_refused_by_rule(result, "spec.backend", message, &what("patch to istio"));

        api.create(&params, &object(&kind, "istio", istio_spec()))
            .await
            .unwrap();
        let patch = json!({"spec": {
            "backend": "kubernetes", "istio": null,
            "kubernetes": kubernetes_spec("Ingress")["kubernetes"],
        }});
        let result = api
            .patch("istio", &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        assert_refused_by_rule(
            result,
            "spec.backend",
            message,
            &what("patch to kubernetes"),
        );

        for (name, backend) in [("kubernetes", "kubernetes"), ("istio", "istio")] {
            let stored = api.get(name).await.unwrap();
            assert_eq!(
                stored.data["spec"]["backend"],
                backend,
                "{}",
                what("refused updates left the backend")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_mode_is_refused_and_mode_defaults_to_monitor() {
    let (_client, ns) = setup("ne-crds-mode").await;
    let kind = policies();
    let api = api(&ns, &kind);
    let params = PostParams::default();
    for mode in ["monitor", "protect"] {
        let spec = with(istio_spec(), |s| s["mode"] = json!(mode));
        let stored = api.create(&params, &object(&kind, mode, spec)).await;
        let stored = stored.unwrap_or_else(|e| panic!("mode {mode} refused: {e}"));
        assert_eq!(stored.data["spec"]["mode"], mode);
    }
    let stored = api
        .create(
            &params,
            &object(&kind, "no-mode", kubernetes_spec("Egress")),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.data["spec"]["mode"], "monitor",
        "mode defaults to monitor"
    );

    for mode in ["enforce", "Protect", ""] {
        let spec = with(istio_spec(), |s| s["mode"] = json!(mode));
        let expected =
            format!("Unsupported value: {mode:?}: supported values: \"monitor\", \"protect\"");
        let result = api.create(&params, &object(&kind, "refused", spec)).await;
        let status = refusal(result, &format!("mode {mode:?}"), &expected);
        let causes = causes(&status);
        assert!(
            causes.contains(&("FieldValueNotSupported", "spec.mode", expected.as_str())),
            "mode {mode:?}: expected {expected:?} on spec.mode; the server gave {causes:?}"
        );
    }
}

/// A kubectl command's output, or what went wrong.
fn try_kubectl(args: &[&str]) -> Result<String, String> {
    let output = cluster::kubectl()
        .args(args)
        .output()
        .map_err(|e| format!("cannot run kubectl: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "kubectl {} failed: {}{stdout}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn kubectl(args: &[&str]) -> String {
    try_kubectl(args).unwrap_or_else(|e| panic!("{e}"))
}

/// `(plural, kind, short name)` of both kinds.
const NAMES: [(&str, &str, &str); 2] = [
    (
        "workloadnetworkpolicyproposals",
        "WorkloadNetworkPolicyProposal",
        "wnpp",
    ),
    ("workloadnetworkpolicies", "WorkloadNetworkPolicy", "wnp"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reports_the_short_names_and_the_category() {
    let (client, ns) = setup("ne-crds-discovery").await;
    let group_version = format!("{GROUP}/{VERSION}");
    let list = client
        .list_api_group_resources(&group_version)
        .await
        .unwrap();
    for (plural, kind, short) in NAMES {
        let resource = list
            .resources
            .iter()
            .find(|r| r.name == plural)
            .unwrap_or_else(|| panic!("discovery of {group_version} has no {plural}"));
        assert_eq!(resource.kind, kind);
        assert!(resource.namespaced, "{plural} is namespaced");
        assert_eq!(
            resource.short_names.as_deref(),
            Some(&[short.to_owned()][..]),
            "short names of {plural}"
        );
        assert_eq!(
            resource.categories.as_deref(),
            Some(&["networkenforcer".to_owned()][..]),
            "categories of {plural}"
        );
        let status = format!("{plural}/status");
        assert!(
            list.resources.iter().any(|r| r.name == status),
            "discovery has no {status}"
        );
    }

    // kubectl's discovery (the aggregated one) lists them the same way...
    let rows = cluster::eventually("kubectl api-resources lists both kinds", || async {
        let out = try_kubectl(&["api-resources", "--api-group", GROUP, "-o", "wide"]).ok()?;
        let rows: Vec<Vec<String>> = out
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect();
        (rows.len() == 2).then_some(rows)
    })
    .await;
    let verbs = "delete,deletecollection,get,list,patch,create,update,watch";
    for (plural, kind, short) in NAMES {
        let expected = [
            plural,
            short,
            group_version.as_str(),
            "true",
            kind,
            verbs,
            "networkenforcer",
        ];
        assert!(
            rows.iter().any(|r| r == &expected),
            "kubectl api-resources has no row {expected:?}: {rows:?}"
        );
    }

    // ...and resolves the short names and the category to both kinds.
    api(&ns, &proposals())
        .create(
            &PostParams::default(),
            &object(&proposals(), "learned", istio_spec()),
        )
        .await
        .unwrap();
    api(&ns, &policies())
        .create(
            &PostParams::default(),
            &object(&policies(), "promoted", istio_spec()),
        )
        .await
        .unwrap();
    let expected = [
        format!("workloadnetworkpolicy.{GROUP}/promoted"),
        format!("workloadnetworkpolicyproposal.{GROUP}/learned"),
    ];
    for resources in ["wnpp,wnp", "networkenforcer"] {
        let out = kubectl(&["get", resources, "-n", &ns.name, "-o", "name"]);
        let mut names: Vec<&str> = out.lines().collect();
        names.sort_unstable();
        assert_eq!(names, expected, "kubectl get {resources}");
    }
}

/// The list of `plural` in `ns` as the server's Table.
async fn table(client: &Client, ns: &str, plural: &str) -> Value {
    let request = http::Request::get(format!(
        "/apis/{GROUP}/{VERSION}/namespaces/{ns}/{plural}?includeObject=None"
    ))
    .header(http::header::ACCEPT, TABLE)
    .body(Vec::new())
    .unwrap();
    let table: Value = client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("the Table of {plural}: {e}"));
    assert_eq!(
        (&table["kind"], &table["apiVersion"]),
        (&json!("Table"), &json!("meta.k8s.io/v1")),
        "{plural}: not a Table: {table}"
    );
    table
}

/// Asserts that the Table's columns are `Name` and the CRD's printer columns, each with the
/// CRD's type and description.
fn assert_columns(table: &Value, crd: &CustomResourceDefinition) {
    let kind = &crd.spec.names.kind;
    let columns: Vec<(&str, &str, &str)> = table["columnDefinitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{kind}: no columnDefinitions"))
        .iter()
        .map(|c| {
            let field = |key: &str| c[key].as_str().unwrap_or_default();
            (field("name"), field("type"), field("description"))
        })
        .collect();
    let printer = crd.spec.versions[0]
        .additional_printer_columns
        .as_deref()
        .unwrap_or_default();
    assert_eq!(columns.len(), printer.len() + 1, "{kind}: {columns:?}");
    assert_eq!(
        (columns[0].0, columns[0].1),
        ("Name", "string"),
        "{kind}: the first column"
    );
    for (served, column) in columns[1..].iter().zip(printer) {
        let description = column.description.as_deref().unwrap_or_else(|| {
            panic!(
                "{kind}: column {} has no description: the server shows its own, {:?}",
                column.name, served.2
            )
        });
        assert_eq!(
            *served,
            (column.name.as_str(), column.type_.as_str(), description),
            "{kind}: a column"
        );
    }
}

/// The cells of each row, by the row's name (its first cell).
fn rows(table: &Value) -> BTreeMap<String, Vec<Value>> {
    table["rows"]
        .as_array()
        .expect("a Table has rows")
        .iter()
        .map(|row| {
            let cells = row["cells"].as_array().expect("a row has cells").clone();
            (cells[0].as_str().unwrap().to_owned(), cells)
        })
        .collect()
}

/// Splits off the last cell, an Age, and checks it is a few seconds: the object was created
/// by this test.
fn split_age(mut cells: Vec<Value>, what: &str) -> Vec<Value> {
    let age = cells.pop().unwrap();
    let seconds = age
        .as_str()
        .and_then(|a| a.strip_suffix('s'))
        .and_then(|s| s.parse::<u32>().ok());
    assert!(
        seconds.is_some_and(|s| s < 120),
        "{what}: the Age of a fresh object is {age}"
    );
    cells
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_shows_the_printer_columns_with_status_values() {
    let (client, ns) = setup("ne-crds-table").await;
    let [(_, wnpp_crd), (_, wnp_crd)] = ne_crds::crds();
    let params = PostParams::default();

    let policies_api = api(&ns, &policies());
    let spec = with(kubernetes_spec("Ingress"), |s| s["mode"] = json!("protect"));
    policies_api
        .create(&params, &object(&policies(), "seen", spec))
        .await
        .unwrap();
    // 10 days and an hour ago: `10d` as the server rounds it, whatever the minute.
    let last = rfc3339(Timestamp::now() - SignedDuration::from_hours(241));
    let status = json!({"status": {
        "activeViolationCount": 3, "violationCount": 5, "lastViolationTime": last
    }});
    policies_api
        .patch_status("seen", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    policies_api
        .create(&params, &object(&policies(), "quiet", istio_spec()))
        .await
        .unwrap();

    let table = table(&client, &ns.name, "workloadnetworkpolicies").await;
    assert_columns(&table, &wnp_crd);
    let rows = rows(&table);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        split_age(rows["seen"].clone(), "wnp seen"),
        [
            json!("seen"),
            json!("protect"),
            json!("kubernetes"),
            json!(3),
            json!("10d")
        ]
    );
    // No status yet: its columns are empty; the mode is the default.
    assert_eq!(
        split_age(rows["quiet"].clone(), "wnp quiet"),
        [
            json!("quiet"),
            json!("monitor"),
            json!("istio"),
            Value::Null,
            Value::Null
        ]
    );

    let proposals_api = api(&ns, &proposals());
    proposals_api
        .create(
            &params,
            &object(&proposals(), "api-egress", kubernetes_spec("Egress")),
        )
        .await
        .unwrap();
    proposals_api
        .create(&params, &object(&proposals(), "db-ingress", istio_spec()))
        .await
        .unwrap();
    // Evidence as the leader writes it: two peers, the newest added 10 days and an hour
    // ago, traffic last seen 30 hours ago.
    let ago = |hours: i64| {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::now() - SignedDuration::from_hours(hours),
        )
    };
    let row = |peer: &str, protocol: &str, port, first, last, flows| PeerEvidence {
        peer: peer.to_owned(),
        protocol: protocol.to_owned(),
        port,
        first_seen: ago(first),
        last_seen: ago(last),
        flow_count: flows,
        dns_name: None,
    };
    let mut evidence = WorkloadNetworkPolicyProposalStatus {
        peers: vec![
            row("ip:203.0.113.10/32", "TCP", 443, 300, 30, 5),
            row("pods:kube-system/k8s-app=kube-dns", "UDP", 53, 241, 40, 7),
        ],
        flow_count: 12,
        ..Default::default()
    };
    evidence.summarize();
    proposals_api
        .patch_status(
            "api-egress",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": evidence })),
        )
        .await
        .unwrap();
    let table = self::table(&client, &ns.name, "workloadnetworkpolicyproposals").await;
    assert_columns(&table, &wnpp_crd);
    let rows = self::rows(&table);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        split_age(rows["api-egress"].clone(), "wnpp api-egress"),
        [
            json!("api-egress"),
            json!("kubernetes"),
            json!("api"),
            json!("Egress"),
            json!(2),
            json!("TCP/443,UDP/53"),
            json!(12),
            json!("10d"),
            json!("30h")
        ]
    );
    // No status yet: its columns are empty.
    let mut fresh = ["db-ingress", "istio", "db", "Ingress"]
        .map(|c| json!(c))
        .to_vec();
    fresh.extend(std::iter::repeat_n(Value::Null, 5));
    assert_eq!(
        split_age(rows["db-ingress"].clone(), "wnpp db-ingress"),
        fresh
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_stores_the_crds_as_generated() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for (_, generated) in ne_crds::crds() {
        let name = generated.metadata.name.clone().unwrap();
        let stored = api.get(&name).await.unwrap();
        let kind = &generated.spec.names.kind;
        // The schemas, printer columns and subresources, exactly as applied.
        assert_eq!(
            stored.spec.versions, generated.spec.versions,
            "{name}: the server rewrote a version"
        );
        assert_eq!(
            (&stored.spec.group, &stored.spec.scope),
            (&generated.spec.group, &generated.spec.scope)
        );
        // The names, with the list kind the server derives.
        let mut names = generated.spec.names.clone();
        names.list_kind = Some(format!("{kind}List"));
        assert_eq!(stored.spec.names, names, "{name}: the names");
        // ...all of them accepted (no other CRD holds a short name or the plural).
        let status = stored.status.unwrap_or_default();
        assert_eq!(status.accepted_names, Some(names), "{name}: accepted names");
        assert_eq!(
            status.stored_versions.as_deref(),
            Some(&[VERSION.to_owned()][..])
        );
    }
}

/// Joins a field path the way `kubectl explain` writes it.
fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Every field under schema `node` (through `properties`, and through `items` the way
/// `kubectl explain` does: `spec.kubernetes.ingress.from`) with its description.
fn fields(node: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, sub) in properties {
            let path = join(path, name);
            let description = sub["description"].as_str().unwrap_or_default();
            out.insert(path.clone(), description.to_owned());
            fields(sub, &path, out);
        }
    }
    if let Some(items) = node.get("items") {
        fields(items, path, out);
    }
}

/// The generated `openAPIV3Schema` of `crd`, as JSON.
fn generated_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = crd.spec.versions[0].schema.as_ref().unwrap();
    serde_json::to_value(schema.open_api_v3_schema.as_ref().unwrap()).unwrap()
}

/// Whether a description breaks a line inside a paragraph (a doc comment's source wrapping):
/// `kubectl explain` wraps the text itself, so it prints each such break as a short line.
fn breaks_a_paragraph(description: &str) -> bool {
    description.split("\n\n").any(|p| p.contains('\n'))
}

/// Every field of `crd`'s kind with its description, as the server publishes the schema
/// (`/openapi/v3`), once that is the generated one: the server publishes a changed CRD a
/// moment after it took it.
async fn published_fields(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> BTreeMap<String, String> {
    let path = format!("/openapi/v3/apis/{GROUP}/{VERSION}");
    let reversed_group: Vec<&str> = GROUP.rsplit('.').collect();
    let kind = &crd.spec.names.kind;
    let component = format!("{}.{VERSION}.{kind}", reversed_group.join("."));
    let mut generated = BTreeMap::new();
    fields(&generated_schema(crd), "", &mut generated);
    cluster::eventually(
        &format!("{path} publishes the generated {kind}"),
        || async {
            let request = http::Request::get(&path).body(Vec::new()).unwrap();
            let document: Value = client.request(request).await.ok()?;
            let mut published = BTreeMap::new();
            fields(
                &document["components"]["schemas"][&component],
                "",
                &mut published,
            );
            let same = published
                .iter()
                .filter(|(path, _)| path.starts_with("spec") || path.starts_with("status"))
                .eq(&generated);
            same.then_some(published)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_schema_describes_every_field() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    for (_, crd) in ne_crds::crds() {
        let kind = &crd.spec.names.kind;
        let published = published_fields(&client, &crd).await;
        for field in ["apiVersion", "kind", "metadata", "spec", "status"] {
            assert!(
                published.contains_key(field),
                "{kind}: {field} not published"
            );
        }
        assert!(
            published.len() > 90,
            "{kind}: only {} fields",
            published.len()
        );
        for (field, description) in &published {
            assert!(
                !description.trim().is_empty(),
                "{kind}: {field} is published without a description"
            );
            assert!(
                !breaks_a_paragraph(description),
                "{kind}: the description of {field} breaks a line inside a paragraph, which \
                 kubectl explain prints as a short line: {description:?}"
            );
        }
    }
}

/// The text of a `kubectl explain` output's DESCRIPTION section, its lines joined.
fn explained_description(out: &str) -> String {
    let section = out
        .split_once("DESCRIPTION:\n")
        .map_or("", |(_, rest)| rest);
    let section = section.split_once("\nFIELDS:").map_or(section, |(d, _)| d);
    section.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_describes_every_field() {
    let client = cluster::client().await;
    cluster::install_crds(&client).await;
    for ((_, crd), (_, _, short)) in ne_crds::crds().into_iter().zip(NAMES) {
        let kind = &crd.spec.names.kind;
        // kubectl explains what the server publishes: the generated schema, once it is that.
        published_fields(&client, &crd).await;
        let mut all = BTreeMap::new();
        fields(&generated_schema(&crd), "", &mut all);
        // Each object, with the fields it lists: explaining it shows their descriptions.
        let mut objects: Vec<(String, Vec<String>)> = vec![(String::new(), Vec::new())];
        for field in all.keys() {
            let (parent, name) = field.rsplit_once('.').unwrap_or(("", field));
            match objects.iter_mut().find(|(path, _)| path == parent) {
                Some((_, children)) => children.push(name.to_owned()),
                None => objects.push((parent.to_owned(), vec![name.to_owned()])),
            }
        }
        assert!(objects.len() > 25, "{kind}: only {} objects", objects.len());
        // Discovery may not list the kind yet.
        let root = cluster::eventually(&format!("kubectl explain {short}"), || async {
            let out = try_kubectl(&["explain", short]).ok()?;
            let description = crd.spec.versions[0].schema.as_ref()?;
            let description = description
                .open_api_v3_schema
                .as_ref()?
                .description
                .as_ref()?;
            let expected = description.split_whitespace().collect::<Vec<_>>().join(" ");
            (explained_description(&out) == expected).then_some(out)
        })
        .await;
        assert!(root.contains(&format!("KIND:       {kind}")), "{root}");

        let explained: Vec<(String, Vec<String>, Result<String, String>)> =
            std::thread::scope(|scope| {
                let mut done = Vec::new();
                for chunk in objects.chunks(8) {
                    let running: Vec<_> = chunk
                        .iter()
                        .map(|(path, children)| {
                            let target = join(short, path);
                            let handle = scope.spawn(move || try_kubectl(&["explain", &target]));
                            (path.clone(), children.clone(), handle)
                        })
                        .collect();
                    for (path, children, handle) in running {
                        done.push((path, children, handle.join().unwrap()));
                    }
                }
                done
            });
        for (path, children, out) in explained {
            let out = out.unwrap_or_else(|e| panic!("{kind}: {e}"));
            let what = format!("kubectl explain {}", join(short, &path));
            if !path.is_empty() {
                let expected = all[&path].split_whitespace().collect::<Vec<_>>().join(" ");
                assert!(
                    !expected.is_empty() && explained_description(&out).starts_with(&expected),
                    "{what}: its description is not the schema's {expected:?}:\n{out}"
                );
            }
            assert!(!out.contains("<empty>"), "{what}: no description:\n{out}");
            assert!(
                !out.contains("<no description>"),
                "{what}: a field has no description:\n{out}"
            );
            for child in children {
                assert!(
                    out.lines().any(|l| l.starts_with(&format!("  {child}\t"))),
                    "{what}: field {child} is not listed:\n{out}"
                );
            }
        }
    }
}

/// The `data` of a stored object: its spec and status.
fn spec_and_status(object: &DynamicObject) -> (Value, Value) {
    (object.data["spec"].clone(), object.data["status"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_subresource_separates_spec_and_status_of_both_kinds() {
    let (_client, ns) = setup("ne-crds-status").await;
    let now = rfc3339(Timestamp::now());
    let cases = [
        (
            proposals(),
            json!({"learningSince": now, "flowCount": 7}),
            json!({"flowCount": 9}),
            json!({"peers": [{"peer": "ip:10.0.0.1/32", "protocol": "TCP", "port": 70000,
                              "firstSeen": now, "lastSeen": now, "flowCount": 1}]}),
            "status.peers[0].port",
        ),
        (
            policies(),
            json!({"observedGeneration": 1, "activeViolationCount": 2, "violationCount": 2}),
            json!({"observedGeneration": 2, "activeViolationCount": 0, "violationCount": 2}),
            json!({"violations": [{"id": 1, "firstSeen": now, "lastSeen": now, "count": 1,
                                   "source": {}, "destination": {}, "protocol": "TCP",
                                   "port": 80, "direction": "Ingress", "mode": "block"}]}),
            "status.violations[0].mode",
        ),
    ];
    for (kind, first, second, invalid, invalid_field) in cases {
        let k = &kind.kind;
        let api = api(&ns, &kind);
        let name = "subject";
        let mut body = object(&kind, name, kubernetes_spec("Ingress"));
        body.data["status"] = first.clone();
        let created = api.create(&PostParams::default(), &body).await.unwrap();
        let (spec, status) = spec_and_status(&created);
        assert_eq!(status, Value::Null, "{k}: a create sets no status");
        assert_eq!(created.metadata.generation, Some(1), "{k}");

        // A status update changes the status alone, whatever spec it carries.
        let patch = json!({"spec": {"targetRef": {"name": "set-by-status"}}, "status": first});
        let updated = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let (spec_after, status_after) = spec_and_status(&updated);
        assert_eq!(spec_after, spec, "{k}: a status update changed the spec");
        for (field, value) in first.as_object().unwrap() {
            assert_eq!(&status_after[field], value, "{k}: status.{field}");
        }
        assert_eq!(updated.metadata.generation, Some(1), "{k}: generation");

        // A spec update changes the spec alone, whatever status it carries, and the generation.
        let patch = json!({"spec": {"targetRef": {"name": "api-v2"}}, "status": second});
        let updated = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        let (spec_now, status_now) = spec_and_status(&updated);
        assert_eq!(spec_now["targetRef"]["name"], "api-v2", "{k}");
        assert_eq!(
            status_now, status_after,
            "{k}: a spec update changed the status"
        );
        assert_eq!(updated.metadata.generation, Some(2), "{k}: generation");

        // Metadata alone is no new generation.
        let patch = json!({"metadata": {"labels": {"team": "shop"}}});
        let updated = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        assert_eq!(
            updated.metadata.generation,
            Some(2),
            "{k}: a label changed the generation"
        );

        // The leader's way: server-side apply of the status.
        let apply = json!({
            "apiVersion": kind.api_version, "kind": k,
            "metadata": {"name": name}, "status": second,
        });
        let applied = api
            .patch_status(
                name,
                &PatchParams::apply("ne-crds-test").force(),
                &Patch::Apply(&apply),
            )
            .await
            .unwrap();
        let (spec_applied, status_applied) = spec_and_status(&applied);
        assert_eq!(
            spec_applied, spec_now,
            "{k}: a status apply changed the spec"
        );
        for (field, value) in second.as_object().unwrap() {
            assert_eq!(&status_applied[field], value, "{k}: applied status.{field}");
        }
        assert_eq!(applied.metadata.generation, Some(2), "{k}: generation");
        if let Some(observed) = status_applied.get("observedGeneration") {
            assert_eq!(
                observed.as_i64(),
                applied.metadata.generation,
                "{k}: observed"
            );
        }

        // The status is validated against its schema.
        let patch = json!({"status": invalid});
        let result = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        let status = refusal(result, &format!("{k}: an invalid status"), invalid_field);
        let causes = causes(&status);
        assert!(
            causes.iter().any(|(_, field, _)| *field == invalid_field),
            "{k}: expected a cause on {invalid_field}; the server gave {causes:?}"
        );
        let stored = api.get(name).await.unwrap();
        assert_eq!(spec_and_status(&stored), (spec_now, status_applied), "{k}");
    }
}
