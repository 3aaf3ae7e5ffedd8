//! The Helm chart against a real API server: the project's control plane
//! (`tests/control-plane/up`, started on first use) or the cluster `NE_TEST_KUBECONFIG`
//! names. Rendered with the real helm binary (`chart/helm.rs`).
//!
//! - The aggregated roles let a namespace `edit` user promote and acknowledge and a `view`
//!   user only read (SubjectAccessReviews).

#[path = "chart/helm.rs"]
mod chart_helm;
#[path = "chart/support.rs"]
mod chart_support;
mod cluster;

use chart_helm::{RELEASE, matrix_values};
use chart_support::{Case, NAMESPACE};
use serde_json::{Value, json};

/// `helm template` of `values` as release `release` in `namespace`, parsed.
fn render(release: &str, namespace: &str, name: &str, values: &Value) -> Case {
    let manifests = chart_helm::template(release, namespace, name, values)
        .unwrap_or_else(|e| panic!("{name}: helm template failed:\n{e}"));
    Case::parse(name, &manifests, String::new())
}

/// Against a real API server: the chart's ClusterRoles, aggregated by the cluster into the
/// built-in `view` and `edit` roles, let a namespace `edit` user promote a proposal (patch),
/// change and acknowledge a policy (patch) and delete it, and a `view` user only read.
/// Answered by SubjectAccessReviews for ServiceAccounts bound in a temporary namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_edit_users_promote_and_acknowledge_and_view_users_only_read() {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    use kube::Api;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    /// Deletes the ClusterRoles the test applied, whatever happens.
    struct Installed(Api<ClusterRole>, Vec<&'static str>);
    impl Drop for Installed {
        fn drop(&mut self) {
            let (api, names) = (self.0.clone(), std::mem::take(&mut self.1));
            cluster::in_drop(async move {
                for name in names {
                    let _ = api.delete(name, &DeleteParams::default()).await;
                }
            });
        }
    }

    let client = cluster::client().await;
    let case = render(
        RELEASE,
        NAMESPACE,
        "cilium-none",
        &matrix_values("cilium", "none"),
    );
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let mut installed = Installed(roles.clone(), Vec::new());
    for name in ["ne-view", "ne-edit"] {
        let role: ClusterRole =
            serde_json::from_value(case.get("ClusterRole", name).clone()).unwrap();
        roles
            .patch(
                name,
                &PatchParams::apply("ne-e2e").force(),
                &Patch::Apply(&role),
            )
            .await
            .unwrap();
        installed.1.push(name);
    }
    let ns = cluster::TempNamespace::new(&client, "ne-e2e-rbac").await;
    let ns_name = ns.name.clone();
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns_name);
    for (user, role) in [("editor", "edit"), ("viewer", "view")] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": user, "namespace": ns_name}],
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let allowed = |user: &'static str, verb: &'static str, resource: &'static str| {
        let reviews = reviews.clone();
        let ns_name = ns_name.clone();
        async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(format!("system:serviceaccount:{ns_name}:{user}")),
                    groups: Some(vec!["system:serviceaccounts".to_owned()]),
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(ns_name.clone()),
                        group: Some(ne_crds::GROUP.to_owned()),
                        resource: Some(resource.to_owned()),
                        verb: Some(verb.to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SubjectAccessReviewSpec::default()
                },
                ..SubjectAccessReview::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .unwrap();
            answer.status.is_some_and(|s| s.allowed)
        }
    };
    let (wnpp, wnp) = ("workloadnetworkpolicyproposals", "workloadnetworkpolicies");
    // Aggregation is asynchronous (the cluster-role aggregation controller): poll.
    cluster::eventually(
        "the chart's roles aggregated into the built-in edit and view roles",
        || async {
            (allowed("editor", "patch", wnpp).await && allowed("viewer", "list", wnp).await)
                .then_some(())
        },
    )
    .await;
    for (verb, resource) in [
        ("get", wnpp),
        ("list", wnpp),
        ("patch", wnpp),
        ("get", wnp),
        ("patch", wnp),
        ("delete", wnp),
    ] {
        assert!(
            allowed("editor", verb, resource).await,
            "editor {verb} {resource}"
        );
    }
    for (verb, resource) in [("get", wnpp), ("list", wnpp), ("watch", wnp), ("get", wnp)] {
        assert!(
            allowed("viewer", verb, resource).await,
            "viewer {verb} {resource}"
        );
    }
    for (verb, resource) in [
        ("patch", wnpp),
        ("update", wnpp),
        ("patch", wnp),
        ("delete", wnp),
        ("create", wnp),
    ] {
        assert!(
            !allowed("viewer", verb, resource).await,
            "viewer may not {verb} {resource}"
        );
    }
    // Only the leader creates proposals.
    assert!(!allowed("editor", "create", wnpp).await);
}
