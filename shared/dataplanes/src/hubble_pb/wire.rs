//! The protobuf wire format, read in place: a bounds-checked cursor over one message's
//! bytes that yields its fields one by one. Length-delimited values are sub-slices (no
//! copy); unknown fields of every wire type, groups included, are skipped. Nothing here
//! allocates or panics; malformed input is a [`DecodeError::Protobuf`].

use crate::DecodeError;

/// How deeply groups (wire types 3/4, deprecated, never sent by Hubble) may nest before a
/// message is rejected rather than skipped.
const MAX_GROUP_DEPTH: u32 = 32;

/// A cursor over the fields of one message.
#[derive(Clone, Debug)]
pub(super) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Offset of `buf[0]` in the outermost message, for error reports.
    base: usize,
    /// The message being read, for error reports.
    name: &'static str,
}

/// One field: its number, where its key starts, and its value.
#[derive(Clone, Debug)]
pub(super) struct Field<'a> {
    pub number: u32,
    offset: usize,
    value: Value<'a>,
}

#[derive(Clone, Debug)]
enum Value<'a> {
    Varint(u64),
    Fixed64,
    Fixed32,
    /// A length-delimited value and the offset of its first byte.
    Bytes(&'a [u8], usize),
    Group,
}

fn error(field: &'static str, offset: usize, reason: &'static str) -> DecodeError {
    DecodeError::Protobuf {
        field,
        offset,
        reason,
    }
}

impl<'a> Reader<'a> {
    /// A reader over a whole message called `name`.
    pub(super) fn new(buf: &'a [u8], name: &'static str) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
            name,
        }
    }

    /// A reader with no fields.
    pub(super) fn empty() -> Self {
        Reader::new(&[], "")
    }

    #[cold]
    #[inline(never)]
    fn err(&self, at: usize, reason: &'static str) -> DecodeError {
        error(self.name, self.base + at, reason)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, DecodeError> {
        // Keys, lengths and small numbers: one byte.
        if let Some(&byte) = self.buf.get(self.pos)
            && byte < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(byte));
        }
        self.varint_long()
    }

    fn varint_long(&mut self) -> Result<u64, DecodeError> {
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(self.err(start, "truncated varint"));
            };
            self.pos += 1;
            if i == 9 && byte > 1 {
                return Err(self.err(start, "varint overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(self.err(start, "varint longer than 10 bytes"))
    }

    #[inline]
    fn take(&mut self, len: usize, reason: &'static str) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        let end = start
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| self.err(start, reason))?;
        self.pos = end;
        Ok(&self.buf[start..end])
    }

    /// Reads a field key: `(number, wire type)`.
    #[inline(always)]
    fn key(&mut self) -> Result<(u32, u8), DecodeError> {
        let at = self.pos;
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|&n| n != 0 && n < 1 << 29)
            .ok_or_else(|| self.err(at, "field number out of range"))?;
        Ok((number, (key & 7) as u8))
    }

    /// The value of a field whose key was just read.
    #[inline(always)]
    fn value(
        &mut self,
        number: u32,
        wire: u8,
        at: usize,
        depth: u32,
    ) -> Result<Value<'a>, DecodeError> {
        Ok(match wire {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8, "truncated fixed64")?;
                Value::Fixed64
            }
            2 => {
                let len_at = self.pos;
                let len = self.varint()?;
                let len =
                    usize::try_from(len).map_err(|_| self.err(len_at, "length past the end"))?;
                let start = self.base + self.pos;
                Value::Bytes(self.take(len, "length past the end")?, start)
            }
            3 => {
                self.skip_group(number, at, depth)?;
                Value::Group
            }
            4 => return Err(self.err(at, "end of a group that was never started")),
            5 => {
                self.take(4, "truncated fixed32")?;
                Value::Fixed32
            }
            _ => return Err(self.err(at, "invalid wire type")),
        })
    }

    /// Skips the fields of a group up to its end key (same field number).
    fn skip_group(&mut self, number: u32, at: usize, depth: u32) -> Result<(), DecodeError> {
        if depth >= MAX_GROUP_DEPTH {
            return Err(self.err(at, "groups nested too deeply"));
        }
        loop {
            if self.pos >= self.buf.len() {
                return Err(self.err(at, "group without an end"));
            }
            let inner_at = self.pos;
            let (inner, wire) = self.key()?;
            if wire == 4 {
                return if inner == number {
                    Ok(())
                } else {
                    Err(self.err(inner_at, "group ends with another field number"))
                };
            }
            self.value(inner, wire, inner_at, depth + 1)?;
        }
    }

    /// The next field, or `None` at the end of the message.
    #[inline(always)]
    pub(super) fn next_field(&mut self) -> Result<Option<Field<'a>>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let at = self.pos;
        let (number, wire) = self.key()?;
        let value = self.value(number, wire, at, 0)?;
        Ok(Some(Field {
            number,
            offset: self.base + at,
            value,
        }))
    }
}

