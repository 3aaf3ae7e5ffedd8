//! Istio AuthorizationPolicy (ALLOW) semantics at L4, as ztunnel enforces them, for the
//! subset our CRD models: `rules[].from[].source.principals` and
//! `rules[].to[].operation.ports`.
//!
//! - Only inbound TCP is authorized by ztunnel: egress and non-TCP flows are
//!   [`Decision::NotRestricted`].
//! - No rules deny everything; a flow is allowed when any rule matches.
//! - A rule matches when its `from` is empty or any `from` matches (a source with no
//!   principals matches any source), and its `to` is empty or any `to` matches (an
//!   operation with no ports matches any port).
//! - Principals match exactly, `*` (any authenticated identity), `prefix*` or `*suffix`.
//!   A flow without identity (plaintext, outside the mesh) matches only unconstrained
//!   sources. A principal written with `spiffe://` never matches (Istio principals are
//!   without it) and is reported by [`validate`].
//! - Ports are `"N"` or `"LO-HI"`; an unparsable port never matches.
//!
//! Our CRD has no `action`: it models ALLOW policies only. DENY and AUDIT policies are not
//! part of the model and must not be evaluated with this module.

use ne_crds::{IstioAuthorizationPolicySpec, IstioFrom, IstioTo};

use super::{Decision, FlowView, Problem, Scan, SpecIssue};
use ne_flow::flow::{Direction, Protocol};

/// Evaluates `flow` against an ALLOW policy that selects the subject.
pub fn evaluate(spec: &IstioAuthorizationPolicySpec, flow: &FlowView<'_>) -> Decision {
    evaluate_rules(spec, flow, None)
}

/// [`evaluate`] over the rules numbered in `candidates` (ascending) only, or over every
/// rule; as [`super::netpol::evaluate_rules`] does.
pub(super) fn evaluate_rules(
    spec: &IstioAuthorizationPolicySpec,
    flow: &FlowView<'_>,
    candidates: Option<&[u32]>,
) -> Decision {
    if flow.direction != Direction::Ingress || flow.protocol != Protocol::Tcp {
        return Decision::NotRestricted;
    }
    let identity = peer_identity(flow);
    let mut scan = Scan::default();
    let hit = super::netpol::first(spec.rules.len(), candidates, |i| {
        let rule = &spec.rules[i];
        if !from_matches(&rule.from, identity, &mut scan) {
            return false;
        }
        if to_matches(&rule.to, flow.port, &mut scan) {
            return true;
        }
        scan.peer_admitted = true;
        false
    });
    match hit {
        Some(rule) => Decision::Allowed { rule },
        None => scan.denied(),
    }
}

/// The flow's mesh identity, if it has one.
pub(super) fn peer_identity<'a>(flow: &FlowView<'a>) -> Option<&'a str> {
    flow.peer_identity.filter(|id| !id.is_empty())
}

fn from_matches(from: &[IstioFrom], identity: Option<&str>, scan: &mut Scan) -> bool {
    from.is_empty()
        || from.iter().any(|f| {
            let principals = &f.source.principals;
            principals.is_empty()
                || principals.iter().any(|p| {
                    let r = principal_matches(p, identity);
                    scan.ok(r)
                })
        })
}

/// Whether `pattern` admits `identity` (`None`: no mesh identity).
pub fn principal_matches(pattern: &str, identity: Option<&str>) -> Result<bool, Problem> {
    if pattern.starts_with("spiffe://") {
        return Err(Problem::SpiffePrefix(pattern.to_owned()));
    }
    let Some(id) = identity else { return Ok(false) };
    Ok(if pattern == "*" {
        true
    } else if let Some(prefix) = pattern.strip_suffix('*') {
        id.starts_with(prefix)
    } else if let Some(suffix) = pattern.strip_prefix('*') {
        id.ends_with(suffix)
    } else {
        pattern == id
    })
}

/// Whether `pattern` is a valid principal matched exactly (no `*`, no `spiffe://`).
pub(super) fn principal_is_exact(pattern: &str) -> bool {
    !pattern.starts_with("spiffe://") && !pattern.starts_with('*') && !pattern.ends_with('*')
}

fn to_matches(to: &[IstioTo], port: u16, scan: &mut Scan) -> bool {
    to.is_empty()
        || to.iter().any(|t| {
            let ports = &t.operation.ports;
            ports.is_empty()
                || ports.iter().any(|p| {
                    let r = port_range(p).map(|(lo, hi)| (lo..=hi).contains(&port));
                    scan.ok(r)
                })
        })
}

/// Parses `"N"` or `"LO-HI"` (digits only, `LO <= HI`).
pub fn port_range(s: &str) -> Result<(u16, u16), Problem> {
    let bad = || Problem::InvalidPortString(s.to_owned());
    let num = |t: &str| {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse::<u16>().map_err(|_| bad())
    };
    match s.split_once('-') {
        None => num(s).map(|n| (n, n)),
        Some((lo, hi)) => {
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo <= hi { Ok((lo, hi)) } else { Err(bad()) }
        }
    }
}

/// Every invalid part of `spec`, with its path.
pub fn validate(spec: &IstioAuthorizationPolicySpec) -> Vec<SpecIssue> {
    let mut issues = Vec::new();
    if let Err(problem) = super::selector::validate(&spec.selector) {
        issues.push(SpecIssue {
            path: "selector".into(),
            problem,
        });
    }
    for (i, rule) in spec.rules.iter().enumerate() {
        for (j, f) in rule.from.iter().enumerate() {
            for (k, p) in f.source.principals.iter().enumerate() {
                if let Err(problem) = principal_matches(p, None) {
                    issues.push(SpecIssue {
                        path: format!("rules[{i}].from[{j}].source.principals[{k}]"),
                        problem,
                    });
                }
            }
        }
        for (j, t) in rule.to.iter().enumerate() {
            for (k, p) in t.operation.ports.iter().enumerate() {
                if let Err(problem) = port_range(p) {
                    issues.push(SpecIssue {
                        path: format!("rules[{i}].to[{j}].operation.ports[{k}]"),
                        problem,
                    });
                }
            }
        }
    }
    issues
}

#[cfg(test)]
#[path = "istio_tests.rs"]
mod tests;
