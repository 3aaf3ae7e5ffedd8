//! `explain <wnp> <id>`: why a violation record is one. Each rule of the record's direction
//! is evaluated alone against the record's flow, with the policy engine the leader uses
//! (`ne_policy::eval`), so the answer says which rules admit the peer, which admit the port,
//! which one came nearest, and the exact rule that would allow the flow, as YAML to paste.
//!
//! The record names the peer's workload; its pods' labels and selector come from that
//! workload (read with the user's permissions). When it cannot be read, the peer is
//! evaluated as unknown (only rules open to every peer, or to its address, admit it) and
//! the explanation says so.

use std::net::IpAddr;

use anyhow::{Context, bail};
use k8s_openapi::api::networking::v1::{
    NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use ne_crds::{
    Backend, IstioAuthorizationPolicySpec, IstioFrom, IstioOperation, IstioRule, IstioSource,
    IstioTo, PolicyDirection, ViolationRecord, WorkloadEndpointRef, WorkloadNetworkPolicy,
};
use ne_flow::flow::{Direction, Protocol, Str};
use ne_policy::allowlist::{NAMESPACE_NAME_LABEL, PeerKey, SelectorKey};
use ne_policy::eval::{self, Decision, DenyReason, FlowView, PeerView, PolicyRef};
use serde::Serialize;

/// What is known of the peer's pods besides the record.
#[derive(Clone, Debug, Default)]
pub struct PeerFacts {
    /// The peer workload's pod selector (its `spec.selector`), for the rule to add.
    pub selector: Option<LabelSelector>,
    /// Its pods' labels (the pod template's).
    pub labels: Vec<(String, String)>,
    /// Its namespace's labels (at least `kubernetes.io/metadata.name`).
    pub namespace_labels: Vec<(String, String)>,
    /// What could not be learned, in words.
    pub notes: Vec<String>,
}

/// How one rule fares against the flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleVerdict {
    /// Its index in the direction's rule list.
    pub index: usize,
    /// The rule as the policy has it.
    pub rule: serde_json::Value,
    /// It admits the peer.
    pub peer: bool,
    /// It admits the port (over some protocol, when `protocol` is false).
    pub port: bool,
    /// It admits the port over the flow's protocol.
    pub protocol: bool,
}

/// The whole answer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub policy: String,
    pub record: ViolationRecord,
    /// The other end of the flow, in words.
    pub peer: String,
    /// The decision of the whole policy (`Allowed`: another policy denies the flow).
    pub decision: String,
    /// Where the rules are: `spec.kubernetes.ingress`, `spec.istio.rules`, ...
    pub rules_at: String,
    pub rules: Vec<RuleVerdict>,
    /// The rule that came nearest: one that admits the peer and the port over another
    /// protocol, else one that admits the peer, else one that admits the port.
    pub nearest: Option<usize>,
    /// The rule that allows the flow.
    pub rule_to_add: serde_json::Value,
    pub notes: Vec<String>,
}

/// The record's peer: the client of an ingress flow, the server of an egress one.
pub fn peer_of(record: &ViolationRecord) -> &WorkloadEndpointRef {
    match record.direction {
        PolicyDirection::Ingress => &record.source,
        PolicyDirection::Egress => &record.destination,
    }
}

