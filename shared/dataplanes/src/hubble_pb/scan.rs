//! The fast path's walk: one pass over a `GetFlowsResponse` in its canonical shape (a
//! flow, each embedded message at most once, every field well formed) that reads what
//! edge derivation needs and validates exactly what [`super::decode_response`] validates.
//!
//! Anything else is a [`Bail`]: a malformed message, a group, a 10-byte varint, an
//! embedded message split over several occurrences, a non-flow response, a flow that
//! names a denying policy. The caller then takes the slow path, which gives the exact
//! answer (error, merge or record). So this walk never has to reproduce an error or a
//! merge: it only has to accept nothing the slow walk would reject, and read the same
//! values from what it accepts.
//!
//! Where it saves: no error bookkeeping on the way, labels checked with an ASCII test and
//! summarised on their bytes (only `reserved:` and namespace labels become `&str`), and
//! nothing moved around but a few slices.

use crate::common::EnumVal;
use crate::hubble::{EndpointFields, FlowFields, L4Fields, LabelSummary, WorkloadFields};
use std::net::{IpAddr, Ipv4Addr};

use ne_flow::flow::Timestamp;

/// The message is not in the canonical shape: take the slow path.
#[derive(Debug)]
pub(super) struct Bail;

type Scan<T> = Result<T, Bail>;

mod cursor;

use cursor::Cursor;

/// The labels of a scanned flow are never iterated: a new edge is built by the slow path.
pub(super) type NoLabels<'a> = std::iter::Empty<&'a str>;

/// Sets `slot` once; a second occurrence (to be merged) bails.
#[inline(always)]
fn once<T>(slot: &mut Option<T>, value: T) -> Scan<()> {
    if slot.is_some() {
        return Err(Bail);
    }
    *slot = Some(value);
    Ok(())
}

/// An endpoint before the walk: everything absent.
pub(super) fn blank_endpoint<'a>() -> EndpointFields<'a, NoLabels<'a>> {
    EndpointFields {
        identity: 0,
        namespace: None,
        pod_name: None,
        labels: std::iter::empty(),
        summary: LabelSummary::default(),
        workload: None,
    }
}

/// Flow fields before the walk: everything absent.
pub(super) fn blank<'a>() -> FlowFields<'a, NoLabels<'a>> {
    let endpoint = blank_endpoint;
    FlowFields {
        time: None,
        node_name: None,
        response_node_name: None,
        ip_source: None,
        ip_destination: None,
        l4: L4Fields::Other,
        source: endpoint(),
        destination: endpoint(),
        verdict: None,
        drop_reason_desc: None,
        drop_reason: None,
        traffic_direction: None,
        is_reply: None,
        reply: None,
        destination_name: None,
        egress_denied_by: None,
        ingress_denied_by: None,
    }
}

/// What the walk of a response returns besides its [`FlowFields`].
pub(super) struct Walk<'a> {
    /// The bodies of `Flow.source` and `Flow.destination`, read by [`endpoint`] (or found
    /// in the decoder's endpoint cache).
    pub endpoints: [Option<&'a [u8]>; 2],
    /// `IP.source` and `IP.destination`, parsed (the fields' `ip_*` strings are left
    /// unset).
    pub ips: [Option<IpAddr>; 2],
}

/// Reads one `GetFlowsResponse` carrying a flow into `out` (from [`blank`]): the fields
/// edge derivation reads, but the endpoints and addresses, returned apart. Node names and
/// the DNS name are validated, not kept: the fast path builds no record.
pub(super) fn response<'a>(
    bytes: &'a [u8],
    out: &mut FlowFields<'a, NoLabels<'a>>,
) -> Scan<Walk<'a>> {
    let mut r = Cursor::new(bytes);
    let (mut flow, mut time) = (None, None);
    while let Some((number, v)) = r.next()? {
        match number {
            1 => once(&mut flow, v.message()?)?,
            // Node status, lost events: not flows.
            2 | 3 => return Err(Bail),
            1000 => v.check_str()?,
            1001 => once(&mut time, timestamp(v.message()?)?)?,
            _ => {}
        }
    }
    let walk = self::flow(flow.ok_or(Bail)?, out)?;
    out.time = out.time.or(time);
    Ok(walk)
}

#[inline(always)]
fn timestamp(mut m: Cursor<'_>) -> Scan<Timestamp> {
    let (mut seconds, mut nanos) = (0i64, 0i32);
    while let Some((number, v)) = m.next()? {
        match number {
            1 => seconds = v.varint()? as i64,
            2 => nanos = v.varint()? as i32,
            _ => {}
        }
    }
    Ok(ne_flow::time::from_secs_nanos(seconds, i64::from(nanos)))
}

