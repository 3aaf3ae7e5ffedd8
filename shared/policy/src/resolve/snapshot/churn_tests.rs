//! Attribution over time: addresses handed to new pods, pods recreated under one name,
//! pods gone before the snapshot, histories from several inputs and watch streams.

use serde_json::{Value, json};

use super::*;
use crate::resolve::ResolvedPod;
use ne_flow::flow::labels;

/// 2026-01-01T10:00:00Z, and times after it in seconds.
const T0: i64 = 1_767_261_600;

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap()
        .to_string()
}

fn at(secs: i64) -> Seen {
    Seen::at(Some(Timestamp::from_secs(T0 + secs)))
}

fn between(first: i64, last: i64) -> Seen {
    Seen::between(
        Timestamp::from_secs(T0 + first),
        Timestamp::from_secs(T0 + last),
    )
}

fn deployment(ns: &str, name: &str, hash: &str, account: &str) -> [Value; 2] {
    let template = json!({
        "metadata": {"labels": {"app": name}},
        "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "i"}]},
    });
    [
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": format!("{name}-{hash}"), "namespace": ns,
                "labels": {"app": name, "pod-template-hash": hash},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                     "uid": format!("uid-{name}"), "controller": true}],
            },
            "spec": {
                "selector": {"matchLabels": {"app": name, "pod-template-hash": hash}},
                "template": template,
            },
        }),
    ]
}

fn statefulset(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    })
}

/// A pod of `owner` (`ReplicaSet/<name>` or `StatefulSet/<name>`), started at `start`
/// (seconds after T0) with addresses `ips`.
fn pod(ns: &str, name: &str, uid: &str, owner: &str, start: i64, ips: &[&str]) -> Value {
    let (kind, owner_name) = owner.split_once('/').unwrap();
    let mut labels = json!({"app": owner_name});
    let generate_name = match kind {
        "ReplicaSet" => {
            let (app, hash) = owner_name.rsplit_once('-').unwrap();
            labels = json!({"app": app, "pod-template-hash": hash});
            Some(format!("{owner_name}-"))
        }
        _ => None,
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "uid": uid, "generateName": generate_name,
            "labels": labels,
            "creationTimestamp": rfc3339(T0 + start - 2),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                                 "uid": format!("uid-{owner_name}"), "controller": true}],
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {
            "phase": "Running",
            "startTime": rfc3339(T0 + start),
            "podIP": ips[0],
            "podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        },
    })
}

fn deleted_at(mut pod: Value, secs: i64) -> Value {
    pod["metadata"]["deletionTimestamp"] = json!(rfc3339(T0 + secs));
    pod
}

fn list(items: impl IntoIterator<Item = Value>) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": items.into_iter().collect::<Vec<_>>()})
        .to_string()
}

fn event(kind: &str, object: &Value) -> String {
    serde_json::to_string_pretty(&json!({"type": kind, "object": object})).unwrap()
}

const A4: &str = "10.0.0.50";
const A6: &str = "fd00::50";

fn alpha() -> Value {
    pod(
        "shop",
        "alpha-5f6b7c8d9-bcdfg",
        "uid-a",
        "ReplicaSet/alpha-5f6b7c8d9",
        0,
        &[A4, A6],
    )
}

fn beta() -> Value {
    pod(
        "shop",
        "beta-6c7d8f9b2-hjklm",
        "uid-b",
        "ReplicaSet/beta-6c7d8f9b2",
        420,
        &[A4, A6],
    )
}

/// The workloads: Deployments alpha, beta (shop), StatefulSet db (shop).
fn workloads() -> Vec<Value> {
    let mut v: Vec<Value> = deployment("shop", "alpha", "5f6b7c8d9", "alpha").into();
    v.extend(deployment("shop", "beta", "6c7d8f9b2", "beta"));
    v.push(statefulset("shop", "db"));
    v
}

/// The end of the capture: alpha's pod is gone, beta's holds its addresses.
fn end() -> String {
    list(workloads().into_iter().chain([beta()]))
}

fn owner(r: Resolution) -> Option<WorkloadRef> {
    match r {
        Resolution::Pod(ResolvedPod { owner, .. }) => owner,
        other => panic!("expected a pod, got {other:?}"),
    }
}

fn deploy(name: &str) -> Option<WorkloadRef> {
    Some(WorkloadRef {
        namespace: "shop".into(),
        kind: WorkloadKind::Deployment,
        name: name.into(),
    })
}

