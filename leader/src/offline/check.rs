//! `ne-leader check`: which captured flows would the given policies not allow?
//!
//! Flows are aggregated into edges exactly as for `learn`; each edge's subject is resolved
//! to its workload and the policy for that workload and direction is found by its
//! `targetRef` and `direction` (never by comparing selectors). The edge is then evaluated
//! with real NetworkPolicy or Istio semantics ([`ne_policy::eval`]).
//!
//! Two cases are not violations: flows a policy cannot restrict, and, for
//! NetworkPolicy, ingress from the subject's own node (kubelet probes), which every
//! implementation allows whatever the policy says. A policy that checked no flow at all
//! is reported, so that a typo in its `targetRef` does not read as "no violations".

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ne_crds::{
    Backend, PolicyDirection, TargetKind, WorkloadNetworkPolicy, WorkloadNetworkPolicyProposal,
    WorkloadNetworkPolicySpec,
};
use ne_flow::flow::{Direction, EndpointId, Timestamp};
use ne_flow::time::format_rfc3339;
use ne_policy::eval::{Decision, PolicyRef};
use ne_policy::resolve::{Resolution, Seen};
use serde::Serialize;

use super::report::{self, Table};
use super::{FileReport, ingest, resolver};
use crate::attribution::{Target, TargetKey, Targeted, Targets, subject_workload, workload_key};
use crate::cli::{CheckArgs, SummaryFormat};

/// A policy read from a file: a wnp, or a proposal checked as if promoted to monitor.
#[derive(Debug)]
pub struct LoadedPolicy {
    pub file: PathBuf,
    pub namespace: String,
    pub name: String,
    pub spec: WorkloadNetworkPolicySpec,
}

/// One would-be violation: flows of one (source, destination, protocol, port) a policy
/// does not allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// `namespace/name` of the policy.
    pub policy: String,
    pub direction: &'static str,
    pub source: String,
    pub destination: String,
    pub protocol: &'static str,
    pub port: u16,
    /// Why no rule allows it: `NoRuleForPeer`, `PortNotAllowed` or `ProtocolNotAllowed`.
    pub reason: &'static str,
    pub count: u64,
    pub first_seen: String,
    pub last_seen: String,
    /// The policy has an invalid part that was treated as matching nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub invalid_policy_part: bool,
}

/// What `check` found.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub policies: usize,
    pub violations: Vec<Violation>,
    /// Flows (aggregated) that a policy covers and allows.
    pub allowed_flows: u64,
    /// Flows whose subject workload and direction no given policy covers.
    pub unchecked_flows: u64,
    /// Flows whose subject is not a Deployment, StatefulSet or DaemonSet, or not resolved.
    pub unattributed_flows: u64,
    /// Of those, flows whose subject's owner is not known (`--cluster` may resolve them).
    pub unresolved_subject_flows: u64,
    /// Ingress flows from the subject's own node (kubelet probes) under a NetworkPolicy:
    /// implementations always allow them, so they are never violations.
    pub node_local_flows: u64,
    /// Flows under a NetworkPolicy whose peer could not be resolved at the flow's time
    /// (by reason, as in `learn`'s summary): whether the policy allows them cannot be
    /// told, so they are not reported as violations.
    pub unresolved_peer_flows: BTreeMap<&'static str, u64>,
    /// Policies that checked no flow: their target was not seen, or not in their direction.
    pub idle_policies: Vec<IdlePolicy>,
    pub files: Vec<FileReport>,
}

/// A policy no flow was evaluated against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IdlePolicy {
    /// `namespace/name` of the policy.
    pub policy: String,
    pub file: PathBuf,
    /// `Kind/name` of its `targetRef`.
    pub target_ref: String,
    pub direction: &'static str,
    /// Whether the target workload appears in the flows at all (as subject or peer). When
    /// it does not, the `targetRef` may well be a typo.
    pub workload_seen: bool,
}

impl Targeted for LoadedPolicy {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn spec(&self) -> PolicyRef<'_> {
        PolicyRef::from(&self.spec)
    }

    fn target(&self) -> TargetKey {
        (
            self.namespace.clone(),
            self.spec.target_ref.kind,
            self.spec.target_ref.name.clone(),
            self.spec.direction,
        )
    }
}

