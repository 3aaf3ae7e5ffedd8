//! `learn` and `check` on the churn example (`examples/churn/`): pods deleted, recreated and
//! replaced during the capture, their addresses given to other pods, for every provider and
//! three histories of the cluster (the end snapshot alone; start and end snapshots; the end
//! snapshot and a pod watch stream).
//!
//! The expected proposals and counts are written by `examples/churn/generate.py` from its
//! own model of the resolution and learning rules, not by this code.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ne_leader::cli::{CheckArgs, InputArgs, InputFormat, LearnArgs, SummaryFormat};
use ne_leader::offline::check::{CheckReport, check};
use ne_leader::offline::learn::{LearnReport, learn};
use ne_leader::output::to_yaml_stream;
use serde_json::{Value, json};

const PROVIDERS: [(&str, &str); 3] = [
    ("hubble", "hubble.jsonl"),
    ("ztunnel", "ztunnel.log"),
    ("goldmane", "goldmane.jsonl"),
];
const HISTORIES: [(&str, &[&str]); 3] = [
    ("end", &["end.yaml"]),
    ("start-end", &["start.yaml", "end.yaml"]),
    ("end-watch", &["end.yaml", "pods-watch.json"]),
];

fn churn() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/churn")
}

fn input(flows: &str, history: &[&str]) -> InputArgs {
    InputArgs {
        input: vec![churn().join("flows").join(flows)],
        cluster: history.iter().map(|f| churn().join(f)).collect(),
        format: InputFormat::Auto,
        strict: true,
    }
}

fn run(flows: &str, history: &[&str]) -> LearnReport {
    let args = LearnArgs {
        input: input(flows, history),
        output: "-".to_owned(),
        exclude_namespaces: vec!["kube-system".to_owned()],
        summary: SummaryFormat::Table,
    };
    learn(&args).expect("learn succeeds")
}

/// What the generator's model says, per `<provider>-<history>`.
fn expected_counts() -> Value {
    let text = std::fs::read_to_string(churn().join("expected/counts.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Sorts every array by its elements' JSON text, so that documents compare by content.
fn normalise(v: &mut Value) {
    match v {
        Value::Array(items) => {
            items.iter_mut().for_each(normalise);
            items.sort_by_key(|i| i.to_string());
        }
        Value::Object(map) => map.values_mut().for_each(normalise),
        _ => {}
    }
}

fn by_name(docs: Vec<Value>) -> BTreeMap<String, Value> {
    docs.into_iter()
        .map(|mut d| {
            normalise(&mut d);
            (
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d,
            )
        })
        .collect()
}

fn assert_proposals(report: &LearnReport, case: &str) {
    let file = churn().join(format!("expected/{case}.yaml"));
    let text = std::fs::read_to_string(&file).unwrap();
    let expected = by_name(serde_saphyr::from_multiple(&text).unwrap());
    let actual = by_name(
        report
            .proposals
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect(),
    );
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{case}: proposal names differ"
    );
    for (name, a) in &actual {
        let e = &expected[name];
        assert_eq!(
            a,
            e,
            "{case}: proposal {name} differs\nlearned:  {}\nexpected: {}",
            serde_json::to_string_pretty(a).unwrap(),
            serde_json::to_string_pretty(e).unwrap()
        );
    }
}

/// The summary's counts, in the shape of the generator's `counts.json`.
fn counts(report: &LearnReport) -> Value {
    let s = &report.summary;
    let flows = |m: BTreeMap<String, u64>| json!(m);
    json!({
        "learned": s.learned.flows,
        "unresolved_subjects": flows(s.unresolved_subjects.iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)).collect()),
        "not_a_subject": flows(s.not_a_subject.iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)).collect()),
        "unresolved_peers": flows(s.unresolved_peers.iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)).collect()),
        "flows_without_edge": flows(report.flows_without_edge.iter()
            .map(|(k, n)| ((*k).to_owned(), *n)).collect()),
        "excluded": s.excluded.flows,
        "external_subjects": s.external_subjects.flows,
        "reserved_subjects": flows(s.reserved_subjects.iter()
            .map(|(k, t)| (format!("{k:?}"), t.flows)).collect()),
        "unmanaged_peers": flows(s.unmanaged_peers.iter()
            .map(|(k, t)| (format!("{k:?}"), t.flows)).collect()),
    })
}

fn validators() -> jsonschema::Validator {
    let [(_, wnpp), _] = ne_crds::crds();
    jsonschema::validator_for(&ne_crds::validation_schema(&wnpp)).unwrap()
}

fn assert_valid(report: &LearnReport, case: &str, schema: &jsonschema::Validator) {
    for p in &report.proposals {
        let doc = serde_json::to_value(p).unwrap();
        let errors: Vec<String> = schema
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{case}: {:?} is not valid: {errors:?}",
            p.metadata.name
        );
    }
}

