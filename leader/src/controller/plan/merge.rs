//! Learning only adds: a proposal is the union of what it already holds (written by an
//! earlier leader, kept across restarts and agent expiry) and what the edge index holds now.
//! Existing rules keep their place; a known peer gains the new ports; a new peer is a new
//! rule at the end. Merging the same learned content twice changes nothing.

use k8s_openapi::api::networking::v1::{
    NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use ne_crds::{
    IstioAuthorizationPolicySpec, IstioRule, WorkloadNetworkPolicyProposalSpec,
    WorkloadNetworkPolicyProposalStatus,
};

/// The union of `existing` and `learned` (same backend, target and direction). The pod
/// selector follows the workload's current one, as `learned` carries it.
pub fn merge_spec(
    existing: &WorkloadNetworkPolicyProposalSpec,
    learned: &WorkloadNetworkPolicyProposalSpec,
) -> WorkloadNetworkPolicyProposalSpec {
    let mut merged = learned.clone();
    merged.kubernetes = match (&existing.kubernetes, &learned.kubernetes) {
        (Some(old), Some(new)) => Some(merge_network_policy(old, new)),
        (_, new) => new.clone(),
    };
    merged.istio = match (&existing.istio, &learned.istio) {
        (Some(old), Some(new)) => Some(merge_istio(old, new)),
        (_, new) => new.clone(),
    };
    merged
}

fn merge_network_policy(old: &NetworkPolicySpec, new: &NetworkPolicySpec) -> NetworkPolicySpec {
    let mut merged = new.clone();
    merged.ingress = merge_rules(
        old.ingress.as_deref(),
        new.ingress.as_deref(),
        |r: &NetworkPolicyIngressRule| (&r.from, &r.ports),
        |r: &mut NetworkPolicyIngressRule| &mut r.ports,
    );
    merged.egress = merge_rules(
        old.egress.as_deref(),
        new.egress.as_deref(),
        |r: &NetworkPolicyEgressRule| (&r.to, &r.ports),
        |r: &mut NetworkPolicyEgressRule| &mut r.ports,
    );
    merged
}

type PeersAndPorts<'a> = (
    &'a Option<Vec<NetworkPolicyPeer>>,
    &'a Option<Vec<NetworkPolicyPort>>,
);

/// Rules are matched by their peer list; ports of a matched rule are united.
fn merge_rules<R: Clone>(
    old: Option<&[R]>,
    new: Option<&[R]>,
    parts: impl Fn(&R) -> PeersAndPorts<'_>,
    ports_mut: impl Fn(&mut R) -> &mut Option<Vec<NetworkPolicyPort>>,
) -> Option<Vec<R>> {
    if old.is_none() && new.is_none() {
        return None;
    }
    let mut merged: Vec<R> = old.unwrap_or_default().to_vec();
    for rule in new.unwrap_or_default() {
        let (peers, ports) = parts(rule);
        match merged.iter().position(|m| parts(m).0 == peers) {
            Some(i) => {
                let target = ports_mut(&mut merged[i]);
                // A rule without ports allows every port: nothing to add.
                if let (Some(have), Some(add)) = (target.as_mut(), ports) {
                    for port in add {
                        if !have.contains(port) {
                            have.push(port.clone());
                        }
                    }
                }
            }
            None => merged.push(rule.clone()),
        }
    }
    Some(merged)
}

fn merge_istio(
    old: &IstioAuthorizationPolicySpec,
    new: &IstioAuthorizationPolicySpec,
) -> IstioAuthorizationPolicySpec {
    let mut rules: Vec<IstioRule> = old.rules.clone();
    for rule in &new.rules {
        match rules.iter_mut().find(|r| r.from == rule.from) {
            Some(have) => {
                let add = rule.to.iter().flat_map(|t| &t.operation.ports);
                let missing: Vec<String> = add
                    .filter(|p| !have.to.iter().any(|t| t.operation.ports.contains(p)))
                    .cloned()
                    .collect();
                // A rule without `to`, or an operation without ports, allows every port:
                // nothing to add.
                let every_port =
                    have.to.is_empty() || have.to.iter().any(|t| t.operation.ports.is_empty());
                if !every_port {
                    have.to[0].operation.ports.extend(missing);
                }
            }
            None => rules.push(rule.clone()),
        }
    }
    IstioAuthorizationPolicySpec {
        selector: new.selector.clone(),
        rules,
    }
}

/// The union of the evidence: rows by (peer, protocol, port), first seen the earliest, last
/// seen the latest, flow count the larger (an index rebuilt after a failover or an agent's
/// expiry counts again from its agents' tables, so counts are "at least", never summed
/// twice). Conditions are left to the caller.
pub fn merge_status(
    existing: Option<&WorkloadNetworkPolicyProposalStatus>,
    learned: &WorkloadNetworkPolicyProposalStatus,
) -> WorkloadNetworkPolicyProposalStatus {
    let Some(old) = existing else {
        return learned.clone();
    };
    let mut peers = old.peers.clone();
    for row in &learned.peers {
        match peers
            .iter_mut()
            .find(|p| (&p.peer, &p.protocol, p.port) == (&row.peer, &row.protocol, row.port))
        {
            Some(p) => {
                if row.first_seen.0 < p.first_seen.0 {
                    p.first_seen = row.first_seen.clone();
                }
                if row.last_seen.0 > p.last_seen.0 {
                    p.last_seen = row.last_seen.clone();
                }
                p.flow_count = p.flow_count.max(row.flow_count);
                if row.dns_name.is_some() {
                    p.dns_name = row.dns_name.clone();
                }
            }
            None => peers.push(row.clone()),
        }
    }
    let learning_since = match (&old.learning_since, &learned.learning_since) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b.clone() } else { a.clone() }),
        (a, b) => a.clone().or_else(|| b.clone()),
    };
    let mut status = WorkloadNetworkPolicyProposalStatus {
        learning_since,
        conditions: old.conditions.clone(),
        flow_count: peers.iter().map(|p| p.flow_count).sum(),
        peers,
        ..WorkloadNetworkPolicyProposalStatus::default()
    };
    status.summarize();
    status
}