fn address(ip: &str) -> Endpoint {
    Endpoint::new(EndpointId::External(ip.parse().unwrap()))
}

fn named(name: &str) -> Endpoint {
    Endpoint::new(EndpointId::Pod {
        namespace: "shop".into(),
        name: name.into(),
    })
}

#[test]
fn an_address_resolves_to_its_holder_at_the_time_and_never_to_a_later_one() {
    let start = list(workloads().into_iter().chain([alpha()]));
    let history = ClusterSnapshot::from_inputs([start.as_str(), end().as_str()]).unwrap();
    for ip in [A4, A6] {
        assert_eq!(
            owner(history.resolve_at(&address(ip), at(60))),
            deploy("alpha")
        );
        assert_eq!(
            owner(history.resolve_at(&address(ip), at(600))),
            deploy("beta")
        );
        assert_eq!(
            history.resolve_at(&address(ip), between(60, 600)),
            Resolution::Unresolved(Unresolved::AddressReused),
        );
        assert_eq!(
            history.resolve_at(&address(ip), at(-60)),
            Resolution::Unresolved(Unresolved::AddressNotHeld),
        );
    }
    // A record naming alpha's pod is alpha's, whoever holds the address since.
    let alpha_named = named("alpha-5f6b7c8d9-bcdfg").with_ip(Some(A4.parse().unwrap()));
    assert_eq!(
        owner(history.resolve_at(&alpha_named, at(600))),
        deploy("alpha")
    );

    // With the end snapshot alone, alpha's time is nobody's: never beta's.
    let end_only = ClusterSnapshot::from_yaml(&end()).unwrap();
    assert_eq!(
        end_only.resolve_at(&address(A4), at(60)),
        Resolution::Unresolved(Unresolved::AddressNotHeld),
    );
    assert_eq!(
        owner(end_only.resolve_at(&address(A4), at(600))),
        deploy("beta")
    );
}

#[test]
fn a_deletion_ends_the_hold_before_the_next_holder() {
    let gone = deleted_at(alpha(), 300);
    let history = ClusterSnapshot::from_inputs([list(
        workloads().into_iter().chain([gone, beta()]),
    )
    .as_str()])
    .unwrap();
    assert_eq!(
        owner(history.resolve_at(&address(A4), at(299))),
        deploy("alpha")
    );
    assert_eq!(
        history.resolve_at(&address(A4), at(360)),
        Resolution::Unresolved(Unresolved::AddressNotHeld),
    );
    // A deletionTimestamp alone is a pod still terminating: selectable, with the
    // Deployment's and the ReplicaSet's templates.
    assert_eq!(
        history
            .endpoints()
            .filter(|p| p.owner == deploy("alpha"))
            .count(),
        3
    );
}

#[test]
fn a_pod_gone_before_the_snapshot_resolves_through_its_listed_owner() {
    let end_only = ClusterSnapshot::from_yaml(&end()).unwrap();
    // ztunnel names the pod and its identity, and carries no labels.
    let ztunnel = |id: &str| named("alpha-5f6b7c8d9-bcdfg").with_identity(Some(id.into()));
    assert_eq!(
        owner(end_only.resolve(&ztunnel("cluster.local/ns/shop/sa/alpha"))),
        deploy("alpha")
    );
    assert_eq!(
        end_only.resolve(&ztunnel("cluster.local/ns/shop/sa/beta")),
        Resolution::Unresolved(Unresolved::PodNotListed),
        "the identity contradicts the owner"
    );
    // Hubble carries labels: they must fit the owner's selector.
    let hubble = |app: &str| named("alpha-5f6b7c8d9-bcdfg").with_labels(labels([("app", app)]));
    assert_eq!(owner(end_only.resolve(&hubble("alpha"))), deploy("alpha"));
    // Labels that fit no listed owner: no owner, but a peer selectable by those labels.
    let Resolution::Pod(misfit) = end_only.resolve(&hubble("beta")) else {
        panic!("a labelled pod resolves by its labels")
    };
    assert_eq!(
        (misfit.owner, &*misfit.labels),
        (None, &*labels([("app", "beta")]))
    );
    // The template hash finds the ReplicaSet whatever the pod is called.
    let hashed = named("custom-name").with_labels(labels([
        ("app", "alpha"),
        ("pod-template-hash", "5f6b7c8d9"),
    ]));
    assert_eq!(owner(end_only.resolve(&hashed)), deploy("alpha"));
    // A StatefulSet pod by its ordinal.
    assert_eq!(
        owner(end_only.resolve(&named("db-3"))).map(|w| w.kind),
        Some(WorkloadKind::StatefulSet)
    );
    // No listed owner generates these names.
    for name in [
        "alpha-5f6b7c8d9",
        "alpha-bcdfg",
        "alpha-5f6b7c8d9-abcde",
        "db-03",
        "web-0",
    ] {
        assert_eq!(
            end_only.resolve(&named(name)),
            Resolution::Unresolved(Unresolved::PodNotListed),
            "{name}"
        );
    }
    // Calico's group of a ReplicaSet whose pods are all gone.
    let group = Endpoint::new(EndpointId::PodGroup {
        namespace: "shop".into(),
        prefix: "alpha-5f6b7c8d9-".into(),
    });
    assert_eq!(owner(end_only.resolve(&group)), deploy("alpha"));
}

