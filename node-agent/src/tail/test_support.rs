//! Real files in a temporary directory for the tailer tests.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{PollStats, StartAt, StreamId, TailConfig, Tailer};

/// A unique directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempRoot(PathBuf);

impl TempRoot {
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ne-tail-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        TempRoot(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Creates `<root>/<ns>_<pod>_<uid>/<container>/` and returns it.
    pub fn container_dir(&self, ns: &str, pod: &str, uid: &str, container: &str) -> PathBuf {
        let dir = self.0.join(format!("{ns}_{pod}_{uid}")).join(container);
        fs::create_dir_all(&dir).expect("create container dir");
        dir
    }

    /// A ztunnel container directory (`istio-system_ztunnel-<suffix>_uid-<suffix>`).
    pub fn ztunnel_dir(&self, suffix: &str) -> PathBuf {
        self.container_dir(
            "istio-system",
            &format!("ztunnel-{suffix}"),
            &format!("uid-{suffix}"),
            "istio-proxy",
        )
    }

    /// A tailer over this root with small limits.
    pub fn tailer(&self, start_at: StartAt) -> Tailer {
        Tailer::new(TailConfig {
            root: self.0.clone(),
            start_at,
            ..TailConfig::default()
        })
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Appends `bytes` to `path`, creating it.
pub fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open for append");
    f.write_all(bytes).expect("append");
}

/// Lines emitted by a tailer, per stream path.
#[derive(Debug, Default)]
pub struct Collected {
    pub by_path: BTreeMap<PathBuf, Vec<Vec<u8>>>,
    /// Every (stream, path) pair seen, so a path's id can be checked.
    pub ids: BTreeMap<StreamId, PathBuf>,
}

impl Collected {
    /// Polls once and files the lines under their stream's path.
    pub fn poll(&mut self, tailer: &mut Tailer) -> PollStats {
        let mut lines: Vec<(StreamId, Vec<u8>)> = Vec::new();
        let stats = tailer.poll(&mut |id, line| lines.push((id, line.to_vec())));
        for (id, path) in tailer.streams() {
            self.ids.insert(id, path.to_owned());
        }
        for (id, path) in tailer.take_ended() {
            self.ids.insert(id, path);
        }
        for (id, line) in lines {
            let path = self
                .ids
                .get(&id)
                .expect("emitting stream has a path")
                .clone();
            self.by_path.entry(path).or_default().push(line);
        }
        stats
    }

    /// The lines of `path` as strings.
    pub fn lines(&self, path: &Path) -> Vec<String> {
        self.by_path
            .get(path)
            .map(|ls| {
                ls.iter()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}
