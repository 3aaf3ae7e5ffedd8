//! Decoders from source bytes to [`ne_flow::flow::FlowRecord`]: the first step of the data
//! flow, before edge derivation ([`ne_flow::edge`]) and aggregation.
//!
//! Every source is line-oriented: Hubble JSON ([`hubble`]), ztunnel access logs
//! ([`ztunnel`], optionally in CRI framing, [`cri`]), Goldmane/Whisker flows
//! ([`goldmane`]) and Calico Enterprise flow logs ([`calico`]). A line decodes to a record,
//! to a counted skip ([`SkipReason`], e.g. a ztunnel `state` line or a Hubble
//! `lost_events` response) or to a [`DecodeError`]; no input panics. [`LineDecoder`] keeps
//! the little state a stream needs (CRI partial lines); [`decode_lines`] drives it over a
//! whole buffer and counts what happened in [`DecodeStats`].
//!
//! Decoders parse with borrowed data and allocate each `Arc<str>` of the record once.

pub mod calico;
mod calico_fields;
mod common;
pub mod cri;
mod format;
pub mod goldmane;
pub mod hubble;
pub mod hubble_pb;
pub mod ztunnel;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use cri::{CriJoiner, CriLine};
pub use format::{DetectError, Format, UnknownFormat};

use ne_flow::flow::FlowRecord;
use ne_flow::time::TimeError;

/// Why a well-formed line produced no record. Bounded, so it can label a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SkipReason {
    /// An empty or whitespace-only line.
    EmptyLine,
    /// A Hubble `lost_events` response (a learning gap, counted separately by callers).
    HubbleLostEvents,
    /// A Hubble `node_status` response.
    HubbleNodeStatus,
    /// A ztunnel line whose target is not `access` (`state:…`, `ztunnel::state`, `dns`, `xds`).
    ZtunnelNonAccess,
    /// A ztunnel `connection opened` line (debug level; the `complete` line follows).
    ZtunnelConnectionOpened,
    /// Another `access` message (`connection failed`, …).
    ZtunnelOtherMessage,
    /// A CRI partial (`P`) line whose final (`F`) piece never came before the end of input.
    CriPartialAtEof,
    /// A CRI partial line abandoned: an unframed line came instead of its `F` piece, or the
    /// joined line grew beyond [`cri::MAX_JOINED_LEN`].
    CriPartialAbandoned,
}

impl SkipReason {
    /// Every reason, in a stable order.
    pub const ALL: [SkipReason; 8] = [
        SkipReason::EmptyLine,
        SkipReason::HubbleLostEvents,
        SkipReason::HubbleNodeStatus,
        SkipReason::ZtunnelNonAccess,
        SkipReason::ZtunnelConnectionOpened,
        SkipReason::ZtunnelOtherMessage,
        SkipReason::CriPartialAtEof,
        SkipReason::CriPartialAbandoned,
    ];

