//! Model-based test: random sequences of file operations against real files, checked
//! against a model of what a poller can see.
//!
//! The model keeps every file's bytes and, per file the tailer has open, the bytes the
//! tailer has consumed. At each poll it applies the documented contract of [`super`]:
//! files present at the first poll start at their end (skipping a cut line), later ones
//! at 0; a path naming a new file retires the old one, which is read until a poll after
//! its retirement finds nothing new; truncation is detected when the file is shorter than
//! the offset or the [`TRUNCATION_PROBE_LEN`] bytes before it changed, and reading
//! restarts at 0 (unread lines and a buffered fragment are lost); lines longer than
//! `max_line` are dropped. The model cuts lines byte by byte, independently of the
//! tailer's chunked reads.
//!
//! A second, coarser check needs no model of the tailer at all: for every stream without
//! truncation, cross-file fragments or files the tailer never had a chance to open, the
//! emitted lines are exactly the complete lines the writer wrote after the start (minus
//! the overlong ones), each once, in order.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::PathBuf;

use proptest::prelude::*;

use super::test_support::{Collected, TempRoot, append};
use super::*;

#[derive(Clone, Debug)]
enum Op {
    /// Finishes the stream's cut line, appends `lines` lines, then the first `frag` bytes
    /// of one more line (0: none). With `long`, the first line and the cut one are about
    /// `max_line` long (one byte under, at or over it).
    Write {
        file: usize,
        lines: usize,
        long: bool,
        frag: usize,
    },
    /// Kubelet rotation: rename to `N.log.<ts>`; the runtime creates the new file now or,
    /// without `recreate`, at the next write.
    Rotate {
        file: usize,
        recreate: bool,
    },
    /// The runtime's last lines, written to the file rotated away last.
    WriteOld {
        file: usize,
        lines: usize,
    },
    /// copytruncate: copy to `N.log.<ts>`, truncate in place.
    Truncate {
        file: usize,
    },
    /// The pod is gone: its log directory is removed.
    DeletePod {
        pod: usize,
    },
    /// A new pod with `0.log` (a ztunnel pod, or one the filter must ignore).
    AddPod {
        matching: bool,
        lines: usize,
    },
    /// A container restart: the next `N.log`.
    Restart {
        pod: usize,
        lines: usize,
    },
    Poll,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<usize>(), 0..4usize, prop::bool::weighted(0.1), prop_oneof![6 => Just(0usize), 1 => 1..40usize, 1 => 40..130usize])
            .prop_map(|(file, lines, long, frag)| Op::Write { file, lines, long, frag }),
        2 => (any::<usize>(), prop::bool::weighted(0.8)).prop_map(|(file, recreate)| Op::Rotate { file, recreate }),
        2 => (any::<usize>(), 1..3usize).prop_map(|(file, lines)| Op::WriteOld { file, lines }),
        2 => any::<usize>().prop_map(|file| Op::Truncate { file }),
        1 => any::<usize>().prop_map(|pod| Op::DeletePod { pod }),
        1 => (prop::bool::weighted(0.8), 0..3usize).prop_map(|(matching, lines)| Op::AddPod { matching, lines }),
        1 => (any::<usize>(), 0..3usize).prop_map(|(pod, lines)| Op::Restart { pod, lines }),
        6 => Just(Op::Poll),
    ]
}

/// One file (inode): its bytes and the tailer's view of it.
#[derive(Debug)]
struct File {
    content: Vec<u8>,
    disk: Option<PathBuf>,
    opened: bool,
    written_in_scope: bool,
    offset: usize,
    /// `content[..offset]` as read (the truncation probe compares against it).
    seen: Vec<u8>,
    /// The buffered line; `None` while discarding to the next `\n`.
    line: Option<Vec<u8>>,
}

/// One log path.
#[derive(Debug)]
struct Lineage {
    path: PathBuf,
    pod: usize,
    matching: bool,
    /// The file at the path now.
    disk: Option<usize>,
    /// Every file that was at the path, in order.
    files: Vec<usize>,
    rotated: Vec<usize>,
    rotations: u32,
    // The tailer's stream for the path.
    live: bool,
    had_file: bool,
    open: Option<usize>,
    draining: Vec<(usize, u64)>,
    expected: Vec<Vec<u8>>,
    // The writer's side.
    /// A line written up to `at` so far.
    rest: Option<Cut>,
    written: Vec<Vec<u8>>,
    /// The coarse check applies.
    simple: bool,
    /// `WriteOld` still keeps the writer's order (nothing new written since the rotation).
    old_writable: bool,
}