/// Explains record `record` of `policy`, with `facts` about its peer.
pub fn explain(
    policy: &WorkloadNetworkPolicy,
    record: &ViolationRecord,
    facts: &PeerFacts,
) -> anyhow::Result<Explanation> {
    let name = policy.metadata.name.clone().unwrap_or_default();
    let namespace = policy.metadata.namespace.clone().unwrap_or_default();
    let peer = peer_of(record);
    let mut notes = facts.notes.clone();
    let labels = strs(&facts.labels);
    let namespace_labels = strs(&facts.namespace_labels);
    let peer_view = match (&peer.namespace, &peer.name) {
        (Some(ns), Some(_)) if !facts.labels.is_empty() => PeerView::Pod {
            namespace: ns,
            labels: &labels,
            namespace_labels: &namespace_labels,
        },
        _ if peer.ip.is_some() && peer.namespace.is_none() => PeerView::External,
        _ => PeerView::Unknown,
    };
    let protocol = Protocol::parse(&record.protocol);
    let port = u16::try_from(record.port).unwrap_or(0);
    if port == 0 {
        notes.push("the data plane reported no port: rules are checked for any port".into());
    }
    let flow = FlowView {
        direction: match record.direction {
            PolicyDirection::Ingress => Direction::Ingress,
            PolicyDirection::Egress => Direction::Egress,
        },
        peer: peer_view,
        peer_ip: peer.ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok()),
        peer_identity: peer.identity.as_deref(),
        protocol,
        port,
        named_ports: &[],
    };
    let spec = &policy.spec;
    let decision = eval::evaluate(PolicyRef::from(spec), &namespace, &flow)
        .with_context(|| format!("workloadnetworkpolicy/{name} cannot be evaluated"))?;
    let (rules_at, rules) = match spec.backend {
        Backend::Kubernetes => {
            let np = spec
                .kubernetes
                .as_ref()
                .context("the policy has no spec.kubernetes")?;
            kubernetes_verdicts(np, &namespace, &flow, spec.direction)
        }
        Backend::Istio => {
            let ap = spec
                .istio
                .as_ref()
                .context("the policy has no spec.istio")?;
            ("spec.istio.rules".to_owned(), istio_verdicts(ap, &flow))
        }
    };
    // Nearest: admits the peer and the port (another protocol), then the peer, then the
    // port; the first of equals.
    let closeness = |r: &RuleVerdict| u8::from(r.peer) * 2 + u8::from(r.port);
    let nearest = rules
        .iter()
        .filter(|r| closeness(r) > 0)
        .fold(None::<&RuleVerdict>, |best, r| match best {
            Some(b) if closeness(b) >= closeness(r) => Some(b),
            _ => Some(r),
        })
        .map(|r| r.index);
    let rule_to_add = match spec.backend {
        Backend::Kubernetes => kubernetes_rule(record, facts, protocol, port, &mut notes),
        Backend::Istio => istio_rule(peer, port, &mut notes)?,
    };
    if let Some(blamed) = &record.denied_by
        && *blamed != format!("{namespace}/{name}")
    {
        notes.push(format!(
            "the data plane names {blamed} as the policy that denied the flow: a rule added \
             here does not allow it while {blamed} denies it"
        ));
    }
    Ok(Explanation {
        policy: format!("{namespace}/{name}"),
        record: record.clone(),
        peer: describe(peer),
        decision: match decision {
            Decision::Denied { reason, .. } => reason.as_str().to_owned(),
            Decision::Allowed { rule } => format!("Allowed by rule {rule}"),
            Decision::NodeLocal => "Allowed (node-local)".to_owned(),
            Decision::NotRestricted => "NotRestricted".to_owned(),
        },
        rules_at,
        rules,
        nearest,
        rule_to_add,
        notes,
    })
}

fn strs(pairs: &[(String, String)]) -> Vec<(Str, Str)> {
    pairs
        .iter()
        .map(|(k, v)| (Str::from(k.as_str()), Str::from(v.as_str())))
        .collect()
}

