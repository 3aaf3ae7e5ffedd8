//! The command line of `ne-leader` (docs/architecture.md, "Command lines": names here are a
//! contract).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::ingest::IngestLimits;

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
    /// Serve the agents' ingest stream, merge their edges, and write proposals.
    Run(Box<RunArgs>),
}

/// The data plane whose rules the leader learns by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    Cilium,
    Calico,
    Istio,
}

/// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The data plane whose rules edges are learned by.
    #[arg(long, value_enum, env = "NE_PROVIDER")]
    pub provider: ProviderArg,
    /// Where agents stream their edges to.
    #[arg(long, env = "NE_INGEST_ADDRESS", default_value = "0.0.0.0:9443")]
    pub ingest_address: std::net::SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "NE_METRICS_ADDRESS", default_value = "0.0.0.0:9090")]
    pub metrics_address: std::net::SocketAddr,
    /// Accept agent streams without authentication (development only; logged loudly).
    #[arg(long, env = "NE_INSECURE_INGEST")]
    pub insecure_ingest: bool,
    /// The agents' ServiceAccounts (`namespace:name`), whose tokens (audience
    /// `network-enforcer`, checked with TokenReview) may stream edges.
    #[arg(
        long,
        env = "NE_AGENT_SERVICE_ACCOUNTS",
        value_delimiter = ',',
        default_value = "network-enforcer:network-enforcer-agent"
    )]
    pub agent_service_accounts: Vec<String>,
    /// Lead without a Lease: one replica, no cluster needed, development only.
    #[arg(long, env = "NE_STANDALONE")]
    pub standalone: bool,
    /// Namespace of the election Lease (the release namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "network-enforcer")]
    pub lease_namespace: String,
    /// Name of the election Lease.
    #[arg(long, env = "NE_LEASE_NAME", default_value = "network-enforcer-leader")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: env `POD_NAME`, else the host name
    /// and the process id, so two local leaders never share one).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How often proposals are rebuilt from the merged edges.
    #[arg(long, env = "NE_FLUSH_INTERVAL", default_value = "1s", value_parser = ne_flow::time::parse_duration)]
    pub flush_interval: std::time::Duration,
    /// Most distinct edges the merged index holds; new edges beyond it are dropped and counted.
    #[arg(long, env = "NE_MAX_EDGES", default_value_t = 1_000_000)]
    pub max_edges: usize,
    /// Most agent streams open at once; more are refused (RESOURCE_EXHAUSTED).
    #[arg(long, env = "NE_MAX_AGENT_STREAMS", default_value_t = IngestLimits::default().max_streams)]
    pub max_agent_streams: usize,
    /// Most agent streams open at once from one address (an agent needs one, two while it
    /// reconnects).
    #[arg(long, env = "NE_MAX_AGENT_STREAMS_PER_ADDRESS", default_value_t = IngestLimits::default().max_streams_per_address)]
    pub max_agent_streams_per_address: usize,
    /// Most distinct agent ids the leader keeps (every agent seen since it started);
    /// streams of further agents are refused.
    #[arg(long, env = "NE_MAX_AGENTS", default_value_t = IngestLimits::default().max_agents)]
    pub max_agents: usize,
    /// Largest message accepted from an agent, in bytes: at least the agents'
    /// `--max-message-bytes`.
    #[arg(long, env = "NE_MAX_MESSAGE_BYTES", default_value_t = IngestLimits::default().max_message_bytes)]
    pub max_message_bytes: usize,
    /// Memory the per-stream tables of all agent streams may hold together, in bytes; a
    /// batch beyond it is rejected and its agent retries.
    #[arg(long, env = "NE_MAX_STREAM_TABLE_BYTES", default_value_t = IngestLimits::default().table_bytes)]
    pub max_stream_table_bytes: usize,
    /// Batch bytes per second each agent may send; past it (after its burst) its stream
    /// is paced, so no agent slows the others.
    #[arg(long, env = "NE_AGENT_BYTES_PER_SECOND", default_value_t = IngestLimits::default().agent_bytes_per_second)]
    pub agent_bytes_per_second: u64,
    /// Batch bytes an agent may send at once after a quiet spell (a snapshot after a
    /// reconnect).
    #[arg(long, env = "NE_AGENT_BURST_BYTES", default_value_t = IngestLimits::default().agent_burst_bytes)]
    pub agent_burst_bytes: u64,
    /// How long an ack may wait for an agent that does not read its stream; the stream
    /// then ends.
    #[arg(long, env = "NE_ACK_TIMEOUT", default_value = "30s", value_parser = ne_flow::time::parse_duration)]
    pub ack_timeout: std::time::Duration,
    /// Namespaces whose workloads get no proposals (they still appear as peers).
    #[arg(
        long,
        env = "NE_EXCLUDE_NAMESPACES",
        value_delimiter = ',',
        default_value = "kube-system"
    )]
    pub exclude_namespaces: Vec<String>,
    /// Also write the proposals, whenever they change, to this directory (one file each)
    /// or `-` (stdout). With `--standalone` (no cluster) this is where they go.
    #[arg(long, env = "NE_OUTPUT")]
    pub output: Option<String>,
    /// Label this replica's Pod `networkenforcer.kubewarden.io/leader=true` while it holds
    /// the Lease, for the leader-only Service agents connect to. Default: on when running in
    /// a pod (env `POD_NAME` and `POD_NAMESPACE` set) with a Lease.
    #[arg(long, env = "NE_LABEL_LEADER_POD")]
    pub label_leader_pod: Option<bool>,
    /// Do not write to the cluster (no proposals, policies or native objects): learn and
    /// serve ingest only. Implied by `--standalone`.
    #[arg(long, env = "NE_NO_CONTROLLER")]
    pub no_controller: bool,
    /// A proposal is `Stable` once no new peer or port was added for this long.
    #[arg(long, env = "NE_STABLE_AFTER", default_value = "10m", value_parser = ne_flow::time::parse_duration)]
    pub stable_after: std::time::Duration,
    /// A proposal's evidence that only moved (later last-seen, more flows) is written once it
    /// is this much newer; new peers, ports and conditions are written at once.
    #[arg(long, env = "NE_STATUS_REFRESH", default_value = "60s", value_parser = ne_flow::time::parse_duration)]
    pub status_refresh: std::time::Duration,
    /// Client-side limit of API writes per second (bursts up to `--api-write-burst`);
    /// writes over it wait for the next round.
    #[arg(long, env = "NE_API_WRITES_PER_SECOND", default_value_t = 20.0)]
    pub api_writes_per_second: f64,
    /// Largest burst of API writes.
    #[arg(long, env = "NE_API_WRITE_BURST", default_value_t = 50)]
    pub api_write_burst: u32,
    /// How long a deleted pod is remembered, so that edges of its lifetime keep resolving
    /// to it (agents keep an edge for up to an hour after its last flow).
    #[arg(long, env = "NE_POD_HISTORY_RETENTION", default_value = "90m", value_parser = ne_flow::time::parse_duration)]
    pub pod_history_retention: std::time::Duration,
    /// Most deleted pods remembered; the oldest are forgotten first (counted).
    #[arg(long, env = "NE_POD_HISTORY_MAX", default_value_t = 100_000)]
    pub pod_history_max: usize,
    /// Whether the data plane applies policies to a node's own traffic into its pods
    /// (kubelet probes): `allowed` (it lets it through, the default of Cilium, Calico and
    /// Istio ambient) or `enforced` (e.g. Cilium's host firewall). With `enforced`,
    /// `ProtectSafe` warns of an ingress policy whose workload learning saw reached from
    /// its node, which no rule can name.
    #[arg(long, value_enum, env = "NE_HOST_TRAFFIC", default_value_t = crate::controller::safety::HostTraffic::Allowed)]
    pub host_traffic: crate::controller::safety::HostTraffic,
    /// OpenTelemetry export: `otlp` sends metrics and violation log events to the
    /// collector the standard `OTEL_EXPORTER_OTLP_*` variables name (nothing when no
    /// endpoint is set); `none` sends nothing (`/metrics` is served either way).
    #[arg(long, value_enum, env = "NE_OTEL", default_value_t = OtelArg::Otlp)]
    pub otel: OtelArg,
}

/// Where OpenTelemetry data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OtelArg {
    /// OTLP, configured by the standard environment variables.
    Otlp,
    /// No export.
    None,
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
    /// The cluster during the capture, to resolve pods to workloads exactly as in a
    /// cluster; repeat it, oldest first, to give the capture's history. Each is a snapshot
    /// (`kubectl get namespaces,pods,replicasets,deployments,statefulsets,daemonsets,jobs,cronjobs -A -o yaml`,
    /// or `-o json`) or a watch stream (`kubectl get pods -A -w -o json`, with or without
    /// `--output-watch-events`).
    #[arg(long)]
    pub cluster: Vec<PathBuf>,
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

impl RunArgs {
    /// The ingest limits these flags give.
    pub fn ingest_limits(&self) -> IngestLimits {
        IngestLimits {
            max_streams: self.max_agent_streams,
            max_streams_per_address: self.max_agent_streams_per_address,
            max_agents: self.max_agents,
            max_message_bytes: self.max_message_bytes,
            ack_timeout: self.ack_timeout,
            table_bytes: self.max_stream_table_bytes,
            agent_bytes_per_second: self.agent_bytes_per_second,
            agent_burst_bytes: self.agent_burst_bytes,
            ..IngestLimits::default()
        }
    }
}