/// A line whose first `at` bytes went to `file`.
#[derive(Debug)]
struct Cut {
    line: Vec<u8>,
    at: usize,
    file: usize,
    /// Written after the start (or the tailer starts at the beginning).
    in_scope: bool,
}

#[derive(Debug)]
struct Pod {
    dir: PathBuf,
    matching: bool,
    alive: bool,
    restarts: u32,
}

#[derive(Debug)]
struct Model {
    root: PathBuf,
    start_at: StartAt,
    max_line: usize,
    files: Vec<File>,
    lineages: Vec<Lineage>,
    pods: Vec<Pod>,
    polls: u64,
    seq: u64,
    stats: PollStats,
}

impl Model {
    /// Lines written now are ones the tailer is to emit (after the start, or all of them
    /// when it starts at the beginning).
    fn in_scope(&self) -> bool {
        self.polls > 0 || self.start_at == StartAt::Beginning
    }

    /// A unique line of printable bytes, `len` long (at least 7).
    fn new_line(&mut self, len: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 -:=\t\"";
        self.seq += 1;
        let mut line = format!("{:06} ", self.seq).into_bytes();
        let mut x = self.seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        while line.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            line.push(ALPHABET[(x % ALPHABET.len() as u64) as usize]);
        }
        line
    }

    fn new_file(&mut self, path: PathBuf) -> usize {
        fs::write(&path, b"").unwrap();
        self.files.push(File {
            content: Vec::new(),
            disk: Some(path),
            opened: false,
            written_in_scope: false,
            offset: 0,
            seen: Vec::new(),
            line: Some(Vec::new()),
        });
        self.files.len() - 1
    }

    fn add_pod(&mut self, matching: bool) -> usize {
        let n = self.pods.len();
        let (ns, pod) = if matching {
            ("istio-system", format!("ztunnel-{n}"))
        } else {
            ("default", format!("web-{n}"))
        };
        let dir = self
            .root
            .join(format!("{ns}_{pod}_uid-{n}"))
            .join("istio-proxy");
        fs::create_dir_all(&dir).unwrap();
        self.pods.push(Pod {
            dir,
            matching,
            alive: true,
            restarts: 0,
        });
        self.add_lineage(n)
    }

    fn add_lineage(&mut self, pod: usize) -> usize {
        let restart = self.pods[pod].restarts;
        self.pods[pod].restarts += 1;
        let path = self.pods[pod].dir.join(format!("{restart}.log"));
        let file = self.new_file(path.clone());
        self.lineages.push(Lineage {
            path,
            pod,
            matching: self.pods[pod].matching,
            disk: Some(file),
            files: vec![file],
            rotated: Vec::new(),
            rotations: 0,
            live: false,
            had_file: false,
            open: None,
            draining: Vec::new(),
            expected: Vec::new(),
            rest: None,
            written: Vec::new(),
            simple: true,
            old_writable: false,
        });
        self.lineages.len() - 1
    }

    fn append_to(&mut self, file: usize, bytes: &[u8]) {
        let in_scope = self.in_scope();
        let f = &mut self.files[file];
        let path = f.disk.as_ref().expect("written files are on disk");
        append(path, bytes);
        f.content.extend_from_slice(bytes);
        f.written_in_scope |= in_scope && !bytes.is_empty();
    }

    /// Appends complete lines to `file` and logs them for the coarse check.
    fn write_lines(&mut self, l: usize, file: usize, lines: usize, long: bool) {
        for i in 0..lines {
            let len = if long && i == 0 {
                // Around the limit: one byte under, at it, and over it.
                self.max_line - 1 + (self.seq as usize % 20)
            } else {
                7 + (self.seq as usize * 7) % 34
            };
            let mut line = self.new_line(len);
            if len <= self.max_line && self.in_scope() {
                self.lineages[l].written.push(line.clone());
            }
            line.push(b'\n');
            self.append_to(file, &line);
        }
    }

    fn write(&mut self, l: usize, lines: usize, long: bool, frag: usize) {
        let file = match self.lineages[l].disk {
            Some(f) => f,
            None => {
                let f = self.new_file(self.lineages[l].path.clone());
                self.lineages[l].disk = Some(f);
                self.lineages[l].files.push(f);
                f
            }
        };
        self.lineages[l].old_writable = false;
        if let Some(cut) = self.lineages[l].rest.take() {
            let same_file = cut.file == file;
            self.lineages[l].simple &= same_file;
            let mut rest = cut.line[cut.at..].to_vec();
            rest.push(b'\n');
            self.append_to(file, &rest);
            if same_file && cut.in_scope && cut.line.len() <= self.max_line {
                self.lineages[l].written.push(cut.line);
            }
        }
        self.write_lines(l, file, lines, long);
        if frag > 0 {
            let len = if long {
                self.max_line - 1 + (self.seq as usize % 3)
            } else {
                7 + (self.seq as usize * 5) % 34
            };
            let line = self.new_line(len);
            // Up to the whole text: then only the `\n` is left.
            let at = frag.min(line.len());
            self.append_to(file, &line[..at]);
            let in_scope = self.in_scope();
            self.lineages[l].rest = Some(Cut {
                line,
                at,
                file,
                in_scope,
            });
        }
    }

    fn rotated_name(&self, l: usize) -> PathBuf {
        let lin = &self.lineages[l];
        let mut name = lin.path.clone().into_os_string();
        name.push(format!(".20260314-0926{:02}", lin.rotations));
        PathBuf::from(name)
    }

    fn apply(&mut self, op: &Op) {
        let alive: Vec<usize> = (0..self.lineages.len())
            .filter(|&l| self.pods[self.lineages[l].pod].alive)
            .collect();
        let pick = |i: &usize| (!alive.is_empty()).then(|| alive[i % alive.len()]);
        match op {
            Op::Write {
                file,
                lines,
                long,
                frag,
            } => {
                if let Some(l) = pick(file) {
                    self.write(l, *lines, *long, *frag);
                }
            }
            Op::Rotate { file, recreate } => {
                let Some(l) = pick(file) else { return };
                let Some(f) = self.lineages[l].disk.take() else {
                    return;
                };
                self.lineages[l].rotations += 1;
                let to = self.rotated_name(l);
                fs::rename(&self.lineages[l].path, &to).unwrap();
                self.files[f].disk = Some(to);
                self.lineages[l].rotated.push(f);
                self.lineages[l].old_writable = true;
                if *recreate {
                    let path = self.lineages[l].path.clone();
                    let f = self.new_file(path);
                    self.lineages[l].disk = Some(f);
                    self.lineages[l].files.push(f);
                }
            }
            Op::WriteOld { file, lines } => {
                let Some(l) = pick(file) else { return };
                let Some(&f) = self.lineages[l].rotated.last() else {
                    return;
                };
                if self.lineages[l].rest.is_some() {
                    return; // the runtime writes whole lines; the cut line is finished first
                }
                self.lineages[l].simple &= self.lineages[l].old_writable;
                self.write_lines(l, f, *lines, false);
            }
            Op::Truncate { file } => {
                let Some(l) = pick(file) else { return };
                let Some(f) = self.lineages[l].disk else {
                    return;
                };
                self.lineages[l].rotations += 1;
                let copy = self.rotated_name(l);
                fs::write(copy, &self.files[f].content).unwrap();
                let path = self.lineages[l].path.clone();
                OpenOptions::new()
                    .write(true)
                    .open(path)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
                self.files[f].content.clear();
                self.lineages[l].simple = false;
            }
            Op::DeletePod { pod } => {
                let live: Vec<usize> = (0..self.pods.len())
                    .filter(|&p| self.pods[p].alive)
                    .collect();
                if live.is_empty() {
                    return;
                }
                let p = live[pod % live.len()];
                fs::remove_dir_all(self.pods[p].dir.parent().unwrap()).unwrap();
                self.pods[p].alive = false;
                for lin in self.lineages.iter_mut().filter(|lin| lin.pod == p) {
                    lin.disk = None;
                }
                for f in &mut self.files {
                    if f.disk
                        .as_ref()
                        .is_some_and(|d| d.starts_with(&self.pods[p].dir))
                    {
                        f.disk = None;
                    }
                }
            }
            Op::AddPod { matching, lines } => {
                let l = self.add_pod(*matching);
                self.write(l, *lines, false, 0);
            }
            Op::Restart { pod, lines } => {
                let live: Vec<usize> = (0..self.pods.len())
                    .filter(|&p| self.pods[p].alive)
                    .collect();
                if live.is_empty() {
                    return;
                }
                let l = self.add_lineage(live[pod % live.len()]);
                self.write(l, *lines, false, 0);
            }
            Op::Poll => self.poll(),
        }
    }

    /// What the contract says one poll emits.
    fn poll(&mut self) {
        self.polls += 1;
        for l in 0..self.lineages.len() {
            self.lineages[l].old_writable = false;
            if !self.lineages[l].matching {
                continue;
            }
            if !self.lineages[l].live {
                if self.lineages[l].disk.is_none() {
                    continue;
                }
                self.lineages[l].live = true;
                self.lineages[l].had_file = false;
            }
            let disk = self.lineages[l].disk;
            if disk.is_some() && self.lineages[l].open != disk {
                if let Some(old) = self.lineages[l].open.take() {
                    self.lineages[l].draining.push((old, self.polls));
                }
                let f = disk.unwrap_or_default();
                self.open(f);
                self.stats.files_opened += 1;
                self.stats.rotations += u64::from(self.lineages[l].had_file);
                self.lineages[l].had_file = true;
                self.lineages[l].open = Some(f);
            } else if disk.is_none()
                && let Some(old) = self.lineages[l].open.take()
            {
                self.lineages[l].draining.push((old, self.polls));
            }
            let draining = std::mem::take(&mut self.lineages[l].draining);
            for (f, retired) in draining {
                let n = self.read(l, f);
                if n == 0 && retired < self.polls {
                    let fragment = self.files[f].line.as_ref().is_some_and(|b| !b.is_empty());
                    self.stats.unterminated_dropped += u64::from(fragment);
                } else {
                    self.lineages[l].draining.push((f, retired));
                }
            }
            if let Some(f) = self.lineages[l].open {
                self.read(l, f);
            }
            let lin = &mut self.lineages[l];
            if disk.is_none() && lin.open.is_none() && lin.draining.is_empty() {
                lin.live = false;
                self.stats.streams_ended += 1;
            }
        }
    }

    fn open(&mut self, f: usize) {
        let at_end = self.polls == 1 && self.start_at == StartAt::End;
        let file = &mut self.files[f];
        file.opened = true;
        file.offset = if at_end { file.content.len() } else { 0 };
        file.seen = file.content[..file.offset].to_vec();
        let cut = file.offset > 0 && file.content[file.offset - 1] != b'\n';
        file.line = (!cut).then(Vec::new);
    }

    fn read(&mut self, l: usize, f: usize) -> usize {
        let file = &mut self.files[f];
        let o = file.offset;
        let probe = o.min(TRUNCATION_PROBE_LEN);
        if file.content.len() < o || file.content[o - probe..o] != file.seen[o - probe..o] {
            self.stats.truncations += 1;
            let fragment = file.line.as_ref().is_some_and(|b| !b.is_empty());
            self.stats.unterminated_dropped += u64::from(fragment);
            file.offset = 0;
            file.seen.clear();
            file.line = Some(Vec::new());
        }
        let new = file.content[file.offset..].to_vec();
        for &b in &new {
            match (&mut file.line, b) {
                (None, b'\n') => file.line = Some(Vec::new()),
                (None, _) => {}
                (Some(line), b'\n') => {
                    self.lineages[l].expected.push(std::mem::take(line));
                    self.stats.lines += 1;
                }
                (Some(line), _) => {
                    line.push(b);
                    if line.len() > self.max_line {
                        self.stats.overlong_dropped += 1;
                        file.line = None;
                    }
                }
            }
        }
        file.seen.extend_from_slice(&new);
        file.offset = file.content.len();
        self.stats.bytes += new.len() as u64;
        new.len()
    }
}

