//! Calico Goldmane flows as JSON (Calico ≥ 3.30): the `Flow` message as protojson
//! (`{"Key":{"sourceName":…},"startTime":"…",…}`, int64s as strings, enums as names), as
//! Go `encoding/json` (snake_case, enums and int64s as numbers), wrapped in a
//! `FlowResult` (`{"id":…,"flow":{…}}`), or Whisker's flat snake_case `FlowResponse`
//! (`source_name`, `dest_port`, `start_time` as RFC 3339, labels joined with `" | "`).
//!
//! Goldmane reports no addresses, ports of clients or nodes: a record has names,
//! namespaces, labels, the server port, the reporter and the final action.

use std::borrow::Cow;

use serde::Deserialize;

use super::calico_fields::{CalicoSide, CalicoType, calico_endpoint, calico_verdict};
use super::common::{CowStr, EnumVal, FlexInt, LabelList, TimeVal, policy_ref, port, protocol};
use super::{DecodeError, Decoded};
use ne_flow::flow::{FlowRecord, ObservationPoint, Protocol, Str, Timestamp, Verdict};

/// A `FlowResult`, `Flow`, `FlowKey` or Whisker `FlowResponse`: one struct holds the
/// fields of all of them, because the key's fields sit either under `Key` or at the top.
#[derive(Deserialize, Default)]
struct Obj<'a> {
    #[serde(borrow)]
    flow: Option<Box<Obj<'a>>>,
    #[serde(borrow, rename = "Key", alias = "key")]
    key: Option<Box<Obj<'a>>>,
    // FlowKey (or the flat Whisker flow)
    #[serde(borrow, alias = "sourceName")]
    source_name: Option<CowStr<'a>>,
    #[serde(borrow, alias = "sourceNamespace")]
    source_namespace: Option<CowStr<'a>>,
    #[serde(borrow, alias = "sourceType")]
    source_type: Option<EnumVal<'a>>,
    #[serde(borrow, alias = "destName")]
    dest_name: Option<CowStr<'a>>,
    #[serde(borrow, alias = "destNamespace")]
    dest_namespace: Option<CowStr<'a>>,
    #[serde(borrow, alias = "destType")]
    dest_type: Option<EnumVal<'a>>,
    #[serde(alias = "destPort")]
    dest_port: Option<FlexInt>,
    #[serde(borrow, alias = "protocol")]
    proto: Option<CowStr<'a>>,
    #[serde(borrow)]
    reporter: Option<EnumVal<'a>>,
    #[serde(borrow)]
    action: Option<EnumVal<'a>>,
    #[serde(borrow)]
    policies: Option<Policies<'a>>,
    // Flow
    #[serde(borrow, alias = "startTime")]
    start_time: Option<TimeVal<'a>>,
    #[serde(borrow, default, alias = "sourceLabels")]
    source_labels: LabelList<'a>,
    #[serde(borrow, default, alias = "destLabels")]
    dest_labels: LabelList<'a>,
    #[serde(alias = "numConnectionsStarted")]
    num_connections_started: Option<FlexInt>,
}

#[derive(Deserialize, Default)]
struct Policies<'a> {
    #[serde(borrow, default, alias = "enforcedPolicies", alias = "enforced")]
    enforced_policies: Vec<Hit<'a>>,
}

#[derive(Deserialize)]
struct Hit<'a> {
    #[serde(borrow)]
    kind: Option<EnumVal<'a>>,
    #[serde(borrow)]
    namespace: Option<CowStr<'a>>,
    #[serde(borrow)]
    name: Option<CowStr<'a>>,
    #[serde(borrow)]
    action: Option<EnumVal<'a>>,
    #[serde(borrow)]
    trigger: Option<Box<Hit<'a>>>,
}

/// One Goldmane flow, in the shape of the protobuf `Flow`/`FlowKey` (package `goldmane`):
/// the common ground of the JSON decoder here and the agent's gRPC stream, which both
/// build their [`FlowRecord`] with [`record_from_parts`], so the two cannot drift.
///
/// Strings that are empty or Calico's `-` placeholder count as absent; enums are their
/// protobuf numbers, 0 meaning unspecified.
#[derive(Clone, Debug, Default)]
pub struct GoldmaneFlow<'a, H = std::iter::Empty<GoldmanePolicyHit<'a>>> {
    /// Pod name, `GenerateName*` aggregate, host, set, or `pub`/`pvt`.
    pub source_name: &'a str,
    /// The source's namespace.
    pub source_namespace: &'a str,
    /// `EndpointType`: 1 WorkloadEndpoint, 2 HostEndpoint, 3 NetworkSet, 4 Network.
    pub source_type: i32,
    /// Like `source_name`, for the destination.
    pub dest_name: &'a str,
    /// The destination's namespace.
    pub dest_namespace: &'a str,
    /// Like `source_type`, for the destination.
    pub dest_type: i32,
    /// The (pod) port, after DNAT; must fit `u16`.
    pub dest_port: i64,
    /// `tcp`, `udp`, … or an IANA number.
    pub proto: &'a str,
    /// `Reporter`: 1 Src (egress), 2 Dst (ingress).
    pub reporter: i32,
    /// `Action`: 1 Allow, 2 Deny, 3 Pass; 0 (unset) is an error.
    pub action: i32,
    /// The window's start (`Flow.start_time`).
    pub start_time: Option<Timestamp>,
    /// Connections started in the window (at least 1 is recorded).
    pub num_connections_started: i64,
    /// `FlowKey.policies.enforced_policies`, read only for a denied flow.
    pub enforced_policies: H,
}

