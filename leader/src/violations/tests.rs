//! The violation record's rules, case by case.

use k8s_openapi::jiff;

use super::record::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use ne_crds::{
    Mode, PolicyDirection, ViolationReason, WorkloadEndpointRef, WorkloadNetworkPolicyStatus,
};

pub(super) fn time(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

fn workload(name: &str) -> WorkloadEndpointRef {
    WorkloadEndpointRef {
        namespace: Some("shop".to_owned()),
        kind: Some("Deployment".to_owned()),
        name: Some(name.to_owned()),
        identity: None,
        ip: None,
    }
}

/// `src → api:port`, seen `count` times between `first` and `last`.
pub(super) fn seen(src: &str, port: i32, count: i64, first: i64, last: i64) -> Observation {
    Observation {
        source: workload(src),
        destination: workload("api"),
        protocol: "TCP".to_owned(),
        port,
        direction: PolicyDirection::Ingress,
        mode: Mode::Monitor,
        count,
        first_seen: time(first),
        last_seen: time(last),
        reason: ViolationReason::PortNotAllowed,
        message: format!("ingress rules admit this peer, but not on TCP port {port}"),
        denied_by: None,
    }
}

fn ids(status: &WorkloadNetworkPolicyStatus) -> Vec<i64> {
    status.violations.iter().map(|r| r.id).collect()
}

fn annotations(pairs: &[(&str, &str)]) -> Vec<(String, Acknowledgement)> {
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| {
            (
                format!("networkenforcer.kubewarden.io/acknowledge-{k}"),
                (*v).to_owned(),
            )
        })
        .collect();
    acknowledgements(owned.iter().map(|(k, v)| (k, v)))
}

#[test]
fn a_record_written_before_reasons_gets_one_from_its_next_observation() {
    let mut old = merge(&Default::default(), &[seen("web", 80, 3, 10, 20)]).status;
    (old.violations[0].reason, old.violations[0].message) = (None, None);
    let next = merge(&old, &[seen("web", 80, 3, 10, 20)]);
    let r = &next.status.violations[0];
    assert_eq!(r.reason, Some(ViolationReason::PortNotAllowed));
    assert_eq!(
        r.message.as_deref(),
        Some("ingress rules admit this peer, but not on TCP port 80")
    );
    assert!(next.updated.is_empty(), "no new traffic: nothing to report");
}

#[test]
fn a_record_says_which_policy_the_data_plane_blames_now() {
    let denied = |count, policy: Option<&str>| Observation {
        mode: Mode::Protect,
        reason: ViolationReason::DeniedByDataPlane,
        message: match policy {
            Some(p) => format!("the data plane denied the connection: policy {p}"),
            None => "the data plane denied the connection".to_owned(),
        },
        denied_by: policy.map(str::to_owned),
        ..seen("web", 80, count, 10, 20)
    };
    let first = merge(&Default::default(), &[denied(3, None)]).status;
    assert_eq!(first.violations[0].denied_by, None);
    // A later report names the policy: the record takes it.
    let named = merge(&first, &[denied(3, Some("shop/deny-web"))]).status;
    assert_eq!(
        named.violations[0].denied_by.as_deref(),
        Some("shop/deny-web")
    );
    // A report that names none does not forget it; one that names another replaces it.
    let kept = merge(&named, &[denied(4, None)]).status;
    assert_eq!(
        kept.violations[0].denied_by.as_deref(),
        Some("shop/deny-web")
    );
    let other = merge(&kept, &[denied(5, Some("shop/default-deny"))]).status;
    let r = &other.violations[0];
    assert_eq!(
        (r.id, r.denied_by.as_deref(), r.message.as_deref()),
        (
            1,
            Some("shop/default-deny"),
            Some("the data plane denied the connection: policy shop/default-deny")
        )
    );
}

