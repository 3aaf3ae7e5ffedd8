//! Tails the ztunnel container's CRI log files on this node: the first step of the
//! `--source ztunnel` data flow. Physical lines go from here to one
//! [`ne_dataplanes::LineDecoder`] per [`StreamId`] (which joins CRI `P`/`F` pieces and
//! decodes the access lines), then to the agent's `FlowTable`.
//!
//! # Files
//!
//! Kubelet keeps a container's log at
//! `<root>/<namespace>_<pod>_<uid>/<container>/<restart>.log` (root `/var/log/pods`,
//! container `istio-proxy`). It rotates the log by renaming `0.log` to
//! `0.log.<YYYYMMDD-hhmmss>` (gzipping older ones) after which the runtime reopens `0.log`;
//! a container restart writes `1.log`, `2.log`, …. A *stream* is one such log path,
//! followed across rotations; each stream has a [`StreamId`] and its lines are emitted in
//! file order, the rotated file's before the new file's.
//!
//! # Polling
//!
//! The tailer is a synchronous state machine: the agent calls [`Tailer::poll`] on an
//! interval from a blocking task. Each poll lists the root (pod directories matching a
//! [`PodFilter`]) and each stream's path, and reads what was appended with positioned
//! reads. There is no inotify: polling works the same in every container runtime and on
//! every mount (inotify misses changes on some overlay and network file systems and needs
//! watch limits raised on busy nodes), and one `stat` per file per second is cheap.
//!
//! # Guarantees
//!
//! * Learning starts now: the files present at the **first poll** are read from their end
//!   (with [`StartAt::End`]); if one ends in the middle of a line, the rest of that line is
//!   skipped. Files that appear later (new pods, restarts, rotation) are read from their
//!   beginning, and so are files found only after a first poll that could not list the
//!   root: they appeared after the start.
//! * Every complete line (ended by `\n`) written after that is emitted exactly once, in
//!   order within its stream, without its `\n` — unless one of the exceptions below
//!   applies. A line without its `\n` yet is buffered, never emitted half. (Lines of
//!   different streams have no order between them.)
//! * Rotation (the path names a new inode): the old file stays open and is read to its
//!   end, in this poll and in every later one until a poll after the rotation finds
//!   nothing new in it; then the new file is read from its start.
//! * A deleted file or pod directory is drained through the open handle, then its stream
//!   ends ([`Tailer::take_ended`], so the caller can drop its decoder).
//! * IO errors never stop the tailer: they are counted in [`PollStats::read_errors`] and
//!   the same read is retried at the next poll; the last one is kept for logging
//!   ([`Tailer::take_last_error`]).
//!
//! # Limits (what a polling tailer cannot see)
//!
//! * **Truncation** (copytruncate-style, same inode): detected at the next poll when the
//!   file is shorter than the read offset, or when the last [`TRUNCATION_PROBE_LEN`] bytes
//!   before the offset differ from the ones read there (the file was truncated and grew
//!   back past the offset). Reading restarts at 0 ([`PollStats::truncations`]). Lines
//!   written before the truncation and not read by the previous poll are lost, and so is
//!   a buffered unterminated line; this is inherent to copytruncate. Kubelet rotates by
//!   rename, so this only matters for other log rotators.
//! * A file that is created and then rotated away or deleted between two polls is never
//!   opened, so its lines are lost (kubelet rotates at 10 MiB: a poll per second keeps up
//!   with anything under 10 MiB/s).
//! * The unterminated end of a file that is rotated away or deleted is dropped
//!   ([`PollStats::unterminated_dropped`]); runtimes write whole lines, so this is rare.
//! * A line longer than [`TailConfig::max_line`] is dropped and counted
//!   ([`PollStats::overlong_dropped`]); reading resumes after its `\n`.
//! * Bytes appended to a rotated file after the tailer let go of it are not read.
//!
//! The model-based tests (`model_tests.rs`) check exactly this contract on random
//! sequences of writes, partial writes, rotations, truncations, restarts and deletions.

mod reader;
mod stream;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::ops::AddAssign;
use std::path::{Path, PathBuf};

use stream::Stream;

pub use reader::TRUNCATION_PROBE_LEN;

/// Where kubelet keeps pod logs on a node.
pub const DEFAULT_ROOT: &str = "/var/log/pods";
/// The ztunnel pod's container name.
pub const DEFAULT_CONTAINER: &str = "istio-proxy";
/// The ztunnel pods' name prefix (DaemonSet `ztunnel`).
pub const DEFAULT_POD_PREFIX: &str = "ztunnel";
/// Default longest physical line: the longest line the CRI joiner accepts, since a longer
/// physical line could not be decoded anyway.
pub const DEFAULT_MAX_LINE: usize = ne_dataplanes::cri::MAX_JOINED_LEN;
/// Default size of one positioned read.
pub const DEFAULT_READ_CHUNK: usize = 64 * 1024;

