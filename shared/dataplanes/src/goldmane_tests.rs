use super::*;
use ne_flow::flow::{EndpointId, Reserved, WorkloadKind, WorkloadRef};

fn rec(line: &str) -> FlowRecord {
    match decode(line.as_bytes()) {
        Ok(Decoded::Record(r)) => r,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn go_json_with_numbers_inside_flow_result() {
    let r = rec(
        r#"{"id":7,"flow":{"Key":{"source_name":"api-6d9f7c8b5-*","source_namespace":"shop","source_type":1,"dest_name":"pub","dest_namespace":"-","dest_type":4,"dest_port":443,"proto":"tcp","reporter":1,"action":2,"policies":{"enforced_policies":[{"kind":10,"tier":"default","action":2,"trigger":{"kind":6,"namespace":"shop","name":"egress-lockdown"}}]}},"start_time":1764970845,"source_labels":["pod-template-hash=6d9f7c8b5","app=api"],"num_connections_started":3}}"#,
    );
    let api = WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: "api".into(),
    };
    assert_eq!(r.source.id, EndpointId::Workload(api));
    assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::World));
    assert_eq!(r.observation, ObservationPoint::Egress);
    assert_eq!(r.verdict, Verdict::PolicyDenied);
    assert_eq!(r.policy.as_deref(), Some("shop/egress-lockdown"));
    assert_eq!(r.connections, 3);
    assert_eq!(r.destination_port, 443);
}

#[test]
fn parts_build_what_the_json_line_builds() {
    let labels = [
        "pod-template-hash=6d9f7c8b5".to_owned(),
        "app=api".to_owned(),
    ];
    let hits = [
        GoldmanePolicyHit {
            kind: 6,
            namespace: "shop",
            name: "allow-dns",
            action: 1,
            ..GoldmanePolicyHit::default()
        },
        GoldmanePolicyHit {
            kind: 10,
            action: 2,
            trigger_namespace: "shop",
            trigger_name: "egress-lockdown",
            ..GoldmanePolicyHit::default()
        },
    ];
    let parts = GoldmaneFlow {
        source_name: "api-6d9f7c8b5-*",
        source_namespace: "shop",
        source_type: 1,
        dest_name: "pub",
        dest_namespace: "-",
        dest_type: 4,
        dest_port: 443,
        proto: "tcp",
        reporter: 1,
        action: 2,
        start_time: Some(ne_flow::flow::Timestamp::from_secs(1_764_970_845)),
        num_connections_started: 3,
        enforced_policies: hits.to_vec(),
    };
    let from_parts = record_from_parts(parts.clone(), &labels, &[]).unwrap();
    let from_json = rec(
        r#"{"Key":{"sourceName":"api-6d9f7c8b5-*","sourceNamespace":"shop","sourceType":"WorkloadEndpoint","destName":"pub","destNamespace":"-","destType":"Network","destPort":"443","proto":"tcp","reporter":"Src","action":"Deny","policies":{"enforcedPolicies":[{"kind":"NetworkPolicy","namespace":"shop","name":"allow-dns","action":"Allow"},{"kind":"EndOfTier","action":"Deny","trigger":{"kind":"NetworkPolicy","namespace":"shop","name":"egress-lockdown"}}]}},"startTime":"1764970845","sourceLabels":["pod-template-hash=6d9f7c8b5","app=api"],"numConnectionsStarted":"3"}"#,
    );
    assert_eq!(from_parts, from_json);
    assert_eq!(from_parts.policy.as_deref(), Some("shop/egress-lockdown"));
    // Unset action (proto3 zero) is missing; a denied flow without hits has no policy.
    let unset = GoldmaneFlow {
        action: 0,
        ..parts.clone()
    };
    assert_eq!(
        record_from_parts(unset, &[], &[]),
        Err(DecodeError::MissingField("action"))
    );
    let no_hits = GoldmaneFlow {
        enforced_policies: Vec::new(),
        ..parts
    };
    assert_eq!(record_from_parts(no_hits, &[], &[]).unwrap().policy, None);
}

#[test]
fn whisker_flat_flow() {
    let r = rec(
        r#"{"start_time":"2025-12-05T21:40:45Z","end_time":"2025-12-05T21:41:00Z","action":"Allow","source_name":"web-*","source_namespace":"shop","source_labels":"app=web | controller-revision-hash=web-7f9c","dest_name":"db-0","dest_namespace":"shop","dest_labels":"","protocol":"tcp","dest_port":5432,"reporter":"Dst","policies":{"enforced":[],"pending":[]}}"#,
    );
    let web = WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::StatefulSet,
        name: "web".into(),
    };
    assert_eq!(r.source.id, EndpointId::Workload(web));
    assert_eq!(r.source.labels.len(), 2);
    assert_eq!(
        r.destination.id,
        EndpointId::Pod {
            namespace: "shop".into(),
            name: "db-0".into()
        }
    );
    assert_eq!(r.observation, ObservationPoint::Ingress);
    assert_eq!(
        r.time,
        Some(ne_flow::flow::Timestamp::from_secs(1_764_970_845))
    );
    assert_eq!(r.connections, 1);
}

#[test]
fn pass_host_networkset_and_errors() {
    let r = rec(
        r#"{"Key":{"sourceName":"node-1","sourceNamespace":"-","sourceType":"HostEndpoint","destName":"blocked","destNamespace":"-","destType":"NetworkSet","proto":"udp","destPort":"53","reporter":"Src","action":"Pass"}}"#,
    );
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Host));
    assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::World));
    assert_eq!(r.verdict, Verdict::Error);
    assert_eq!(r.protocol, Protocol::Udp);
    // Aggregated pods without owner labels stay a group.
    let r =
        rec(r#"{"Key":{"sourceName":"job-*","sourceNamespace":"b","sourceType":1,"action":1}}"#);
    assert_eq!(
        r.source.id,
        EndpointId::PodGroup {
            namespace: "b".into(),
            prefix: "job-".into()
        }
    );
    assert_eq!(
        decode(br#"{"startTime":"1"}"#),
        Err(DecodeError::MissingField("Key"))
    );
    assert_eq!(
        decode(br#"{"Key":{"sourceName":"a"}}"#),
        Err(DecodeError::MissingField("action"))
    );
    assert!(matches!(
        decode(br#"{"Key":{"action":"Maybe"}}"#),
        Err(DecodeError::BadValue {
            field: "action",
            ..
        })
    ));
    assert!(matches!(
        decode(br#"{"Key":{"action":1,"destPort":"99999"}}"#),
        Err(DecodeError::BadPort { .. })
    ));
    assert!(matches!(
        decode(br#"{"Key":{"action":1,"destPort":"1e3"}}"#),
        Err(DecodeError::InvalidJson(_))
    ));
}
