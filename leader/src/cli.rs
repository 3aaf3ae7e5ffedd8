//! The command line of `ne-leader` (ARCHITECTURE §7: names here are a contract).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Network Enforcer leader: merges the agents' flows into allow-lists, writes proposals,
/// checks violations and manages native policies. `learn` and `check` run offline on
/// captured flows.
#[derive(Debug, Parser)]
#[command(name = "ne-leader", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Learn proposals from captured flows and write them as YAML.
    Learn(LearnArgs),
    /// Evaluate captured flows against policies and print the would-be violations.
    Check(CheckArgs),
}

/// Input format of a flow file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// Detect per file from its first line.
    Auto,
    /// Cilium Hubble JSON (`hubble observe -o json|jsonpb`).
    HubbleJson,
    /// Istio ztunnel access logs (text or JSON, optional CRI framing).
    Ztunnel,
    /// Calico Goldmane / Whisker flow JSON.
    GoldmaneJson,
    /// Calico Felix flow logs (JSON lines).
    CalicoFlowlog,
}

/// What `learn` and `check` read.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Flow files to read.
    #[arg(long, short, required = true, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// Cluster snapshot (`kubectl get namespaces,pods,replicasets,deployments,statefulsets,daemonsets,jobs,cronjobs -A -o yaml`)
    /// to resolve pods to workloads exactly as in a cluster.
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// Input format.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    pub format: InputFormat,
    /// Fail on the first unreadable line instead of skipping and counting it.
    #[arg(long)]
    pub strict: bool,
}

/// Arguments of `learn`.
#[derive(Debug, Args)]
pub struct LearnArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// Directory to write one `<name>.yaml` per proposal into (`<namespace>.<name>.yaml` for a
    /// name that several namespaces share), or `-` for a YAML stream on stdout.
    #[arg(long, short, default_value = "-")]
    pub output: String,
    /// Namespaces whose workloads get no proposals (they still appear as peers).
    #[arg(long, value_delimiter = ',', default_value = "kube-system")]
    pub exclude_namespaces: Vec<String>,
    /// Summary format on stderr.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Table)]
    pub summary: SummaryFormat,
}

/// Arguments of `check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// A WorkloadNetworkPolicy / proposal YAML file, or a directory of them.
    #[arg(long, required = true)]
    pub policy: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = SummaryFormat::Table)]
    pub output: SummaryFormat,
    /// Exit with status 1 when there is any violation.
    #[arg(long)]
    pub fail_on_violation: bool,
}

/// How reports are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SummaryFormat {
    Table,
    Json,
}
