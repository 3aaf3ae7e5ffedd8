//! `diff <name>`: what promoting a proposal (or what a policy) changes next to the native
//! policies that already select the workload's pods, hand-written ones included.
//!
//! Native policies add up: what any of them allows stays allowed. So each rule of the
//! object, taken peer by peer and port by port, is either already allowed by one of them or
//! new; and protect mode removes something only where no native policy selects the pods for
//! the direction yet (then every connection the rules do not allow). For a policy, its
//! active violation records are what learning has seen since promotion that it does not
//! allow. Every comparison uses the policy engine the leader uses (`ne_policy::eval`).

use std::net::IpAddr;

use anyhow::{Context, bail};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Api, Client};
use ne_crds::{
    AuthorizationPolicy, Backend, IstioAuthorizationPolicySpec, PolicyDirection, TargetRef,
    ViolationRecord, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
};
use ne_flow::flow::{Direction, Protocol, Str};
use ne_policy::allowlist::NAMESPACE_NAME_LABEL;
use ne_policy::eval::{FlowView, PeerView, istio, netpol, selector};
use serde::Serialize;

/// The object compared, in the form both kinds share.
#[derive(Clone, Debug)]
pub struct Subject {
    /// `workloadnetworkpolicyproposal` or `workloadnetworkpolicy`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub backend: Backend,
    pub direction: PolicyDirection,
    pub target: TargetRef,
    pub kubernetes: Option<k8s_openapi::api::networking::v1::NetworkPolicySpec>,
    pub istio: Option<IstioAuthorizationPolicySpec>,
    /// A policy's active violation records.
    pub violations: Vec<ViolationRecord>,
}

/// One peer and port of a rule, against the native policies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// Where it is: `spec.kubernetes.ingress[0]`.
    pub rule: String,
    pub peer: String,
    pub port: String,
    /// `new`, `allowed` (by `by`) or `notCompared` (with `why`).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diff {
    pub object: String,
    pub target: String,
    pub direction: &'static str,
    /// The native policies that select the pods for the direction (not the object's own).
    pub native: Vec<String>,
    pub entries: Vec<Entry>,
    /// What protect mode takes away, in words.
    pub removes: String,
    /// A policy's active violations: seen since promotion, not allowed.
    pub seen_not_allowed: Vec<ViolationRecord>,
}

fn direction_str(d: PolicyDirection) -> &'static str {
    match d {
        PolicyDirection::Ingress => "ingress",
        PolicyDirection::Egress => "egress",
    }
}

