//! Cilium Hubble `GetFlowsResponse` messages as protobuf bytes: the agent's hot path from
//! the gRPC stream (`observer.Observer/GetFlows`) to a [`FlowRecord`].
//!
//! [`decode_response`] walks the wire format in place (module `wire`) and reads only what
//! the record needs: no prost structs, nothing copied; it allocates only what the record
//! holds (the `Arc<str>`s of node, names, labels, DNS name and policy). It fills the same
//! borrowed `FlowFields` as the JSON decoder ([`super::hubble`]) and maps it with the same
//! function, so a flow gives the same record whichever way it arrives.
//!
//! Field numbers are Hubble's (API v1; the `.proto` subset is in
//! `proto/proto/hubble/`). Fields the record does not use are skipped without being
//! parsed; unknown fields of any wire type are skipped. Malformed input (a truncated
//! varint, a length past the end, a known field with the wrong wire type, invalid UTF-8 in
//! a string the record keeps) is a [`DecodeError::Protobuf`]; no input panics.
//!
//! Protobuf semantics: a scalar that occurs twice keeps its last value; an embedded
//! message that occurs twice is merged (its scalars overwritten, its repeated fields
//! concatenated); of the `response_types` oneof the last member present wins, and a `flow`
//! split over several occurrences is read from the last one (no encoder splits messages).

mod cache;
mod endpoint;
mod fast;
mod scan;
mod wire;

use super::DecodeError;
use super::common::EnumVal;
use super::hubble::{FlowFields, L4Fields, PolicyFields, flow_record};
use endpoint::{EndpointAcc, Labels};
pub use fast::{HubbleDecoder, HubbleRecorded, record_exact};
use ne_flow::flow::{FlowRecord, Str, Timestamp};
use wire::{Field, Reader};

/// What one `GetFlowsResponse` carries.
// Records are the common case; boxing them would cost an allocation per flow.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubbleMessage {
    /// A flow, with the response's `node_name` and `time` filled in where the flow lacks
    /// them.
    Flow(FlowRecord),
    /// Events lost before they reached the stream: a learning gap to count.
    LostEvents {
        /// Where they were lost.
        source: LostEventSource,
        /// How many.
        count: u64,
    },
    /// Hubble Relay: nodes connected or lost.
    NodeStatus(NodeStatus),
    /// A response with none of the above (a newer response type).
    Other,
}

/// Where Hubble lost events (`flow.LostEventSource`). Bounded, so it can label a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LostEventSource {
    /// Not set, or a source this version does not know.
    Unknown,
    /// The kernel's perf ring buffer: the Cilium agent read too slowly from the data path.
    PerfEventRingBuffer,
    /// Hubble's observer queue: the observer fell behind the data path.
    ObserverEventsQueue,
    /// Hubble's flow ring buffer: this client read too slowly.
    HubbleRingBuffer,
}

impl LostEventSource {
    /// From the protobuf enum number (unknown numbers are [`LostEventSource::Unknown`]).
    pub fn from_number(n: i32) -> Self {
        match n {
            1 => LostEventSource::PerfEventRingBuffer,
            2 => LostEventSource::ObserverEventsQueue,
            3 => LostEventSource::HubbleRingBuffer,
            _ => LostEventSource::Unknown,
        }
    }

    /// A stable snake_case label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LostEventSource::Unknown => "unknown",
            LostEventSource::PerfEventRingBuffer => "perf_event_ring_buffer",
            LostEventSource::ObserverEventsQueue => "observer_events_queue",
            LostEventSource::HubbleRingBuffer => "hubble_ring_buffer",
        }
    }
}

/// A Hubble Relay node status event (`relay.NodeStatusEvent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// The nodes' new state.
    pub state: NodeState,
    /// The nodes concerned.
    pub node_names: Vec<Str>,
    /// Relay's explanation, if any.
    pub message: Option<Str>,
}

/// The state of a node behind Hubble Relay (`relay.NodeState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeState {
    /// Not set, or a state this version does not know.
    Unknown,
    /// Relay is connected to the node.
    Connected,
    /// Relay cannot reach the node: its flows are missing from the stream.
    Unavailable,
    /// The node left the cluster.
    Gone,
    /// The node's stream failed.
    Error,
}

impl NodeState {
    /// From the protobuf enum number (unknown numbers are [`NodeState::Unknown`]).
    pub fn from_number(n: i32) -> Self {
        match n {
            1 => NodeState::Connected,
            2 => NodeState::Unavailable,
            3 => NodeState::Gone,
            4 => NodeState::Error,
            _ => NodeState::Unknown,
        }
    }
}

