//! Istio ambient ztunnel access logs (container `istio-proxy` of the ztunnel DaemonSet),
//! after CRI framing is removed.
//!
//! Text lines: `<time> <level> <target> <message> <k=v …>`, where the separators are TABs
//! (ztunnel's own format), single spaces or runs of spaces (tabs expanded by whoever
//! copied the log); the tracing default format `<time>  INFO access: connection complete
//! k=v…` and lines without a timestamp are read too. Values are unquoted or quoted in
//! Rust Debug style. JSON lines (`LOG_FORMAT=json`) carry `scope`, `message` and the same
//! keys with dots in their names.
//!
//! Target `access` with message `connection complete` makes a record, and so do the
//! dry-run deny lines of target `state:…` / scope `ztunnel::state` (module `dryrun`:
//! audit denials, port 0); other targets (`dns`, `xds`), other `state` lines and other
//! messages are counted skips, decided before any field is parsed.
//!
//! [`decode`] builds an owned record per line. The agent instead uses [`record_line`]
//! (module `fast`), which reads the edge's key from the line and records it in the
//! `FlowTable` directly, falling back to [`decode`] for anything unusual.

mod dryrun;
mod fast;
mod scan;

use std::borrow::Cow;

use serde::Deserialize;

use super::common::{CowStr, parse_addr, parse_time, present};
use super::{DecodeError, Decoded, SkipReason};
pub use fast::{ZtunnelRecorded, record_line, record_line_exact};

use ne_flow::flow::{
    Endpoint, EndpointId, FlowRecord, ObservationPoint, Protocol, Reserved, Str, Timestamp, Verdict,
};

/// The fields of an access line the decoder uses (JSON keys as ztunnel writes them).
#[derive(Deserialize, Default, Debug)]
struct Access<'a> {
    #[serde(borrow)]
    time: Option<CowStr<'a>>,
    #[serde(borrow, alias = "target")]
    scope: Option<CowStr<'a>>,
    #[serde(borrow)]
    message: Option<CowStr<'a>>,
    #[serde(borrow, rename = "src.addr")]
    src_addr: Option<CowStr<'a>>,
    #[serde(borrow, rename = "src.workload")]
    src_workload: Option<CowStr<'a>>,
    #[serde(borrow, rename = "src.namespace")]
    src_namespace: Option<CowStr<'a>>,
    #[serde(borrow, rename = "src.identity")]
    src_identity: Option<CowStr<'a>>,
    #[serde(borrow, rename = "dst.addr")]
    dst_addr: Option<CowStr<'a>>,
    #[serde(borrow, rename = "dst.hbone_addr")]
    dst_hbone_addr: Option<CowStr<'a>>,
    #[serde(borrow, rename = "dst.workload")]
    dst_workload: Option<CowStr<'a>>,
    #[serde(borrow, rename = "dst.namespace")]
    dst_namespace: Option<CowStr<'a>>,
    #[serde(borrow, rename = "dst.identity")]
    dst_identity: Option<CowStr<'a>>,
    #[serde(borrow)]
    direction: Option<CowStr<'a>>,
    #[serde(borrow)]
    error: Option<CowStr<'a>>,
    /// The policy a `state` line names (text lines; JSON lines are read by `dryrun`).
    #[serde(skip)]
    policy: Option<CowStr<'a>>,
}

impl<'a> Access<'a> {
    fn set(&mut self, key: &str, value: Cow<'a, str>) {
        let slot = match key {
            "src.addr" => &mut self.src_addr,
            "src.workload" => &mut self.src_workload,
            "src.namespace" => &mut self.src_namespace,
            "src.identity" => &mut self.src_identity,
            "dst.addr" => &mut self.dst_addr,
            "dst.hbone_addr" => &mut self.dst_hbone_addr,
            "dst.workload" => &mut self.dst_workload,
            "dst.namespace" => &mut self.dst_namespace,
            "dst.identity" => &mut self.dst_identity,
            "direction" => &mut self.direction,
            "error" => &mut self.error,
            "policy" => &mut self.policy,
            _ => return, // bytes_*, duration, dst.service, src.protocol, ...
        };
        *slot = Some(CowStr(value));
    }
}

/// What the message of an `access` line says.
enum Message {
    Complete,
    Opened,
    Other,
}

fn message(m: &str) -> Message {
    match m {
        "connection complete" => Message::Complete,
        "connection opened" => Message::Opened,
        _ => Message::Other,
    }
}

/// Decodes one ztunnel log payload (text or JSON).
pub fn decode(line: &[u8]) -> Result<Decoded, DecodeError> {
    parse(line).map(|l| match l {
        Line::Record(r) => Decoded::Record(r),
        Line::Skip(reason) => Decoded::Skip(reason),
    })
}

/// What a payload decodes to: [`Decoded`] without its `Partial` case.
// Records are the common case (as in `Decoded`).
#[allow(clippy::large_enum_variant)]
pub(super) enum Line {
    Record(FlowRecord),
    Skip(SkipReason),
}

