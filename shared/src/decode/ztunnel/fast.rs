//! The agent's ztunnel hot path: one access-log payload (after CRI framing) straight into
//! the [`FlowTable`].
//!
//! [`record_line`] reads a text line in place: target and message first, then the
//! `k=v` fields as byte ranges of the line, the addresses and the time without
//! allocating. It applies the learning rules ([`Learnable::direction`]), borrows the
//! edge's key from the line ([`EdgeKeyRef`]) and looks it up; only a key the table does
//! not hold yet costs the owned [`FlowRecord`] and [`edge::Edge`], built by the slow path itself
//! ([`super::decode`] and [`edge::derive`]). A flow over a known edge allocates nothing.
//!
//! The fast path handles the common shape only. Whatever it does not recognise (JSON
//! lines, non-ASCII bytes, escapes in a quoted value, another timestamp form, span fields
//! in the header, any line that decodes to an error) goes to the slow path whole, so
//! the result is, line for line, what [`super::decode`] followed by
//! [`FlowTable::record_flow`] gives: the same errors, skips, entries, counts and times
//! (property-tested against it). Policy rejections are handed back decoded
//! ([`ZtunnelRecorded::Denial`]): the caller keeps them as denials.

use memchr::memmem;

use super::scan::{addr, find_eq_or_sep, find_quote_or_escape, find_sep, plain, skip_seps, time};
use super::{Line, parse};
use crate::decode::{DecodeError, SkipReason};
use crate::edge::{self, EdgeSkip, Learnable, Provider};
use crate::flow::{
    Direction, FlowRecord, IdView, ObservationPoint, Protocol, Reserved, Timestamp, Verdict,
};
use crate::table::{EdgeKeyRef, FlowTable, RecordOutcome};

/// What [`record_line`] did with one payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZtunnelRecorded {
    /// An access record: recorded (as [`FlowTable::record_flow`] would), or why it teaches
    /// no edge.
    Flow {
        /// The record's time (for the scraper lag), when the line has one.
        time: Option<Timestamp>,
        /// What the table did, or why no edge was learned.
        outcome: Result<RecordOutcome, EdgeSkip>,
    },
    /// A line that carries no flow, as [`super::decode`] reports it.
    Skip(SkipReason),
    /// A policy rejection, decoded but not recorded: the caller records it as any decoded
    /// record (it teaches no edge, [`EdgeSkip::NotForwarded`], and is a denial,
    /// [`edge::derive_denial`]). Rare, so boxed.
    Denial(Box<FlowRecord>),
}

/// Decodes one ztunnel payload (after CRI framing; surrounding white space is trimmed as
/// [`crate::decode::decode_line`] does) and records the edge it teaches under
/// `provider`'s rules, allocating only for an edge `table` does not hold yet.
///
/// Same result as `decode_line(Format::Ztunnel, payload)` then `record_flow`: the same
/// errors, the same skips, the same entries, counts and times; a policy rejection comes
/// back as [`ZtunnelRecorded::Denial`] without touching `table`.
pub fn record_line(
    table: &FlowTable,
    payload: &[u8],
    provider: Provider,
) -> Result<ZtunnelRecorded, DecodeError> {
    let line = payload.trim_ascii();
    if line.is_empty() {
        return Ok(ZtunnelRecorded::Skip(SkipReason::EmptyLine));
    }
    match fast(table, line, provider) {
        Some(done) => Ok(done),
        None => slow(table, line, provider),
    }
}

/// The slow path in the fast path's terms.
fn slow(
    table: &FlowTable,
    line: &[u8],
    provider: Provider,
) -> Result<ZtunnelRecorded, DecodeError> {
    Ok(match parse(line)? {
        Line::Record(r) if r.verdict == Verdict::PolicyDenied => {
            ZtunnelRecorded::Denial(Box::new(r))
        }
        Line::Record(r) => ZtunnelRecorded::Flow {
            time: r.time,
            outcome: table.record_flow(&r, provider),
        },
        Line::Skip(reason) => ZtunnelRecorded::Skip(reason),
    })
}