#[test]
fn a_new_tuple_is_a_new_record_and_the_same_totals_change_nothing() {
    let merged = merge(&Default::default(), &[seen("web", 80, 3, 10, 20)]);
    assert_eq!(merged.new, [1]);
    let s = &merged.status;
    assert_eq!(
        (
            s.active_violation_count,
            s.violation_count,
            s.last_violation_id
        ),
        (1, 3, 1)
    );
    assert_eq!(s.last_violation_time, Some(time(20)));
    let r = &s.violations[0];
    assert_eq!(
        (r.count, r.first_seen.clone(), r.last_seen.clone()),
        (3, time(10), time(20))
    );
    // Re-delivered (a failover, the next round): nothing new.
    let again = merge(s, &[seen("web", 80, 3, 10, 20)]);
    assert_eq!(
        again,
        Merged {
            status: s.clone(),
            new: vec![],
            updated: vec![]
        }
    );
}

#[test]
fn repeated_flows_update_their_record_by_the_growth_of_the_total() {
    let s = merge(&Default::default(), &[seen("web", 80, 3, 10, 20)]).status;
    let merged = merge(&s, &[seen("web", 80, 7, 10, 35)]);
    assert_eq!((merged.new.len(), merged.updated.as_slice()), (0, &[1][..]));
    let r = &merged.status.violations[0];
    assert_eq!((r.count, r.last_seen.clone()), (7, time(35)));
    assert_eq!(merged.status.violation_count, 7);
    // Another port of the same peer is another tuple.
    let other = merge(&merged.status, &[seen("web", 443, 1, 40, 40)]);
    assert_eq!(other.new, [2]);
    assert_eq!(ids(&other.status), [2, 1], "newest first");
}

#[test]
fn the_hundred_most_recent_are_kept_and_ids_are_never_reused() {
    let observations: Vec<_> = (0..101)
        .map(|i| seen(&format!("w{i}"), 80, 1, i, i))
        .collect();
    let merged = merge(&Default::default(), &observations);
    let s = &merged.status;
    assert_eq!(s.violations.len(), 100);
    assert_eq!(s.active_violation_count, 100);
    assert_eq!(s.last_violation_id, 101);
    assert!(!ids(s).contains(&1), "the oldest (seen at 0) is trimmed");
    assert_eq!(
        merged.new.len(),
        100,
        "a record trimmed at once is not reported as new"
    );
    let next = merge(s, &[seen("late", 80, 1, 500, 500)]);
    assert_eq!(next.new, [102]);
}

#[test]
fn acknowledging_moves_the_record_and_unknown_ids_acknowledge_nothing() {
    let s = merge(
        &Default::default(),
        &[seen("web", 80, 3, 10, 20), seen("cron", 80, 1, 15, 15)],
    )
    .status;
    let acks = annotations(&[
        ("1", " expected: the web tier "),
        ("99", "typo"),
        ("x", "bad"),
    ]);
    let done = acknowledge(&s, &acks, &time(30));
    assert_eq!(ids(&done.status), [2]);
    assert_eq!(done.status.active_violation_count, 1);
    assert_eq!(done.moved.len(), 1);
    let a = &done.status.acknowledged_violations[0];
    assert_eq!(a.violation.id, 1);
    assert_eq!(a.reason.as_deref(), Some("expected: the web tier"));
    assert_eq!(a.acknowledged_at, Some(time(30)));
    let unknown: Vec<&str> = done
        .unknown
        .iter()
        .map(|k| k.rsplit('-').next().unwrap())
        .collect();
    assert_eq!(unknown, ["x", "99"]);
    assert_eq!(
        done.annotations.len(),
        3,
        "every acknowledgement annotation is removed"
    );
    // A future id is not remembered: record 3, created later, stays active.
    let early = acknowledge(&done.status, &annotations(&[("3", "too early")]), &time(31));
    assert_eq!(early.unknown.len(), 1);
    let later = merge(&early.status, &[seen("new", 80, 1, 40, 40)]);
    assert_eq!(later.new, [3]);
    assert!(ids(&later.status).contains(&3));
}

#[test]
fn an_acknowledged_tuple_makes_a_new_record_only_for_traffic_seen_after_it() {
    let s = merge(&Default::default(), &[seen("web", 80, 3, 10, 20)]).status;
    let s = acknowledge(&s, &annotations(&[("1", "ok")]), &time(21)).status;
    // The index still holds the same totals: nothing new.
    assert_eq!(
        merge(&s, &[seen("web", 80, 3, 10, 20)]).new,
        Vec::<i64>::new()
    );
    // Seen again later: a new record, counting only the flows since.
    let again = merge(&s, &[seen("web", 80, 5, 10, 50)]);
    assert_eq!(again.new, [2]);
    let r = &again.status.violations[0];
    assert_eq!(
        (r.id, r.count, r.first_seen.clone(), r.last_seen.clone()),
        (2, 2, time(20), time(50))
    );
}

