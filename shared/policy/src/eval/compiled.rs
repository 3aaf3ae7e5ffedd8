//! A policy prepared for many checks: the same decisions as [`super::evaluate`], at a cost
//! that does not grow with the number of rules.
//!
//! A learned proposal has one rule per peer, so a workload with thousands of peers has a
//! policy of thousands of rules, and checking every edge against every rule makes the
//! controller's round quadratic. [`Compiled`] files each rule under what its peers require
//! of a flow, once per policy:
//!
//! - an `ipBlock` peer (valid, `except` included) under its block: the rule can match only
//!   a flow whose peer address lies in it;
//! - a selector peer under one label it requires (the first `podSelector.matchLabels` pair
//!   on the peer pod, else the first `namespaceSelector.matchLabels` pair on its
//!   namespace), or, with a `podSelector` alone, under the policy's namespace;
//! - an Istio source under its exact principals.
//!
//! A rule is filed only when every peer of it is, and none has an invalid part. Every other
//! rule (no peers, an invalid selector or block, a `namespaceSelector` of expressions only,
//! a principal pattern) is scanned for every flow. A check gathers the scanned rules and
//! those filed under the flow's address, labels and principal, and evaluates them in rule
//! order with the scanning evaluator's own code. A rule left out has only valid peers, none
//! of which can match the flow, so scanning it would have changed nothing: not the first
//! matching rule, not the reason of a denial, not `invalid_skipped`.

use std::net::IpAddr;

use foldhash::HashMap;
use k8s_openapi::api::networking::v1::{NetworkPolicyPeer, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use ne_crds::{Backend, PolicyDirection};

use super::cidr::{Cidr, mask32, mask128};
use super::istio::{self, principal_is_exact};
use super::{Decision, EvalError, FlowView, PeerView, PolicyRef, evaluate_candidates, selector};

/// A policy with its rules filed by what their peers require (see the module docs).
#[derive(Debug)]
pub struct Compiled<'a> {
    policy: PolicyRef<'a>,
    namespace: &'a str,
    /// `None`: a policy of fewer than [`FILED_FROM`] rules, scanned.
    rules: Option<Rules<'a>>,
}

/// The fewest rules worth filing: gathering the candidates of a check costs a few hash
/// lookups and an allocation, twice a scan of one rule and less than a scan of ten (the
/// `eval` bench).
const FILED_FROM: usize = 8;

/// Rule numbers (in the policy direction's rule list) by what a flow needs to match them.
#[derive(Debug, Default)]
struct Rules<'a> {
    /// Rules evaluated for every flow.
    scanned: Vec<u32>,
    /// By block; `v4_lens` and `v6_lens` list the prefix lengths present.
    blocks: HashMap<Cidr, Vec<u32>>,
    v4_lens: Vec<u8>,
    v6_lens: Vec<u8>,
    /// By a label the peer pod must carry.
    pod_labels: HashMap<(&'a str, &'a str), Vec<u32>>,
    /// By a label the peer's namespace must carry.
    namespace_labels: HashMap<(&'a str, &'a str), Vec<u32>>,
    /// Rules of `podSelector` peers: the peer must be in the policy's namespace.
    own_namespace: Vec<u32>,
    /// By exact principal (Istio).
    principals: HashMap<&'a str, Vec<u32>>,
}

/// What one peer of a rule requires of a flow (a peer without one is scanned).
enum Key<'a> {
    Block(Cidr),
    PodLabel(&'a str, &'a str),
    NamespaceLabel(&'a str, &'a str),
    OwnNamespace,
    Principal(&'a str),
}

