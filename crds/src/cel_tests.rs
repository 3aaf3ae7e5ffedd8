//! Evaluates the CRDs' CEL rules (`x-kubernetes-validations`) with kube-cel, the way the
//! apiserver does on create and update.
//!
//! The harness walks the generated schema of both CRDs ([`crate::crds`]), collects every rule
//! with the schema path it sits on, and evaluates each rule on its own against the matching
//! subtree of a test object (`self` = that node, `oldSelf` = the same node of the old object
//! for transition rules). Every evaluation is cross-checked against kube-cel's own walk of the
//! whole schema, and a rule that errors at runtime (instead of returning a bool) fails the test.

use super::*;
use kube_cel::cel::common::ast::{Expr, IdedExpr};
use kube_cel::cel::{Program, common::ast::operators};
use kube_cel::{CompiledSchema, ErrorKind, ScopeContext, Validator, analyze_rule, compile_schema};
use serde_json::{Value, json};
use std::sync::OnceLock;

const RULES_KEY: &str = "x-kubernetes-validations";

const ISTIO_INGRESS_ONLY: &str = RULE_ISTIO_INGRESS_ONLY.1;
const POLICY_TYPES: &str = RULE_KUBERNETES_POLICY_TYPES.1;
const ONE_PAYLOAD: &str = RULE_ONE_BACKEND_PAYLOAD.1;
const KUBERNETES_SELECTOR: &str = RULE_KUBERNETES_SELECTOR.1;
const ISTIO_SELECTOR: &str = RULE_ISTIO_SELECTOR.1;
const BACKEND_IMMUTABLE: &str = BACKEND_IMMUTABLE_RULE.1;

const FIXTURES: [&str; 4] = [
    "wnpp-kubernetes.yaml",
    "wnpp-istio.yaml",
    "wnp-kubernetes.yaml",
    "wnp-istio.yaml",
];

// ---------------------------------------------------------------------------------------------
// Collecting the rules from the schema
// ---------------------------------------------------------------------------------------------

/// One step from a schema node down to a child node.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// `properties.<name>`.
    Field(String),
    /// `items` (every element of a list).
    Item,
    /// `additionalProperties` (every value of a map).
    Entry,
}

/// A rule as found in the schema.
struct SchemaRule {
    /// Where the rule sits, from the root of the CR.
    path: Vec<Step>,
    rule: String,
    message: String,
    /// The schema node carrying the rule (`self` has this schema).
    node: Value,
    /// A transition rule references `oldSelf`; the apiserver runs it only on updates where
    /// the old object has the node too.
    transition: bool,
    /// [`single_rule_schema`], compiled.
    single: CompiledSchema,
}

impl SchemaRule {
    /// The path in the notation of messages: `spec.backend`, `spec.rules[*]`.
    fn path_text(&self) -> String {
        let mut text = String::new();
        for step in &self.path {
            match step {
                Step::Field(name) => text = join(&text, name),
                Step::Item | Step::Entry => text.push_str("[*]"),
            }
        }
        text
    }
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_owned()
    } else {
        format!("{base}.{name}")
    }
}

/// Every rule under `node`, in schema order (a node's own rules before its children's).
fn collect_rules(node: &Value, path: &mut Vec<Step>, out: &mut Vec<SchemaRule>) {
    for entry in node
        .get(RULES_KEY)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let rule = entry["rule"].as_str().expect("a rule without `rule`");
        let message = entry["message"].as_str().unwrap_or_default();
        let transition = Program::compile(rule)
            .unwrap_or_else(|e| panic!("`{rule}` does not parse: {e}"))
            .references()
            .has_variable("oldSelf");
        let single = compile_schema(&single_rule_schema(node, rule, message));
        assert!(
            !single.has_errors(),
            "`{rule}`: {:?}",
            single.compilation_errors()
        );
        out.push(SchemaRule {
            path: path.clone(),
            rule: rule.to_owned(),
            message: message.to_owned(),
            node: node.clone(),
            transition,
            single,
        });
    }
    for (name, child) in node
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        path.push(Step::Field(name.clone()));
        collect_rules(child, path, out);
        path.pop();
    }
    let children = [
        (Step::Item, node.get("items")),
        (Step::Entry, node.get("additionalProperties")),
    ];
    for (step, child) in children {
        if let Some(child) = child.filter(|c| c.is_object()) {
            path.push(step);
            collect_rules(child, path, out);
            path.pop();
        }
    }
}

