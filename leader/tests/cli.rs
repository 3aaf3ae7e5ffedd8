//! Tests of the real `ne-leader` binary: `learn` and `check` on the bundled example
//! (`examples/generate.py` describes its traffic; the expected numbers below are derived
//! from its `CONNECTIONS`, `DENIED` and kubelet probes).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

const HUBBLE: &str = "examples/flows/hubble.jsonl";
const ZTUNNEL: &str = "examples/flows/ztunnel.log";
const GOLDMANE: &str = "examples/flows/goldmane.jsonl";
const CLUSTER: &str = "examples/cluster.yaml";

/// Proposals the Hubble capture yields, with their namespace.
const HUBBLE_PROPOSALS: [(&str, &str); 7] = [
    ("data", "daemonset-log-shipper-egress"),
    ("shop", "deployment-api-egress"),
    ("shop", "deployment-api-ingress"),
    ("shop", "deployment-web-egress"),
    ("shop", "deployment-web-ingress"),
    ("data", "statefulset-log-store-ingress"),
    ("data", "statefulset-postgres-ingress"),
];

/// The repository root: example paths are given relative to it, as a user would.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate lives in the workspace")
        .to_owned()
}

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn ne<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = Command::new(env!("CARGO_BIN_EXE_ne-leader"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("ne-leader runs");
    Run {
        code: out.status.code().expect("ne-leader exited"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ne-leader-cli-{}-{tag}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// `name` inside the directory, as a string for the command line.
    fn join(&self, name: &str) -> String {
        self.0
            .join(name)
            .to_str()
            .expect("utf-8 temp path")
            .to_owned()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.join(name);
        std::fs::write(&path, text).expect("write temp file");
        path
    }

    /// File names in the directory, sorted.
    fn files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.0)
            .expect("list temp dir")
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .into_string()
                    .expect("utf-8")
            })
            .collect();
        names.sort();
        names
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn read_yaml(path: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(path).expect("read yaml")).expect("yaml")
}

fn write_yaml(path: &str, value: &Value) {
    std::fs::write(path, serde_saphyr::to_string(value).expect("to yaml")).expect("write yaml");
}

fn example(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).expect("example file")
}

/// Each line of `text` split on whitespace.
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

fn has_row(text: &str, row: &[&str]) -> bool {
    rows(text).iter().any(|r| r == row)
}

/// `learn` of `inputs` into a fresh directory.
fn learn_into(tag: &str, inputs: &[&str], extra: &[&str]) -> TempDir {
    let dir = TempDir::new(tag);
    let mut args = vec!["learn", "--output", &dir.0.to_str().expect("utf-8")];
    args.extend(extra);
    args.push("--input");
    args.extend(inputs);
    let run = ne(&args);
    assert_eq!(run.code, 0, "learn failed: {}", run.stderr);
    dir
}

