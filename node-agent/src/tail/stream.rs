//! One followed log path ([`Stream`]): notices when the path names a new file, keeps
//! rotated-away files open until they are drained, and says when the stream has ended.
//! [`super::Tailer`] keeps one per path it discovered.

use std::fs;
use std::io;
use std::path::Path;

use super::reader::{FileIdent, Reader};
use super::{Ctx, DRAIN_ERROR_POLLS, StartAt, StreamId};

/// One log path: the file it names and the rotated files still being drained.
#[derive(Debug)]
pub(super) struct Stream {
    pub(super) id: StreamId,
    current: Option<Reader>,
    /// Rotated-away or deleted files, oldest first, with the poll that retired them.
    draining: Vec<(Reader, u64)>,
    /// Where the next file opened for this path is read from.
    start: StartAt,
    /// A file was opened for this path before (the next one is a rotation).
    had_file: bool,
}

impl Stream {
    /// A stream whose first file is read from `start`.
    pub(super) fn new(id: StreamId, start: StartAt) -> Self {
        Stream {
            id,
            current: None,
            draining: Vec::new(),
            start,
            had_file: false,
        }
    }

    /// Follows the path, reads all open files; `true` when the stream has ended.
    pub(super) fn poll<F: FnMut(StreamId, &[u8])>(
        &mut self,
        path: &Path,
        ctx: &mut Ctx<'_>,
        out: &mut F,
    ) -> bool {
        let mut missing = false;
        match fs::metadata(path) {
            Ok(meta) => {
                let ident = FileIdent::of(&meta);
                if self.current.as_ref().map(Reader::ident) != Some(ident) {
                    self.retire_current(ctx.poll);
                    missing = !self.open(path, ctx);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.retire_current(ctx.poll);
                missing = true;
            }
            Err(e) => ctx.error(path, e),
        }
        if missing {
            // Whatever appears at this path later was written after the start.
            self.start = StartAt::Beginning;
        }
        let id = self.id;
        self.draining.retain_mut(|(reader, retired)| {
            let read = reader.read(id, path, ctx, out);
            let done = *retired < ctx.poll
                && (read == Some(0) || (read.is_none() && ctx.poll - *retired > DRAIN_ERROR_POLLS));
            if done {
                ctx.stats.unterminated_dropped += u64::from(reader.has_fragment());
            }
            !done
        });
        if let Some(reader) = &mut self.current {
            reader.read(id, path, ctx, out);
        }
        missing && self.current.is_none() && self.draining.is_empty()
    }

    fn retire_current(&mut self, poll: u64) {
        if let Some(reader) = self.current.take() {
            self.draining.push((reader, poll));
        }
    }

    /// Opens the file at `path`; `false` when it is gone again.
    fn open(&mut self, path: &Path, ctx: &mut Ctx<'_>) -> bool {
        match Reader::open(path, self.start) {
            Ok(reader) => {
                ctx.stats.files_opened += 1;
                ctx.stats.rotations += u64::from(self.had_file);
                self.had_file = true;
                self.start = StartAt::Beginning;
                self.current = Some(reader);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => {
                ctx.error(path, e);
                true
            }
        }
    }
}
