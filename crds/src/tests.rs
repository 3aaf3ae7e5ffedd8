use super::*;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::fmt::Debug;

const REGENERATE: &str =
    "run `cargo run -p ne-crds --bin crdgen -- --out-dir charts/network-enforcer/crds`";

fn fixture(name: &str) -> String {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn fixture_value(name: &str) -> Value {
    serde_saphyr::from_str(&fixture(name)).unwrap()
}

/// YAML in -> typed object -> JSON and YAML out: nothing lost, nothing added.
fn round_trip<K>(name: &str) -> K
where
    K: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = fixture(name);
    let object: K = serde_saphyr::from_str(&text).unwrap();
    let as_json = serde_json::to_value(&object).unwrap();
    assert_eq!(
        as_json,
        fixture_value(name),
        "{name}: JSON out differs from YAML in"
    );
    let yaml = serde_saphyr::to_string(&object).unwrap();
    let reparsed: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(reparsed, as_json, "{name}: YAML out differs from YAML in");
    let from_json: K = serde_json::from_value(as_json).unwrap();
    assert_eq!(
        from_json, object,
        "{name}: JSON round trip changed the object"
    );
    object
}

fn schema(crd: &CustomResourceDefinition) -> Value {
    let version = &crd.spec.versions[0];
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

fn both_crds() -> [CustomResourceDefinition; 2] {
    crds().map(|(_, crd)| crd)
}

mod serde_round_trip {
    use super::*;

    #[test]
    fn proposal_with_kubernetes_backend() {
        let wnpp: WorkloadNetworkPolicyProposal = round_trip("wnpp-kubernetes.yaml");
        assert_eq!(wnpp.spec.backend, Backend::Kubernetes);
        assert_eq!(wnpp.spec.target_ref.kind, TargetKind::Deployment);
        let np = wnpp.spec.kubernetes.as_ref().unwrap();
        assert_eq!(
            np.policy_types.as_deref(),
            Some(&["Ingress".to_owned()][..])
        );
        let status = wnpp.status.unwrap();
        assert_eq!(status.flow_count, 1521);
        assert_eq!(
            status.peers[1].dns_name.as_deref(),
            Some("metrics.example.com")
        );
        assert_eq!(status.peers[1].port, 9050);
        assert_eq!(status.conditions[0].type_, "Learning");
    }

    #[test]
    fn proposal_with_istio_backend() {
        let wnpp: WorkloadNetworkPolicyProposal = round_trip("wnpp-istio.yaml");
        assert_eq!(wnpp.spec.backend, Backend::Istio);
        let istio = wnpp.spec.istio.as_ref().unwrap();
        assert_eq!(istio.rules[0].to[0].operation.ports, ["5432", "9100-9102"]);
        assert_eq!(
            istio.rules[0].from[0].source.principals[1],
            "cluster.local/ns/batch/sa/*"
        );
        assert!(istio.rules[1].from.is_empty());
        assert!(wnpp.spec.kubernetes.is_none());
    }

    #[test]
    fn policy_with_kubernetes_backend() {
        let wnp: WorkloadNetworkPolicy = round_trip("wnp-kubernetes.yaml");
        assert_eq!(wnp.spec.mode, Mode::Protect);
        assert_eq!(wnp.spec.direction, PolicyDirection::Egress);
        let status = wnp.status.unwrap();
        assert_eq!(status.observed_generation, Some(4));
        let active = &status.violations[0];
        assert_eq!((active.id, active.count, active.port), (7, 12, 443));
        assert_eq!(active.destination.ip.as_deref(), Some("93.184.216.34"));
        assert_eq!(active.destination.name, None);
        assert_eq!(active.mode, Mode::Protect);
        let acked = &status.acknowledged_violations[0];
        assert_eq!(acked.violation.id, 3);
        assert_eq!(acked.reason.as_deref(), Some("expected backup job"));
        assert!(status.last_violation_time.is_some());
    }

    #[test]
    fn policy_with_istio_backend() {
        let wnp: WorkloadNetworkPolicy = round_trip("wnp-istio.yaml");
        let status = wnp.status.unwrap();
        let record = &status.violations[0];
        assert_eq!(
            record.source.identity.as_deref(),
            Some("cluster.local/ns/batch/sa/report")
        );
        assert_eq!(record.mode, Mode::Monitor);
        assert_eq!(status.observed_generation, None);
    }

    #[test]
    fn mode_defaults_to_monitor() {
        let mut object = fixture_value("wnp-istio.yaml");
        object["spec"].as_object_mut().unwrap().remove("mode");
        let wnp: WorkloadNetworkPolicy = serde_json::from_value(object).unwrap();
        assert_eq!(wnp.spec.mode, Mode::Monitor);
        assert_eq!(
            serde_json::to_value(&wnp).unwrap()["spec"]["mode"],
            "monitor"
        );
    }

    #[test]
    fn empty_status_lists_are_serialized_so_merge_patches_clear_them() {
        let status = serde_json::to_value(WorkloadNetworkPolicyStatus::default()).unwrap();
        assert_eq!(
            status,
            json!({
                "violations": [], "activeViolationCount": 0, "violationCount": 0,
                "acknowledgedViolations": [], "conditions": []
            })
        );
        let status = serde_json::to_value(WorkloadNetworkPolicyProposalStatus::default()).unwrap();
        assert_eq!(
            status,
            json!({"conditions": [], "peers": [], "flowCount": 0})
        );
    }
}

mod generated_schema {
    use super::*;

    #[test]
    fn spec_carries_every_cel_rule_with_its_message() {
        for crd in both_crds() {
            let spec = &schema(&crd)["properties"]["spec"];
            let rules: Vec<(&str, &str)> = spec["x-kubernetes-validations"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["rule"].as_str().unwrap(), r["message"].as_str().unwrap()))
                .collect();
            assert_eq!(rules, SPEC_RULES, "{}", crd.spec.names.kind);
            assert_eq!(
                spec["properties"]["backend"]["x-kubernetes-validations"],
                json!([{"rule": "self == oldSelf", "message": "backend is immutable"}])
            );
        }
        // The rules as the brief states them, verbatim.
        assert_eq!(
            RULE_ISTIO_INGRESS_ONLY.0,
            "self.backend != 'istio' || self.direction != 'Egress'"
        );
        assert!(
            RULE_ISTIO_INGRESS_ONLY
                .1
                .contains("ztunnel enforces inbound")
        );
        assert!(RULE_KUBERNETES_POLICY_TYPES.0.contains(
            "size(self.kubernetes.policyTypes) == 1 && self.kubernetes.policyTypes[0] == self.direction"
        ));
    }

    #[test]
    fn enums_and_defaults() {
        for crd in both_crds() {
            let spec = &schema(&crd)["properties"]["spec"]["properties"];
            assert_eq!(spec["backend"]["enum"], json!(["kubernetes", "istio"]));
            assert_eq!(spec["direction"]["enum"], json!(["Ingress", "Egress"]));
            assert_eq!(
                spec["targetRef"]["properties"]["kind"]["enum"],
                json!(["Deployment", "StatefulSet", "DaemonSet"])
            );
            let name = &spec["targetRef"]["properties"]["name"];
            assert_eq!(
                (name["minLength"].as_i64(), name["maxLength"].as_i64()),
                (Some(1), Some(253))
            );
            assert_eq!(name["pattern"], DNS_SUBDOMAIN_PATTERN);
            let ports = &spec["istio"]["properties"]["rules"]["items"]["properties"]["to"]["items"]
                ["properties"]["operation"]["properties"]["ports"];
            assert_eq!(ports["items"]["pattern"], ISTIO_PORT_PATTERN);
        }
        let wnp = schema(&WorkloadNetworkPolicy::crd());
        let mode = &wnp["properties"]["spec"]["properties"]["mode"];
        assert_eq!(mode["enum"], json!(["monitor", "protect"]));
        assert_eq!(mode["default"], "monitor");
        let record =
            &wnp["properties"]["status"]["properties"]["violations"]["items"]["properties"];
        assert_eq!(record["mode"]["enum"], json!(["monitor", "protect"]));
        assert_eq!(record["direction"]["enum"], json!(["Ingress", "Egress"]));
        let wnpp = schema(&WorkloadNetworkPolicyProposal::crd());
        assert!(
            wnpp["properties"]["spec"]["properties"]
                .get("mode")
                .is_none()
        );
    }

    #[test]
    fn status_lists_are_bounded_and_conditions_are_a_map() {
        let wnp = schema(&WorkloadNetworkPolicy::crd());
        let status = &wnp["properties"]["status"]["properties"];
        assert_eq!(status["violations"]["maxItems"], 100);
        assert_eq!(status["acknowledgedViolations"]["maxItems"], 100);
        let wnpp = schema(&WorkloadNetworkPolicyProposal::crd());
        for conditions in [
            &status["conditions"],
            &wnpp["properties"]["status"]["properties"]["conditions"],
        ] {
            assert_eq!(conditions["x-kubernetes-list-type"], "map");
            assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
        }
    }

    #[test]
    fn names_scope_subresource_and_annotation() {
        let expected = [
            (
                "WorkloadNetworkPolicyProposal",
                "workloadnetworkpolicyproposals",
                "wnpp",
            ),
            ("WorkloadNetworkPolicy", "workloadnetworkpolicies", "wnp"),
        ];
        for (crd, (kind, plural, short)) in both_crds().iter().zip(expected) {
            let names = &crd.spec.names;
            assert_eq!((names.kind.as_str(), names.plural.as_str()), (kind, plural));
            assert_eq!(names.short_names.as_deref(), Some(&[short.to_owned()][..]));
            assert_eq!(
                names.categories.as_deref(),
                Some(&["networkenforcer".to_owned()][..])
            );
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(crd.spec.scope, "Namespaced");
            assert_eq!(
                crd.metadata.name.as_deref(),
                Some(&*format!("{plural}.{GROUP}"))
            );
            let annotations = crd.metadata.annotations.as_ref().unwrap();
            assert_eq!(annotations["helm.sh/resource-policy"], "keep");
            let [version] = &crd.spec.versions[..] else {
                panic!("one version expected")
            };
            assert_eq!(version.name, VERSION);
            assert!(version.served && version.storage);
            assert!(version.subresources.as_ref().unwrap().status.is_some());
        }
    }

    fn columns(crd: &CustomResourceDefinition) -> Vec<(String, String, String)> {
        let version = &crd.spec.versions[0];
        version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
            .collect()
    }

    fn owned(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
        list.iter()
            .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
            .collect()
    }

    #[test]
    fn printer_columns() {
        assert_eq!(
            columns(&WorkloadNetworkPolicy::crd()),
            owned(&[
                ("Mode", "string", ".spec.mode"),
                ("Backend", "string", ".spec.backend"),
                (
                    "Active Violations",
                    "integer",
                    ".status.activeViolationCount"
                ),
                ("Last Violation", "date", ".status.lastViolationTime"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ])
        );
        assert_eq!(
            columns(&WorkloadNetworkPolicyProposal::crd()),
            owned(&[
                ("Backend", "string", ".spec.backend"),
                ("Target", "string", ".spec.targetRef.name"),
                ("Direction", "string", ".spec.direction"),
                ("Peers", "integer", ".status.peerCount"),
                ("Ports", "string", ".status.ports"),
                ("Flows", "integer", ".status.flowCount"),
                ("Stable", "date", ".status.lastLearned"),
                ("Last Seen", "date", ".status.lastSeen"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ])
        );
    }

    #[test]
    fn every_printer_column_has_a_description() {
        // Without one, the server's Table shows a placeholder of its own.
        for crd in both_crds() {
            for column in crd.spec.versions[0]
                .additional_printer_columns
                .iter()
                .flatten()
            {
                let description = column.description.as_deref().unwrap_or_default();
                assert!(
                    !description.trim().is_empty(),
                    "{}: column {} has no description",
                    crd.spec.names.kind,
                    column.name
                );
            }
        }
    }

    /// Walks every schema node; `path` names it for failure messages.
    pub(super) fn walk(node: &Value, path: &str, visit: &mut dyn FnMut(&str, &Value)) {
        visit(path, node);
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                walk(sub, &format!("{path}.{name}"), visit);
            }
        }
        for key in ["items", "additionalProperties"] {
            if let Some(sub) = node.get(key).filter(|s| s.is_object()) {
                walk(sub, &format!("{path}[{key}]"), visit);
            }
        }
    }

    #[test]
    fn schema_is_structural() {
        for (_, yaml) in crd_yaml().unwrap() {
            assert!(!yaml.contains("$ref"), "a $ref survived inlining");
        }
        for crd in both_crds() {
            walk(&schema(&crd), "", &mut |path, node| {
                for key in [
                    "$ref",
                    "anyOf",
                    "oneOf",
                    "allOf",
                    "not",
                    "$defs",
                    "definitions",
                ] {
                    assert!(node.get(key).is_none(), "{path} has {key}");
                }
                let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&json!(true));
                assert!(
                    node.get("type").is_some() || int_or_string,
                    "{path} has no type"
                );
                if node.get("properties").is_some() {
                    assert_eq!(node["type"], "object", "{path}");
                }
            });
        }
    }

    #[test]
    fn every_field_is_documented() {
        for crd in both_crds() {
            let root = schema(&crd);
            assert!(
                root["description"]
                    .as_str()
                    .is_some_and(|d| d.contains("network policy"))
            );
            for part in ["spec", "status"] {
                walk(&root["properties"][part], part, &mut |path, node| {
                    if !path.ends_with("]") {
                        let description = node["description"].as_str().unwrap_or_default();
                        assert!(!description.trim().is_empty(), "{path} has no description");
                    }
                });
            }
        }
    }
}

