//! The agent's ztunnel hot path: one access-log payload (after CRI framing) straight into
//! the [`FlowTable`].
//!
//! [`record_line`] reads a text line in place, in this order:
//! 1. one pass over the bytes ([`super::scan::plain`]: printable ASCII or TAB, no `\\`);
//! 2. the header: time (fixed layout), level, target `access` (any other target is a
//!    skip), message `connection complete`;
//! 3. every `k=v` field, as byte ranges of the line. All of them, not only the key's: an
//!    unclosed quote anywhere is the slow path's error, and a repeated key's last value
//!    wins;
//! 4. the slow path's checks on the addresses (an error there beats any skip), then the
//!    learning rules ([`Learnable::direction`]): most lines that teach nothing
//!    (outbound under Istio, no source identity, errors) stop here;
//! 5. the edge's key, borrowed from the line ([`EdgeKeyRef`]), looked up in the table.
//!
//! Only a key the table does not hold yet costs the owned [`FlowRecord`] and
//! [`edge::Edge`], built by the slow path itself ([`super::decode`] and [`edge::derive`]).
//! A flow over a known edge allocates nothing.
//!
//! The fast path handles the common shape only. Whatever it does not recognise (JSON
//! lines, other bytes, escapes, another timestamp form, span fields in the header, other
//! messages, any line that decodes to an error) goes to the slow path whole, so the
//! result is, line for line, what [`super::decode`] followed by [`FlowTable::record_flow`]
//! gives: the same errors, skips, entries, counts and times (property-tested against it,
//! and on every real capture). Policy rejections are handed back decoded
//! ([`ZtunnelRecorded::Denial`]): the caller keeps them as denials.

use memchr::memmem;

use super::scan::{addr, find_eq_or_sep, find_quote, find_sep, plain, skip_seps, time};
use super::{Line, parse};
use crate::{DecodeError, SkipReason};
use ne_flow::edge::{self, EdgeSkip, Learnable, Provider};
use ne_flow::flow::{
    Direction, FlowRecord, IdView, ObservationPoint, Protocol, Reserved, Timestamp, Verdict,
};
use ne_flow::table::{EdgeKeyRef, FlowTable, RecordOutcome};

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
    /// A policy rejection or a dry-run deny line ([`Verdict::is_denial`]), decoded but
    /// not recorded: the caller records it as any decoded record (it teaches no edge,
    /// [`EdgeSkip::NotForwarded`], and is a denial, [`edge::derive_denial`], or an audit
    /// denial, [`edge::derive_audit`]). Rare, so boxed.
    Denial(Box<FlowRecord>),
}

/// Decodes one ztunnel payload (after CRI framing; surrounding white space is trimmed as
/// [`crate::decode_line`] does) and records the edge it teaches under
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

/// The exact path: [`crate::decode_line`] (`Format::Ztunnel`), then
/// [`FlowTable::record_flow`]: what [`record_line`] must answer on every payload (the
/// oracle of its tests and fuzz target).
pub fn record_line_exact(
    table: &FlowTable,
    payload: &[u8],
    provider: Provider,
) -> Result<ZtunnelRecorded, DecodeError> {
    Ok(match crate::decode_line(crate::Format::Ztunnel, payload)? {
        crate::Decoded::Record(r) if r.verdict.is_denial() => ZtunnelRecorded::Denial(Box::new(r)),
        crate::Decoded::Record(r) => ZtunnelRecorded::Flow {
            time: r.time,
            outcome: table.record_flow(&r, provider),
        },
        crate::Decoded::Skip(reason) => ZtunnelRecorded::Skip(reason),
        crate::Decoded::Partial => unreachable!("a payload never decodes to a partial line"),
    })
}