fn run(prefix: &[Op], ops: &[Op], start_at: StartAt, max_line: usize, chunk: usize) -> PollStats {
    let root = TempRoot::new();
    let mut model = Model {
        root: root.path().to_owned(),
        start_at,
        max_line,
        files: Vec::new(),
        lineages: Vec::new(),
        pods: Vec::new(),
        polls: 0,
        seq: 0,
        stats: PollStats::default(),
    };
    let mut tailer = Tailer::new(TailConfig {
        root: root.path().to_owned(),
        start_at,
        max_line,
        read_chunk: chunk,
        ..TailConfig::default()
    });
    let mut got = Collected::default();
    model.apply(&Op::AddPod {
        matching: true,
        lines: 2,
    });
    for op in prefix
        .iter()
        .chain([&Op::Poll])
        .chain(ops)
        .chain([&Op::Poll, &Op::Poll])
    {
        model.apply(op);
        if matches!(op, Op::Poll) {
            got.poll(&mut tailer);
        }
    }

    let expected: BTreeMap<PathBuf, Vec<Vec<u8>>> = model
        .lineages
        .iter()
        .filter(|l| !l.expected.is_empty())
        .map(|l| (l.path.clone(), l.expected.clone()))
        .collect();
    assert_eq!(got.by_path, expected, "emitted lines per path");
    assert_eq!(tailer.totals(), model.stats, "counters");

    for lin in model.lineages.iter().filter(|l| l.matching) {
        let unopened = lin.files.iter().any(|&f| {
            let f = &model.files[f];
            f.written_in_scope && !f.opened
        });
        if lin.simple && !unopened {
            let emitted = got.by_path.get(&lin.path).cloned().unwrap_or_default();
            assert_eq!(emitted, lin.written, "coarse check for {:?}", lin.path);
        }
    }
    tailer.totals()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn tailer_matches_the_model(
        prefix in prop::collection::vec(op().prop_filter("no poll before the start", |o| !matches!(o, Op::Poll)), 0..6),
        ops in prop::collection::vec(op(), 1..40),
        beginning in prop::bool::weighted(0.2),
        max_line in 48..120usize,
        chunk in prop_oneof![1..16usize, 16..200usize, Just(DEFAULT_READ_CHUNK)],
    ) {
        let start_at = if beginning { StartAt::Beginning } else { StartAt::End };
        run(&prefix, &ops, start_at, max_line, chunk);
    }
}