mod descriptions {
    use super::generated_schema::walk;
    use super::*;

    #[test]
    fn lines_are_joined_within_a_paragraph_only() {
        assert_eq!(unwrap_lines("one\ntwo"), "one two");
        assert_eq!(unwrap_lines("one\n\ntwo\nthree"), "one\n\ntwo three");
        assert_eq!(unwrap_lines("a\n\n\nb"), "a\n\n\nb");
        assert_eq!(unwrap_lines("\nx"), " x");
        assert_eq!(unwrap_lines("no break"), "no break");
    }

    #[test]
    fn no_description_breaks_a_line_inside_a_paragraph() {
        let mut described = 0;
        for crd in both_crds() {
            walk(&schema(&crd), "", &mut |path, node| {
                if let Some(description) = node["description"].as_str() {
                    described += 1;
                    assert!(
                        !description.split("\n\n").any(|p| p.contains('\n')),
                        "{}{path}: {description:?}",
                        crd.spec.names.kind
                    );
                }
            });
        }
        assert!(described > 100, "only {described} descriptions");
    }
}

mod rendering {
    use super::*;

    #[test]
    fn yaml_parses_back_to_the_same_crds() {
        let rendered = crd_yaml().unwrap();
        let files: Vec<&str> = rendered.iter().map(|(file, _)| *file).collect();
        assert_eq!(
            files,
            [
                "workloadnetworkpolicyproposals.yaml",
                "workloadnetworkpolicies.yaml"
            ]
        );
        for ((_, yaml), crd) in rendered.iter().zip(both_crds()) {
            assert!(yaml.starts_with(GENERATED_HEADER));
            let parsed: CustomResourceDefinition = serde_saphyr::from_str(yaml).unwrap();
            assert_eq!(parsed, crd);
        }
        let stream = crd_yaml_stream().unwrap();
        let parsed: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&stream).unwrap();
        assert_eq!(parsed, both_crds());
    }

    #[test]
    fn committed_chart_crds_match_crdgen() {
        let committed = [
            (
                "workloadnetworkpolicyproposals.yaml",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../charts/network-enforcer/crds/workloadnetworkpolicyproposals.yaml"
                ),
            ),
            (
                "workloadnetworkpolicies.yaml",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../charts/network-enforcer/crds/workloadnetworkpolicies.yaml"
                ),
            ),
        ];
        let rendered = crd_yaml().unwrap();
        assert_eq!(
            rendered.len(),
            committed.len(),
            "a CRD has no committed file; {REGENERATE}"
        );
        for ((file, yaml), (committed_file, path)) in rendered.iter().zip(committed) {
            assert_eq!(*file, committed_file);
            let on_disk = std::fs::read_to_string(path)
                .unwrap_or_else(|e| panic!("cannot read {path} ({e}); {REGENERATE}"));
            assert!(
                on_disk == *yaml,
                "{path} differs from what crdgen generates now; {REGENERATE}"
            );
        }
    }
}

