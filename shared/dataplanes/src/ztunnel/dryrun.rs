//! ztunnel's dry-run authorization lines: what a dry-run AuthorizationPolicy would have
//! denied (`istio.io/dry-run: "true"`), logged by target `state` (text) or scope
//! `ztunnel::state` (JSON) when `AUTHZ_POLICY_INFO_LOGGING` is on. They are the Istio
//! monitor-mode signal, the same as the leader's own monitor detection.
//!
//! Text: `<time> info state:proxy{wl=ns/pod}:inbound{id=… peer=ip:port} dry-run: deny
//! policy match policy="ns/name"` (or `dry-run: no allow policies match`); JSON:
//! `{"scope":"ztunnel::state","message":"dry-run: …","policy":…,"proxy":{"wl":…},
//! "inbound":{"peer":…}}`. Each becomes a [`FlowRecord`] with verdict
//! [`Verdict::AuditDenied`]: destination the pod `wl` names, source the peer's address
//! (its port is the client's; the record keeps it, no edge uses it), observed at ingress,
//! TCP, destination port 0 (the lines carry none).
//!
//! The other `state` lines (the enforcing `deny policy match`, `no allow policies
//! matched`, `no allow policies, allow`, dry-run allows) stay counted skips: an enforced
//! denial is reported again, with its port, by the `access` line's policy-rejection
//! error, and counting both would double it.

use serde::Deserialize;

use super::super::common::{CowStr, parse_addr, parse_time};
use super::super::{DecodeError, SkipReason};
use super::{Access, Line, fields};
use ne_flow::flow::{
    Endpoint, EndpointId, FlowRecord, ObservationPoint, Protocol, Str, Timestamp, Verdict,
};

/// `true` for the target (scope) of ztunnel's authorization state lines: `state`, with or
/// without span fields (`state:proxy{…}:inbound{…}`), or `ztunnel::state`.
pub(super) fn is_state(target: &str) -> bool {
    target == "state" || target.starts_with("state:") || target == "ztunnel::state"
}

/// The dry-run messages that say a policy would deny the connection.
fn denies(message: &str) -> bool {
    let mut words = message.split_whitespace();
    if words.next() != Some("dry-run:") {
        return false;
    }
    let rest: [Option<&str>; 5] = std::array::from_fn(|_| words.next());
    matches!(
        rest,
        [Some("deny"), Some("policy"), Some("match"), None, None]
            | [
                Some("no"),
                Some("allow"),
                Some("policies"),
                Some("match"),
                None
            ]
    )
}

/// A text `state` line, after its header: `target` with its span fields, `rest` the
/// message and its fields.
pub(super) fn text(time: Option<Timestamp>, target: &str, rest: &str) -> Result<Line, DecodeError> {
    let rest = rest.trim_start();
    // The message runs up to the first `key=value` word, as on access lines.
    let fields_at = rest
        .split_whitespace()
        .find(|w| w.contains('='))
        .map_or(rest.len(), |w| w.as_ptr() as usize - rest.as_ptr() as usize);
    if !denies(&rest[..fields_at]) {
        return Ok(Line::Skip(SkipReason::ZtunnelNonAccess));
    }
    let mut a = Access::default();
    fields(&rest[fields_at..], &mut a)?;
    let wl = span_field(target, "proxy", "wl").ok_or(DecodeError::MissingField("proxy.wl"))?;
    let peer =
        span_field(target, "inbound", "peer").ok_or(DecodeError::MissingField("inbound.peer"))?;
    record(time, wl, peer, a.policy.as_deref()).map(Line::Record)
}

/// The value of `key` in the span `name{…}` of a target, quotes removed.
fn span_field<'a>(target: &'a str, name: &str, key: &str) -> Option<&'a str> {
    let open = target
        .match_indices('{')
        .find(|&(at, _)| {
            let before = &target[..at];
            before
                .strip_suffix(name)
                .is_some_and(|b| b.is_empty() || b.ends_with(':'))
        })?
        .0;
    let body = &target[open + 1..];
    let body = &body[..body.find('}')?];
    body.split_whitespace().find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

/// The parts of a JSON dry-run line the record uses.
#[derive(Deserialize, Default, Debug)]
struct State<'a> {
    #[serde(borrow)]
    policy: Option<CowStr<'a>>,
    #[serde(borrow)]
    proxy: Option<Span<'a>>,
    #[serde(borrow)]
    inbound: Option<Span<'a>>,
}