/// [`decode`], for the fast path's fallback.
pub(super) fn parse(line: &[u8]) -> Result<Line, DecodeError> {
    if line.first() == Some(&b'{') {
        return decode_json(line);
    }
    let text = std::str::from_utf8(line).map_err(|e| DecodeError::InvalidUtf8(e.valid_up_to()))?;
    decode_text(text)
}

fn decode_json(line: &[u8]) -> Result<Line, DecodeError> {
    let a: Access<'_> = serde_json::from_slice(line).map_err(DecodeError::json)?;
    match a.scope.as_deref() {
        Some("access") => {}
        Some(scope) if dryrun::is_state(scope) => {
            let message = a.message.as_deref().unwrap_or("");
            return dryrun::json(line, message, a.time.as_deref());
        }
        Some(_) => return Ok(Line::Skip(SkipReason::ZtunnelNonAccess)),
        None => return Err(DecodeError::MissingField("scope")),
    }
    match message(a.message.as_deref().unwrap_or("")) {
        Message::Complete => {}
        Message::Opened => return Ok(Line::Skip(SkipReason::ZtunnelConnectionOpened)),
        Message::Other => return Ok(Line::Skip(SkipReason::ZtunnelOtherMessage)),
    }
    let time = a.time.as_deref().map(parse_time).transpose()?;
    record(&a, time).map(Line::Record)
}

/// The part of a text line before its fields.
struct Header<'a> {
    time: Option<Timestamp>,
    target: &'a str,
    /// The message and the fields.
    rest: &'a str,
}

fn is_level(s: &str) -> bool {
    ["trace", "debug", "info", "warn", "error"]
        .iter()
        .any(|l| s.eq_ignore_ascii_case(l))
}

/// Splits off the first whitespace-free token; `{…}` groups (span fields) may hold spaces.
fn token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if c.is_whitespace() && depth == 0 => return (&s[..i], &s[i..]),
            _ => {}
        }
    }
    (s, "")
}

fn header(line: &str) -> Result<Header<'_>, DecodeError> {
    let (first, rest) = token(line);
    let (time, level, rest) = if is_level(first) {
        (None, first, rest)
    } else if first.starts_with(|c: char| c.is_ascii_digit()) {
        let time = parse_time(first)?;
        let (level, rest) = token(rest);
        (Some(time), level, rest)
    } else {
        return Err(DecodeError::shape(
            "a timestamp or a log level at the start of the line",
            first,
        ));
    };
    if !is_level(level) {
        return Err(DecodeError::shape(
            "a log level (trace, debug, info, warn, error) after the timestamp",
            level,
        ));
    }
    let (mut target, mut rest) = token(rest);
    // Tracing's default format prints spans as `name{fields}:` before `target:`.
    while target.ends_with("}:") {
        (target, rest) = token(rest);
    }
    let target = target.strip_suffix(':').unwrap_or(target);
    if target.is_empty() {
        return Err(DecodeError::shape("a log target after the level", line));
    }
    Ok(Header { time, target, rest })
}

/// `true` when a text line has the header of a ztunnel log line (format detection).
pub(crate) fn looks_like_text(line: &[u8]) -> bool {
    std::str::from_utf8(line).is_ok_and(|t| header(t).is_ok())
}

fn decode_text(line: &str) -> Result<Line, DecodeError> {
    let h = header(line)?;
    if dryrun::is_state(h.target) {
        return dryrun::text(h.time, h.target, h.rest);
    }
    if h.target != "access" {
        return Ok(Line::Skip(SkipReason::ZtunnelNonAccess));
    }
    // The message runs up to the first `key=value` word.
    let rest = h.rest.trim_start();
    let fields_at = rest
        .split_whitespace()
        .find(|w| w.contains('='))
        .map_or(rest.len(), |w| w.as_ptr() as usize - rest.as_ptr() as usize);
    let msg = rest[..fields_at].trim_end();
    if msg.is_empty() {
        return Err(DecodeError::shape(
            "a message after the `access` target",
            rest,
        ));
    }
    let mut msg_words = msg.split_whitespace();
    let normal = (msg_words.next(), msg_words.next(), msg_words.next());
    match normal {
        (Some("connection"), Some("complete"), None) => {}
        (Some("connection"), Some("opened"), None) => {
            return Ok(Line::Skip(SkipReason::ZtunnelConnectionOpened));
        }
        _ => return Ok(Line::Skip(SkipReason::ZtunnelOtherMessage)),
    }
    let mut a = Access::default();
    fields(&rest[fields_at..], &mut a)?;
    record(&a, h.time).map(Line::Record)
}