/// Evaluates the inputs against the policies. Pure apart from reading files.
pub fn check(args: &CheckArgs) -> anyhow::Result<CheckReport> {
    let policies = load_policies(&args.policy)?;
    let index = Targets::new(&policies).map_err(|(other, p)| {
        anyhow::anyhow!(
            "{}/{} ({}) and {}/{} ({}) target the same workload and direction",
            other.namespace,
            other.name,
            other.file.display(),
            p.namespace,
            p.name,
            p.file.display()
        )
    })?;
    let resolvers = resolver(&args.input.cluster)?;
    let ingested = ingest(&args.input, resolvers.cluster())?;
    let resolver = resolvers.as_resolver();
    let mut found: BTreeMap<(String, String, String, &'static str, u16, &'static str), Violation> =
        BTreeMap::new();
    let (mut allowed_flows, mut unchecked_flows, mut unattributed_flows) = (0, 0, 0);
    let (mut node_local_flows, mut unresolved_subject_flows) = (0, 0);
    let mut unresolved_peer_flows = BTreeMap::new();
    // Workloads the flows name (subjects and peers), and the policies that checked a flow.
    let mut seen: BTreeSet<(String, TargetKind, String)> = BTreeSet::new();
    let mut used: BTreeSet<TargetKey> = BTreeSet::new();
    for snap in &ingested.edges {
        let edge = &snap.edge;
        let when = Seen::between(snap.first_seen, snap.last_seen);
        let (subject, target) = index.attribute(edge, when, resolver);
        let peer = resolver.resolve_shared(&edge.peer, when);
        if let Some(owner) = subject_workload(&peer) {
            seen.insert(workload_key(owner));
        }
        if let Some(owner) = subject_workload(&subject) {
            seen.insert(workload_key(owner));
        }
        let covered = match target {
            Target::NotASubject => {
                unattributed_flows += snap.count;
                if !matches!(&*subject, Resolution::Pod(p) if p.owner.is_some()) {
                    unresolved_subject_flows += snap.count;
                }
                continue;
            }
            Target::Uncovered(_) => {
                unchecked_flows += snap.count;
                continue;
            }
            Target::Policy(key, covered) => {
                used.insert(key);
                covered
            }
        };
        let policy = covered.policy;
        // Istio policies match peers by principal, which the record carries.
        if let (Resolution::Unresolved(why), Backend::Kubernetes) = (&*peer, policy.spec().backend)
        {
            *unresolved_peer_flows.entry(why.as_str()).or_default() += snap.count;
            continue;
        }
        let decision = covered
            .decide(edge, &subject, &peer)
            .with_context(|| format!("cannot evaluate {}/{}", policy.namespace, policy.name))?;
        let (reason, invalid_skipped) = match decision {
            Decision::Denied {
                reason,
                invalid_skipped,
            } => (reason, invalid_skipped),
            Decision::NodeLocal => {
                node_local_flows += snap.count;
                continue;
            }
            Decision::NotRestricted | Decision::Allowed { .. } => {
                allowed_flows += snap.count;
                continue;
            }
        };
        let (local, remote) = (
            describe(&edge.subject, &subject),
            describe(&edge.peer, &peer),
        );
        let (source, destination) = match edge.direction {
            Direction::Egress => (local, remote),
            Direction::Ingress => (remote, local),
        };
        let policy_name = format!("{}/{}", policy.namespace, policy.name);
        let key = (
            policy_name.clone(),
            source.clone(),
            destination.clone(),
            edge.protocol.as_str(),
            edge.port,
            edge.direction.as_str(),
        );
        let v = found.entry(key).or_insert_with(|| Violation {
            policy: policy_name,
            direction: edge.direction.as_str(),
            source,
            destination,
            protocol: edge.protocol.as_str(),
            port: edge.port,
            reason: reason.as_str(),
            count: 0,
            first_seen: String::new(),
            last_seen: String::new(),
            invalid_policy_part: invalid_skipped,
        });
        merge_seen(v, snap.count, snap.first_seen, snap.last_seen);
    }
    let idle_policies = index
        .iter()
        .filter(|(key, _)| !used.contains(*key))
        .map(|((namespace, kind, name, direction), p)| IdlePolicy {
            policy: format!("{}/{}", p.namespace, p.name),
            file: p.file.clone(),
            target_ref: format!("{}/{name}", target_kind_str(*kind)),
            direction: direction_str(*direction),
            workload_seen: seen.contains(&(namespace.clone(), *kind, name.clone())),
        })
        .collect();
    Ok(CheckReport {
        policies: policies.len(),
        violations: found.into_values().collect(),
        allowed_flows,
        unchecked_flows,
        unattributed_flows,
        unresolved_subject_flows,
        node_local_flows,
        unresolved_peer_flows,
        idle_policies,
        files: ingested.files,
    })
}

/// Runs `check`, prints the report on stdout and says whether to fail.
pub fn run(args: &CheckArgs) -> anyhow::Result<bool> {
    let report = check(args)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.output {
        SummaryFormat::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            writeln!(out)?;
        }
        SummaryFormat::Table => write_table(&mut out, &report)?,
    }
    Ok(args.fail_on_violation && !report.violations.is_empty())
}