/// One CRD's schema, prepared once (generating and compiling it is slow in debug builds).
struct Crd {
    kind: String,
    /// The `openAPIV3Schema`.
    schema: Value,
    compiled: CompiledSchema,
    rules: Vec<SchemaRule>,
}

fn prepared(kind: &str) -> &'static Crd {
    static CRDS: OnceLock<Vec<Crd>> = OnceLock::new();
    let all = CRDS.get_or_init(|| {
        crds()
            .into_iter()
            .map(|(_, crd)| {
                let version = &crd.spec.versions[0];
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref());
                let schema = serde_json::to_value(schema.expect("CRD without schema")).unwrap();
                let mut rules = Vec::new();
                collect_rules(&schema, &mut Vec::new(), &mut rules);
                Crd {
                    kind: crd.spec.names.kind.clone(),
                    compiled: compile_schema(&schema),
                    schema,
                    rules,
                }
            })
            .collect()
    });
    all.iter()
        .find(|crd| crd.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for kind {kind:?}"))
}

// ---------------------------------------------------------------------------------------------
// Evaluating them
// ---------------------------------------------------------------------------------------------

/// Result of one rule on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// A transition rule on a create, or on an update whose old object lacks the node.
    NotRun,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    /// Concrete path of the node (`spec`, `spec.backend`).
    path: String,
    message: String,
    verdict: Verdict,
}

/// The object as the apiserver's CEL sees it: in an object with declared properties a
/// `null` (allowed on `nullable` fields) is the same as an absent field, so `has()` is
/// false for it (apiserver `unstructuredMap.Find`). kube-cel 0.8 keeps the key, so the
/// nulls are dropped here before evaluation.
fn apiserver_view(schema: &Value, value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            map.iter()
                .filter(|(_, v)| properties.is_none() || !v.is_null())
                .map(|(k, v)| {
                    let child = properties.and_then(|p| p.get(k)).or(additional);
                    (k.clone(), apiserver_view(child.unwrap_or(&Value::Null), v))
                })
                .collect()
        }
        Value::Array(items) => {
            let child = schema.get("items").unwrap_or(&Value::Null);
            items.iter().map(|i| apiserver_view(child, i)).collect()
        }
        other => other.clone(),
    }
}

/// The nodes of `value` that `path` reaches, with their concrete paths, each paired with the
/// node at the same place in `old`. Through list items `oldSelf` is not correlated (the
/// apiserver correlates only `map` lists by key); no rule of these CRDs sits under a list.
fn nodes_at<'a>(
    value: &'a Value,
    old: Option<&'a Value>,
    path: &[Step],
    at: String,
    out: &mut Vec<(String, &'a Value, Option<&'a Value>)>,
) {
    let Some((step, rest)) = path.split_first() else {
        out.push((at, value, old));
        return;
    };
    match step {
        Step::Field(name) => {
            if let Some(child) = value.get(name) {
                let old_child = old.and_then(|o| o.get(name));
                nodes_at(child, old_child, rest, join(&at, name), out);
            }
        }
        Step::Item => {
            for (i, item) in value.as_array().into_iter().flatten().enumerate() {
                nodes_at(item, None, rest, format!("{at}[{i}]"), out);
            }
        }
        Step::Entry => {
            for (key, child) in value.as_object().into_iter().flatten() {
                let old_child = old.and_then(|o| o.get(key));
                nodes_at(child, old_child, rest, join(&at, key), out);
            }
        }
    }
}

fn strip_rules(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove(RULES_KEY);
            map.values_mut().for_each(strip_rules);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_rules),
        _ => {}
    }
}

/// `node` carrying only this one rule, so that kube-cel evaluates exactly it.
fn single_rule_schema(node: &Value, rule: &str, message: &str) -> Value {
    let mut node = node.clone();
    strip_rules(&mut node);
    node[RULES_KEY] = json!([{"rule": rule, "message": message}]);
    node
}