/// The evidence (`status.peers[]`) of a learned proposal for one peer and port.
fn evidence(proposal: &Value, peer: &str, port: u64) -> (String, String, u64) {
    let e = proposal["status"]["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["peer"] == peer && p["port"] == port)
        .expect("evidence for the peer");
    (
        e["firstSeen"].as_str().expect("firstSeen").to_owned(),
        e["lastSeen"].as_str().expect("lastSeen").to_owned(),
        e["flowCount"].as_u64().expect("flowCount"),
    )
}

// --- learn -------------------------------------------------------------------------------

#[test]
fn learn_writes_one_file_per_proposal_matching_the_stream() {
    let dir = learn_into("out", &[HUBBLE], &[]);
    let expected: Vec<String> = HUBBLE_PROPOSALS
        .iter()
        .map(|(_, n)| format!("{n}.yaml"))
        .collect();
    assert_eq!(dir.files(), expected);

    let stream = ne(["learn", "--input", HUBBLE]);
    assert_eq!(stream.code, 0, "{}", stream.stderr);
    assert!(stream.stdout.starts_with("---\n"));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stream.stdout).expect("yaml stream");
    let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
    assert_eq!(docs.len(), 7);
    assert_eq!(stream.stdout.matches("---\n").count(), 7);
    for doc in docs {
        let name = doc["metadata"]["name"].as_str().expect("name");
        let (ns, _) = HUBBLE_PROPOSALS
            .iter()
            .find(|(_, n)| *n == name)
            .expect("a known proposal");
        assert_eq!(doc["metadata"]["namespace"], *ns);
        assert_eq!(doc["kind"], "WorkloadNetworkPolicyProposal");
        // The file of that name holds the same document.
        assert_eq!(&read_yaml(&dir.join(&format!("{name}.yaml"))), doc);
    }

    // The summary names every proposal, with its peers, ports and flows from the example.
    for row in [
        "data/StatefulSet/log-store Ingress 1 1 8 statefulset-log-store-ingress",
        "data/StatefulSet/postgres Ingress 1 1 10 statefulset-postgres-ingress",
        "data/DaemonSet/log-shipper Egress 1 1 8 daemonset-log-shipper-egress",
        "shop/Deployment/api Ingress 2 2 14 deployment-api-ingress",
        "shop/Deployment/api Egress 3 4 19 deployment-api-egress",
        "shop/Deployment/web Ingress 1 1 5 deployment-web-ingress",
        "shop/Deployment/web Egress 2 2 18 deployment-web-egress",
    ] {
        let row: Vec<&str> = row.split(' ').collect();
        assert!(
            has_row(&stream.stderr, &row),
            "{row:?} in\n{}",
            stream.stderr
        );
    }
    assert!(
        stream
            .stderr
            .starts_with("learned 7 proposals (cilium) from 152 flows in 1 file(s)\n")
    );

    // The external payments API: an ipBlock /32 on 443 with its DNS name as evidence.
    let api_egress = read_yaml(&dir.join("deployment-api-egress.yaml"));
    let rules = api_egress["spec"]["kubernetes"]["egress"]
        .as_array()
        .expect("egress rules");
    assert!(rules.contains(&json!({
        "ports": [{"port": 443, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}]
    })));
    let payments = api_egress["status"]["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|p| p["peer"] == "ip:203.0.113.10/32")
        .expect("payments evidence");
    assert_eq!(payments["flowCount"], 5);
    assert_eq!(payments["dnsName"], "api.payments.example.com");
}

#[test]
fn learn_summary_json_has_the_counts_of_the_example() {
    let run = ne(["learn", "--input", HUBBLE, "--summary", "json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let s: Value = serde_json::from_str(&run.stderr).expect("stderr is JSON");
    assert_eq!(s["provider"], "cilium");
    assert_eq!(s["table_drops"], 0);
    let lines = example(HUBBLE).lines().count();
    assert_eq!(
        s["files"],
        json!([{"path": HUBBLE, "format": "hubble-json", "records": lines,
                "skipped": {}, "errors": 0, "first_errors": []}])
    );
    // 48 requests to pods are answered, and 5 to the payments API; one flow is denied.
    assert_eq!(
        s["flows_without_edge"],
        json!({"not_forwarded": 1, "reply": 53})
    );
    let summary = &s["summary"];
    assert_eq!(summary["learned"]["flows"], 82);
    // coredns in kube-system: 11 DNS queries, no proposal.
    assert_eq!(summary["excluded"]["flows"], 11);
    // the report CronJob's 3 requests; the two kubelet probes from the host.
    assert_eq!(summary["not_a_subject"]["CronJob"]["flows"], 3);
    assert_eq!(summary["unmanaged_peers"]["Host"]["flows"], 2);
    let names: Vec<&str> = summary["allow_lists"]
        .as_array()
        .expect("allow_lists")
        .iter()
        .map(|a| a["name"].as_str().expect("name"))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    let expected: Vec<&str> = HUBBLE_PROPOSALS.iter().map(|(_, n)| *n).collect();
    assert_eq!(sorted, expected);
}

#[test]
fn learn_keeps_same_named_proposals_of_two_namespaces() {
    // The same shop, copied into namespace shop2: both have `deployment-api-egress`.
    let tmp = TempDir::new("twins");
    let copy = example(HUBBLE)
        .replace("\"namespace\":\"shop\"", "\"namespace\":\"shop2\"")
        .replace("=shop\"", "=shop2\"");
    let shop2 = tmp.write("shop2.jsonl", &copy);
    let dir = learn_into("twins-out", &[HUBBLE, &shop2], &[]);
    let files = dir.files();
    for name in [
        "deployment-api-egress",
        "deployment-api-ingress",
        "deployment-web-egress",
        "deployment-web-ingress",
    ] {
        for ns in ["shop", "shop2"] {
            let file = format!("{ns}.{name}.yaml");
            assert!(files.contains(&file), "{file} in {files:?}");
            let doc = read_yaml(&dir.join(&file));
            assert_eq!(doc["metadata"]["namespace"], ns);
            assert_eq!(doc["metadata"]["name"], name);
        }
    }
    // Names that only one namespace has keep the plain file name.
    assert!(files.contains(&"statefulset-postgres-ingress.yaml".to_owned()));
    assert_eq!(files.len(), 3 + 8);
}

#[test]
fn learn_skips_and_reports_bad_lines() {
    let tmp = TempDir::new("bad");
    let text = example(HUBBLE);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(4, "this is not a flow");
    lines.insert(9, "{\"flow\":{\"time\":");
    let path = tmp.write("bad.jsonl", &(lines.join("\n") + "\n"));

    let clean = ne(["learn", "--input", HUBBLE]);
    let run = ne(["learn", "--input", &path]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, clean.stdout, "bad lines change nothing learned");
    assert!(
        run.stderr.contains(&format!(
            "{path} (hubble-json): 152 flows, 0 skipped, 2 unreadable"
        )),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("  {path}:5: ")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("  {path}:10: ")),
        "{}",
        run.stderr
    );

    let strict = ne(["learn", "--strict", "--input", &path]);
    assert_eq!(strict.code, 2);
    assert!(strict.stdout.is_empty());
    assert!(
        strict.stderr.starts_with(&format!("error: {path}:5: ")),
        "{}",
        strict.stderr
    );
    assert!(strict.stderr.contains("(as hubble-json)"));
}

#[test]
fn learn_detects_the_format_past_a_bad_first_line() {
    let tmp = TempDir::new("first");
    let path = tmp.write(
        "cut.jsonl",
        &format!("\"time\":\"cut\"}}}}\n{}", example(HUBBLE)),
    );
    let clean = ne(["learn", "--input", HUBBLE]);
    let run = ne(["learn", "--input", &path]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, clean.stdout);
    assert!(run.stderr.contains(&format!(
        "{path} (hubble-json): 152 flows, 0 skipped, 1 unreadable"
    )));
    assert!(
        run.stderr.contains(&format!("  {path}:1: ")),
        "{}",
        run.stderr
    );
}

#[test]
fn learn_fails_on_inputs_it_cannot_use() {
    let tmp = TempDir::new("inputs");

    let missing = tmp.join("missing.jsonl");
    let run = ne(["learn", "--input", &missing]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .starts_with(&format!("error: cannot read {missing}: ")),
        "{}",
        run.stderr
    );

    let dir = tmp.join("");
    let run = ne(["learn", "--input", &dir]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(&format!("cannot read {dir}")),
        "{}",
        run.stderr
    );

    for (name, text) in [("empty.jsonl", ""), ("blank.jsonl", "\n  \n\n")] {
        let path = tmp.write(name, text);
        let run = ne(["learn", "--input", &path]);
        assert_eq!(run.code, 2, "{name}");
        assert_eq!(
            run.stderr,
            format!(
                "error: {path}: the file is empty, so its format cannot be detected (give --format)\n"
            )
        );
        // With the format given, an empty file is simply no flows.
        let run = ne(["learn", "--format", "hubble-json", "--input", &path]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stderr
                .starts_with("learned 0 proposals (cilium) from 0 flows in 1 file(s)")
        );
    }

    let path = tmp.write("notes.txt", "\n\nhello world\nsome notes\n");
    let run = ne(["learn", "--input", &path]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr
            .starts_with(&format!("error: {path}:3: cannot detect the format")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("give --format"));
}

#[test]
fn learn_refuses_to_mix_providers() {
    let run = ne(["learn", "--input", HUBBLE, GOLDMANE]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert_eq!(
        run.stderr,
        format!(
            "error: {GOLDMANE} holds calico flows (goldmane-json) but {HUBBLE} holds cilium flows: \
             learn one provider per run\n"
        )
    );
}

// --- check -------------------------------------------------------------------------------

#[test]
fn check_of_learned_policies_finds_nothing() {
    let dir = learn_into("clean", &[HUBBLE], &[]);
    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &dir.join(""),
        "--fail-on-violation",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("0 violation(s) against 7 policies\n")
    );
    assert!(!run.stdout.contains("note:"), "{}", run.stdout);

    let json = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &dir.join(""),
        "--output",
        "json",
    ]);
    assert_eq!(json.code, 0);
    let r: Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(r["policies"], 7);
    assert_eq!(r["violations"], json!([]));
    assert_eq!(r["idle_policies"], json!([]));
    // Every learned flow is allowed; coredns (kube-system) has no policy; the CronJob is
    // no subject; the kubelet probes from the node are always allowed.
    assert_eq!(r["allowed_flows"], 82);
    assert_eq!(r["unchecked_flows"], 11);
    assert_eq!(r["unattributed_flows"], 3);
    assert_eq!(r["unresolved_subject_flows"], 0);
    assert_eq!(r["node_local_flows"], 2);

    // The YAML stream of `learn --output -` is a policy file just as well.
    let tmp = TempDir::new("stream");
    let stream = tmp.write("all.yaml", &ne(["learn", "--input", HUBBLE]).stdout);
    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &stream,
        "--fail-on-violation",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("0 violation(s) against 7 policies\n")
    );
}

