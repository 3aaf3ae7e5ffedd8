use ne_crds::{IstioOperation, IstioRule, IstioSource};

use super::*;
use crate::eval::Decision::{Allowed, Denied, NotRestricted};
use crate::eval::DenyReason;
use crate::eval::selector::tests::sel;
use crate::eval::test_support::{TestFlow, from_principal};

const CLIENT: &str = "cluster.local/ns/default/sa/http-client-sa";

fn rule(principals: &[&[&str]], ports: &[&[&str]]) -> IstioRule {
    IstioRule {
        from: principals
            .iter()
            .map(|ps| IstioFrom {
                source: IstioSource {
                    principals: ps.iter().map(|p| p.to_string()).collect(),
                },
            })
            .collect(),
        to: ports
            .iter()
            .map(|ps| IstioTo {
                operation: IstioOperation {
                    ports: ps.iter().map(|p| p.to_string()).collect(),
                },
            })
            .collect(),
    }
}

fn policy(rules: Vec<IstioRule>) -> IstioAuthorizationPolicySpec {
    IstioAuthorizationPolicySpec {
        selector: sel(&[("app", "http-server")], &[]),
        rules,
    }
}

/// Denied: no rule admits the peer.
const DENIED: Decision = Denied {
    reason: DenyReason::NoRuleForPeer,
    invalid_skipped: false,
};
/// Denied: a rule admits the peer, not the port.
const DENIED_PORT: Decision = Denied {
    reason: DenyReason::PortNotAllowed,
    invalid_skipped: false,
};
const ALLOWED: Decision = Allowed { rule: 0 };

fn flow(identity: Option<&str>, port: u16) -> TestFlow {
    from_principal(identity).port(port)
}

#[test]
fn rule_shapes() {
    let exact = policy(vec![rule(&[&[CLIENT]], &[&["18080"]])]);
    let no_rules = policy(vec![]);
    let allow_all = policy(vec![rule(&[], &[])]);
    let any_source = policy(vec![rule(&[&[]], &[&["18080"]])]);
    let any_port = policy(vec![rule(&[&[CLIENT]], &[&[]])]);
    let star = policy(vec![rule(&[&["*"]], &[])]);
    let cases: &[(&str, &IstioAuthorizationPolicySpec, TestFlow, Decision)] = &[
        (
            "exact principal and port",
            &exact,
            flow(Some(CLIENT), 18080),
            ALLOWED,
        ),
        ("other port", &exact, flow(Some(CLIENT), 18082), DENIED_PORT),
        (
            "other service account",
            &exact,
            flow(Some("cluster.local/ns/default/sa/other"), 18080),
            DENIED,
        ),
        ("no identity", &exact, flow(None, 18080), DENIED),
        (
            "empty identity is none",
            &exact,
            flow(Some(""), 18080),
            DENIED,
        ),
        (
            "no rules deny all",
            &no_rules,
            flow(Some(CLIENT), 18080),
            DENIED,
        ),
        ("rules: [{}] allow all", &allow_all, flow(None, 1), ALLOWED),
        (
            "source without principals: any",
            &any_source,
            flow(None, 18080),
            ALLOWED,
        ),
        (
            "source without principals: port still checked",
            &any_source,
            flow(None, 1),
            DENIED_PORT,
        ),
        (
            "operation without ports: any port",
            &any_port,
            flow(Some(CLIENT), 9),
            ALLOWED,
        ),
        ("* needs an identity", &star, flow(None, 1), DENIED),
        (
            "* matches any identity",
            &star,
            flow(Some("td/ns/x/sa/y"), 1),
            ALLOWED,
        ),
        (
            "egress is not restricted",
            &no_rules,
            flow(Some(CLIENT), 18080).egress(),
            NotRestricted,
        ),
        (
            "UDP is not restricted",
            &no_rules,
            flow(Some(CLIENT), 53).proto(Protocol::Udp),
            NotRestricted,
        ),
    ];
    for (name, spec, f, want) in cases {
        assert_eq!(evaluate(spec, &f.view()), *want, "{name}");
    }
}

#[test]
fn any_from_and_any_to_entry_match() {
    let p = policy(vec![
        rule(
            &[&["a/ns/x/sa/one"], &["a/ns/x/sa/two", CLIENT]],
            &[&["1"], &["18080", "18082"]],
        ),
        rule(&[&["a/ns/y/sa/z"]], &[&["9000-9100"]]),
    ]);
    assert_eq!(evaluate(&p, &flow(Some(CLIENT), 18082).view()), ALLOWED);
    assert_eq!(
        evaluate(&p, &flow(Some("a/ns/x/sa/one"), 1).view()),
        ALLOWED
    );
    assert_eq!(
        evaluate(&p, &flow(Some("a/ns/y/sa/z"), 9050).view()),
        Allowed { rule: 1 }
    );
    assert_eq!(
        evaluate(&p, &flow(Some("a/ns/y/sa/z"), 18080).view()),
        DENIED_PORT
    );
}

