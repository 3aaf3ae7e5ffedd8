//! `ne-leader learn`: captured flows in, one proposal per workload and direction out.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use ne_crds::WorkloadNetworkPolicyProposal;
use ne_flow::edge::Provider;
use ne_policy::allowlist::{self, AggregatedEdge, LearnOptions, LearnSummary, Proposal};
use ne_policy::resolve::Resolver;
use serde::Serialize;

use super::report::{self, Table};
use super::{FileReport, Ingested, ingest, resolver};
use crate::cli::{LearnArgs, SummaryFormat};

/// Everything `learn` found, before anything is written.
#[derive(Debug, Serialize)]
pub struct LearnReport {
    pub provider: &'static str,
    pub files: Vec<FileReport>,
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
    let Ingested {
        provider,
        edges,
        files,
        edge_skips,
        table_drops,
    } = ingest(&args.input)?;
    let resolver = resolver(args.input.cluster.as_deref())?;
    let options = LearnOptions {
        exclude_namespaces: args.exclude_namespaces.iter().cloned().collect(),
    };
    let (summary, proposals) = proposals(
        edges.iter().map(|s| AggregatedEdge {
            edge: &s.edge,
            count: s.count,
            first_seen: s.first_seen,
            last_seen: s.last_seen,
        }),
        resolver.as_ref(),
        provider,
        &options,
    )?;
    Ok(LearnReport {
        provider: provider.as_str(),
        files,
        flows_without_edge: edge_skips.iter().map(|(k, v)| (k.as_str(), *v)).collect(),
        table_drops,
        summary,
        proposals,
    })
}

/// Learns the allow-lists of `edges` and renders them as proposals (with status): what
/// offline `learn` and the live leader write.
pub fn proposals<'a>(
    edges: impl IntoIterator<Item = AggregatedEdge<'a>>,
    resolver: &dyn Resolver,
    provider: Provider,
    options: &LearnOptions,
) -> anyhow::Result<(LearnSummary, Vec<WorkloadNetworkPolicyProposal>)> {
    let learned = allowlist::learn(edges, resolver, provider, options);
    let proposals = learned
        .allow_lists
        .iter()
        .map(|list| {
            allowlist::render_proposal(list)
                .map(Proposal::into_object_with_status)
                .with_context(|| {
                    format!(
                        "cannot render the allow-list of {} {}",
                        list.subject, list.direction
                    )
                })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((learned.summary, proposals))
}

/// Runs `learn` and writes its output: proposals to `--output`, the summary to stderr.
pub fn run(args: &LearnArgs) -> anyhow::Result<()> {
    let report = learn(args)?;
    write_proposals(&report.proposals, &args.output)?;
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    match args.summary {
        SummaryFormat::Json => serde_json::to_writer_pretty(&mut err, &report)?,
        SummaryFormat::Table => write_summary(&mut err, &report)?,
    }
    writeln!(err)?;
    Ok(())
}

/// YAML of proposals: one document each, separated by `---`.
pub fn to_yaml_stream(proposals: &[WorkloadNetworkPolicyProposal]) -> anyhow::Result<String> {
    let mut out = String::new();
    for p in proposals {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(p).context("cannot serialise a proposal as YAML")?);
    }
    Ok(out)
}

/// Writes proposals to `output`: a directory (one file each) or `-` (stdout).
pub fn write_proposals(
    proposals: &[WorkloadNetworkPolicyProposal],
    output: &str,
) -> anyhow::Result<()> {
    if output == "-" {
        std::io::stdout()
            .lock()
            .write_all(to_yaml_stream(proposals)?.as_bytes())?;
        return Ok(());
    }
    let dir = Path::new(output);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut namespaces_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for p in proposals {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        namespaces_of.entry(name).or_default().insert(namespace);
    }
    for p in proposals {
        let name = p
            .metadata
            .name
            .as_deref()
            .context("a proposal has no name")?;
        // Names are unique per namespace only: `deployment-api-ingress` may exist in two
        // namespaces. Those files get the namespace in front (a namespace has no dots),
        // so that neither overwrites the other.
        let file = match p.metadata.namespace.as_deref() {
            Some(ns) if namespaces_of.get(name).is_some_and(|s| s.len() > 1) => {
                format!("{ns}.{name}.yaml")
            }
            _ => format!("{name}.yaml"),
        };
        let path = dir.join(file);
        let yaml = serde_saphyr::to_string(p).context("cannot serialise a proposal as YAML")?;
        std::fs::write(&path, yaml).with_context(|| format!("cannot write {}", path.display()))?;
    }
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
    report::counts(
        out,
        "subjects not resolved (use --cluster)",
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