#[test]
fn check_reports_flows_a_narrowed_policy_denies() {
    let dir = learn_into("narrow", &[HUBBLE], &[]);
    let file = dir.join("deployment-api-egress.yaml");
    let mut policy = read_yaml(&file);
    let (first, last, count) = evidence(&policy, "ip:203.0.113.10/32", 443);
    assert_eq!(count, 5);
    let egress = policy["spec"]["kubernetes"]["egress"]
        .as_array_mut()
        .expect("egress");
    let before = egress.len();
    egress.retain(|r| r["to"][0].get("ipBlock").is_none());
    assert_eq!(egress.len(), before - 1);
    write_yaml(&file, &policy);

    let policies = dir.join("");
    let run = ne(["check", "--input", HUBBLE, "--policy", &policies]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .starts_with("1 violation(s) against 7 policies\n")
    );
    let row = [
        "shop/deployment-api-egress",
        "Egress",
        "shop/Deployment/api",
        "203.0.113.10",
        "TCP",
        "443",
        "NoRuleForPeer",
        "5",
        &first,
        &last,
    ];
    assert!(has_row(&run.stdout, &row), "{}", run.stdout);
    assert!(run.stdout.contains("allowed 77,"), "{}", run.stdout);

    let fail = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &policies,
        "--fail-on-violation",
    ]);
    assert_eq!(fail.code, 1);
    assert_eq!(fail.stdout, run.stdout);

    let json = ne([
        "check", "--input", HUBBLE, "--policy", &policies, "--output", "json",
    ]);
    assert_eq!(json.code, 0);
    let r: Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(
        r["violations"],
        json!([{
            "policy": "shop/deployment-api-egress",
            "direction": "Egress",
            "source": "shop/Deployment/api",
            "destination": "203.0.113.10",
            "protocol": "TCP",
            "port": 443,
            "reason": "NoRuleForPeer",
            "count": 5,
            "first_seen": first,
            "last_seen": last,
        }])
    );
}