#[test]
fn principal_patterns() {
    let id = Some("cluster.local/ns/shop/sa/orders");
    for (pattern, want) in [
        ("cluster.local/ns/shop/sa/orders", true),
        ("cluster.local/ns/shop/sa/order", false),
        ("*", true),
        ("cluster.local/ns/shop/*", true),
        ("cluster.local/ns/bank/*", false),
        ("*/sa/orders", true),
        ("*/sa/billing", false),
    ] {
        assert_eq!(principal_matches(pattern, id), Ok(want), "{pattern}");
    }
    assert_eq!(
        principal_matches("spiffe://cluster.local/ns/shop/sa/orders", id),
        Err(Problem::SpiffePrefix(
            "spiffe://cluster.local/ns/shop/sa/orders".into()
        ))
    );
}

#[test]
fn port_strings() {
    assert_eq!(port_range("8080"), Ok((8080, 8080)));
    assert_eq!(port_range("8000-8100"), Ok((8000, 8100)));
    for bad in [
        "", "http", "80-", "-80", "90-80", "65536", "+80", " 80", "8080/TCP",
    ] {
        assert_eq!(
            port_range(bad),
            Err(Problem::InvalidPortString(bad.into())),
            "{bad:?}"
        );
    }
    let p = policy(vec![rule(&[], &[&["http", "8000-8100"]])]);
    assert_eq!(evaluate(&p, &flow(None, 8100).view()), ALLOWED);
    assert_eq!(
        evaluate(&p, &flow(None, 8101).view()),
        Denied {
            reason: DenyReason::PortNotAllowed,
            invalid_skipped: true
        }
    );
}

#[test]
fn validate_reports_paths() {
    let p = policy(vec![rule(
        &[&["ok/ns/a/sa/b", "spiffe://td/ns/a/sa/b"]],
        &[&["80", "eighty"]],
    )]);
    let got: Vec<String> = validate(&p).iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "rules[0].from[0].source.principals[1]: principal \"spiffe://td/ns/a/sa/b\" starts with spiffe:// and never matches",
            "rules[0].to[0].operation.ports[1]: invalid port \"eighty\" (expected \"N\" or \"LO-HI\")",
        ]
    );
}

/// `metadata.name` and `spec` of an AuthorizationPolicy document (`action` is ignored).
#[derive(serde::Deserialize)]
struct Doc {
    metadata: Meta,
    spec: IstioAuthorizationPolicySpec,
}

#[derive(serde::Deserialize)]
struct Meta {
    name: String,
}

/// `spec.action` of the same document.
#[derive(serde::Deserialize)]
struct Action {
    spec: ActionSpec,
}

#[derive(serde::Deserialize)]
struct ActionSpec {
    #[serde(default)]
    action: Option<String>,
}

#[test]
fn real_allow_policies() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/real/authorizationpolicy-examples.yaml"
    );
    let text =
        std::fs::read_to_string(path).expect("testdata/real/authorizationpolicy-examples.yaml");
    let docs: Vec<Doc> = serde_saphyr::from_multiple(&text).expect("valid yaml");
    let actions: Vec<Action> = serde_saphyr::from_multiple(&text).expect("valid yaml");
    assert_eq!(docs.len(), 4);
    // DENY policies are not our model: only the ALLOW documents are evaluated.
    let allow: Vec<&Doc> = docs
        .iter()
        .zip(&actions)
        .filter(|(_, a)| a.spec.action.as_deref().unwrap_or("ALLOW") == "ALLOW")
        .map(|(d, _)| d)
        .collect();
    let names: Vec<&str> = allow.iter().map(|d| d.metadata.name.as_str()).collect();
    assert_eq!(
        names,
        ["allow-http-server-monitor", "allow-http-server-protect"]
    );
    for doc in allow {
        assert!(validate(&doc.spec).is_empty());
        let ok = |f: TestFlow| evaluate(&doc.spec, &f.view());
        let another = "cluster.local/ns/default/sa/another-client";
        assert_eq!(
            ok(flow(Some(another), 18080)),
            ALLOWED,
            "{}",
            doc.metadata.name
        );
        // The e2e client (http-client-sa) is not the allowed principal: a violation.
        assert_eq!(ok(flow(Some(CLIENT), 18080)), DENIED);
        assert_eq!(ok(flow(Some(another), 18082)), DENIED_PORT);
        assert_eq!(ok(flow(None, 18080)), DENIED);
        assert_eq!(ok(flow(Some(another), 18080).egress()), NotRestricted);
    }
}
