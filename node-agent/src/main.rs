//! `ne-agent`: the per-node flow agent (built out in the node-agent issue).

use clap::{Parser, ValueEnum};

/// Where the agent reads flows from.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Source {
    Hubble,
    Ztunnel,
    Goldmane,
    File,
}

/// Network Enforcer node agent: reads the node's flows from the data plane,
/// pre-aggregates them and ships deltas to the leader.
#[derive(Debug, Parser)]
#[command(name = "ne-agent", version)]
struct Args {
    /// Flow source.
    #[arg(long, value_enum)]
    source: Source,
    /// This node's name (from the downward API).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::bail!(
        "ne-agent --source {:?} is not available in this build yet; use `ne-leader learn` for offline learning",
        args.source
    )
}
