//! Field ownership after a create. A create (POST) records the creator's fields in
//! `managedFields` under operation `Update`; a later server-side apply by the same manager is
//! a second owner (operation `Apply`) that neither owns those fields nor removes them when it
//! omits them. So an annotation, label or map key written at creation would outlive every
//! apply that leaves it out: the dry-run annotation of an AuthorizationPolicy created in
//! monitor mode stayed after the switch to protect, and the controller re-applied the policy
//! every round. [`as_applied`] moves such fields into the manager's `Apply` entry.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::Value;

/// `entries` with every `Update` entry of `manager` on the object itself (not on a
/// subresource) merged into the manager's `Apply` entry of the same API version, or `None`
/// when there is nothing to move.
pub fn as_applied(
    entries: &[ManagedFieldsEntry],
    manager: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    let ours = |e: &ManagedFieldsEntry, operation: &str| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some(operation)
            && e.subresource.as_deref().unwrap_or_default().is_empty()
    };
    let first_update = entries.iter().find(|e| ours(e, "Update"))?;
    let applied = entries.iter().find(|e| ours(e, "Apply"));
    let api_version = applied.unwrap_or(first_update).api_version.clone();
    let moved = |e: &ManagedFieldsEntry| ours(e, "Update") && e.api_version == api_version;

    let mut fields = Value::Object(Default::default());
    let mut time = None;
    for entry in applied
        .into_iter()
        .chain(entries.iter().filter(|e| moved(e)))
    {
        if let Some(FieldsV1(set)) = &entry.fields_v1 {
            union(&mut fields, set);
        }
        time = time.max(entry.time.clone());
    }
    let merged = ManagedFieldsEntry {
        api_version: api_version.clone(),
        fields_type: Some("FieldsV1".to_owned()),
        fields_v1: Some(FieldsV1(fields)),
        manager: Some(manager.to_owned()),
        operation: Some("Apply".to_owned()),
        subresource: None,
        time,
    };
    let mut out: Vec<_> = entries
        .iter()
        .filter(|e| !moved(e) && !ours(e, "Apply"))
        .cloned()
        .collect();
    out.push(merged);
    Some(out)
}

/// Adds the field set `from` to `into` (both in the FieldsV1 form: nested objects whose
/// leaves are empty objects).
fn union(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                union(
                    into.entry(key.clone())
                        .or_insert_with(|| Value::Object(Default::default())),
                    value,
                );
            }
        }
        (into, from) => *into = from.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("security.istio.io/v1".to_owned()),
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.to_owned()),
            operation: Some(operation.to_owned()),
            subresource: subresource.map(str::to_owned),
            time: None,
        }
    }

    #[test]
    fn the_creators_fields_join_its_apply_entry_and_others_are_kept() {
        let created = entry(
            "network-enforcer",
            "Update",
            None,
            json!({"f:metadata": {"f:annotations": {".": {}, "f:istio.io/dry-run": {}}}, "f:spec": {"f:action": {}}}),
        );
        let applied = entry(
            "network-enforcer",
            "Apply",
            None,
            json!({"f:spec": {"f:action": {}, "f:rules": {}}}),
        );
        let status = entry(
            "network-enforcer",
            "Update",
            Some("status"),
            json!({"f:status": {}}),
        );
        let user = entry(
            "kubectl-edit",
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        let entries = [created, applied, status.clone(), user.clone()];

        let out = as_applied(&entries, "network-enforcer").expect("an Update entry to move");

        assert_eq!(out.len(), 3, "{out:#?}");
        assert_eq!(
            out[0], status,
            "the status subresource's entry is not the object's"
        );
        assert_eq!(out[1], user, "another manager's entry is untouched");
        let merged = &out[2];
        assert_eq!(merged.operation.as_deref(), Some("Apply"));
        assert_eq!(
            merged.fields_v1.as_ref().unwrap().0,
            json!({
                "f:metadata": {"f:annotations": {".": {}, "f:istio.io/dry-run": {}}},
                "f:spec": {"f:action": {}, "f:rules": {}},
            })
        );
    }

    #[test]
    fn a_created_object_without_an_apply_entry_gets_one() {
        let fields = json!({"f:metadata": {"f:labels": {"f:app": {}}}});
        let out = as_applied(
            &[entry("network-enforcer", "Update", None, fields.clone())],
            "network-enforcer",
        )
        .unwrap();
        assert_eq!(out, [entry("network-enforcer", "Apply", None, fields)]);
    }

    #[test]
    fn nothing_to_move_when_the_manager_only_applied_or_only_wrote_status() {
        let entries = [
            entry("network-enforcer", "Apply", None, json!({"f:spec": {}})),
            entry(
                "network-enforcer",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
            entry("someone", "Update", None, json!({"f:spec": {}})),
        ];
        assert_eq!(as_applied(&entries, "network-enforcer"), None);
    }
}