#[test]
fn acknowledged_records_are_capped_newest_first() {
    let observations: Vec<_> = (0..100)
        .map(|i| seen(&format!("w{i}"), 80, 1, i, i))
        .collect();
    let mut s = merge(&Default::default(), &observations).status;
    for id in 1..=100 {
        s = acknowledge(
            &s,
            &annotations(&[(&id.to_string(), "ok")]),
            &time(1000 + id),
        )
        .status;
    }
    s = merge(&s, &[seen("last", 80, 1, 2000, 2000)]).status;
    s = acknowledge(&s, &annotations(&[("101", "ok")]), &time(3000)).status;
    assert_eq!(s.acknowledged_violations.len(), 100);
    assert_eq!(
        s.acknowledged_violations[0].violation.id, 101,
        "newest first"
    );
    assert!(
        s.acknowledged_violations
            .iter()
            .all(|a| a.violation.id != 1),
        "oldest dropped"
    );
    assert_eq!(s.active_violation_count, 0);
}

mod detection {
    use std::net::{IpAddr, Ipv4Addr};

    use ne_crds::{Backend, Mode, PolicyDirection, ViolationReason, WorkloadNetworkPolicy};
    use ne_flow::edge::Edge;
    use ne_flow::flow::{
        Direction, Endpoint, EndpointId, Protocol, Timestamp, WorkloadKind, WorkloadRef, labels,
    };
    use ne_policy::index::MergedEdge;
    use ne_policy::resolve::RecordOnly;
    use serde_json::json;

    use crate::violations::detect::{Traffic, detect};
    use crate::violations::record::merge;