/// One `PolicyHit` of a [`GoldmaneFlow`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GoldmanePolicyHit<'a> {
    /// `PolicyKind` (10 = EndOfTier).
    pub kind: i32,
    /// The policy's namespace (empty for cluster-scoped ones).
    pub namespace: &'a str,
    /// The policy's name.
    pub name: &'a str,
    /// `Action` of the hit (2 = Deny).
    pub action: i32,
    /// The hit's `trigger` (set on an end-of-tier hit), empty when none.
    pub trigger_namespace: &'a str,
    /// The trigger's name, empty when none.
    pub trigger_name: &'a str,
}

/// Builds the [`FlowRecord`] of one Goldmane flow given as protobuf-shaped parts, with its
/// `key=value` labels (the JSON decoder and the agent's Goldmane source both end here).
pub fn record_from_parts<'a, H>(
    flow: GoldmaneFlow<'a, H>,
    source_labels: &'a [String],
    dest_labels: &'a [String],
) -> Result<FlowRecord, DecodeError>
where
    H: IntoIterator<Item = GoldmanePolicyHit<'a>>,
{
    let list = |labels: &'a [String]| {
        LabelList::List(
            labels
                .iter()
                .map(|l| CowStr(Cow::Borrowed(l.as_str())))
                .collect(),
        )
    };
    build(flow, &list(source_labels), &list(dest_labels))
}

/// Decodes one Goldmane/Whisker JSON line.
pub fn decode(line: &[u8]) -> Result<Decoded, DecodeError> {
    let mut top: Obj<'_> = serde_json::from_slice(line).map_err(DecodeError::json)?;
    let mut flow = match top.flow.take() {
        Some(inner) => *inner,
        None => top,
    };
    let key = match flow.key.take() {
        Some(key) => *key,
        None if flow.source_name.is_some() || flow.dest_name.is_some() || flow.action.is_some() => {
            std::mem::take(&mut flow)
        }
        None => return Err(DecodeError::MissingField("Key")),
    };
    // After the move above the labels and counters live in `flow` (nested key) or in
    // `key` (flat Whisker flow); read each from wherever it is set.
    let start = flow.start_time.as_ref().or(key.start_time.as_ref());
    let parts = GoldmaneFlow {
        source_name: text(&key.source_name),
        source_namespace: text(&key.source_namespace),
        source_type: number_or_unset(key.source_type.as_ref(), ENDPOINT_TYPES),
        dest_name: text(&key.dest_name),
        dest_namespace: text(&key.dest_namespace),
        dest_type: number_or_unset(key.dest_type.as_ref(), ENDPOINT_TYPES),
        dest_port: key.dest_port.unwrap_or_default().0,
        proto: text(&key.proto),
        reporter: number_or_unset(key.reporter.as_ref(), REPORTERS),
        start_time: start.map(TimeVal::resolve).transpose()?,
        action: match &key.action {
            None => 0,
            Some(a) => enum_number(a, ACTIONS).ok_or_else(|| DecodeError::BadValue {
                field: "action",
                value: a.text(),
            })?,
        },
        num_connections_started: flow
            .num_connections_started
            .or(key.num_connections_started)
            .unwrap_or_default()
            .0,
        enforced_policies: key
            .policies
            .iter()
            .flat_map(|p| p.enforced_policies.iter())
            .map(Hit::parts),
    };
    build(
        parts,
        pick(&flow.source_labels, &key.source_labels),
        pick(&flow.dest_labels, &key.dest_labels),
    )
    .map(Decoded::Record)
}

/// Names of the protobuf enums as JSON may give them (protojson names, the flow logs'
/// short endpoint types).
const ENDPOINT_TYPES: &[(&str, i32)] = &[
    ("EndpointTypeUnspecified", 0),
    ("WorkloadEndpoint", 1),
    ("wep", 1),
    ("HostEndpoint", 2),
    ("hep", 2),
    ("NetworkSet", 3),
    ("ns", 3),
    ("Network", 4),
    ("net", 4),
];
const REPORTERS: &[(&str, i32)] = &[("ReporterUnspecified", 0), ("Src", 1), ("Dst", 2)];
const ACTIONS: &[(&str, i32)] = &[
    ("ActionUnspecified", 0),
    ("Allow", 1),
    ("Deny", 2),
    ("Pass", 3),
];
const POLICY_KINDS: &[(&str, i32)] = &[
    ("CalicoNetworkPolicy", 1),
    ("GlobalNetworkPolicy", 2),
    ("StagedNetworkPolicy", 3),
    ("StagedGlobalNetworkPolicy", 4),
    ("StagedKubernetesNetworkPolicy", 5),
    ("NetworkPolicy", 6),
    ("AdminNetworkPolicy", 7),
    ("BaselineAdminNetworkPolicy", 8),
    ("Profile", 9),
    ("EndOfTier", 10),
    ("ClusterNetworkPolicy", 11),
];
const ACTION_DENY: i32 = 2;
const KIND_END_OF_TIER: i32 = 10;