/// The fast path: the answer for a line of the common shape, `None` to take the slow
/// path (which then also reports every error).
pub(super) fn fast(table: &FlowTable, line: &[u8], provider: Provider) -> Option<ZtunnelRecorded> {
    if line[0] == b'{' || !plain(line) {
        return None;
    }
    let (time, fields_at) = match header(line)? {
        Ok(head) => head,
        Err(skip) => return Some(ZtunnelRecorded::Skip(skip)),
    };
    let f = fields(line, fields_at)?;
    // The checks of the slow path's `record`, in its order; a failure is its error.
    // The source address is checked only: the key names the source by pod or as unknown.
    addr(f.src_addr?)?;
    let dst = addr(f.dst_addr?)?;
    let hbone = match f.dst_hbone_addr {
        Some(v) => Some(addr(v)?),
        None => None,
    };
    let verdict = match present(f.error) {
        None => Verdict::Forwarded,
        Some(e) if memmem::find(e, b"policy rejection").is_some() => return None,
        Some(_) => Verdict::Error,
    };
    let observation = match f.direction {
        Some(b"inbound") => ObservationPoint::Ingress,
        Some(b"outbound") => ObservationPoint::Egress,
        _ => ObservationPoint::Unknown,
    };
    let src_identity = present(f.src_identity);
    let port = hbone.unwrap_or(dst).port();
    let direction = Learnable {
        reply: Some(false),
        verdict,
        protocol: Protocol::Tcp,
        destination_port: port,
        observation,
        source_identity: src_identity.is_some(),
    }
    .direction(provider);
    let direction = match direction {
        Ok(d) => d,
        Err(skip) => {
            return Some(ZtunnelRecorded::Flow {
                time,
                outcome: Err(skip),
            });
        }
    };
    let source =
        pod(f.src_namespace, f.src_workload)?.unwrap_or(IdView::Reserved(Reserved::Unknown));
    let destination = pod(f.dst_namespace, f.dst_workload)?.unwrap_or(IdView::External(dst.ip()));
    let (subject, peer, peer_identity) = match direction {
        Direction::Ingress => (destination, source, src_identity),
        Direction::Egress => (source, destination, present(f.dst_identity)),
    };
    let key = EdgeKeyRef {
        subject,
        direction,
        peer,
        peer_identity: match peer_identity {
            Some(id) => Some(text(id.strip_prefix(b"spiffe://").unwrap_or(id))?),
            None => None,
        },
        protocol: Protocol::Tcp,
        port,
    };
    let recorded = table.record_by_key(&key, time.unwrap_or_default(), 1, || {
        // A new key: the slow path builds the edge. It agrees with the checks above, and
        // if it ever did not, nothing was recorded and the slow path answers.
        match parse(line) {
            Ok(Line::Record(r)) => edge::derive(&r, provider).map_err(Some),
            _ => Err(None),
        }
    });
    let outcome: Result<RecordOutcome, EdgeSkip> = match recorded {
        Ok(outcome) => Ok(outcome),
        Err(Some(skip)) => Err(skip),
        Err(None) => return None,
    };
    Some(ZtunnelRecorded::Flow { time, outcome })
}

/// `&str` of a value in a [`plain`] (so ASCII) line; `None` cannot happen there.
fn text(v: &[u8]) -> Option<&str> {
    std::str::from_utf8(v).ok()
}

/// A value that is there, non-empty and not `-` (the slow path's `present`).
fn present(v: Option<&[u8]>) -> Option<&[u8]> {
    v.filter(|v| !v.is_empty() && *v != b"-")
}

/// The pod a namespace and workload name, `Some(None)` when either is absent (the slow
/// path's `pod`).
fn pod<'a>(namespace: Option<&'a [u8]>, name: Option<&'a [u8]>) -> Option<Option<IdView<'a>>> {
    let (Some(namespace), Some(name)) = (present(namespace), present(name)) else {
        return Some(None);
    };
    Some(Some(IdView::Pod {
        namespace: text(namespace)?,
        name: text(name)?,
    }))
}

fn is_level(s: &[u8]) -> bool {
    [&b"trace"[..], b"debug", b"info", b"warn", b"error"]
        .iter()
        .any(|l| s.eq_ignore_ascii_case(l))
}

/// The next header token after `*at`, moving `*at` past it; `None` when it holds a brace
/// (tracing span fields, which the slow path groups across spaces).
fn token<'a>(line: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let start = skip_seps(line, *at);
    let end = find_sep(line, start);
    *at = end;
    let token = &line[start..end];
    (!token.iter().any(|&b| b == b'{' || b == b'}')).then_some(token)
}

