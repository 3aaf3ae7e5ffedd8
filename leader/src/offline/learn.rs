//! `ne-leader learn`: captured flows in, one proposal per workload and direction out.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::bail;
use ne_crds::WorkloadNetworkPolicyProposal;
use ne_policy::allowlist::{LearnOptions, LearnSummary};
use serde::Serialize;

use super::report::{self, Table};
use super::{FileReport, Ingested, ingest, resolver};
use crate::cli::{LearnArgs, SummaryFormat};
use crate::{learning, output};

/// Everything `learn` found, before anything is written.
#[derive(Debug, Serialize)]
pub struct LearnReport {
    pub provider: &'static str,
    pub files: Vec<FileReport>,
    /// The cluster inputs (`--cluster`), oldest first.
    pub cluster: Vec<std::path::PathBuf>,
    /// Flows that made no edge, by reason.
    pub flows_without_edge: BTreeMap<&'static str, u64>,
    /// Edges dropped because the aggregation table was full.
    pub table_drops: u64,
    pub summary: LearnSummary,
    #[serde(skip)]
    pub proposals: Vec<WorkloadNetworkPolicyProposal>,
}

/// Learns proposals from the inputs `args` names. Pure apart from reading the inputs.
pub fn learn(args: &LearnArgs) -> anyhow::Result<LearnReport> {
    let resolver = resolver(&args.input.cluster)?;
    let Ingested {
        provider,
        edges,
        files,
        edge_skips,
        table_drops,
    } = ingest(&args.input, resolver.cluster())?;
    let options = LearnOptions {
        exclude_namespaces: args.exclude_namespaces.iter().cloned().collect(),
    };
    let learned = learning::learn(
        learning::snapshots(&edges),
        resolver.as_resolver(),
        provider,
        &options,
    );
    if let Some(first) = learned.unrendered.first() {
        bail!(
            "cannot render {} allow-list(s), the first: {first}",
            learned.unrendered.len()
        );
    }
    let (summary, proposals) = (learned.summary, learned.proposals);
    Ok(LearnReport {
        provider: provider.as_str(),
        files,
        cluster: args.input.cluster.clone(),
        flows_without_edge: edge_skips.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
        table_drops,
        summary,
        proposals,
    })
}

/// Runs `learn` and writes its output: proposals to `--output`, the summary to stderr.
pub fn run(args: &LearnArgs) -> anyhow::Result<()> {
    let report = learn(args)?;
    output::write_proposals(&report.proposals, &args.output)?;
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    match args.summary {
        SummaryFormat::Json => serde_json::to_writer_pretty(&mut err, &report)?,
        SummaryFormat::Table => write_summary(&mut err, &report)?,
    }
    writeln!(err)?;
    Ok(())
}

fn write_summary(out: &mut impl Write, report: &LearnReport) -> std::io::Result<()> {
    let s = &report.summary;
    writeln!(
        out,
        "learned {} proposals ({}) from {} flows in {} file(s)",
        report.proposals.len(),
        report.provider,
        report.files.iter().map(|f| f.records).sum::<u64>(),
        report.files.len()
    )?;
    let mut table = Table::new([
        "WORKLOAD",
        "DIRECTION",
        "PEERS",
        "PORTS",
        "FLOWS",
        "PROPOSAL",
    ]);
    for a in &s.allow_lists {
        table.row([
            a.subject.to_string(),
            a.direction.to_string(),
            a.rules.to_string(),
            a.ports.to_string(),
            a.flows.to_string(),
            if a.rules == 0 {
                "(none: no expressible peer)".to_owned()
            } else {
                a.name.clone()
            },
        ]);
    }
    table.write(out)?;
    report::counts(
        out,
        "flows without an edge",
        report
            .flows_without_edge
            .iter()
            .map(|(k, v)| (k.to_string(), *v)),
    )?;
    let unresolved = if report.cluster.is_empty() {
        "subjects not resolved (use --cluster)"
    } else {
        "subjects not resolved"
    };
    report::counts(
        out,
        unresolved,
        s.unresolved_subjects
            .iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)),
    )?;
    report::counts(
        out,
        "peers only, never subjects",
        s.not_a_subject
            .iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)),
    )?;
    report::counts(
        out,
        "excluded namespaces",
        [("flows".to_owned(), s.excluded.flows)],
    )?;
    report::counts(
        out,
        "peers that cannot be expressed",
        s.unresolved_peers
            .iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)),
    )?;
    report::counts(
        out,
        "unmanaged peers (host, node, apiserver: allow them by hand before protecting egress)",
        s.unmanaged_peers
            .iter()
            .map(|(k, t)| (k.as_str().to_owned(), t.flows)),
    )?;
    if report.table_drops > 0 {
        writeln!(
            out,
            "edges dropped (aggregation table full): {}",
            report.table_drops
        )?;
    }
    report::files(out, &report.files)?;
    let excluded: BTreeSet<_> = s
        .allow_lists
        .iter()
        .filter(|a| a.selector_conflict)
        .map(|a| a.name.as_str())
        .collect();
    for name in excluded {
        writeln!(
            out,
            "warning: {name}: pods of one workload carried different selectors; the smallest was used"
        )?;
    }
    Ok(())
}
