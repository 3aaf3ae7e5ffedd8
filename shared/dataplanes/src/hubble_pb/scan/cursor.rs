//! The protobuf wire format as the fast path walks it: a cursor over one message's bytes
//! yielding each field's number and value, bailing (to the slow path) on anything outside
//! the canonical shape.

use super::{Bail, Scan};

/// One field's value.
pub(super) enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed32 or fixed64: skipped.
    Fixed,
}

impl<'a> Value<'a> {
    #[inline(always)]
    pub(super) fn varint(&self) -> Scan<u64> {
        match *self {
            Value::Varint(v) => Ok(v),
            _ => Err(Bail),
        }
    }

    #[inline(always)]
    pub(super) fn bytes(&self) -> Scan<&'a [u8]> {
        match *self {
            Value::Bytes(b) => Ok(b),
            _ => Err(Bail),
        }
    }

    #[inline(always)]
    pub(super) fn message(&self) -> Scan<Cursor<'a>> {
        self.bytes().map(Cursor::new)
    }

    #[inline(always)]
    pub(super) fn str(&self) -> Scan<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Bail)
    }

    /// A string the walk validates but does not keep.
    #[inline(always)]
    pub(super) fn check_str(&self) -> Scan<()> {
        let b = self.bytes()?;
        if b.is_ascii() || std::str::from_utf8(b).is_ok() {
            Ok(())
        } else {
            Err(Bail)
        }
    }
}

/// A cursor over one message that accepts a subset of what `wire::Reader` accepts.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// A varint: one or two bytes inline, longer ones out of line.
    #[inline(always)]
    pub(super) fn varint(&mut self) -> Scan<u64> {
        match *self.buf.get(self.pos..).unwrap_or_default() {
            [b0, ..] if b0 < 0x80 => {
                self.pos += 1;
                Ok(u64::from(b0))
            }
            [b0, b1, ..] if b1 < 0x80 => {
                self.pos += 2;
                Ok(u64::from(b0 & 0x7f) | u64::from(b1) << 7)
            }
            _ => self.varint_long(),
        }
    }

    /// Three to nine bytes (63 bits); a tenth byte is left to the slow path. With eight
    /// bytes at hand, one load: the first byte without the continuation bit ends the
    /// varint, and the 7-bit groups are gathered with shifts and masks.
    pub(super) fn varint_long(&mut self) -> Scan<u64> {
        if let Some(chunk) = self.buf.get(self.pos..self.pos + 8)
            && let Ok(chunk) = <[u8; 8]>::try_from(chunk)
        {
            let x = u64::from_le_bytes(chunk);
            let stops = !x & 0x8080_8080_8080_8080;
            if stops != 0 {
                let len = stops.trailing_zeros() / 8 + 1;
                let x = x & (u64::MAX >> (64 - 8 * len));
                let mut value = 0;
                for i in 0..8 {
                    value |= (x >> i) & (0x7f << (7 * i));
                }
                self.pos += len as usize;
                return Ok(value);
            }
        }
        let mut value = 0u64;
        for i in 0..9 {
            let byte = *self.buf.get(self.pos + i).ok_or(Bail)?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(Bail)
    }

    #[inline(always)]
    pub(super) fn skip(&mut self, n: usize) -> Scan<()> {
        if self.buf.len() - self.pos < n {
            return Err(Bail);
        }
        self.pos += n;
        Ok(())
    }

    /// The next field, `None` at the end.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Scan<Option<(u64, Value<'a>)>> {
        let Some(&key) = self.buf.get(self.pos) else {
            return Ok(None);
        };
        // Fields 1 to 15 have a one-byte key.
        let key = if key < 0x80 {
            self.pos += 1;
            u64::from(key)
        } else {
            self.varint()?
        };
        let number = key >> 3;
        if number == 0 || number >= 1 << 29 {
            return Err(Bail);
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Bail)?;
                let body = self.buf.get(self.pos..).unwrap_or_default();
                let body = body.get(..len).ok_or(Bail)?;
                self.pos += len;
                Value::Bytes(body)
            }
            1 => {
                self.skip(8)?;
                Value::Fixed
            }
            5 => {
                self.skip(4)?;
                Value::Fixed
            }
            // Groups (3, 4) and invalid wire types.
            _ => return Err(Bail),
        };
        Ok(Some((number, value)))
    }
}