/// Evaluates every rule of the object's CRD on `object` (an update from `old` if given).
/// Panics if a rule does not evaluate to a bool (runtime error), or if kube-cel's walk of
/// the whole schema disagrees with the per-rule evaluation.
fn evaluate(object: &Value, old: Option<&Value>) -> Vec<Outcome> {
    let crd = prepared(object["kind"].as_str().expect("object without kind"));
    let object = apiserver_view(&crd.schema, object);
    let old = old.map(|o| apiserver_view(&crd.schema, o));
    let validator = Validator::new();
    let mut outcomes = Vec::new();
    for rule in &crd.rules {
        let mut nodes = Vec::new();
        nodes_at(&object, old.as_ref(), &rule.path, String::new(), &mut nodes);
        for (path, value, old_value) in nodes {
            let verdict = if rule.transition && old_value.is_none() {
                Verdict::NotRun
            } else {
                match validator.validate_compiled(&rule.single, value, old_value) {
                    Ok(()) => Verdict::Pass,
                    Err(errors) => {
                        let [error] = errors.as_slice() else {
                            panic!("{path}: one rule, several errors: {errors}")
                        };
                        assert_eq!(
                            error.kind,
                            ErrorKind::ValidationFailure,
                            "{path}: `{}` did not evaluate to a bool: {}",
                            rule.rule,
                            error.message
                        );
                        assert_eq!(error.message, rule.message);
                        Verdict::Fail
                    }
                }
            };
            outcomes.push(Outcome {
                path,
                message: rule.message.clone(),
                verdict,
            });
        }
    }
    cross_check(&crd.compiled, &object, old.as_ref(), &outcomes);
    outcomes
}

/// kube-cel's own walk of the whole schema must report exactly the failures found rule by
/// rule, at the same paths.
fn cross_check(schema: &CompiledSchema, object: &Value, old: Option<&Value>, outcomes: &[Outcome]) {
    let whole = Validator::new().validate_compiled(schema, object, old);
    let mut whole: Vec<(String, String)> = match whole {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .iter()
            .map(|e| {
                assert_eq!(e.kind, ErrorKind::ValidationFailure, "{e}");
                (e.field_path.clone(), e.message.clone())
            })
            .collect(),
    };
    let mut per_rule: Vec<(String, String)> = outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Fail)
        .map(|o| (o.path.clone(), o.message.clone()))
        .collect();
    whole.sort();
    per_rule.sort();
    assert_eq!(
        whole, per_rule,
        "whole-schema walk disagrees with per-rule evaluation"
    );
}

/// Messages of the rules that fail on creating `object`, in schema order.
fn failures(object: &Value) -> Vec<String> {
    failed(evaluate(object, None))
}

/// Messages of the rules that fail on updating `old` to `new`, in schema order.
fn update_failures(old: &Value, new: &Value) -> Vec<String> {
    failed(evaluate(new, Some(old)))
}

fn failed(outcomes: Vec<Outcome>) -> Vec<String> {
    outcomes
        .into_iter()
        .filter(|o| o.verdict == Verdict::Fail)
        .map(|o| o.message)
        .collect()
}

fn fixture(name: &str) -> Value {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_saphyr::from_str(&text).unwrap()
}

/// `name` with `edit` applied.
fn mutated(name: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut object = fixture(name);
    edit(&mut object);
    object
}

fn spec(object: &mut Value) -> &mut serde_json::Map<String, Value> {
    object["spec"].as_object_mut().expect("spec is an object")
}

// ---------------------------------------------------------------------------------------------
// Static checks of the rules
// ---------------------------------------------------------------------------------------------

/// Calls whose cost does not depend on the size of the object.
const CONSTANT_COST_CALLS: [&str; 9] = [
    operators::LOGICAL_OR,
    operators::LOGICAL_AND,
    operators::LOGICAL_NOT,
    operators::CONDITIONAL,
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::GREATER,
    operators::INDEX,
    "size",
];

