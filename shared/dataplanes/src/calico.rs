//! Calico Enterprise Felix flow logs (`/var/log/calico/flowlogs/flows.log`, the
//! Elasticsearch documents): snake_case, one aggregated flow per line, with
//! `source_name_aggr`/`dest_name_aggr`, nullable IPs and ports, `reporter` `src`/`dst`,
//! `action` `allow`/`deny` and `policies.all_policies` as `idx|tier|name|action[|rule]`.
//!
//! Endpoints follow the same Calico rules as Goldmane ([`super::goldmane`]); the pod name
//! is `*_name` unless it is the `-` placeholder, else the `*_name_aggr` aggregate.

use serde::Deserialize;

use super::calico_fields::{CalicoSide, CalicoType, calico_endpoint, calico_verdict};
use super::common::{
    CowStr, EnumVal, FlexInt, LabelList, TimeVal, parse_ip, port, present, protocol,
};
use super::{DecodeError, Decoded};
use ne_flow::flow::{FlowRecord, ObservationPoint, Protocol, Str, Verdict};

#[derive(Deserialize)]
struct FlowLog<'a> {
    #[serde(borrow)]
    start_time: Option<TimeVal<'a>>,
    #[serde(borrow)]
    source_ip: Option<CowStr<'a>>,
    #[serde(borrow)]
    source_name: Option<CowStr<'a>>,
    #[serde(borrow)]
    source_name_aggr: Option<CowStr<'a>>,
    #[serde(borrow)]
    source_namespace: Option<CowStr<'a>>,
    source_port: Option<FlexInt>,
    #[serde(borrow)]
    source_type: Option<EnumVal<'a>>,
    #[serde(borrow, default)]
    source_labels: LabelList<'a>,
    #[serde(borrow)]
    dest_ip: Option<CowStr<'a>>,
    #[serde(borrow)]
    dest_name: Option<CowStr<'a>>,
    #[serde(borrow)]
    dest_name_aggr: Option<CowStr<'a>>,
    #[serde(borrow)]
    dest_namespace: Option<CowStr<'a>>,
    dest_port: Option<FlexInt>,
    #[serde(borrow)]
    dest_type: Option<EnumVal<'a>>,
    #[serde(borrow, default)]
    dest_labels: LabelList<'a>,
    #[serde(borrow)]
    proto: Option<CowStr<'a>>,
    #[serde(borrow)]
    action: Option<EnumVal<'a>>,
    #[serde(borrow)]
    reporter: Option<EnumVal<'a>>,
    #[serde(borrow)]
    policies: Option<Policies<'a>>,
    num_flows_started: Option<FlexInt>,
    num_flows: Option<FlexInt>,
    #[serde(borrow)]
    host: Option<CowStr<'a>>,
}

#[derive(Deserialize)]
struct Policies<'a> {
    #[serde(borrow, default)]
    all_policies: Vec<CowStr<'a>>,
}

/// Decodes one Felix flow-log line.
pub fn decode(line: &[u8]) -> Result<Decoded, DecodeError> {
    let f: FlowLog<'_> = serde_json::from_slice(line).map_err(DecodeError::json)?;
    let time = f.start_time.as_ref().map(TimeVal::resolve).transpose()?;
    let observation = match &f.reporter {
        Some(r) if r.is("src", 1) => ObservationPoint::Egress,
        Some(r) if r.is("dst", 2) => ObservationPoint::Ingress,
        _ => ObservationPoint::Unknown,
    };
    let verdict = calico_verdict(f.action.as_ref())?;
    let policy = match verdict {
        Verdict::PolicyDenied => f
            .policies
            .as_ref()
            .and_then(|p| denying_policy(&p.all_policies)),
        _ => None,
    };
    let src_ip = parse_ip("source_ip", f.source_ip.as_deref())?;
    let dst_ip = parse_ip("dest_ip", f.dest_ip.as_deref())?;
    let source = calico_endpoint(CalicoSide {
        kind: f.source_type.as_ref().and_then(CalicoType::parse),
        name: present(&f.source_name).or(present(&f.source_name_aggr)),
        namespace: present(&f.source_namespace),
        labels: &f.source_labels,
        ip: src_ip,
        aggregate: present(&f.source_name_aggr),
    });
    let destination = calico_endpoint(CalicoSide {
        kind: f.dest_type.as_ref().and_then(CalicoType::parse),
        name: present(&f.dest_name).or(present(&f.dest_name_aggr)),
        namespace: present(&f.dest_namespace),
        labels: &f.dest_labels,
        ip: dst_ip,
        aggregate: present(&f.dest_name_aggr),
    });
    let started = f.num_flows_started.or(f.num_flows).unwrap_or_default().0;
    Ok(Decoded::Record(FlowRecord {
        time,
        node: present(&f.host).map(Str::from),
        source,
        destination,
        protocol: present(&f.proto).map_or(Protocol::Other, protocol),
        source_port: port("source_port", f.source_port.unwrap_or_default().0)?,
        destination_port: port("dest_port", f.dest_port.unwrap_or_default().0)?,
        observation,
        verdict,
        reply: None,
        destination_dns: None,
        policy,
        connections: u64::try_from(started).unwrap_or(0).max(1),
    }))
}

/// The name of the first `all_policies` entry whose action is `deny`
/// (`0|default|policy-demo/default.deny-access-nginx|deny`, or with a rule index after it).
fn denying_policy(all: &[CowStr<'_>]) -> Option<Str> {
    all.iter().find_map(|entry| {
        let mut parts = entry.split('|');
        let (_index, _tier, name, action) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        (action == "deny" && !name.is_empty()).then(|| Str::from(name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ne_flow::flow::{EndpointId, Reserved};

    #[test]
    fn policy_entries_old_and_new_form() {
        let all = |v: &[&'static str]| {
            v.iter()
                .map(|s| CowStr(std::borrow::Cow::Borrowed(*s)))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            denying_policy(&all(&[
                "0|security|security.pass-all|pass",
                "1|default|ns1/default.deny-x|deny|-1"
            ]))
            .as_deref(),
            Some("ns1/default.deny-x")
        );
        assert_eq!(
            denying_policy(&all(&[
                "0|default|policy-demo/default.access-nginx|allow",
                "garbage"
            ])),
            None
        );
    }

    #[test]
    fn network_and_host_types_and_bad_values() {
        let line = br#"{"source_ip":"10.0.0.8","source_name":"-","source_name_aggr":"pvt","source_namespace":"-","source_type":"net","dest_ip":"10.0.0.9","dest_name":"-","dest_name_aggr":"node-2","dest_namespace":"-","dest_type":"hep","dest_port":10250,"proto":"6","action":"allow","reporter":"dst"}"#;
        let Ok(Decoded::Record(r)) = decode(line) else {
            panic!()
        };
        assert_eq!(
            r.source.id,
            EndpointId::External("10.0.0.8".parse().unwrap())
        );
        assert_eq!(r.destination.id, EndpointId::Reserved(Reserved::Host));
        assert_eq!(r.protocol, Protocol::Tcp);
        assert!(matches!(
            decode(br#"{"action":"allow","source_ip":"nope"}"#),
            Err(DecodeError::BadIp {
                field: "source_ip",
                ..
            })
        ));
        assert!(matches!(
            decode(br#"{"action":"allow","dest_port":-1}"#),
            Err(DecodeError::BadPort { value: -1, .. })
        ));
        assert!(matches!(
            decode(br#"{"action":"allow","start_time":"x"}"#),
            Err(DecodeError::BadTimestamp { .. })
        ));
    }
}
