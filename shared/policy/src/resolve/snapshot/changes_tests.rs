//! A snapshot changed step by step answers exactly as one built at once from the same
//! objects and the same gone pods: every index compared, after every step of random
//! changes to a small cluster where names, addresses, owners and generated names collide.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

/// One change: which kind (0..8), which object of it (0..6), what it looks like now
/// (`None`: deleted), and for a pod whether it is a new pod under the name (a fresh uid).
#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    which: u8,
    shape: Option<u16>,
    fresh: bool,
}

fn op() -> impl Strategy<Value = Op> {
    (
        0u8..8,
        0u8..6,
        prop::option::weighted(0.8, 0u16..2000),
        any::<bool>(),
    )
        .prop_map(|(kind, which, shape, fresh)| Op {
            kind,
            // Two namespaces: objects 0 and 1 of the kind.
            which: if kind == 0 { which % 2 } else { which },
            shape,
            fresh,
        })
}

const KINDS: [&str; 8] = [
    "Namespace",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "CronJob",
    "Pod",
    "Pod",
];

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap()
        .to_string()
}

fn reference(api_version: &str, kind: &str, name: String) -> Value {
    json!([{ "apiVersion": api_version, "kind": kind, "name": name, "uid": "x", "controller": true }])
}

/// The object `op` describes at time `now`; `uid` for a pod.
fn object(op: &Op, shape: u16, now: i64, uid: &str) -> Value {
    let ns = ["a", "b"][usize::from(op.which % 2)];
    let i = op.which / 2;
    let digit = |place: u16, of: u16| (shape / place) % of;
    let template = json!({
        "metadata": { "labels": { "app": format!("d{}", digit(1, 3)), "tier": format!("t{}", digit(3, 2)) } },
        "spec": { "containers": [{ "name": "c", "ports": [{ "name": "http", "containerPort": 8000 + digit(6, 2) }] }] },
    });
    let selector = match digit(1, 3) {
        0 => json!({ "matchLabels": { "app": format!("d{i}") } }),
        1 => json!({ "matchLabels": { "app": "d1" } }),
        _ => json!({}),
    };
    let meta =
        |name: String| json!({ "namespace": ns, "name": name, "uid": format!("{name}-uid") });
    match KINDS[usize::from(op.kind)] {
        "Namespace" => json!({
            "kind": "Namespace",
            "metadata": { "name": ns, "labels": { "team": format!("{}", digit(1, 2)) } },
        }),
        "Deployment" => json!({
            "kind": "Deployment", "apiVersion": "apps/v1", "metadata": meta(format!("d{i}")),
            "spec": { "selector": selector, "template": template },
        }),
        "ReplicaSet" => {
            let mut m = meta(format!("r{i}"));
            m["labels"] = json!({ "pod-template-hash": format!("h{}", digit(4, 2)) });
            match digit(12, 4) {
                0 => m["ownerReferences"] = reference("apps/v1", "Deployment", format!("d{i}")),
                1 => {
                    m["ownerReferences"] =
                        reference("apps/v1", "Deployment", format!("d{}", (i + 1) % 3))
                }
                2 => {
                    m["ownerReferences"] = reference("argoproj.io/v1alpha1", "Rollout", "r".into())
                }
                _ => {}
            }
            json!({ "kind": "ReplicaSet", "apiVersion": "apps/v1", "metadata": m,
                    "spec": { "selector": selector, "template": template } })
        }
        "StatefulSet" => json!({
            "kind": "StatefulSet", "apiVersion": "apps/v1", "metadata": meta(format!("s{i}")),
            "spec": { "selector": selector, "template": template, "serviceName": "s" },
        }),
        "Job" => {
            let mut m = meta(format!("j{i}"));
            if digit(2, 2) == 0 {
                m["ownerReferences"] = reference("batch/v1", "CronJob", format!("c{i}"));
            }
            json!({ "kind": "Job", "apiVersion": "batch/v1", "metadata": m,
                    "spec": { "template": template } })
        }
        "CronJob" => json!({
            "kind": "CronJob", "apiVersion": "batch/v1", "metadata": meta(format!("c{i}")),
            "spec": { "schedule": "* * * * *", "jobTemplate": { "spec": { "template": template } } },
        }),
        _ => {
            let name = format!("p{}", i + 3 * (op.kind - 6));
            let mut m = json!({
                "namespace": ns, "name": name, "uid": uid,
                "creationTimestamp": rfc3339(now - i64::from(digit(1, 4)) * 10),
                "labels": { "app": format!("d{}", digit(3, 3)) },
            });
            let j = (shape / 7) % 3;
            match digit(5, 6) {
                0 => m["ownerReferences"] = reference("apps/v1", "ReplicaSet", format!("r{j}")),
                1 => m["ownerReferences"] = reference("apps/v1", "ReplicaSet", format!("r{i}")),
                2 => m["ownerReferences"] = reference("apps/v1", "StatefulSet", format!("s{j}")),
                3 => m["ownerReferences"] = reference("batch/v1", "Job", format!("j{j}")),
                4 => m["ownerReferences"] = reference("v1", "Node", "n".into()),
                _ => {}
            }
            match digit(11, 3) {
                0 => m["generateName"] = json!("g-"),
                1 => m["generateName"] = json!("k-"),
                _ => {}
            }
            if digit(13, 9) == 0 {
                m["deletionTimestamp"] = json!(rfc3339(now));
            }
            let ip = match digit(17, 8) {
                7 => "not-an-address".to_owned(),
                n => format!("10.0.0.{}", n % 3 + 1),
            };
            let phase = if digit(19, 9) == 0 {
                "Succeeded"
            } else {
                "Running"
            };
            json!({
                "kind": "Pod", "metadata": m,
                "spec": { "hostNetwork": digit(23, 10) == 0, "containers": template["spec"]["containers"] },
                "status": { "phase": phase, "podIP": ip },
            })
        }
    }
}