mod validation {
    use super::*;

    fn validator(crd: &CustomResourceDefinition) -> jsonschema::Validator {
        jsonschema::validator_for(&validation_schema(crd)).unwrap()
    }

    fn errors(validator: &jsonschema::Validator, object: &Value) -> Vec<String> {
        validator
            .iter_errors(object)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }

    /// Applies `edit` to a fixture and returns the validation errors.
    fn errors_after(file: &str, edit: impl FnOnce(&mut Value)) -> Vec<String> {
        let crd = if file.starts_with("wnpp") {
            WorkloadNetworkPolicyProposal::crd()
        } else {
            WorkloadNetworkPolicy::crd()
        };
        let mut object = fixture_value(file);
        edit(&mut object);
        errors(&validator(&crd), &object)
    }

    fn set(object: &mut Value, pointer: &str, value: Value) {
        *object
            .pointer_mut(pointer)
            .unwrap_or_else(|| panic!("no {pointer}")) = value;
    }

    const ISTIO_PORT: &str = "/spec/istio/rules/0/to/0/operation/ports/0";

    #[test]
    fn fixtures_are_valid() {
        for file in [
            "wnpp-kubernetes.yaml",
            "wnpp-istio.yaml",
            "wnp-kubernetes.yaml",
            "wnp-istio.yaml",
        ] {
            assert_eq!(errors_after(file, |_| {}), Vec::<String>::new(), "{file}");
        }
    }

