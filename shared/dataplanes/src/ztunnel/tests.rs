use super::*;

fn rec(line: &str) -> FlowRecord {
    match decode(line.as_bytes()) {
        Ok(Decoded::Record(r)) => r,
        other => panic!("{line}: {other:?}"),
    }
}

#[test]
fn unquotes_rust_debug_strings() {
    assert_eq!(
        unquote(r#"plain" rest"#),
        Some((Cow::Borrowed("plain"), " rest"))
    );
    assert_eq!(
        unquote(r#"a\"b\\c\td" x"#),
        Some((Cow::Owned("a\"b\\c\td".to_owned()), " x"))
    );
    assert_eq!(
        unquote(r#"\u{e9}t\u{1F600}" "#),
        Some((Cow::Owned("ét😀".to_owned()), " "))
    );
    assert_eq!(
        unquote(r#"\u{zz}""#),
        Some((Cow::Owned("\u{fffd}".to_owned()), ""))
    );
    assert_eq!(unquote("never closed"), None);
    assert_eq!(unquote(r#"ends in escape\"#), None);
    assert_eq!(unquote(r#"\u{12"#), None);
}

#[test]
fn maps_fields_and_verdicts() {
    let r = rec(
        "2026-03-14T09:27:02.007114Z\terror\taccess\tconnection complete\tsrc.addr=[fd00::5]:40322 src.workload=\"report-x\" src.namespace=\"batch\" src.identity=\"spiffe://example.org/ns/batch/sa/reporter\" dst.addr=[fd00::9]:15008 dst.hbone_addr=\"[fd00::9]:5432\" dst.workload=\"postgres-0\" dst.namespace=\"db\" direction=\"inbound\" error=\"connection closed due to policy rejection: explicitly denied by: db/deny-batch\"",
    );
    assert_eq!(
        r.source.id,
        EndpointId::Pod {
            namespace: "batch".into(),
            name: "report-x".into()
        }
    );
    assert_eq!(
        r.source.identity.as_deref(),
        Some("example.org/ns/batch/sa/reporter")
    );
    assert_eq!(r.source_port, 40322);
    assert_eq!(r.destination_port, 5432);
    assert_eq!(r.destination.identity, None);
    assert_eq!(r.observation, ObservationPoint::Ingress);
    assert_eq!(r.verdict, Verdict::PolicyDenied);
    assert_eq!(r.policy.as_deref(), Some("db/deny-batch"));
    assert_eq!(r.reply, Some(false));
    // No workload on the source: unknown, with its address.
    let r = rec(
        "info access connection complete src.addr=1.2.3.4:5 dst.addr=10.0.0.1:80 direction=\"sideways\"",
    );
    assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Unknown));
    assert_eq!(r.source.ip, Some("1.2.3.4".parse().unwrap()));
    assert_eq!(r.observation, ObservationPoint::Unknown);
    assert_eq!(r.time, None);
}

#[test]
fn skips_other_targets_and_messages() {
    let cases = [
        (
            "2026-08-03T15:34:57Z info dns resolved x=1",
            SkipReason::ZtunnelNonAccess,
        ),
        (
            "2026-08-03T15:34:57Z debug access connection opened src.addr=1.2.3.4:5",
            SkipReason::ZtunnelConnectionOpened,
        ),
        (
            "2026-08-03T15:34:57Z warn access connection failed src.addr=1.2.3.4:5 error=\"x\"",
            SkipReason::ZtunnelOtherMessage,
        ),
        (
            "2026-08-03T15:34:57Z  INFO outbound{id=7 peer=1.2.3.4:5}: xds: update",
            SkipReason::ZtunnelNonAccess,
        ),
        (
            r#"{"scope":"xds","message":"connection complete"}"#,
            SkipReason::ZtunnelNonAccess,
        ),
        (
            r#"{"scope":"access","message":"connection opened"}"#,
            SkipReason::ZtunnelConnectionOpened,
        ),
    ];
    for (line, want) in cases {
        assert_eq!(decode(line.as_bytes()), Ok(Decoded::Skip(want)), "{line}");
    }
}

#[test]
fn rejects_broken_lines() {
    let cases: [(&str, &str); 8] = [
        ("hello world", "line_shape"),
        (
            "2026-13-03T15:34:57Z info access connection complete",
            "bad_timestamp",
        ),
        ("info", "line_shape"),
        ("info access src.addr=1.2.3.4:5", "line_shape"),
        (
            "info access connection complete src.addr=1.2.3.4:5 dst.addr=",
            "bad_address",
        ),
        (
            "info access connection complete dst.addr=1.2.3.4:5",
            "missing_field",
        ),
        (
            "info access connection complete src.addr=1.2.3.4:5 dst.addr=1.2.3.4:80 dst.workload=\"x",
            "unterminated_quote",
        ),
        (r#"{"message":"connection complete"}"#, "missing_field"),
    ];
    for (line, kind) in cases {
        let got = decode(line.as_bytes());
        assert_eq!(
            got.as_ref().map_err(DecodeError::kind).err(),
            Some(kind),
            "{line}: {got:?}"
        );
    }
    assert_eq!(
        decode(b"info access \xff"),
        Err(DecodeError::InvalidUtf8(12))
    );
}
