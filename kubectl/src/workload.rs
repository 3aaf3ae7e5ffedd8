//! A workload's pods as its object says: the pod selector and the template's labels (a Pod's
//! own labels), read with the user's permissions. What `explain` and `diff` evaluate with.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{Api, Client};

/// The kinds [`pods_of`] reads.
pub const KINDS: [&str; 4] = ["Deployment", "StatefulSet", "DaemonSet", "Pod"];

/// What a workload says of its pods.
#[derive(Clone, Debug, Default)]
pub struct Pods {
    /// Its `spec.selector` (none for a Pod).
    pub selector: Option<LabelSelector>,
    pub labels: BTreeMap<String, String>,
}

fn from_template(selector: LabelSelector, template: PodTemplateSpec) -> Pods {
    Pods {
        selector: Some(selector),
        labels: template.metadata.and_then(|m| m.labels).unwrap_or_default(),
    }
}

/// The pods of `kind` `ns/name` (one of [`KINDS`]); `None` when there is no such object.
pub async fn pods_of(
    client: &Client,
    ns: &str,
    kind: &str,
    name: &str,
) -> Result<Option<Pods>, kube::Error> {
    let client = client.clone();
    Ok(match kind {
        "Deployment" => Api::<Deployment>::namespaced(client, ns)
            .get_opt(name)
            .await?
            .and_then(|o| o.spec)
            .map(|s| from_template(s.selector, s.template)),
        "StatefulSet" => Api::<StatefulSet>::namespaced(client, ns)
            .get_opt(name)
            .await?
            .and_then(|o| o.spec)
            .map(|s| from_template(s.selector, s.template)),
        "DaemonSet" => Api::<DaemonSet>::namespaced(client, ns)
            .get_opt(name)
            .await?
            .and_then(|o| o.spec)
            .map(|s| from_template(s.selector, s.template)),
        "Pod" => Api::<Pod>::namespaced(client, ns)
            .get_opt(name)
            .await?
            .map(|p| Pods {
                selector: None,
                labels: p.metadata.labels.unwrap_or_default(),
            }),
        _ => None,
    })
}