    #[test]
    fn root_fields_are_pinned_to_the_kind() {
        let wrong_kind = |o: &mut Value| set(o, "/kind", json!("WorkloadNetworkPolicy"));
        assert!(!errors_after("wnpp-istio.yaml", wrong_kind).is_empty());
        let old_version =
            |o: &mut Value| set(o, "/apiVersion", json!("networkenforcer.kubewarden.io/v1"));
        assert!(!errors_after("wnp-istio.yaml", old_version).is_empty());
        let no_spec = |o: &mut Value| {
            o.as_object_mut().unwrap().remove("spec");
        };
        assert!(!errors_after("wnp-istio.yaml", no_spec).is_empty());
    }

    #[test]
    fn enum_violations_are_refused() {
        for file in ["wnpp-kubernetes.yaml", "wnp-istio.yaml"] {
            assert!(!errors_after(file, |o| set(o, "/spec/backend", json!("foo"))).is_empty());
            assert!(
                !errors_after(file, |o| set(o, "/spec/targetRef/kind", json!("Job"))).is_empty()
            );
            assert!(
                !errors_after(file, |o| set(o, "/spec/direction", json!("ingress"))).is_empty()
            );
        }
        assert!(
            !errors_after("wnp-istio.yaml", |o| set(o, "/spec/mode", json!("enforce"))).is_empty()
        );
        let bad_record_mode = |o: &mut Value| set(o, "/status/violations/0/mode", json!("block"));
        assert!(!errors_after("wnp-istio.yaml", bad_record_mode).is_empty());
    }

