//! `status`: one row per proposal and policy, sorted by namespace, workload and direction.

use std::io::{IsTerminal, Write};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use ne_crds::{Mode, PolicyDirection, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal};
use serde::Serialize;

use crate::Output;

/// One proposal or policy, as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub namespace: String,
    pub name: String,
    /// `proposal` or `policy`.
    pub kind: &'static str,
    /// `monitor` or `protect` (policies only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
    /// `<Kind>/<name>` of the workload.
    pub target: String,
    pub direction: &'static str,
    /// What was learned (proposals only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows: Option<i64>,
    /// When a peer, protocol or port was last learned: stable since then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stable_since: Option<Timestamp>,
    /// Violation records neither cleared nor acknowledged (policies only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_violations: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_violation: Option<Timestamp>,
    /// The `Ready` condition's reason (policies only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Conditions that need the user's attention, as `Type=Reason`.
    pub warnings: Vec<String>,
}

/// The rows of `namespace`, or of every namespace.
pub async fn rows(client: &Client, namespace: Option<&str>) -> anyhow::Result<Vec<Row>> {
    let proposals: Api<WorkloadNetworkPolicyProposal> = scoped(client, namespace);
    let policies: Api<WorkloadNetworkPolicy> = scoped(client, namespace);
    let where_ = namespace.map_or("any namespace".to_owned(), |ns| format!("namespace {ns}"));
    let list = |e: kube::Error, what: &str| match &e {
        kube::Error::Api(s) if s.code == 403 => anyhow::anyhow!(
            "your permissions do not allow you to list {what} in {where_} (`kubectl auth can-i \
             list {what}`): {}",
            s.message
        ),
        kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!(
            "the API server does not know {what}: is Network Enforcer installed (its CRDs)?"
        ),
        _ => anyhow::anyhow!("cannot list {what} in {where_}: {e}"),
    };
    let proposals = proposals
        .list(&ListParams::default())
        .await
        .map_err(|e| list(e, "workloadnetworkpolicyproposals"))?;
    let policies = policies
        .list(&ListParams::default())
        .await
        .map_err(|e| list(e, "workloadnetworkpolicies"))?;
    let mut rows: Vec<Row> = proposals
        .items
        .iter()
        .map(proposal_row)
        .chain(policies.items.iter().map(policy_row))
        .collect();
    rows.sort_by(|a, b| {
        (&a.namespace, &a.target, a.direction, a.kind, &a.name).cmp(&(
            &b.namespace,
            &b.target,
            b.direction,
            b.kind,
            &b.name,
        ))
    });
    Ok(rows)
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn direction(d: PolicyDirection) -> &'static str {
    match d {
        PolicyDirection::Ingress => "Ingress",
        PolicyDirection::Egress => "Egress",
    }
}

fn time(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

/// Conditions whose status is the worrying one for their type.
fn warnings(conditions: &[Condition]) -> Vec<String> {
    conditions
        .iter()
        .filter(|c| match c.type_.as_str() {
            "PeersResolved" | "ProtectSafe" => c.status == "False",
            "NativePolicyConflict" | "SharedIdentity" => c.status == "True",
            _ => false,
        })
        .map(|c| format!("{}={}", c.type_, c.reason))
        .collect()
}

fn proposal_row(p: &WorkloadNetworkPolicyProposal) -> Row {
    let status = p.status.clone().unwrap_or_default();
    Row {
        namespace: p.namespace().unwrap_or_default(),
        name: p.name_any(),
        kind: "proposal",
        mode: None,
        target: format!("{:?}/{}", p.spec.target_ref.kind, p.spec.target_ref.name),
        direction: direction(p.spec.direction),
        peers: Some(status.peer_count),
        ports: Some(status.ports.clone()),
        flows: Some(status.flow_count),
        stable_since: time(status.last_learned.as_ref()),
        active_violations: None,
        last_violation: None,
        ready: None,
        warnings: warnings(&status.conditions),
    }
}

fn policy_row(w: &WorkloadNetworkPolicy) -> Row {
    let status = w.status.clone().unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone());
    Row {
        namespace: w.namespace().unwrap_or_default(),
        name: w.name_any(),
        kind: "policy",
        mode: Some(match w.spec.mode {
            Mode::Monitor => "monitor",
            Mode::Protect => "protect",
        }),
        target: format!("{:?}/{}", w.spec.target_ref.kind, w.spec.target_ref.name),
        direction: direction(w.spec.direction),
        peers: None,
        ports: None,
        flows: None,
        stable_since: None,
        active_violations: Some(status.active_violation_count),
        last_violation: time(status.last_violation_time.as_ref()),
        ready: Some(ready.unwrap_or_else(|| "Pending".to_owned())),
        warnings: warnings(&status.conditions),
    }
}