#[test]
fn check_reports_a_changed_port() {
    let dir = learn_into("port", &[HUBBLE], &[]);
    let file = dir.join("statefulset-postgres-ingress.yaml");
    let mut policy = read_yaml(&file);
    let (first, last, count) = evidence(&policy, "pods:shop/app=api,tier=backend", 5432);
    assert_eq!(count, 10);
    policy["spec"]["kubernetes"]["ingress"][0]["ports"][0]["port"] = json!(5433);
    write_yaml(&file, &policy);

    // Hubble names the client pod only on the client's own node: at postgres the api's
    // pods are not resolved to their Deployment, so each pod is its own row.
    let policies = dir.join("");
    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &policies,
        "--fail-on-violation",
    ]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("2 violation(s) against 7 policies\n")
    );
    for pod in ["api-5c8b7d9f6c-h7j2k", "api-5c8b7d9f6c-p3n8v"] {
        let source = format!("shop/Pod/{pod}");
        let row = rows(&run.stdout)
            .into_iter()
            .find(|r| r.get(2) == Some(&source.as_str()))
            .expect("a row per api pod");
        assert_eq!(
            row[..8],
            [
                "data/statefulset-postgres-ingress",
                "Ingress",
                &source,
                "data/StatefulSet/postgres",
                "TCP",
                "5432",
                "PortNotAllowed",
                "5"
            ]
        );
    }

    // With the cluster snapshot both pods are the api Deployment: one row of 10 flows.
    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--cluster",
        CLUSTER,
        "--policy",
        &policies,
        "--fail-on-violation",
    ]);
    assert_eq!(run.code, 1, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("1 violation(s) against 7 policies\n")
    );
    let row = [
        "data/statefulset-postgres-ingress",
        "Ingress",
        "shop/Deployment/api",
        "data/StatefulSet/postgres",
        "TCP",
        "5432",
        "PortNotAllowed",
        "10",
        &first,
        &last,
    ];
    assert!(has_row(&run.stdout, &row), "{}", run.stdout);
}