    #[test]
    fn missing_required_fields_are_refused() {
        for field in ["targetRef", "backend", "direction"] {
            let errs = errors_after("wnpp-istio.yaml", |o| {
                o["spec"].as_object_mut().unwrap().remove(field);
            });
            assert!(errs.iter().any(|e| e.contains(field)), "{field}: {errs:?}");
        }
        let errs = errors_after("wnp-istio.yaml", |o| {
            o["spec"]["istio"]
                .as_object_mut()
                .unwrap()
                .remove("selector");
        });
        assert!(!errs.is_empty());
    }

    #[test]
    fn target_names_must_be_dns_subdomains() {
        let name = "/spec/targetRef/name";
        for bad in ["", "Api", "api_v2", "-api", "api.", &"a".repeat(254)] {
            let errs = errors_after("wnpp-kubernetes.yaml", |o| set(o, name, json!(bad)));
            assert!(!errs.is_empty(), "{bad:?} accepted");
        }
        for good in ["a", "api-v2", "api.v2.shop", &"a".repeat(253)] {
            let errs = errors_after("wnpp-kubernetes.yaml", |o| set(o, name, json!(good)));
            assert!(errs.is_empty(), "{good:?}: {errs:?}");
        }
    }

    #[test]
    fn istio_ports_must_be_a_port_or_range() {
        for bad in ["abc", "0", "65536", "80-", "-80", "80-90-100", " 80", "08"] {
            let errs = errors_after("wnp-istio.yaml", |o| set(o, ISTIO_PORT, json!(bad)));
            assert!(!errs.is_empty(), "{bad:?} accepted");
        }
        for good in ["1", "80", "65535", "1-65535", "9000-9100"] {
            let errs = errors_after("wnp-istio.yaml", |o| set(o, ISTIO_PORT, json!(good)));
            assert!(errs.is_empty(), "{good:?}: {errs:?}");
        }
    }

