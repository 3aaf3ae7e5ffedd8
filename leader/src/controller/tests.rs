use super::*;
use crate::controller::plan::ObjectKey;
use crate::violations::record::Observation;

fn policy(uid: &str, version: &str, last_id: i64) -> WorkloadNetworkPolicy {
    let mut w: WorkloadNetworkPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
        "kind": "WorkloadNetworkPolicy",
        "metadata": {"name": "p", "namespace": "shop", "uid": uid, "resourceVersion": version},
        "spec": {"backend": "kubernetes", "direction": "Ingress",
                 "targetRef": {"kind": "Deployment", "name": "api"},
                 "kubernetes": {"podSelector": {}}},
        "status": {"lastViolationId": last_id, "observedGeneration": 3,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Monitoring",
                                   "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }))
    .unwrap();
    w.metadata.generation = Some(3);
    w
}

fn written(uid: &str, version: &str, last_id: i64) -> HashMap<(String, String), WrittenViolations> {
    HashMap::from([(
        ("shop".to_owned(), "p".to_owned()),
        WrittenViolations {
            key: ObjectKey {
                namespace: "shop".to_owned(),
                name: "p".to_owned(),
                uid: Some(uid.to_owned()),
            },
            resource_version: Some(version.to_owned()),
            status: ne_crds::WorkloadNetworkPolicyStatus {
                last_violation_id: last_id,
                ..Default::default()
            },
        },
    )])
}

#[test]
fn a_lagging_cache_is_read_with_what_was_written_and_a_caught_up_one_as_it_is() {
    // The cache still holds version 7, the one the write was computed from: the
    // written violation fields stand in, the conditions stay the cache's.
    let mut policies = vec![policy("uid-1", "7", 1)];
    let mut mine = written("uid-1", "7", 2);
    overlay(&mut policies, &mut mine);
    let status = policies[0].status.as_ref().unwrap();
    assert_eq!(status.last_violation_id, 2);
    assert_eq!(status.conditions.len(), 1);
    assert_eq!(status.observed_generation, Some(3));
    assert_eq!(mine.len(), 1, "kept until the cache moves on");

    // The cache moved past version 7: it is the truth again, the write is forgotten.
    let mut policies = vec![policy("uid-1", "8", 2)];
    overlay(&mut policies, &mut mine);
    assert_eq!(policies[0].status.as_ref().unwrap().last_violation_id, 2);
    assert!(mine.is_empty());

    // A policy deleted and created again under the same name (another uid): its own
    // status counts, never what was written for the old one.
    let mut policies = vec![policy("uid-2", "7", 0)];
    let mut mine = written("uid-1", "7", 5);
    overlay(&mut policies, &mut mine);
    assert_eq!(policies[0].status.as_ref().unwrap().last_violation_id, 0);
    assert!(mine.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unattributed_denials_are_counted_and_reported_once_per_growth() {
    use ne_policy::otel_names as otel;
    let (collector, endpoint) = ne_telemetry::testing::Collector::serve().await;
    let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").then(|| endpoint.clone());
    let config = ne_telemetry::logs::LogsConfig::from_env(env, "ne-leader", &[])
        .unwrap()
        .unwrap();
    let (sender, _task) = ne_telemetry::logs::start(config, otel::LOG_SCOPE, Arc::default());
    let metrics = metrics::ControllerMetrics::default();
    let mut unattributed = Unattributed::new(ne_flow::edge::Provider::Calico, sender.clone());
    let denial = |count| Observation {
        source: ne_crds::WorkloadEndpointRef {
            ip: Some("203.0.113.9".to_owned()),
            ..Default::default()
        },
        destination: ne_crds::WorkloadEndpointRef {
            namespace: Some("shop".to_owned()),
            kind: Some("Deployment".to_owned()),
            name: Some("api".to_owned()),
            ..Default::default()
        },
        protocol: "UDP".to_owned(),
        port: 53,
        direction: ne_crds::PolicyDirection::Ingress,
        mode: ne_crds::Mode::Protect,
        count,
        first_seen: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        last_seen: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        reason: ne_crds::ViolationReason::DeniedByDataPlane,
        message: "the data plane denied the connection: policy shop/default-deny".to_owned(),
        denied_by: Some("shop/default-deny".to_owned()),
    };
    // Rounds see cumulative totals: 2, 2 again (nothing new), then 5.
    for count in [2, 2, 5] {
        unattributed.report(&[denial(count)], &metrics);
    }
    sender.flush().await;
    let events = collector.all();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(metrics.violations_unattributed.get(), 5);
    let e = &events[1].attributes;
    for (key, want) in [
        (otel::POLICY_REF_NAMESPACE, serde_json::json!("")),
        (otel::POLICY_REF_NAME, serde_json::json!("")),
        (otel::VIOLATION_ID, serde_json::json!(0)),
        (otel::VIOLATION_COUNT, serde_json::json!(5)),
        (otel::ENFORCEMENT_PROVIDER, serde_json::json!("calico")),
        (otel::ACTION, serde_json::json!("protect")),
        (otel::SOURCE_WORKLOAD_NAME, serde_json::json!("203.0.113.9")),
        (otel::SOURCE_WORKLOAD_KIND, serde_json::json!("External")),
        (otel::NETWORK_TRANSPORT, serde_json::json!("udp")),
        (otel::DESTINATION_PORT, serde_json::json!(53)),
        (
            otel::VIOLATION_DENIED_BY,
            serde_json::json!("shop/default-deny"),
        ),
    ] {
        assert_eq!(e.get(key), Some(&want), "{key}");
    }
}