/// The slow path in the fast path's terms.
fn slow(
    table: &FlowTable,
    line: &[u8],
    provider: Provider,
) -> Result<ZtunnelRecorded, DecodeError> {
    Ok(match parse(line)? {
        Line::Record(r) if r.verdict.is_denial() => ZtunnelRecorded::Denial(Box::new(r)),
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
    // The key borrows its names from the line as `str`: one UTF-8 check of the whole
    // (ASCII) line is cheaper than one per name.
    let text = Text {
        line,
        text: std::str::from_utf8(line).ok()?,
    };
    let source = text
        .pod(f.src_namespace, f.src_workload)?
        .unwrap_or(IdView::Reserved(Reserved::Unknown));
    let destination = text
        .pod(f.dst_namespace, f.dst_workload)?
        .unwrap_or(IdView::External(dst.ip()));
    let (subject, peer, peer_identity) = match direction {
        Direction::Ingress => (destination, source, src_identity),
        Direction::Egress => (source, destination, present(f.dst_identity)),
    };
    let key = EdgeKeyRef {
        subject,
        direction,
        peer,
        peer_identity: match peer_identity {
            Some(id) => Some(text.of(id.strip_prefix(b"spiffe://").unwrap_or(id))?),
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

/// A line and the same line as `str`.
struct Text<'a> {
    line: &'a [u8],
    text: &'a str,
}

impl<'a> Text<'a> {
    /// `v`, a part of the line, as `str`.
    fn of(&self, v: &[u8]) -> Option<&'a str> {
        let start = v.as_ptr().addr().checked_sub(self.line.as_ptr().addr())?;
        self.text.get(start..start + v.len())
    }

    /// The pod a namespace and workload name, `Some(None)` when either is absent (the
    /// slow path's `pod`).
    fn pod(&self, namespace: Option<&[u8]>, name: Option<&[u8]>) -> Option<Option<IdView<'a>>> {
        let (Some(namespace), Some(name)) = (present(namespace), present(name)) else {
            return Some(None);
        };
        Some(Some(IdView::Pod {
            namespace: self.of(namespace)?,
            name: self.of(name)?,
        }))
    }
}

/// A value that is there, non-empty and not `-` (the slow path's `present`).
fn present(v: Option<&[u8]>) -> Option<&[u8]> {
    v.filter(|v| !v.is_empty() && *v != b"-")
}

fn is_level(s: &[u8]) -> bool {
    [&b"trace"[..], b"debug", b"info", b"warn", b"error"]
        .iter()
        .any(|l| s.eq_ignore_ascii_case(l))
}

/// The next header token after `*at`, moving `*at` past it. (The slow path groups `{…}`
/// span fields across spaces: tokens the fast path accepts hold no brace.)
fn token<'a>(line: &'a [u8], at: &mut usize) -> &'a [u8] {
    let start = skip_seps(line, *at);
    *at = find_sep(line, start);
    &line[start..*at]
}