    #[test]
    fn int_or_string_and_nullable_are_understood() {
        let port = "/spec/kubernetes/ingress/0/ports/0/port";
        for good in [json!(8080), json!("http")] {
            assert!(errors_after("wnpp-kubernetes.yaml", |o| set(o, port, good)).is_empty());
        }
        assert!(!errors_after("wnpp-kubernetes.yaml", |o| set(o, port, json!(true))).is_empty());
        // `nullable` optional fields accept an explicit null; required ones do not.
        assert!(
            errors_after("wnpp-kubernetes.yaml", |o| o["spec"]["istio"] = Value::Null).is_empty()
        );
        assert!(
            !errors_after("wnpp-kubernetes.yaml", |o| set(
                o,
                "/spec/direction",
                Value::Null
            ))
            .is_empty()
        );
    }

    #[test]
    fn unknown_fields_and_oversized_status_are_refused() {
        let errs = errors_after("wnpp-kubernetes.yaml", |o| {
            o["spec"]["podselector"] = json!({})
        });
        assert!(!errs.is_empty(), "unknown spec field accepted");
        // Free-form maps stay free-form.
        let errs = errors_after("wnpp-kubernetes.yaml", |o| {
            o["spec"]["kubernetes"]["podSelector"]["matchLabels"]["tier"] = json!("web");
        });
        assert!(errs.is_empty(), "new label refused: {errs:?}");
        let errs = errors_after("wnp-istio.yaml", |o| {
            let record = o["status"]["violations"][0].clone();
            set(o, "/status/violations", Value::Array(vec![record; 101]));
        });
        assert!(!errs.is_empty(), "101 violations accepted");
        let errs = errors_after("wnp-istio.yaml", |o| {
            set(o, "/status/violations/0/port", json!(70000));
        });
        assert!(!errs.is_empty(), "port 70000 accepted");
    }

    #[test]
    fn converted_schema_has_no_kubernetes_extensions() {
        for crd in both_crds() {
            let text = validation_schema(&crd).to_string();
            assert!(!text.contains("x-kubernetes-"), "extension left in");
            assert!(!text.contains("\"nullable\""), "nullable left in");
        }
        let mut crd = WorkloadNetworkPolicy::crd();
        crd.spec.versions[0].served = false;
        assert_eq!(validation_schema(&crd), Value::Bool(false));
    }
}

mod summary {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn row(peer: &str, protocol: &str, port: i32, first: i64, last: i64) -> PeerEvidence {
        let t = |s| Time(Timestamp::from_second(s).unwrap());
        PeerEvidence {
            peer: peer.to_owned(),
            protocol: protocol.to_owned(),
            port,
            first_seen: t(first),
            last_seen: t(last),
            flow_count: 1,
            dns_name: None,
        }
    }

    #[test]
    fn the_summary_counts_peers_lists_ports_and_dates_the_newest_rows() {
        let mut status = WorkloadNetworkPolicyProposalStatus {
            peers: vec![
                row("pods:shop/app=web", "TCP", 8080, 100, 900),
                row("pods:shop/app=web", "TCP", 9090, 300, 400),
                row("ip:10.0.0.0/8", "UDP", 53, 200, 950),
                row("ip:10.0.0.0/8", "TCP", 8080, 150, 150),
                row("pods:shop/app=cron", "SCTP", 0, 50, 60),
            ],
            ..Default::default()
        };
        status.summarize();
        assert_eq!(status.peer_count, 3);
        assert_eq!(status.ports, "SCTP/*,TCP/8080,TCP/9090,UDP/53");
        assert_eq!(status.last_seen.unwrap().0.as_second(), 950);
        assert_eq!(status.last_learned.unwrap().0.as_second(), 300);
    }

    #[test]
    fn past_eight_ports_the_summary_counts_the_rest() {
        let mut status = WorkloadNetworkPolicyProposalStatus {
            peers: (1..=11)
                .map(|port| row("pods:shop/app=web", "TCP", port, 1, 1))
                .collect(),
            ..Default::default()
        };
        status.summarize();
        assert_eq!(
            status.ports,
            "TCP/1,TCP/2,TCP/3,TCP/4,TCP/5,TCP/6,TCP/7,TCP/8,+3"
        );
        assert_eq!(status.peer_count, 1);
        let mut empty = WorkloadNetworkPolicyProposalStatus::default();
        empty.summarize();
        assert_eq!(
            (empty.peer_count, empty.ports.as_str(), empty.last_seen),
            (0, "", None)
        );
    }
}