/// A rotated file that fails to read for this many polls is given up.
const DRAIN_ERROR_POLLS: u64 = 10;

/// Where the files present at the first poll are read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StartAt {
    /// From their end: learning starts now (the default).
    #[default]
    End,
    /// From their beginning (replaying what the node still has).
    Beginning,
}

/// Which pod log directories (`<namespace>_<pod>_<uid>`) are tailed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodFilter {
    /// Only pods of this namespace; `None` for any.
    pub namespace: Option<String>,
    /// Pod names starting with this (empty: every pod).
    pub pod_prefix: String,
}

impl Default for PodFilter {
    /// Pods named `ztunnel…` in any namespace.
    fn default() -> Self {
        PodFilter {
            namespace: None,
            pod_prefix: DEFAULT_POD_PREFIX.to_owned(),
        }
    }
}

impl PodFilter {
    /// `true` when `dir_name` is a pod log directory this filter selects. Namespace and pod
    /// names cannot contain `_`, so the name splits unambiguously.
    pub fn matches_dir_name(&self, dir_name: &str) -> bool {
        let Some((namespace, rest)) = dir_name.split_once('_') else {
            return false;
        };
        let Some((pod, uid)) = rest.rsplit_once('_') else {
            return false;
        };
        !namespace.is_empty()
            && !pod.is_empty()
            && !uid.is_empty()
            && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
            && pod.starts_with(&self.pod_prefix)
    }
}

/// What to tail and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailConfig {
    /// The pod log root (`--ztunnel-log-root`, default [`DEFAULT_ROOT`]).
    pub root: PathBuf,
    /// Which pod directories to read.
    pub pods: PodFilter,
    /// The container directory inside a pod directory (default [`DEFAULT_CONTAINER`]).
    pub container: String,
    /// Where the files present at the first poll are read from.
    pub start_at: StartAt,
    /// Longest physical line emitted, without its `\n`; longer ones are dropped.
    pub max_line: usize,
    /// Bytes per positioned read (at least 1).
    pub read_chunk: usize,
}

impl Default for TailConfig {
    fn default() -> Self {
        TailConfig {
            root: PathBuf::from(DEFAULT_ROOT),
            pods: PodFilter::default(),
            container: DEFAULT_CONTAINER.to_owned(),
            start_at: StartAt::End,
            max_line: DEFAULT_MAX_LINE,
            read_chunk: DEFAULT_READ_CHUNK,
        }
    }
}

/// One log path followed across rotations; stable for the life of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(u64);

impl StreamId {
    /// The number behind the id (unique within one [`Tailer`]).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// What one poll did (or, from [`Tailer::totals`], all polls so far).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Lines emitted.
    pub lines: u64,
    /// Bytes read from files.
    pub bytes: u64,
    /// Files opened (new streams, new files after rotation).
    pub files_opened: u64,
    /// Times a stream's path named a new file (rename and reopen, or delete and create).
    pub rotations: u64,
    /// Files found truncated under the read offset (reading restarted at 0).
    pub truncations: u64,
    /// Lines longer than [`TailConfig::max_line`], dropped.
    pub overlong_dropped: u64,
    /// Unterminated line ends dropped: their file was truncated, or was rotated away or
    /// deleted before the `\n` came.
    pub unterminated_dropped: u64,
    /// IO errors (listing, stat, open, read); the operation is retried at the next poll.
    pub read_errors: u64,
    /// Streams whose path disappeared and whose files were drained.
    pub streams_ended: u64,
}

impl AddAssign for PollStats {
    fn add_assign(&mut self, o: PollStats) {
        self.lines += o.lines;
        self.bytes += o.bytes;
        self.files_opened += o.files_opened;
        self.rotations += o.rotations;
        self.truncations += o.truncations;
        self.overlong_dropped += o.overlong_dropped;
        self.unterminated_dropped += o.unterminated_dropped;
        self.read_errors += o.read_errors;
        self.streams_ended += o.streams_ended;
    }
}

/// Follows the matching container logs under a root. See the [module docs](self).
#[derive(Debug)]
pub struct Tailer {
    config: TailConfig,
    streams: BTreeMap<PathBuf, Stream>,
    next_id: u64,
    polls: u64,
    totals: PollStats,
    ended: Vec<(StreamId, PathBuf)>,
    chunk: Vec<u8>,
    last_error: Option<(PathBuf, io::Error)>,
}