/// The protobuf number of a JSON enum; `None` for an unknown name or a number beyond `i32`.
fn enum_number(v: &EnumVal<'_>, names: &[(&str, i32)]) -> Option<i32> {
    match v {
        EnumVal::Num(n) => i32::try_from(*n).ok(),
        EnumVal::Name(s) => names
            .iter()
            .find(|(name, _)| s.eq_ignore_ascii_case(name))
            .map(|&(_, n)| n),
    }
}

/// As [`enum_number`], unknown values read as unspecified (0).
fn number_or_unset(v: Option<&EnumVal<'_>>, names: &[(&str, i32)]) -> i32 {
    v.and_then(|v| enum_number(v, names)).unwrap_or(0)
}

fn text<'s>(s: &'s Option<CowStr<'_>>) -> &'s str {
    s.as_deref().unwrap_or("")
}

/// A string that is neither empty nor `-`.
fn given(s: &str) -> Option<&str> {
    (!s.is_empty() && s != "-").then_some(s)
}

fn calico_type(n: i32) -> Option<CalicoType> {
    match n {
        1 => Some(CalicoType::Workload),
        2 => Some(CalicoType::Host),
        3 => Some(CalicoType::NetworkSet),
        4 => Some(CalicoType::Network),
        _ => None,
    }
}

impl Hit<'_> {
    fn parts(&self) -> GoldmanePolicyHit<'_> {
        let trigger = self.trigger.as_deref();
        GoldmanePolicyHit {
            kind: number_or_unset(self.kind.as_ref(), POLICY_KINDS),
            namespace: text(&self.namespace),
            name: text(&self.name),
            action: number_or_unset(self.action.as_ref(), ACTIONS),
            trigger_namespace: trigger.map_or("", |t| text(&t.namespace)),
            trigger_name: trigger.map_or("", |t| text(&t.name)),
        }
    }
}

/// The one place a Goldmane flow becomes a [`FlowRecord`].
fn build<'a, H>(
    flow: GoldmaneFlow<'a, H>,
    src_labels: &LabelList<'_>,
    dst_labels: &LabelList<'_>,
) -> Result<FlowRecord, DecodeError>
where
    H: IntoIterator<Item = GoldmanePolicyHit<'a>>,
{
    let observation = match flow.reporter {
        1 => ObservationPoint::Egress,
        2 => ObservationPoint::Ingress,
        _ => ObservationPoint::Unknown,
    };
    let verdict = match flow.action {
        0 => return Err(DecodeError::MissingField("action")),
        a => calico_verdict(Some(&EnumVal::Num(i64::from(a))))?,
    };
    let policy = match verdict {
        Verdict::PolicyDenied => denying_policy(flow.enforced_policies),
        _ => None,
    };
    let protocol = given(flow.proto).map_or(Protocol::Other, protocol);
    let destination_port = port("destPort", flow.dest_port)?;
    let source = calico_endpoint(CalicoSide {
        kind: calico_type(flow.source_type),
        name: given(flow.source_name),
        namespace: given(flow.source_namespace),
        labels: src_labels,
        ip: None,
        aggregate: None,
    });
    let destination = calico_endpoint(CalicoSide {
        kind: calico_type(flow.dest_type),
        name: given(flow.dest_name),
        namespace: given(flow.dest_namespace),
        labels: dst_labels,
        ip: None,
        aggregate: None,
    });
    Ok(FlowRecord {
        time: flow.start_time,
        node: None,
        source,
        destination,
        protocol,
        source_port: 0,
        destination_port,
        observation,
        verdict,
        reply: None,
        destination_dns: None,
        policy,
        connections: u64::try_from(flow.num_connections_started)
            .unwrap_or(0)
            .max(1),
    })
}

/// `a` unless it is absent.
fn pick<'r, 'a>(a: &'r LabelList<'a>, b: &'r LabelList<'a>) -> &'r LabelList<'a> {
    if matches!(a, LabelList::None) { b } else { a }
}

/// The first enforced policy hit that denied; for an end-of-tier deny, the policy that
/// triggered it when Goldmane says.
fn denying_policy<'a>(hits: impl IntoIterator<Item = GoldmanePolicyHit<'a>>) -> Option<Str> {
    let hit = hits.into_iter().find(|h| h.action == ACTION_DENY)?;
    let own = || policy_ref(Some(hit.namespace), hit.name);
    if hit.kind == KIND_END_OF_TIER {
        policy_ref(Some(hit.trigger_namespace), hit.trigger_name).or_else(own)
    } else {
        own()
    }
}

#[cfg(test)]
#[path = "goldmane_tests.rs"]
mod tests;