fn flow<'a>(mut m: Cursor<'a>, out: &mut FlowFields<'a, NoLabels<'a>>) -> Scan<Walk<'a>> {
    let (mut verdict, mut drop_reason, mut direction, mut drop_reason_desc) = (0, 0, 0, 0);
    let (mut ip, mut l4, mut is_reply) = (false, false, false);
    let mut ips = [None; 2];
    let mut dns = false;
    let (mut source, mut destination) = (None, None);
    while let Some((number, v)) = m.next()? {
        match number {
            1 => once(&mut out.time, timestamp(v.message()?)?)?,
            2 => verdict = v.varint()? as i32,
            3 => drop_reason = v.varint()? as u32,
            5 => {
                first(&mut ip)?;
                ips = addresses(v.message()?)?;
            }
            6 => {
                first(&mut l4)?;
                out.l4 = layer4(v.message()?)?;
            }
            8 => once(&mut source, v.bytes()?)?,
            9 => once(&mut destination, v.bytes()?)?,
            11 => v.check_str()?,
            14 if !dns => {
                dns = true;
                v.check_str()?;
            }
            16 => out.reply = Some(v.varint()? != 0),
            22 => direction = v.varint()? as i32,
            25 => drop_reason_desc = v.varint()? as i32,
            26 => {
                first(&mut is_reply)?;
                out.is_reply = Some(bool_value(v.message()?)?);
            }
            // A denying policy: the flow is kept whole, by the slow path.
            21004 | 21005 => return Err(Bail),
            _ => {}
        }
    }
    out.verdict = Some(EnumVal::Num(verdict.into()));
    out.drop_reason_desc = Some(EnumVal::Num(drop_reason_desc.into()));
    out.drop_reason = Some(drop_reason);
    out.traffic_direction = Some(EnumVal::Num(direction.into()));
    Ok(Walk {
        endpoints: [source, destination],
        ips,
    })
}

/// Marks an embedded message seen; a second occurrence (to be merged) bails.
#[inline(always)]
fn first(seen: &mut bool) -> Scan<()> {
    if std::mem::replace(seen, true) {
        Err(Bail)
    } else {
        Ok(())
    }
}

#[inline(always)]
fn addresses(mut m: Cursor<'_>) -> Scan<[Option<IpAddr>; 2]> {
    let mut ips = [None; 2];
    while let Some((number, v)) = m.next()? {
        match number {
            1 => ips[0] = ip(v.bytes()?)?,
            2 => ips[1] = ip(v.bytes()?)?,
            _ => {}
        }
    }
    Ok(ips)
}

/// An address as `parse_ip` reads it: empty is none; one it rejects is left to the slow
/// path, which reports it.
#[inline(always)]
fn ip(b: &[u8]) -> Scan<Option<IpAddr>> {
    if b.is_empty() {
        return Ok(None);
    }
    if let Some(v4) = ipv4(b) {
        return Ok(Some(IpAddr::V4(v4)));
    }
    let text = std::str::from_utf8(b).map_err(|_| Bail)?;
    text.parse().map(Some).map_err(|_| Bail)
}

/// A dotted quad in the only form `Ipv4Addr::from_str` accepts (four decimal octets of at
/// most 255, no leading zero), read from bytes; `None` for anything else, which then goes
/// through `from_str` itself.
#[inline(always)]
fn ipv4(b: &[u8]) -> Option<Ipv4Addr> {
    if !(7..=15).contains(&b.len()) {
        return None;
    }
    let mut octets = [0u8; 4];
    let (mut n, mut value, mut digits) = (0, 0u32, 0);
    for &c in b {
        if c == b'.' {
            if digits == 0 || n == 3 {
                return None;
            }
            octets[n] = value as u8;
            (n, value, digits) = (n + 1, 0, 0);
            continue;
        }
        let digit = c.wrapping_sub(b'0');
        // Not a digit, or a digit after a leading zero.
        if digit > 9 || (digits == 1 && value == 0) {
            return None;
        }
        value = value * 10 + u32::from(digit);
        digits += 1;
        if value > 255 {
            return None;
        }
    }
    if n != 3 || digits == 0 {
        return None;
    }
    octets[3] = value as u8;
    Some(Ipv4Addr::from(octets))
}

#[inline(always)]
fn bool_value(mut m: Cursor<'_>) -> Scan<bool> {
    let mut value = false;
    while let Some((number, v)) = m.next()? {
        if number == 1 {
            value = v.varint()? != 0;
        }
    }
    Ok(value)
}