/// The header of an `access` line: its time and where its fields start, or the skip of a
/// line with another target. `None` for anything but the common shape: an optional
/// timestamp, a level, a target, the message `connection complete` and a first field.
#[allow(clippy::type_complexity)]
fn header(line: &[u8]) -> Option<Result<(Option<Timestamp>, usize), SkipReason>> {
    let mut at = 0;
    // No brace in these: a level is a level, and `time` reads digits and `-T:.Z` only.
    let first = token(line, &mut at);
    let (time, level) = if is_level(first) {
        (None, first)
    } else if first.first()?.is_ascii_digit() {
        (Some(time(first)?), token(line, &mut at))
    } else {
        return None;
    };
    if !is_level(level) {
        return None;
    }
    let target = token(line, &mut at);
    if target != b"access" && target != b"access:" {
        // Another target, unless it is empty or has span fields (the slow path decides).
        // A `state` target may be a dry-run denial (module `dryrun`): the slow path reads it.
        let named = target.strip_suffix(b":").unwrap_or(target);
        let plain_target = !named.is_empty()
            && !std::str::from_utf8(named).is_ok_and(super::dryrun::is_state)
            && !target.iter().any(|&b| b == b'{' || b == b'}');
        return plain_target.then_some(Err(SkipReason::ZtunnelNonAccess));
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

/// The keys the record uses (and `Other`).
#[derive(Clone, Copy)]
enum Key {
    SrcAddr,
    SrcWorkload,
    SrcNamespace,
    SrcIdentity,
    DstAddr,
    DstHboneAddr,
    DstWorkload,
    DstNamespace,
    DstIdentity,
    Direction,
    Error,
    Other,
}

impl Key {
    fn of(key: &[u8]) -> Key {
        match key {
            b"src.addr" => Key::SrcAddr,
            b"src.workload" => Key::SrcWorkload,
            b"src.namespace" => Key::SrcNamespace,
            b"src.identity" => Key::SrcIdentity,
            b"dst.addr" => Key::DstAddr,
            b"dst.hbone_addr" => Key::DstHboneAddr,
            b"dst.workload" => Key::DstWorkload,
            b"dst.namespace" => Key::DstNamespace,
            b"dst.identity" => Key::DstIdentity,
            b"direction" => Key::Direction,
            b"error" => Key::Error,
            _ => Key::Other, // bytes_*, duration, dst.service, src.protocol, ...
        }
    }
}

/// The first eight bytes of a key, as a little-endian word.
const fn head(key: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*key)
}

const SRC_ADDR: u64 = head(b"src.addr");
const SRC_WORK: u64 = head(b"src.work");
const SRC_NAME: u64 = head(b"src.name");
const SRC_IDEN: u64 = head(b"src.iden");
const DST_ADDR: u64 = head(b"dst.addr");
const DST_HBON: u64 = head(b"dst.hbon");
const DST_WORK: u64 = head(b"dst.work");
const DST_NAME: u64 = head(b"dst.name");
const DST_IDEN: u64 = head(b"dst.iden");
const DST_SERV: u64 = head(b"dst.serv");
const DIRECTIO: u64 = head(b"directio");
const BYTES_SE: u64 = head(b"bytes_se");
const BYTES_RE: u64 = head(b"bytes_re");
const DURATION: u64 = head(b"duration");

/// `key` and the index after `tail` when `line` continues with `tail` at `at`.
fn tail<const N: usize>(line: &[u8], at: usize, tail: &[u8; N], key: Key) -> Option<(Key, usize)> {
    (line.get(at..).and_then(<[u8]>::first_chunk::<N>) == Some(tail)).then_some((key, at + N))
}

/// The key at `at` and the index of its value, when it is one of the keys ztunnel
/// writes (except the short `error`): told apart by its first eight bytes, without
/// searching for the `=`. `None`: search.
fn common_key(line: &[u8], at: usize) -> Option<(Key, usize)> {
    let first = u64::from_le_bytes(*line.get(at..)?.first_chunk::<8>()?);
    let rest = at + 8;
    match first {
        SRC_ADDR => tail(line, rest, b"=", Key::SrcAddr),
        SRC_WORK => tail(line, rest, b"load=", Key::SrcWorkload),
        SRC_NAME => tail(line, rest, b"space=", Key::SrcNamespace),
        SRC_IDEN => tail(line, rest, b"tity=", Key::SrcIdentity),
        DST_ADDR => tail(line, rest, b"=", Key::DstAddr),
        DST_HBON => tail(line, rest, b"e_addr=", Key::DstHboneAddr),
        DST_WORK => tail(line, rest, b"load=", Key::DstWorkload),
        DST_NAME => tail(line, rest, b"space=", Key::DstNamespace),
        DST_IDEN => tail(line, rest, b"tity=", Key::DstIdentity),
        DST_SERV => tail(line, rest, b"ice=", Key::Other),
        DIRECTIO => tail(line, rest, b"n=", Key::Direction),
        BYTES_SE => tail(line, rest, b"nt=", Key::Other),
        BYTES_RE => tail(line, rest, b"cv=", Key::Other),
        DURATION => tail(line, rest, b"=", Key::Other),
        _ => None,
    }
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
    fn set(&mut self, key: Key, value: &'a [u8]) {
        let slot = match key {
            Key::SrcAddr => &mut self.src_addr,
            Key::SrcWorkload => &mut self.src_workload,
            Key::SrcNamespace => &mut self.src_namespace,
            Key::SrcIdentity => &mut self.src_identity,
            Key::DstAddr => &mut self.dst_addr,
            Key::DstHboneAddr => &mut self.dst_hbone_addr,
            Key::DstWorkload => &mut self.dst_workload,
            Key::DstNamespace => &mut self.dst_namespace,
            Key::DstIdentity => &mut self.dst_identity,
            Key::Direction => &mut self.direction,
            Key::Error => &mut self.error,
            Key::Other => return,
        };
        *slot = Some(value);
    }
}

/// Reads the `k=v` fields from `at` as the slow path's `fields` does (words without `=`
/// ignored, the last value of a key wins); `None` for a quoted value without its closing
/// quote.
fn fields(line: &[u8], mut at: usize) -> Option<Fields<'_>> {
    let mut f = Fields::default();
    loop {
        at = skip_seps(line, at);
        if at == line.len() {
            return Some(f);
        }
        let (key, start) = match common_key(line, at) {
            Some(known) => known,
            None => {
                let eq = find_eq_or_sep(line, at);
                if line.get(eq) != Some(&b'=') {
                    at = find_sep(line, eq); // a word without `=`
                    continue;
                }
                (Key::of(&line[at..eq]), eq + 1)
            }
        };
        let (value, next) = if line.get(start) == Some(&b'"') {
            let body = start + 1;
            // No escape in a plain line: the next quote closes the value.
            let close = find_quote(line, body);
            if close == line.len() {
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