impl<'a> Field<'a> {
    #[cold]
    #[inline(never)]
    fn wrong_type(&self, field: &'static str) -> DecodeError {
        error(field, self.offset, "wrong wire type for a known field")
    }

    /// A varint field (`int32`, `uint32`, `int64`, `uint64`, `bool`, enums), as the raw 64
    /// bits; narrower types truncate as protobuf specifies.
    #[inline]
    pub(super) fn varint(&self, field: &'static str) -> Result<u64, DecodeError> {
        match self.value {
            Value::Varint(v) => Ok(v),
            _ => Err(self.wrong_type(field)),
        }
    }

    /// A `uint32` field.
    #[inline]
    pub(super) fn uint32(&self, field: &'static str) -> Result<u32, DecodeError> {
        self.varint(field).map(|v| v as u32)
    }

    /// An `int32` or enum field.
    #[inline]
    pub(super) fn int32(&self, field: &'static str) -> Result<i32, DecodeError> {
        self.varint(field).map(|v| v as i32)
    }

    /// A `bool` field.
    #[inline]
    pub(super) fn bool(&self, field: &'static str) -> Result<bool, DecodeError> {
        self.varint(field).map(|v| v != 0)
    }

    /// An embedded message, as a reader over its fields.
    #[inline]
    pub(super) fn message(&self, field: &'static str) -> Result<Reader<'a>, DecodeError> {
        match self.value {
            Value::Bytes(buf, base) => Ok(Reader {
                buf,
                pos: 0,
                base,
                name: field,
            }),
            _ => Err(self.wrong_type(field)),
        }
    }

    /// A `string` field, checked to be UTF-8.
    #[inline]
    pub(super) fn str(&self, field: &'static str) -> Result<&'a str, DecodeError> {
        match self.value {
            Value::Bytes(buf, base) => std::str::from_utf8(buf)
                .map_err(|e| error(field, base + e.valid_up_to(), "invalid utf-8 in a string")),
            _ => Err(self.wrong_type(field)),
        }
    }

    /// Whether this is a length-delimited field (for iterators that re-read fields already
    /// validated).
    #[inline]
    pub(super) fn is_bytes(&self) -> bool {
        matches!(self.value, Value::Bytes(..))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(buf: &[u8]) -> Result<Vec<(u32, String)>, DecodeError> {
        let mut r = Reader::new(buf, "M");
        let mut out = Vec::new();
        while let Some(f) = r.next_field()? {
            let v = match &f.value {
                Value::Varint(v) => format!("v{v}"),
                Value::Fixed64 => "f64".to_owned(),
                Value::Fixed32 => "f32".to_owned(),
                Value::Bytes(b, at) => format!("b{}@{at}", b.len()),
                Value::Group => "g".to_owned(),
            };
            out.push((f.number, v));
        }
        Ok(out)
    }

    fn reason(buf: &[u8]) -> (&'static str, usize) {
        match fields(buf) {
            Err(DecodeError::Protobuf { reason, offset, .. }) => (reason, offset),
            other => panic!("{buf:?}: {other:?}"),
        }
    }

    #[test]
    fn reads_every_wire_type() {
        // 1: varint 300; 2: fixed64; 3: "ab"; 4: group holding field 5 varint; 6: fixed32;
        // 536870911 (max field number): varint 1.
        let buf = [
            0x08, 0xac, 0x02, //
            0x11, 1, 2, 3, 4, 5, 6, 7, 8, //
            0x1a, 0x02, b'a', b'b', //
            0x23, 0x28, 0x01, 0x24, //
            0x35, 1, 2, 3, 4, //
            0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01,
        ];
        let got = fields(&buf).unwrap();
        let want: Vec<(u32, String)> = [
            (1, "v300"),
            (2, "f64"),
            (3, "b2@14"),
            (4, "g"),
            (6, "f32"),
            (536_870_911, "v1"),
        ]
        .into_iter()
        .map(|(n, v)| (n, v.to_owned()))
        .collect();
        assert_eq!(got, want);
        // The largest varint: ten bytes, the last one 1.
        let mut max = vec![0x08];
        max.extend_from_slice(&[0xff; 9]);
        max.push(0x01);
        assert_eq!(fields(&max).unwrap(), vec![(1, format!("v{}", u64::MAX))]);
    }

    #[test]
    fn rejects_malformed_input_with_its_offset() {
        assert_eq!(reason(&[0x08]), ("truncated varint", 1));
        assert_eq!(reason(&[0x08, 0x80]), ("truncated varint", 1));
        let mut long = vec![0x08];
        long.extend_from_slice(&[0xff; 9]);
        long.push(0x02);
        assert_eq!(reason(&long), ("varint overflows 64 bits", 1));
        assert_eq!(reason(&[0x0a, 0x05, b'a']), ("length past the end", 2));
        assert_eq!(reason(&[0x11, 1, 2]), ("truncated fixed64", 1));
        assert_eq!(reason(&[0x15, 1]), ("truncated fixed32", 1));
        assert_eq!(reason(&[0x08, 0x01, 0x0e]), ("invalid wire type", 2));
        assert_eq!(reason(&[0x00, 0x01]), ("field number out of range", 0));
        assert_eq!(
            reason(&[0x0c]),
            ("end of a group that was never started", 0)
        );
        assert_eq!(reason(&[0x0b, 0x08, 0x01]), ("group without an end", 0));
        assert_eq!(
            reason(&[0x0b, 0x14]),
            ("group ends with another field number", 1)
        );
        let deep: Vec<u8> = std::iter::repeat_n(0x0b, 40).collect();
        assert_eq!(reason(&deep).0, "groups nested too deeply");
        // A length that does not fit usize or overflows the position.
        let mut huge = vec![0x0a];
        huge.extend_from_slice(&[0xff; 9]);
        huge.push(0x01);
        assert_eq!(reason(&huge).0, "length past the end");
    }

    #[test]
    fn typed_accessors_check_the_wire_type() {
        let mut r = Reader::new(&[0x0a, 0x02, 0xc3, 0x28, 0x10, 0x05], "M");
        let s = r.next_field().unwrap().unwrap();
        assert!(matches!(
            s.str("M.s"),
            Err(DecodeError::Protobuf {
                field: "M.s",
                offset: 2,
                reason: "invalid utf-8 in a string"
            })
        ));
        assert!(matches!(
            s.varint("M.s"),
            Err(DecodeError::Protobuf {
                reason: "wrong wire type for a known field",
                ..
            })
        ));
        let v = r.next_field().unwrap().unwrap();
        assert_eq!(v.uint32("M.v").unwrap(), 5);
        assert!(v.message("M.v").is_err());
        assert!(r.next_field().unwrap().is_none());
        // Narrow types truncate like protobuf: -1 as an int32 is ten bytes on the wire.
        let mut neg = vec![0x08];
        neg.extend_from_slice(&[0xff; 9]);
        neg.push(0x01);
        let f = Reader::new(&neg, "M").next_field().unwrap().unwrap();
        assert_eq!(f.int32("M.i").unwrap(), -1);
        assert!(f.bool("M.b").unwrap());
    }
}