fn write_table(out: &mut impl Write, report: &CheckReport) -> std::io::Result<()> {
    let mut table = Table::new([
        "POLICY",
        "DIRECTION",
        "SOURCE",
        "DESTINATION",
        "PROTOCOL",
        "PORT",
        "REASON",
        "COUNT",
        "FIRST SEEN",
        "LAST SEEN",
    ]);
    for v in &report.violations {
        table.row([
            v.policy.clone()
                + if v.invalid_policy_part {
                    " (invalid part)"
                } else {
                    ""
                },
            v.direction.to_owned(),
            v.source.clone(),
            v.destination.clone(),
            v.protocol.to_owned(),
            v.port.to_string(),
            v.reason.to_owned(),
            v.count.to_string(),
            v.first_seen.clone(),
            v.last_seen.clone(),
        ]);
    }
    writeln!(
        out,
        "{} violation(s) against {} policies",
        report.violations.len(),
        report.policies
    )?;
    if !report.violations.is_empty() {
        table.write(out)?;
    }
    report::counts(
        out,
        "flows",
        [
            ("allowed".to_owned(), report.allowed_flows),
            ("not covered by a policy".to_owned(), report.unchecked_flows),
            (
                "without a subject workload".to_owned(),
                report.unattributed_flows,
            ),
            (
                "from the subject's own node (always allowed)".to_owned(),
                report.node_local_flows,
            ),
        ],
    )?;
    report::counts(
        out,
        "flows whose peer is not resolved at their time (not checked)",
        report
            .unresolved_peer_flows
            .iter()
            .map(|(why, n)| ((*why).to_owned(), *n)),
    )?;
    for idle in &report.idle_policies {
        let why = if idle.workload_seen {
            format!("no {} flows of its target were seen", idle.direction)
        } else if report.unresolved_subject_flows > 0 {
            "it matches no workload seen in the flows (some flows have no resolved workload: use --cluster)".to_owned()
        } else {
            "it matches no workload seen in the flows".to_owned()
        };
        writeln!(
            out,
            "note: {} ({}): targetRef {} checked nothing: {why}",
            idle.policy,
            idle.file.display(),
            idle.target_ref,
        )?;
    }
    report::files(out, &report.files)
}

fn merge_seen(v: &mut Violation, count: u64, first: Timestamp, last: Timestamp) {
    let (first, last) = (format_rfc3339(first), format_rfc3339(last));
    if v.count == 0 || first < v.first_seen {
        v.first_seen = first;
    }
    if v.count == 0 || last > v.last_seen {
        v.last_seen = last;
    }
    v.count += count;
}

fn target_kind_str(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Deployment => "Deployment",
        TargetKind::StatefulSet => "StatefulSet",
        TargetKind::DaemonSet => "DaemonSet",
    }
}

fn direction_str(direction: PolicyDirection) -> &'static str {
    match direction {
        PolicyDirection::Ingress => "Ingress",
        PolicyDirection::Egress => "Egress",
    }
}

/// A human name for an endpoint: its workload when resolved, else what the record says.
fn describe(endpoint: &ne_flow::flow::Endpoint, res: &Resolution) -> String {
    let base = match (res, &endpoint.id) {
        (Resolution::Pod(p), _) if p.owner.is_some() => p
            .owner
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
        (_, EndpointId::External(ip)) => ip.to_string(),
        (_, id) => id.to_string(),
    };
    match &endpoint.identity {
        Some(identity) => format!("{base} ({identity})"),
        None => base,
    }
}

/// Reads every policy document of the given files and directories (`*.yaml`, `*.yml`).
pub fn load_policies(paths: &[PathBuf]) -> anyhow::Result<Vec<LoadedPolicy>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut in_dir: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot list {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
                .collect();
            in_dir.sort();
            files.extend(in_dir);
        } else {
            files.push(path.clone());
        }
    }
    let mut policies = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        policies.extend(parse_policies(&file, &text)?);
    }
    if policies.is_empty() {
        bail!(
            "no WorkloadNetworkPolicy or WorkloadNetworkPolicyProposal found in {}",
            display_paths(paths)
        );
    }
    Ok(policies)
}

fn display_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses the policy documents of one file; other kinds are ignored.
pub fn parse_policies(file: &Path, text: &str) -> anyhow::Result<Vec<LoadedPolicy>> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(text)
        .with_context(|| format!("{}: not valid YAML", file.display()))?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let at = || format!("{} (document {})", file.display(), i + 1);
        let (namespace, name, spec) = match doc.get("kind").and_then(|k| k.as_str()) {
            Some("WorkloadNetworkPolicy") => {
                let p: WorkloadNetworkPolicy = serde_json::from_value(doc)
                    .with_context(|| format!("{}: invalid WorkloadNetworkPolicy", at()))?;
                (p.metadata.namespace, p.metadata.name, p.spec)
            }
            Some("WorkloadNetworkPolicyProposal") => {
                let p: WorkloadNetworkPolicyProposal = serde_json::from_value(doc)
                    .with_context(|| format!("{}: invalid WorkloadNetworkPolicyProposal", at()))?;
                let spec = p.spec.promoted(ne_crds::Mode::Monitor);
                (p.metadata.namespace, p.metadata.name, spec)
            }
            _ => continue,
        };
        let namespace =
            namespace.with_context(|| format!("{}: metadata.namespace is required", at()))?;
        let name = name.with_context(|| format!("{}: metadata.name is required", at()))?;
        out.push(LoadedPolicy {
            file: file.to_owned(),
            namespace,
            name,
            spec,
        });
    }
    Ok(out)
}