impl<'a> Compiled<'a> {
    /// Files the rules of `policy`, a policy living in `namespace` (its subject's).
    pub fn new(policy: PolicyRef<'a>, namespace: &'a str) -> Self {
        let keys: Vec<Vec<Option<Key<'a>>>> =
            match (policy.backend, policy.kubernetes, policy.istio) {
                (Backend::Kubernetes, Some(spec), _) => peer_lists(spec, policy.direction)
                    .into_iter()
                    .map(|peers| peers.unwrap_or_default().iter().map(peer_key).collect())
                    .collect(),
                (Backend::Istio, _, Some(spec)) => {
                    spec.rules.iter().map(|r| principal_keys(&r.from)).collect()
                }
                // Evaluation fails on the missing payload before any rule is looked at.
                _ => Vec::new(),
            };
        Compiled {
            policy,
            namespace,
            // A list too long for u32 rule numbers is no object the API server stores;
            // it would be scanned.
            rules: (FILED_FROM..=u32::MAX as usize)
                .contains(&keys.len())
                .then(|| Rules::filed(keys)),
        }
    }

    /// What the policy decides about `flow`: [`super::evaluate`]'s decision.
    pub fn evaluate(&self, flow: &FlowView<'_>) -> Result<Decision, EvalError> {
        evaluate_candidates(self.policy, self.namespace, flow, |backend| {
            let rules = self.rules.as_ref()?;
            Some(match backend {
                Backend::Kubernetes => rules.for_netpol(self.namespace, flow),
                Backend::Istio => rules.for_istio(flow),
            })
        })
    }
}

/// The peer lists of the rules in `direction`, in rule order (`None`: every peer).
fn peer_lists(
    spec: &NetworkPolicySpec,
    direction: PolicyDirection,
) -> Vec<Option<&[NetworkPolicyPeer]>> {
    match direction {
        PolicyDirection::Ingress => spec
            .ingress
            .iter()
            .flatten()
            .map(|r| r.from.as_deref())
            .collect(),
        PolicyDirection::Egress => spec
            .egress
            .iter()
            .flatten()
            .map(|r| r.to.as_deref())
            .collect(),
    }
}

/// What `peer` requires of a flow, when it is valid and requires something.
fn peer_key(peer: &NetworkPolicyPeer) -> Option<Key<'_>> {
    match (&peer.ip_block, &peer.namespace_selector, &peer.pod_selector) {
        (Some(block), None, None) => {
            let cidr = Cidr::parse(&block.cidr).ok()?;
            let excepts_valid = block
                .except
                .iter()
                .flatten()
                .all(|e| Cidr::parse(e).is_ok());
            excepts_valid.then_some(Key::Block(cidr))
        }
        (None, ns, pod) if ns.is_some() || pod.is_some() => {
            if ns.iter().chain(pod).any(|s| selector::validate(s).is_err()) {
                return None;
            }

            match (first_label(pod), first_label(ns), ns) {
                (Some((k, v)), _, _) => Some(Key::PodLabel(k, v)),
                (None, Some((k, v)), _) => Some(Key::NamespaceLabel(k, v)),
                (None, None, None) => Some(Key::OwnNamespace),
                // A namespaceSelector of expressions only, or `{}`.
                (None, None, Some(_)) => None,
            }
        }
        // A peer with a block and selectors, or with nothing: invalid.
        _ => None,
    }
}

/// The first `matchLabels` pair of a selector.
fn first_label(selector: &Option<LabelSelector>) -> Option<(&str, &str)> {
    let (k, v) = selector.as_ref()?.match_labels.as_ref()?.iter().next()?;
    Some((k.as_str(), v.as_str()))
}

/// What the sources of an Istio rule require: their exact principals, when every source
/// names only such (a rule without sources, or with a pattern, is scanned).
fn principal_keys(from: &[ne_crds::IstioFrom]) -> Vec<Option<Key<'_>>> {
    if from.is_empty() {
        return vec![None];
    }
    from.iter()
        .flat_map(|f| {
            let principals = &f.source.principals;
            let any_source = principals.is_empty().then_some(None);
            any_source.into_iter().chain(
                principals
                    .iter()
                    .map(|p| principal_is_exact(p).then_some(Key::Principal(p.as_str()))),
            )
        })
        .collect()
}