/// Every index of `s`, named by content rather than by slot.
fn dump(s: &ClusterSnapshot) -> String {
    let id = |i: usize| {
        let p = s.pod(i);
        format!(
            "{}/{}#{:?}{}",
            p.namespace,
            p.name,
            p.uid,
            if p.gone { " gone" } else { "" }
        )
    };
    let slot = |slot: Slot| match slot {
        Slot::Pod(i) => id(i),
        Slot::Ambiguous => "ambiguous".to_owned(),
    };
    let mut out = BTreeMap::<String, String>::new();
    for (ns, names) in &s.by_name {
        for (name, same) in names {
            let pods: Vec<_> = same
                .iter()
                .map(|&i| {
                    let p = s.pod(i);
                    (
                        id(i),
                        p.life,
                        &p.resolution,
                        &p.ips,
                        p.addressable,
                        &p.owner,
                    )
                })
                .collect();
            out.insert(format!("name {ns}/{name}"), format!("{pods:?}"));
        }
    }
    for (ns, groups) in &s.groups {
        for (prefix, group) in groups {
            out.insert(format!("group {ns}/{prefix}"), slot(group.slot));
        }
    }
    for (ip, holders) in &s.by_ip {
        let holds: Vec<_> = holders.holds().map(|(a, b, h)| (a, b, slot(h))).collect();
        out.insert(format!("ip {ip}"), format!("{holds:?}"));
    }
    for (w, resolution) in &s.workloads {
        out.insert(format!("workload {w:?}"), format!("{resolution:?}"));
    }
    for (key, names) in &s.replicasets_by_hash {
        let mut names = names.clone();
        names.sort();
        out.insert(format!("hash {key:?}"), format!("{names:?}"));
    }
    for (ns, labels) in &s.namespace_labels {
        out.insert(format!("namespace {ns}"), format!("{labels:?}"));
    }
    let mut text = format!(
        "pods {} workloads {} namespaces {} skipped {}\n",
        s.pod_count(),
        s.workload_count(),
        s.namespace_count(),
        s.skipped()
    );
    for (k, v) in out {
        writeln!(text, "{k}: {v}").unwrap();
    }
    text
}

