//! Calico Goldmane flows as JSON (dataplanes.md §2): the `Flow` message as protojson
//! (`{"Key":{"sourceName":…},"startTime":"…",…}`, int64s as strings, enums as names), as
//! Go `encoding/json` (snake_case, enums and int64s as numbers), wrapped in a
//! `FlowResult` (`{"id":…,"flow":{…}}`), or Whisker's flat snake_case `FlowResponse`
//! (`source_name`, `dest_port`, `start_time` as RFC 3339, labels joined with `" | "`).
//!
//! Goldmane reports no addresses, ports of clients or nodes: a record has names,
//! namespaces, labels, the server port, the reporter and the final action.

use serde::Deserialize;

use super::common::{
    CalicoSide, CalicoType, CowStr, EnumVal, FlexInt, LabelList, TimeVal, calico_endpoint,
    calico_verdict, policy_ref, port, present, protocol,
};
use super::{DecodeError, Decoded};
use crate::flow::{FlowRecord, ObservationPoint, Protocol, Str, Verdict};

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

impl Hit<'_> {
    fn reference(&self) -> Option<Str> {
        policy_ref(present(&self.namespace), self.name.as_deref().unwrap_or(""))
    }
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
    record(
        &flow,
        &key,
        pick(&flow.source_labels, &key.source_labels),
        pick(&flow.dest_labels, &key.dest_labels),
    )
    .map(Decoded::Record)
}

fn record(
    flow: &Obj<'_>,
    key: &Obj<'_>,
    src_labels: &LabelList<'_>,
    dst_labels: &LabelList<'_>,
) -> Result<FlowRecord, DecodeError> {
    let start = flow.start_time.as_ref().or(key.start_time.as_ref());
    let time = start.map(TimeVal::resolve).transpose()?;
    let observation = match &key.reporter {
        Some(r) if r.is("Src", 1) => ObservationPoint::Egress,
        Some(r) if r.is("Dst", 2) => ObservationPoint::Ingress,
        _ => ObservationPoint::Unknown,
    };
    let verdict = calico_verdict(key.action.as_ref())?;
    let policy = match verdict {
        Verdict::PolicyDenied => denying_policy(key.policies.as_ref()),
        _ => None,
    };
    let protocol = present(&key.proto).map_or(Protocol::Other, protocol);
    let destination_port = port("destPort", key.dest_port.unwrap_or_default().0)?;
    let started = flow
        .num_connections_started
        .or(key.num_connections_started)
        .unwrap_or_default()
        .0;
    let source = calico_endpoint(CalicoSide {
        kind: key.source_type.as_ref().and_then(CalicoType::parse),
        name: present(&key.source_name),
        namespace: present(&key.source_namespace),
        labels: src_labels,
        ip: None,
        aggregate: None,
    });
    let destination = calico_endpoint(CalicoSide {
        kind: key.dest_type.as_ref().and_then(CalicoType::parse),
        name: present(&key.dest_name),
        namespace: present(&key.dest_namespace),
        labels: dst_labels,
        ip: None,
        aggregate: None,
    });
    Ok(FlowRecord {
        time,
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
        connections: u64::try_from(started).unwrap_or(0).max(1),
    })
}

/// `a` unless it is absent.
fn pick<'r, 'a>(a: &'r LabelList<'a>, b: &'r LabelList<'a>) -> &'r LabelList<'a> {
    if matches!(a, LabelList::None) { b } else { a }
}