/// The schema of the value `expr` denotes, if it is a path from `self` / `oldSelf`.
fn operand_schema<'a>(expr: &IdedExpr, node: &'a Value) -> Option<&'a Value> {
    match &expr.expr {
        Expr::Ident(name) if name == "self" || name == "oldSelf" => Some(node),
        Expr::Select(select) => operand_schema(&select.operand, node)?
            .get("properties")?
            .get(&select.field),
        Expr::Call(call) if call.func_name == operators::INDEX => {
            operand_schema(call.args.first()?, node)?.get("items")
        }
        _ => None,
    }
}

/// Problems that would make a rule's cost grow with the object or make it refer to a
/// field the schema does not have: comprehensions (`all`, `exists`, `map`, `filter`), calls
/// outside [`CONSTANT_COST_CALLS`], collection literals, equality on lists or objects (cost
/// linear in their size), field selections the schema does not declare, variables other
/// than `self` / `oldSelf`.
fn static_problems(expr: &IdedExpr, node: &Value, problems: &mut Vec<String>) {
    match &expr.expr {
        Expr::Comprehension(_) => problems.push("comprehension".into()),
        Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => {
            problems.push("collection literal".into());
        }
        Expr::Ident(name) if name != "self" && name != "oldSelf" => {
            problems.push(format!("variable {name}"));
        }
        Expr::Select(select) => {
            if operand_schema(expr, node).is_none() {
                problems.push(format!("unknown field {}", select.field));
            }
            static_problems(&select.operand, node, problems);
        }
        Expr::Call(call) => {
            if !CONSTANT_COST_CALLS.contains(&call.func_name.as_str()) {
                problems.push(format!("call {}", call.func_name));
            }
            if [operators::EQUALS, operators::NOT_EQUALS].contains(&call.func_name.as_str()) {
                for arg in &call.args {
                    let kind = operand_schema(arg, node).and_then(|s| s["type"].as_str());
                    if let Some(kind @ ("array" | "object")) = kind {
                        problems.push(format!("equality on {kind}"));
                    }
                }
            }
            for sub in call.target.iter().map(|t| &**t).chain(&call.args) {
                static_problems(sub, node, problems);
            }
        }
        _ => {}
    }
}

