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

/// Reads, decodes and aggregates every input file. With the cluster's history, an
/// endpoint known only by its address is first pinned to the pod that held the address at
/// the record's time, so that an edge never mixes two holders.
pub fn ingest(args: &InputArgs, cluster: Option<&ClusterSnapshot>) -> anyhow::Result<Ingested> {
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
        let stats = decode_file(path, format, &bytes, args.strict, |mut flow| {
            if let Some(cluster) = cluster {
                cluster.pin(&mut flow.source, flow.time);
                cluster.pin(&mut flow.destination, flow.time);
            }
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

/// The resolver `--cluster` asks for: the cluster's history from every input given, or
/// only what records carry.
pub fn resolver(cluster: &[PathBuf]) -> anyhow::Result<Resolvers> {
    if cluster.is_empty() {
        return Ok(Resolvers::RecordOnly);
    }
    let texts = cluster
        .iter()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read cluster input {}", path.display()))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let snapshot =
        ClusterSnapshot::from_inputs(texts.iter().map(String::as_str)).map_err(|(i, e)| {
            anyhow::Error::new(e).context(format!(
                "cluster input {} is not usable",
                cluster[i].display()
            ))
        })?;
    Ok(Resolvers::Cluster(Box::new(snapshot)))
}

/// The resolver of an offline run.
#[derive(Debug)]
pub enum Resolvers {
    /// What the records carry, nothing more (no `--cluster`).
    RecordOnly,
    /// The cluster's history.
    Cluster(Box<ClusterSnapshot>),
}

impl Resolvers {
    pub fn as_resolver(&self) -> &dyn Resolver {
        match self {
            Resolvers::RecordOnly => &RecordOnly,
            Resolvers::Cluster(snapshot) => snapshot.as_ref(),
        }
    }

    /// The cluster history, when one was given.
    pub fn cluster(&self) -> Option<&ClusterSnapshot> {
        match self {
            Resolvers::RecordOnly => None,
            Resolvers::Cluster(snapshot) => Some(snapshot),
        }
    }
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
