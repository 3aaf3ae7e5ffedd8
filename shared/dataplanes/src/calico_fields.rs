//! Calico's endpoint and verdict fields, the same in Goldmane flows and Felix flow logs:
//! endpoint types, workload endpoints (with the owner proven by labels), verdicts.

use std::net::IpAddr;

use ne_flow::flow::{Endpoint, EndpointId, Reserved, WorkloadKind, WorkloadRef};

use crate::DecodeError;
use crate::common::{EnumVal, LabelList};

/// Calico endpoint types (Goldmane `EndpointType` names or numbers, flow-log short names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CalicoType {
    Workload,
    Host,
    NetworkSet,
    Network,
}

impl CalicoType {
    /// `None` for unspecified or unknown types; the endpoint rules then guess from the name.
    pub(crate) fn parse(v: &EnumVal<'_>) -> Option<Self> {
        Some(if v.is("WorkloadEndpoint", 1) || v.is("wep", 1) {
            CalicoType::Workload
        } else if v.is("HostEndpoint", 2) || v.is("hep", 2) {
            CalicoType::Host
        } else if v.is("NetworkSet", 3) || v.is("ns", 3) {
            CalicoType::NetworkSet
        } else if v.is("Network", 4) || v.is("net", 4) {
            CalicoType::Network
        } else {
            return None;
        })
    }
}

/// One side of a Calico flow, before it becomes an [`Endpoint`].
#[derive(Debug)]
pub(crate) struct CalicoSide<'r> {
    pub kind: Option<CalicoType>,
    /// The pod name, `GenerateName*` aggregate, host, set or `pub`/`pvt` name.
    pub name: Option<&'r str>,
    pub namespace: Option<&'r str>,
    pub labels: &'r LabelList<'r>,
    pub ip: Option<IpAddr>,
    /// Felix flow logs: the `GenerateName*` aggregate beside a pod name. When its labels
    /// prove the owner, the endpoint is that workload (with the pod's address kept).
    pub aggregate: Option<&'r str>,
}

/// The Calico endpoint rules (Goldmane and Felix flow logs):
/// - Network (`pub`/`pvt`) and NetworkSet: the address when the record gives one
///   ([`EndpointId::External`]), else [`Reserved::World`]. A NetworkSet is a named set of
///   outside networks; without its CIDRs it is "somewhere outside".
/// - HostEndpoint: [`Reserved::Host`].
/// - WorkloadEndpoint: a name without `*` is a [`EndpointId::Pod`]; an aggregate
///   `prefix*` names its owner only when the labels prove it (see [`aggregate_owner`]),
///   else it is an [`EndpointId::PodGroup`].
/// - No type (Whisker): `pub`/`pvt` outside a namespace is the world, anything with a
///   namespace a workload endpoint, the rest unknown.
pub(crate) fn calico_endpoint(side: CalicoSide<'_>) -> Endpoint {
    let outside =
        |ip: Option<IpAddr>| ip.map_or(EndpointId::Reserved(Reserved::World), EndpointId::External);
    let kind = side.kind.or(match (side.name, side.namespace) {
        (Some("pub" | "pvt"), None) => Some(CalicoType::Network),
        (_, Some(_)) => Some(CalicoType::Workload),
        _ => None,
    });
    let id = match kind {
        Some(CalicoType::Network | CalicoType::NetworkSet) => outside(side.ip),
        Some(CalicoType::Host) => EndpointId::Reserved(Reserved::Host),
        Some(CalicoType::Workload) => match (side.namespace, side.name) {
            (Some(ns), Some(name)) => side
                .aggregate
                .and_then(|agg| agg.strip_suffix('*'))
                .and_then(|prefix| aggregate_owner(prefix, side.labels))
                .map_or_else(
                    || workload_id(ns, name, side.labels),
                    |(kind, owner)| {
                        EndpointId::Workload(WorkloadRef {
                            namespace: ns.into(),
                            kind,
                            name: owner.into(),
                        })
                    },
                ),
            _ => EndpointId::Reserved(Reserved::Unknown),
        },
        None => EndpointId::Reserved(Reserved::Unknown),
    };
    Endpoint::new(id)
        .with_ip(side.ip)
        .with_labels(side.labels.to_labels())
}