fn problems_of(rule: &str, node: &Value) -> Vec<String> {
    let program = Program::compile(rule).unwrap_or_else(|e| panic!("`{rule}`: {e}"));
    let mut problems = Vec::new();
    static_problems(program.expression(), node, &mut problems);
    problems
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

mod inventory {
    use super::*;

    #[test]
    fn every_rule_is_found_with_the_path_it_sits_on() {
        for kind in ["WorkloadNetworkPolicyProposal", "WorkloadNetworkPolicy"] {
            let found: Vec<(String, String, String, bool)> = prepared(kind)
                .rules
                .iter()
                .map(|r| {
                    (
                        r.path_text(),
                        r.rule.clone(),
                        r.message.clone(),
                        r.transition,
                    )
                })
                .collect();
            let spec_rules = SPEC_RULES.iter().map(|rule| ("spec", *rule, false));
            let expected: Vec<(String, String, String, bool)> = spec_rules
                .chain([("spec.backend", BACKEND_IMMUTABLE_RULE, true)])
                .map(|(path, (rule, message), t)| (path.into(), rule.into(), message.into(), t))
                .collect();
            assert_eq!(found, expected, "{kind}");
        }
    }

    #[test]
    fn rules_are_constant_cost_and_refer_only_to_declared_fields() {
        for kind in ["WorkloadNetworkPolicyProposal", "WorkloadNetworkPolicy"] {
            for rule in &prepared(kind).rules {
                let problems = problems_of(&rule.rule, &rule.node);
                assert!(problems.is_empty(), "`{}`: {problems:?}", rule.rule);
                // kube-cel's own analysis: scope (`self`/`oldSelf` only) and its cost
                // heuristic against the apiserver's per-call budget.
                let warnings = analyze_rule(
                    &rule.rule,
                    &compile_schema(&rule.node),
                    ScopeContext::CrdValidation,
                );
                assert!(warnings.is_empty(), "`{}`: {warnings:?}", rule.rule);
            }
        }
    }

    #[test]
    fn static_check_catches_what_it_claims_to() {
        let spec = &prepared("WorkloadNetworkPolicy").schema["properties"]["spec"];
        let cases = [
            (
                "self.kubernetes.policyTypes == [self.direction]",
                vec!["equality on array", "collection literal"],
            ),
            (
                "self.istio.rules.all(r, size(r.from) > 0)",
                vec!["comprehension"],
            ),
            (
                "has(self.kubernetes.podselector)",
                vec!["unknown field podselector"],
            ),
            (
                "self.istio.selector == oldSelf.istio.selector",
                vec!["equality on object", "equality on object"],
            ),
            ("self.direction.startsWith('In')", vec!["call startsWith"]),
            (
                "object.spec.backend == 'istio'",
                vec![
                    "unknown field backend",
                    "unknown field spec",
                    "variable object",
                ],
            ),
        ];
        for (rule, expected) in cases {
            assert_eq!(problems_of(rule, spec), expected, "{rule}");
        }
    }
}

mod fixtures {
    use super::*;

    #[test]
    fn every_fixture_passes_every_rule_on_create_and_update() {
        for name in FIXTURES {
            let object = fixture(name);
            let created = evaluate(&object, None);
            let expected_paths: Vec<(&str, &str)> = SPEC_RULES
                .iter()
                .map(|(_, msg)| ("spec", *msg))
                .chain([("spec.backend", BACKEND_IMMUTABLE)])
                .collect();
            let paths: Vec<(&str, &str)> = created
                .iter()
                .map(|o| (o.path.as_str(), o.message.as_str()))
                .collect();
            assert_eq!(paths, expected_paths, "{name}: not every rule reached");
            for outcome in &created {
                let want = if outcome.message == BACKEND_IMMUTABLE {
                    Verdict::NotRun
                } else {
                    Verdict::Pass
                };
                assert_eq!(outcome.verdict, want, "{name}: {outcome:?}");
            }
            let updated = evaluate(&object, Some(&object));
            assert_eq!(updated.len(), 6, "{name}");
            assert!(
                updated.iter().all(|o| o.verdict == Verdict::Pass),
                "{name}: {updated:?}"
            );
        }
    }
}

mod spec_rules {
    use super::*;

    #[test]
    fn istio_egress_fails_only_the_istio_ingress_rule() {
        for name in ["wnpp-istio.yaml", "wnp-istio.yaml"] {
            let object = mutated(name, |o| o["spec"]["direction"] = json!("Egress"));
            assert_eq!(failures(&object), [ISTIO_INGRESS_ONLY], "{name}");
        }
        // Egress is fine for the kubernetes backend.
        assert!(failures(&fixture("wnp-kubernetes.yaml")).is_empty());
    }

    #[test]
    fn kubernetes_policy_types_must_be_exactly_the_direction() {
        let types =
            |list: Value| move |o: &mut Value| o["spec"]["kubernetes"]["policyTypes"] = list;
        let cases = [
            ("wnpp-kubernetes.yaml", json!(["Ingress", "Egress"])),
            ("wnpp-kubernetes.yaml", json!(["Egress", "Ingress"])),
            ("wnpp-kubernetes.yaml", json!(["Egress"])),
            ("wnpp-kubernetes.yaml", json!(["Ingress", "Ingress"])),
            ("wnpp-kubernetes.yaml", json!([])),
            ("wnp-kubernetes.yaml", json!(["Ingress"])),
            ("wnp-kubernetes.yaml", json!(["Ingress", "Egress"])),
        ];
        for (name, list) in cases {
            let object = mutated(name, types(list.clone()));
            assert_eq!(failures(&object), [POLICY_TYPES], "{name} {list}");
        }
        for name in ["wnpp-kubernetes.yaml", "wnp-kubernetes.yaml"] {
            let object = mutated(name, |o| {
                o["spec"]["kubernetes"]
                    .as_object_mut()
                    .unwrap()
                    .remove("policyTypes");
            });
            assert_eq!(
                failures(&object),
                [POLICY_TYPES],
                "{name} without policyTypes"
            );
        }
        // Switching the direction alone breaks the match as well.
        let object = mutated("wnpp-kubernetes.yaml", |o| {
            o["spec"]["direction"] = json!("Egress")
        });
        assert_eq!(failures(&object), [POLICY_TYPES]);
        let object = mutated("wnpp-kubernetes.yaml", |o| {
            o["spec"]["direction"] = json!("Egress");
            o["spec"]["kubernetes"]["policyTypes"] = json!(["Egress"]);
        });
        assert!(failures(&object).is_empty());
    }

    #[test]
    fn kubernetes_backend_needs_exactly_the_kubernetes_payload() {
        let istio_payload = fixture("wnpp-istio.yaml")["spec"]["istio"].clone();
        for name in ["wnpp-kubernetes.yaml", "wnp-kubernetes.yaml"] {
            let both = mutated(name, |o| o["spec"]["istio"] = istio_payload.clone());
            assert_eq!(failures(&both), [ONE_PAYLOAD], "{name} with both payloads");
            // Without any payload policyTypes is missing too, so rule (c) fails as well.
            let neither = mutated(name, |o| {
                spec(o).remove("kubernetes");
            });
            assert_eq!(failures(&neither), [POLICY_TYPES, ONE_PAYLOAD], "{name}");
            let only_istio = mutated(name, |o| {
                spec(o).remove("kubernetes");
                o["spec"]["istio"] = istio_payload.clone();
            });
            assert_eq!(failures(&only_istio), [POLICY_TYPES, ONE_PAYLOAD], "{name}");
        }
    }

    #[test]
    fn istio_backend_needs_exactly_the_istio_payload() {
        let kubernetes_payload = fixture("wnpp-kubernetes.yaml")["spec"]["kubernetes"].clone();
        for name in ["wnpp-istio.yaml", "wnp-istio.yaml"] {
            let both = mutated(name, |o| {
                o["spec"]["kubernetes"] = kubernetes_payload.clone()
            });
            assert_eq!(failures(&both), [ONE_PAYLOAD], "{name} with both payloads");
            let only_kubernetes = mutated(name, |o| {
                spec(o).remove("istio");
                o["spec"]["kubernetes"] = kubernetes_payload.clone();
            });
            assert_eq!(failures(&only_kubernetes), [ONE_PAYLOAD], "{name}");
            let neither = mutated(name, |o| {
                spec(o).remove("istio");
            });
            assert_eq!(failures(&neither), [ONE_PAYLOAD], "{name} without payload");
        }
    }

    #[test]
    fn kubernetes_pod_selector_must_not_be_empty() {
        let selector =
            |value: Value| move |o: &mut Value| o["spec"]["kubernetes"]["podSelector"] = value;
        let empty = [
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchExpressions": []}),
            json!({"matchLabels": {}, "matchExpressions": []}),
        ];
        for name in ["wnpp-kubernetes.yaml", "wnp-kubernetes.yaml"] {
            for value in &empty {
                let object = mutated(name, selector(value.clone()));
                assert_eq!(failures(&object), [KUBERNETES_SELECTOR], "{name} {value}");
            }
        }
        let object = mutated("wnpp-kubernetes.yaml", |o| {
            o["spec"]["kubernetes"]
                .as_object_mut()
                .unwrap()
                .remove("podSelector");
        });
        assert_eq!(
            failures(&object),
            [KUBERNETES_SELECTOR],
            "missing podSelector"
        );
        let only_expressions = json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["api"]}
        ]});
        for name in ["wnpp-kubernetes.yaml", "wnp-kubernetes.yaml"] {
            let object = mutated(name, selector(only_expressions.clone()));
            assert!(
                failures(&object).is_empty(),
                "{name}: matchExpressions only"
            );
        }
    }

    #[test]
    fn istio_selector_must_not_be_empty() {
        let empty = [
            json!({}),
            json!({"matchLabels": {}}),
            json!({"matchExpressions": []}),
        ];
        for name in ["wnpp-istio.yaml", "wnp-istio.yaml"] {
            for value in &empty {
                let object = mutated(name, |o| o["spec"]["istio"]["selector"] = value.clone());
                assert_eq!(failures(&object), [ISTIO_SELECTOR], "{name} {value}");
            }
            // One matchExpressions term (wnpp-istio) or one label (wnp-istio) is enough.
            assert!(failures(&fixture(name)).is_empty());
        }
        let labels_only = mutated("wnpp-istio.yaml", |o| {
            o["spec"]["istio"]["selector"] = json!({"matchLabels": {"app": "db"}});
        });
        assert!(failures(&labels_only).is_empty());
    }

    #[test]
    fn several_broken_rules_are_all_reported() {
        let object = mutated("wnp-istio.yaml", |o| {
            o["spec"]["direction"] = json!("Egress");
            o["spec"]["istio"]["selector"] = json!({});
            o["spec"]["kubernetes"] = json!({"podSelector": {}});
        });
        assert_eq!(
            failures(&object),
            [
                ISTIO_INGRESS_ONLY,
                ONE_PAYLOAD,
                KUBERNETES_SELECTOR,
                ISTIO_SELECTOR
            ]
        );
    }

    #[test]
    fn a_null_payload_counts_as_absent() {
        // `istio` and `kubernetes` are nullable; the apiserver's CEL treats a null field
        // like an absent one, so the rules neither fail nor error on it.
        let object = mutated("wnpp-kubernetes.yaml", |o| o["spec"]["istio"] = Value::Null);
        assert!(failures(&object).is_empty());
        let object = mutated("wnp-istio.yaml", |o| o["spec"]["kubernetes"] = Value::Null);
        assert!(failures(&object).is_empty());
        let object = mutated("wnp-istio.yaml", |o| o["spec"]["istio"] = Value::Null);
        assert_eq!(failures(&object), [ONE_PAYLOAD]);
    }
}