/// The first enforced policy hit that denied; for an end-of-tier deny, the policy that
/// triggered it when Goldmane says.
fn denying_policy(policies: Option<&Policies<'_>>) -> Option<Str> {
    let hit = policies?
        .enforced_policies
        .iter()
        .find(|h| h.action.as_ref().is_some_and(|a| a.is("Deny", 2)))?;
    let end_of_tier = hit.kind.as_ref().is_some_and(|k| k.is("EndOfTier", 10));
    match (&hit.trigger, end_of_tier) {
        (Some(trigger), true) => trigger.reference().or_else(|| hit.reference()),
        _ => hit.reference(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::{EndpointId, Reserved, WorkloadKind, WorkloadRef};

    fn rec(line: &str) -> FlowRecord {
        match decode(line.as_bytes()) {
            Ok(Decoded::Record(r)) => r,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn go_json_with_numbers_inside_flow_result() {
        let r = rec(
            r#"{"id":7,"flow":{"Key":{"source_name":"api-6d9f7c8b5-*","source_namespace":"shop","source_type":1,"dest_name":"pub","dest_namespace":"-","dest_type":4,"dest_port":443,"proto":"tcp","reporter":1,"action":2,"policies":{"enforced_policies":[{"kind":10,"tier":"default","action":2,"trigger":{"kind":6,"namespace":"shop","name":"egress-lockdown"}}]}},"start_time":1764970845,"source_labels":["pod-template-hash=6d9f7c8b5","app=api"],"num_connections_started":3}}"#,
        );
        let api = WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::Deployment,
            name: "api".into(),
        };
        assert_eq!(r.source.id, EndpointId::Workload(api));
        assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::World));
        assert_eq!(r.observation, ObservationPoint::Egress);
        assert_eq!(r.verdict, Verdict::PolicyDenied);
        assert_eq!(r.policy.as_deref(), Some("shop/egress-lockdown"));
        assert_eq!(r.connections, 3);
        assert_eq!(r.destination_port, 443);
    }

    #[test]
    fn whisker_flat_flow() {
        let r = rec(
            r#"{"start_time":"2025-12-05T21:40:45Z","end_time":"2025-12-05T21:41:00Z","action":"Allow","source_name":"web-*","source_namespace":"shop","source_labels":"app=web | controller-revision-hash=web-7f9c","dest_name":"db-0","dest_namespace":"shop","dest_labels":"","protocol":"tcp","dest_port":5432,"reporter":"Dst","policies":{"enforced":[],"pending":[]}}"#,
        );
        let web = WorkloadRef {
            namespace: "shop".into(),
            kind: WorkloadKind::StatefulSet,
            name: "web".into(),
        };
        assert_eq!(r.source.id, EndpointId::Workload(web));
        assert_eq!(r.source.labels.len(), 2);
        assert_eq!(
            r.destination.id,
            EndpointId::Pod {
                namespace: "shop".into(),
                name: "db-0".into()
            }
        );
        assert_eq!(r.observation, ObservationPoint::Ingress);
        assert_eq!(
            r.time,
            Some(crate::flow::Timestamp::from_secs(1_764_970_845))
        );
        assert_eq!(r.connections, 1);
    }

    #[test]
    fn pass_host_networkset_and_errors() {
        let r = rec(
            r#"{"Key":{"sourceName":"node-1","sourceNamespace":"-","sourceType":"HostEndpoint","destName":"blocked","destNamespace":"-","destType":"NetworkSet","proto":"udp","destPort":"53","reporter":"Src","action":"Pass"}}"#,
        );
        assert_eq!(r.source.id, EndpointId::Reserved(Reserved::Host));
        assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::World));
        assert_eq!(r.verdict, Verdict::Error);
        assert_eq!(r.protocol, Protocol::Udp);
        // Aggregated pods without owner labels stay a group.
        let r = rec(
            r#"{"Key":{"sourceName":"job-*","sourceNamespace":"b","sourceType":1,"action":1}}"#,
        );
        assert_eq!(
            r.source.id,
            EndpointId::PodGroup {
                namespace: "b".into(),
                prefix: "job-".into()
            }
        );
        assert_eq!(
            decode(br#"{"startTime":"1"}"#),
            Err(DecodeError::MissingField("Key"))
        );
        assert_eq!(
            decode(br#"{"Key":{"sourceName":"a"}}"#),
            Err(DecodeError::MissingField("action"))
        );
        assert!(matches!(
            decode(br#"{"Key":{"action":"Maybe"}}"#),
            Err(DecodeError::BadValue {
                field: "action",
                ..
            })
        ));
        assert!(matches!(
            decode(br#"{"Key":{"action":1,"destPort":"99999"}}"#),
            Err(DecodeError::BadPort { .. })
        ));
        assert!(matches!(
            decode(br#"{"Key":{"action":1,"destPort":"1e3"}}"#),
            Err(DecodeError::InvalidJson(_))
        ));
    }
}
