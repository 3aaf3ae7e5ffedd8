//! One open log file: reads what was appended since the last poll with positioned reads,
//! cuts it into physical lines and notices truncation. [`super::Tailer`] owns one
//! [`Reader`] per file handle it keeps open (the file at a log path, plus rotated files it
//! is still draining).

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use super::{Ctx, StartAt, StreamId};

/// How many bytes before the read offset are compared at every poll to detect a
/// truncated file that grew back past the offset (see [`super`] on truncation).
pub const TRUNCATION_PROBE_LEN: usize = 64;

/// A pending line buffer is released after a line longer than this (memory stays small
/// after one long line).
const KEEP_LINE_CAPACITY: usize = 64 * 1024;

/// The identity of a file on the node: (device, inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileIdent {
    dev: u64,
    ino: u64,
}

impl FileIdent {
    /// The identity of the file `meta` describes.
    pub(super) fn of(meta: &Metadata) -> Self {
        FileIdent {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// An open file and where the tailer is in it.
#[derive(Debug)]
pub(super) struct Reader {
    file: File,
    ident: FileIdent,
    /// Bytes of the file consumed (emitted, buffered in `line` or discarded).
    offset: u64,
    /// The start of a line whose `\n` has not been read yet.
    line: Vec<u8>,
    /// Skipping up to the next `\n`: the current line is overlong, or the tailer started
    /// in the middle of it.
    discarding: bool,
    /// The last bytes before `offset` (at most [`TRUNCATION_PROBE_LEN`]).
    probe: Vec<u8>,
}

impl Reader {
    /// Opens `path` at its beginning or at its end. Starting at the end in the middle of a
    /// line skips the rest of that line.
    pub(super) fn open(path: &Path, start: StartAt) -> io::Result<Reader> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        let mut reader = Reader {
            ident: FileIdent::of(&meta),
            file,
            offset: 0,
            line: Vec::new(),
            discarding: false,
            probe: Vec::new(),
        };
        if start == StartAt::End {
            let size = meta.len();
            let n = size.min(TRUNCATION_PROBE_LEN as u64);
            if n > 0 {
                let mut tail = vec![0; n as usize];
                reader.file.read_exact_at(&mut tail, size - n)?;
                reader.discarding = tail.last() != Some(&b'\n');
                reader.probe = tail;
                reader.offset = size;
            }
        }
        Ok(reader)
    }

    /// The file this reader holds open.
    pub(super) fn ident(&self) -> FileIdent {
        self.ident
    }

    /// `true` when the start of an unterminated line is buffered.
    pub(super) fn has_fragment(&self) -> bool {
        !self.line.is_empty()
    }

    /// Reads what the file holds beyond the offset and emits its complete lines. Returns
    /// the number of bytes read, or `None` after an IO error (counted; retried at the
    /// next poll from the same offset).
    pub(super) fn read<F: FnMut(StreamId, &[u8])>(
        &mut self,
        id: StreamId,
        path: &Path,
        ctx: &mut Ctx<'_>,
        out: &mut F,
    ) -> Option<u64> {
        let size = match self.file.metadata() {
            Ok(meta) => meta.len(),
            Err(e) => {
                ctx.error(path, e);
                return None;
            }
        };
        let truncated = size < self.offset
            || match self.probe_matches() {
                Ok(same) => !same,
                Err(e) => {
                    ctx.error(path, e);
                    return None;
                }
            };
        if truncated {
            ctx.stats.truncations += 1;
            ctx.stats.unterminated_dropped += u64::from(self.has_fragment());
            self.line.clear();
            self.discarding = false;
            self.probe.clear();
            self.offset = 0;
        }
        let begin = self.offset;
        while self.offset < size {
            let want = (size - self.offset).min(ctx.chunk.len() as u64) as usize;
            let n = match self.file.read_at(&mut ctx.chunk[..want], self.offset) {
                Ok(0) => break, // shrank since fstat: seen at the next poll
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    ctx.error(path, e);
                    ctx.stats.bytes += self.offset - begin;
                    return None;
                }
            };
            self.offset += n as u64;
            let bytes = &ctx.chunk[..n];
            self.split(bytes, id, ctx.max_line, ctx.stats, out);
            remember(&mut self.probe, bytes);
        }
        ctx.stats.bytes += self.offset - begin;
        Some(self.offset - begin)
    }

    /// `true` when the bytes before the offset are still the ones read there.
    fn probe_matches(&self) -> io::Result<bool> {
        if self.probe.is_empty() {
            return Ok(true);
        }
        let mut now = [0; TRUNCATION_PROBE_LEN];
        let now = &mut now[..self.probe.len()];
        match self
            .file
            .read_exact_at(now, self.offset - self.probe.len() as u64)
        {
            Ok(()) => Ok(*now == *self.probe),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Cuts `bytes` into lines, continuing the buffered line; emits each complete line of
    /// at most `max_line` bytes and drops (and counts) longer ones.
    fn split<F: FnMut(StreamId, &[u8])>(
        &mut self,
        bytes: &[u8],
        id: StreamId,
        max_line: usize,
        stats: &mut super::PollStats,
        out: &mut F,
    ) {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..end];
            rest = &rest[end + 1..];
            if self.discarding {
                self.discarding = false;
            } else if self.line.is_empty() {
                if piece.len() <= max_line {
                    stats.lines += 1;
                    out(id, piece);
                } else {
                    stats.overlong_dropped += 1;
                }
            } else if self.line.len() + piece.len() <= max_line {
                self.line.extend_from_slice(piece);
                stats.lines += 1;
                out(id, &self.line);
                self.clear_line();
            } else {
                stats.overlong_dropped += 1;
                self.clear_line();
            }
        }
        if self.discarding || rest.is_empty() {
            return;
        }
        if self.line.len() + rest.len() <= max_line {
            self.line.extend_from_slice(rest);
        } else {
            stats.overlong_dropped += 1;
            self.clear_line();
            self.discarding = true;
        }
    }

    fn clear_line(&mut self) {
        if self.line.capacity() > KEEP_LINE_CAPACITY {
            self.line = Vec::new();
        } else {
            self.line.clear();
        }
    }
}

/// Keeps the last [`TRUNCATION_PROBE_LEN`] bytes of everything appended to `probe`.
fn remember(probe: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() >= TRUNCATION_PROBE_LEN {
        probe.clear();
        probe.extend_from_slice(&bytes[bytes.len() - TRUNCATION_PROBE_LEN..]);
    } else {
        let excess = (probe.len() + bytes.len()).saturating_sub(TRUNCATION_PROBE_LEN);
        probe.drain(..excess);
        probe.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_keeps_the_last_bytes() {
        let mut probe = Vec::new();
        remember(&mut probe, b"abc");
        assert_eq!(probe, b"abc");
        let long: Vec<u8> = (0..100u8).collect();
        remember(&mut probe, &long);
        assert_eq!(probe, &long[100 - TRUNCATION_PROBE_LEN..]);
        remember(&mut probe, b"xyz");
        let mut want = long[100 - TRUNCATION_PROBE_LEN + 3..].to_vec();
        want.extend_from_slice(b"xyz");
        assert_eq!(probe, want);
    }
}