/// Colours on a terminal only, and never with `NO_COLOR` set.
pub fn colour_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A duration as kubectl shows ages: `45s`, `12m`, `5h`, `3d`.
pub fn age(since: Timestamp, now: Timestamp) -> String {
    let secs = now.duration_since(since).as_secs().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Writes `rows` as a table, JSON (a list) or YAML.
pub fn write(
    out: &mut impl Write,
    rows: &[Row],
    output: Output,
    colour: bool,
) -> anyhow::Result<()> {
    match output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut *out, rows)?;
            writeln!(out)?;
        }
        Output::Yaml => write!(out, "{}", serde_saphyr::to_string(&rows)?)?,
        Output::Table => table(out, rows, Timestamp::now(), colour)?,
    }
    Ok(())
}

const HEADER: [&str; 14] = [
    "NAMESPACE",
    "NAME",
    "KIND",
    "MODE",
    "TARGET",
    "DIRECTION",
    "PEERS",
    "PORTS",
    "FLOWS",
    "STABLE",
    "VIOLATIONS",
    "LAST VIOLATION",
    "READY",
    "WARNINGS",
];

fn table(out: &mut impl Write, rows: &[Row], now: Timestamp, colour: bool) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "No proposals or policies found.");
    }
    let dash = || "-".to_owned();
    let cells: Vec<[String; 14]> = rows
        .iter()
        .map(|r| {
            [
                r.namespace.clone(),
                r.name.clone(),
                r.kind.to_owned(),
                r.mode.map_or_else(dash, str::to_owned),
                r.target.clone(),
                r.direction.to_owned(),
                r.peers.map_or_else(dash, |n| n.to_string()),
                r.ports
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(dash),
                r.flows.map_or_else(dash, |n| n.to_string()),
                r.stable_since.map_or_else(dash, |t| age(t, now)),
                r.active_violations.map_or_else(dash, |n| n.to_string()),
                r.last_violation
                    .map_or_else(dash, |t| format!("{} ago", age(t, now))),
                r.ready.clone().unwrap_or_else(dash),
                if r.warnings.is_empty() {
                    dash()
                } else {
                    r.warnings.join(",")
                },
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write,
                row: &[String],
                paint: &dyn Fn(usize, &str) -> Option<&'static str>| {
        let last = row.len() - 1;
        for (i, cell) in row.iter().enumerate() {
            let padded = if i == last {
                cell.clone()
            } else {
                format!("{cell:<width$}   ", width = widths[i])
            };
            match paint(i, cell).filter(|_| colour) {
                Some(code) => write!(out, "\x1b[{code}m{padded}\x1b[0m")?,
                None => write!(out, "{padded}")?,
            }
        }
        writeln!(out)
    };
    let header: Vec<String> = HEADER.iter().map(|h| (*h).to_owned()).collect();
    line(out, &header, &|_, _| None)?;
    for row in &cells {
        line(out, row, &|i, cell| match i {
            10 if cell != "0" && cell != "-" => Some("31"),
            13 if cell != "-" => Some("33"),
            _ => None,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