mod transition {
    use super::*;

    #[test]
    fn changing_the_backend_fails_only_the_immutability_rule() {
        let pairs = [
            ("wnpp-kubernetes.yaml", "wnpp-istio.yaml"),
            ("wnpp-istio.yaml", "wnpp-kubernetes.yaml"),
            ("wnp-kubernetes.yaml", "wnp-istio.yaml"),
            ("wnp-istio.yaml", "wnp-kubernetes.yaml"),
        ];
        for (old, new) in pairs {
            let (old, new) = (fixture(old), fixture(new));
            // The new object is valid on its own: only the transition is refused.
            assert!(failures(&new).is_empty());
            assert_eq!(update_failures(&old, &new), [BACKEND_IMMUTABLE]);
        }
    }

    #[test]
    fn other_changes_keep_the_backend_rule_passing() {
        let old = fixture("wnpp-kubernetes.yaml");
        let new = mutated("wnpp-kubernetes.yaml", |o| {
            o["spec"]["kubernetes"]["podSelector"]["matchLabels"]["tier"] = json!("web");
            o["spec"]["targetRef"]["name"] = json!("api-v2");
        });
        let outcomes = evaluate(&new, Some(&old));
        let backend = outcomes
            .iter()
            .find(|o| o.message == BACKEND_IMMUTABLE)
            .expect("backend rule evaluated");
        assert_eq!(backend.verdict, Verdict::Pass);
        assert!(failed(outcomes).is_empty());
        // An old object without a backend (not possible in the cluster, but the rule must
        // then not run rather than error).
        let old = mutated("wnpp-kubernetes.yaml", |o| {
            spec(o).remove("backend");
        });
        let outcomes = evaluate(&new, Some(&old));
        let backend = outcomes
            .iter()
            .find(|o| o.message == BACKEND_IMMUTABLE)
            .unwrap();
        assert_eq!(backend.verdict, Verdict::NotRun);
    }

    #[test]
    fn a_backend_change_combined_with_a_broken_spec_reports_both() {
        let old = fixture("wnp-kubernetes.yaml");
        let new = mutated("wnp-istio.yaml", |o| {
            o["spec"]["direction"] = json!("Egress")
        });
        assert_eq!(
            update_failures(&old, &new),
            [ISTIO_INGRESS_ONLY, BACKEND_IMMUTABLE]
        );
    }
}