    /// A stable snake_case label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::EmptyLine => "empty_line",
            SkipReason::HubbleLostEvents => "hubble_lost_events",
            SkipReason::HubbleNodeStatus => "hubble_node_status",
            SkipReason::ZtunnelNonAccess => "ztunnel_non_access",
            SkipReason::ZtunnelConnectionOpened => "ztunnel_connection_opened",
            SkipReason::ZtunnelOtherMessage => "ztunnel_other_message",
            SkipReason::CriPartialAtEof => "cri_partial_at_eof",
            SkipReason::CriPartialAbandoned => "cri_partial_abandoned",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a line could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or JSON of the wrong shape; carries serde's message.
    #[error("invalid json: {0}")]
    InvalidJson(String),
    /// A text line that is not UTF-8.
    #[error("line is not valid utf-8 (first bad byte at offset {0})")]
    InvalidUtf8(usize),
    /// A field the record cannot do without is absent.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// An `ip:port` value that is not one.
    #[error("bad address in `{field}`: {value:?} (expected ip:port)")]
    BadAddress { field: &'static str, value: String },
    /// An IP address that does not parse.
    #[error("bad ip address in `{field}`: {value:?}")]
    BadIp { field: &'static str, value: String },
    /// A port outside `0..=65535`.
    #[error("port out of range in `{field}`: {value}")]
    BadPort { field: &'static str, value: i64 },
    /// A value the decoder does not know (an unknown verdict, ...).
    #[error("unexpected value in `{field}`: {value:?}")]
    BadValue { field: &'static str, value: String },
    /// A timestamp that is not RFC 3339.
    #[error("bad timestamp {value:?}: {reason}")]
    BadTimestamp { value: String, reason: TimeError },
    /// A ztunnel text value opened with `"` and never closed.
    #[error("unterminated quoted value for `{0}`")]
    UnterminatedQuote(String),
    /// A line that has none of the shapes this format can take.
    #[error("unknown line shape: expected {expected}, found {found:?}")]
    LineShape {
        expected: &'static str,
        found: String,
    },
    /// A protobuf message that is not well-formed: truncated, a length past the end, a
    /// known field with the wrong wire type, invalid UTF-8 in a string the record keeps.
    #[error("malformed protobuf in `{field}` at byte {offset}: {reason}")]
    Protobuf {
        /// The message or field being read (`Flow.IP`, `Endpoint.labels`).
        field: &'static str,
        /// Offset of the problem from the start of the outermost message.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
}

impl DecodeError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::InvalidJson(_) => "invalid_json",
            DecodeError::InvalidUtf8(_) => "invalid_utf8",
            DecodeError::MissingField(_) => "missing_field",
            DecodeError::BadAddress { .. } => "bad_address",
            DecodeError::BadIp { .. } => "bad_ip",
            DecodeError::BadPort { .. } => "bad_port",
            DecodeError::BadValue { .. } => "bad_value",
            DecodeError::BadTimestamp { .. } => "bad_timestamp",
            DecodeError::UnterminatedQuote(_) => "unterminated_quote",
            DecodeError::LineShape { .. } => "line_shape",
            DecodeError::Protobuf { .. } => "protobuf",
        }
    }

    pub(crate) fn json(e: serde_json::Error) -> Self {
        DecodeError::InvalidJson(e.to_string())
    }

    /// A [`DecodeError::LineShape`] quoting at most 60 characters of what was found.
    pub(crate) fn shape(expected: &'static str, found: &str) -> Self {
        let cut = found.char_indices().nth(60).map_or(found.len(), |(i, _)| i);
        DecodeError::LineShape {
            expected,
            found: found[..cut].to_owned(),
        }
    }
}

/// What one line decoded to.
// Records are the common case; boxing them would cost an allocation per flow.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A flow record.
    Record(FlowRecord),
    /// A well-formed line that carries no flow.
    Skip(SkipReason),
    /// A CRI partial piece was buffered; its line completes later.
    Partial,
}

/// Decodes one unframed line (no CRI prefix) of `format`.
pub fn decode_line(format: Format, line: &[u8]) -> Result<Decoded, DecodeError> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(Decoded::Skip(SkipReason::EmptyLine));
    }
    match format {
        Format::HubbleJson => hubble::decode(line),
        Format::Ztunnel => ztunnel::decode(line),
        Format::GoldmaneJson => goldmane::decode(line),
        Format::CalicoFlowLog => calico::decode(line),
    }
}

/// A stateful line decoder for a stream: looks through CRI framing (joining `P` pieces)
/// and decodes each complete payload. One per input stream (file, socket).
#[derive(Debug)]
pub struct LineDecoder {
    format: Format,
    cri: CriJoiner,
}

impl LineDecoder {
    /// A decoder for `format` with no pending state.
    pub fn new(format: Format) -> Self {
        LineDecoder {
            format,
            cri: CriJoiner::default(),
        }
    }

    /// The format this decoder reads.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Decodes one physical line (without its `\n`).
    pub fn feed(&mut self, line: &[u8]) -> Result<Decoded, DecodeError> {
        match self.payload(line) {
            Some(payload) => decode_line(self.format, &payload),
            None => Ok(Decoded::Partial),
        }
    }

