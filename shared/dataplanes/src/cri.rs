//! CRI log framing, as containerd and CRI-O write container logs on the node
//! (`/var/log/pods/...`): `<RFC3339Nano> <stdout|stderr> <P|F> <payload>`.
//!
//! A payload longer than the runtime's line limit is split into `P` (partial) pieces
//! ending with one `F` (full) piece; [`CriJoiner`] joins them back before the payload is
//! decoded. Framing is detected per line, so framed and unframed input both work.

use std::borrow::Cow;

/// Upper bound of a joined line; longer ones are abandoned (memory stays bounded).
pub const MAX_JOINED_LEN: usize = 1 << 20;

/// The output stream a CRI line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// `stdout`.
    Stdout,
    /// `stderr`.
    Stderr,
}

/// One CRI-framed line, split into its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framed<'a> {
    /// The stream the runtime captured the piece from.
    pub stream: Stream,
    /// `true` for a `P` piece, `false` for `F`.
    pub partial: bool,
    /// The container's output after the frame prefix.
    pub payload: &'a [u8],
}

/// Splits a CRI-framed line, or `None` when the line is not framed. The timestamp is
/// checked for shape only (`YYYY-MM-DDT…`); it is not used.
pub fn split(line: &[u8]) -> Option<Framed<'_>> {
    // Look at the timestamp's shape before searching for its end: a JSON line's first
    // space can be kilobytes in.
    if line.len() < 20 || !line[..4].iter().all(u8::is_ascii_digit) || line[4] != b'-' {
        return None;
    }
    // An RFC 3339 timestamp with nanoseconds and an offset is at most 35 bytes.
    let space = memchr::memchr(b' ', &line[..line.len().min(40)])?;
    let ts = &line[..space];
    let shaped = ts.len() >= 20
        && ts[..4].iter().all(u8::is_ascii_digit)
        && ts[4] == b'-'
        && ts[7] == b'-'
        && matches!(ts[10], b'T' | b't');
    if !shaped {
        return None;
    }
    let rest = &line[space + 1..];
    let (stream, rest) = if let Some(r) = rest.strip_prefix(b"stdout ") {
        (Stream::Stdout, r)
    } else if let Some(r) = rest.strip_prefix(b"stderr ") {
        (Stream::Stderr, r)
    } else {
        return None;
    };
    let partial = match rest.first() {
        Some(b'P') => true,
        Some(b'F') => false,
        _ => return None,
    };
    let payload = match &rest[1..] {
        [] => &[][..],
        [b' ', payload @ ..] => payload,
        _ => return None,
    };
    Some(Framed {
        stream,
        partial,
        payload,
    })
}