impl<'a> Rules<'a> {
    /// Files every rule by the keys of its peers (`keys[i]`: rule `i`'s).
    fn filed(keys: Vec<Vec<Option<Key<'a>>>>) -> Self {
        let mut rules = Rules::default();
        // `Compiled::new` files only lists whose numbers fit a u32.
        for (i, keys) in (0u32..).zip(keys) {
            rules.file(i, keys);
        }
        for lens in [&mut rules.v4_lens, &mut rules.v6_lens] {
            lens.sort_unstable();
            lens.dedup();
        }
        rules
    }

    /// Files rule `i` under every key of its peers, or scans it when a peer has none (or
    /// it has no peers: it matches every flow).
    fn file(&mut self, i: u32, keys: Vec<Option<Key<'a>>>) {
        if keys.is_empty() || keys.iter().any(Option::is_none) {
            self.scanned.push(i);
            return;
        }
        for key in keys.into_iter().flatten() {
            let list = match key {
                Key::Block(cidr) => {
                    match cidr {
                        Cidr::V4(_, len) => self.v4_lens.push(len),
                        Cidr::V6(_, len) => self.v6_lens.push(len),
                    }
                    self.blocks.entry(cidr).or_default()
                }
                Key::PodLabel(k, v) => self.pod_labels.entry((k, v)).or_default(),
                Key::NamespaceLabel(k, v) => self.namespace_labels.entry((k, v)).or_default(),
                Key::OwnNamespace => &mut self.own_namespace,
                Key::Principal(p) => self.principals.entry(p).or_default(),
            };
            // Rules are filed in order, so a list is ascending; a rule names a key once.
            if list.last() != Some(&i) {
                list.push(i);
            }
        }
    }

    /// The rules a NetworkPolicy check of `flow` must evaluate, ascending.
    fn for_netpol(&self, namespace: &str, flow: &FlowView<'_>) -> Vec<u32> {
        let mut out = self.scanned.clone();
        if let Some(ip) = flow.peer_ip {
            match Cidr::normalize(ip) {
                IpAddr::V4(a) => {
                    let a = u32::from(a);
                    for &len in &self.v4_lens {
                        extend(&mut out, self.blocks.get(&Cidr::V4(a & mask32(len), len)));
                    }
                }
                IpAddr::V6(a) => {
                    let a = u128::from(a);
                    for &len in &self.v6_lens {
                        extend(&mut out, self.blocks.get(&Cidr::V6(a & mask128(len), len)));
                    }
                }
            }
        }
        if let PeerView::Pod {
            namespace: peer_namespace,
            labels,
            namespace_labels,
        } = flow.peer
        {
            for (k, v) in labels {
                extend(&mut out, self.pod_labels.get(&(&**k, &**v)));
            }
            for (k, v) in namespace_labels {
                extend(&mut out, self.namespace_labels.get(&(&**k, &**v)));
            }
            if peer_namespace == namespace {
                out.extend_from_slice(&self.own_namespace);
            }
        }
        sorted(out)
    }

    /// The rules an Istio check of `flow` must evaluate, ascending.
    fn for_istio(&self, flow: &FlowView<'_>) -> Vec<u32> {
        let mut out = self.scanned.clone();
        if let Some(identity) = istio::peer_identity(flow) {
            extend(&mut out, self.principals.get(identity));
        }
        sorted(out)
    }
}

fn extend(out: &mut Vec<u32>, rules: Option<&Vec<u32>>) {
    if let Some(rules) = rules {
        out.extend_from_slice(rules);
    }
}

fn sorted(mut rules: Vec<u32>) -> Vec<u32> {
    rules.sort_unstable();
    rules.dedup();
    rules
}

#[cfg(test)]
#[path = "compiled_tests.rs"]
mod tests;