    fn forwarded(edges: &[MergedEdge]) -> Traffic<'_> {
        Traffic {
            edges,
            ..Traffic::default()
        }
    }

    fn workload(name: &str) -> Endpoint {
        Endpoint::new(EndpointId::Workload(WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: name.into(),
        }))
        .with_labels(labels([("app", name.to_owned())]))
    }

    fn external(last_octet: u8) -> Endpoint {
        let ip = IpAddr::V4(Ipv4Addr::new(93, 184, 216, last_octet));
        Endpoint::new(EndpointId::External(ip)).with_ip(Some(ip))
    }

    fn edge(
        subject: &str,
        direction: Direction,
        peer: Endpoint,
        port: u16,
        count: u64,
    ) -> MergedEdge {
        MergedEdge {
            edge: Edge {
                subject: workload(subject),
                direction,
                peer,
                protocol: Protocol::Tcp,
                port,
                peer_dns: None,
                denied_by: None,
            },
            count,
            first_seen: Timestamp(10_000_000_000),
            last_seen: Timestamp(20_000_000_000),
        }
    }

    /// A monitor-mode NetworkPolicy-backed policy for Deployment `api`; both directions
    /// select the same pods (`app=api`), as a workload's pair of policies always does.
    fn policy(direction: &str, rules: serde_json::Value, mode: &str) -> WorkloadNetworkPolicy {
        let key = if direction == "Ingress" {
            "ingress"
        } else {
            "egress"
        };
        serde_json::from_value(json!({
            "apiVersion": "networkenforcer.kubewarden.io/v1alpha1",
            "kind": "WorkloadNetworkPolicy",
            "metadata": {"name": format!("deployment-api-{}", key), "namespace": "shop"},
            "spec": {
                "backend": "kubernetes", "mode": mode, "direction": direction,
                "targetRef": {"kind": "Deployment", "name": "api"},
                "kubernetes": {"podSelector": {"matchLabels": {"app": "api"}}, "policyTypes": [direction], key: rules},
            },
        }))
        .unwrap()
    }

    fn pods(app: &str) -> serde_json::Value {
        json!({"podSelector": {"matchLabels": {"app": app}}, "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "shop"}}})
    }

    fn policies(mode: &str) -> Vec<WorkloadNetworkPolicy> {
        vec![
            policy(
                "Ingress",
                json!([{"from": [pods("web")], "ports": [{"protocol": "TCP", "port": 8080}]}]),
                mode,
            ),
            policy(
                "Egress",
                json!([{"to": [pods("db")], "ports": [{"protocol": "TCP", "port": 5432}]}]),
                mode,
            ),
        ]
    }

    fn traffic() -> Vec<MergedEdge> {
        vec![
            edge("api", Direction::Ingress, workload("web"), 8080, 5),
            edge("api", Direction::Ingress, workload("cron"), 8080, 2),
            edge("api", Direction::Egress, workload("db"), 5432, 9),
            edge("api", Direction::Egress, external(34), 443, 3),
            // Traffic of another workload: no policy covers it.
            edge("web", Direction::Egress, workload("cron"), 9000, 1),
        ]
    }

    #[test]
    fn observations_land_on_the_policy_of_their_direction_even_with_a_shared_selector() {
        let found = detect(
            forwarded(&traffic()),
            &policies("monitor"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        assert_eq!(found.allowed, 2);
        let ingress =
            &found.observations[&("shop".to_owned(), "deployment-api-ingress".to_owned())];
        assert_eq!(ingress.len(), 1);
        let o = &ingress[0];
        assert_eq!(o.source.name.as_deref(), Some("cron"));
        assert_eq!(o.destination.name.as_deref(), Some("api"));
        assert_eq!(
            (o.port, o.count, o.direction, o.mode),
            (8080, 2, PolicyDirection::Ingress, Mode::Monitor)
        );
        let egress = &found.observations[&("shop".to_owned(), "deployment-api-egress".to_owned())];
        assert_eq!(egress.len(), 1);
        let o = &egress[0];
        assert_eq!(
            o.source.name.as_deref(),
            Some("api"),
            "egress: the subject is the source"
        );
        assert_eq!(o.destination.ip.as_deref(), Some("93.184.216.34"));
        assert_eq!(
            (o.port, o.count, o.direction),
            (443, 3, PolicyDirection::Egress)
        );
    }

    #[test]
    fn only_monitor_policies_of_the_active_backend_are_checked() {
        let found = detect(
            forwarded(&traffic()),
            &policies("protect"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        assert!(found.observations.is_empty() && found.allowed == 0);
        let found = detect(
            forwarded(&traffic()),
            &policies("monitor"),
            &RecordOnly,
            Backend::Istio,
        );
        assert!(found.observations.is_empty() && found.allowed == 0);
    }

    #[test]
    fn edges_of_one_tuple_add_up() {
        let mut edges = traffic();
        // A second edge naming the same peer and port (its endpoints differ in what the
        // record carries, not in what the violation names): one observation.
        let mut again = edge("api", Direction::Egress, external(34), 443, 4);
        again.last_seen = Timestamp(30_000_000_000);
        edges.push(again);
        let found = detect(
            forwarded(&edges),
            &policies("monitor"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        let egress = &found.observations[&("shop".to_owned(), "deployment-api-egress".to_owned())];
        assert_eq!(egress.len(), 1);
        assert_eq!(egress[0].count, 7);
        assert_eq!(egress[0].last_seen.0.as_second(), 30);
    }

    #[test]
    fn denials_land_on_the_protect_policy_of_their_direction_or_are_unattributed() {
        let mut named = edge("api", Direction::Egress, workload("cron"), 9000, 4);
        named.edge.denied_by = Some("shop/deployment-api-egress".into());
        let denials = vec![
            // api's egress to cron, denied at api (the source) by its egress policy, which
            // the data plane names.
            named,
            // cron → api, denied at api: the ingress policy.
            edge("api", Direction::Ingress, workload("cron"), 8080, 2),
            // A workload without a policy: unattributed.
            edge("web", Direction::Ingress, workload("cron"), 80, 1),
        ];
        let traffic = Traffic {
            denials: &denials,
            ..Traffic::default()
        };
        let found = detect(
            traffic,
            &policies("protect"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        let egress = &found.observations[&("shop".to_owned(), "deployment-api-egress".to_owned())];
        assert_eq!(egress.len(), 1);
        assert_eq!(
            (
                egress[0].port,
                egress[0].mode,
                egress[0].direction,
                egress[0].reason
            ),
            (
                9000,
                Mode::Protect,
                PolicyDirection::Egress,
                ViolationReason::DeniedByDataPlane
            )
        );
        assert_eq!(egress[0].destination.name.as_deref(), Some("cron"));
        assert_eq!(
            (egress[0].denied_by.as_deref(), egress[0].message.as_str()),
            (
                Some("shop/deployment-api-egress"),
                "the data plane denied the connection: policy shop/deployment-api-egress"
            )
        );
        let ingress =
            &found.observations[&("shop".to_owned(), "deployment-api-ingress".to_owned())];
        assert_eq!(
            (ingress.len(), ingress[0].port, ingress[0].count),
            (1, 8080, 2)
        );
        assert_eq!(
            (ingress[0].denied_by.as_deref(), ingress[0].message.as_str()),
            (None, "the data plane denied the connection"),
            "the data plane named no policy"
        );
        assert_eq!(found.unattributed.len(), 1);
        let u = &found.unattributed[0];
        assert_eq!(
            (u.destination.name.as_deref(), u.port, u.mode),
            (Some("web"), 80, Mode::Protect)
        );
        // Denials never reach a monitor-mode policy: they are not its signal.
        let found = detect(
            traffic,
            &policies("monitor"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        assert!(found.observations.is_empty());
        assert_eq!(found.unattributed.len(), 3);
    }

    #[test]
    fn each_observation_says_how_near_the_nearest_rule_came() {
        // The ingress policy admits web on TCP 8080 only.
        let mut udp = edge("api", Direction::Ingress, workload("web"), 8080, 1);
        udp.edge.protocol = Protocol::Udp;
        let edges = vec![
            edge("api", Direction::Ingress, workload("cron"), 8080, 1),
            edge("api", Direction::Ingress, workload("web"), 9090, 1),
            udp,
        ];
        let found = detect(
            forwarded(&edges),
            &policies("monitor"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        let key = ("shop".to_owned(), "deployment-api-ingress".to_owned());
        let why: Vec<_> = found.observations[&key]
            .iter()
            .map(|o| (o.source.name.as_deref(), o.reason, o.message.as_str()))
            .collect();
        assert_eq!(
            why,
            [
                (
                    Some("cron"),
                    ViolationReason::NoRuleForPeer,
                    "no ingress rule of the policy admits this peer"
                ),
                (
                    Some("web"),
                    ViolationReason::PortNotAllowed,
                    "ingress rules admit this peer, but not on TCP port 9090"
                ),
                (
                    Some("web"),
                    ViolationReason::ProtocolNotAllowed,
                    "ingress rules admit this peer on port 8080, but not over UDP"
                ),
            ]
        );
        // The records carry them.
        let merged = merge(&Default::default(), &found.observations[&key]);
        let reasons: Vec<_> = merged.status.violations.iter().map(|r| r.reason).collect();
        assert_eq!(reasons.len(), 3);
        assert!(reasons.iter().all(Option::is_some));
    }

    #[test]
    fn a_dry_run_denial_and_the_check_of_the_same_connection_make_one_record() {
        // ztunnel's dry-run line names no port; the access line of the same connection
        // arrives when it closes, and the check finds it outside the policy.
        let audits = vec![edge("api", Direction::Ingress, workload("cron"), 0, 1)];
        let policies = policies("monitor");
        let found = detect(
            Traffic {
                audits: &audits,
                ..Traffic::default()
            },
            &policies,
            &RecordOnly,
            Backend::Kubernetes,
        );
        let key = ("shop".to_owned(), "deployment-api-ingress".to_owned());
        let early = &found.observations[&key];
        assert_eq!(
            (early.len(), early[0].port, early[0].mode),
            (1, super::super::record::UNKNOWN_PORT, Mode::Monitor)
        );
        let first = merge(&Default::default(), early);
        assert_eq!(first.new, [1], "visible before the connection closes");
        assert_eq!(
            first.status.violations[0].reason,
            Some(ViolationReason::DeniedByDataPlane)
        );

        let forwarded_edges = traffic();
        let found = detect(
            Traffic {
                edges: &forwarded_edges,
                audits: &audits,
                ..Traffic::default()
            },
            &policies,
            &RecordOnly,
            Backend::Kubernetes,
        );
        let later = merge(&first.status, &found.observations[&key]);
        assert!(
            later.new.is_empty(),
            "the same connection: no second record"
        );
        assert_eq!(later.updated, [1]);
        let r = &later.status.violations[0];
        assert_eq!(
            (r.id, r.port, r.count, later.status.violations.len()),
            (1, 8080, 2, 1),
            "the record took the port of the access line"
        );
        assert_eq!(
            r.reason,
            Some(ViolationReason::NoRuleForPeer),
            "and the reason of the rules"
        );
        // Both arriving in one round (either order) also make one record.
        let mut both = found.observations[&key].clone();
        both.reverse();
        let once = merge(&Default::default(), &both);
        assert_eq!((once.new.len(), once.status.violations[0].port), (1, 8080));
    }

    /// What the record carries, except one address that changed hands while it was seen.
    struct Reused(IpAddr);

    impl ne_policy::resolve::Resolver for Reused {
        fn resolve_at(
            &self,
            endpoint: &Endpoint,
            seen: ne_policy::resolve::Seen,
        ) -> ne_policy::resolve::Resolution {
            match endpoint.id {
                EndpointId::External(ip) if ip == self.0 => {
                    ne_policy::resolve::Resolution::Unresolved(
                        ne_policy::resolve::Unresolved::AddressReused,
                    )
                }
                _ => RecordOnly.resolve_at(endpoint, seen),
            }
        }
    }

    #[test]
    fn a_peer_not_resolved_at_its_time_is_counted_not_recorded() {
        let reused = external(34);
        let resolver = Reused(reused.ip.unwrap());
        let found = detect(
            forwarded(&traffic()),
            &policies("monitor"),
            &resolver,
            Backend::Kubernetes,
        );
        let egress = ("shop".to_owned(), "deployment-api-egress".to_owned());
        assert!(!found.observations.contains_key(&egress), "{found:?}");
        assert_eq!(
            found.unresolved_peers.get("address_reused"),
            Some(&1),
            "the edge to the reused address"
        );
        // The other direction is checked as before.
        let ingress = ("shop".to_owned(), "deployment-api-ingress".to_owned());
        assert_eq!(found.observations[&ingress].len(), 1);
    }

    #[test]
    fn a_dry_run_denial_of_an_unmonitored_workload_is_unattributed() {
        let audits = vec![edge("web", Direction::Ingress, workload("cron"), 0, 1)];
        let found = detect(
            Traffic {
                audits: &audits,
                ..Traffic::default()
            },
            &policies("monitor"),
            &RecordOnly,
            Backend::Kubernetes,
        );
        assert!(found.observations.is_empty());
        assert_eq!(
            (found.unattributed.len(), found.unattributed[0].mode),
            (1, Mode::Monitor)
        );
    }
}

#[test]
fn an_id_acknowledged_already_is_removed_without_a_warning_or_a_second_move() {
    let s = merge(&Default::default(), &[seen("web", 80, 3, 10, 20)]).status;
    let acks = annotations(&[("1", "ok")]);
    let once = acknowledge(&s, &acks, &time(30));
    assert_eq!(once.moved.len(), 1);
    // The status write succeeded, the annotation's removal did not: the next round sees
    // the annotation again.
    let again = acknowledge(&once.status, &acks, &time(31));
    assert!(again.moved.is_empty() && again.unknown.is_empty());
    assert_eq!(again.annotations.len(), 1, "removed all the same");
    assert_eq!(again.status, once.status);
}

#[test]
fn a_record_made_and_changed_in_one_merge_is_reported_as_new_only() {
    let merged = merge(
        &Default::default(),
        &[seen("web", 80, 3, 10, 20), seen("web", 80, 5, 10, 30)],
    );
    assert_eq!((merged.new.as_slice(), merged.updated.len()), (&[1][..], 0));
    assert_eq!(merged.status.violations[0].count, 5);
}