#[test]
fn check_honours_policies_widened_by_hand() {
    let dir = learn_into("wide", &[HUBBLE], &[]);
    // api egress: the postgres peer becomes "any pod in namespace data".
    let egress_file = dir.join("deployment-api-egress.yaml");
    let mut egress = read_yaml(&egress_file);
    let rule = egress["spec"]["kubernetes"]["egress"]
        .as_array_mut()
        .expect("egress")
        .iter_mut()
        .find(|r| r["ports"][0]["port"] == 5432)
        .expect("the postgres rule");
    rule["to"] =
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "data"}}}]);
    write_yaml(&egress_file, &egress);
    // postgres ingress: a port range that covers 5432.
    let ingress_file = dir.join("statefulset-postgres-ingress.yaml");
    let mut ingress = read_yaml(&ingress_file);
    ingress["spec"]["kubernetes"]["ingress"][0]["ports"] =
        json!([{"protocol": "TCP", "port": 5400, "endPort": 5500}]);
    write_yaml(&ingress_file, &ingress);

    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &dir.join(""),
        "--fail-on-violation",
    ]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("0 violation(s) against 7 policies\n")
    );
    assert!(run.stdout.contains("allowed 82,"));

    // A range that stops just below the port does not cover it.
    ingress["spec"]["kubernetes"]["ingress"][0]["ports"] =
        json!([{"protocol": "TCP", "port": 5400, "endPort": 5431}]);
    write_yaml(&ingress_file, &ingress);
    let run = ne([
        "check",
        "--input",
        HUBBLE,
        "--cluster",
        CLUSTER,
        "--policy",
        &dir.join(""),
    ]);
    assert!(
        run.stdout
            .starts_with("1 violation(s) against 7 policies\n"),
        "{}",
        run.stdout
    );
    let row = rows(&run.stdout)
        .into_iter()
        .find(|r| r.first() == Some(&"data/statefulset-postgres-ingress"))
        .expect("the postgres row");
    assert_eq!(
        row[1..8],
        [
            "Ingress",
            "shop/Deployment/api",
            "data/StatefulSet/postgres",
            "TCP",
            "5432",
            "PortNotAllowed",
            "10"
        ]
    );
}