    /// The payload [`LineDecoder::feed`] decodes for one physical line (without its
    /// `\n`): the line itself when it is not CRI-framed, an `F` piece's payload (both
    /// borrowed), `P…F` pieces joined, or `None` while a partial line is buffered. For
    /// callers with their own decoder (the agent's ztunnel fast path,
    /// [`ztunnel::record_line`]).
    pub fn payload<'a>(&mut self, line: &'a [u8]) -> Option<Cow<'a, [u8]>> {
        match self.cri.feed(trim_line(line)) {
            CriLine::Unframed(payload) => Some(Cow::Borrowed(payload)),
            CriLine::Complete(payload) => Some(payload),
            CriLine::Partial => None,
        }
    }

    /// Partial lines abandoned since the last call (see [`SkipReason::CriPartialAbandoned`]).
    pub fn take_abandoned(&mut self) -> u64 {
        self.cri.take_abandoned()
    }

    /// Ends the input: the number of partial lines still waiting for their `F` piece,
    /// which are dropped.
    pub fn finish(&mut self) -> u64 {
        self.cri.finish()
    }
}

/// A line that failed to decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    /// 1-based physical line number (for a joined CRI line, the line of its `F` piece).
    pub line: usize,
    /// What was wrong with it.
    pub error: DecodeError,
}

/// Counts of what a run of lines decoded to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Lines that decoded to a record.
    pub records: u64,
    /// Lines skipped, by reason (reasons never seen are absent).
    pub skipped: BTreeMap<SkipReason, u64>,
    /// Lines that failed to decode.
    pub errors: u64,
    /// The first [`DecodeStats::MAX_KEPT_ERRORS`] errors, in input order.
    pub first_errors: Vec<LineError>,
}

impl DecodeStats {
    /// How many errors [`DecodeStats::first_errors`] keeps.
    pub const MAX_KEPT_ERRORS: usize = 20;

    /// Counts `n` skips of `reason`.
    pub fn add_skip(&mut self, reason: SkipReason, n: u64) {
        if n > 0 {
            *self.skipped.entry(reason).or_default() += n;
        }
    }

    /// Skips counted for `reason`.
    pub fn skips(&self, reason: SkipReason) -> u64 {
        self.skipped.get(&reason).copied().unwrap_or(0)
    }

    /// All skips.
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// Counts one decode result of line `line` and hands back its record, if any.
    pub fn account(
        &mut self,
        line: usize,
        result: Result<Decoded, DecodeError>,
    ) -> Option<FlowRecord> {
        match result {
            Ok(Decoded::Record(rec)) => {
                self.records += 1;
                return Some(rec);
            }
            Ok(Decoded::Skip(reason)) => self.add_skip(reason, 1),
            Ok(Decoded::Partial) => {}
            Err(error) => {
                self.errors += 1;
                if self.first_errors.len() < Self::MAX_KEPT_ERRORS {
                    self.first_errors.push(LineError { line, error });
                }
            }
        }
        None
    }
}

/// Decodes every `\n`-separated line of `input` (a final line without `\n` included),
/// handing each record to `on_record`. Bad lines are counted in the stats.
pub fn decode_lines(
    format: Format,
    input: &[u8],
    on_record: impl FnMut(FlowRecord),
) -> DecodeStats {
    decode_lines_strict(format, input, false, on_record).0
}

/// As [`decode_lines`]; with `strict`, stops at the first bad line and returns it beside
/// the stats up to it.
pub fn decode_lines_strict(
    format: Format,
    input: &[u8],
    strict: bool,
    mut on_record: impl FnMut(FlowRecord),
) -> (DecodeStats, Option<LineError>) {
    let mut decoder = LineDecoder::new(format);
    let mut stats = DecodeStats::default();
    let mut lines = input.split(|&b| b == b'\n').peekable();
    let mut number = 0;
    while let Some(line) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break; // the empty rest after a final '\n'
        }
        number += 1;
        match decoder.feed(line) {
            Err(error) if strict => {
                return (
                    stats,
                    Some(LineError {
                        line: number,
                        error,
                    }),
                );
            }
            result => {
                if let Some(rec) = stats.account(number, result) {
                    on_record(rec);
                }
            }
        }
        stats.add_skip(SkipReason::CriPartialAbandoned, decoder.take_abandoned());
    }
    stats.add_skip(SkipReason::CriPartialAtEof, decoder.finish());
    (stats, None)
}

/// Strips one trailing `\r` (CRLF input).
fn trim_line(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests;
