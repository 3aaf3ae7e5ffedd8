//! Kubernetes label selectors: matching against a label set, validation, and the
//! `kubectl` text form used in evidence and messages.
//!
//! Semantics follow `metav1.LabelSelectorAsSelector`: `matchLabels` and every
//! `matchExpressions` requirement must hold; `{}` matches everything; `NotIn` and
//! `DoesNotExist` hold when the key is absent. A selector with an invalid requirement
//! (unknown operator, `In` without values, `Exists` with values) matches nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::Problem;
use ne_flow::flow::Str;

/// The value of `key` in a label set (linear scan: label sets are small and need not be
/// sorted).
pub(crate) fn label_value<'a>(labels: &'a [(Str, Str)], key: &str) -> Option<&'a str> {
    labels.iter().find(|(k, _)| &**k == key).map(|(_, v)| &**v)
}

/// Checks that every requirement of `selector` is well formed.
pub fn validate(selector: &LabelSelector) -> Result<(), Problem> {
    selector
        .match_expressions
        .iter()
        .flatten()
        .try_for_each(validate_requirement)
}

fn validate_requirement(req: &LabelSelectorRequirement) -> Result<(), Problem> {
    let has_values = req.values.as_ref().is_some_and(|v| !v.is_empty());
    match req.operator.as_str() {
        "In" | "NotIn" if !has_values => Err(Problem::ValuesRequired(req.operator.clone())),
        "Exists" | "DoesNotExist" if has_values => {
            Err(Problem::ValuesForbidden(req.operator.clone()))
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" => Ok(()),
        other => Err(Problem::UnknownOperator(other.to_owned())),
    }
}

/// Whether `labels` satisfy `selector`; `Err` when the selector is invalid (the caller
/// treats that as "matches nothing").
pub fn matches(selector: &LabelSelector, labels: &[(Str, Str)]) -> Result<bool, Problem> {
    validate(selector)?;
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label_value(labels, k) == Some(v.as_str()));
    if !labels_ok {
        return Ok(false);
    }
    Ok(selector.match_expressions.iter().flatten().all(|req| {
        let value = label_value(labels, &req.key);
        let in_values = |v: &str| req.values.iter().flatten().any(|x| x == v);
        match req.operator.as_str() {
            "In" => value.is_some_and(in_values),
            "NotIn" => !value.is_some_and(in_values),
            "Exists" => value.is_some(),
            // Only `DoesNotExist` is left after validation.
            _ => value.is_none(),
        }
    }))
}

/// The `kubectl` text form: `app=web,tier in (a,b),!legacy`; `{}` is written `<all>`.
pub fn format(selector: &LabelSelector) -> String {
    let labels = selector.match_labels.iter().flatten();
    let requirements = selector.match_expressions.iter().flatten().map(|r| {
        let values = r.values.as_deref().unwrap_or_default();
        (r.key.as_str(), r.operator.as_str(), values)
    });
    let mut out = String::new();
    // Writing to a `String` cannot fail.
    let _ = write_text(&mut out, labels, requirements);
    out
}

/// Writes a selector's `kubectl` text form from its labels and its requirements
/// (key, operator, values), in the order given.
pub(crate) fn write_text<'a, W: std::fmt::Write>(
    out: &mut W,
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    requirements: impl IntoIterator<Item = (&'a str, &'a str, &'a [String])>,
) -> std::fmt::Result {
    let mut empty = true;
    for (k, v) in labels {
        if !std::mem::take(&mut empty) {
            out.write_str(",")?;
        }
        write!(out, "{k}={v}")?;
    }
    for (key, operator, values) in requirements {
        if !std::mem::take(&mut empty) {
            out.write_str(",")?;
        }
        let values = values.join(",");
        match operator {
            "In" => write!(out, "{key} in ({values})")?,
            "NotIn" => write!(out, "{key} notin ({values})")?,
            "Exists" => out.write_str(key)?,
            "DoesNotExist" => write!(out, "!{key}")?,
            other => write!(out, "{key} {other} ({values})")?,
        }
    }
    if empty {
        out.write_str("<all>")?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ne_flow::flow::labels;

    /// A selector from `matchLabels` pairs and `(key, operator, values)` expressions.
    pub(crate) fn sel(
        match_labels: &[(&str, &str)],
        exprs: &[(&str, &str, &[&str])],
    ) -> LabelSelector {
        LabelSelector {
            match_labels: (!match_labels.is_empty()).then(|| {
                match_labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, op, vals)| LabelSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: (!vals.is_empty())
                            .then(|| vals.iter().map(|v| v.to_string()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        let web = labels([("app", "web"), ("tier", "front")]);
        let cases: &[(&str, LabelSelector, bool)] = &[
            ("empty selector matches all", sel(&[], &[]), true),
            ("matchLabels hit", sel(&[("app", "web")], &[]), true),
            ("matchLabels wrong value", sel(&[("app", "db")], &[]), false),
            (
                "matchLabels AND: one missing",
                sel(&[("app", "web"), ("x", "y")], &[]),
                false,
            ),
            (
                "In hit",
                sel(&[], &[("tier", "In", &["back", "front"])]),
                true,
            ),
            ("In miss", sel(&[], &[("tier", "In", &["back"])]), false),
            (
                "In on absent key",
                sel(&[], &[("zone", "In", &["a"])]),
                false,
            ),
            (
                "NotIn hit",
                sel(&[], &[("tier", "NotIn", &["front"])]),
                false,
            ),
            (
                "NotIn miss",
                sel(&[], &[("tier", "NotIn", &["back"])]),
                true,
            ),
            (
                "NotIn on absent key",
                sel(&[], &[("zone", "NotIn", &["a"])]),
                true,
            ),
            ("Exists present", sel(&[], &[("app", "Exists", &[])]), true),
            ("Exists absent", sel(&[], &[("zone", "Exists", &[])]), false),
            (
                "DoesNotExist absent",
                sel(&[], &[("zone", "DoesNotExist", &[])]),
                true,
            ),
            (
                "DoesNotExist present",
                sel(&[], &[("app", "DoesNotExist", &[])]),
                false,
            ),
            (
                "labels AND expressions",
                sel(&[("app", "web")], &[("tier", "In", &["back"])]),
                false,
            ),
        ];
        for (name, s, want) in cases {
            assert_eq!(matches(s, &web), Ok(*want), "{name}");
        }
    }

    #[test]
    fn invalid_requirements_are_errors() {
        let web = labels([("app", "web")]);
        assert_eq!(
            matches(&sel(&[], &[("app", "Equals", &["web"])]), &web),
            Err(Problem::UnknownOperator("Equals".into()))
        );
        // Operators are case-sensitive, as in Kubernetes.
        assert!(matches(&sel(&[], &[("app", "in", &["web"])]), &web).is_err());
        assert_eq!(
            matches(&sel(&[], &[("app", "In", &[])]), &web),
            Err(Problem::ValuesRequired("In".into()))
        );
        assert_eq!(
            matches(&sel(&[], &[("app", "Exists", &["web"])]), &web),
            Err(Problem::ValuesForbidden("Exists".into()))
        );
        // An invalid requirement poisons the selector even when matchLabels already fail.
        assert!(matches(&sel(&[("app", "db")], &[("x", "Bogus", &[])]), &web).is_err());
    }

    #[test]
    fn formats_like_kubectl() {
        let s = sel(
            &[("app", "web")],
            &[("tier", "In", &["a", "b"]), ("legacy", "DoesNotExist", &[])],
        );
        assert_eq!(format(&s), "app=web,tier in (a,b),!legacy");
        assert_eq!(format(&sel(&[], &[])), "<all>");
    }
}
