use ne_crds::TargetKind;
use serde_json::json;

use super::*;

fn subject(backend: Backend, spec: serde_json::Value) -> Subject {
    Subject {
        kind: "workloadnetworkpolicyproposal",
        namespace: "shop".to_owned(),
        name: "deployment-api-ingress".to_owned(),
        uid: Some("uid-proposal".to_owned()),
        backend,
        direction: PolicyDirection::Ingress,
        target: TargetRef {
            kind: TargetKind::Deployment,
            name: "api".to_owned(),
        },
        kubernetes: (backend == Backend::Kubernetes)
            .then(|| serde_json::from_value(spec.clone()).unwrap()),
        istio: (backend == Backend::Istio).then(|| serde_json::from_value(spec).unwrap()),
        violations: Vec::new(),
    }
}

fn pods(ns: &str, app: &str) -> serde_json::Value {
    json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
           "podSelector": {"matchLabels": {"app": app}}})
}

fn network_policy(name: &str, spec: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "shop"}, "spec": spec}))
        .unwrap()
}

fn api_labels() -> Vec<(String, String)> {
    vec![
        ("app".to_owned(), "api".to_owned()),
        ("tier".to_owned(), "back".to_owned()),
    ]
}

fn rules() -> Subject {
    subject(
        Backend::Kubernetes,
        json!({
            "podSelector": {"matchLabels": {"app": "api"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [pods("shop", "web")], "ports": [{"protocol": "TCP", "port": 8080}]},
                {"from": [pods("monitoring", "prometheus")], "ports": [{"protocol": "TCP", "port": 9090}]},
                {"from": [{"podSelector": {"matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["a", "b"]}]}}],
                 "ports": [{"protocol": "TCP", "port": 80}]},
            ],
        }),
    )
}

#[test]
fn each_peer_and_port_is_new_or_already_allowed_by_the_policies_on_the_same_pods() {
    let scrapes = network_policy(
        "allow-scrapes",
        json!({"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Ingress"],
               "ingress": [{"from": [pods("monitoring", "prometheus")],
                            "ports": [{"protocol": "TCP", "port": 9090}]}]}),
    );
    let other_pods = network_policy(
        "db-only",
        json!({"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"],
               "ingress": [{}]}),
    );
    let egress_only = network_policy(
        "egress-only",
        json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}),
    );
    let d = diff(
        &rules(),
        &api_labels(),
        &[scrapes, other_pods, egress_only],
        &[],
    );
    assert_eq!(d.native, ["NetworkPolicy allow-scrapes"]);
    let marks: Vec<(&str, &str, &[String])> = d
        .entries
        .iter()
        .map(|e| (e.rule.as_str(), e.status, e.by.as_slice()))
        .collect();
    assert_eq!(
        marks,
        [
            ("spec.kubernetes.ingress[0]", "new", &[][..]),
            (
                "spec.kubernetes.ingress[1]",
                "allowed",
                &["NetworkPolicy allow-scrapes".to_owned()][..]
            ),
            ("spec.kubernetes.ingress[2]", "notCompared", &[][..]),
        ]
    );
    assert!(d.entries[2].why.as_deref().unwrap().contains("expressions"));
    assert!(
        d.removes.starts_with("nothing: the native policies above"),
        "{}",
        d.removes
    );

    let mut text = Vec::new();
    write_text(&mut text, &d).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("+ spec.kubernetes.ingress[0]  pods app=web in namespaces kubernetes.io/metadata.name=shop TCP/8080  new"),
        "{text}"
    );
}

#[test]
fn with_no_native_policy_protect_mode_removes_all_the_rules_do_not_allow() {
    // The policy's own NetworkPolicy (protect mode) is not another policy.
    let mut own = network_policy(
        "deployment-api-ingress",
        json!({"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": ["Ingress"]}),
    );
    own.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
            "kind": "WorkloadNetworkPolicy", "name": "deployment-api-ingress",
            "uid": "uid-proposal", "controller": true,
        }))
        .unwrap(),
    ]);
    let d = diff(&rules(), &api_labels(), &[own], &[]);
    assert!(d.native.is_empty());
    assert!(d.entries.iter().all(|e| e.status != "allowed"));
    assert!(
        d.removes.starts_with("every ingress connection"),
        "{}",
        d.removes
    );
}

#[test]
fn istio_rules_are_compared_with_allow_policies_and_deny_policies_are_named() {
    let principal = "cluster.local/ns/shop/sa/web";
    let s = subject(
        Backend::Istio,
        json!({"selector": {"matchLabels": {"app": "api"}}, "rules": [
            {"from": [{"source": {"principals": [principal]}}],
             "to": [{"operation": {"ports": ["8080", "8443"]}}]},
        ]}),
    );
    let ap = |name: &str, action: &str, rules: serde_json::Value| -> AuthorizationPolicy {
        serde_json::from_value(json!({
            "apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "action": action, "rules": rules},
        }))
        .unwrap()
    };
    let allow = ap(
        "web-8080",
        "ALLOW",
        json!([{"from": [{"source": {"principals": [principal]}}],
                "to": [{"operation": {"ports": ["8080"]}}]}]),
    );
    let deny = ap(
        "deny-all-8443",
        "DENY",
        json!([{"to": [{"operation": {"ports": ["8443"]}}]}]),
    );
    let d = diff(&s, &api_labels(), &[], &[allow, deny]);
    assert_eq!(
        d.native,
        [
            "AuthorizationPolicy web-8080 (ALLOW)",
            "AuthorizationPolicy deny-all-8443 (DENY)"
        ]
    );
    let statuses: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.port.as_str(), e.status))
        .collect();
    assert_eq!(statuses, [("TCP/8080", "allowed"), ("TCP/8443", "new")]);
}