/// StatefulSet db's pod db-0: the first (10.0.0.60, from 0 s), and the one recreated under
/// its name (10.0.0.61, from 400 s).
fn db_pods() -> [Value; 2] {
    [
        pod(
            "shop",
            "db-0",
            "uid-db-1",
            "StatefulSet/db",
            0,
            &["10.0.0.60"],
        ),
        pod(
            "shop",
            "db-0",
            "uid-db-2",
            "StatefulSet/db",
            400,
            &["10.0.0.61"],
        ),
    ]
}

#[test]
fn a_statefulset_pod_recreated_under_its_name_is_a_second_pod() {
    let [first, second] = db_pods();
    let stream = [
        event("ADDED", &first),
        event("DELETED", &deleted_at(first.clone(), 300)),
        event("ADDED", &second),
    ]
    .join("\n");
    let history = ClusterSnapshot::from_inputs([end().as_str(), stream.as_str()]).unwrap();
    let db = |ip: &str, secs: i64| {
        owner(history.resolve_at(&address(ip), at(secs))).map(|w| w.name.to_string())
    };
    assert_eq!(db("10.0.0.60", 100), Some("db".to_owned()));
    assert_eq!(db("10.0.0.61", 500), Some("db".to_owned()));
    assert_eq!(
        history.resolve_at(&address("10.0.0.60"), at(500)),
        Resolution::Unresolved(Unresolved::AddressNotHeld),
        "the first pod's address after its deletion"
    );
    // Only the running pod can be selected.
    let running = history
        .endpoints()
        .filter(|p| p.owner.as_ref().is_some_and(|w| &*w.name == "db"))
        .count();
    assert_eq!(
        running, 2,
        "the running db-0 and the StatefulSet's template"
    );
}

#[test]
fn observations_of_one_pod_merge_and_the_newest_wins() {
    let mut old = beta();
    old["metadata"]["resourceVersion"] = json!("10");
    old["metadata"]["labels"]["app"] = json!("stale");
    let mut new = beta();
    new["metadata"]["resourceVersion"] = json!("12");
    // The newer observation first: resourceVersion, not input order, decides.
    let stream = format!("{}\n{}", event("MODIFIED", &new), event("ADDED", &old));
    let history =
        ClusterSnapshot::from_inputs([list(workloads()).as_str(), stream.as_str()]).unwrap();
    assert_eq!(history.pod_count(), 1);
    let Resolution::Pod(p) = history.resolve(&named("beta-6c7d8f9b2-hjklm")) else {
        panic!("beta is listed")
    };
    assert!(
        p.labels
            .iter()
            .any(|(k, v)| &**k == "app" && &**v == "beta")
    );
}