/// One endpoint in words: `Deployment billing/worker (10.0.0.5)`.
pub fn describe(e: &WorkloadEndpointRef) -> String {
    let mut s = match (&e.kind, &e.namespace, &e.name) {
        (Some(kind), Some(ns), Some(name)) => format!("{kind} {ns}/{name}"),
        (None, Some(ns), Some(name)) => format!("{ns}/{name}"),
        (_, Some(ns), None) => format!("a pod of namespace {ns}"),
        _ => "an address outside the cluster".to_owned(),
    };
    let extra: Vec<&str> = [e.identity.as_deref(), e.ip.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if !extra.is_empty() {
        s.push_str(&format!(" ({})", extra.join(", ")));
    }
    s
}

/// Each rule of the direction evaluated alone, and again open to every peer (does it
/// admit the port?).
fn kubernetes_verdicts(
    spec: &NetworkPolicySpec,
    namespace: &str,
    flow: &FlowView<'_>,
    direction: PolicyDirection,
) -> (String, Vec<RuleVerdict>) {
    let one = |ingress: Option<NetworkPolicyIngressRule>,
               egress: Option<NetworkPolicyEgressRule>| {
        let alone = NetworkPolicySpec {
            ingress: ingress.map(|r| vec![r]),
            egress: egress.map(|r| vec![r]),
            ..spec.clone()
        };
        eval::netpol::evaluate(&alone, namespace, flow)
    };
    match direction {
        PolicyDirection::Ingress => {
            let rules = spec.ingress.clone().unwrap_or_default();
            let verdicts = rules
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    let open = NetworkPolicyIngressRule {
                        from: None,
                        ..rule.clone()
                    };
                    verdict(
                        index,
                        serde_json::to_value(rule).unwrap_or_default(),
                        one(Some(rule.clone()), None),
                        one(Some(open), None),
                    )
                })
                .collect();
            ("spec.kubernetes.ingress".to_owned(), verdicts)
        }
        PolicyDirection::Egress => {
            let rules = spec.egress.clone().unwrap_or_default();
            let verdicts = rules
                .iter()
                .enumerate()
                .map(|(index, rule)| {
                    let open = NetworkPolicyEgressRule {
                        to: None,
                        ..rule.clone()
                    };
                    verdict(
                        index,
                        serde_json::to_value(rule).unwrap_or_default(),
                        one(None, Some(rule.clone())),
                        one(None, Some(open)),
                    )
                })
                .collect();
            ("spec.kubernetes.egress".to_owned(), verdicts)
        }
    }
}

fn istio_verdicts(spec: &IstioAuthorizationPolicySpec, flow: &FlowView<'_>) -> Vec<RuleVerdict> {
    spec.rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let alone = |rule: IstioRule| {
                eval::istio::evaluate(
                    &IstioAuthorizationPolicySpec {
                        rules: vec![rule],
                        ..spec.clone()
                    },
                    flow,
                )
            };
            let open = IstioRule {
                from: Vec::new(),
                ..rule.clone()
            };
            verdict(
                index,
                serde_json::to_value(rule).unwrap_or_default(),
                alone(rule.clone()),
                alone(open),
            )
        })
        .collect()
}

/// A rule's verdict from its decision alone (`alone`) and open to every peer (`open`).
fn verdict(index: usize, rule: serde_json::Value, alone: Decision, open: Decision) -> RuleVerdict {
    let admits = |d: Decision| matches!(d, Decision::Allowed { .. });
    let (peer, port, protocol) = match alone {
        Decision::Allowed { .. } | Decision::NodeLocal | Decision::NotRestricted => {
            (true, true, true)
        }
        Decision::Denied {
            reason: DenyReason::ProtocolNotAllowed,
            ..
        } => (true, true, false),
        Decision::Denied {
            reason: DenyReason::PortNotAllowed,
            ..
        } => (true, false, false),
        Decision::Denied {
            reason: DenyReason::NoRuleForPeer,
            ..
        } => {
            let port = admits(open)
                || matches!(
                    open,
                    Decision::Denied {
                        reason: DenyReason::ProtocolNotAllowed,
                        ..
                    }
                );
            (false, port, admits(open))
        }
    };
    RuleVerdict {
        index,
        rule,
        peer,
        port,
        protocol,
    }
}