/// A fixed sequence through every operation, so each branch of the model is exercised
/// whatever the random cases draw.
#[test]
fn a_scripted_sequence_matches_the_model() {
    let write = |file, lines, long, frag| Op::Write {
        file,
        lines,
        long,
        frag,
    };
    let prefix = [write(0, 2, false, 5)];
    let ops = [
        write(0, 1, false, 0), // finishes the line cut at the start: skipped
        Op::Poll,
        Op::Rotate {
            file: 0,
            recreate: true,
        },
        Op::WriteOld { file: 0, lines: 2 },
        write(0, 1, false, 3),
        Op::Poll,
        write(0, 1, true, 0),
        Op::Poll,
        Op::Truncate { file: 0 },
        write(0, 2, false, 0),
        Op::Poll,
        Op::AddPod {
            matching: true,
            lines: 2,
        },
        Op::AddPod {
            matching: false,
            lines: 2,
        },
        Op::Restart { pod: 0, lines: 1 },
        Op::Poll,
        // Renamed and not re-created for two polls: the stream ends; the new file starts a
        // new stream.
        Op::Rotate {
            file: 1,
            recreate: false,
        },
        Op::Poll,
        Op::Poll,
        write(1, 1, false, 0),
        Op::Poll,
        Op::DeletePod { pod: 0 },
        Op::Poll,
    ];
    let totals = run(&prefix, &ops, StartAt::End, 60, 7);
    assert_eq!(totals.truncations, 1);
    assert_eq!(totals.overlong_dropped, 1);
    assert_eq!(
        totals.rotations, 1,
        "the path re-created after its stream ended is a new stream"
    );
    assert_eq!(
        totals.streams_ended, 3,
        "pod 1's renamed path, then 0.log and 1.log of pod 0"
    );
    assert_eq!(totals.read_errors, 0);
}
