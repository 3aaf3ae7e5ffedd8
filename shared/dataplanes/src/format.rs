//! The input formats, and how a file's format is told from its first lines.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{cri, trim_line, ztunnel};

/// The input formats the decoders understand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Format {
    /// `hubble observe -o json|jsonpb` and the Hubble exporter: `GetFlowsResponse` or bare
    /// `Flow` objects, one per line.
    HubbleJson,
    /// Istio ambient ztunnel logs (text or JSON), optionally CRI-framed.
    Ztunnel,
    /// Calico Goldmane `Flow`/`FlowResult` as protojson, or Whisker's snake_case flows.
    GoldmaneJson,
    /// Calico Enterprise Felix flow logs (`flows.log`, Elasticsearch JSON).
    CalicoFlowLog,
}

impl Format {
    /// Every format, in a stable order.
    pub const ALL: [Format; 4] = [
        Format::HubbleJson,
        Format::Ztunnel,
        Format::GoldmaneJson,
        Format::CalicoFlowLog,
    ];

    /// The command-line name (`hubble-json`, `ztunnel`, `goldmane-json`, `calico-flowlog`).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::HubbleJson => "hubble-json",
            Format::Ztunnel => "ztunnel",
            Format::GoldmaneJson => "goldmane-json",
            Format::CalicoFlowLog => "calico-flowlog",
        }
    }

    /// Guesses the format from the first non-empty line of an input (CRI framing is looked
    /// through). `None` when the line matches no format.
    pub fn detect(first_non_empty_line: &[u8]) -> Option<Format> {
        let line = match cri::split(trim_line(first_non_empty_line)) {
            Some(framed) => framed.payload,
            None => trim_line(first_non_empty_line),
        };
        let line = line.trim_ascii();
        if line.first() == Some(&b'{') {
            return detect_json(line);
        }
        ztunnel::looks_like_text(line).then_some(Format::Ztunnel)
    }

    /// Detects the format of a whole input from its first non-empty lines: the first of
    /// at most [`Format::DETECT_LINES`] that tells decides, so that a bad first line (a
    /// capture cut mid-record, say) is decoded and counted like any other bad line.
    pub fn detect_input(input: &[u8]) -> Result<Format, DetectError> {
        let mut lines = input
            .split(|&b| b == b'\n')
            .enumerate()
            .filter(|(_, line)| !line.trim_ascii().is_empty())
            .take(Self::DETECT_LINES)
            .peekable();
        let first = lines.peek().map(|(i, _)| i + 1).ok_or(DetectError::Empty)?;
        lines
            .find_map(|(_, line)| Format::detect(line))
            .ok_or(DetectError::Unknown { line: first })
    }

    /// How many non-empty lines [`Format::detect_input`] looks at.
    pub const DETECT_LINES: usize = 20;

    /// The provider whose edge rules apply to records of this format.
    pub fn provider(self) -> ne_flow::edge::Provider {
        match self {
            Format::HubbleJson => ne_flow::edge::Provider::Cilium,
            Format::Ztunnel => ne_flow::edge::Provider::Istio,
            Format::GoldmaneJson | Format::CalicoFlowLog => ne_flow::edge::Provider::Calico,
        }
    }
}

/// Classifies a JSON object by its keys. Falls back to substring checks when the line
/// does not parse (for example the first piece of a CRI partial line).
fn detect_json(line: &[u8]) -> Option<Format> {
    fn classify(obj: &serde_json::Map<String, serde_json::Value>) -> Option<Format> {
        let has = |k: &str| obj.contains_key(k);
        if has("scope") || (has("message") && has("level")) {
            Some(Format::Ztunnel)
        } else if has("Key") || has("key") {
            Some(Format::GoldmaneJson)
        } else if has("source_name_aggr") || has("dest_name_aggr") || has("num_flows") {
            Some(Format::CalicoFlowLog)
        } else if has("source_name") || has("dest_name") {
            Some(Format::GoldmaneJson)
        } else if let Some(serde_json::Value::Object(inner)) = obj.get("flow") {
            classify(inner).or(Some(Format::HubbleJson))
        } else if [
            "lost_events",
            "node_status",
            "verdict",
            "IP",
            "l4",
            "source",
            "destination",
        ]
        .iter()
        .any(|k| has(k))
        {
            Some(Format::HubbleJson)
        } else {
            None
        }
    }
    if let Ok(serde_json::Value::Object(obj)) = serde_json::from_slice::<serde_json::Value>(line) {
        return classify(&obj);
    }
    let contains = |needle: &str| line.windows(needle.len()).any(|w| w == needle.as_bytes());
    if contains("\"scope\"") || contains("{\"level\"") {
        Some(Format::Ztunnel)
    } else if contains("\"Key\"") || contains("\"key\"") {
        Some(Format::GoldmaneJson)
    } else if contains("\"source_name_aggr\"") || contains("\"source_ip\"") {
        Some(Format::CalicoFlowLog)
    } else if contains("\"verdict\"") || contains("\"flow\"") || contains("\"lost_events\"") {
        Some(Format::HubbleJson)
    } else {
        None
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an input's format could not be detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    #[error("the input is empty")]
    Empty,
    /// None of the first lines has a known shape; `line` is the first non-empty one (1-based).
    #[error("line {line} and the ones after it match no known format")]
    Unknown { line: usize },
}

/// An unknown format name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown format {0:?} (expected hubble-json, ztunnel, goldmane-json or calico-flowlog)")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownFormat(s.to_owned()))
    }
}
