//! Converts a CRD's structural OpenAPI v3 schema into plain JSON Schema, so tests in other
//! crates can check the objects they build against the schema the apiserver enforces.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Map, Value, json};

/// The served version's `openAPIV3Schema` of `crd` as plain JSON Schema (for the `jsonschema`
/// crate):
/// - `x-kubernetes-int-or-string` becomes `"type": ["integer", "string"]`;
/// - `nullable: true` adds `"null"` to the type (and to an `enum`);
/// - objects with `properties` and without `x-kubernetes-preserve-unknown-fields` reject
///   unknown fields (`additionalProperties: false`), as strict field validation (kubectl's
///   default) does;
/// - every other `x-kubernetes-*` key is dropped;
/// - the root gains the fields the apiserver handles itself: `apiVersion` and `kind` (fixed to
///   this CRD's group/version and kind) and `metadata` (any object).
///
/// CEL rules (`x-kubernetes-validations`) cannot be evaluated here: they are dropped, so an
/// object that passes this schema may still be refused by the apiserver (see
/// [`crate::SPEC_RULES`]). Returns the schema `false` (rejects everything) when no served
/// version carries a schema.
pub fn validation_schema(crd: &CustomResourceDefinition) -> Value {
    let served = crd.spec.versions.iter().filter(|v| v.served).find_map(|v| {
        let props = v.schema.as_ref()?.open_api_v3_schema.as_ref()?;
        Some((v.name.as_str(), serde_json::to_value(props).ok()?))
    });
    let Some((version, mut schema)) = served else {
        return Value::Bool(false);
    };
    convert(&mut schema);
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        let api_version = format!("{}/{version}", crd.spec.group);
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "const": api_version}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "const": crd.spec.names.kind}),
        );
        properties.insert("metadata".into(), json!({"type": "object"}));
    }
    schema
}

/// Keywords whose value is one schema.
const SCHEMA_KEYWORDS: [&str; 3] = ["items", "additionalProperties", "not"];
/// Keywords whose value is a list of schemas.
const SCHEMA_LIST_KEYWORDS: [&str; 3] = ["allOf", "anyOf", "oneOf"];

/// Rewrites one schema node in place, then its subschemas.
fn convert(node: &mut Value) {
    let Value::Object(map) = node else { return };

    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve_unknown =
        map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let nullable = map.remove("nullable") == Some(Value::Bool(true));
    map.retain(|key, _| !key.starts_with("x-kubernetes-"));

    if int_or_string {
        map.insert("type".into(), Value::from(vec!["integer", "string"]));
    }
    if map.contains_key("properties")
        && !preserve_unknown
        && !map.contains_key("additionalProperties")
    {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    if nullable {
        allow_null(map);
    }

    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(convert);
    }
    for key in SCHEMA_KEYWORDS {
        if let Some(sub) = map.get_mut(key) {
            convert(sub);
        }
    }
    for key in SCHEMA_LIST_KEYWORDS {
        if let Some(Value::Array(subs)) = map.get_mut(key) {
            subs.iter_mut().for_each(convert);
        }
    }
}

/// Makes a schema node accept `null` as well.
fn allow_null(map: &mut Map<String, Value>) {
    match map.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            map.insert("type".into(), Value::from(vec![t, "null".into()]));
        }
        Some(Value::Array(types)) if !types.contains(&Value::from("null")) => {
            types.push("null".into());
        }
        Some(_) => {}
        None => {
            if let Some(Value::Array(alternatives)) = map.get_mut("anyOf") {
                alternatives.push(json!({"type": "null"}));
            }
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}