/// The NetworkPolicy rule that admits the record's flow: the peer workload's pods (by its
/// selector, in its namespace), else its address, on the protocol and port.
fn kubernetes_rule(
    record: &ViolationRecord,
    facts: &PeerFacts,
    protocol: Protocol,
    port: u16,
    notes: &mut Vec<String>,
) -> serde_json::Value {
    let peer = peer_of(record);
    let address = peer.ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok());
    let np_peer: NetworkPolicyPeer = match (&peer.namespace, &facts.selector, address) {
        (Some(ns), Some(selector), _) => PeerKey::Pods {
            namespace: ns.clone(),
            selector: SelectorKey::new(selector),
        }
        .network_policy_peer()
        .unwrap_or_default(),
        (None, _, Some(ip)) => PeerKey::Address(ip)
            .network_policy_peer()
            .unwrap_or_default(),
        (Some(ns), None, _) => {
            notes.push(format!(
                "the peer's pod selector is not known: the rule below admits every pod of \
                 namespace {ns}; narrow its podSelector"
            ));
            NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some([(NAMESPACE_NAME_LABEL.to_owned(), ns.clone())].into()),
                    match_expressions: None,
                }),
                pod_selector: Some(LabelSelector::default()),
                ip_block: None,
            }
        }
        _ => {
            notes.push("the record names no peer: the rule below admits every peer".into());
            NetworkPolicyPeer::default()
        }
    };
    let ports = (port != 0).then(|| {
        vec![NetworkPolicyPort {
            protocol: Some(protocol.as_str().to_owned()),
            port: Some(IntOrString::Int(i32::from(port))),
            end_port: None,
        }]
    });
    let peers = (np_peer != NetworkPolicyPeer::default()).then(|| vec![np_peer]);
    match record.direction {
        PolicyDirection::Ingress => {
            serde_json::to_value(NetworkPolicyIngressRule { from: peers, ports })
        }
        PolicyDirection::Egress => {
            serde_json::to_value(NetworkPolicyEgressRule { to: peers, ports })
        }
    }
    .unwrap_or_default()
}

/// The AuthorizationPolicy rule that admits the record's flow: its source principal on
/// the port.
fn istio_rule(
    peer: &WorkloadEndpointRef,
    port: u16,
    notes: &mut Vec<String>,
) -> anyhow::Result<serde_json::Value> {
    let Some(identity) = &peer.identity else {
        bail!(
            "the record has no principal for its source: an AuthorizationPolicy rule can only \
             name one (is the source in the mesh?)"
        );
    };
    if port == 0 {
        notes.push("no port: the rule below admits every port".into());
    }
    let rule = IstioRule {
        from: vec![IstioFrom {
            source: IstioSource {
                principals: vec![identity.clone()],
            },
        }],
        to: if port == 0 {
            Vec::new()
        } else {
            vec![IstioTo {
                operation: IstioOperation {
                    ports: vec![port.to_string()],
                },
            }]
        },
    };
    Ok(serde_json::to_value(rule)?)
}

/// Reads policy `name` of `ns`, its record `id` (active or acknowledged) and what the
/// user may read of the record's peer, and explains it.
pub async fn fetch(
    client: &kube::Client,
    ns: &str,
    name: &str,
    id: i64,
) -> anyhow::Result<Explanation> {
    use kube::Api;
    let api: Api<WorkloadNetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy = crate::act::found(
        api.get_opt(name).await,
        "policy",
        "workloadnetworkpolicies",
        ns,
        name,
    )?;
    let status = policy.status.clone().unwrap_or_default();
    let record = status
        .violations
        .iter()
        .find(|r| r.id == id)
        .or_else(|| {
            status
                .acknowledged_violations
                .iter()
                .map(|a| &a.violation)
                .find(|r| r.id == id)
        })
        .cloned();
    let Some(record) = record else {
        let ids: Vec<String> = status.violations.iter().map(|r| r.id.to_string()).collect();
        bail!(
            "workloadnetworkpolicy/{name} has no violation record {id} (active: {})",
            if ids.is_empty() {
                "none".to_owned()
            } else {
                ids.join(", ")
            }
        );
    };
    let facts = peer_facts(client, peer_of(&record)).await;
    explain(&policy, &record, &facts)
}