/// What [`CriJoiner::feed`] made of a physical line.
#[derive(Debug, PartialEq, Eq)]
pub enum CriLine<'a> {
    /// Not CRI-framed: the line itself is the payload.
    Unframed(&'a [u8]),
    /// A complete payload: an `F` line alone (borrowed) or `P…F` joined (owned).
    Complete(Cow<'a, [u8]>),
    /// A `P` piece was buffered.
    Partial,
}

/// The pieces of one stream's partial line.
#[derive(Debug, Default)]
struct Pending {
    buf: Vec<u8>,
    /// A `P` piece was seen (its payload may be empty).
    open: bool,
    /// Dropping pieces up to the next `F` (the line grew too long).
    discarding: bool,
}

impl Pending {
    fn is_pending(&self) -> bool {
        self.open || self.discarding
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.open = false;
        self.discarding = false;
    }
}

/// Joins CRI `P` pieces per stream until their `F` piece.
#[derive(Debug, Default)]
pub struct CriJoiner {
    stdout: Pending,
    stderr: Pending,
    /// Partial lines dropped since the last [`CriJoiner::take_abandoned`].
    abandoned: u64,
}

impl CriJoiner {
    /// Feeds one physical line (without its `\n`).
    pub fn feed<'a>(&mut self, line: &'a [u8]) -> CriLine<'a> {
        let Some(framed) = split(line) else {
            // An unframed line between P and F pieces means the framing broke: drop them.
            for p in [&mut self.stdout, &mut self.stderr] {
                if p.is_pending() {
                    self.abandoned += u64::from(!p.discarding);
                    p.clear();
                }
            }
            return CriLine::Unframed(line);
        };
        let p = match framed.stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        if p.discarding {
            p.discarding = framed.partial;
            return CriLine::Partial;
        }
        if !p.open && !framed.partial {
            return CriLine::Complete(Cow::Borrowed(framed.payload));
        }
        if p.buf.len() + framed.payload.len() > MAX_JOINED_LEN {
            p.buf = Vec::new();
            p.open = false;
            p.discarding = framed.partial;
            self.abandoned += 1;
            return CriLine::Partial;
        }
        p.buf.extend_from_slice(framed.payload);
        p.open = framed.partial;
        if framed.partial {
            CriLine::Partial
        } else {
            CriLine::Complete(Cow::Owned(std::mem::take(&mut p.buf)))
        }
    }

    /// `true` while a partial line waits for its `F` piece.
    pub fn has_pending(&self) -> bool {
        self.stdout.is_pending() || self.stderr.is_pending()
    }

    /// Partial lines abandoned since the last call.
    pub fn take_abandoned(&mut self) -> u64 {
        std::mem::take(&mut self.abandoned)
    }

    /// Ends the input: drops the pending partial lines and says how many there were (a
    /// line already abandoned for its length is not counted again).
    pub fn finish(&mut self) -> u64 {
        let mut pending = 0;
        for p in [&mut self.stdout, &mut self.stderr] {
            pending += u64::from(p.open);
            p.clear();
        }
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TS: &str = "2026-03-14T09:26:53.421950312Z";

    #[test]
    fn splits_framed_lines() {
        let line = format!("{TS} stdout F hello world");
        assert_eq!(
            split(line.as_bytes()),
            Some(Framed {
                stream: Stream::Stdout,
                partial: false,
                payload: b"hello world"
            })
        );
        let line = format!("{TS} stderr P ");
        assert_eq!(
            split(line.as_bytes()),
            Some(Framed {
                stream: Stream::Stderr,
                partial: true,
                payload: b""
            })
        );
        let line = format!("{TS} stdout F");
        assert_eq!(split(line.as_bytes()).map(|f| f.payload), Some(&b""[..]));
    }

    #[test]
    fn leaves_unframed_lines_alone() {
        for line in [
            "2026-08-03T15:47:26.637407Z info access connection complete",
            "2024-04-12T10:17:44.080629Z\tinfo\taccess\tconnection complete",
            "{\"flow\":{}}",
            "2026-03-14T09:26:53Z stdout X payload",
            "2026-03-14T09:26:53Z stdout Fpayload",
            "2026-03-14 stdout F payload",
            "",
        ] {
            assert_eq!(split(line.as_bytes()), None, "{line:?}");
        }
    }

    #[test]
    fn joins_pieces_per_stream() {
        let mut j = CriJoiner::default();
        let p1 = format!("{TS} stdout P abc");
        let e = format!("{TS} stderr F err line");
        let p2 = format!("{TS} stdout P def");
        let f = format!("{TS} stdout F ghi");
        assert_eq!(j.feed(p1.as_bytes()), CriLine::Partial);
        assert!(j.has_pending());
        assert_eq!(
            j.feed(e.as_bytes()),
            CriLine::Complete(Cow::Borrowed(&b"err line"[..]))
        );
        assert_eq!(j.feed(p2.as_bytes()), CriLine::Partial);
        assert_eq!(
            j.feed(f.as_bytes()),
            CriLine::Complete(Cow::Owned(b"abcdefghi".to_vec()))
        );
        assert!(!j.has_pending());
        assert_eq!(j.finish(), 0);
    }

    #[test]
    fn counts_abandoned_and_pending_partials() {
        let mut j = CriJoiner::default();
        let p = format!("{TS} stdout P abc");
        assert_eq!(j.feed(p.as_bytes()), CriLine::Partial);
        assert_eq!(j.feed(b"plain"), CriLine::Unframed(b"plain"));
        assert_eq!(j.take_abandoned(), 1);
        assert_eq!(j.take_abandoned(), 0);
        assert_eq!(j.feed(p.as_bytes()), CriLine::Partial);
        assert_eq!(j.finish(), 1);
        assert!(!j.has_pending());
    }

    #[test]
    fn bounds_joined_length() {
        let mut j = CriJoiner::default();
        let piece = format!("{TS} stdout P {}", "x".repeat(MAX_JOINED_LEN / 2 + 1));
        assert_eq!(j.feed(piece.as_bytes()), CriLine::Partial);
        assert_eq!(j.feed(piece.as_bytes()), CriLine::Partial);
        assert_eq!(j.take_abandoned(), 1);
        // The rest of the abandoned line is dropped up to and including its F piece.
        assert_eq!(j.feed(piece.as_bytes()), CriLine::Partial);
        let f = format!("{TS} stdout F tail");
        assert_eq!(j.feed(f.as_bytes()), CriLine::Partial);
        assert!(!j.has_pending());
        assert_eq!(
            j.feed(f.as_bytes()),
            CriLine::Complete(Cow::Borrowed(&b"tail"[..]))
        );
        assert_eq!(j.take_abandoned(), 0);
    }
}