/// What one poll's work shares.
struct Ctx<'a> {
    poll: u64,
    max_line: usize,
    chunk: &'a mut [u8],
    stats: &'a mut PollStats,
    last_error: &'a mut Option<(PathBuf, io::Error)>,
}

impl Ctx<'_> {
    fn error(&mut self, path: &Path, error: io::Error) {
        self.stats.read_errors += 1;
        *self.last_error = Some((path.to_owned(), error));
    }
}

impl Tailer {
    /// A tailer that has read nothing yet; the first [`Tailer::poll`] is its start.
    pub fn new(config: TailConfig) -> Self {
        let chunk = vec![0; config.read_chunk.max(1)];
        Tailer {
            config,
            streams: BTreeMap::new(),
            next_id: 0,
            polls: 0,
            totals: PollStats::default(),
            ended: Vec::new(),
            chunk,
            last_error: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TailConfig {
        &self.config
    }

    /// Finds new log files, follows rotations and truncations and calls `out` with each
    /// complete physical line (without `\n`) appended since the last poll.
    pub fn poll<F: FnMut(StreamId, &[u8])>(&mut self, out: &mut F) -> PollStats {
        self.polls += 1;
        let mut stats = PollStats::default();
        let start = if self.polls == 1 {
            self.config.start_at
        } else {
            StartAt::Beginning
        };
        for path in self.scan(&mut stats) {
            if !self.streams.contains_key(&path) {
                let id = StreamId(self.next_id);
                self.next_id += 1;
                self.streams.insert(path, Stream::new(id, start));
            }
        }
        let mut ctx = Ctx {
            poll: self.polls,
            max_line: self.config.max_line,
            chunk: &mut self.chunk,
            stats: &mut stats,
            last_error: &mut self.last_error,
        };
        let mut ended = Vec::new();
        for (path, stream) in &mut self.streams {
            if stream.poll(path, &mut ctx, out) {
                ended.push(path.clone());
            }
        }
        for path in ended {
            if let Some(stream) = self.streams.remove(&path) {
                stats.streams_ended += 1;
                self.ended.push((stream.id, path));
            }
        }
        self.totals += stats;
        stats
    }

    /// The sum of all polls' stats.
    pub fn totals(&self) -> PollStats {
        self.totals
    }

    /// The streams followed now, with their paths.
    pub fn streams(&self) -> impl Iterator<Item = (StreamId, &Path)> {
        self.streams.iter().map(|(p, s)| (s.id, p.as_path()))
    }

    /// The path of a stream that is followed now.
    pub fn stream_path(&self, id: StreamId) -> Option<&Path> {
        self.streams().find(|(s, _)| *s == id).map(|(_, p)| p)
    }

    /// Streams that ended since the last call (their files are gone and were drained), so
    /// the caller can finish and drop its per-stream state.
    pub fn take_ended(&mut self) -> Vec<(StreamId, PathBuf)> {
        std::mem::take(&mut self.ended)
    }

    /// The last IO error and the path it happened on, for logging.
    pub fn take_last_error(&mut self) -> Option<(PathBuf, io::Error)> {
        self.last_error.take()
    }

    /// The `N.log` files of the matching pod directories.
    fn scan(&mut self, stats: &mut PollStats) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut error = |path: &Path, e: io::Error| {
            stats.read_errors += 1;
            self.last_error = Some((path.to_owned(), e));
        };
        let root = &self.config.root;
        let pods = match fs::read_dir(root) {
            Ok(pods) => pods,
            Err(e) => {
                error(root, e);
                return found;
            }
        };
        for pod in pods {
            let pod = match pod {
                Ok(pod) => pod,
                Err(e) => {
                    error(root, e);
                    continue;
                }
            };
            let selected = pod
                .file_name()
                .to_str()
                .is_some_and(|name| self.config.pods.matches_dir_name(name));
            if !selected {
                continue;
            }
            let dir = pod.path().join(&self.config.container);
            let files = match fs::read_dir(&dir) {
                Ok(files) => files,
                // No container directory yet, or the pod went away meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => {
                    error(&dir, e);
                    continue;
                }
            };
            for file in files {
                let Ok(file) = file else { continue };
                let is_log = file.file_name().to_str().is_some_and(is_restart_log)
                    && file.file_type().is_ok_and(|t| !t.is_dir());
                if is_log {
                    found.push(file.path());
                }
            }
        }
        found
    }
}

/// `N.log` with a decimal restart count (not a rotated `0.log.<timestamp>[.gz]`).
fn is_restart_log(name: &str) -> bool {
    name.strip_suffix(".log")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
