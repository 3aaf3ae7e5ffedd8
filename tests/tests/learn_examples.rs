//! `learn` on the bundled example and on every real capture.
//!
//! The expected proposals under `examples/expected/` are written by `examples/generate.py`
//! from its own model of the example application and the learning rules in the README, not
//! by this code: a difference is a disagreement between two independent statements of the
//! rules. Every proposal `learn` writes is also validated against the CRD schema.

use std::path::{Path, PathBuf};

use ne_leader::cli::{InputArgs, InputFormat, LearnArgs, SummaryFormat};
use ne_leader::offline::learn::{LearnReport, learn};
use ne_leader::output::to_yaml_stream;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn real(file: &str) -> PathBuf {
    repo().join("testdata/real").join(file)
}

fn args(inputs: &[PathBuf], cluster: Option<PathBuf>) -> LearnArgs {
    LearnArgs {
        input: InputArgs {
            input: inputs.to_vec(),
            cluster: cluster.into_iter().collect(),
            format: InputFormat::Auto,
            strict: false,
        },
        output: "-".to_owned(),
        exclude_namespaces: vec!["kube-system".to_owned()],
        summary: SummaryFormat::Table,
    }
}

fn run(inputs: &[PathBuf], cluster: Option<PathBuf>) -> LearnReport {
    learn(&args(inputs, cluster)).expect("learn succeeds")
}

/// Sorts every array (by its elements' JSON text), so that two documents compare by
/// content. Rule order is covered by the determinism test below.
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