/// The header of an `access` line: its time and where its fields start, or the skip of a
/// line with another target. `None` for anything but the common shape: an optional
/// timestamp, a level, a target, the message `connection complete` and a first field.
#[allow(clippy::type_complexity)]
fn header(line: &[u8]) -> Option<Result<(Option<Timestamp>, usize), SkipReason>> {
    let mut at = 0;
    let first = token(line, &mut at)?;
    let (time, level) = if is_level(first) {
        (None, first)
    } else if first.first()?.is_ascii_digit() {
        (Some(time(first)?), token(line, &mut at)?)
    } else {
        return None;
    };
    if !is_level(level) {
        return None;
    }
    let target = token(line, &mut at)?;
    let target = target.strip_suffix(b":").unwrap_or(target);
    if target.is_empty() {
        return None;
    }
    if target != b"access" {
        return Some(Err(SkipReason::ZtunnelNonAccess));
    }
    // The message runs up to the first word with a `=`; it must be `connection complete`
    // (anything else is a rare skip the slow path reports).
    for word in [&b"connection"[..], b"complete"] {
        let start = skip_seps(line, at);
        at = find_sep(line, start);
        if &line[start..at] != word {
            return None;
        }
    }
    let fields_at = skip_seps(line, at);
    let key_end = find_eq_or_sep(line, fields_at);
    (line.get(key_end) == Some(&b'=')).then_some(Ok((time, fields_at)))
}

/// The values of the keys the record uses, as byte ranges of the line.
#[derive(Default)]
struct Fields<'a> {
    src_addr: Option<&'a [u8]>,
    src_workload: Option<&'a [u8]>,
    src_namespace: Option<&'a [u8]>,
    src_identity: Option<&'a [u8]>,
    dst_addr: Option<&'a [u8]>,
    dst_hbone_addr: Option<&'a [u8]>,
    dst_workload: Option<&'a [u8]>,
    dst_namespace: Option<&'a [u8]>,
    dst_identity: Option<&'a [u8]>,
    direction: Option<&'a [u8]>,
    error: Option<&'a [u8]>,
}

impl<'a> Fields<'a> {
    fn set(&mut self, key: &[u8], value: &'a [u8]) {
        let slot = match key {
            [b's', b'r', b'c', b'.', name @ ..] => match name {
                b"addr" => &mut self.src_addr,
                b"workload" => &mut self.src_workload,
                b"namespace" => &mut self.src_namespace,
                b"identity" => &mut self.src_identity,
                _ => return,
            },
            [b'd', b's', b't', b'.', name @ ..] => match name {
                b"addr" => &mut self.dst_addr,
                b"hbone_addr" => &mut self.dst_hbone_addr,
                b"workload" => &mut self.dst_workload,
                b"namespace" => &mut self.dst_namespace,
                b"identity" => &mut self.dst_identity,
                _ => return,
            },
            b"direction" => &mut self.direction,
            b"error" => &mut self.error,
            _ => return, // bytes_*, duration, dst.service, src.protocol, ...
        };
        *slot = Some(value);
    }
}

/// Reads the `k=v` fields from `at` as the slow path's `fields` does (words without `=`
/// ignored, the last value of a key wins); `None` for a quoted value with an escape or
/// without its closing quote.
fn fields(line: &[u8], mut at: usize) -> Option<Fields<'_>> {
    let mut f = Fields::default();
    loop {
        at = skip_seps(line, at);
        if at == line.len() {
            return Some(f);
        }
        let eq = find_eq_or_sep(line, at);
        if line.get(eq) != Some(&b'=') {
            at = find_sep(line, eq);
            continue;
        }
        let key = &line[at..eq];
        let start = eq + 1;
        let (value, next) = if line.get(start) == Some(&b'"') {
            let body = start + 1;
            let close = find_quote_or_escape(line, body);
            if line.get(close) != Some(&b'"') {
                return None;
            }
            (&line[body..close], close + 1)
        } else {
            let end = find_sep(line, start);
            (&line[start..end], end)
        };
        f.set(key, value);
        at = next;
    }
}