#[test]
fn a_trimmed_snapshot_without_uids_merges_with_the_watch_stream() {
    let trim = |mut p: Value| {
        p["metadata"].as_object_mut().unwrap().remove("uid");
        p
    };
    let [first, second] = db_pods();
    let end = list(
        workloads()
            .into_iter()
            .chain([trim(beta()), trim(second.clone())]),
    );
    let stream = [
        event("ADDED", &alpha()),
        event("DELETED", &deleted_at(alpha(), 300)),
        event("ADDED", &first),
        event("DELETED", &deleted_at(first.clone(), 300)),
        event("ADDED", &beta()),
        event("ADDED", &second),
    ]
    .join("\n");
    let history = ClusterSnapshot::from_inputs([end.as_str(), stream.as_str()]).unwrap();
    // beta once, not twice: its two copies holding one address would make it ambiguous.
    // db-0 twice: the trimmed copy is the second pod by its creation time.
    assert_eq!(history.pod_count(), 4, "alpha, beta and two db-0");
    assert_eq!(
        owner(history.resolve_at(&address(A4), at(600))),
        deploy("beta")
    );
    assert_eq!(
        owner(history.resolve_at(&address(A6), at(60))),
        deploy("alpha")
    );
    let db = |ip: &str, secs: i64| {
        owner(history.resolve_at(&address(ip), at(secs))).map(|w| w.name.to_string())
    };
    assert_eq!(db("10.0.0.60", 100), Some("db".to_owned()));
    assert_eq!(db("10.0.0.61", 500), Some("db".to_owned()));
}

#[test]
fn watch_streams_without_event_types_and_bookmarks_are_read() {
    let plain = format!(
        "{}\n{}\n{}",
        serde_json::to_string_pretty(&alpha()).unwrap(),
        serde_json::to_string_pretty(&beta()).unwrap(),
        event(
            "BOOKMARK",
            &json!({"kind": "Pod", "metadata": {"resourceVersion": "9"}})
        ),
    );
    let history =
        ClusterSnapshot::from_inputs([list(workloads()).as_str(), plain.as_str()]).unwrap();
    assert_eq!(history.pod_count(), 2);
    assert_eq!(
        history.ignored_kinds().get("watch event BOOKMARK"),
        Some(&1)
    );
    assert_eq!(
        owner(history.resolve_at(&address(A6), at(60))),
        deploy("alpha")
    );
    let broken = ClusterSnapshot::from_inputs([plain.as_str(), "{\"kind\": "]);
    assert!(
        matches!(broken, Err((1, SnapshotError::Json(_)))),
        "{broken:?}"
    );
}

#[test]
fn live_pods_gone_since_the_last_snapshot_keep_resolving_their_lifetime() {
    let objects = |pods: Vec<Value>| {
        let mut o = ClusterObjects::default();
        for w in workloads() {
            match w["kind"].as_str() {
                Some("Deployment") => o.deployments.push(serde_json::from_value(w).unwrap()),
                Some("ReplicaSet") => o.replicasets.push(serde_json::from_value(w).unwrap()),
                _ => o.statefulsets.push(serde_json::from_value(w).unwrap()),
            }
        }
        o.pods = pods
            .into_iter()
            .map(|p| serde_json::from_value(p).unwrap())
            .collect();
        o
    };
    let (before, _) = ClusterSnapshot::from_objects(objects(vec![alpha()]), []);
    let (after, _) = ClusterSnapshot::from_objects(objects(vec![beta()]), []);
    let gone = before.gone_since(&after, Timestamp::from_secs(T0 + 400));
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].name(), "shop/alpha-5f6b7c8d9-bcdfg");
    assert_eq!(gone[0].ended(), Timestamp::from_secs(T0 + 400));
    assert!(gone[0].heap_bytes() > 0);
    let (live, _) = ClusterSnapshot::from_objects(objects(vec![beta()]), &gone);
    let mut added = ClusterSnapshot::from_objects(objects(vec![beta()]), []).0;
    added.add_gone(&gone);
    for (seen, ip) in [(at(60), A4), (at(500), A6)] {
        assert_eq!(
            added.resolve_at(&address(ip), seen),
            live.resolve_at(&address(ip), seen)
        );
    }
    assert_eq!(
        owner(live.resolve_at(&address(A4), at(60))),
        deploy("alpha")
    );
    assert_eq!(
        owner(live.resolve_at(&address(A4), at(500))),
        deploy("beta")
    );
    assert_eq!(
        owner(live.resolve_at(&named("alpha-5f6b7c8d9-bcdfg"), at(500))),
        deploy("alpha")
    );
    assert_eq!(
        live.endpoints()
            .filter(|p| p.owner == deploy("alpha"))
            .count(),
        2,
        "only the Deployment's and the ReplicaSet's templates: a gone pod is selected by nothing"
    );
    // A gone pod is reported once: the next snapshot lists it as gone already.
    assert!(
        live.gone_since(&after, Timestamp::from_secs(T0 + 500))
            .is_empty()
    );
}