#[test]
fn check_refuses_two_policies_for_one_target_and_direction() {
    let dir = learn_into("dup", &[HUBBLE], &[]);
    let original = dir.join("deployment-api-egress.yaml");
    let mut copy = read_yaml(&original);
    copy["metadata"]["name"] = json!("api-egress-copy");
    let copy_file = dir.join("zz-copy.yaml");
    write_yaml(&copy_file, &copy);

    let run = ne(["check", "--input", HUBBLE, "--policy", &dir.join("")]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    assert_eq!(
        run.stderr,
        format!(
            "error: shop/deployment-api-egress ({original}) and shop/api-egress-copy ({copy_file}) \
             target the same workload and direction\n"
        )
    );
}

#[test]
fn check_notes_policies_that_checked_nothing() {
    let dir = learn_into("idle", &[HUBBLE], &[]);
    // A typo in targetRef.name.
    let typo_file = dir.join("deployment-api-egress.yaml");
    let mut typo = read_yaml(&typo_file);
    typo["spec"]["targetRef"]["name"] = json!("apii");
    write_yaml(&typo_file, &typo);
    // A real workload, but a direction none of its flows has.
    let other_file = dir.join("statefulset-postgres-egress.yaml");
    let mut other = read_yaml(&dir.join("statefulset-postgres-ingress.yaml"));
    other["metadata"]["name"] = json!("statefulset-postgres-egress");
    other["spec"]["direction"] = json!("Egress");
    write_yaml(&other_file, &other);

    let run = ne(["check", "--input", HUBBLE, "--policy", &dir.join("")]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let notes: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("note:"))
        .collect();
    assert_eq!(
        notes,
        [
            format!(
                "note: data/statefulset-postgres-egress ({other_file}): targetRef \
                 StatefulSet/postgres checked nothing: no Egress flows of its target were seen"
            ),
            format!(
                "note: shop/deployment-api-egress ({typo_file}): targetRef Deployment/apii \
                 checked nothing: it matches no workload seen in the flows"
            ),
        ]
    );
    // The api's egress flows are now covered by no policy.
    assert!(
        run.stdout.contains("not covered by a policy 30,"),
        "{}",
        run.stdout
    );

    let json = ne([
        "check",
        "--input",
        HUBBLE,
        "--policy",
        &dir.join(""),
        "--output",
        "json",
    ]);
    let r: Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(
        r["idle_policies"],
        json!([
            {"policy": "data/statefulset-postgres-egress", "file": other_file,
             "target_ref": "StatefulSet/postgres", "direction": "Egress", "workload_seen": true},
            {"policy": "shop/deployment-api-egress", "file": typo_file,
             "target_ref": "Deployment/apii", "direction": "Egress", "workload_seen": false},
        ])
    );
}

// --- Istio -------------------------------------------------------------------------------

#[test]
fn istio_learn_and_check_against_principals() {
    let summary = ne([
        "learn",
        "--input",
        ZTUNNEL,
        "--cluster",
        CLUSTER,
        "--summary",
        "json",
    ]);
    assert_eq!(summary.code, 0, "{}", summary.stderr);
    let s: Value = serde_json::from_str(&summary.stderr).expect("JSON summary");
    assert_eq!(s["provider"], "istio");
    // Outbound lines teach nothing (38 of them), the visitor has no identity (5), and
    // the report job's connection to postgres was rejected.
    assert_eq!(
        s["flows_without_edge"],
        json!({"direction_not_learned": 38, "no_identity": 5, "not_forwarded": 1})
    );

    let dir = learn_into("istio", &[ZTUNNEL], &["--cluster", CLUSTER]);
    assert_eq!(
        dir.files(),
        [
            "deployment-api-ingress.yaml",
            "statefulset-log-store-ingress.yaml",
            "statefulset-postgres-ingress.yaml"
        ]
    );
    let api = read_yaml(&dir.join("deployment-api-ingress.yaml"));
    assert_eq!(api["spec"]["backend"], "istio");
    let check = |extra: &[&str]| {
        let policies = dir.join("");
        let mut args = vec![
            "check",
            "--input",
            ZTUNNEL,
            "--cluster",
            CLUSTER,
            "--policy",
            &policies,
        ];
        args.extend(extra);
        ne(args)
    };
    let run = check(&["--fail-on-violation"]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(
        run.stdout
            .starts_with("0 violation(s) against 3 policies\n")
    );
    // web 12 + report 2 to api, 8 to log-store, 10 to postgres; api-b's TCP DNS query
    // goes to coredns in kube-system, which has no policy.
    assert!(
        run.stdout
            .contains("flows: allowed 32, not covered by a policy 1\n"),
        "{}",
        run.stdout
    );

    // Remove the report job's principal from the api's ingress.
    let principal = "cluster.local/ns/shop/sa/report";
    let (first, last, count) = evidence(&api, &format!("principal:{principal}"), 8080);
    assert_eq!(count, 2);
    let mut narrowed = api.clone();
    let rules = narrowed["spec"]["istio"]["rules"]
        .as_array_mut()
        .expect("rules");
    rules.retain(|r| r["from"][0]["source"]["principals"][0] != principal);
    assert_eq!(rules.len(), 1);
    write_yaml(&dir.join("deployment-api-ingress.yaml"), &narrowed);

    let run = check(&[]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout
            .starts_with("1 violation(s) against 3 policies\n"),
        "{}",
        run.stdout
    );
    let row = [
        "shop/deployment-api-ingress",
        "Ingress",
        "shop/CronJob/report",
        "(cluster.local/ns/shop/sa/report)",
        "shop/Deployment/api",
        "(cluster.local/ns/shop/sa/api)",
        "TCP",
        "8080",
        "NoRuleForPeer",
        "2",
        &first,
        &last,
    ];
    assert!(has_row(&run.stdout, &row), "{}", run.stdout);
    assert_eq!(check(&["--fail-on-violation"]).code, 1);
    let json = check(&["--output", "json"]);
    let r: Value = serde_json::from_str(&json.stdout).expect("JSON report");
    assert_eq!(
        r["violations"],
        json!([{
            "policy": "shop/deployment-api-ingress",
            "direction": "Ingress",
            "source": format!("shop/CronJob/report ({principal})"),
            "destination": "shop/Deployment/api (cluster.local/ns/shop/sa/api)",
            "protocol": "TCP",
            "port": 8080,
            "reason": "NoRuleForPeer",
            "count": 2,
            "first_seen": first,
            "last_seen": last,
        }])
    );

    // Without --cluster ztunnel names pods only: nothing is attributed, and the note says
    // why the policies checked nothing.
    let policies = dir.join("");
    let run = ne(["check", "--input", ZTUNNEL, "--policy", &policies]);
    assert_eq!(run.code, 0);
    assert!(
        run.stdout
            .starts_with("0 violation(s) against 3 policies\n")
    );
    let notes = run
        .stdout
        .lines()
        .filter(|l| l.starts_with("note:"))
        .count();
    assert_eq!(notes, 3, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("(some flows have no resolved workload: use --cluster)")
    );
}