fn by_name(mut docs: Vec<Value>) -> Vec<(String, Value)> {
    docs.iter_mut().for_each(normalise);
    let mut named: Vec<(String, Value)> = docs
        .into_iter()
        .map(|d| {
            (
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                d,
            )
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    named
}

fn assert_matches_expected(report: &LearnReport, expected_file: &str) {
    let text =
        std::fs::read_to_string(repo().join("examples/expected").join(expected_file)).unwrap();
    let expected: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    let actual: Vec<Value> = report
        .proposals
        .iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect();
    let (expected, actual) = (by_name(expected), by_name(actual));
    let names = |v: &[(String, Value)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&actual),
        names(&expected),
        "{expected_file}: proposal names differ"
    );
    for ((name, a), (_, e)) in actual.iter().zip(&expected) {
        assert_eq!(
            a,
            e,
            "{expected_file}: proposal {name} differs\nlearned:  {}\nexpected: {}",
            serde_json::to_string_pretty(a).unwrap(),
            serde_json::to_string_pretty(e).unwrap()
        );
    }
}

fn example(file: &str) -> PathBuf {
    repo().join("examples/flows").join(file)
}

fn cluster() -> Option<PathBuf> {
    Some(repo().join("examples/cluster.yaml"))
}

#[test]
fn hubble_without_cluster_learns_the_expected_proposals() {
    let report = run(&[example("hubble.jsonl")], None);
    assert_matches_expected(&report, "hubble.yaml");
    // The CronJob's pods are peers, never subjects, and they are counted.
    let not_a_subject: u64 = report.summary.not_a_subject.values().map(|t| t.flows).sum();
    assert_eq!(
        not_a_subject, 3,
        "report's 2 connections to api and 1 DNS lookup"
    );
}

#[test]
fn hubble_with_cluster_uses_workload_selectors() {
    assert_matches_expected(
        &run(&[example("hubble.jsonl")], cluster()),
        "hubble-cluster.yaml",
    );
}

#[test]
fn ztunnel_with_cluster_learns_principals_on_ingress() {
    assert_matches_expected(
        &run(&[example("ztunnel.log")], cluster()),
        "ztunnel-cluster.yaml",
    );
}

#[test]
fn goldmane_without_cluster_learns_the_expected_proposals() {
    assert_matches_expected(&run(&[example("goldmane.jsonl")], None), "goldmane.yaml");
}

#[test]
fn ztunnel_without_cluster_reports_unresolved_subjects_instead_of_guessing() {
    let report = run(&[example("ztunnel.log")], None);
    assert!(
        report.proposals.is_empty(),
        "pod names alone never name an owner"
    );
    assert!(
        report
            .summary
            .unresolved_subjects
            .values()
            .map(|t| t.flows)
            .sum::<u64>()
            > 0
    );
}

#[test]
fn output_is_deterministic_across_runs_and_input_order() {
    let a = to_yaml_stream(&run(&[example("hubble.jsonl")], None).proposals).unwrap();
    let b = to_yaml_stream(&run(&[example("hubble.jsonl")], None).proposals).unwrap();
    assert_eq!(a, b);
    // The same flows in reverse order give byte-identical YAML.
    let text = std::fs::read_to_string(example("hubble.jsonl")).unwrap();
    let reversed: String = text.lines().rev().map(|l| format!("{l}\n")).collect();
    let dir = std::env::temp_dir().join(format!("ne-tests-reversed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hubble-reversed.jsonl");
    std::fs::write(&path, reversed).unwrap();
    let c = to_yaml_stream(&run(&[path], None).proposals).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(a, c);
}

fn validators() -> (jsonschema::Validator, jsonschema::Validator) {
    let [(_, wnpp), (_, wnp)] = ne_crds::crds();
    (
        jsonschema::validator_for(&ne_crds::validation_schema(&wnpp)).unwrap(),
        jsonschema::validator_for(&ne_crds::validation_schema(&wnp)).unwrap(),
    )
}

/// Every proposal passes the CRD's openAPIV3Schema, and names no ephemeral client port.
fn assert_valid(report: &LearnReport, what: &str) {
    let (wnpp, _) = validators();
    for p in &report.proposals {
        let doc = serde_json::to_value(p).unwrap();
        let errors: Vec<String> = wnpp
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: {:?} is not valid: {errors:?}",
            p.metadata.name
        );
        for port in ports(&doc) {
            assert!(
                !(32768..=60999).contains(&port),
                "{what}: {:?} has ephemeral port {port}",
                p.metadata.name
            );
        }
    }
}

/// Every port number in a proposal's spec (NetworkPolicy ports and Istio port strings).
fn ports(doc: &Value) -> Vec<u64> {
    let mut out = Vec::new();
    let spec = &doc["spec"];
    for dir in ["ingress", "egress"] {
        for rule in spec["kubernetes"][dir].as_array().into_iter().flatten() {
            out.extend(
                rule["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["port"].as_u64()),
            );
        }
    }
    for rule in spec["istio"]["rules"].as_array().into_iter().flatten() {
        for to in rule["to"].as_array().into_iter().flatten() {
            out.extend(
                to["operation"]["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str()?.parse::<u64>().ok()),
            );
        }
    }
    out
}

#[test]
fn every_example_proposal_is_valid_against_the_crd_schema() {
    for (input, cluster) in [
        ("hubble.jsonl", None),
        ("hubble.jsonl", cluster()),
        ("ztunnel.log", cluster()),
        ("goldmane.jsonl", None),
    ] {
        let report = run(&[example(input)], cluster);
        assert!(!report.proposals.is_empty());
        assert_valid(&report, input);
    }
}

#[test]
fn real_captures_learn_valid_proposals_without_ephemeral_ports() {
    // (file, proposals expected). Counts follow from testdata/real/ORIGINS.md: the Hubble
    // records with `workloads` are the three AKS lines; ztunnel lines name pods only, so
    // without a cluster nothing is learned from them, by design.
    for (file, want) in [
        ("hubble-flows.jsonl", 1),
        ("ztunnel-access.log", 0),
        ("ztunnel-access-json.log", 0),
        ("goldmane-flows.jsonl", 1),
        ("calico-flowlogs.jsonl", 2),
    ] {
        let report = run(&[real(file)], None);
        assert_eq!(
            report.files[0].errors, 0,
            "{file}: {:?}",
            report.files[0].first_errors
        );
        assert_valid(&report, file);
        let names: Vec<_> = report
            .proposals
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names.len(), want, "{file}: {names:?}");
    }
}

#[test]
fn fragments_file_reports_its_two_unreadable_lines_with_line_numbers() {
    let report = run(&[real("ztunnel-access-fragments.log")], None);
    let f = &report.files[0];
    assert_eq!((f.records, f.errors), (2, 2));
    assert!(
        f.first_errors[0].contains("ztunnel-access-fragments.log:3:"),
        "{:?}",
        f.first_errors
    );
    assert!(
        f.first_errors[1].contains("ztunnel-access-fragments.log:4:"),
        "{:?}",
        f.first_errors
    );
}
