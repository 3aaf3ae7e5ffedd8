//! The writing commands: the same label, field and annotation changes a user makes by hand,
//! each checked first so that a typo changes nothing and every refusal says what to do.

use anyhow::{Context, bail};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use ne_crds::{
    ACKNOWLEDGE_ANNOTATION_PREFIX, PROMOTE_LABEL, WorkloadNetworkPolicy,
    WorkloadNetworkPolicyProposal,
};
use serde_json::json;

/// Labels the proposal `networkenforcer.kubewarden.io/promote=<mode>`.
pub async fn promote(client: &Client, ns: &str, name: &str, mode: &str) -> anyhow::Result<()> {
    let api: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), ns);
    found(api.get_opt(name).await, "proposal", PROPOSALS, ns, name)?;
    let patch = json!({"metadata": {"labels": {PROMOTE_LABEL: mode}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| refused(e, "label", PROPOSALS, ns))?;
    println!(
        "workloadnetworkpolicyproposal/{name} labelled {PROMOTE_LABEL}={mode}: the leader \
         replaces it with a WorkloadNetworkPolicy of the same name in {mode} mode"
    );
    Ok(())
}

/// Sets the policy's `spec.mode`.
pub async fn set_mode(client: &Client, ns: &str, name: &str, mode: &str) -> anyhow::Result<()> {
    let api: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy = found(api.get_opt(name).await, "policy", POLICIES, ns, name)?;
    let current = match policy.spec.mode {
        ne_crds::Mode::Monitor => "monitor",
        ne_crds::Mode::Protect => "protect",
    };
    if current == mode {
        println!("workloadnetworkpolicy/{name} is already in {mode} mode");
        return Ok(());
    }
    let patch = json!({"spec": {"mode": mode}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| refused(e, "patch", POLICIES, ns))?;
    println!("workloadnetworkpolicy/{name} switched to {mode} mode");
    Ok(())
}

/// Writes one acknowledgement annotation per id, after checking that every id names an
/// active record: an unknown id writes nothing at all.
pub async fn acknowledge(
    client: &Client,
    ns: &str,
    name: &str,
    ids: &[i64],
    reason: &str,
) -> anyhow::Result<()> {
    if reason.trim().is_empty() {
        bail!("--reason must say why the traffic is expected");
    }
    let api: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy = found(api.get_opt(name).await, "policy", POLICIES, ns, name)?;
    let active: Vec<i64> = policy
        .status
        .iter()
        .flat_map(|s| &s.violations)
        .map(|r| r.id)
        .collect();
    let unknown: Vec<String> = ids
        .iter()
        .filter(|id| !active.contains(id))
        .map(ToString::to_string)
        .collect();
    if !unknown.is_empty() {
        let known = if active.is_empty() {
            "it has no active violation record".to_owned()
        } else {
            let list: Vec<String> = active.iter().map(ToString::to_string).collect();
            format!("its active records are {}", list.join(", "))
        };
        bail!(
            "workloadnetworkpolicy/{name} has no active violation {} ({known}); nothing was written",
            unknown.join(", ")
        );
    }
    let annotations: serde_json::Map<String, serde_json::Value> = ids
        .iter()
        .map(|id| {
            (
                format!("{ACKNOWLEDGE_ANNOTATION_PREFIX}{id}"),
                json!(reason),
            )
        })
        .collect();
    let patch = json!({"metadata": {"annotations": annotations}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| refused(e, "annotate", POLICIES, ns))?;
    let list: Vec<String> = ids.iter().map(ToString::to_string).collect();
    println!(
        "workloadnetworkpolicy/{name}: violation {} acknowledged; the leader moves the \
         records to status.acknowledgedViolations",
        list.join(", ")
    );
    Ok(())
}

const PROPOSALS: &str = "workloadnetworkpolicyproposals";
const POLICIES: &str = "workloadnetworkpolicies";

/// The object, or an error that says how to find the right name.
pub(crate) fn found<K: Resource>(
    got: Result<Option<K>, kube::Error>,
    what: &str,
    resource: &str,
    ns: &str,
    name: &str,
) -> anyhow::Result<K> {
    match got {
        Ok(Some(object)) => Ok(object),
        Ok(None) => bail!(
            "no {what} {name:?} in namespace {ns} (`kubectl get {resource} -n {ns}` lists \
             them; -n chooses another namespace)"
        ),
        Err(e) => Err(refused(e, "read", resource, ns))
            .with_context(|| format!("cannot read {what} {name}")),
    }
}

/// What to tell the user when the API server refuses a request.
fn refused(e: kube::Error, verb: &str, resource: &str, ns: &str) -> anyhow::Error {
    let can_i = if verb == "read" { "get" } else { "patch" };
    match &e {
        kube::Error::Api(status) if status.code == 403 => anyhow::anyhow!(
            "your permissions do not allow you to {verb} {resource} in namespace {ns} \
             (`kubectl auth can-i {can_i} {resource} -n {ns}`; the chart's aggregated roles \
             give namespace `edit` users these rights): {}",
            status.message
        ),
        kube::Error::Api(status) if status.code == 422 || status.code == 400 => {
            anyhow::anyhow!("the API server refused the change: {}", status.message)
        }
        _ => anyhow::anyhow!("cannot {verb} {resource} in namespace {ns}: {e}"),
    }
}