fn workload_id(namespace: &str, name: &str, labels: &LabelList<'_>) -> EndpointId {
    let Some(prefix) = name.strip_suffix('*') else {
        return EndpointId::Pod {
            namespace: namespace.into(),
            name: name.into(),
        };
    };
    match aggregate_owner(prefix, labels) {
        Some((kind, owner)) => EndpointId::Workload(WorkloadRef {
            namespace: namespace.into(),
            kind,
            name: owner.into(),
        }),
        None => EndpointId::PodGroup {
            namespace: namespace.into(),
            prefix: prefix.into(),
        },
    }
}

/// The owner of Calico's aggregated pods `prefix*`, inferred only from labels:
/// - `pod-template-hash=H` and `prefix` = `<name>-H-`: Deployment `<name>`;
/// - `controller-revision-hash` and `pod-template-generation`: DaemonSet `prefix - '-'`;
/// - `controller-revision-hash` alone: StatefulSet `prefix - '-'`.
///
/// The name's shape alone never decides: `api-6d9f7c8b5-*` without the hash label could
/// be anything.
pub(crate) fn aggregate_owner<'p>(
    prefix: &'p str,
    labels: &LabelList<'_>,
) -> Option<(WorkloadKind, &'p str)> {
    let base = prefix.strip_suffix('-').filter(|b| !b.is_empty())?;
    if let Some(hash) = labels.get("pod-template-hash").filter(|h| !h.is_empty()) {
        let owner = base
            .strip_suffix(hash)?
            .strip_suffix('-')
            .filter(|o| !o.is_empty())?;
        return Some((WorkloadKind::Deployment, owner));
    }
    labels.get("controller-revision-hash")?;
    if labels.get("pod-template-generation").is_some() {
        Some((WorkloadKind::DaemonSet, base))
    } else {
        Some((WorkloadKind::StatefulSet, base))
    }
}

/// The Calico action of a flow as a verdict: Allow and Deny are final; `Pass` (hand the
/// decision to the next tier) is not a decision at all, so a flow whose final action is
/// `Pass` is an anomaly and reported as [`ne_flow::flow::Verdict::Error`] (no edge).
pub(crate) fn calico_verdict(
    action: Option<&EnumVal<'_>>,
) -> Result<ne_flow::flow::Verdict, DecodeError> {
    use ne_flow::flow::Verdict;
    match action {
        None => Err(DecodeError::MissingField("action")),
        Some(a) if a.is("Allow", 1) => Ok(Verdict::Forwarded),
        Some(a) if a.is("Deny", 2) => Ok(Verdict::PolicyDenied),
        Some(a) if a.is("Pass", 3) => Ok(Verdict::Error),
        Some(a) => Err(DecodeError::BadValue {
            field: "action",
            value: a.text(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::tests::list;

    #[test]
    fn aggregate_owner_needs_label_proof() {
        let deploy = list(&["app=access", "pod-template-hash=6b687c8dcb"]);
        assert_eq!(
            aggregate_owner("access-6b687c8dcb-", &deploy),
            Some((WorkloadKind::Deployment, "access"))
        );
        // The hash must be the name's: a mismatching hash proves nothing.
        assert_eq!(aggregate_owner("access-ffffffffff-", &deploy), None);
        // Same name shape, no labels: no owner.
        assert_eq!(
            aggregate_owner("access-6b687c8dcb-", &LabelList::None),
            None
        );
        let ds = list(&[
            "controller-revision-hash=5bb8c89b95",
            "pod-template-generation=2",
        ]);
        assert_eq!(
            aggregate_owner("longhorn-manager-", &ds),
            Some((WorkloadKind::DaemonSet, "longhorn-manager"))
        );
        let sts = list(&["controller-revision-hash=web-7f9c", "app=web"]);
        assert_eq!(
            aggregate_owner("web-", &sts),
            Some((WorkloadKind::StatefulSet, "web"))
        );
        assert_eq!(aggregate_owner("-", &sts), None);
        assert_eq!(aggregate_owner("web", &sts), None);
    }
}
