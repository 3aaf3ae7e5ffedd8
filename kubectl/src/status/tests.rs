use super::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

fn condition(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: String::new(),
        last_transition_time: Time(at(0)),
        observed_generation: None,
    }
}

fn proposal() -> Row {
    Row {
        namespace: "shop".to_owned(),
        name: "deployment-api-ingress".to_owned(),
        kind: "proposal",
        mode: None,
        target: "Deployment/api".to_owned(),
        direction: "Ingress",
        peers: Some(2),
        ports: Some("TCP/8080".to_owned()),
        flows: Some(340),
        stable_since: Some(at(1_000)),
        active_violations: None,
        last_violation: None,
        ready: None,
        warnings: Vec::new(),
    }
}

fn policy() -> Row {
    Row {
        name: "deployment-api-egress".to_owned(),
        kind: "policy",
        mode: Some("monitor"),
        direction: "Egress",
        peers: None,
        ports: None,
        flows: None,
        stable_since: None,
        active_violations: Some(3),
        last_violation: Some(at(4_000)),
        ready: Some("Monitoring".to_owned()),
        warnings: vec!["PeersResolved=PeerSelectsNothing".to_owned()],
        ..proposal()
    }
}

#[test]
fn ages_read_like_kubectl() {
    let now = at(10 * 86400);
    let ago = |secs: i64| age(at(10 * 86400 - secs), now);
    assert_eq!(
        [
            ago(5),
            ago(119),
            ago(120),
            ago(7199),
            ago(7200),
            ago(47 * 3600),
            ago(3 * 86400)
        ],
        ["5s", "119s", "2m", "119m", "2h", "47h", "3d"]
    );
    assert_eq!(
        age(at(20), at(10)),
        "0s",
        "a time ahead of the clock is now"
    );
}

#[test]
fn only_conditions_that_need_attention_are_warnings() {
    let conditions = [
        condition("Ready", "False", "Applying"),
        condition("PeersResolved", "True", "PeersResolved"),
        condition("PeersResolved", "False", "InvalidRule"),
        condition("NativePolicyConflict", "False", "NoConflict"),
        condition("NativePolicyConflict", "True", "NotControlled"),
        condition("SharedIdentity", "True", "SharedServiceAccount"),
        condition("SharedIdentity", "False", "UniqueServiceAccount"),
        condition("Quiet", "False", "ActiveViolations"),
        condition("ProtectSafe", "True", "NoKnownHazard"),
        condition("ProtectSafe", "False", "NoDns"),
    ];
    assert_eq!(
        warnings(&conditions),
        [
            "PeersResolved=InvalidRule",
            "NativePolicyConflict=NotControlled",
            "SharedIdentity=SharedServiceAccount",
            "ProtectSafe=NoDns"
        ]
    );
}

#[test]
fn the_table_aligns_columns_and_colours_only_when_asked() {
    let rows = [proposal(), policy()];
    let mut plain = Vec::new();
    table(&mut plain, &rows, at(5_000), false).unwrap();
    let plain = String::from_utf8(plain).unwrap();
    let lines: Vec<&str> = plain.lines().collect();
    assert_eq!(lines.len(), 3, "{plain}");
    assert!(!plain.contains('\x1b'));
    // Every column starts where its header does.
    let header = lines[0];
    for (column, values) in [
        ("KIND", ["proposal", "policy"]),
        ("STABLE", ["66m", "-"]),
        ("VIOLATIONS", ["-", "3"]),
        ("LAST VIOLATION", ["-", "16m ago"]),
        ("WARNINGS", ["-", "PeersResolved=PeerSelectsNothing"]),
    ] {
        let at = header.find(column).unwrap();
        for (line, value) in lines[1..].iter().zip(values) {
            assert!(line[at..].starts_with(value), "{column}: {line}");
        }
    }
    let mut coloured = Vec::new();
    table(&mut coloured, &rows, at(5_000), true).unwrap();
    let coloured = String::from_utf8(coloured).unwrap();
    assert!(coloured.contains("\x1b[31m3 "), "active violations in red");
    assert!(coloured.contains("\x1b[33mPeersResolved=PeerSelectsNothing\x1b[0m"));
    let mut none = Vec::new();
    table(&mut none, &[], at(0), false).unwrap();
    assert_eq!(
        String::from_utf8(none).unwrap(),
        "No proposals or policies found.\n"
    );
}

#[test]
fn json_and_yaml_list_the_rows_with_their_fields() {
    let rows = [proposal(), policy()];
    let mut json = Vec::new();
    write(&mut json, &rows, Output::Json, false).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(value[0]["kind"], "proposal");
    assert_eq!(value[0]["stableSince"], "1970-01-01T00:16:40Z");
    assert!(value[0].get("activeViolations").is_none());
    assert_eq!(value[1]["activeViolations"], 3);
    let mut yaml = Vec::new();
    write(&mut yaml, &rows, Output::Yaml, false).unwrap();
    let back: serde_json::Value = serde_saphyr::from_slice(&yaml).unwrap();
    assert_eq!(back, value);
}