/// Which member of the `response_types` oneof a response carries.
enum Member<'a> {
    Flow(Reader<'a>),
    NodeStatus(Reader<'a>),
    LostEvents(Reader<'a>),
}

/// Decodes the bytes of one `GetFlowsResponse` (one gRPC message, as handed over by
/// `ne_proto::raw::RawCodec`).
pub fn decode_response(bytes: &[u8]) -> Result<HubbleMessage, DecodeError> {
    let mut r = Reader::new(bytes, "GetFlowsResponse");
    let mut member = None;
    let mut node_name = None;
    let mut time = TimeAcc::default();
    while let Some(f) = r.next_field()? {
        match f.number {
            1 => member = Some(Member::Flow(f.message("GetFlowsResponse.flow")?)),
            2 => {
                member = Some(Member::NodeStatus(
                    f.message("GetFlowsResponse.node_status")?,
                ))
            }
            3 => {
                member = Some(Member::LostEvents(
                    f.message("GetFlowsResponse.lost_events")?,
                ))
            }
            1000 => node_name = Some(f.str("GetFlowsResponse.node_name")?),
            1001 => time.merge(f.message("GetFlowsResponse.time")?)?,
            _ => {}
        }
    }
    match member {
        Some(Member::Flow(flow)) => walk_flow(flow, node_name, time.get())
            .and_then(flow_record)
            .map(HubbleMessage::Flow),
        Some(Member::LostEvents(m)) => lost_events(m),
        Some(Member::NodeStatus(m)) => node_status(m).map(HubbleMessage::NodeStatus),
        None => Ok(HubbleMessage::Other),
    }
}

/// Decodes the bytes of one bare `flow.Flow` (no response wrapper), e.g. from an exporter
/// that writes flows as length-delimited protobuf.
pub fn decode_flow_message(bytes: &[u8]) -> Result<FlowRecord, DecodeError> {
    walk_flow(Reader::new(bytes, "Flow"), None, None).and_then(flow_record)
}

/// A `google.protobuf.Timestamp`, merged over its occurrences.
#[derive(Default)]
struct TimeAcc {
    present: bool,
    seconds: i64,
    nanos: i32,
}

impl TimeAcc {
    fn merge(&mut self, mut m: Reader<'_>) -> Result<(), DecodeError> {
        self.present = true;
        while let Some(f) = m.next_field()? {
            match f.number {
                1 => self.seconds = f.varint("Timestamp.seconds")? as i64,
                2 => self.nanos = f.int32("Timestamp.nanos")?,
                _ => {}
            }
        }
        Ok(())
    }

    fn get(&self) -> Option<Timestamp> {
        self.present
            .then(|| ne_flow::time::from_secs_nanos(self.seconds, i64::from(self.nanos)))
    }
}

/// `Flow.l4`: the last oneof member wins; the same member twice is merged.
#[derive(Clone, Copy)]
struct L4Acc {
    which: u32,
    ports: (u32, u32),
}

impl L4Acc {
    fn merge(&mut self, mut m: Reader<'_>) -> Result<(), DecodeError> {
        while let Some(f) = m.next_field()? {
            let name = match f.number {
                1 => "Layer4.TCP",
                2 => "Layer4.UDP",
                3 => "Layer4.ICMPv4",
                4 => "Layer4.ICMPv6",
                5 => "Layer4.SCTP",
                _ => continue,
            };
            let mut p = f.message(name)?;
            if self.which != f.number {
                self.which = f.number;
                self.ports = (0, 0);
            }
            if matches!(f.number, 3 | 4) {
                continue;
            }
            while let Some(f) = p.next_field()? {
                match f.number {
                    1 => self.ports.0 = f.uint32("Layer4.source_port")?,
                    2 => self.ports.1 = f.uint32("Layer4.destination_port")?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn get(self) -> L4Fields {
        let (s, d) = self.ports;
        match self.which {
            1 => L4Fields::Tcp(s, d),
            2 => L4Fields::Udp(s, d),
            5 => L4Fields::Sctp(s, d),
            3 | 4 => L4Fields::Icmp,
            _ => L4Fields::Other,
        }
    }
}

/// The first policy of a `*_denied_by` list.
fn policy<'a>(f: &Field<'a>) -> Result<PolicyFields<'a>, DecodeError> {
    let mut m = f.message("Flow.denied_by")?;
    let (mut name, mut namespace) = (None, None);
    while let Some(f) = m.next_field()? {
        match f.number {
            1 => name = Some(f.str("Policy.name")?),
            2 => namespace = Some(f.str("Policy.namespace")?),
            _ => {}
        }
    }
    Ok(PolicyFields { name, namespace })
}

/// Walks one `Flow`, validating everything the record reads, into its borrowed fields.
fn walk_flow<'a>(
    flow: Reader<'a>,
    response_node_name: Option<&'a str>,
    response_time: Option<Timestamp>,
) -> Result<FlowFields<'a, Labels<'a>>, DecodeError> {
    let mut m = flow.clone();
    let mut time = TimeAcc::default();
    let (mut verdict, mut drop_reason, mut direction, mut drop_reason_desc) = (0, 0, 0, 0);
    let (mut ip_source, mut ip_destination) = (None, None);
    let mut l4 = L4Acc {
        which: 0,
        ports: (0, 0),
    };
    let (mut source, mut destination) = (EndpointAcc::default(), EndpointAcc::default());
    let (mut node_name, mut destination_name) = (None, None);
    let (mut reply, mut is_reply) = (None, None);
    let (mut egress_denied_by, mut ingress_denied_by) = (None, None);
    while let Some(f) = m.next_field()? {
        match f.number {
            1 => time.merge(f.message("Flow.time")?)?,
            2 => verdict = f.int32("Flow.verdict")?,
            3 => drop_reason = f.uint32("Flow.drop_reason")?,
            5 => {
                let mut ip = f.message("Flow.IP")?;
                while let Some(f) = ip.next_field()? {
                    match f.number {
                        1 => ip_source = Some(f.str("IP.source")?),
                        2 => ip_destination = Some(f.str("IP.destination")?),
                        _ => {}
                    }
                }
            }
            6 => l4.merge(f.message("Flow.l4")?)?,
            8 => source.merge(f.message("Flow.source")?)?,
            9 => destination.merge(f.message("Flow.destination")?)?,
            11 => node_name = Some(f.str("Flow.node_name")?),
            14 if destination_name.is_none() => {
                destination_name = Some(f.str("Flow.destination_names")?);
            }
            16 => reply = Some(f.bool("Flow.reply")?),
            22 => direction = f.int32("Flow.traffic_direction")?,
            25 => drop_reason_desc = f.int32("Flow.drop_reason_desc")?,
            26 => {
                let mut b = f.message("Flow.is_reply")?;
                let mut value = false;
                while let Some(f) = b.next_field()? {
                    if f.number == 1 {
                        value = f.bool("BoolValue.value")?;
                    }
                }
                is_reply = Some(value);
            }
            21004 if egress_denied_by.is_none() => egress_denied_by = Some(policy(&f)?),
            21005 if ingress_denied_by.is_none() => ingress_denied_by = Some(policy(&f)?),
            _ => {}
        }
    }
    Ok(FlowFields {
        time: time.get().or(response_time),
        node_name,
        response_node_name,
        ip_source,
        ip_destination,
        l4: l4.get(),
        source: source.fields(&flow, 8),
        destination: destination.fields(&flow, 9),
        verdict: Some(EnumVal::Num(verdict.into())),
        drop_reason_desc: Some(EnumVal::Num(drop_reason_desc.into())),
        drop_reason: Some(drop_reason),
        traffic_direction: Some(EnumVal::Num(direction.into())),
        is_reply,
        reply,
        destination_name,
        egress_denied_by,
        ingress_denied_by,
    })
}

fn lost_events(mut m: Reader<'_>) -> Result<HubbleMessage, DecodeError> {
    let (mut source, mut count) = (0, 0);
    while let Some(f) = m.next_field()? {
        match f.number {
            1 => source = f.int32("LostEvent.source")?,
            2 => count = f.varint("LostEvent.num_events_lost")?,
            _ => {}
        }
    }
    Ok(HubbleMessage::LostEvents {
        source: LostEventSource::from_number(source),
        count,
    })
}

fn node_status(mut m: Reader<'_>) -> Result<NodeStatus, DecodeError> {
    let mut status = NodeStatus {
        state: NodeState::Unknown,
        node_names: Vec::new(),
        message: None,
    };
    while let Some(f) = m.next_field()? {
        match f.number {
            1 => status.state = NodeState::from_number(f.int32("NodeStatusEvent.state_change")?),
            2 => status
                .node_names
                .push(f.str("NodeStatusEvent.node_names")?.into()),
            3 => {
                let message = f.str("NodeStatusEvent.message")?;
                status.message = (!message.is_empty()).then(|| message.into());
            }
            _ => {}
        }
    }
    Ok(status)
}

#[cfg(test)]
mod tests;
