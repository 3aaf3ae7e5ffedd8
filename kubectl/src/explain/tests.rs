use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use ne_crds::{Mode, TargetKind, TargetRef, ViolationReason, WorkloadNetworkPolicySpec};
use serde_json::json;

use super::*;

fn endpoint(ns: &str, name: &str, identity: Option<&str>) -> WorkloadEndpointRef {
    WorkloadEndpointRef {
        namespace: Some(ns.to_owned()),
        kind: Some("Deployment".to_owned()),
        name: Some(name.to_owned()),
        identity: identity.map(str::to_owned),
        ip: None,
    }
}

/// An ingress record of `api` in `shop`: TCP `port` from `source`.
fn record(source: WorkloadEndpointRef, port: i32, reason: ViolationReason) -> ViolationRecord {
    let t = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
    ViolationRecord {
        id: 3,
        first_seen: t.clone(),
        last_seen: t,
        count: 12,
        source,
        destination: endpoint("shop", "api", None),
        protocol: "TCP".to_owned(),
        port,
        direction: PolicyDirection::Ingress,
        mode: Mode::Monitor,
        reason: Some(reason),
        message: None,
        denied_by: None,
    }
}

fn policy(backend: Backend, rules: serde_json::Value) -> WorkloadNetworkPolicy {
    let (kubernetes, istio) = match backend {
        Backend::Kubernetes => (
            Some(
                serde_json::from_value(json!({
                    "podSelector": {"matchLabels": {"app": "api"}},
                    "policyTypes": ["Ingress"],
                    "ingress": rules,
                }))
                .unwrap(),
            ),
            None,
        ),
        Backend::Istio => (
            None,
            Some(
                serde_json::from_value(json!({
                    "selector": {"matchLabels": {"app": "api"}},
                    "rules": rules,
                }))
                .unwrap(),
            ),
        ),
    };
    WorkloadNetworkPolicy {
        metadata: ObjectMeta {
            name: Some("deployment-api-ingress".to_owned()),
            namespace: Some("shop".to_owned()),
            ..ObjectMeta::default()
        },
        spec: WorkloadNetworkPolicySpec {
            backend,
            kubernetes,
            istio,
            target_ref: TargetRef {
                kind: TargetKind::Deployment,
                name: "api".to_owned(),
            },
            direction: PolicyDirection::Ingress,
            mode: Mode::Monitor,
        },
        status: None,
    }
}

fn pods(ns: &str, app: &str) -> serde_json::Value {
    json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "podSelector": {"matchLabels": {"app": app}},
    })
}

/// The worker Deployment of `billing`, as the user may read it.
fn worker() -> PeerFacts {
    PeerFacts {
        selector: Some(serde_json::from_value(json!({"matchLabels": {"app": "worker"}})).unwrap()),
        labels: vec![
            ("app".into(), "worker".into()),
            ("pod-template-hash".into(), "7d9f".into()),
        ],
        namespace_labels: vec![("kubernetes.io/metadata.name".into(), "billing".into())],
        notes: Vec::new(),
    }
}

/// `policy` with `rule` added to its ingress rules, evaluated against the record's flow
/// as the leader would: allowed?
fn allows_after_adding(
    mut policy: WorkloadNetworkPolicy,
    record: &ViolationRecord,
    facts: &PeerFacts,
    rule: &serde_json::Value,
) -> bool {
    match policy.spec.backend {
        Backend::Kubernetes => {
            let np = policy.spec.kubernetes.as_mut().unwrap();
            np.ingress
                .get_or_insert_with(Vec::new)
                .push(serde_json::from_value(rule.clone()).unwrap());
        }
        Backend::Istio => {
            let ap = policy.spec.istio.as_mut().unwrap();
            ap.rules.push(serde_json::from_value(rule.clone()).unwrap());
        }
    }
    explain(&policy, record, facts)
        .unwrap()
        .decision
        .starts_with("Allowed")
}

#[test]
fn each_rule_is_judged_alone_and_the_nearest_is_the_one_that_comes_closest() {
    let policy = policy(
        Backend::Kubernetes,
        json!([
            {"from": [pods("shop", "web")], "ports": [{"protocol": "TCP", "port": 5432}]},
            {"from": [pods("billing", "worker")], "ports": [{"protocol": "TCP", "port": 80}]},
            {"from": [pods("billing", "worker")], "ports": [{"protocol": "UDP", "port": 5432}]},
        ]),
    );
    let record = record(
        endpoint("billing", "worker", None),
        5432,
        ViolationReason::PortNotAllowed,
    );
    let e = explain(&policy, &record, &worker()).unwrap();
    // The policy as a whole: a rule admits the peer on the port, over UDP.
    assert_eq!(e.decision, "ProtocolNotAllowed");
    assert_eq!(e.rules_at, "spec.kubernetes.ingress");
    let marks: Vec<(bool, bool, bool)> = e
        .rules
        .iter()
        .map(|r| (r.peer, r.port, r.protocol))
        .collect();
    assert_eq!(
        marks,
        [
            (false, true, true),
            (true, false, false),
            (true, true, false)
        ]
    );
    assert_eq!(e.nearest, Some(2), "the rule that admits peer and port");
    assert_eq!(e.peer, "Deployment billing/worker");

    // The rule to add names the worker's pods by its own selector, on the record's port,
    // and with it the policy allows the flow.
    assert_eq!(
        e.rule_to_add,
        json!({"from": [pods("billing", "worker")], "ports": [{"protocol": "TCP", "port": 5432}]})
    );
    assert!(!allows_after_adding(
        policy.clone(),
        &record,
        &worker(),
        &json!({"from": [pods("billing", "other")]})
    ));
    assert!(allows_after_adding(
        policy,
        &record,
        &worker(),
        &e.rule_to_add
    ));
}

