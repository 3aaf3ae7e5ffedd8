//! Peer keys of an allow-list: what one rule allows traffic to or from, in a canonical,
//! ordered form so that allow-lists are deterministic whatever order edges arrive in.

use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::{IPBlock, NetworkPolicyPeer};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Serialize;

/// Namespace label the API server sets on every namespace (GA since Kubernetes 1.22).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A label selector in canonical form: labels sorted by key, expressions sorted, their
/// values sorted and deduplicated. Equal selectors have equal keys; the order is total.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SelectorKey {
    /// `matchLabels` as sorted pairs.
    pub match_labels: Vec<(String, String)>,
    /// `matchExpressions` as sorted `(key, operator, values)`.
    pub match_expressions: Vec<(String, String, Vec<String>)>,
}

impl SelectorKey {
    /// The canonical form of `s`.
    pub fn new(s: &LabelSelector) -> Self {
        let match_labels = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut match_expressions: Vec<(String, String, Vec<String>)> = s
            .match_expressions
            .iter()
            .flatten()
            .map(|r| {
                let mut values = r.values.clone().unwrap_or_default();
                values.sort();
                values.dedup();
                (r.key.clone(), r.operator.clone(), values)
            })
            .collect();
        match_expressions.sort();
        match_expressions.dedup();
        SelectorKey {
            match_labels,
            match_expressions,
        }
    }

    /// `{}` selects everything.
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Back to a Kubernetes selector (absent fields when empty).
    pub fn to_selector(&self) -> LabelSelector {
        LabelSelector {
            match_labels: (!self.match_labels.is_empty())
                .then(|| self.match_labels.iter().cloned().collect()),
            match_expressions: (!self.match_expressions.is_empty()).then(|| {
                self.match_expressions
                    .iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key: key.clone(),
                        operator: operator.clone(),
                        values: (!values.is_empty()).then(|| values.clone()),
                    })
                    .collect()
            }),
        }
    }
}

/// The `kubectl` text form, as `selector::format` writes the selector this key stands
/// for, without building it: `app=web,tier in (a,b),!legacy`; `{}` is `<all>`.
impl fmt::Display for SelectorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let labels = self.match_labels.iter().map(|(k, v)| (k, v));
        let requirements = self
            .match_expressions
            .iter()
            .map(|(key, operator, values)| (key.as_str(), operator.as_str(), values.as_slice()));
        crate::eval::selector::write_text(f, labels, requirements)
    }
}

/// What one allow-list rule is about. The derived order (pods, then addresses, then
/// principals, each by its fields) is the rule order of rendered proposals.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PeerKey {
    /// Pods matching `selector` in namespace `namespace` (Kubernetes backend).
    Pods {
        namespace: String,
        selector: SelectorKey,
    },
    /// One address outside the cluster: an `ipBlock` of /32 (IPv4) or /128 (IPv6).
    Address(IpAddr),
    /// A mesh principal without `spiffe://` (Istio backend).
    Principal(String),
}

impl PeerKey {
    /// The NetworkPolicy peer, or `None` for a principal (Istio only).
    pub fn network_policy_peer(&self) -> Option<NetworkPolicyPeer> {
        match self {
            PeerKey::Pods {
                namespace,
                selector,
            } => Some(NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some(
                        [(NAMESPACE_NAME_LABEL.to_owned(), namespace.clone())].into(),
                    ),
                    match_expressions: None,
                }),
                pod_selector: Some(selector.to_selector()),
                ip_block: None,
            }),
            PeerKey::Address(ip) => Some(NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: host_cidr(*ip),
                    except: None,
                }),
                ..Default::default()
            }),
            PeerKey::Principal(_) => None,
        }
    }
}

/// `a.b.c.d/32` or `x::y/128`.
pub fn host_cidr(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

impl fmt::Display for PeerKey {
    /// `pods:<ns>/<selector>`, `ip:<cidr>` or `principal:<principal>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerKey::Pods {
                namespace,
                selector: s,
            } => write!(f, "pods:{namespace}/{s}"),
            PeerKey::Address(ip) => write!(f, "ip:{}", host_cidr(*ip)),
            PeerKey::Principal(p) => write!(f, "principal:{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::selector::{self, tests::sel};

    #[test]
    fn canonical_form_ignores_order_and_duplicates() {
        let a = sel(
            &[("b", "2"), ("a", "1")],
            &[("t", "In", &["y", "x", "x"]), ("e", "Exists", &[])],
        );
        let b = sel(
            &[("a", "1"), ("b", "2")],
            &[("e", "Exists", &[]), ("t", "In", &["x", "y"])],
        );
        assert_eq!(SelectorKey::new(&a), SelectorKey::new(&b));
        let back = SelectorKey::new(&a).to_selector();
        assert_eq!(
            back.match_expressions.as_ref().map(|v| v[1].values.clone()),
            Some(Some(vec!["x".into(), "y".into()]))
        );
        assert!(
            SelectorKey::new(&sel(&[], &[]))
                .to_selector()
                .match_labels
                .is_none()
        );
    }

    /// The key writes what `selector::format` writes of the selector it stands for.
    #[test]
    fn a_key_displays_as_its_selector() {
        let cases = [
            sel(&[], &[]),
            sel(&[("b", "2"), ("a", "1")], &[]),
            sel(
                &[("app", "web")],
                &[
                    ("tier", "In", &["b", "a", "a"]),
                    ("legacy", "DoesNotExist", &[]),
                    ("zone", "NotIn", &["x"]),
                    ("canary", "Exists", &[]),
                    ("odd", "Gt", &["3"]),
                ],
            ),
        ];
        for s in cases {
            let key = SelectorKey::new(&s);
            assert_eq!(
                key.to_string(),
                selector::format(&key.to_selector()),
                "{s:?}"
            );
        }
    }

    #[test]
    fn display_and_rendered_peers() {
        let pods = PeerKey::Pods {
            namespace: "shop".into(),
            selector: SelectorKey::new(&sel(&[("app", "web")], &[])),
        };
        assert_eq!(pods.to_string(), "pods:shop/app=web");
        let peer = pods.network_policy_peer().unwrap();
        assert_eq!(
            peer.namespace_selector
                .unwrap()
                .match_labels
                .unwrap()
                .get(NAMESPACE_NAME_LABEL)
                .map(String::as_str),
            Some("shop")
        );
        let v6 = PeerKey::Address("2001:db8::7".parse().unwrap());
        assert_eq!(
            v6.network_policy_peer().unwrap().ip_block.unwrap().cidr,
            "2001:db8::7/128"
        );
        assert_eq!(
            PeerKey::Principal("td/ns/a/sa/b".into()).network_policy_peer(),
            None
        );
    }
}
