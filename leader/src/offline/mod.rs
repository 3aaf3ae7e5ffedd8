//! Offline commands: `learn` and `check` run the leader's learning and policy logic on
//! captured flow files, without a cluster.
//!
//! Both share [`ingest`]: read each file, detect its format, decode it line by line
//! (counting what is skipped), derive edges and aggregate them in a [`FlowTable`], exactly
//! as the agent does live.

pub mod check;
pub mod learn;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ne_dataplanes::{DecodeStats, DetectError, Format, decode_lines_strict};
use ne_flow::edge::{EdgeSkip, Provider};
use ne_flow::table::{EdgeSnapshot, FlowTable};
use ne_policy::resolve::{ClusterSnapshot, RecordOnly, Resolver};
use serde::Serialize;

use crate::cli::{InputArgs, InputFormat};

/// Edges an offline run may hold; beyond this, new edges are dropped and counted.
const TABLE_CAPACITY: usize = 1 << 22;

/// What reading one input file produced.
#[derive(Debug, Serialize)]
pub struct FileReport {
    pub path: PathBuf,
    pub format: &'static str,
    pub records: u64,
    pub skipped: BTreeMap<&'static str, u64>,
    pub errors: u64,
    /// The first errors, as `line N: message`.
    pub first_errors: Vec<String>,
}

/// Everything read from the inputs, aggregated.
#[derive(Debug)]
pub struct Ingested {
    pub provider: Provider,
    pub edges: Vec<EdgeSnapshot>,
    pub files: Vec<FileReport>,
    /// Flows that made no edge, by reason.
    pub edge_skips: BTreeMap<EdgeSkip, u64>,
    /// New edges dropped because the table was full.
    pub table_drops: u64,
}

impl Ingested {
    /// Flows decoded across all files.
    pub fn records(&self) -> u64 {
        self.files.iter().map(|f| f.records).sum()
    }
}

/// Reads, decodes and aggregates every input file.
pub fn ingest(args: &InputArgs) -> anyhow::Result<Ingested> {
    let table = FlowTable::new(TABLE_CAPACITY);
    let mut files = Vec::with_capacity(args.input.len());
    let mut edge_skips = BTreeMap::new();
    let mut provider: Option<(Provider, &Path)> = None;
    for path in &args.input {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let format = resolve_format(args.format, path, &bytes)?;
        match provider {
            Some((p, first)) if p != format.provider() => bail!(
                "{} holds {} flows ({}) but {} holds {} flows: learn one provider per run",
                path.display(),
                format.provider().as_str(),
                format.as_str(),
                first.display(),
                p.as_str()
            ),
            _ => provider = Some((format.provider(), path)),
        }
        let stats = decode_file(path, format, &bytes, args.strict, |flow| {
            if let Err(skip) = table.record_flow(&flow, format.provider()) {
                *edge_skips.entry(skip).or_insert(0) += 1;
            }
        })?;
        files.push(file_report(path, format, &stats));
    }
    let Some((provider, _)) = provider else {
        bail!("no input files")
    };
    Ok(Ingested {
        provider,
        edges: table.snapshot(),
        files,
        edge_skips,
        table_drops: table.dropped(),
    })
}

/// The resolver `--cluster` asks for: a cluster snapshot, or only what records carry.
pub fn resolver(cluster: Option<&Path>) -> anyhow::Result<Box<dyn Resolver>> {
    Ok(match cluster {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read cluster snapshot {}", path.display()))?;
            let snapshot = ClusterSnapshot::from_yaml(&text)
                .with_context(|| format!("cluster snapshot {} is not usable", path.display()))?;
            Box::new(snapshot)
        }
        None => Box::new(RecordOnly),
    })
}

fn resolve_format(requested: InputFormat, path: &Path, bytes: &[u8]) -> anyhow::Result<Format> {
    Ok(match requested {
        InputFormat::HubbleJson => Format::HubbleJson,
        InputFormat::Ztunnel => Format::Ztunnel,
        InputFormat::GoldmaneJson => Format::GoldmaneJson,
        InputFormat::CalicoFlowlog => Format::CalicoFlowLog,
        InputFormat::Auto => Format::detect_input(bytes).map_err(|e| match e {
            DetectError::Empty => anyhow::anyhow!(
                "{}: the file is empty, so its format cannot be detected (give --format)",
                path.display()
            ),
            DetectError::Unknown { line } => anyhow::anyhow!(
                "{}:{line}: cannot detect the format from this line nor the next ones (give --format hubble-json|ztunnel|goldmane-json|calico-flowlog)",
                path.display()
            ),
        })?,
    })
}

/// Decodes one file line by line. Bad lines are counted, or fail the run under `strict`.
fn decode_file(
    path: &Path,
    format: Format,
    bytes: &[u8],
    strict: bool,
    on_record: impl FnMut(ne_flow::flow::FlowRecord),
) -> anyhow::Result<DecodeStats> {
    match decode_lines_strict(format, bytes, strict, on_record) {
        (stats, None) => Ok(stats),
        (_, Some(e)) => bail!(
            "{}:{}: {} (as {})",
            path.display(),
            e.line,
            e.error,
            format.as_str()
        ),
    }
}

fn file_report(path: &Path, format: Format, stats: &DecodeStats) -> FileReport {
    FileReport {
        path: path.to_owned(),
        format: format.as_str(),
        records: stats.records,
        skipped: stats
            .skipped
            .iter()
            .map(|(r, n)| (r.as_str(), *n))
            .collect(),
        errors: stats.errors,
        first_errors: stats
            .first_errors
            .iter()
            .map(|e| format!("{}:{}: {}", path.display(), e.line, e.error))
            .collect(),
    }
}