/// Parses `k=v` pairs; values are bare words or Rust Debug strings. Words without `=`
/// are ignored. Separators are ASCII white space (all ztunnel writes); scanning bytes
/// rather than chars keeps this the cheap part of a line.
fn fields<'a>(mut s: &'a str, out: &mut Access<'a>) -> Result<(), DecodeError> {
    let word_end = |s: &str| {
        s.bytes()
            .position(|b| b.is_ascii_whitespace())
            .unwrap_or(s.len())
    };
    loop {
        s = s.trim_ascii_start();
        if s.is_empty() {
            return Ok(());
        }
        let stop = s
            .bytes()
            .position(|b| b == b'=' || b.is_ascii_whitespace())
            .unwrap_or(s.len());
        if s.as_bytes().get(stop) != Some(&b'=') {
            s = &s[word_end(s)..];
            continue;
        }
        let key = &s[..stop];
        let after = &s[stop + 1..];
        let (value, rest) = if let Some(quoted) = after.strip_prefix('"') {
            unquote(quoted).ok_or_else(|| DecodeError::UnterminatedQuote(key.to_owned()))?
        } else {
            let end = word_end(after);
            (Cow::Borrowed(&after[..end]), &after[end..])
        };
        out.set(key, value);
        s = rest;
    }
}

/// Reads a Rust Debug string body (after its opening `"`): the unescaped value and the
/// text after the closing quote, or `None` when it is not closed.
fn unquote(s: &str) -> Option<(Cow<'_, str>, &str)> {
    let end = s.find(['"', '\\'])?;
    if s.as_bytes()[end] == b'"' {
        return Some((Cow::Borrowed(&s[..end]), &s[end + 1..]));
    }
    let mut out = String::with_capacity(s.len().min(256));
    out.push_str(&s[..end]);
    let tail = &s[end..];
    let mut chars = tail.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((Cow::Owned(out), &tail[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'u' => {
                    // `\u{hex}`: i is the backslash, i + 2 the brace.
                    let body = tail.get(i + 2..)?.strip_prefix('{')?;
                    let close = body.find('}')?;
                    let code = u32::from_str_radix(&body[..close], 16).ok();
                    out.push(
                        code.and_then(char::from_u32)
                            .unwrap_or(char::REPLACEMENT_CHARACTER),
                    );
                    let stop = i + 3 + close;
                    while chars.next_if(|(j, _)| *j <= stop).is_some() {}
                }
                other => out.push(other), // \" \\ \' and anything unknown
            },
            c => out.push(c),
        }
    }
    None
}

fn need<'s>(v: &'s Option<CowStr<'_>>, field: &'static str) -> Result<&'s str, DecodeError> {
    v.as_deref().ok_or(DecodeError::MissingField(field))
}

fn identity(v: &Option<CowStr<'_>>) -> Option<Str> {
    present(v).map(|id| Str::from(id.strip_prefix("spiffe://").unwrap_or(id)))
}

fn pod(namespace: &Option<CowStr<'_>>, workload: &Option<CowStr<'_>>) -> Option<EndpointId> {
    let (ns, name) = (present(namespace)?, present(workload)?);
    Some(EndpointId::Pod {
        namespace: ns.into(),
        name: name.into(),
    })
}

/// Maps an access record: `direction` inbound/outbound is the observation point;
/// `*.workload` + `*.namespace` name a pod (a source without them is unknown, a
/// destination without them is its address); identities lose `spiffe://`; the server port
/// is `dst.hbone_addr`'s, else `dst.addr`'s; no `error` is forwarded, a "policy rejection"
/// is a policy denial (naming the policy after "explicitly denied by: "), any other error
/// an error. ztunnel logs connections, so a record is never a reply.
fn record(a: &Access<'_>, time: Option<Timestamp>) -> Result<FlowRecord, DecodeError> {
    let src = parse_addr("src.addr", need(&a.src_addr, "src.addr")?)?;
    let dst = parse_addr("dst.addr", need(&a.dst_addr, "dst.addr")?)?;
    let hbone = a
        .dst_hbone_addr
        .as_deref()
        .map(|v| parse_addr("dst.hbone_addr", v))
        .transpose()?;
    let observation = match a.direction.as_deref() {
        Some("inbound") => ObservationPoint::Ingress,
        Some("outbound") => ObservationPoint::Egress,
        _ => ObservationPoint::Unknown,
    };
    let (verdict, policy) = match present(&a.error) {
        None => (Verdict::Forwarded, None),
        Some(e) if e.contains("policy rejection") => {
            let policy = e
                .split_once("explicitly denied by: ")
                .map(|(_, p)| p.trim())
                .filter(|p| !p.is_empty())
                .map(Str::from);
            (Verdict::PolicyDenied, policy)
        }
        Some(_) => (Verdict::Error, None),
    };
    let source_id =
        pod(&a.src_namespace, &a.src_workload).unwrap_or(EndpointId::Reserved(Reserved::Unknown));
    let destination_id =
        pod(&a.dst_namespace, &a.dst_workload).unwrap_or(EndpointId::External(dst.ip()));
    Ok(FlowRecord {
        time,
        node: None,
        source: Endpoint::new(source_id)
            .with_ip(Some(src.ip()))
            .with_identity(identity(&a.src_identity)),
        destination: Endpoint::new(destination_id)
            .with_ip(Some(dst.ip()))
            .with_identity(identity(&a.dst_identity)),
        protocol: Protocol::Tcp,
        source_port: src.port(),
        destination_port: hbone.unwrap_or(dst).port(),
        observation,
        verdict,
        reply: Some(false),
        destination_dns: None,
        policy,
        connections: 1,
    })
}

#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod tests;