/// What the user may read of the peer: its workload's selector and pod labels, its
/// namespace's labels; what cannot be read is noted, never an error.
async fn peer_facts(client: &kube::Client, peer: &WorkloadEndpointRef) -> PeerFacts {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;
    let mut facts = PeerFacts::default();
    let (Some(ns), Some(name)) = (&peer.namespace, &peer.name) else {
        return facts;
    };
    facts.namespace_labels = vec![(NAMESPACE_NAME_LABEL.to_owned(), ns.clone())];
    match Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(Some(n)) => {
            facts.namespace_labels = n.metadata.labels.unwrap_or_default().into_iter().collect();
        }
        Ok(None) => facts
            .notes
            .push(format!("namespace {ns} does not exist any more")),
        Err(e) => facts.notes.push(format!(
            "cannot read namespace {ns} ({}): only its name label is known",
            short(&e)
        )),
    }
    let kind = peer.kind.as_deref().unwrap_or_default();
    if !crate::workload::KINDS.contains(&kind) {
        facts.notes.push(format!(
            "the peer's kind {kind:?} is not one whose pods can be looked up"
        ));
        return facts;
    }
    let got = crate::workload::pods_of(client, ns, kind, name).await;
    match got {
        Ok(Some(pods)) => {
            facts.selector = pods.selector;
            facts.labels = pods.labels.into_iter().collect();
        }
        Ok(None) => facts
            .notes
            .push(format!("{kind} {ns}/{name} does not exist any more")),
        Err(e) => facts.notes.push(format!(
            "cannot read {kind} {ns}/{name} ({}): its pods' labels are unknown, so only rules \
             open to every peer or to its address admit it here",
            short(&e)
        )),
    }
    facts
}

fn short(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => "forbidden".to_owned(),
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The explanation for a terminal.
pub fn write_text(out: &mut impl std::io::Write, e: &Explanation) -> anyhow::Result<()> {
    let r = &e.record;
    let reason = r.reason.map_or("(none recorded)", |r| r.as_str());
    writeln!(
        out,
        "workloadnetworkpolicy {} record {}: {} {}/{} {} {}, {} flows, {} mode",
        e.policy,
        r.id,
        match r.direction {
            PolicyDirection::Ingress => "ingress",
            PolicyDirection::Egress => "egress",
        },
        r.protocol,
        r.port,
        match r.direction {
            PolicyDirection::Ingress => "from",
            PolicyDirection::Egress => "to",
        },
        e.peer,
        r.count,
        match r.mode {
            ne_crds::Mode::Monitor => "monitor",
            ne_crds::Mode::Protect => "protect",
        }
    )?;
    writeln!(out, "  reason: {reason}")?;
    if let Some(message) = &r.message {
        writeln!(out, "  {message}")?;
    }
    if let Some(policy) = &r.denied_by {
        writeln!(
            out,
            "  denied by: {policy} (the data plane's name for the policy)"
        )?;
    }
    writeln!(out, "  the policy as it is now: {}", e.decision)?;
    if e.decision.starts_with("Allowed") {
        writeln!(
            out,
            "  its rules allow the flow now: the policy was widened since, or another policy \
             that selects the same pods denies it"
        )?;
    }
    writeln!(out)?;
    if e.rules.is_empty() {
        writeln!(
            out,
            "{} is empty: the direction allows nothing.",
            e.rules_at
        )?;
    } else {
        writeln!(out, "Rules evaluated ({}):", e.rules_at)?;
        for v in &e.rules {
            let mark = |b: bool| if b { "yes" } else { "no" };
            let near = match (Some(v.index) == e.nearest, v.peer, v.port) {
                (true, true, true) => "  <- nearest: same peer and port, other protocol",
                (true, true, false) => "  <- nearest: same peer, other port",
                (true, false, _) => "  <- nearest: same port, other peer",
                _ => "",
            };
            writeln!(
                out,
                "  [{}] peer: {:3}  port: {:3}  protocol: {:3}{near}",
                v.index,
                mark(v.peer),
                mark(v.port),
                if v.port { mark(v.protocol) } else { "-" }
            )?;
            let yaml = serde_saphyr::to_string(&v.rule)?;
            for line in yaml.lines() {
                writeln!(out, "      {line}")?;
            }
        }
    }
    writeln!(out)?;
    writeln!(out, "To allow it, add this rule to {}:", e.rules_at)?;
    let yaml = serde_saphyr::to_string(&vec![&e.rule_to_add])?;
    for line in yaml.lines() {
        writeln!(out, "  {line}")?;
    }
    for note in &e.notes {
        writeln!(out, "note: {note}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