#[test]
fn every_provider_and_history_learns_the_expected_proposals_and_counts() {
    let expected = expected_counts();
    let schema = validators();
    for (provider, flows) in PROVIDERS {
        for (history, files) in HISTORIES {
            let case = format!("{provider}-{history}");
            let report = run(flows, files);
            assert_eq!(report.files[0].errors, 0, "{case}: {:?}", report.files[0]);
            assert_proposals(&report, &case);
            assert_eq!(
                counts(&report),
                expected["learn"][&case],
                "{case}: summary counts"
            );
            assert_valid(&report, &case, &schema);
            assert_each_peer_keeps_its_own_port(&report, &case);
        }
    }
}

/// Each client of the story uses its own server port, so a flow moved to the workload that
/// took its address (alpha's to beta, cache's to search) shows as a peer on a foreign port.
fn assert_each_peer_keeps_its_own_port(report: &LearnReport, case: &str) {
    let ports = [
        ("pods:shop/app=alpha", 8080),
        ("principal:cluster.local/ns/shop/sa/alpha", 8080),
        ("pods:shop/app=beta", 9090),
        ("principal:cluster.local/ns/shop/sa/beta", 9090),
        ("pods:shop/app=cache", 6379),
        ("pods:other/app=search", 9200),
        ("pods:shop/app=db", 5432),
    ];
    for p in &report.proposals {
        let doc = serde_json::to_value(p).unwrap();
        for row in doc["status"]["peers"].as_array().into_iter().flatten() {
            let peer = row["peer"].as_str().unwrap_or_default();
            if let Some((_, port)) = ports.iter().find(|(name, _)| *name == peer) {
                assert_eq!(
                    row["port"], *port,
                    "{case}: {:?} learned {peer} on a port that is not its own",
                    p.metadata.name
                );
            }
        }
    }
}

/// Policies learned with every pod known, written as one YAML stream.
fn learned_policies(provider: &str, flows: &str, dir: &Path) -> PathBuf {
    let report = run(flows, HISTORIES[2].1);
    assert!(!report.proposals.is_empty());
    let path = dir.join(format!("{provider}-policies.yaml"));
    std::fs::write(&path, to_yaml_stream(&report.proposals).unwrap()).unwrap();
    path
}

fn run_check(flows: &str, history: &[&str], policies: &Path) -> CheckReport {
    check(&CheckArgs {
        input: input(flows, history),
        policy: vec![policies.to_owned()],
        output: SummaryFormat::Json,
        fail_on_violation: false,
    })
    .expect("check succeeds")
}

/// A violation as the generator's model names it: `<policy> <peer> <PROTO>/<port>`, the
/// peer being the workload `Kind/name`, the address or the principal.
fn violation_key(v: &ne_leader::offline::check::Violation) -> String {
    let peer = if v.direction.eq_ignore_ascii_case("ingress") {
        &v.source
    } else {
        &v.destination
    };
    // `describe` gives `ns/Kind/name (identity)` for a workload, else the address.
    let peer = peer.split(" (").next().unwrap_or_default();
    let peer = match peer.split('/').collect::<Vec<_>>()[..] {
        [_, kind, name] => format!("{kind}/{name}"),
        _ => peer.to_owned(),
    };
    format!("{} {peer} {}/{}", v.policy, v.protocol, v.port)
}

#[test]
fn check_never_blames_the_wrong_workload_whatever_the_history() {
    let expected = expected_counts();
    let dir = std::env::temp_dir().join(format!("ne-tests-churn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (provider, flows) in PROVIDERS {
        let policies = learned_policies(provider, flows, &dir);
        for (history, files) in HISTORIES {
            let case = format!("{provider}-{history}");
            let report = run_check(flows, files, &policies);
            let want = &expected["check"][&case];
            let violations: BTreeMap<String, u64> = report
                .violations
                .iter()
                .map(|v| (violation_key(v), v.count))
                .collect();
            assert_eq!(
                json!(violations),
                want["violations"],
                "{case}: violations {:#?}",
                report.violations
            );
            // Violations name addresses (a pod address no history input shows held) or the
            // world, never a workload: no flow is ever charged to a workload that did not
            // make it. With every pod known, the only ones left are Goldmane's external
            // destinations, which carry no address and so could not be learned (counted
            // as `world_without_address` by learn).
            for key in violations.keys() {
                let peer = key.split(' ').nth(1).unwrap_or_default();
                assert!(
                    !peer.contains('/'),
                    "{case}: a violation names a workload: {key}"
                );
                if history == "end-watch" {
                    assert_eq!(peer, "reserved:world", "{case}: {key}");
                }
            }
            assert_eq!(
                json!(report.unresolved_peer_flows),
                want["unresolved_peer_flows"],
                "{case}: unresolved peers"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Observations merge by uid and resourceVersion: the order of the inputs does not matter,
/// and adding the start snapshot to a complete history changes nothing.
#[test]
fn history_inputs_merge_in_any_order() {
    let expected = expected_counts();
    for (provider, flows) in PROVIDERS {
        let case = format!("{provider}-end-watch");
        for files in [
            &["pods-watch.json", "end.yaml"][..],
            &["start.yaml", "end.yaml", "pods-watch.json"],
            &["pods-watch.json", "start.yaml", "end.yaml"],
        ] {
            let report = run(flows, files);
            assert_proposals(&report, &case);
            assert_eq!(
                counts(&report),
                expected["learn"][&case],
                "{case} from {files:?}"
            );
        }
    }
}