#[test]
fn a_record_the_data_plane_blames_on_another_policy_says_so() {
    let policy = policy(
        Backend::Kubernetes,
        json!([{"from": [pods("billing", "worker")]}]),
    );
    let source = endpoint("billing", "worker", None);
    let mut r = record(source, 8080, ViolationReason::DeniedByDataPlane);
    r.mode = Mode::Protect;
    r.denied_by = Some("shop/deny-billing".to_owned());
    let e = explain(&policy, &r, &worker()).unwrap();
    assert!(e.decision.starts_with("Allowed"), "{}", e.decision);
    let blamed: Vec<&String> = e
        .notes
        .iter()
        .filter(|n| n.contains("shop/deny-billing"))
        .collect();
    assert_eq!(blamed.len(), 1, "{:?}", e.notes);
    let mut text = Vec::new();
    write_text(&mut text, &e).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("denied by: shop/deny-billing"), "{text}");

    // Blamed on this very policy, or on none: no such note.
    for blamed in [Some("shop/deployment-api-ingress"), None] {
        r.denied_by = blamed.map(str::to_owned);
        let e = explain(&policy, &r, &worker()).unwrap();
        assert!(
            !e.notes.iter().any(|n| n.contains("names")),
            "{:?}",
            e.notes
        );
    }
}

#[test]
fn without_a_rule_for_the_peer_the_nearest_admits_the_port() {
    let policy = policy(
        Backend::Kubernetes,
        json!([{"from": [pods("shop", "web")], "ports": [{"protocol": "TCP", "port": 5432}]}]),
    );
    let record = record(
        endpoint("billing", "worker", None),
        5432,
        ViolationReason::NoRuleForPeer,
    );
    let e = explain(&policy, &record, &worker()).unwrap();
    assert_eq!(e.decision, "NoRuleForPeer");
    assert_eq!(e.nearest, Some(0));
    assert!(!e.rules[0].peer && e.rules[0].port);
    let mut text = Vec::new();
    write_text(&mut text, &e).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("<- nearest: same port, other peer"), "{text}");
    assert!(
        text.contains("To allow it, add this rule to spec.kubernetes.ingress:"),
        "{text}"
    );
    // The YAML printed parses back to the rule, so it can be pasted.
    let yaml: String = text
        .split_once("spec.kubernetes.ingress:\n")
        .unwrap()
        .1
        .lines()
        .take_while(|l| !l.starts_with("note:"))
        .map(|l| format!("{}\n", l.strip_prefix("  ").unwrap_or(l)))
        .collect();
    let pasted: Vec<serde_json::Value> = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(pasted, std::slice::from_ref(&e.rule_to_add));
    assert!(allows_after_adding(
        policy,
        &record,
        &worker(),
        &e.rule_to_add
    ));
}

#[test]
fn a_peer_the_user_cannot_read_is_unknown_and_the_rule_opens_its_namespace_with_a_note() {
    let policy = policy(
        Backend::Kubernetes,
        json!([{"from": [pods("billing", "worker")], "ports": [{"protocol": "TCP", "port": 5432}]}]),
    );
    let record = record(
        endpoint("billing", "worker", None),
        5432,
        ViolationReason::NoRuleForPeer,
    );
    let unreadable = PeerFacts {
        notes: vec!["cannot read Deployment billing/worker (forbidden)".into()],
        ..PeerFacts::default()
    };
    let e = explain(&policy, &record, &unreadable).unwrap();
    // Unknown pods match no selector: the rule does not admit the peer here.
    assert!(!e.rules[0].peer);
    assert_eq!(
        e.rule_to_add["from"][0]["namespaceSelector"],
        json!({"matchLabels": {"kubernetes.io/metadata.name": "billing"}})
    );
    assert!(e.notes.iter().any(|n| n.contains("forbidden")));
    assert!(e.notes.iter().any(|n| n.contains("narrow its podSelector")));
}

#[test]
fn istio_rules_are_judged_by_principal_and_port_and_the_rule_names_the_principal() {
    let principal = "cluster.local/ns/billing/sa/worker";
    let policy = policy(
        Backend::Istio,
        json!([
            {"from": [{"source": {"principals": [principal]}}], "to": [{"operation": {"ports": ["80"]}}]},
            {"from": [{"source": {"principals": ["cluster.local/ns/shop/sa/web"]}}]},
        ]),
    );
    let record = record(
        endpoint("billing", "worker", Some(principal)),
        5432,
        ViolationReason::PortNotAllowed,
    );
    let e = explain(&policy, &record, &worker()).unwrap();
    assert_eq!(e.rules_at, "spec.istio.rules");
    assert_eq!((e.rules[0].peer, e.rules[0].port), (true, false));
    assert_eq!((e.rules[1].peer, e.rules[1].port), (false, true));
    assert_eq!(e.nearest, Some(0));
    assert_eq!(
        e.rule_to_add,
        json!({"from": [{"source": {"principals": [principal]}}], "to": [{"operation": {"ports": ["5432"]}}]})
    );
    assert!(allows_after_adding(
        policy,
        &record,
        &worker(),
        &e.rule_to_add
    ));

    // Without a principal no AuthorizationPolicy rule can name the source.
    let anonymous = self::record(
        endpoint("billing", "worker", None),
        5432,
        ViolationReason::NoRuleForPeer,
    );
    let refused = explain(
        &self::policy(Backend::Istio, json!([])),
        &anonymous,
        &worker(),
    );
    assert!(refused.unwrap_err().to_string().contains("no principal"));
}