fn decoded<K: serde::de::DeserializeOwned>(v: &Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v.clone()).unwrap())
}

fn objects(state: &BTreeMap<(u8, u8), Value>) -> ClusterObjects {
    let mut o = ClusterObjects::default();
    for ((kind, _), v) in state {
        match KINDS[usize::from(*kind)] {
            "Namespace" => o.namespaces.push(decoded(v)),
            "Deployment" => o.deployments.push(decoded(v)),
            "ReplicaSet" => o.replicasets.push(decoded(v)),
            "StatefulSet" => o.statefulsets.push(decoded(v)),
            "Job" => o.jobs.push(decoded(v)),
            "CronJob" => o.cronjobs.push(decoded(v)),
            _ => o.pods.push(decoded(v)),
        }
    }
    o
}

fn change<K: serde::de::DeserializeOwned>(v: Option<&Value>, ns: &str, name: &str) -> Change<K> {
    Change {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        object: v.map(decoded),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_snapshot_changed_step_by_step_equals_one_built_from_the_same_state(
        steps in prop::collection::vec((prop::collection::vec(op(), 1..8), 0usize..3), 1..12),
    ) {
        let mut state: BTreeMap<(u8, u8), Value> = BTreeMap::new();
        let mut history: Vec<GonePod> = Vec::new();
        let (mut live, _) = ClusterSnapshot::from_objects(ClusterObjects::default(), []);
        let mut uids = 0;
        for (step, (ops, forget)) in steps.into_iter().enumerate() {
            let now = 1_000_000 + 1_000 * i64::try_from(step).unwrap();
            // The last change of each object in a step is the one that counts.
            let mut touched = BTreeMap::new();
            for op in ops {
                let key = (op.kind, op.which);
                match op.shape {
                    None => {
                        state.remove(&key);
                    }
                    Some(shape) => {
                        let old_uid = state.get(&key).and_then(|v| v["metadata"]["uid"].as_str().map(str::to_owned));
                        let uid = match old_uid {
                            Some(uid) if !op.fresh => uid,
                            _ => {
                                uids += 1;
                                format!("uid-{uids}")
                            }
                        };
                        state.insert(key, object(&op, shape, now, &uid));
                    }
                }
                touched.insert(key, ());
            }
            let mut changes = ClusterChanges::default();
            for (key @ (kind, which), ()) in touched {
                let ns = ["a", "b"][usize::from(which % 2)];
                let i = which / 2;
                let v = state.get(&key);
                match KINDS[usize::from(kind)] {
                    "Namespace" => changes.namespaces.push((ns.to_owned(), v.map(decoded))),
                    "Deployment" => changes.deployments.push(change(v, ns, &format!("d{i}"))),
                    "ReplicaSet" => changes.replicasets.push(change(v, ns, &format!("r{i}"))),
                    "StatefulSet" => changes.statefulsets.push(change(v, ns, &format!("s{i}"))),
                    "Job" => changes.jobs.push(change(v, ns, &format!("j{i}"))),
                    "CronJob" => changes.cronjobs.push(change(v, ns, &format!("c{i}"))),
                    _ => changes.pods.push(change(v, ns, &format!("p{}", i + 3 * (kind - 6)))),
                }
            }
            history.extend(live.apply(changes, Timestamp(now * 1_000_000_000)));
            let forget = forget.min(history.len());
            live.forget(&history[..forget]);
            history.drain(..forget);

            let (built, skipped) = ClusterSnapshot::from_objects(objects(&state), &history);
            prop_assert_eq!(skipped, built.skipped());
            prop_assert_eq!(dump(&live), dump(&built), "after step {}", step);
        }
    }
}