/// A span's fields, as JSON logging nests them.
#[derive(Deserialize, Default, Debug)]
struct Span<'a> {
    #[serde(borrow)]
    wl: Option<CowStr<'a>>,
    #[serde(borrow)]
    peer: Option<CowStr<'a>>,
}

/// A JSON line whose scope is a state scope (`message` and `time` already read).
pub(super) fn json(line: &[u8], message: &str, time: Option<&str>) -> Result<Line, DecodeError> {
    if !denies(message) {
        return Ok(Line::Skip(SkipReason::ZtunnelNonAccess));
    }
    let s: State<'_> = serde_json::from_slice(line).map_err(DecodeError::json)?;
    let time = time.map(parse_time).transpose()?;
    let wl = s.proxy.as_ref().and_then(|p| p.wl.as_deref());
    let peer = s.inbound.as_ref().and_then(|i| i.peer.as_deref());
    let wl = wl.ok_or(DecodeError::MissingField("proxy.wl"))?;
    let peer = peer.ok_or(DecodeError::MissingField("inbound.peer"))?;
    record(time, wl, peer, s.policy.as_deref()).map(Line::Record)
}

fn record(
    time: Option<Timestamp>,
    wl: &str,
    peer: &str,
    policy: Option<&str>,
) -> Result<FlowRecord, DecodeError> {
    let (namespace, name) = wl
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| DecodeError::BadValue {
            field: "proxy.wl",
            value: wl.to_owned(),
        })?;
    let peer = parse_addr("inbound.peer", peer)?;
    Ok(FlowRecord {
        time,
        node: None,
        source: Endpoint::new(EndpointId::External(peer.ip())).with_ip(Some(peer.ip())),
        destination: Endpoint::new(EndpointId::Pod {
            namespace: namespace.into(),
            name: name.into(),
        }),
        protocol: Protocol::Tcp,
        source_port: peer.port(),
        destination_port: 0,
        observation: ObservationPoint::Ingress,
        verdict: Verdict::AuditDenied,
        reply: Some(false),
        destination_dns: None,
        policy: policy.filter(|p| !p.is_empty()).map(Str::from),
        connections: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_dry_run_denials_count() {
        for m in [
            "dry-run: deny policy match",
            "dry-run: no allow policies match ",
            "  dry-run:   deny policy match",
        ] {
            assert!(denies(m), "{m}");
        }
        for m in [
            "deny policy match",
            "no allow policies matched",
            "no allow policies, allow",
            "dry-run: allow policy match",
            "dry-run: deny policy match now",
            "dry-run:",
            "",
        ] {
            assert!(!denies(m), "{m}");
        }
    }

    #[test]
    fn span_fields_are_read_by_span_and_key() {
        let t = "state:proxy{wl=ns/pod}:inbound{id=abc peer=10.0.0.1:4000}";
        assert_eq!(span_field(t, "proxy", "wl"), Some("ns/pod"));
        assert_eq!(span_field(t, "inbound", "peer"), Some("10.0.0.1:4000"));
        assert_eq!(span_field(t, "inbound", "wl"), None);
        assert_eq!(span_field(t, "outbound", "peer"), None);
        let quoted = "state:xproxy{wl=a/b}:proxy{wl=\"ns/q\"}";
        assert_eq!(span_field(quoted, "proxy", "wl"), Some("ns/q"));
        assert_eq!(span_field("state:proxy{wl=a/b", "proxy", "wl"), None);
    }

    #[test]
    fn broken_dry_run_lines_are_errors() {
        let bad_wl = record(None, "no-slash", "10.0.0.1:1", None).unwrap_err();
        assert_eq!(bad_wl.kind(), "bad_value");
        let bad_peer = record(None, "ns/pod", "10.xx.xx.xx:40422", None).unwrap_err();
        assert_eq!(bad_peer.kind(), "bad_address");
        let no_peer = text(
            None,
            "state:proxy{wl=ns/pod}",
            "dry-run: no allow policies match",
        );
        assert!(matches!(
            no_peer,
            Err(DecodeError::MissingField("inbound.peer"))
        ));
        let no_proxy = json(
            br#"{"scope":"ztunnel::state","inbound":{"peer":"10.0.0.1:1"}}"#,
            "dry-run: deny policy match",
            None,
        );
        assert!(matches!(
            no_proxy,
            Err(DecodeError::MissingField("proxy.wl"))
        ));
        let wrong_shape = json(
            br#"{"scope":"ztunnel::state","proxy":"ns/pod"}"#,
            "dry-run: deny policy match",
            None,
        );
        assert!(matches!(wrong_shape, Err(DecodeError::InvalidJson(_))));
    }
}
