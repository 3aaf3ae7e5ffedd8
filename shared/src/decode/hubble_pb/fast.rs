//! The agent's hot path without the record: `GetFlowsResponse` bytes straight into the
//! [`FlowTable`].
//!
//! [`record_response`] walks the message exactly as [`super::decode_response`] does (same
//! validation, same errors), checks the scalars the way [`super::flow_record`] does, and
//! applies the edge rules of [`crate::edge::derive`]. The edge's key is then borrowed from
//! the message bytes ([`EdgeKeyRef`]) and looked up; only a key the table does not hold
//! yet costs the owned [`crate::flow::FlowRecord`] and [`Edge`] (labels and all), built by
//! the slow path itself. A flow over a known edge allocates nothing.
//!
//! The outcome is, message for message, what `decode_response` followed by
//! [`FlowTable::record_flow`] gives (property-tested against it).

use super::{HubbleMessage, LostEventSource, NodeStatus, Walked, walk_response};
use crate::decode::DecodeError;
use crate::decode::hubble::{FlowCore, endpoint_id, flow_core, flow_record};
use crate::edge::{self, Edge, EdgeSkip, Learnable, Provider};
use crate::flow::Direction;
use crate::table::{EdgeKeyRef, FlowTable, RecordOutcome};

/// What [`record_response`] did with one `GetFlowsResponse`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HubbleRecorded {
    /// A flow: recorded (as [`FlowTable::record_flow`] would), or why it teaches no edge.
    Flow(Result<RecordOutcome, EdgeSkip>),
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

/// Decodes one `GetFlowsResponse` and records the edge its flow teaches under
/// `provider`'s rules, allocating only for an edge `table` does not hold yet.
///
/// Same result as `decode_response` then `record_flow`: the same errors, the same skips,
/// the same entries, counts and times.
pub fn record_response(
    table: &FlowTable,
    bytes: &[u8],
    provider: Provider,
) -> Result<HubbleRecorded, DecodeError> {
    let fields = match walk_response(bytes)? {
        Walked::Flow(fields) => fields,
        Walked::Message(HubbleMessage::LostEvents { source, count }) => {
            return Ok(HubbleRecorded::LostEvents { source, count });
        }
        Walked::Message(HubbleMessage::NodeStatus(s)) => return Ok(HubbleRecorded::NodeStatus(s)),
        Walked::Message(HubbleMessage::Other | HubbleMessage::Flow(_)) => {
            return Ok(HubbleRecorded::Other);
        }
    };
    let core = flow_core(&fields)?;
    let direction = match direction(&core, provider) {
        Ok(d) => d,
        Err(skip) => return Ok(HubbleRecorded::Flow(Err(skip))),
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
    let time = fields.time.unwrap_or_default();
    let recorded = table.record_by_key(&key, time, 1, || -> Result<Edge, Miss> {
        // The slow path, for a new key: it cannot fail where the checks above passed,
        // and if it did, its answer is the right one.
        let record = flow_record(fields).map_err(Miss::Decode)?;
        edge::derive(&record, provider).map_err(Miss::Skip)
    });
    match recorded {
        Ok(outcome) => Ok(HubbleRecorded::Flow(Ok(outcome))),
        Err(Miss::Skip(skip)) => Ok(HubbleRecorded::Flow(Err(skip))),
        Err(Miss::Decode(e)) => Err(e),
    }
}

/// Why the slow path built no edge.
enum Miss {
    Decode(DecodeError),
    Skip(EdgeSkip),
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