/// `Flow.l4` with one member (a member that occurs twice is merged: bail).
#[inline(always)]
fn layer4(mut m: Cursor<'_>) -> Scan<L4Fields> {
    let mut l4 = None;
    while let Some((number, v)) = m.next()? {
        let mut body = match number {
            1..=5 => v.message()?,
            _ => continue,
        };
        let (mut s, mut d) = (0u32, 0u32);
        if !matches!(number, 3 | 4) {
            while let Some((number, v)) = body.next()? {
                match number {
                    1 => s = v.varint()? as u32,
                    2 => d = v.varint()? as u32,
                    _ => {}
                }
            }
        }
        let fields = match number {
            1 => L4Fields::Tcp(s, d),
            2 => L4Fields::Udp(s, d),
            5 => L4Fields::Sctp(s, d),
            _ => L4Fields::Icmp,
        };
        once(&mut l4, fields)?;
    }
    Ok(l4.unwrap_or(L4Fields::Other))
}

const RESERVED: &[u8] = b"reserved:";
const NAMESPACE: &[u8] = b"k8s:io.kubernetes.pod.namespace=";

/// One endpoint, into `out`. Labels are checked in runs: the bytes from the first label
/// of a run to the end of its last are tested for ASCII at once (tags and short lengths
/// are ASCII too), and only a run that is not ASCII is checked label by label.
pub(super) fn endpoint<'a>(body: &'a [u8], out: &mut EndpointFields<'a, NoLabels<'a>>) -> Scan<()> {
    let mut m = Cursor::new(body);
    let buf = body;
    // The run of labels being read: where it starts (at its first tag).
    let mut run: Option<usize> = None;
    loop {
        let at = m.pos;
        let Some((number, v)) = m.next()? else {
            check_run(buf, run, at)?;
            return Ok(());
        };
        if number == 4 {
            let label = v.bytes()?;
            run.get_or_insert(at);
            out.summary.any = true;
            // What `LabelSummary::add` reads, from the bytes: only a reserved or a
            // (first) namespace label becomes a `&str`.
            if label.starts_with(RESERVED)
                || (out.summary.namespace.is_none() && label.starts_with(NAMESPACE))
            {
                out.summary.add(v.str()?);
            }
            continue;
        }
        check_run(buf, run.take(), at)?;
        match number {
            2 => out.identity = v.varint()? as u32,
            3 => out.namespace = Some(v.str()?),
            5 => out.pod_name = Some(v.str()?),
            6 if out.workload.is_none() => {
                let mut w = v.message()?;
                let (mut name, mut kind) = (None, None);
                while let Some((number, v)) = w.next()? {
                    match number {
                        1 => name = Some(v.str()?),
                        2 => kind = Some(v.str()?),
                        _ => {}
                    }
                }
                out.workload = Some(WorkloadFields { name, kind });
            }
            6 => {
                v.bytes()?;
            }
            _ => {}
        }
    }
}

/// Checks the labels of the run that started at `start` and ends at `end`: all ASCII, or
/// every label valid UTF-8.
#[inline(always)]
fn check_run(buf: &[u8], start: Option<usize>, end: usize) -> Scan<()> {
    let Some(start) = start else { return Ok(()) };
    let run = &buf[start..end];
    if run.is_ascii() {
        return Ok(());
    }
    let mut labels = Cursor::new(run);
    while let Some((_, v)) = labels.next()? {
        v.check_str()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The byte parser reads exactly the dotted quads `Ipv4Addr::from_str` reads, to
        /// the same address, so taking it first changes nothing.
        #[test]
        fn ipv4_reads_what_from_str_reads(text in "[0-9.]{0,16}|[0-9]{1,3}(\\.[0-9]{1,3}){3}") {
            prop_assert_eq!(ipv4(text.as_bytes()), text.parse::<Ipv4Addr>().ok());
        }

        /// The cursor reads every varint of up to nine bytes as protobuf encodes it, at
        /// any position and with any bytes after it.
        #[test]
        fn varints_read_like_prost(
            value in prop_oneof![any::<u64>().prop_map(|v| v >> 1), 0u64..1 << 21],
            before in 0usize..3,
            after in prop::collection::vec(any::<u8>(), 0..9),
        ) {
            let mut buf = vec![0x08; before];
            ne_proto::prost::encoding::encode_varint(value, &mut buf);
            let end = buf.len();
            buf.extend_from_slice(&after);
            let mut c = Cursor { buf: &buf, pos: before };
            prop_assert_eq!(c.varint().ok(), Some(value));
            prop_assert_eq!(c.pos, end);
            // Cut short, it is a bail.
            let mut short = Cursor { buf: &buf[..end - 1], pos: before };
            prop_assert!(short.varint().is_err());
        }

        #[test]
        fn ip_is_parse_ip_or_a_bail(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
            let std = match std::str::from_utf8(&bytes) {
                Ok("") => Some(None),
                Ok(text) => text.parse::<IpAddr>().ok().map(Some),
                Err(_) => None,
            };
            prop_assert_eq!(ip(&bytes).ok(), std);
        }
    }
}
