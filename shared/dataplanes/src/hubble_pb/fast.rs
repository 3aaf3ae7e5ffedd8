//! The agent's hot path without the record: `GetFlowsResponse` bytes straight into the
//! [`FlowTable`].
//!
//! [`HubbleDecoder::record`] reads a flow in its canonical shape with the lean walk of
//! module `scan` (endpoints it has read before come from its cache, module `cache`),
//! checks the scalars the way [`super::flow_record`] does and applies the edge
//! rules of [`ne_flow::edge::derive`]. The edge's key is then borrowed from the message
//! bytes ([`EdgeKeyRef`]) and looked up: a flow over a known edge allocates nothing. Only
//! a key the table does not hold yet, a message the walk does not take (malformed,
//! unusual, not a flow) and a policy denial go through the slow path,
//! [`super::decode_response`], which builds the owned record.
//!
//! The outcome is, message for message, what `decode_response` followed by
//! [`FlowTable::record_flow`] gives (property-tested against it).

use std::net::IpAddr;

use super::cache::EndpointCache;
use super::scan::{self, Bail, NoLabels};
use super::{HubbleMessage, LostEventSource, NodeStatus, decode_response};
use crate::DecodeError;
use crate::hubble::{FlowCore, FlowFields, endpoint_id, flow_core};
use ne_flow::edge::{self, EdgeSkip, Learnable, Provider};
use ne_flow::flow::{Direction, FlowRecord, Timestamp};
use ne_flow::table::{EdgeKeyRef, FlowTable, RecordOutcome};

/// What [`HubbleDecoder::record`] did with one `GetFlowsResponse`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubbleRecorded {
    /// A flow: recorded (as [`FlowTable::record_flow`] would), or why it teaches no edge.
    Flow {
        /// The flow's time (else the response's), for the scraper-lag metric.
        time: Option<Timestamp>,
        /// The table's answer, or why the flow teaches no edge.
        outcome: Result<RecordOutcome, EdgeSkip>,
    },
    /// A policy denial or an audit-mode denial ([`Verdict::is_denial`]), decoded in full
    /// for the caller to keep as a protect- or monitor-mode observation. Nothing was
    /// recorded (a denial teaches no edge).
    Denial(Box<FlowRecord>),
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

/// The agent's Hubble decoder: records each `GetFlowsResponse` in a [`FlowTable`],
/// allocating only for an edge the table does not hold yet. It remembers the endpoints it
/// has read (module `cache`), so one per stream, reused for every message.
#[derive(Debug, Default)]
pub struct HubbleDecoder {
    endpoints: EndpointCache,
}

impl HubbleDecoder {
    /// A decoder that has seen nothing yet.
    pub fn new() -> Self {
        HubbleDecoder::default()
    }

    /// Decodes one `GetFlowsResponse` and records the edge its flow teaches under
    /// `provider`'s rules.
    ///
    /// Same result as `decode_response` then `record_flow`: the same errors, the same
    /// skips, the same entries, counts and times. A policy denial is returned whole
    /// instead of being recorded.
    pub fn record(
        &mut self,
        table: &FlowTable,
        bytes: &[u8],
        provider: Provider,
    ) -> Result<HubbleRecorded, DecodeError> {
        let mut fields = scan::blank();
        let Ok(walk) = scan::response(bytes, &mut fields) else {
            return record_exact(table, bytes, provider);
        };
        self.endpoints.reserve(walk.endpoints.len());
        let mut known = [None; 2];
        for (slot, body) in known.iter_mut().zip(walk.endpoints) {
            if let Some(body) = body {
                match self.endpoints.resolve(body) {
                    Ok(i) => *slot = Some(i),
                    Err(Bail) => return record_exact(table, bytes, provider),
                }
            }
        }
        let [source, destination] = known.map(|k| k.map(|i| self.endpoints.get(i)));
        if let Some(e) = source {
            fields.source = e.fields();
        }
        if let Some(e) = destination {
            fields.destination = e.fields();
        }
        record_fields(table, bytes, &fields, walk.ips, provider)
    }
}

/// The fast path, on a flow the lean walk read.
fn record_fields(
    table: &FlowTable,
    bytes: &[u8],
    fields: &FlowFields<'_, NoLabels<'_>>,
    [src_ip, dst_ip]: [Option<IpAddr>; 2],
    provider: Provider,
) -> Result<HubbleRecorded, DecodeError> {
    let core = FlowCore {
        src_ip,
        dst_ip,
        ..flow_core(fields)?
    };
    if core.verdict.is_denial() {
        return record_exact(table, bytes, provider);
    }
    let time = fields.time;
    let direction = match direction(&core, provider) {
        Ok(d) => d,
        Err(skip) => {
            return Ok(HubbleRecorded::Flow {
                time,
                outcome: Err(skip),
            });
        }
    };
    let source = endpoint_id(&fields.source, core.src_ip);
    let destination = endpoint_id(&fields.destination, core.dst_ip);
    let (subject, peer) = match direction {
        Direction::Egress => (source, destination),
        Direction::Ingress => (destination, source),
    };
    let key = EdgeKeyRef {
        subject,
        direction,
        // Hubble endpoints carry no mesh identity.
        peer_identity: None,
        peer,
        protocol: core.protocol,
        port: core.destination_port,
    };
    let recorded = table.record_by_key(&key, time.unwrap_or_default(), 1, || {
        // A new key: the slow path builds the edge. It cannot fail where the walk and the
        // checks above passed, and if it did, its answer would be the right one.
        match decode_response(bytes) {
            Ok(HubbleMessage::Flow(record)) => edge::derive(&record, provider).map_err(Ok),
            Ok(_) => Err(Ok(EdgeSkip::NotForwarded)),
            Err(e) => Err(Err(e)),
        }
    });
    let outcome = match recorded {
        Ok(outcome) => Ok(outcome),
        Err(Ok(skip)) => Err(skip),
        Err(Err(e)) => return Err(e),
    };
    Ok(HubbleRecorded::Flow { time, outcome })
}

/// The exact path: the full decode ([`decode_response`]), then
/// [`FlowTable::record_flow`]. What [`HubbleDecoder::record`] answers on every message, and
/// where it falls back on messages its walk does not take.
pub fn record_exact(
    table: &FlowTable,
    bytes: &[u8],
    provider: Provider,
) -> Result<HubbleRecorded, DecodeError> {
    Ok(match decode_response(bytes)? {
        HubbleMessage::Flow(record) if record.verdict.is_denial() => {
            HubbleRecorded::Denial(Box::new(record))
        }
        HubbleMessage::Flow(record) => HubbleRecorded::Flow {
            time: record.time,
            outcome: table.record_flow(&record, provider),
        },
        HubbleMessage::LostEvents { source, count } => HubbleRecorded::LostEvents { source, count },
        HubbleMessage::NodeStatus(s) => HubbleRecorded::NodeStatus(s),
        HubbleMessage::Other => HubbleRecorded::Other,
    })
}

/// The rules of [`edge::derive`] on the checked scalars of a Hubble flow (Hubble never
/// carries a mesh identity).
fn direction(core: &FlowCore, provider: Provider) -> Result<Direction, EdgeSkip> {
    Learnable {
        reply: core.reply,
        verdict: core.verdict,
        protocol: core.protocol,
        destination_port: core.destination_port,
        observation: core.observation,
        source_identity: false,
    }
    .direction(provider)
}
