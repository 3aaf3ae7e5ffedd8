//! The writer against a scripted API server (tower-test): each test lists the
//! requests it expects, in order, with method, path, query and body, and what the server
//! answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use ne_crds::{
    Backend, Mode, PROMOTED_FROM_LABEL, PolicyDirection, TargetKind, TargetRef,
    WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal, WorkloadNetworkPolicyProposalSpec,
    WorkloadNetworkPolicyProposalStatus, WorkloadNetworkPolicySpec,
};
use serde_json::{Value, json};

use super::*;
use crate::controller::metrics::{NamespaceModeLabels, ViolationLabels};
use crate::controller::plan::{Action, Event, ObjectKey, Plan};
use ne_flow::edge::Provider;
use ne_telemetry::logs::LogSender;
use ne_telemetry::testing::Collector;

struct Leading(AtomicBool);

impl Leadership for Leading {
    fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn leading() -> Leading {
    Leading(AtomicBool::new(true))
}

/// One expected request and the answer.
struct Step {
    method: &'static str,
    /// Path and query, exactly.
    uri: String,
    check: Box<dyn Fn(&Value) + Send>,
    status: u16,
    answer: Box<dyn Fn(&Value) -> Value + Send>,
}

fn step(
    method: &'static str,
    uri: impl Into<String>,
    check: impl Fn(&Value) + Send + 'static,
    status: u16,
    answer: impl Fn(&Value) -> Value + Send + 'static,
) -> Step {
    Step {
        method,
        uri: uri.into(),
        check: Box::new(check),
        status,
        answer: Box::new(answer),
    }
}

/// The request body, with a uid added: what an API server returns for a write.
fn echo(body: &Value) -> Value {
    let mut out = body.clone();
    out["metadata"]["uid"] = json!("uid-new");
    out["metadata"]["resourceVersion"] = json!("7");
    out
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

/// Runs `plan` against a server that expects exactly `steps`; returns the outcome.
async fn run(plan: Plan, steps: Vec<Step>, budget: Budget, leader: &Leading) -> Outcome {
    let events = ViolationEvents::new(Provider::Cilium, LogSender::disabled());
    run_with(vec![plan], steps, budget, leader, events, Arc::default()).await[0]
}

/// Runs `plans` in turn with one writer against a server that expects exactly `steps`.
async fn run_with(
    plans: Vec<Plan>,
    steps: Vec<Step>,
    budget: Budget,
    leader: &Leading,
    events: ViolationEvents,
    metrics: Arc<ControllerMetrics>,
) -> Vec<Outcome> {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        for (i, step) in steps.into_iter().enumerate() {
            let (request, respond) = handle
                .next_request()
                .await
                .unwrap_or_else(|| panic!("request {i} ({} {}) never came", step.method, step.uri));
            assert_eq!(request.method().as_str(), step.method, "request {i}");
            assert_eq!(
                request.uri().path_and_query().map(|p| p.as_str()),
                Some(step.uri.as_str()),
                "request {i}"
            );
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            (step.check)(&body);
            let answer = (step.answer)(&body);
            respond.send_response(
                Response::builder()
                    .status(StatusCode::from_u16(step.status).unwrap())
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
        // Nothing else may be asked.
        assert!(
            handle.next_request().await.is_none(),
            "an unexpected request"
        );
    });
    let client = Client::new(service, "default");
    let mut writer = Writer::new(client, "leader-0", budget, metrics, events);
    let mut outcomes = Vec::new();
    for plan in plans {
        outcomes.push(writer.execute(plan, leader).await);
    }
    drop(writer);
    server.await.unwrap();
    outcomes
}

fn plenty() -> Budget {
    Budget::new(1000.0, 1000)
}

const WNP: &str =
    "/apis/networkenforcer.kubewarden.io/v1alpha1/namespaces/shop/workloadnetworkpolicies";
const WNPP: &str =
    "/apis/networkenforcer.kubewarden.io/v1alpha1/namespaces/shop/workloadnetworkpolicyproposals";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop/events";
const CREATE: &str = "?&fieldManager=network-enforcer";
const APPLY: &str = "?&force=true&fieldManager=network-enforcer";

fn spec() -> WorkloadNetworkPolicyProposalSpec {
    WorkloadNetworkPolicyProposalSpec {
        backend: Backend::Kubernetes,
        kubernetes: Some(Default::default()),
        istio: None,
        target_ref: TargetRef {
            kind: TargetKind::Deployment,
            name: "api".to_owned(),
        },
        direction: PolicyDirection::Ingress,
    }
}

fn proposal_key() -> ObjectKey {
    ObjectKey {
        namespace: "shop".to_owned(),
        name: "deployment-api-ingress".to_owned(),
        uid: Some("uid-p".to_owned()),
    }
}

/// The policy a promotion of the `api` proposal creates, in `mode`.
fn policy(mode: Mode) -> WorkloadNetworkPolicy {
    let s = spec();
    let mut policy = WorkloadNetworkPolicy::new(
        "deployment-api-ingress",
        WorkloadNetworkPolicySpec {
            backend: s.backend,
            kubernetes: s.kubernetes,
            istio: None,
            target_ref: s.target_ref,
            direction: s.direction,
            mode,
        },
    );
    policy.metadata.namespace = Some("shop".to_owned());
    policy
}

fn promotion() -> Action {
    let mut policy = policy(Mode::Protect);
    policy.metadata.labels = Some(
        [(
            PROMOTED_FROM_LABEL.to_owned(),
            "deployment-api-ingress".to_owned(),
        )]
        .into(),
    );
    Action::Promote {
        policy: Box::new(policy),
        proposal: proposal_key(),
    }
}

#[tokio::test]
async fn promotion_creates_the_policy_records_an_event_and_deletes_the_proposal() {
    let plan = Plan {
        actions: vec![promotion()],
        ..Plan::default()
    };
    let steps = vec![
        step(
            "POST",
            format!("{WNP}{CREATE}"),
            |b| {
                assert_eq!(b["spec"]["mode"], "protect");
                assert_eq!(
                    b["metadata"]["labels"][PROMOTED_FROM_LABEL],
                    "deployment-api-ingress"
                );
            },
            201,
            echo,
        ),
        step(
            "POST",
            format!("{EVENTS}?"),
            |b| {
                assert_eq!(
                    (b["type"].as_str(), b["reason"].as_str()),
                    (Some("Normal"), Some("Promoted"))
                );
                assert_eq!(b["regarding"]["kind"], "WorkloadNetworkPolicy");
                assert_eq!(b["regarding"]["uid"], "uid-new");
            },
            201,
            echo,
        ),
        step(
            "DELETE",
            format!("{WNPP}/deployment-api-ingress?"),
            |b| assert_eq!(b["preconditions"]["uid"], "uid-p"),
            200,
            |_| json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(
        outcome,
        Outcome {
            written: 1,
            deferred: 0,
            failed: 0
        }
    );
}

#[tokio::test]
async fn a_policy_that_appeared_meanwhile_keeps_the_proposal_and_warns() {
    let plan = Plan {
        actions: vec![promotion()],
        ..Plan::default()
    };
    let steps = vec![
        step(
            "POST",
            format!("{WNP}{CREATE}"),
            |_| {},
            409,
            |_| status(409, "AlreadyExists"),
        ),
        step(
            "POST",
            format!("{EVENTS}?"),
            |b| {
                assert_eq!(
                    (b["type"].as_str(), b["reason"].as_str()),
                    (Some("Warning"), Some("PromotionConflict"))
                );
                assert_eq!(b["regarding"]["kind"], "WorkloadNetworkPolicyProposal");
                assert_eq!(b["regarding"]["uid"], "uid-p");
            },
            201,
            echo,
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(outcome.failed, 0);
}

fn new_proposal() -> WorkloadNetworkPolicyProposal {
    let mut p = WorkloadNetworkPolicyProposal::new("deployment-api-ingress", spec());
    p.metadata.namespace = Some("shop".to_owned());
    p.status = Some(WorkloadNetworkPolicyProposalStatus {
        flow_count: 42,
        ..Default::default()
    });
    p
}

#[tokio::test]
async fn a_new_proposal_is_created_then_its_status_applied() {
    let plan = Plan {
        actions: vec![Action::ApplyProposal {
            object: Box::new(new_proposal()),
            spec: true,
            status: true,
        }],
        ..Plan::default()
    };
    let steps = vec![
        step(
            "POST",
            format!("{WNPP}{CREATE}"),
            |b| {
                assert!(
                    b.get("status").is_none(),
                    "the create carries no status: {b}"
                );
                assert_eq!(b["spec"]["targetRef"]["name"], "api");
            },
            201,
            echo,
        ),
        step(
            "PATCH",
            format!("{WNPP}/deployment-api-ingress/status{APPLY}"),
            |b| {
                assert_eq!(b["status"]["flowCount"], 42);
                assert_eq!(b["kind"], "WorkloadNetworkPolicyProposal");
            },
            200,
            // The server answers with the whole object.
            |_| echo(&serde_json::to_value(new_proposal()).unwrap()),
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(
        outcome,
        Outcome {
            written: 1,
            deferred: 0,
            failed: 0
        }
    );
}

#[tokio::test]
async fn a_known_object_is_applied_with_its_uid_as_precondition() {
    let mut np = k8s_openapi::api::networking::v1::NetworkPolicy::default();
    np.metadata.name = Some("deployment-api-ingress".to_owned());
    np.metadata.namespace = Some("shop".to_owned());
    np.metadata.uid = Some("uid-np".to_owned());
    let plan = Plan {
        actions: vec![Action::ApplyNetworkPolicy(Box::new(np))],
        ..Plan::default()
    };
    let steps = vec![step(
        "PATCH",
        format!(
            "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/deployment-api-ingress{APPLY}"
        ),
        |b| {
            assert_eq!(b["metadata"]["uid"], "uid-np");
            assert_eq!(b["kind"], "NetworkPolicy");
        },
        200,
        echo,
    )];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(outcome.written, 1);
}

/// A create records its fields as the manager's `Update`; the writer moves them into its
/// `Apply` entry at once (no field manager, the written resourceVersion as precondition),
/// so that a later apply that omits a label or annotation removes it.
#[tokio::test]
async fn the_fields_of_a_create_are_moved_into_the_apply_entry() {
    let mut np = k8s_openapi::api::networking::v1::NetworkPolicy::default();
    np.metadata.name = Some("deployment-api-ingress".to_owned());
    np.metadata.namespace = Some("shop".to_owned());
    let plan = Plan {
        actions: vec![Action::ApplyNetworkPolicy(Box::new(np))],
        ..Plan::default()
    };
    let nps = "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies";
    let fields = json!({"f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}}});
    let created = move |b: &Value| {
        let mut out = echo(b);
        out["metadata"]["managedFields"] = json!([{
            "apiVersion": "networking.k8s.io/v1", "fieldsType": "FieldsV1", "fieldsV1": fields,
            "manager": "network-enforcer", "operation": "Update", "time": "2026-12-04T00:00:00Z",
        }]);
        out
    };
    let steps = vec![
        step("POST", format!("{nps}{CREATE}"), |_| {}, 201, created),
        step(
            "PATCH",
            format!("{nps}/deployment-api-ingress?"),
            |b| {
                assert_eq!(b["metadata"]["resourceVersion"], "7");
                let entries = b["metadata"]["managedFields"].as_array().unwrap();
                assert_eq!(entries.len(), 1, "{b}");
                assert_eq!(entries[0]["manager"], "network-enforcer");
                assert_eq!(entries[0]["operation"], "Apply");
                assert_eq!(
                    entries[0]["fieldsV1"]["f:metadata"]["f:labels"],
                    json!({"f:app.kubernetes.io/managed-by": {}})
                );
            },
            200,
            echo,
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(outcome.written, 1);
    assert_eq!(outcome.failed, 0);
}

fn warning(key: &str) -> Action {
    Action::Event(Event {
        kind: "WorkloadNetworkPolicyProposal",
        regarding: proposal_key(),
        warning: true,
        reason: "InvalidPromoteLabel",
        note: "bad".to_owned(),
        key: key.to_owned(),
    })
}

/// Two warnings of one reason about one object are two Events, each with its own note
/// (kube's Recorder made the second a repeat of the first, and its note was lost).
#[tokio::test]
async fn warnings_of_one_reason_about_one_object_keep_their_own_notes() {
    let warn = |key: &str, note: &str| match warning(key) {
        Action::Event(e) => Action::Event(Event {
            note: note.to_owned(),
            ..e
        }),
        _ => unreachable!(),
    };
    let plan = Plan {
        actions: vec![
            warn("p@1:a", "acknowledge-999"),
            warn("p@1:b", "acknowledge-abc"),
        ],
        ..Plan::default()
    };
    let event = |note: &'static str| {
        move |b: &Value| {
            assert_eq!(b["note"], note);
            assert_eq!(b["type"], "Warning");
            assert_eq!(b["reason"], "InvalidPromoteLabel");
            assert_eq!(b["regarding"]["name"], "deployment-api-ingress");
            assert_eq!(b["reportingController"], "network-enforcer");
            assert_eq!(b["reportingInstance"], "leader-0");
            assert!(b["eventTime"].is_string(), "{b}");
            assert!(b.get("series").is_none(), "{b}");
        }
    };
    let steps = vec![
        step(
            "POST",
            format!("{EVENTS}?"),
            event("acknowledge-999"),
            201,
            echo,
        ),
        step(
            "POST",
            format!("{EVENTS}?"),
            event("acknowledge-abc"),
            201,
            echo,
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(outcome.written, 2);
}

#[tokio::test]
async fn an_event_is_recorded_once_per_key_and_failures_are_counted() {
    let plan = Plan {
        actions: vec![
            warning("p@1:invalid"),
            warning("p@1:invalid"),
            // A delete the server refuses: counted, and the round goes on.
            Action::DeleteNetworkPolicy(proposal_key()),
            // Another event about the object is told.
            Action::Event(Event {
                reason: "PromotionConflict",
                ..match warning("p@2:invalid") {
                    Action::Event(e) => e,
                    _ => unreachable!(),
                }
            }),
        ],
        ..Plan::default()
    };
    let steps = vec![
        step("POST", format!("{EVENTS}?"), |_| {}, 201, echo),
        step(
            "DELETE",
            "/apis/networking.k8s.io/v1/namespaces/shop/networkpolicies/deployment-api-ingress?",
            |_| {},
            403,
            |_| status(403, "Forbidden"),
        ),
        step("POST", format!("{EVENTS}?"), |_| {}, 201, echo),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(
        outcome,
        Outcome {
            written: 2,
            deferred: 0,
            failed: 1
        }
    );
}

#[tokio::test]
async fn the_write_budget_defers_and_a_lost_lease_stops_the_round() {
    let plan = || Plan {
        actions: vec![warning("a"), warning("b"), warning("c")],
        ..Plan::default()
    };
    // A burst of one and no refill: one write, two deferred.
    let steps = vec![step("POST", format!("{EVENTS}?"), |_| {}, 201, echo)];
    let outcome = run(plan(), steps, Budget::new(0.0, 1), &leading()).await;
    assert_eq!(
        outcome,
        Outcome {
            written: 1,
            deferred: 2,
            failed: 0
        }
    );
    // Not leading: nothing at all.
    let standby = Leading(AtomicBool::new(false));
    let outcome = run(plan(), Vec::new(), plenty(), &standby).await;
    assert_eq!(outcome, Outcome::default());
}

#[tokio::test]
async fn violations_are_applied_with_their_own_manager_then_the_annotations_removed() {
    let mut status = ne_crds::WorkloadNetworkPolicyStatus {
        violation_count: 4,
        active_violation_count: 0,
        last_violation_id: 1,
        ..Default::default()
    };
    status.conditions = Vec::new();
    let plan = Plan {
        actions: vec![Action::ApplyViolations {
            key: proposal_key(),
            resource_version: Some("7".to_owned()),
            status: Box::new(status),
            remove_annotations: vec!["networkenforcer.kubewarden.io/acknowledge-1".to_owned()],
            observed: Vec::new(),
            acknowledged: Vec::new(),
        }],
        ..Plan::default()
    };
    let stored = || echo(&serde_json::to_value(policy(Mode::Monitor)).unwrap());
    let steps = vec![
        step(
            "PATCH",
            format!(
                "{WNP}/deployment-api-ingress/status?&force=true&fieldManager=network-enforcer-violations"
            ),
            |b| {
                assert_eq!(b["status"]["lastViolationId"], 1);
                assert_eq!(b["status"]["violationCount"], 4);
                assert!(
                    b["status"].get("conditions").is_none(),
                    "conditions are the other manager's"
                );
            },
            200,
            move |_| stored(),
        ),
        step(
            "PATCH",
            format!("{WNP}/deployment-api-ingress?"),
            |b| {
                assert_eq!(
                    b,
                    &json!({"metadata": {"annotations": {"networkenforcer.kubewarden.io/acknowledge-1": null}}})
                );
            },
            200,
            move |_| stored(),
        ),
    ];
    let outcome = run(plan, steps, plenty(), &leading()).await;
    assert_eq!(
        outcome,
        Outcome {
            written: 1,
            deferred: 0,
            failed: 0
        }
    );
}

/// A violation record of `shop/api` as the planner hands it to the writer.
fn record(id: i64, count: i64, mode: Mode, identity: Option<&str>) -> ne_crds::ViolationRecord {
    let t = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap(),
    );
    let endpoint = |name: &str| ne_crds::WorkloadEndpointRef {
        namespace: Some("shop".to_owned()),
        kind: Some("Deployment".to_owned()),
        name: Some(name.to_owned()),
        identity: identity.map(|sa| format!("cluster.local/ns/shop/sa/{sa}-{name}")),
        ip: None,
    };
    ne_crds::ViolationRecord {
        id,
        first_seen: t.clone(),
        last_seen: t,
        count,
        source: endpoint("web"),
        destination: endpoint("api"),
        protocol: "TCP".to_owned(),
        port: 9090,
        direction: PolicyDirection::Ingress,
        mode,
        reason: Some(ne_crds::ViolationReason::PortNotAllowed),
        message: Some("ingress rules admit this peer, but not on TCP port 9090".to_owned()),
        denied_by: None,
    }
}

fn violations(
    observed: Vec<ne_crds::ViolationRecord>,
    acknowledged: Vec<ne_crds::AcknowledgedViolation>,
) -> Plan {
    Plan {
        actions: vec![Action::ApplyViolations {
            key: proposal_key(),
            resource_version: Some("6".to_owned()),
            status: Box::default(),
            remove_annotations: Vec::new(),
            observed,
            acknowledged,
        }],
        ..Plan::default()
    }
}

fn status_write(code: u16) -> Step {
    step(
        "PATCH",
        format!(
            "{WNP}/deployment-api-ingress/status?&force=true&fieldManager=network-enforcer-violations"
        ),
        |_| {},
        code,
        move |_| {
            if code == 200 {
                echo(&serde_json::to_value(policy(Mode::Monitor)).unwrap())
            } else {
                status(code, "InternalError")
            }
        },
    )
}

/// A real exporter to a real in-process collector.
async fn exporter(provider: Provider) -> (ViolationEvents, LogSender, Collector) {
    let (collector, endpoint) = Collector::serve().await;
    let env = |k: &str| match k {
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT" => Some(endpoint.clone()),
        _ => None,
    };
    let config = ne_telemetry::logs::LogsConfig::from_env(env, "ne-leader", &[])
        .unwrap()
        .unwrap();
    let (sender, _task) =
        ne_telemetry::logs::start(config, ne_policy::otel_names::LOG_SCOPE, Arc::default());
    (
        ViolationEvents::new(provider, sender.clone()),
        sender,
        collector,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_reports_a_record_once_per_change_with_the_same_attributes() {
    use ne_policy::otel_names as otel;
    for provider in [Provider::Cilium, Provider::Calico, Provider::Istio] {
        let (events, sender, collector) = exporter(provider).await;
        let metrics = Arc::new(ControllerMetrics::default());
        let identity = (provider == Provider::Istio).then_some("sa");
        let plans = vec![
            violations(vec![record(1, 3, Mode::Monitor, identity)], vec![]),
            // The same record again (a lagging cache replanned it): nothing new to report.
            violations(vec![record(1, 3, Mode::Monitor, identity)], vec![]),
            // More flows: reported again, with the new count.
            violations(vec![record(1, 5, Mode::Monitor, identity)], vec![]),
            violations(vec![record(2, 1, Mode::Protect, identity)], vec![]),
        ];
        let steps = (0..4).map(|_| status_write(200)).collect();
        let outcomes = run_with(plans, steps, plenty(), &leading(), events, metrics.clone()).await;
        assert!(outcomes.iter().all(|o| o.written == 1));
        sender.flush().await;
        let observed = collector.events(otel::EVENT_VIOLATION_OBSERVED);
        let seen: Vec<(i64, i64)> = observed
            .iter()
            .map(|e| {
                (
                    e.attributes[otel::VIOLATION_ID].as_i64().unwrap(),
                    e.attributes[otel::VIOLATION_COUNT].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(seen, [(1, 3), (1, 5), (2, 1)], "{provider:?}");
        let e = &observed[0];
        assert_eq!(
            (e.severity.as_str(), e.scope.as_str(), e.event_name.as_str()),
            ("WARN", otel::LOG_SCOPE, otel::EVENT_VIOLATION_OBSERVED)
        );
        let id = |name: &str| {
            identity.map_or(String::new(), |_| {
                format!("cluster.local/ns/shop/sa/sa-{name}")
            })
        };
        let want = json!({
            otel::EVENT_NAME_ATTRIBUTE: otel::EVENT_VIOLATION_OBSERVED,
            otel::ENFORCEMENT_PROVIDER: provider.as_str(),
            otel::ACTION: "monitor",
            otel::SOURCE_WORKLOAD_NAME: "web",
            otel::SOURCE_WORKLOAD_NAMESPACE: "shop",
            otel::SOURCE_WORKLOAD_KIND: "Deployment",
            otel::SOURCE_WORKLOAD_IDENTITY: id("web"),
            otel::DESTINATION_WORKLOAD_NAME: "api",
            otel::DESTINATION_WORKLOAD_NAMESPACE: "shop",
            otel::DESTINATION_WORKLOAD_KIND: "Deployment",
            otel::DESTINATION_WORKLOAD_IDENTITY: id("api"),
            otel::NETWORK_TRANSPORT: "tcp",
            otel::DESTINATION_PORT: 9090,
            otel::POLICY_REF_NAMESPACE: "shop",
            otel::POLICY_REF_NAME: "deployment-api-ingress",
            otel::VIOLATION_ID: 1,
            otel::NETWORK_DIRECTION: "ingress",
            otel::VIOLATION_COUNT: 3,
            otel::VIOLATION_REASON: "PortNotAllowed",
        });
        assert_eq!(Value::Object(e.attributes.clone()), want, "{provider:?}");
        for key in otel::VIOLATION_ATTRIBUTES {
            assert!(e.attributes.contains_key(key), "{key}");
        }
        assert_eq!(
            observed[2].attributes[otel::ACTION],
            json!("protect"),
            "{provider:?}"
        );
        let flows = |action: &'static str| {
            metrics
                .violations_observed
                .get_or_create(&ViolationLabels {
                    provider: provider.as_str(),
                    action,
                })
                .get()
        };
        assert_eq!((flows("monitor"), flows("protect")), (5, 1), "{provider:?}");
        let in_namespace = |mode: &'static str| {
            metrics
                .violations_by_namespace
                .get_or_create(&NamespaceModeLabels {
                    policy_namespace: "shop".to_owned(),
                    mode,
                })
                .get()
        };
        assert_eq!(
            (in_namespace("monitor"), in_namespace("protect")),
            (5, 1),
            "{provider:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_is_reported_once_after_its_status_write_succeeds() {
    use ne_policy::otel_names as otel;
    let (events, sender, collector) = exporter(Provider::Cilium).await;
    let acknowledged = ne_crds::AcknowledgedViolation {
        violation: record(1, 3, Mode::Monitor, None),
        reason: Some("expected".to_owned()),
        acknowledged_at: record(1, 3, Mode::Monitor, None).last_seen.into(),
    };
    let plan = || violations(vec![], vec![acknowledged.clone()]);
    // The write fails: nothing is reported.
    let failed = run_with(
        vec![plan()],
        vec![status_write(500)],
        plenty(),
        &leading(),
        events,
        Arc::default(),
    )
    .await;
    assert_eq!(failed[0].failed, 1);
    sender.flush().await;
    assert!(collector.all().is_empty(), "{:?}", collector.all());
    // The retry succeeds: reported once. The same planned again (the cache had not caught
    // up): not again.
    let events = ViolationEvents::new(Provider::Cilium, sender.clone());
    let outcomes = run_with(
        vec![plan(), plan()],
        vec![status_write(200), status_write(200)],
        plenty(),
        &leading(),
        events,
        Arc::default(),
    )
    .await;
    assert!(outcomes.iter().all(|o| o.written == 1));
    sender.flush().await;
    let events = collector.all();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(
        (e.body.as_str(), e.severity.as_str()),
        (otel::EVENT_VIOLATION_ACKNOWLEDGED, "INFO")
    );
    assert_eq!(e.attributes[otel::REASON], json!("expected"));
    assert_eq!(e.attributes[otel::VIOLATION_ID], json!(1));
}