/// Compares `subject`, whose target's pods carry `labels`, with `network_policies` and
/// `authorization_policies` of its namespace.
pub fn diff(
    subject: &Subject,
    labels: &[(String, String)],
    network_policies: &[NetworkPolicy],
    authorization_policies: &[AuthorizationPolicy],
) -> Diff {
    let direction = direction_str(subject.direction);
    let labels: Vec<(Str, Str)> = labels
        .iter()
        .map(|(k, v)| (Str::from(k.as_str()), Str::from(v.as_str())))
        .collect();
    let own = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| Some(&o.uid) == subject.uid.as_ref())
    };
    // The native policies that restrict the pods in this direction.
    let nps: Vec<&NetworkPolicy> = network_policies
        .iter()
        .filter(|np| !own(&np.metadata))
        .filter(|np| {
            np.spec.as_ref().is_some_and(|s| {
                let selects = s
                    .pod_selector
                    .as_ref()
                    .map_or(Ok(true), |sel| selector::matches(sel, &labels))
                    .unwrap_or(false);
                selects && netpol::restricts(s, flow_direction(subject.direction))
            })
        })
        .collect();
    let aps: Vec<&AuthorizationPolicy> = if subject.direction == PolicyDirection::Ingress {
        authorization_policies
            .iter()
            .filter(|ap| !own(&ap.metadata))
            .filter(|ap| {
                ap.spec.selector.as_ref().is_none_or(|s| {
                    s.match_labels
                        .iter()
                        .all(|(k, v)| labels.iter().any(|(lk, lv)| **lk == **k && **lv == **v))
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut native: Vec<String> = nps
        .iter()
        .map(|np| {
            format!(
                "NetworkPolicy {}",
                np.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    native.extend(aps.iter().map(|ap| {
        format!(
            "AuthorizationPolicy {} ({})",
            ap.metadata.name.clone().unwrap_or_default(),
            ap.spec.action.as_deref().unwrap_or("ALLOW")
        )
    }));

    let entries = match subject.backend {
        Backend::Kubernetes => kubernetes_entries(subject, &nps),
        Backend::Istio => istio_entries(subject, &aps),
    };
    let istio_egress =
        subject.backend == Backend::Istio && subject.direction == PolicyDirection::Egress;
    let removes = if istio_egress {
        "nothing: ztunnel does not authorize outbound connections".to_owned()
    } else if native.is_empty() {
        format!(
            "every {direction} connection these rules do not allow: today no native policy \
             restricts the pods' {direction}"
        )
    } else {
        format!(
            "nothing: the native policies above restrict the pods' {direction} already, and \
             policies add up (this one can only allow more)"
        )
    };
    Diff {
        object: format!("{}/{}", subject.namespace, subject.name),
        target: format!("{:?}/{}", subject.target.kind, subject.target.name),
        direction,
        native,
        entries,
        removes,
        seen_not_allowed: subject.violations.clone(),
    }
}

fn flow_direction(d: PolicyDirection) -> Direction {
    match d {
        PolicyDirection::Ingress => Direction::Ingress,
        PolicyDirection::Egress => Direction::Egress,
    }
}

/// The pods a NetworkPolicy peer names, as labels a flow can carry: `None` (with why) when
/// they cannot be (expressions, a namespace selected by other labels than its name).
type PeerPods = (String, Vec<(Str, Str)>, Vec<(Str, Str)>);

fn peer_pods(peer: &NetworkPolicyPeer, own_namespace: &str) -> Result<PeerPods, String> {
    let plain = |s: &LabelSelector| -> Result<Vec<(Str, Str)>, String> {
        if s.match_expressions.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err("a selector with expressions".to_owned());
        }
        Ok(s.match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (Str::from(k.as_str()), Str::from(v.as_str())))
            .collect())
    };
    let namespace = match &peer.namespace_selector {
        None => own_namespace.to_owned(),
        Some(s) => {
            let labels = plain(s)?;
            match labels.iter().find(|(k, _)| &**k == NAMESPACE_NAME_LABEL) {
                Some((_, v)) if labels.len() == 1 => v.to_string(),
                _ => return Err("namespaces chosen by labels other than their name".to_owned()),
            }
        }
    };
    let pods = peer
        .pod_selector
        .as_ref()
        .map(plain)
        .transpose()?
        .unwrap_or_default();
    let ns_labels = vec![(
        Str::from(NAMESPACE_NAME_LABEL),
        Str::from(namespace.as_str()),
    )];
    Ok((namespace, pods, ns_labels))
}

fn describe_peer(peer: &NetworkPolicyPeer) -> String {
    if let Some(block) = &peer.ip_block {
        return format!("ip {}", block.cidr);
    }
    let pods = peer
        .pod_selector
        .as_ref()
        .map_or("all pods".to_owned(), |s| {
            format!("pods {}", selector::format(s))
        });
    match &peer.namespace_selector {
        None => pods,
        Some(s) => format!("{} in namespaces {}", pods, selector::format(s)),
    }
}

/// A rule's peers and ports (`None`: any).
type RuleParts = (
    Option<Vec<NetworkPolicyPeer>>,
    Option<Vec<NetworkPolicyPort>>,
);

fn kubernetes_entries(subject: &Subject, nps: &[&NetworkPolicy]) -> Vec<Entry> {
    let Some(spec) = &subject.kubernetes else {
        return Vec::new();
    };
    let (path, rules): (&str, Vec<RuleParts>) = match subject.direction {
        PolicyDirection::Ingress => (
            "spec.kubernetes.ingress",
            spec.ingress
                .iter()
                .flatten()
                .map(|r| (r.from.clone(), r.ports.clone()))
                .collect(),
        ),
        PolicyDirection::Egress => (
            "spec.kubernetes.egress",
            spec.egress
                .iter()
                .flatten()
                .map(|r| (r.to.clone(), r.ports.clone()))
                .collect(),
        ),
    };
    let mut entries = Vec::new();
    for (i, (peers, ports)) in rules.iter().enumerate() {
        let rule = format!("{path}[{i}]");
        let peers = peers.clone().filter(|p| !p.is_empty());
        let ports = ports.clone().filter(|p| !p.is_empty());
        let peer_list: Vec<Option<NetworkPolicyPeer>> =
            peers.map_or(vec![None], |p| p.into_iter().map(Some).collect());
        let port_list: Vec<Option<NetworkPolicyPort>> =
            ports.map_or(vec![None], |p| p.into_iter().map(Some).collect());
        for peer in &peer_list {
            for port in &port_list {
                entries.push(kubernetes_entry(
                    subject,
                    &rule,
                    peer.as_ref(),
                    port.as_ref(),
                    nps,
                ));
            }
        }
    }
    entries
}

fn kubernetes_entry(
    subject: &Subject,
    rule: &str,
    peer: Option<&NetworkPolicyPeer>,
    port: Option<&NetworkPolicyPort>,
    nps: &[&NetworkPolicy],
) -> Entry {
    let peer_text = peer.map_or("any peer".to_owned(), describe_peer);
    let port_text = port.map_or("any port".to_owned(), |p| {
        let protocol = p.protocol.as_deref().unwrap_or("TCP");
        match (&p.port, p.end_port) {
            (Some(IntOrString::Int(n)), Some(end)) => format!("{protocol}/{n}-{end}"),
            (Some(IntOrString::Int(n)), None) => format!("{protocol}/{n}"),
            (Some(IntOrString::String(s)), _) => format!("{protocol}/{s}"),
            (None, _) => format!("{protocol}/any"),
        }
    });
    let entry = |status, by: Vec<String>, why: Option<String>| Entry {
        rule: rule.to_owned(),
        peer: peer_text.clone(),
        port: port_text.clone(),
        status,
        by,
        why,
    };
    let not_compared = |why: &str| entry("notCompared", Vec::new(), Some(why.to_owned()));
    // The flow this peer and port stand for.
    let (protocol, number) = match port {
        None => return not_compared("a rule for any port"),
        Some(p) => match &p.port {
            Some(IntOrString::Int(n)) if p.end_port.is_none() => (
                Protocol::parse(p.protocol.as_deref().unwrap_or("TCP")),
                u16::try_from(*n).unwrap_or(0),
            ),
            Some(IntOrString::Int(_)) => return not_compared("a port range"),
            Some(IntOrString::String(_)) => return not_compared("a named port"),
            None => return not_compared("a rule for any port"),
        },
    };
    let pods;
    let (view, ip) = match peer {
        None => return not_compared("a rule for any peer"),
        Some(p) => match &p.ip_block {
            Some(block) => {
                let Some(ip) = block
                    .cidr
                    .split('/')
                    .next()
                    .and_then(|a| a.parse::<IpAddr>().ok())
                else {
                    return not_compared("an ipBlock that does not parse");
                };
                (PeerView::External, Some(ip))
            }
            None => match peer_pods(p, &subject.namespace) {
                Err(why) => return not_compared(&why),
                Ok(found) => {
                    pods = found;
                    (
                        PeerView::Pod {
                            namespace: &pods.0,
                            labels: &pods.1,
                            namespace_labels: &pods.2,
                        },
                        None,
                    )
                }
            },
        },
    };
    let flow = FlowView {
        direction: flow_direction(subject.direction),
        peer: view,
        peer_ip: ip,
        peer_identity: None,
        protocol,
        port: number,
        named_ports: &[],
    };
    let by: Vec<String> = nps
        .iter()
        .filter(|np| {
            np.spec
                .as_ref()
                .is_some_and(|s| netpol::evaluate(s, &subject.namespace, &flow).is_allowed())
        })
        .map(|np| {
            format!(
                "NetworkPolicy {}",
                np.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    if by.is_empty() {
        entry("new", by, None)
    } else {
        entry("allowed", by, None)
    }
}

/// Each of `items`, or one `None` (any) when there is none.
fn or_any<'a>(items: impl Iterator<Item = &'a String>) -> Vec<Option<&'a str>> {
    let all: Vec<Option<&str>> = items.map(|s| Some(s.as_str())).collect();
    if all.is_empty() { vec![None] } else { all }
}

fn istio_entries(subject: &Subject, aps: &[&AuthorizationPolicy]) -> Vec<Entry> {
    let Some(spec) = &subject.istio else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let principals = or_any(rule.from.iter().flat_map(|f| &f.source.principals));
        let ports = or_any(rule.to.iter().flat_map(|t| &t.operation.ports));
        for principal in &principals {
            for port in &ports {
                let mut entry = Entry {
                    rule: format!("spec.istio.rules[{i}]"),
                    peer: principal
                        .map_or("any principal".to_owned(), |p| format!("principal {p}")),
                    port: port.map_or("any port".to_owned(), |p| format!("TCP/{p}")),
                    status: "notCompared",
                    by: Vec::new(),
                    why: None,
                };
                let number = port.and_then(|p| p.parse::<u16>().ok());
                match (principal, number) {
                    (Some(principal), Some(number)) if !principal.contains('*') => {
                        let flow = FlowView {
                            direction: Direction::Ingress,
                            peer: PeerView::Unknown,
                            peer_ip: None,
                            peer_identity: Some(principal),
                            protocol: Protocol::Tcp,
                            port: number,
                            named_ports: &[],
                        };
                        entry.by = aps
                            .iter()
                            .filter(|ap| ap.spec.action.as_deref().unwrap_or("ALLOW") == "ALLOW")
                            .filter(|ap| {
                                let spec = IstioAuthorizationPolicySpec {
                                    selector: LabelSelector::default(),
                                    rules: ap.spec.rules.clone(),
                                };
                                istio::evaluate(&spec, &flow).is_allowed()
                            })
                            .map(|ap| {
                                format!(
                                    "AuthorizationPolicy {}",
                                    ap.metadata.name.clone().unwrap_or_default()
                                )
                            })
                            .collect();
                        entry.status = if entry.by.is_empty() {
                            "new"
                        } else {
                            "allowed"
                        };
                    }
                    _ => entry.why = Some("a wildcard, a port range or any port".to_owned()),
                }
                entries.push(entry);
            }
        }
    }
    entries
}

/// Reads proposal or policy `name` (a proposal first; `wnpp/NAME` or `wnp/NAME` choose), its
/// target's pod labels and the native policies of its namespace, and compares them.
pub async fn fetch(client: &Client, ns: &str, name: &str) -> anyhow::Result<Diff> {
    let (kind, name) = match name.split_once('/') {
        Some((k, n)) => (Some(k), n),
        None => (None, name),
    };
    let want_proposal = matches!(kind, None | Some("wnpp" | "workloadnetworkpolicyproposal"));
    let want_policy = matches!(kind, None | Some("wnp" | "workloadnetworkpolicy"));
    if !want_proposal && !want_policy {
        bail!("{kind:?} is neither wnpp nor wnp");
    }
    let mut subject = None;
    if want_proposal {
        let api: Api<WorkloadNetworkPolicyProposal> = Api::namespaced(client.clone(), ns);
        if let Some(p) = api.get_opt(name).await.context("cannot read proposals")? {
            subject = Some(Subject {
                kind: "workloadnetworkpolicyproposal",
                namespace: ns.to_owned(),
                name: name.to_owned(),
                uid: p.metadata.uid.clone(),
                backend: p.spec.backend,
                direction: p.spec.direction,
                target: p.spec.target_ref.clone(),
                kubernetes: p.spec.kubernetes.clone(),
                istio: p.spec.istio.clone(),
                violations: Vec::new(),
            });
        }
    }
    if subject.is_none() && want_policy {
        let api: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), ns);
        if let Some(w) = api.get_opt(name).await.context("cannot read policies")? {
            subject = Some(Subject {
                kind: "workloadnetworkpolicy",
                namespace: ns.to_owned(),
                name: name.to_owned(),
                uid: w.metadata.uid.clone(),
                backend: w.spec.backend,
                direction: w.spec.direction,
                target: w.spec.target_ref.clone(),
                kubernetes: w.spec.kubernetes.clone(),
                istio: w.spec.istio.clone(),
                violations: w.status.map(|s| s.violations).unwrap_or_default(),
            });
        }
    }
    let Some(subject) = subject else {
        bail!(
            "no proposal or policy {name:?} in namespace {ns} (`kubectl netenforcer status -n \
             {ns}` lists them; -n chooses another namespace)"
        );
    };
    let labels = target_labels(client, ns, &subject.target).await?;
    let network_policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list NetworkPolicies in {ns}: {e}"))?
        .items;
    let authorization_policies = match Api::<AuthorizationPolicy>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
    {
        Ok(list) => list.items,
        // Istio is not installed: there are none.
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => bail!("cannot list AuthorizationPolicies in {ns}: {e}"),
    };
    let mut d = diff(
        &subject,
        &labels,
        &network_policies,
        &authorization_policies,
    );
    d.object = format!("{} {}", subject.kind, d.object);
    Ok(d)
}

/// The labels of the target's pods (its pod template's).
async fn target_labels(
    client: &Client,
    ns: &str,
    target: &TargetRef,
) -> anyhow::Result<Vec<(String, String)>> {
    let kind = format!("{:?}", target.kind);
    let name = target.name.as_str();
    let pods = crate::workload::pods_of(client, ns, &kind, name)
        .await
        .map_err(|e| {
            anyhow::anyhow!("cannot read {kind} {ns}/{name}, whose pods are compared: {e}")
        })?;
    let Some(pods) = pods else {
        bail!("{kind} {ns}/{name} does not exist: there are no pods to compare");
    };
    Ok(pods.labels.into_iter().collect())
}

/// The comparison for a terminal.
pub fn write_text(out: &mut impl std::io::Write, d: &Diff) -> anyhow::Result<()> {
    writeln!(out, "{} ({}, {})", d.object, d.target, d.direction)?;
    if d.native.is_empty() {
        writeln!(
            out,
            "No native policy selects these pods for {} today.",
            d.direction
        )?;
    } else {
        writeln!(
            out,
            "Native policies that select these pods for {}: {}",
            d.direction,
            d.native.join(", ")
        )?;
    }
    writeln!(out)?;
    for e in &d.entries {
        let (mark, said) = match e.status {
            "new" => ("+", "new: allowed only by this policy".to_owned()),
            "allowed" => ("=", format!("already allowed by {}", e.by.join(", "))),
            _ => (
                "?",
                format!("not compared: {}", e.why.as_deref().unwrap_or("")),
            ),
        };
        writeln!(out, "{mark} {}  {} {}  {said}", e.rule, e.peer, e.port)?;
    }
    writeln!(out)?;
    writeln!(out, "Protect mode removes: {}", d.removes)?;
    if !d.seen_not_allowed.is_empty() {
        writeln!(
            out,
            "Seen since promotion and not allowed ({} active violations):",
            d.seen_not_allowed.len()
        )?;
        for r in &d.seen_not_allowed {
            let peer = match r.direction {
                PolicyDirection::Ingress => &r.source,
                PolicyDirection::Egress => &r.destination,
            };
            writeln!(
                out,
                "  #{} {}/{} {} ({} flows)",
                r.id,
                r.protocol,
                r.port,
                crate::explain::describe(peer),
                r.count
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
